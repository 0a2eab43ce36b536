"""One task's copy of the model, start to end, in a worker process: the task alone as a dataset
(its augmented views, a fresh embedding row each), its family's trainer started from the checkpoint
and trained on it under the task's deadline, `evaluate`'s library function (predict, un-augment,
vote), and the task's attempts written last as `tasks/<id>/result.json`. With `views=build` the
trainer and the evaluation are library calls (`inprocess.py`: the checkpoint read and the configs
composed once per worker, at its start); `solve_by_commands` is the command route they equal
(`train` / `train-vit init_from=...` and `evaluate` with override strings). Nothing of one task's
weights or optimiser state reaches another's: each task has its own trainer, one model in memory
at a time.

A worker dies with its parent (`PR_SET_PDEATHSIG` on Linux, and a thread that watches the parent's
pid everywhere): a `kill -9` of ttt leaves no copy training. A failure is the task's own
(`TaskFailed`: its commands refused it; recorded, finished) or from outside it (`OutsideFailure`: a
full disk, a file-size limit, memory, a signal; not recorded as finished, so a rerun retries it).
A test input without two valid predicted grids gets its input as the missing attempts (the
fallback, never `[[0]]`), and the task's status says so (`trained-no-grid`)."""

from __future__ import annotations

import contextlib
import ctypes
import io
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from arc_data.files.jsonio import parse_json
from hrm_deeploop.pertask import plan
from hrm_deeploop.pertask.inprocess import build_task, commands, eval_batch, solve_build
from hrm_deeploop.pertask.official_solve import solve_official
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

WORK = "work"
LOG = "log.txt"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# errors of the machine, not of the task: a rerun once they are gone may well succeed
OUTSIDE = re.compile(r"\b(ENOSPC|EDQUOT|EFBIG|EIO|EROFS|ENOMEM|EMFILE|ENFILE|ENOBUFS)\)|out of memory|interrupted",
                     re.IGNORECASE)


class TaskFailed(RuntimeError):
    """The task's own failure (its commands refused it): recorded as `failed`, finished."""


class OutsideFailure(RuntimeError):
    """A failure from outside the task (disk, memory, a signal): not finished, retried on a rerun."""


# torchrun's variables: a worker of rank r trains its task alone, so it must not see them (its
# `train` would join the other ranks' workers in one process group, training different tasks)
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def init_worker(threads: int, parent: int | None = None, ready=None, cfg: PerTaskConfig | None = None) -> None:
    """A pool process: it dies with `parent`, its torch threads, no torchrun variables (one task, one
    process); then it imports what a task runs, with `cfg` (views=build) reads the checkpoint and
    composes the configs once (`inprocess.prepared`), and waits at `ready` (a Barrier) with its
    siblings."""
    if parent is not None:
        die_with(parent)
    for var in TORCHRUN_VARS:
        os.environ.pop(var, None)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch  # lazy: after this worker's OMP_NUM_THREADS is set

    from hrm_deeploop import runtime  # lazy: torch's runtime, in the worker

    torch.set_num_threads(threads)
    runtime.keep_freed_memory()  # a step's large tensors reuse the heap's pages (runtime's docstring)
    if ready is not None:
        from hrm_deeploop.cli import COMMANDS, resolve  # lazy: the CLI's command table imports this package

        for name in ("build-arc", "train", "train-vit", "evaluate"):
            resolve(COMMANDS[name].target)  # their modules, imported once per worker, before any task's clock
        if cfg is not None and cfg.views == "build":
            from hrm_deeploop.errors import UserError  # lazy: beside the CLI's imports
            from hrm_deeploop.pertask.inprocess import prepared  # lazy: torch, in the worker

            with contextlib.suppress(UserError, OSError, MemoryError):  # then the first task fails, naming it
                prepared(cfg)
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait(timeout=300)


def die_with(parent: int) -> None:
    """End this process when `parent` ends, however it ends: the kernel's parent-death signal (Linux)
    and a thread that polls the parent's pid (everywhere; also covers the moment before prctl)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # no libc by that name: the watchdog alone
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="ttt-parent-watch", daemon=True).start()


class _Tail(io.TextIOBase):
    """What a task's commands print to stderr: into its log, the last lines kept for the verdict."""

    def __init__(self, log) -> None:
        self.log, self.text = log, ""

    def write(self, s: str) -> int:
        self.text = (self.text + s)[-4000:]
        return self.log.write(s)

    def flush(self) -> None:
        self.log.flush()


