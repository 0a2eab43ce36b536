"""`ttt views=build` in-process (hrm_deeploop/pertask/inprocess.py): a task trained, predicted and
voted through library calls equals the command route (`train`/`train-vit init_from=...` and
`evaluate` with override strings, `worker.solve_by_commands`) bit for bit on the CPU: the same
attempts and ranked candidates, the same trained weights, the same losses. A tiny HRM and a tiny
LoopViT (with dropout: torch's generator is on its training path)."""

import json
import math
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import checks, inprocess, plan, worker
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from tests.test_pertask import pretrained  # noqa: F401 - the module's fixture: a tiny HRM and two unseen tasks

TIMES = ("train_seconds", "loop_seconds", "build_seconds", "evaluate_seconds", "seconds")


def _cfg(checkpoint, chal, out, **kw) -> PerTaskConfig:
    kw = {"train_overrides": ["optim.warmup_steps=1"], **kw}
    cfg = PerTaskConfig(checkpoint=str(checkpoint), challenges=str(chal), output_dir=str(out), steps=3, batch=4,
                        num_aug=1, workers=1, threads=1, device="cpu", progress=False, keep_work=True, passes=2,
                        eval_overrides=["global_batch_size=4"], **kw)
    checks.before_the_first_task(cfg)
    return cfg


def _both(checkpoint, chal, tmp_path, **kw) -> tuple[dict, dict, Path, Path]:
    """One task by each route: (in-process result, command-route result, their work folders)."""
    tasks = plan.load_challenges(chal)
    tid = sorted(tasks)[0]
    a, b = _cfg(checkpoint, chal, tmp_path / "inproc", **kw), _cfg(checkpoint, chal, tmp_path / "cmd", **kw)
    wa, wb = (plan.task_dir(Path(c.output_dir), tid) / worker.WORK for c in (a, b))
    wa.mkdir(parents=True)
    got = worker._solve(a, tid, tasks[tid], math.inf, wa)
    wb.mkdir(parents=True)
    want = worker.solve_by_commands(b, tid, tasks[tid], math.inf, wb)
    assert plan.finished(Path(a.output_dir), tid) == got and plan.finished(Path(b.output_dir), tid) == want
    return got, want, wa, wb


def _same_weights(wa: Path, wb: Path) -> None:
    sa = ckpt.load(ckpt.resolve(wa / "run"))
    sb = ckpt.load(ckpt.resolve(wb / "run"))
    assert sa["step"] == sb["step"] and sa["model"].keys() == sb["model"].keys()
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k]), k
    ja, jb = (json.loads((w / "run" / "summary.json").read_text()) for w in (wa, wb))
    assert ja["final_train_loss"] == jb["final_train_loss"] and ja["steps"] == jb["steps"] == 3


def _same_result(got: dict, want: dict) -> None:
    assert {k: v for k, v in got.items() if k not in TIMES} == {k: v for k, v in want.items() if k not in TIMES}


def test_hrm_in_process_equals_the_command_route(pretrained, tmp_path):  # noqa: F811
    root, chal = pretrained
    got, want, wa, wb = _both(root / "run", chal, tmp_path, leave_one_out=True)
    _same_result(got, want)
    assert got["status"].startswith("trained") and "leave_one_out" in got
    _same_weights(wa, wb)


def test_loopvit_in_process_equals_the_command_route(pretrained, tmp_path):  # noqa: F811
    root, chal = pretrained
    vit = tmp_path / "vit"
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1", "train.progress=false",
                                        "optim.warmup_steps=1", "train.global_batch_size=4", "train.max_steps=2",
                                        f"data_dir={root / 'pre'}", f"output_dir={vit}"]) == 0
    got, want, wa, wb = _both(vit, chal, tmp_path)
    _same_result(got, want)
    _same_weights(wa, wb)


def test_the_checkpoint_is_read_once_per_process(pretrained, tmp_path, monkeypatch):  # noqa: F811
    """Prepared once: a second task reads no checkpoint file and composes no config."""
    root, chal = pretrained
    cfg = _cfg(root / "run", chal, tmp_path / "o")
    inprocess.prepared(cfg)
    reads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    import hrm_deeploop.cli as cli

    monkeypatch.setattr(cli, "compose", lambda *a, **k: pytest.fail("composed again"))
    tasks = plan.load_challenges(chal)
    for tid in sorted(tasks):
        work = plan.task_dir(Path(cfg.output_dir), tid) / worker.WORK
        work.mkdir(parents=True)
        assert worker._solve(cfg, tid, tasks[tid], math.inf, work)["status"].startswith("trained")
    assert reads == []


def test_a_task_that_diverges_is_its_own_failure(pretrained, tmp_path):  # noqa: F811
    """A non-finite loss in-process is the task's own failure (TaskFailed, its log naming the step),
    as the command route's `train` exit was."""
    root, chal = pretrained
    cfg = _cfg(root / "run", chal, tmp_path / "o", lr=1e30, train_overrides=["optim.warmup_steps=0"])
    tid = sorted(plan.load_challenges(chal))[0]
    with pytest.raises(worker.TaskFailed, match="diverged|not finite|non-finite"):
        worker.solve(cfg, tid, plan.load_challenges(chal)[tid], math.inf)
    assert plan.finished(tmp_path / "o", tid) is None  # no result: the pool records it as failed
    assert "step" in (plan.task_dir(tmp_path / "o", tid) / worker.LOG).read_text()
