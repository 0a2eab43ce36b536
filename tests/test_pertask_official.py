"""`ttt views=official` (hrm_deeploop/pertask/official_*.py): the official LoopViT views, schedule,
un-augmentation, vote and product-of-experts ranking on canvases, end to end on a tiny official
file; and the side-by-side check with the official code when a checkout is at LOOPVIT_REFERENCE."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from arc_data import format as fmt
from hrm_deeploop.data.canvas import View, place
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask.official_ttt import score_task, vote
from hrm_deeploop.pertask.official_views import (
    build_views,
    epoch_lr_factor,
    inverse_map,
    recolour,
    unaugment,
)

REFERENCE = Path(os.environ.get("LOOPVIT_REFERENCE",
                                Path(__file__).resolve().parents[1] / "benchmarks/out/loopvit-reference"))
TASK = {"train": [{"input": [[1, 2, 0], [3, 3, 0]], "output": [[2, 1], [0, 3], [0, 3]]},
                  {"input": [[4, 0], [0, 4]], "output": [[0, 4], [4, 0]]}],
        "test": [{"input": [[1, 4], [2, 3]]}, {"input": [[7, 7, 1]]}]}


def test_fifty_one_views_in_the_official_token_order():
    views = build_views("abcd1234", TASK, file_index=3)
    names = [v.name for v in views]
    assert len(views) == 51 and names == sorted(names, key=lambda n: n + ".json") and names[0] == "abcd1234"
    assert views[0].colour_map is None and {v.dihedral for v in views} == {0, 1, 2, 3, 4, 5}  # no transposes
    assert sum(n.endswith("_perm9_augmented") for n in names) == 5 and "abcd1234_flip_0_augmented" in names
    used = {1, 2, 3, 4}  # the demonstrations' and the first test input's colours (7: only the second test input's)
    for v in views[1:]:
        cmap = v.colour_map
        assert cmap[0] == 0 and len({cmap.get(c, c) for c in used}) == len(used)  # 0 kept, the task's colours apart
        i, o = (np.asarray(TASK["train"][0][k]) for k in ("input", "output"))
        assert np.array_equal(v.train[0][0], recolour(fmt.dihedral(i, v.dihedral), cmap))
        assert np.array_equal(v.train[0][1], recolour(fmt.dihedral(o, v.dihedral), cmap))
    perms = [v.colour_map for v in views if "_perm" in v.name]
    assert len({json.dumps(m) for m in perms}) > 20  # drawn, not one map
    again = build_views("abcd1234", TASK, file_index=3)
    other = build_views("abcd1234", TASK, file_index=4)
    assert [v.colour_map for v in again] == [v.colour_map for v in views]  # seeded by the file index alone
    assert [v.colour_map for v in other] != [v.colour_map for v in views]
    assert len(build_views("abcd1234", TASK, 0, perms=1)) == 11


def test_the_learning_rate_is_set_per_epoch_with_the_first_and_last_at_zero():
    f = [epoch_lr_factor(e, 100) for e in range(101)]
    assert f[0] == 0 and f[5] == 0.5 and f[10] == 1 and f[100] == 0 and f[55] == pytest.approx(0.5)
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert epoch_lr_factor(0, 4) == 1  # under 5 epochs: no warm-up (min(epochs // 5, 10) = 0)


def test_a_prediction_is_cropped_then_un_rotated_down_scaled_and_recoloured():
    views = build_views("abcd1234", TASK, file_index=0, perms=1)
    v = next(x for x in views if x.name.endswith("rotate_90_perm1_augmented"))
    g = np.array([[1, 2, 5], [3, 4, 4]])
    seen = fmt.dihedral(recolour(g, v.colour_map), v.dihedral)  # the answer as the view shows it
    assert seen[0, 0] != 0
    _, _, target = place(np.zeros((1, 1), np.uint8), seen.astype(np.uint8), 16, View(2, 3, 1))
    assert unaugment(target, 2, 3, 1, v) == g.tolist()
    target[1, 3] = 9  # one pixel of the corner's 2 x 2 block wrong: the majority keeps the cell
    assert unaugment(target, 2, 3, 1, v) == g.tolist()
    target[1, 4] = 0  # two of four 0 (the other two the cell's colour): a tie, to the lower, 0
    target[1, 3] = 0
    tied = seen.copy()
    tied[0, 0] = 0
    assert unaugment(target, 2, 3, 1, v) == recolour(fmt.inverse_dihedral(tied, v.dihedral),
                                                     inverse_map(v.colour_map)).tolist()
    assert unaugment(np.full((16, 16), 11), 1, 3, 1, v) == []  # a border at the corner: an empty grid


def test_the_vote_counts_then_keeps_the_first_seen():
    a, b, c = [[1]], [[2]], [[3, 3]]
    assert vote([b, a, a, c, b, c]) == [(b, 2), (a, 2), (c, 2)]
    assert vote([a, b, b]) == [(b, 2), (a, 1)]


def _records(views, grids, confident):
    """Predictions over `views` (task frame grids `grids`), each with canvas log-probs that give
    the answer `confident` probability 0.9 per pixel, the rest spread evenly."""
    recs = []
    for k, g in enumerate(grids):
        v = views[k % len(views)]
        shown = fmt.dihedral(recolour(np.asarray(confident), v.colour_map) if v.colour_map else np.asarray(confident),
                             v.dihedral)
        _, _, target = place(np.zeros((1, 1), np.uint8), shown.astype(np.uint8), 16, View(1, 2, 2))
        lp = np.full((16, 16, 12), np.log(0.1 / 11))
        np.put_along_axis(lp, target[..., None].astype(np.int64), np.log(0.9), -1)
        recs.append({"test": 0, "view": k % len(views), "at": (1, 2, 2), "grid": g, "log_probs": lp.astype(np.float16)})
    return recs


def test_product_of_experts_and_count_first_disagree():
    """Three predictions say A, two say B, but every prediction's canvas puts B's pixels (and its
    border) most likely: count-first ranks A first, the product of experts B."""
    views = build_views("abcd1234", TASK, file_index=0, perms=1)
    A, B = [[1, 1], [1, 1]], [[2, 3], [4, 2]]
    task = {"train": TASK["train"], "test": [{"input": [[9]]}]}
    r = score_task(_records(views, [A, A, A, B, B], confident=B), views, task, 16, poe=True)
    assert r["ranked"][0] == [A, B] and r["votes"][0] == [3, 2]
    assert r["ranked_poe"][0] == [B, A] and r["log_lik"][0][0] > r["log_lik"][0][1]
    assert r["attempts"][0] == {"attempt_1": A, "attempt_2": B}
    assert r["attempts_poe"][0] == {"attempt_1": B, "attempt_2": A}
    same = score_task(_records(views, [A, A, A, B, B], confident=A), views, task, 16, poe=True)
    assert same["ranked_poe"][0] == [A, B]  # where the likelihood agrees with the votes, so do the rules
    one = score_task(_records(views, [A], confident=A), views, task, 16, poe=False)
    assert one["attempts"][0] == {"attempt_1": A, "attempt_2": [[9]]} and "ranked_poe" not in one  # filled: the input


def test_views_official_refuses_the_options_of_the_other_loop():
    from hrm_deeploop.pertask.ttt_config import PerTaskConfig, PerTaskOfficial

    with pytest.raises(UserError, match="views=official"):
        PerTaskConfig(views="official", leave_one_out=True)
    with pytest.raises(UserError, match="official.batch"):
        PerTaskConfig(views="official", official=PerTaskOfficial(batch=0))
    with pytest.raises(UserError, match="views"):
        PerTaskConfig(views="varc")


def test_ttt_views_official_end_to_end(tmp_path):
    """A tiny official LoopViT file, two tasks: each its 6 views (no permutation), two runs, the
    attempts of both rules merged and scored; a rerun finds every task finished."""
    from hrm_deeploop.cli import run_subcommand
    from tests.arc_synth import write_kaggle
    from tests.test_pertask import _tasks
    from tests.test_train_vit import _official_file

    _official_file(tmp_path / "loop_vit_base.pt", "vanilla", num_tasks=400)
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(1, 2, "new"), solutions=True)
    sol = str(chal).replace("_challenges", "_solutions")
    out = tmp_path / "o"
    args = [f"checkpoint={tmp_path / 'loop_vit_base.pt'}", f"challenges={chal}", f"output_dir={out}", "views=official",
            "official.epochs=1", "official.perms=0", "passes=2", "workers=1", "threads=1", "device=cpu",
            "progress=false", "protocol=transductive"]
    assert run_subcommand("ttt", [*args, f"solutions={sol}"]) == 0
    summary = json.loads((out / "ttt_summary.json").read_text())
    assert summary["model"] == "loopvit" and summary["status"] == {"trained": 2}
    assert list(summary["scores"]) == ["count-first", "poe"] and (out / "submission_poe.json").is_file()
    r = json.loads((out / "tasks" / "new00" / "result.json").read_text())
    assert r["views"] == "official" and len(r["runs"]) == 2 and r["steps"] == 2 * 2 * 2  # 2 runs x 2 epochs x 2 batches
    assert set(r["attempts"][0]) == {"attempt_1", "attempt_2"} and len(r["attempts_poe"]) == 1
    assert run_subcommand("ttt", args) == 0  # resumed: nothing left to run
    assert run_subcommand("ttt", [*args, "official.runs=1"]) == 2  # other settings: refused


@pytest.mark.skipif(not (REFERENCE / "test_time_train_ARC.py").is_file(),
                    reason="no checkout of WenjieShu/LoopViT at LOOPVIT_REFERENCE (not shipped; docs/loopvit.md)")
def test_official_ttt_side_by_side_is_bit_identical(capsys):
    """compare_reference_ttt.py at its smallest: the same 51 views, learning rates, losses and weights
    (bit-identical), predictions before the vote, votes and attempts as the official loop."""
    pytest.importorskip("einops")
    pytest.importorskip("tqdm")
    from benchmarks import compare_reference_ttt

    rc = compare_reference_ttt.main(["--reference", str(REFERENCE), "--epochs", "1", "--passes", "1", "--tests", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "identical (name, train pairs, test inputs, colour map in order): 51  ok" in out
    assert out.count("learning rates identical") == 2 and "losses max rel diff 0 " in out and out.strip().endswith("# ok")


def test_a_run_stops_at_its_deadline_and_still_predicts():
    """A deadline already passed: each run stops after its first step, and the task is still
    predicted and voted (the budget's clean stop)."""
    import time

    import torch

    from hrm_deeploop.models.loopvit import LoopViT
    from hrm_deeploop.models.loopvit_config import flavour
    from hrm_deeploop.pertask.official_ttt import run_task

    views = build_views("abcd1234", TASK, file_index=0, perms=0)
    torch.manual_seed(0)
    model = LoopViT(flavour("tiny", num_tasks=len(views)))
    r = run_task(model, views, TASK, epochs=100, batch=8, lr=3e-4, runs=2, passes=1, pool=True, poe=True, seed=0,
                 device=torch.device("cpu"), deadline=time.monotonic())
    assert [(x["steps"], x["stopped"]) for x in r["runs"]] == [(1, True), (1, True)]
    assert len(r["attempts"]) == len(r["attempts_poe"]) == 2  # both test inputs answered by both rules
    assert all(sum(v) <= 2 * 6 for v in r["votes"])  # per test input: 2 runs x 6 views x 1 pass at most


def test_the_fit_stops_a_run_after_e_epochs_in_a_row():
    from hrm_deeploop.pertask.official_ttt import Fit

    def stops(per_epoch, stop_after, share=1.0):
        fit = Fit(stop_after, share)
        out = []
        for exact in per_epoch:
            fit.add(exact, 6)
            fit.add(0, 4)  # an epoch of two batches: 6 + 4 rows
            out.append(fit.end_epoch())
        return out
    assert stops([6, 6, 4, 6, 6], 2) == [False, False, False, False, False]  # never every one of the 10 rows
    assert stops([6, 6, 4, 6, 6], 2, share=0.6) == [False, True, False, False, True]
    assert stops([6, 5, 6, 6, 6], 3, share=0.6) == [False, False, False, False, True]  # E in a row
    assert stops([6, 6], 0, share=0.0) == [False, False]  # 0: off
    fit = Fit(1, 1.0)
    fit.add(3, 3)
    assert fit.end_epoch() and fit.log("fit") == {"stop": "fit", "rows": 3, "exact": [3]}


def test_exact_rows_are_rows_right_on_every_cell_the_loss_sees():
    import torch

    from hrm_deeploop.pertask.official_ttt import exact_rows

    target = torch.full((3, 4, 4), 10)  # IGNORE everywhere but the output and border
    target[:, 1, 1], target[:, 1, 2], target[:, 2, 1:3] = 4, 11, 11
    logits = torch.nn.functional.one_hot(target, 12).float()
    logits[0, 0, 0] = torch.nn.functional.one_hot(torch.tensor(3), 12) * 5  # an ignored cell wrong: still exact
    logits[1, 1, 1] = torch.nn.functional.one_hot(torch.tensor(3), 12) * 5  # an output cell wrong
    logits[2, 2, 2] = torch.nn.functional.one_hot(torch.tensor(0), 12) * 5  # a border cell wrong
    assert int(exact_rows(logits, target)) == 1


def test_a_lone_run_stops_once_its_fit_held_and_records_why():
    """train_run on a batch whose targets are the model's own predictions (dropout 0, learning
    rate 0: every row exact every epoch): stop_after=2 ends it after epochs 0 and 1 of 0..5, off it
    runs the schedule; a target half wrong never fits unless stop_share allows half, but its
    predictions are stable (stop_fit=stable: the same grids as the epoch before)."""
    import torch

    from hrm_deeploop.models.loopvit import LoopViT
    from hrm_deeploop.models.loopvit_config import flavour
    from hrm_deeploop.pertask.official_ttt import train_batches, train_run

    torch.manual_seed(0)
    model = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, dropout=0.0))
    views = build_views("abcd1234", TASK, file_index=0, perms=0)
    b = next(iter(train_batches(views, 16, 8, np.random.default_rng(0))(0)))
    with torch.no_grad():
        pred = model(b["canvas"], b["task_ids"], b["mask"]).logits.argmax(-1)
    own = dict(b, target=torch.where(b["target"] == 10, b["target"], pred))
    half = dict(own, target=torch.cat([own["target"][:4], b["target"][4:]]))
    cpu = torch.device("cpu")

    def run(batch, **kw):
        r = train_run(model, lambda epoch: [batch], 5, 0.0, cpu, **kw)
        return r["epochs"], r["stop"], r["exact"], len(r["losses"])
    assert run(own, stop_after=2) == (2, "fit", [8, 8], 2)
    assert run(own) == (6, "schedule", [8] * 6, 6)
    assert run(half, stop_after=2) == (6, "schedule", [4] * 6, 6)
    assert run(half, stop_after=2, stop_share=0.5) == (2, "fit", [4, 4], 2)
    assert run(own, stop_after=2, deadline=0.0)[:2] == (1, "deadline")  # the deadline first: no epoch judged
    r = train_run(model, lambda epoch: [half], 5, 0.0, cpu, stop_after=2, stop_fit="stable")
    assert (r["epochs"], r["stop"], r["same"]) == (3, "fit", [0, 8, 8])  # unchanged grids: stable from epoch 1