def solve(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float) -> dict:
    """Train, predict and vote one task; returns its result (also written to result.json). What
    its build, train and evaluate print goes to `tasks/<id>/log.txt`, not the console. Raises
    TaskFailed (its own) or OutsideFailure (disk, memory, a signal), naming its log."""
    root = plan.task_dir(Path(cfg.output_dir), tid)
    work = root / WORK
    try:
        shutil.rmtree(work, ignore_errors=True)  # a task killed half-way starts again from nothing
        work.mkdir(parents=True)
        log = open(root / LOG, "w")
    except OSError as e:
        raise OutsideFailure(f"{root}: {e.strerror or e}") from None
    tail = _Tail(log)
    with log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(tail):
        try:
            return _solve(cfg, tid, task, train_minutes, work)
        except (TaskFailed, OutsideFailure) as e:
            said = "\n".join(ln for ln in tail.text.splitlines() if ln.startswith("hrm-deeploop "))  # error lines
            outside = isinstance(e, OutsideFailure) or bool(OUTSIDE.search(said))
            why = e
        except (OSError, MemoryError) as e:
            outside, why = True, e
        except KeyboardInterrupt:  # a signal made one (the in-process trainer holds none back)
            outside, why = True, "interrupted"
        except Exception as e:  # the task's own: its data or its commands refused it
            outside, why = bool(OUTSIDE.search(f"{e}")), e
        with contextlib.suppress(OSError):
            print(f"ttt: {tid}: {why}", file=log)
        raise (OutsideFailure if outside else TaskFailed)(f"{why or type(why).__name__} (log: {root / LOG})") from None


def _solve(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float, work: Path) -> dict:
    if cfg.views == "official":

        result = solve_official(cfg, tid, task, train_minutes)
        result["loop_seconds"] = result["train_seconds"]
        fill_attempts(result, task)
        plan.write_result(Path(cfg.output_dir), tid, result)  # last: its presence means finished
        if not cfg.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return result
    t0 = time.monotonic()
    tasks, chal = build_task(cfg, tid, task, work)
    build_s = time.monotonic() - t0
    summary, train_s, eval_s = solve_build(cfg, tid, tasks, chal, train_minutes, work, eval_batch)
    return finish_build(cfg, tid, task, tasks, work, summary, train_s, build_s, eval_s, t0)


def finish_build(cfg: PerTaskConfig, tid: str, task: dict, tasks: dict[str, dict], work: Path, summary: dict,
                 train_s: float, build_s: float, eval_s: float, t0: float, seconds: float | None = None) -> dict:
    """The task's result from its evaluation folder, written last (`tasks/<id>/result.json`);
    `seconds`: the task's own (default: since `t0`)."""
    result = {"task": tid, "status": "trained", **ranked_attempts(work / "eval", tid, cfg.poe),
              "steps": summary.get("steps"), "train_seconds": round(train_s, 3),
              "loop_seconds": round(summary.get("wall_time_s") or train_s, 3), "build_seconds": round(build_s, 3),
              "evaluate_seconds": round(eval_s, 3),
              "seconds": round(time.monotonic() - t0 if seconds is None else seconds, 3),
              "train_minutes_given": None if not math.isfinite(summary.get("minutes", math.inf))
              else round(summary["minutes"], 4)}
    if len(tasks) > 1:  # the pseudo-tasks' held-out demonstrations, scored by each rule
        result["leave_one_out"] = loo_scores(work / "eval", cfg.poe, len(tasks) - 1)
    fill_attempts(result, task)
    plan.write_result(Path(cfg.output_dir), tid, result)  # last: its presence means finished
    if not cfg.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return result


