"""The product of experts on LoopViT canvases (eval.arc.poe.canvas_table, evaluate poe=true through
eval.arc.canvas_views): a candidate's log-likelihood from a row's table is the pixel sum of the
canvas target the loss trains on, and a hand-built case where the two rules disagree."""

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from arc_data.arc.build import BuildConfig, build
from arc_data.originals import load_aug_table
from eval.arc.canvas_views import predict_views
from eval.arc.poe import canvas_log_likelihood, canvas_table
from eval.arc.vote import vote
from eval.predictions import Predictions
from hrm_deeploop.data.batches import open_dataset
from hrm_deeploop.data.canvas import BORDER
from hrm_deeploop.pertask.official_ttt import candidate_log_likelihood
from hrm_deeploop.pertask.official_views import OfficialView
from tests.arc_synth import write_kaggle

TEST_INPUT = [[1, 2], [3, 4], [5, 0]]


def test_the_table_gives_the_pixel_sum_of_the_canvas_target():
    """Against `official_ttt.candidate_log_likelihood` (the target built pixel by pixel, `views=official`),
    on random log-probabilities, scales, corners and candidates, some reaching off the canvas."""
    rng = np.random.default_rng(0)
    identity = OfficialView("t", 0, None, [], [])
    for _ in range(40):
        S = int(rng.choice([16, 32]))
        lp = torch.log_softmax(torch.from_numpy(rng.normal(size=(S, S, 12))), -1).numpy()
        s = int(rng.integers(1, 7))
        x0, y0 = (int(v) for v in rng.integers(1, S - 2, size=2))
        g = rng.integers(0, 10, size=tuple(rng.integers(1, 9, size=2)))
        want = candidate_log_likelihood({"at": (s, x0, y0), "log_probs": lp}, g.tolist(), identity, S)
        assert abs(canvas_log_likelihood(canvas_table(lp, s, x0, y0), g) - want) < 1e-6 * max(1.0, abs(want))


class Split(torch.nn.Module):
    """A stand-in model: on the first `confident` calls (passes) the answer B, sure of it; on the
    others the input echoed (A), barely preferred to B."""

    def __init__(self, size: int, confident: int):
        super().__init__()
        self.cfg, self.calls, self.confident = SimpleNamespace(image_size=size), 0, confident

    def forward(self, canvas, task_ids, mask):
        a = canvas.long().clone()
        for b in range(len(a)):
            ys, xs = torch.nonzero(mask[b], as_tuple=True)
            y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
            a[b, y0:y1, x1] = BORDER
            a[b, y1, x0:x1 + 1] = BORDER
        inside = (a < 10) & (mask > 0)
        bb = torch.where(inside, (a + 1) % 10, a)  # B: every colour of the input shifted by one
        sure = self.calls < self.confident
        self.calls += 1
        top, second = (bb, a) if sure else (a, bb)
        logits = F.one_hot(top, 12).float() * (20.0 if sure else 1.0) + F.one_hot(second, 12).float() * 0.9
        return SimpleNamespace(logits=logits)


def test_product_of_experts_and_count_first_disagree_on_canvases(tmp_path):
    """One pass sure of B, three barely preferring A: count-first ranks A (3 votes) first, the
    product of experts B (A is nearly impossible under the sure pass, B nearly as likely as A
    under the others)."""
    task = {"train": [{"input": [[1, 1]], "output": [[2, 2]]}], "test": [{"input": TEST_INPUT}]}
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {"t": task}, solutions=False)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "data"), test_labels="optional", num_aug=0,
                      seed=0, progress=False))
    split = open_dataset(tmp_path / "data", "test")
    table = load_aug_table(tmp_path / "data")
    rows = predict_views(Split(16, confident=1), split, torch.device("cpu"), batch=8, passes=4, seed=0,
                         dihedral=table.dihedral, log_probs=True)
    assert rows["log_probs"].shape == (4, 961, 13) and rows["log_probs"].dtype == np.float16
    p = Predictions(rows["puzzle_identifiers"], rows["inputs"], rows["predictions"], rows["q_halt"])
    r = vote(p, tmp_path / "data", log_probs=rows["log_probs"])
    A, B = TEST_INPUT, ((np.asarray(TEST_INPUT) + 1) % 10).tolist()
    count, prod = r.tasks[0].tests[0].candidates, r.poe.tasks[0].tests[0].candidates
    assert [c.grid.tolist() for c in count[:2]] == [A, B] and [c.votes for c in count[:2]] == [3, 1]
    assert [np.asarray(c.grid).tolist() for c in prod[:2]] == [B, A] and prod[0].log_lik > prod[1].log_lik
    one = predict_views(Split(16, confident=0), split, torch.device("cpu"), batch=8, passes=4, seed=0,
                        dihedral=table.dihedral, log_probs=True)
    p = Predictions(one["puzzle_identifiers"], one["inputs"], one["predictions"], one["q_halt"])
    agree = vote(p, tmp_path / "data", log_probs=one["log_probs"])
    assert np.asarray(agree.poe.tasks[0].tests[0].candidates[0].grid).tolist() == A  # no sure pass: A both ways


def test_evaluate_poe_on_a_loopvit_run_writes_both_rankings(tmp_path):
    """`evaluate poe=true` on a train-vit checkpoint: log_probs.npy holds the canvas tables, and the
    vote writes poe.json and submission_poe.json beside the count-first outputs."""
    import json

    from hrm_deeploop.cli import run_subcommand

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}, {"input": [[3, 3]], "output": [[3, 3]]}],
            "test": [{"input": TEST_INPUT}]}
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {"t": task}, solutions=False)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "data"), test_labels="optional", num_aug=2,
                      seed=0, progress=False))
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "train.progress=false", "optim.warmup_steps=1",
                                        "train.global_batch_size=4", "train.epochs_per_iter=2", "train.max_steps=2",
                                        f"data_dir={tmp_path / 'data'}",
                                        f"output_dir={tmp_path / 'vit'}"]) == 0
    out = tmp_path / "eval"
    assert run_subcommand("evaluate", [f"checkpoint={tmp_path / 'vit'}", f"data_dir={tmp_path / 'data'}",
                                       f"output_dir={out}", f"challenges={chal}", "progress=false", "poe=true",
                                       "passes=2", "global_batch_size=4", "device=cpu"]) == 0
    lp = np.load(out / "log_probs.npy")
    assert lp.shape == (3 * 2, 961, 13)  # (the test input + 2 copies) x 2 passes
    poe = json.loads((out / "poe.json").read_text())["tasks"]["t"][0]["candidates"]
    scored = [c["log_lik"] for c in poe if c["grid"]]  # the empty candidate (no grid) is not scored, ranked last
    assert scored and None not in scored and scored == sorted(scored, reverse=True)
    assert set(json.loads((out / "submission_poe.json").read_text())) == {"t"}
    # the reasoners' ACT depth is refused for LoopViT (it was accepted and did nothing; new-user audit)
    assert run_subcommand("evaluate", [f"checkpoint={tmp_path / 'vit'}", f"data_dir={tmp_path / 'data'}",
                                       f"output_dir={tmp_path / 'deeper'}", "halt_max_steps=8", "progress=false",
                                       "device=cpu"]) == 2
    assert not (tmp_path / "deeper").exists()
