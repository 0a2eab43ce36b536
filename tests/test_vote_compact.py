"""The vote reads ground truth from both dataset layouts (materialised and compact) identically."""

import numpy as np

from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import open_split
from eval.arc.vote import vote
from eval.predictions import load_predictions, save_predictions
from tests.arc_synth import synthetic_tasks, write_layout


def test_vote_same_on_compact_and_materialised(tmp_path):
    src = write_layout(tmp_path / "src", synthetic_tasks(seed=3))
    dirs = {}
    for materialize in (True, False):
        out = tmp_path / f"ds_{materialize}"
        build(BuildConfig(sources=[str(src)], output_dir=str(out), num_aug=3, seed=1,
                          materialize=materialize, progress=False))
        dirs[materialize] = out
    split = open_split(dirs[True], "test")
    idx = np.arange(split.num_examples)
    inputs, labels = split.examples(idx)
    pids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int32)
    preds = labels.copy()
    puzzle_of_row = np.repeat(np.arange(len(split.puzzle_identifiers)), np.diff(split.puzzle_indices))
    wrong = puzzle_of_row % 2 == 1  # every other augmented copy predicts its input instead
    preds[wrong] = inputs[wrong]
    path = save_predictions(tmp_path / "p.npz", pids, inputs, preds, np.zeros(len(idx), np.float32))
    results = [vote(load_predictions(path), dirs[m]) for m in (True, False)]
    assert results[0].scores == results[1].scores
    assert results[0].scores["hrm"]["1000"] == 100.0