def solve_by_commands(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float, work: Path) -> dict:
    """The command route (build-arc, then `train`/`train-vit init_from=...` and `evaluate` through
    the CLI with override strings, as ttt ran each task before `inprocess`): the reference the
    in-process path is tested against (tests/test_pertask_build_inprocess.py)."""
    t0 = time.monotonic()
    tasks, chal = build_task(cfg, tid, task, work)
    build_s = time.monotonic() - t0
    name, train, evaluate = commands(cfg, work, train_minutes, tasks, chal)
    t_train = time.monotonic()
    run_command(name, train, tid)
    train_s = time.monotonic() - t_train
    summary = parse_json((work / "run" / "summary.json").read_bytes(), "summary.json")
    t_eval = time.monotonic()
    batch = []
    if not any(o.startswith("global_batch_size=") for o in cfg.eval_overrides):
        batch = [f"global_batch_size={eval_batch(work / 'data')}"]
    run_command("evaluate", [*batch, *evaluate], tid)
    summary["minutes"] = train_minutes
    return finish_build(cfg, tid, task, tasks, work, summary, train_s, build_s, time.monotonic() - t_eval, t0)


def run_command(name: str, args: list[str], tid: str) -> None:
    """One of the task's commands, in this process; a non-zero exit raised as the task's own failure,
    or as one from outside when a signal ended it (the error line's errno is judged by `solve`)."""
    from hrm_deeploop.cli import run_subcommand  # lazy: the CLI's command table imports this package

    rc = run_subcommand(name, args)
    if rc >= 128:
        raise OutsideFailure(f"task {tid}: {name} ended by signal {rc - 128}")
    if rc != 0:
        raise TaskFailed(f"task {tid}: {name} exited {rc}")


def fill_attempts(result: dict, task: dict) -> None:
    """Each rule's two attempts per test input: its first two ranked candidates that are valid ARC
    grids, the test input for each one missing (the fallback; `[[0]]` is never right). A task with a
    test input that has no valid grid at all is `trained-no-grid`; `fallback_attempts` counts the
    attempts filled in."""
    filled = 0
    no_grid = False
    for sfx in ("", "_poe"):
        if "ranked" + sfx not in result:
            continue
        attempts = []
        for i, t in enumerate(task["test"]):
            ranked = result["ranked" + sfx][i] if i < len(result["ranked" + sfx]) else []
            valid = [g for g in ranked if plan.is_grid(g)][:2]
            no_grid |= not valid
            filled += 2 - len(valid)
            valid += [t["input"]] * (2 - len(valid))
            attempts.append({"attempt_1": valid[0], "attempt_2": valid[1]})
        result["attempts" + sfx] = attempts
    result["fallback_attempts"] = filled
    if no_grid and result["status"] == "trained":
        result["status"] = "trained-no-grid"


def ranked_attempts(folder: Path, tid: str, poe: bool) -> dict:
    """The task's attempts and ranked candidate grids (best first, per test input) by each scoring
    rule, from evaluate's tasks.json (count-first) and poe.json (product of experts); an empty
    grid (a prediction that decodes to none) is no candidate, as in the submission."""
    sub = parse_json((folder / "submission.json").read_bytes(), "submission.json")
    tests = parse_json((folder / "tasks.json").read_bytes(), "tasks.json")["tasks"][tid]["test_inputs"]
    out = {"attempts": sub[tid], "ranked": [[c["grid"] for c in t["candidates"] if c["grid"]] for t in tests]}
    if poe:
        sub = parse_json((folder / "submission_poe.json").read_bytes(), "submission_poe.json")
        tests = parse_json((folder / "poe.json").read_bytes(), "poe.json")["tasks"][tid]
        out |= {"attempts_poe": sub[tid], "ranked_poe": [[c["grid"] for c in t["candidates"] if c["grid"]] for t in tests]}
    return out


def loo_scores(folder: Path, poe: bool, count: int) -> dict:
    """pass@1 and pass@2 of the pseudo-tasks (the only labelled tasks of the task's build) by each
    rule: how often the task's copy predicts a demonstration from the others."""
    at_k = {"count-first": parse_json((folder / "pass_at_k.json").read_bytes(), "pass_at_k.json")}
    if poe:
        at_k["poe"] = parse_json((folder / "poe.json").read_bytes(), "poe.json")["pass_at_k"]
    return {"pseudo_tasks": count, **{rule: {f"pass@{k}": s["hrm"][str(k)] for k in (1, 2)} for rule, s in at_k.items()}}