def test_early_stop_settings_are_checked():
    from hrm_deeploop.pertask.ttt_config import PerTaskConfig, PerTaskOfficial

    with pytest.raises(UserError, match="official.stop_after"):
        PerTaskConfig(views="official", official=PerTaskOfficial(stop_after=-1))
    with pytest.raises(UserError, match="official.stop_fit"):
        PerTaskConfig(views="official", official=PerTaskOfficial(stop_fit="loss"))
    with pytest.raises(UserError, match="official.stop_share"):
        PerTaskConfig(views="official", official=PerTaskOfficial(stop_share=1.5))
    assert PerTaskOfficial().stop_after == 0  # off by default: the official fixed schedule


def test_a_resume_takes_an_older_plan_and_any_number_of_copies(tmp_path):
    """ttt_plan.json's official.* identity: a plan written before early stop existed resumes with it
    off, not with it on; official.copies is no identity (results are the same for any K)."""
    import dataclasses

    from hrm_deeploop.pertask import plan
    from hrm_deeploop.pertask.ttt_config import PerTaskConfig, PerTaskOfficial

    def identity(**official):
        cfg = PerTaskConfig(checkpoint="c", challenges="x.json", views="official", official=PerTaskOfficial(**official))
        return plan.identity_of(cfg, b"{}", "0" * 64)

    out = tmp_path / "o"
    out.mkdir()
    older = identity(copies=4)
    for key in plan.OFFICIAL_LATER:
        del older["official"][key]  # as written before these keys existed
    older["official"]["copies"] = 4
    (out / plan.PLAN).write_text(json.dumps(older))
    assert plan.check_claim(out, identity(copies=2)) is True
    with pytest.raises(UserError, match="other official"):
        plan.check_claim(out, identity(stop_after=2))
    assert set(identity()["official"]) == {f.name for f in dataclasses.fields(PerTaskOfficial)} - {"copies"}
