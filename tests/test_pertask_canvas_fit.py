"""`ttt` and a checkpoint's canvas (issue 61): a task with a grid the checkpoint cannot hold
(`Family.grid_room`, hrm_deeploop/pertask/canvas_fit.py) is named in one line before the first task,
never trained, recorded as failed with its fallback attempts (the reason naming the canvas's room,
never the trainer's `raise model.image_size`); the others train and share the time; exit 0."""

import json
from pathlib import Path

import numpy as np
import pytest

from hrm_deeploop import families
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import canvas_fit, plan
from tests.arc_synth import write_kaggle

LINE = "too large for the checkpoint"


def _grid(rng, side: int) -> list:
    return rng.integers(0, 10, size=(side, side)).tolist()


def _task(rng, side: int, test_side: int | None = None) -> dict:
    return {"train": [{"input": _grid(rng, side), "output": _grid(rng, side)} for _ in range(2)],
            "test": [{"input": _grid(rng, test_side or side)}]}


def _run(tmp_path: Path, tasks: dict, views: str, *extra: str, out: str = "o") -> tuple[int, Path]:
    from tests.test_train_vit import _official_file

    ckpt = tmp_path / "loop_vit_base.pt"  # a tiny official LoopViT file: a 16 x 16 canvas, sides up to 14
    if not ckpt.is_file():
        _official_file(ckpt, "vanilla", num_tasks=400)
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", tasks, solutions=False)
    args = [f"checkpoint={ckpt}", f"challenges={chal}", f"output_dir={tmp_path / out}", f"views={views}", "workers=1",
            "threads=1", "device=cpu", "progress=false", "protocol=transductive", "passes=2"]
    args += ["official.epochs=1", "official.perms=0"] if views == "official" else [
        "steps=2", "batch=4", "num_aug=1", "train_overrides=['optim.warmup_steps=1']",
        "eval_overrides=['global_batch_size=4']"]
    return run_subcommand("ttt", [*args, *extra]), tmp_path / out


def _not_trained(out: Path, tid: str, task: dict, room: str) -> None:
    r = plan.finished(out, tid)
    assert r["status"] == "failed" and r["reason"].startswith("not trained: ") and room in r["reason"]
    assert "raise model.image_size" not in r["reason"] and "a checkpoint with a larger canvas" in r["reason"]
    assert r["attempts"] == plan.fallback_attempts(task)
    assert [p.name for p in (out / "tasks" / tid).iterdir()] == ["result.json"]  # no log, no work: never started


def test_the_loopvit_family_says_what_its_canvas_holds_on_each_path(tmp_path):
    from hrm_deeploop.checkpoint import load
    from hrm_deeploop.training.vision_config import TrainViTConfig
    from tests.test_train_vit import _official_file

    _official_file(tmp_path / "v.pt", "vanilla", num_tasks=4)
    state, fam = load(tmp_path / "v.pt"), families.of_checkpoint(tmp_path / "v.pt")
    official = fam.grid_room(tmp_path / "v.pt", state, None, "official")
    assert (official.train, official.test) == (14, 14) and "16 x 16 canvas holds sides up to 14" in official.holds
    trainer = TrainViTConfig()  # an official file carries no canvas section: the trainer's default eval scale, 2
    build = fam.grid_room(tmp_path / "v.pt", state, trainer, "build")
    assert (build.train, build.test) == (14, 7) and "canvas.eval_scale=1" in build.test_fix
    trainer.canvas.eval_scale = 1
    assert fam.grid_room(tmp_path / "v.pt", state, trainer, "build").test == 14
    ours = {"model": {}, "config": {"model": {"name": "loopvit", "image_size": 64}}}  # a train-vit run's
    assert fam.grid_room(Path("run.pt"), ours, None, "official").train == 62  # 64 holds 30 x 30 at scale 2
    # the reasoners read every ARC grid (a 30 x 30 row of the dataset): no room below ARC's own
    assert all(families.family(n).grid_room is None for n in ("hrm", "trm", "urm"))


def test_a_task_is_measured_by_what_each_path_draws():
    from hrm_deeploop.families.spec import GridRoom

    rng = np.random.default_rng(0)
    t = {"train": [{"input": _grid(rng, 3), "output": _grid(rng, 9)}, {"input": _grid(rng, 2), "output": _grid(rng, 2)}],
         "test": [{"input": _grid(rng, 5)}]}
    assert canvas_fit.sides(t, leave_one_out=False) == (9, 5)
    assert canvas_fit.sides(t, leave_one_out=True) == (9, 9)  # a held-out demonstration is predicted
    room = GridRoom(14, 7, "holds", "fix", "lower scale")
    assert canvas_fit.misfits({"t": t}, room, False) == {}
    found = canvas_fit.misfits({"t": t}, room, True)
    assert "a test input side of 9" in found["t"] and "lower scale" in found["t"]  # its demonstrations fit
    assert canvas_fit.misfits({"t": t}, None, True) == {}
    many = {f"x{i}": t for i in range(7)}
    line = canvas_fit.line(canvas_fit.misfits(many, room, True), many, room, True)
    assert line.count("(side 9)") == 5 and "and 2 more" in line and "every task (7)" in line


