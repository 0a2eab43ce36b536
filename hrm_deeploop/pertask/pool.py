"""The tasks of one shard, `cfg.workers` at a time, each in a worker process of a local pool,
under the set's clock (`budget`): a task starts with its window and its training share; at the
set's end a task still running is stopped and submits the fallback; a task's own failure is
recorded and finished, a failure from outside it (a full disk, a signal, a killed worker) is
recorded as `error`, not finished, and makes the command exit non-zero.

Workers die with this process (`worker.die_with`): a `kill -9` of ttt leaves none training."""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from hrm_deeploop.pertask import plan, worker
from hrm_deeploop.pertask.budget import Clock, Outside, time_left, window
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

WARM_S = 300.0  # at most this long for the workers to start


@dataclass
class Running:
    tid: str
    started: float  # time.time()
    window_end: float  # time.time() by which the task was planned to end
    rows: int


def rows_of(cfg: PerTaskConfig, task: dict) -> int:
    """The rows a task's evaluate predicts, up to a factor shared by every task of the set: its
    views times its test inputs (and its pseudo-tasks' held-out demonstrations)."""
    demos = len(task["train"])
    return (cfg.num_aug + 1) * (len(task["test"]) + (demos if cfg.leave_one_out and demos > 1 else 0))


def run_shard(cfg: PerTaskConfig, index: int, count: int, tasks: dict[str, dict] | None = None,
              start: float | None = None) -> dict:
    """The tasks of shard `index` of `count`; `start`: time.time() at which the set's clock started."""
    tasks = tasks if tasks is not None else plan.load_challenges(cfg.challenges)
    out = Path(cfg.output_dir)
    clock = Clock(cfg.time_budget, start if start is not None else time.time(), scores=bool(cfg.solutions))
    mine = plan.shard(list(tasks), index, count)
    pending = deque(t for t in mine if plan.finished(out, t) is None)
    workers = min(cfg.workers, max(len(pending), 1))
    threads = cfg.threads or max(1, (os.cpu_count() or 1) // workers)
    where = f" (shard {index} of {count})" if count > 1 else ""
    budget = "" if cfg.time_budget is None else (f", budget {cfg.time_budget:g} min (tasks end by then less "
                                                 f"{clock.reserve_s:.0f} s kept for the merge)")
    print(f"ttt: {len(mine)} tasks{where}: {len(mine) - len(pending)} already finished, {len(pending)} to run on "
          f"{workers} worker(s) x {threads} thread(s){budget}", flush=True)
    counts: dict[str, int] = {}
    if not pending:
        return counts
    return Shard(cfg, tasks, out, clock, workers, threads, counts).run(pending)


class Shard:
    """The pool loop of `run_shard`."""

    def __init__(self, cfg: PerTaskConfig, tasks: dict[str, dict], out: Path, clock: Clock, workers: int,
                 threads: int, counts: dict[str, int]) -> None:
        self.cfg, self.tasks, self.out, self.clock = cfg, tasks, out, clock
        self.workers, self.threads, self.counts = workers, threads, counts
        self.outside = Outside()
        self.natural: list[float] = []  # measured task seconds without a budget (outside + every step)
        self.done, self.total = 0, 0

    def new_pool(self) -> ProcessPoolExecutor:
        """A pool whose workers have started and imported what a task runs (torch, the trainer,
        evaluate) before the first task's window is planned: that start is no task's time."""
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Barrier(self.workers + 1)
        pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=worker.init_worker,
                                   initargs=(self.threads, os.getpid(), ready, self.cfg))
        t0 = time.time()
        for _ in range(self.workers):  # Python starts a pool's processes as tasks arrive
            pool.submit(int)
        with contextlib.suppress(threading.BrokenBarrierError):  # a worker that died starting: the pool says so
            ready.wait(timeout=max(1.0, min(WARM_S, self.clock.end - time.time())))
        print(f"ttt: {self.workers} worker(s) started in {time.time() - t0:.1f} s", flush=True)
        return pool

    def run(self, pending: deque) -> dict[str, int]:
        self.total = len(pending)
        pool = self.new_pool()
        running: dict = {}
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    self.start(pool, pending, running)
                if not running:
                    break
                left = self.clock.end - time.time()
                finished, _ = wait(running, timeout=max(left, 0.0) if math.isfinite(left) else None,
                                   return_when=FIRST_COMPLETED)
                if not finished and time.time() >= self.clock.end:
                    stop(pool)
                    for r in running.values():
                        self.fall_back(r.tid, "time budget spent while it ran: stopped")
                    running.clear()
                    while pending:
                        self.fall_back(pending.popleft(), "time budget spent before it started")
                    break
                broken = False
                for fut in finished:
                    broken |= self.collect(fut, running.pop(fut), running, pending)
                if broken:  # a worker died: the executor is of no more use; its other tasks are counted there
                    stop(pool)
                    pool = self.new_pool()
        except BaseException:  # Ctrl-C / SIGTERM: stop the workers now; finished tasks stay finished
            stop(pool)
            raise
        stop(pool)  # every task has ended: no need to wait for the workers' teardown (seconds with torch loaded)
        return self.counts

    def start(self, pool: ProcessPoolExecutor, pending: deque, running: dict) -> None:
        tid = pending.popleft()
        now = time.time()
        rows = rows_of(self.cfg, self.tasks[tid])
        busy = [r.window_end for r in running.values()]
        # the equal share of the tasks left; when that is too short to train, the share of fewer (the
        # tasks the budget cannot reach then submit the fallback when their turn comes)
        for planned in range(len(pending) + 1, 0, -1):
            win = window(now, self.clock.end, planned, busy, self.workers)
            train_s = win - self.outside.estimate(rows, win)
            if train_s >= 60 * self.cfg.min_task_minutes:
                break
        if train_s < 60 * self.cfg.min_task_minutes:
            self.fall_back(tid, f"time budget spent before it started ({max(train_s, 0) / 60:.2f} min of training "
                                f"left, min_task_minutes={self.cfg.min_task_minutes:g})")
            return
        fut = pool.submit(worker.solve, self.cfg, tid, self.tasks[tid], train_s / 60)
        running[fut] = Running(tid, now, now + win, rows)

    def collect(self, fut, r: Running, running: dict, pending: deque) -> bool:
        """A task's end: its result, its own failure, or a failure from outside it. True when the
        pool broke (a worker died), after counting every task that was running in it."""
        broken = False
        try:
            res = fut.result()
        except worker.TaskFailed as e:  # the task's own failure: its fallback, named, finished
            res = {"task": r.tid, "status": "failed", "reason": plan.clip(str(e), 300),
                   "attempts": plan.fallback_attempts(self.tasks[r.tid])}
            self.write(r.tid, res)
            note = f"failed: {first_line(e)}"
        except (worker.OutsideFailure, BrokenProcessPool, OSError, MemoryError) as e:
            broken = isinstance(e, BrokenProcessPool)
            why = "its worker died (killed by a signal, or out of memory)" if broken else first_line(e)
            res = self.error(r.tid, why)
            note = f"error outside the task, retried on a rerun: {why}"
            if broken:
                for other in list(running):
                    o = running.pop(other)
                    self.error(o.tid, "its pool's worker died")
                    self.counts["error"] = self.counts.get("error", 0) + 1
                    self.tell(o.tid, "error outside the task, retried on a rerun: its pool's worker died", o,
                              running, pending)
        else:
            self.outside.record(res, r.rows)
            if res.get("steps") and res.get("loop_seconds") is not None:
                per_step = res["loop_seconds"] / res["steps"]
                self.natural.append(res["seconds"] - res["loop_seconds"] + self.cfg.steps * per_step)
            note = plan.task_note(res)
        self.counts[res["status"]] = self.counts.get(res["status"], 0) + 1
        self.tell(r.tid, note, r, running, pending)
        return broken

    def tell(self, tid: str, note: str, r: Running, running: dict, pending: deque) -> None:
        self.done += 1
        given = r.window_end - r.started
        shown = "" if not math.isfinite(given) else f", {given / 60:.2f} min given"
        natural = sum(self.natural) / len(self.natural) if self.natural else None
        now = time.time()
        ends = [min(o.window_end, o.started + natural) if natural else o.window_end for o in running.values()]
        eta = time_left(now, ends, len(pending), natural, self.workers, self.clock.end)
        eta = None if eta is None else eta + self.clock.reserve_s  # the merge after the last task
        to_go = "time to go: after a task has trained" if eta is None else f"about {eta / 60:.1f} min to go"
        print(f"ttt: [{self.done}/{self.total}] {tid}: {note}{shown}; {self.total - self.done} left, {to_go}",
              flush=True)

    def fall_back(self, tid: str, why: str) -> None:
        """A task the budget did not reach: its fallback attempts, retried by a rerun (not final)."""
        if plan.finished(self.out, tid) is not None:  # it wrote its result just before it was stopped
            return
        self.write(tid, {"task": tid, "status": "fallback", "reason": why,
                         "attempts": plan.fallback_attempts(self.tasks[tid])})
        self.counts["fallback"] = self.counts.get("fallback", 0) + 1
        self.done += 1
        print(f"ttt: [{self.done}/{self.total}] {tid}: {why}: fallback attempts", flush=True)

    def error(self, tid: str, why: str) -> dict:
        res = {"task": tid, "status": "error", "reason": plan.clip(why, 300), "attempts": plan.fallback_attempts(self.tasks[tid])}
        self.write(tid, res)
        return res

    def write(self, tid: str, res: dict) -> None:
        try:
            plan.write_result(self.out, tid, res)
        except OSError as e:  # a full disk: the task stays without a result, so unfinished; the merge falls back
            print(f"ttt: {tid}: could not record its result ({e.strerror or e}); it will be retried", flush=True)


def first_line(e: BaseException) -> str:
    return plan.clip(str(e).splitlines()[0], 200) if str(e) else type(e).__name__


def stop(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (SIGKILL: a task's trainer would hold a SIGTERM until its step ends)."""
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        p.kill()
    pool.shutdown(wait=False, cancel_futures=True)
