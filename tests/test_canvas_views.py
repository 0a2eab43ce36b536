"""LoopViT's predictions for the vote (eval.arc.canvas_views): every copy of a test input through
random canvas views, decoded, encoded in the copy's frame; the one vote undoes the copies."""

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from arc_data.arc.build import BuildConfig, build
from arc_data.originals import load_aug_table
from eval.arc.canvas_views import predict_views
from eval.arc.vote import vote
from eval.predictions import Predictions
from hrm_deeploop.data.batches import open_dataset
from hrm_deeploop.data.canvas import BORDER
from tests.arc_synth import write_kaggle

TEST_INPUT = [[1, 2], [3, 4], [5, 0]]  # 3 x 2, no symmetry: a copy undone wrongly is another grid


class Echo(torch.nn.Module):
    """A stand-in model that predicts each input grid as its output: the input's cells, then the
    border (11) in the column right of them and the row below."""

    def __init__(self, size: int):
        super().__init__()
        self.cfg = SimpleNamespace(image_size=size)

    def forward(self, canvas, task_ids, mask):
        out = canvas.long().clone()
        for b in range(len(out)):
            ys, xs = torch.nonzero(mask[b], as_tuple=True)
            y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
            out[b, y0:y1, x1] = BORDER
            out[b, y1, x0:x1 + 1] = BORDER
        return SimpleNamespace(logits=F.one_hot(out, 12).float())


def test_every_view_decodes_and_the_vote_undoes_every_copy(tmp_path):
    task = {"train": [{"input": [[1, 1]], "output": [[2, 2]]}], "test": [{"input": TEST_INPUT}]}
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {"t": task}, solutions=False)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "data"), test_labels="optional", num_aug=5,
                      seed=0, progress=False))
    split = open_dataset(tmp_path / "data", "test")
    n, passes = int(split.num_examples), 4
    table = load_aug_table(tmp_path / "data")
    rows = predict_views(Echo(16), split, torch.device("cpu"), batch=4, passes=passes, seed=0, dihedral=table.dihedral)
    assert n == 6 and len(rows["predictions"]) == n * passes
    # pass after pass, each over the split in order (the official order)
    assert (rows["inputs"] == np.tile(split.examples(np.arange(n))[0], (passes, 1))).all()
    scales, corners = rows["views"][:, 0], rows["views"][:, 1:]
    assert scales.max() > 1 and (corners > 1).any()  # random scale and translation were drawn
    p = Predictions(rows["puzzle_identifiers"], rows["inputs"], rows["predictions"], rows["q_halt"])
    t = vote(p, tmp_path / "data").tasks[0].tests[0]
    assert len(t.candidates) == 1 and t.candidates[0].votes == n * passes
    assert t.candidates[0].grid.tolist() == TEST_INPUT


REFERENCE = Path(os.environ.get("LOOPVIT_REFERENCE",
                                Path(__file__).resolve().parents[1] / "benchmarks/out/loopvit-reference"))


@pytest.mark.skipif(not (REFERENCE / "utils/eval_utils_ttt.py").is_file(),
                    reason="no checkout of WenjieShu/LoopViT at LOOPVIT_REFERENCE (not shipped; docs/loopvit.md)")
def test_predictions_and_vote_match_the_official_test_time_prediction(capsys):
    """compare_reference_ttt_vote.py: the official 51 views x 10 passes, every prediction before the
    vote, the vote and the attempts as the official `generate_predictions` and `get_majority_vote`."""
    pytest.importorskip("tqdm")
    from benchmarks import compare_reference_ttt_vote

    rc = compare_reference_ttt_vote.main(["--reference", str(REFERENCE), "--passes", "4", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("{}") == 2 and out.count(" yes ") >= 2
