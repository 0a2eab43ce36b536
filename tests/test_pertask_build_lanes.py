"""`ttt views=build copies=K` (hrm_deeploop/pertask/build_lanes.py, vision_lanes.py): K tasks'
LoopViT trainers stepped at once in one process. A task's result with batch-mates equals its result
trained alone in-process (K = 1) bit for bit on the CPU, weights included; a task that fails fails
alone; a kill keeps the finished tasks."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import families
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import build_lanes, checks, plan, worker
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from tests.arc_synth import write_kaggle
from tests.test_pertask import _tasks, pretrained  # noqa: F401 - the module's fixture: pre/ and two unseen tasks

REPO = Path(__file__).resolve().parents[1]
TIMES = ("train_seconds", "loop_seconds", "build_seconds", "evaluate_seconds", "seconds")


def _vit(root: Path, out: Path, block: str) -> Path:
    """A tiny LoopViT with dropout (torch's generator on the training path, through nn.Dropout in
    the vanilla block; inside SDPA in the hybrid one, which no lane draws)."""
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", f"model.block={block}", "model.dropout=0.1",
                                        "train.progress=false", "optim.warmup_steps=1", "train.global_batch_size=4",
                                        "train.max_steps=2", f"data_dir={root / 'pre'}", f"output_dir={out}"]) == 0
    return out


@pytest.fixture(scope="module")
def vit(pretrained, tmp_path_factory):  # noqa: F811
    """A tiny vanilla LoopViT with dropout and four unseen tasks, the last with a grid its 16 x 16
    canvas cannot hold (that task fails, alone)."""
    root, _ = pretrained
    here = tmp_path_factory.mktemp("lanes")
    tasks = _tasks(2, 4, "t")
    big = [[(i + j) % 10 for j in range(20)] for i in range(20)]
    tasks["t03"] = {"train": [{"input": big, "output": big}] * 2, "test": [{"input": big}]}
    chal = write_kaggle(here / "raw", "arc-agi_evaluation", tasks, solutions=False)
    return _vit(root, here / "vit", "vanilla"), chal


def _cfg(checkpoint, chal, out, **kw) -> PerTaskConfig:
    cfg = PerTaskConfig(checkpoint=str(checkpoint), challenges=str(chal), output_dir=str(out), steps=4, batch=4,
                        num_aug=1, workers=1, threads=1, device="cpu", progress=False, keep_work=True, passes=2,
                        protocol="transductive", train_overrides=["optim.warmup_steps=1"],
                        eval_overrides=["global_batch_size=4"], **kw)
    checks.before_the_first_task(cfg)
    return cfg


def _alone(checkpoint, chal, out) -> dict[str, dict]:
    """Each task trained alone in this process (K = 1: what a pool worker does)."""
    cfg = _cfg(checkpoint, chal, out)
    tasks = plan.load_challenges(chal)
    for tid in sorted(tasks):
        work = plan.task_dir(out, tid) / worker.WORK
        work.mkdir(parents=True)
        try:
            worker._solve(cfg, tid, tasks[tid], math.inf, work)
        except Exception as e:  # noqa: BLE001 - the failing task's own failure, recorded as the pool does
            plan.write_result(out, tid, {"task": tid, "status": "failed", "reason": str(e)})
    return {t: plan.finished(out, t) for t in tasks}


def _strip(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in TIMES}


def _same_as_alone(checkpoint, chal, tmp_path, ks, in_lanes: bool = True) -> None:
    alone = _alone(checkpoint, chal, tmp_path / "k1")
    assert alone["t03"]["status"] == "failed" and "image_size" in alone["t03"]["reason"]
    for k in ks:
        out = tmp_path / f"k{k}"
        cfg = _cfg(checkpoint, chal, out, copies=k)
        counts = build_lanes.run_shard(cfg, 0, 1)
        assert counts.get("failed") == 1 and sum(counts.values()) == 4, counts
        for tid, want in alone.items():
            got = plan.finished(out, tid)
            if want["status"] == "failed":
                assert got["status"] == "failed" and "image_size" in got["reason"]
                continue
            assert _strip(got) == _strip(want), (k, tid)
            log = (plan.task_dir(out, tid) / worker.LOG).read_text()
            assert ("ttt: trained alone" not in log) == in_lanes, log[-300:]
            sa, sb = (ckpt.load(ckpt.resolve(plan.task_dir(o, tid) / "work" / "run")) for o in (out, tmp_path / "k1"))
            assert all(torch.equal(sa["model"][n], sb["model"][n]) for n in sb["model"]), (k, tid)


def test_batch_mates_change_nothing_and_a_failing_task_fails_alone(vit, tmp_path, capsys, monkeypatch):
    """K = 2 lanes over four tasks: lanes refilled as tasks end, one task refused at its build. Each
    trained task's console line is the pool's (`plan.task_note`), the fallback's count included (the
    lanes printed none): every task's count raised by one, alone and in the lanes alike, so that the
    tiny model's valid grids still leave a count to print."""
    real = worker.fill_attempts

    def one_more(result: dict, task: dict) -> None:
        real(result, task)
        result["fallback_attempts"] += 1

    monkeypatch.setattr(worker, "fill_attempts", one_more)
    _same_as_alone(*vit, tmp_path, (2,))
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ttt: [")]
    for tid in ("t00", "t01", "t02"):
        res = plan.finished(tmp_path / "k2", tid)
        assert res["fallback_attempts"] >= 1 and "from the fallback over both rankings" in plan.task_note(res)
        assert any(ln.endswith(f"] {tid}: {plan.task_note(res)}") for ln in said), (tid, said)


@pytest.mark.slow  # two more sets (~40 s)
def test_three_lanes_and_a_model_no_lane_holds(pretrained, vit, tmp_path):  # noqa: F811
    """K = 3; and a hybrid block with dropout (inside SDPA: no lane draws it), whose tasks train
    alone in the engine's process, each from its own generator state: the same results again."""
    _same_as_alone(*vit, tmp_path / "a", (3,))
    hybrid = _vit(pretrained[0], tmp_path / "hybrid", "hybrid")
    _same_as_alone(hybrid, vit[1], tmp_path / "b", (2,), in_lanes=False)


def test_a_diverging_lane_is_reported_alone(vit, tmp_path):
    """A lane whose weights are not finite diverges; its batch-mate's loss is the lone one's."""
    from hrm_deeploop import runtime
    from hrm_deeploop.pertask.inprocess import build_trainer, prepared
    from hrm_deeploop.pertask.vision_lanes import VisionCopies

    checkpoint, chal = vit
    cfg = _cfg(checkpoint, chal, tmp_path / "o")
    prep = prepared(cfg)
    tasks = plan.load_challenges(chal)
    env = runtime.setup("cpu")

    def trainer(tid: str, sub: str):
        work = tmp_path / sub / tid
        work.mkdir(parents=True)
        group, c = worker.build_task(cfg, tid, tasks[tid], work)
        train_cfg, _ = prep.task_configs(work, math.inf, group, c, worker.eval_batch)
        return build_trainer(prep, train_cfg, env)

    lone = trainer("t00", "a")
    want = [lone.train_step(s)["loss"] for s in (1, 2)]
    lanes = VisionCopies(2, env.device)
    bad = trainer("t01", "b")
    with torch.no_grad():
        next(bad.model.parameters()).fill_(float("nan"))
    lanes.open(0, bad)
    lanes.open(1, trainer("t00", "b"))
    got = [lanes.step() for _ in range(2)]
    assert [g[1] for g in got] == want
    assert set(lanes.diverged) == {0} and not math.isfinite(got[0][0])


@pytest.mark.slow  # a subprocess killed and rerun (~40 s)
def test_sigkill_mid_set_then_rerun_keeps_the_finished(vit, tmp_path):
    checkpoint, chal = vit
    out = tmp_path / "o"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={checkpoint}", f"challenges={chal}",
           f"output_dir={out}", "steps=30", "batch=4", "num_aug=1", "copies=2", "threads=1", "device=cpu",
           "progress=false", "protocol=transductive", "passes=2", "train_overrides=['optim.warmup_steps=1']"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tasks = sorted(plan.load_challenges(chal))
    deadline = time.time() + 240
    while time.time() < deadline and not any(plan.finished(out, t) for t in tasks if t != "t03"):
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = {t: (out / "tasks" / t / "result.json").read_bytes() for t in tasks if plan.finished(out, t)}
    assert 1 <= len(done) < 4, f"the kill came after {len(done)} tasks"
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # t03 (a grid its canvas cannot hold) is recorded before the first task (canvas_fit): named in its own
    # line, not among the lanes' tasks
    assert "t03" in done and "1 of 4 task(s) too large for the checkpoint" in r.stdout, r.stdout
    assert f"{len(done) - 1} already finished" in r.stdout, r.stdout
    assert all((out / "tasks" / t / "result.json").read_bytes() == b for t, b in done.items())
    assert {plan.finished(out, t)["status"] for t in tasks} <= {"trained", "trained-no-grid", "failed"}
    assert json.loads((out / "ttt_summary.json").read_text())["tasks"] == 4


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_hrm_lanes_equal_one_at_a_time(pretrained, tmp_path):  # noqa: F811
    """The reasoners' lanes (`reasoner_copies.ReasonerCopies`) for a tiny HRM: K = 2 over two tasks
    gives each task's K = 1 result and weights."""
    root, chal = pretrained
    assert build_lanes.lanes_class(families.family("hrm")) is not None
    alone = _alone(root / "run", chal, tmp_path / "k1")
    cfg = _cfg(root / "run", chal, tmp_path / "k2", copies=2)
    assert build_lanes.lanes_for(cfg, 2) == 2
    counts = build_lanes.run_shard(cfg, 0, 1)
    assert sum(counts.values()) == 2 and not counts.get("failed"), counts
    for tid, want in alone.items():
        assert want["status"].startswith("trained")
        assert "ttt: trained alone" not in (plan.task_dir(tmp_path / "k2", tid) / worker.LOG).read_text()
        assert _strip(plan.finished(tmp_path / "k2", tid)) == _strip(want), tid
        sa, sb = (ckpt.load(ckpt.resolve(plan.task_dir(o, tid) / "work" / "run")) for o in (tmp_path / "k2",
                                                                                          tmp_path / "k1"))
        assert all(torch.equal(sa["model"][n], sb["model"][n]) for n in sb["model"]), tid


def test_a_budget_spent_falls_back_in_the_lanes(vit, tmp_path):
    """With no time left, no task takes a lane: each submits its fallback, unfinished (a rerun retries it)."""
    checkpoint, chal = vit
    cfg = _cfg(checkpoint, chal, tmp_path / "o", copies=2, time_budget=0.001)
    counts = build_lanes.run_shard(cfg, 0, 1, start=time.time() - 60)
    assert counts == {"fallback": 4}, counts
    for tid in plan.load_challenges(chal):
        r = json.loads((plan.task_dir(tmp_path / "o", tid) / "result.json").read_text())
        assert r["status"] == "fallback" and "time budget" in r["reason"] and plan.finished(tmp_path / "o", tid) is None
