"""`ttt views=official` with many tasks' copies at once (`official.copies`, K): one process trains
K tasks' copies together (`copies.Copies`) and predicts each as soon as it is trained
(docs/per-task.md#many-copies-at-once).

- Built once per process: the start model (the checkpoint read once, its fresh task table), the
  stacked copies and their template, the prediction model. A task then costs its views, its steps
  and its prediction; nothing is rebuilt or re-read.
- Lanes: K slots. A task takes a free lane and runs there to its end, its `official.runs` runs in
  turn, exactly the order of `official_ttt.run_task` (one task): the numpy stream
  `default_rng([seed, 1])` drawing the epochs' orders and canvases, then each run's prediction
  passes; the lane's dropout generator seeded by `official_ttt.torch_seed(seed)` at the task's start
  and continuing across its runs; each run from the start weights with fresh AdamW moments. Each
  lane keeps its own epoch, learning rate (the official per-epoch warm-up and cosine) and step count,
  so tasks of different sizes share a step: a lane whose epoch ends mid-batch is padded with rows
  that teach nothing. When a lane's task ends, its result is written (`tasks/<id>/result.json`, last,
  atomically) and the next task takes the lane.
- Early stop (`official.stop_after`): each lane keeps its run's `official_ttt.Fit` from its copy's
  exact rows and argmax canvases (`Copies.step`); at an epoch's end, before the next epoch is drawn,
  the run ends where the lone loop's would, so the results stay the lone loop's bit for bit.
- A task's own failure (a grid its canvas cannot hold, a task the views cannot be built for) is
  recorded as `failed` with the fallback attempts; its batch-mates go on. A kill of the process keeps
  every written result: a rerun skips them and redoes the rest.
- `time_budget`: a task starting in a lane gets the equal share of the time left over the lanes
  (`budget.window`), spread over its runs; a run stops after the step that passes its share and still
  predicts; a task that cannot get `min_task_minutes` falls back.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from hrm_deeploop.pertask import plan, sizing
from hrm_deeploop.pertask.budget import Clock
from hrm_deeploop.pertask.copies import Copies, bytes_per_copy, probe_step
from hrm_deeploop.pertask.official_ttt import (
    Fit,
    eval_batches,
    predict,
    run_log,
    score_task,
    start_model,
    torch_seed,
    train_batches,
)
from hrm_deeploop.pertask.official_views import OfficialView, build_views, epoch_lr_factor
from hrm_deeploop.pertask.pool import run_shard as one_at_a_time
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from hrm_deeploop.pertask.worker import fill_attempts

# official.copies=0: at most this many lanes whatever the memory. CPU: a copy-step costs what a lone step
# does (docs/benchmarks.md), so more lanes only delay every task's result; CUDA: past the GPU's
# saturation a step's time grows with K, and the per-copy ops' Python loops too
AUTO_MAX = {"cpu": 8, "cuda": 64}


@dataclass
class Job:
    """One task for a lane: its id, its task (test answers removed), and its training seconds."""

    tid: str
    task: dict
    train_s: float = math.inf


@dataclass
class Lane:
    job: Job
    views: list[OfficialView]
    rng: np.random.Generator
    started: float
    run: int = 0
    batches: Iterator | None = None
    run_deadline: float = math.inf
    losses: list[float] = field(default_factory=list)
    epoch: int = 0
    stop: bool = False  # the run's deadline passed
    fit: Fit = field(default_factory=Fit)
    why: str = "schedule"  # why the run ended: schedule | fit | deadline
    records: list[dict] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)
    train_s: float = 0.0  # its share of the steps, and its batches drawn
    predict_s: float = 0.0
    build_s: float = 0.0


class BudgetSpent(RuntimeError):
    """A task whose share of the time budget is below min_task_minutes: not trained."""


class Engine:
    """K lanes over one start model (module docstring). `run(jobs, done)` calls `done(job, result,
    error)` once per job, in the order they end."""

    def __init__(self, start, k: int, device: torch.device, *, epochs: int, batch: int, lr: float, runs: int,
                 passes: int, pool: bool, poe: bool, seed: int, views_of: Callable[[Job], list[OfficialView]],
                 stop_after: int = 0, stop_share: float = 1.0, stop_fit: str = "exact"):
        self.k, self.device, self.epochs, self.batch, self.lr = k, device, epochs, batch, lr
        self.fit = (stop_after, stop_share, stop_fit)  # official.stop_*: a run's early stop (official_ttt.Fit)
        self.runs, self.passes, self.pool, self.poe, self.seed = runs, passes, pool, poe, seed
        self.views_of = views_of
        self.size = start.cfg.image_size
        self.copies = Copies(start, k, device, lr)
        self.solo = copy.deepcopy(start).to(device).eval()
        self.step_s = 0.0  # seconds in training steps (all lanes)
        self.draw_s = 0.0  # seconds drawing the lanes' batches
        self.min_train_s = 0.0  # a share below this: BudgetSpent

    def run(self, jobs: deque, done: Callable[[Job, dict | None, BaseException | None], None],
            share: Callable[[Job, int], float] | None = None) -> None:
        lanes: list[Lane | None] = [None] * self.k
        while True:
            batches: list[dict | None] = [None] * self.k
            lrs = [0.0] * self.k
            for i in range(self.k):
                while batches[i] is None and (lanes[i] is not None or jobs):
                    if lanes[i] is None:
                        job = jobs.popleft()
                        if share is not None:
                            job.train_s = share(job, sum(x is not None for x in lanes))
                        lanes[i] = self._open(i, job, done)
                        continue
                    t0, predicted = time.monotonic(), lanes[i].predict_s
                    try:
                        got = self._next(i, lanes[i])  # between runs it also predicts (predict_s)
                    except Exception as e:  # the task's own (its canvases): its batch-mates go on
                        done(lanes[i].job, None, e)
                        lanes[i] = None
                        continue
                    if got is None:  # the lane's task has ended
                        done(lanes[i].job, self._result(lanes[i]), None)
                        lanes[i] = None
                    else:
                        batches[i], lrs[i] = got
                        dt = time.monotonic() - t0 - (lanes[i].predict_s - predicted)  # drawing only
                        lanes[i].train_s += dt
                        self.draw_s += dt
            if all(b is None for b in batches):
                return
            t0 = time.monotonic()
            losses = self.copies.step(batches, lrs)
            dt = time.monotonic() - t0
            self.step_s += dt
            now = time.monotonic()
            stepping = [ln for ln, b in zip(lanes, batches) if b is not None]
            for ln, loss, exact, pred, b in zip(lanes, losses, self.copies.exact, self.copies.preds, batches):
                if ln is not None and loss is not None:
                    ln.losses.append(loss)
                    ln.fit.add(exact, len(b["canvas"]), pred, b)
                    ln.train_s += dt / len(stepping)
                    ln.stop = now > ln.run_deadline

    def _open(self, i: int, job: Job, done) -> Lane | None:
        t0 = time.monotonic()
        try:
            if job.train_s < self.min_train_s:
                raise BudgetSpent(f"time budget spent before it started ({max(job.train_s, 0) / 60:.2f} min of "
                                  "training left)")
            views = self.views_of(job)
        except Exception as e:
            done(job, None, e)
            return None
        lane = Lane(job, views, np.random.default_rng([self.seed, 1]), time.monotonic(), build_s=time.monotonic() - t0)
        self.copies.seed(i, torch_seed(self.seed))
        self._start_run(i, lane)
        return lane

    def _start_run(self, i: int, lane: Lane) -> None:
        self.copies.reset(i)
        lane.batches = _epochs(train_batches(lane.views, self.size, self.batch, lane.rng), self.epochs)
        # the task's share is wall time, and its lanes step together: what is left of it is the share less the
        # wall time the task has spent (its steps' K-th share, `train_s`, would give a later run too long)
        now = time.monotonic()
        left = lane.job.train_s - (now - lane.started)
        lane.run_deadline = now + left / (self.runs - lane.run) if math.isfinite(left) else math.inf
        lane.losses, lane.stop, lane.fit, lane.why = [], False, Fit(*self.fit), "schedule"

    def _next(self, i: int, lane: Lane) -> tuple[dict, float] | None:
        """The lane's next batch and learning rate; between runs, the run predicted and the next
        started; None when the task has ended."""
        while True:
            got = None if lane.stop else next(lane.batches, None)
            if got is not None and got[1] is None:  # the epoch's end, before the next is drawn
                if lane.fit.end_epoch() and got[0] < self.epochs:
                    lane.why = "fit"
                else:
                    continue
            elif got is not None:
                lane.epoch = got[0]
                return got[1], self.lr * epoch_lr_factor(got[0], self.epochs)
            if lane.stop:
                lane.why = "deadline"
            self._end_run(i, lane)
            lane.run += 1
            if lane.run == self.runs:
                return None
            self._start_run(i, lane)

    def _end_run(self, i: int, lane: Lane) -> None:
        t0 = time.monotonic()
        model = self.copies.solo(i, self.solo)
        preds = predict(model, eval_batches(lane.views, self.size, self.batch, self.passes, lane.rng), lane.views,
                        self.device, self.poe)
        if self.pool or lane.run == 0:
            lane.records += preds
        ls = lane.losses
        lane.log.append(run_log(ls, lane.epoch + 1 if ls else 0, lane.stop, lane.fit.log(lane.why)))
        lane.predict_s += time.monotonic() - t0

    def _result(self, lane: Lane) -> dict:
        t0 = time.monotonic()
        task = lane.job.task
        r = score_task(lane.records, lane.views, task, self.size, self.poe)
        lane.predict_s += time.monotonic() - t0
        return {"task": lane.job.tid, "status": "trained", "views": "official", **r, "runs": lane.log,
                "steps": sum(x["steps"] for x in lane.log), "train_seconds": round(lane.train_s, 3),
                "evaluate_seconds": round(lane.predict_s, 3), "build_seconds": round(lane.build_s, 3),
                "loop_seconds": round(lane.train_s, 3),
                "seconds": round(lane.train_s + lane.predict_s + lane.build_s, 3),
                "train_minutes_given": None if not math.isfinite(lane.job.train_s) else round(lane.job.train_s / 60, 4)}


def _epochs(epoch: Callable[[int], Iterator[dict]], epochs: int) -> Iterator[tuple[int, dict | None]]:
    """(epoch, batch) of epochs 0..epochs, each epoch closed by (epoch, None): its fit judged before
    the next epoch's order and canvases are drawn (the lone loop's order of draws)."""
    for e in range(epochs + 1):
        for b in epoch(e):
            yield e, b
        yield e, None


def lanes_for(cfg: PerTaskConfig, start, pending: int, device: torch.device) -> int:
    """official.copies, or (0) what fits: the footprint of a copy measured by a probe step at the run's
    shapes (`sizing`; where the peak cannot be read, the estimate `copies.bytes_per_copy`), half the
    available memory, at most AUTO_MAX of the device, at most the tasks to run."""
    if cfg.official.copies:
        return min(cfg.official.copies, max(pending, 1))
    o = cfg.official
    meter = sizing.Meter(device)
    fp = sizing.measure(lambda k, _: probe_step(start, k, device, o.batch, o.lr), device, meter)
    if fp is None:
        print("ttt: official.copies=0: the peak memory cannot be read here (no /proc/self/clear_refs): "
              "K from the estimate copies.bytes_per_copy", flush=True)
        fp = sizing.Footprint(bytes_per_copy(start, o.batch), 0, "estimated")
        meter.free = meter.available()
    return sizing.choose(fp, meter.free, AUTO_MAX.get(device.type, 8), pending, device, "official.copies=0")


def run_shard(cfg: PerTaskConfig, index: int, count: int, tasks: dict[str, dict] | None = None,
              start: float | None = None) -> dict[str, int]:
    """`pool.run_shard` for the batched path: the shard's unfinished tasks through one Engine in
    this process (`workers` is not used: the lanes are the parallelism)."""
    from hrm_deeploop import runtime  # lazy: torch's runtime only where it trains

    tasks = tasks if tasks is not None else plan.load_challenges(cfg.challenges)
    out = Path(cfg.output_dir)
    clock = Clock(cfg.time_budget, start if start is not None else time.time(), scores=bool(cfg.solutions))
    mine = plan.shard(list(tasks), index, count)
    pending = [t for t in mine if plan.finished(out, t) is None]
    counts: dict[str, int] = {}
    if not pending:
        print(f"ttt: {len(mine)} tasks: all finished", flush=True)
        return counts
    if len(pending) == 1:  # one lane: the lone loop, the same numbers, and a vmap of one copy steps 1.6x slower (CPU)
        return one_at_a_time(cfg, index, count, tasks, start)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    runtime.keep_freed_memory()  # the stacked copies' large tensors reuse the heap's pages (1.7x at canvas 32)
    env = runtime.setup(cfg.device)
    o = cfg.official
    try:
        t0 = time.monotonic()
        model = start_model(cfg.checkpoint, 1 + 5 * (1 + o.perms), cfg.seed, o.dropout)
        k = lanes_for(cfg, model, len(pending), env.device)
        if k > 1:
            _run_engine(cfg, model, k, env.device, tasks, mine, pending, clock, counts, t0)
    finally:
        runtime.teardown()
    if k == 1:  # one copy fits: the lone loop (the same numbers; a vmap of one copy steps slower)
        return one_at_a_time(cfg, index, count, tasks, start)
    return counts


def _run_engine(cfg: PerTaskConfig, model, k: int, device: torch.device, tasks: dict[str, dict], mine: list[str],
                pending: list[str], clock: Clock, counts: dict[str, int], t0: float) -> None:
    """The pending tasks through one Engine of `k` lanes; each result written as its task ends."""
    o, out = cfg.official, Path(cfg.output_dir)
    order = sorted(plan.load_challenges(cfg.challenges)) if cfg.challenges else sorted(tasks)
    views_of = lambda job: build_views(job.tid, job.task, order.index(job.tid), o.perms)  # noqa: E731
    engine = Engine(model, k, device, epochs=o.epochs, batch=o.batch, lr=o.lr, runs=o.runs,
                    passes=cfg.passes, pool=o.pool, poe=cfg.poe, seed=cfg.seed, views_of=views_of,
                    stop_after=o.stop_after, stop_share=o.stop_share, stop_fit=o.stop_fit)
    print(f"ttt: {len(mine)} tasks: {len(mine) - len(pending)} already finished, {len(pending)} to run as "
          f"{k} copies at once (official.copies={o.copies or 'auto'}), {torch.get_num_threads()} thread(s), "
          f"device={device}, built in {time.monotonic() - t0:.1f} s", flush=True)
    jobs = deque(Job(t, {"train": tasks[t]["train"], "test": [{"input": x["input"]} for x in tasks[t]["test"]]})
                 for t in pending)
    state = {"done": 0}

    def share(job: Job, busy: int) -> float:
        """The equal share of the time left of the tasks not yet started, over the lanes, less a
        tenth for its prediction."""
        return 0.9 * (clock.end - time.time()) / math.ceil((len(jobs) + 1) / k)

    def done(job: Job, result: dict | None, error: BaseException | None) -> None:
        state["done"] += 1
        if isinstance(error, BudgetSpent):
            result = {"task": job.tid, "status": "fallback", "reason": str(error),
                      "attempts": plan.fallback_attempts(tasks[job.tid])}
            note = f"{error}: fallback attempts"
        elif error is not None:
            why = f"{type(error).__name__}: {error}" if not str(error).startswith("views=") else str(error)
            result = {"task": job.tid, "status": "failed", "reason": plan.clip(why, 300),
                      "attempts": plan.fallback_attempts(tasks[job.tid])}
            note = f"failed: {plan.clip(why, 200)}"
        else:
            fill_attempts(result, tasks[job.tid])
            note = plan.task_note(result)
        plan.write_result(out, job.tid, result)  # last: its presence means finished
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        print(f"ttt: [{state['done']}/{len(pending)}] {job.tid}: {note}", flush=True)

    engine.min_train_s = 60 * cfg.min_task_minutes if cfg.time_budget is not None else 0.0
    engine.run(jobs, done, share if cfg.time_budget is not None else None)
