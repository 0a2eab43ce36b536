"""`ttt` under hostile options and a hostile environment (issue 60) and its budget, fallbacks and
presets (issue 59): options, solutions and the checkpoint refused before the first task; one run
per output folder; workers that die with their parent; a set bound to its checkpoint's content; a
failure from outside a task retried; no placeholder attempts; a budget that holds on 2 workers."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import budget, plan, presets, worker
from tests.arc_synth import write_kaggle
from tests.test_hostile_writers import ENV, limited
from tests.test_pertask import TTT, _tasks, _ttt, pretrained  # noqa: F401  (a fixture)


def _one_line(capsys, *expected: str) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and ": note: " not in ln]
    assert len(err) == 1 and "Traceback" not in err[0], err
    for text in expected:
        assert text in err[0], (text, err[0])
    return err[0]


@pytest.mark.parametrize("extra, expected", [
    (["steps=0"], "steps=0"),
    (["num_aug=1000000000"], "at most 2,903,039 exist"),
    (["num_aug=2000000"], "of memory"),
    (["train_overrides=['optim.warmp=3']"], "train_overrides: unknown config key 'optim.warmp'"),
    (["eval_overrides=['bogus=1']"], "eval_overrides: unknown config key 'bogus'"),
    (["train_overrides=['output_dir=/tmp/elsewhere']"], "ttt sets output_dir itself"),
    (["train_overrides=['+data_dir=/tmp/elsewhere']"], "ttt sets data_dir itself"),
    (["train_overrides=['train.max_steps=9']"], "use ttt's steps="),
    (["eval_overrides=['checkpoint=/tmp/x']"], "ttt sets checkpoint itself"),
    (["solutions=missing.json"], "solutions 'missing.json' does not exist"),
    (["preset=tpu"], "preset"),
])
def test_options_refused_before_the_first_task(pretrained, tmp_path, capsys, monkeypatch, extra, expected):  # noqa: F811
    root, chal = pretrained
    monkeypatch.chdir(tmp_path)
    assert _ttt(root, chal, tmp_path / "o", *extra) == 2
    _one_line(capsys, expected)
    assert not (tmp_path / "o").exists()


def test_bad_solutions_and_checkpoints_refused_before_the_first_task(pretrained, tmp_path, capsys):  # noqa: F811
    root, chal = pretrained
    (tmp_path / "sol.json").write_text(json.dumps({"new00": [[[1, 2], [3]]]}))
    assert _ttt(root, chal, tmp_path / "o", f"solutions={tmp_path / 'sol.json'}") == 2
    _one_line(capsys, "sol.json", "rows of unequal length")
    good = root / "run" / "checkpoints" / "step_2.pt"
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "truncated.pt").write_bytes(good.read_bytes()[:1000])
    (tmp_path / "corrupt.pt").write_bytes(os.urandom(5000))
    import torch

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    torch.save({"model": Payload()}, tmp_path / "pickle.pt")
    for bad, expected in [("empty_run", "holds no checkpoints/step_N.pt"), ("nope/step_9.pt", "does not exist"),
                          ("truncated.pt", "corrupt"), ("corrupt.pt", "corrupt"), ("pickle.pt", "could run code")]:
        rc = run_subcommand("ttt", [f"checkpoint={tmp_path / bad}", f"challenges={chal}",
                                    f"output_dir={tmp_path / 'o'}", "protocol=transductive", *TTT])
        assert rc == 2
        _one_line(capsys, expected)
        assert not (tmp_path / "o").exists() and not (tmp_path / "ran").exists()


def test_a_resumed_set_is_bound_to_its_checkpoints_content(pretrained, tmp_path, capsys):  # noqa: F811
    root, chal = pretrained
    shutil.copytree(root / "run", tmp_path / "run")
    args = [f"checkpoint={tmp_path / 'run'}", f"challenges={chal}", f"output_dir={tmp_path / 'o'}",
            "protocol=transductive", "time_budget=0", *TTT]
    assert run_subcommand("ttt", args) == 0
    assert run_subcommand("ttt", args) == 0  # the same weights: a resume
    f = tmp_path / "run" / "checkpoints" / "step_2.pt"
    state = ckpt.load(f)
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name] = state["model"][name] + 1.0
    ckpt.save(f, state)  # other weights at the same path
    capsys.readouterr()
    assert run_subcommand("ttt", args) == 2
    _one_line(capsys, "trained from other weights", "sha256")


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_one_run_per_folder_and_workers_die_with_a_killed_ttt(pretrained, tmp_path, capsys):  # noqa: F811
    """While a ttt trains, a second one into its folder is refused in one line; `kill -9` of the
    first (its pid only, not its group) leaves no worker training; a rerun then goes on."""
    root, chal = pretrained
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={root / 'run'}", f"challenges={chal}",
           f"output_dir={out}", *TTT, "steps=100000", "time_budget=10"]
    proc = subprocess.Popen(cmd, env=ENV, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (out / "tasks" / "new00" / "log.txt").exists() and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.2)
        assert (out / "tasks" / "new00" / "log.txt").exists(), proc.stderr.read().decode()[-2000:] if proc.poll() else ""
        assert _ttt(root, chal, out, "steps=100000", "time_budget=10") == 2
        _one_line(capsys, "in use by another run")
        workers = _children(proc.pid)
        assert workers and all(_alive(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "a worker outlived its killed ttt"
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    # the folder is free again: the rerun resumes (the budget spent at once: every task falls back)
    assert _ttt(root, chal, out, "steps=100000", "time_budget=0") == 0


@pytest.mark.slow
def test_a_failure_from_outside_a_task_is_retried(pretrained, tmp_path):  # noqa: F811
    """A file-size limit (EFBIG, as a full disk's ENOSPC) while a task's copy saves its checkpoint:
    the task is `error`, not finished, the command exits 1; the same command without the limit
    retries it and finishes."""
    root, chal = pretrained
    out = tmp_path / "o"
    args = ["ttt", f"checkpoint={root / 'run'}", f"challenges={chal}", f"output_dir={out}", *TTT]
    p = limited(tmp_path, args, 300_000)  # the tiny checkpoint is 1.2 MB
    assert p.returncode == 1, p.stderr[-2000:]
    assert "not finished for a reason outside" in p.stderr and "Traceback" not in p.stderr
    for tid in ("new00", "new01"):
        r = plan.result(out, tid)
        assert r["status"] == "error" and plan.finished(out, tid) is None
        assert "EFBIG" in (out / "tasks" / tid / "log.txt").read_text()
    assert json.loads((out / "ttt_summary.json").read_text())["status"] == {"error": 2}
    r = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", *args], env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "0 already finished, 2 to run" in r.stdout
    assert all(plan.finished(out, t)["status"].startswith("trained") for t in ("new00", "new01"))


def test_the_outside_verdict_reads_the_errno():
    for line in ("hrm-deeploop train: error: cannot write x: No space left on device (errno 28, ENOSPC)",
                 "hrm-deeploop evaluate: error: x.npz: File too large (EFBIG)",
                 "hrm-deeploop train: interrupted by SIGTERM"):
        assert worker.OUTSIDE.search(line), line
    for line in ("hrm-deeploop train: error: unknown config key 'x'",
                 "hrm-deeploop evaluate: error: the dataset holds no test split"):
        assert not worker.OUTSIDE.search(line), line


def test_no_placeholder_attempts():
    """Fewer than two valid grids: the test input fills each missing attempt, never [[0]] or []."""
    task = {"train": [], "test": [{"input": [[5, 6]]}, {"input": [[7]]}]}
    r = {"status": "trained", "ranked": [[[], [[0] * 31], [[1, 2]]], []], "ranked_poe": [[[[3]], [[4]], [[1]]], [[[2]]]]}
    worker.fill_attempts(r, task)
    assert r["attempts"] == [{"attempt_1": [[1, 2]], "attempt_2": [[5, 6]]}, {"attempt_1": [[7]], "attempt_2": [[7]]}]
    assert r["attempts_poe"] == [{"attempt_1": [[3]], "attempt_2": [[4]]}, {"attempt_1": [[2]], "attempt_2": [[7]]}]
    assert r["status"] == "trained-no-grid" and r["fallback_attempts"] == 1 + 2 + 0 + 1
    r = {"status": "trained", "ranked": [[[[1]], [[2]]], [[[3]], [[4]]]]}
    worker.fill_attempts(r, task)
    assert r["status"] == "trained" and r["fallback_attempts"] == 0


def test_presets_fit_the_checkpoint_and_yield_to_the_user():
    cpu = presets.choose("auto", "cpu", 20_000, {}, [])
    assert cpu.name == "cpu" and cpu.sizes == presets.SIZES["cpu"] and cpu.checkpoint_every == 0
    assert cpu.warmup == 3  # 10% of its 25 steps, rounded up: not the pretraining run's warm-up
    assert presets.choose("auto", "cpu", 5_000_000, {}, []).name == "cpu-large"
    assert presets.choose("auto", "cuda", 5_000_000, {}, []).sizes == presets.SIZES["gpu"]
    mine = presets.choose("gpu", "cpu", 1, {"steps": 7, "num_aug": None}, ["optim.warmup_steps=2", "checkpoint.every=5"])
    assert mine.sizes["steps"] == 7 and mine.sizes["num_aug"] == 100 and mine.given == ("steps",)
    assert mine.warmup is None and mine.checkpoint_every is None
    assert "preset gpu" in presets.line(mine) and "yours: steps" in presets.line(mine)


def test_a_small_model_on_the_cpu_trains_with_one_thread_a_worker():
    """threads=0 on the CPU: one torch thread for a model under ONE_THREAD parameters (two threads cost
    1.6-2.4x the wall time of one at these sizes), the machine's count otherwise, the user's always."""
    small = presets.choose("auto", "cpu", 20_000, {}, [])
    assert small.threads == 1 and "1 torch thread a worker" in presets.line(small)
    assert presets.choose("auto", "cpu", 20_000, {}, [], threads=2).threads is None  # the user's
    assert presets.choose("auto", "cpu", presets.ONE_THREAD, {}, []).threads is None  # large enough to share
    assert presets.choose("auto", "cuda", 20_000, {}, []).threads is None  # a GPU's workers: the CPU count


def test_budget_pieces():
    # equal free slots: the left time over the rounds; a busy slot gives the other tasks more rounds
    assert budget.window(0.0, 100.0, 4, [], 2) == pytest.approx(50.0)
    assert budget.window(0.0, 100.0, 3, [], 2) == pytest.approx(50.0)
    assert budget.window(0.0, 100.0, 2, [90.0], 2) == pytest.approx(50.0)  # the other slot is busy to the end
    assert budget.window(0.0, 100.0, 1, [90.0], 2) == pytest.approx(100.0)
    assert budget.window(50.0, 40.0, 1, [], 1) == 0.0 and budget.window(0.0, float("inf"), 3, [], 1) == float("inf")
    o = budget.Outside()
    assert o.estimate(10, 100.0) == pytest.approx(budget.PRIOR_FRACTION * 100.0)
    o.record({"seconds": 30.0, "loop_seconds": 20.0, "evaluate_seconds": 6.0}, rows=3)
    assert o.estimate(6, 100.0) == pytest.approx(budget.PAD * (4.0 + 6 * 2.0))
    # two slots, two tasks left of 10 s each after running tasks ending at 5 and 8: last ends at 18
    assert budget.time_left(0.0, [5.0, 8.0], 2, 10.0, 2, 1e9) == pytest.approx(18.0)
    assert budget.time_left(0.0, [5.0, 8.0], 2, 10.0, 2, 12.0) == pytest.approx(12.0)  # never past the end
    assert budget.time_left(0.0, [], 3, None, 2, 1e9) is None
    assert budget.Clock(10.0, 0.0).end == pytest.approx(600 - 12.0)  # 2% kept for the merge
    assert budget.Clock(1.0, 0.0, scores=True).end == pytest.approx(60 - 3.0 - 4.0)


@pytest.mark.slow
def test_a_budget_that_runs_out_mid_set_on_two_workers(pretrained, tmp_path):  # noqa: F811
    """Six tasks, 2 workers, 100,000 steps each asked, 75 s in all, at least 15 s of training a task:
    the whole command (its Python start included) ends within the budget; the tasks it reached
    trained to their deadlines, the rest submit their test input and are retried by a rerun."""
    root, _ = pretrained
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(2, 6, "mid"), solutions=False)
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={root / 'run'}", f"challenges={chal}",
           f"output_dir={out}", "batch=4", "num_aug=1", "workers=2", "threads=1", "device=cpu", "steps=100000", "time_budget=1.25",
           "min_task_minutes=0.25"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    assert wall <= 75.0, (wall, r.stdout)
    summary = json.loads((out / "ttt_summary.json").read_text())
    tasks = plan.load_challenges(chal)
    trained = [t for t in tasks if (plan.result(out, t) or {}).get("status", "").startswith("trained")]
    fallen = [t for t in tasks if (plan.result(out, t) or {}).get("status") == "fallback"]
    assert trained and fallen and len(trained) + len(fallen) == 6, r.stdout
    assert summary["status"].get("fallback") == len(fallen) and summary["wall_seconds"] <= 75.0
    sub = json.loads((out / "submission.json").read_text())
    assert all(sub[t] == plan.fallback_attempts(tasks[t]) for t in fallen)
    assert all(plan.finished(out, t) is None for t in fallen)  # a rerun retries them
    assert all(0 < plan.result(out, t)["steps"] < 100000 for t in trained)  # stopped at their deadlines
