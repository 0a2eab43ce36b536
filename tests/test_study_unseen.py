"""benchmarks/study_unseen.py: the own-pairs count of a pretrained model (protocol p), and the
LoopViT arm of the study run end to end at its smallest size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import open_split
from benchmarks import study_unseen
from eval.predictions import save_predictions
from tests.arc_synth import write_layout

TASKS = {  # two training tasks: their every pair (test pair included) lands in the train split
    "aa": {"train": [{"input": [[1, 2]], "output": [[2, 1]]}, {"input": [[3]], "output": [[4]]}],
           "test": [{"input": [[5, 6], [7, 8]], "output": [[8, 7], [6, 5]]}]},
    "bb": {"train": [{"input": [[1]], "output": [[1, 1]]}], "test": [{"input": [[2]], "output": [[2, 2]]}]},
}


def _dataset(tmp_path):
    write_layout(tmp_path / "raw", {"training": TASKS})
    build(BuildConfig(sources=[str(tmp_path / "raw")], output_dir=str(tmp_path / "data"), num_aug=2, seed=0,
                      progress=False))
    split = open_split(tmp_path / "data", "train")
    n = int(split.num_examples)
    x, y = split.examples(np.arange(n))
    pids = np.asarray(split.puzzle_identifiers)[np.searchsorted(np.asarray(split.puzzle_indices), np.arange(n),
                                                                side="right") - 1]
    names = json.loads((tmp_path / "data" / "identifiers.json").read_text())
    return x, y, pids, names


def _write(folder, pids, x, rows):
    folder.mkdir(parents=True, exist_ok=True)
    save_predictions(folder / "predictions.npz", np.asarray(pids, np.int32), x, rows, np.zeros(len(rows), np.float32))


def test_own_pairs_votes_each_pair_over_its_passes_and_solves_a_task_when_all_its_pairs_are_right(tmp_path):
    x, y, pids, names = _dataset(tmp_path)
    base = [i for i, p in enumerate(pids) if "_t" not in names[p]]
    assert len(base) == 5  # aa's three pairs, bb's two
    # every prediction right, twice over (two passes): every pair, every copy, both tasks
    _write(tmp_path / "all", np.concatenate([pids, pids]), np.concatenate([x, x]), np.concatenate([y, y]))
    got = study_unseen.own_pairs(tmp_path / "all", tmp_path / "data")
    assert got == {"pairs": "5/5", "copies": 100.0, "solved": ["aa", "bb"], "tasks": 2}
    # one un-augmented pair of aa wrong in two passes of three (the majority), another wrong in one pass
    # of three (outvoted): aa is no longer solved, bb is; a wrong copy counts in `copies` only
    a1, a2 = [i for i in base if names[pids[i]] == "aa"][:2]
    copy = next(i for i, p in enumerate(pids) if "_t" in names[p])
    wrong = np.full_like(y[0], 0)  # a PAD row: no grid
    passes = [y.copy(), y.copy(), y.copy()]
    passes[0][a1], passes[1][a1] = wrong, wrong
    passes[2][a2] = wrong
    for p in passes:
        p[copy] = wrong
    _write(tmp_path / "some", np.concatenate([pids] * 3), np.concatenate([x] * 3), np.concatenate(passes))
    got = study_unseen.own_pairs(tmp_path / "some", tmp_path / "data")
    assert got["pairs"] == "4/5" and got["solved"] == ["bb"]
    assert abs(got["copies"] - 100 * (len(y) - 2) / len(y)) < 1e-9


@pytest.mark.slow  # .ci/run runs it after the suite (the default suite under 10 minutes)
def test_the_loopvit_arm_runs_at_its_smallest_size(tmp_path, capsys):
    """--quick: 3 pretraining tasks, 2 unseen, 4 steps; own pairs and no adaptation, then in a second
    call (the pretrained run reused, the results added to) the joint fine-tune and ttt, each scored."""
    out = tmp_path / "study"
    args = ["--out", str(out), "--model", "loopvit", "--quick", "--passes", "1"]
    assert study_unseen.main([*args, "--protocols", "pa"]) == 0
    capsys.readouterr()
    assert study_unseen.main([*args, "--protocols", "ce"]) == 0
    assert "pretrain:" not in capsys.readouterr().out  # the finished pretraining run is reused
    run = json.loads((out / "results_loopvit.json").read_text())["runs"]["0"]
    assert set(run) >= {"p", "a", "c", "e", "timing"} and run["p"]["tasks"] == 3
    assert all(0.0 <= run[k]["pass@2"] <= 100.0 and 0.0 <= run[k]["cell@1"] <= 100.0 for k in "ace")
    summary = json.loads((out / "loopvit_s0" / "e" / "ttt_summary.json").read_text())
    assert summary["protocol"] == "strict" and summary["model"] == "loopvit"
    with pytest.raises(SystemExit, match="adapted whole"):
        study_unseen.main([*args, "--protocols", "b"])