@pytest.mark.slow  # a ttt set (~4 s); run by .ci/run after the default suite
def test_views_official_trains_the_tasks_that_fit_and_submits_the_fallback_for_the_others(tmp_path, capsys):
    rng = np.random.default_rng(0)
    tasks = {"fit00": _task(rng, 3), "big01": _task(rng, 20)}
    rc, out = _run(tmp_path, tasks, "official")
    printed = capsys.readouterr().out
    assert rc == 0 and printed.count(LINE) == 1
    line = next(ln for ln in printed.splitlines() if LINE in ln)
    assert "1 of 2 task(s)" in line and "big01 (side 20)" in line and "sides up to 14" in line
    assert "] big01:" not in printed and "] fit00: trained" in printed  # only the task that fits ran
    _not_trained(out, "big01", tasks["big01"], "sides up to 14")
    assert plan.finished(out, "fit00")["status"].startswith("trained")
    sub = json.loads((out / "submission.json").read_text())
    assert set(sub) == {"fit00", "big01"} and sub["big01"] == plan.fallback_attempts(tasks["big01"])
    assert json.loads((out / "ttt_summary.json").read_text())["status"]["failed"] == 1
    before = (out / "tasks" / "big01" / "result.json").read_bytes()
    assert _run(tmp_path, tasks, "official")[0] == 0  # resumed: both finished, nothing rewritten
    assert (out / "tasks" / "big01" / "result.json").read_bytes() == before


def test_when_no_task_fits_no_worker_starts_and_the_fallback_is_submitted(tmp_path, capsys):
    rng = np.random.default_rng(1)
    tasks = {"big00": _task(rng, 20), "big01": _task(rng, 3, 16)}
    rc, out = _run(tmp_path, tasks, "official")
    printed = capsys.readouterr().out
    assert rc == 0 and printed.count(LINE) == 1 and "every task (2)" in printed and "fallback attempts alone" in printed
    assert "worker(s) started" not in printed and "copies at once" not in printed
    sub = json.loads((out / "submission.json").read_text())
    assert sub == {t: plan.fallback_attempts(task) for t, task in tasks.items()}
    _not_trained(out, "big01", tasks["big01"], "sides up to 14")


@pytest.mark.slow  # a ttt set (~4 s); run by .ci/run after the default suite
def test_views_build_leaves_out_the_tasks_its_canvas_or_its_evaluation_scale_cannot_hold(tmp_path, capsys):
    """views=build: demonstrations up to 14 on the 16 x 16 canvas; test inputs up to 7 at the trainer's
    evaluation scale (2: an official file carries no canvas section), the fix for those named."""
    rng = np.random.default_rng(2)
    tasks = {"fit00": _task(rng, 3), "big01": _task(rng, 20), "tst02": _task(rng, 3, 10)}
    rc, out = _run(tmp_path, tasks, "build")
    printed = capsys.readouterr().out
    assert rc == 0 and printed.count(LINE) == 1 and "2 of 3 task(s)" in printed
    _not_trained(out, "big01", tasks["big01"], "sides up to 14")
    _not_trained(out, "tst02", tasks["tst02"], "test inputs up to 7 at canvas.eval_scale=2")
    assert "train_overrides=['canvas.eval_scale=1']" in plan.finished(out, "tst02")["reason"]
    assert "train_overrides" not in plan.finished(out, "big01")["reason"]  # a demonstration over: no scale helps
    assert plan.finished(out, "fit00")["status"].startswith("trained")
    assert "1 tasks: 0 already finished, 1 to run" in printed  # the budget is the task's that trains
    assert set(json.loads((out / "submission.json").read_text())) == set(tasks)


def test_views_build_with_copies_and_the_lower_scale_trains_the_test_input_misfit(tmp_path, capsys):
    rng = np.random.default_rng(2)
    tasks = {"fit00": _task(rng, 3), "big01": _task(rng, 20), "tst02": _task(rng, 3, 10)}
    rc, out = _run(tmp_path, tasks, "build", "copies=2",
                   "train_overrides=['optim.warmup_steps=1','canvas.eval_scale=1']")
    assert rc == 0 and capsys.readouterr().out.count(LINE) == 1
    _not_trained(out, "big01", tasks["big01"], "sides up to 14")
    assert all(plan.finished(out, t)["status"].startswith("trained") for t in ("fit00", "tst02"))
