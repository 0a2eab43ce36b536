"""`ttt views=build` with many tasks' copies at once (`copies`, K): one process keeps K lanes busy,
each lane one task's trainer (docs/per-task.md#many-copies-at-once-viewsbuild).

A task takes a free lane: its views built (`inprocess.build_task`), its trainer built in-process
(`inprocess.build_trainer`: the family's own trainer, from the checkpoint read once and the configs
composed once), then stepped with its batch-mates until its steps are done or its time share has
passed (checked before each step, as `inprocess.train_alone`); then its weights go back into its
trainer, it is predicted and voted in-process (`inprocess.evaluate_trained`), its result is written
last (`tasks/<id>/result.json`) and the next task takes the lane. A kill keeps every written
result: a rerun skips them. A task's own failure (its data, a refusal, a diverged loss) is
recorded as `failed` with the fallback attempts and its batch-mates go on; a failure from outside
(disk, memory) is recorded as `error` and retried by a rerun.

The lanes contract (a family's "lanes" class, its entry's `Family.lanes`):

    lanes = Cls(k, device)
    lanes.open(lane: int, trainer)    # a task's lone trainer (built as in inprocess.py, not yet
                                      # stepped) takes the lane; AssertionError / ValueError (e.g.
                                      # reasoner_copies.Unsupported): refused, nothing changed
    lanes.step() -> dict[int, float]  # one optimiser step of every open lane, each on its own
                                      # trainer's next batch with its own schedule; each lane's loss
    lanes.close(lane) -> None         # the lane's trained weights written back into its trainer's
                                      # model (ready for the in-process prediction); the lane freed
    lanes.fits(trainer) -> str | None # optional: why this trainer cannot take a lane of this set
    lanes.diverged: dict[int, str]    # optional: lanes whose last step was not finite, and why

A lane's numbers must not depend on its batch-mates. A trainer that does not fit the open lanes
waits until every lane is free, then starts a new set; a family without a lanes class runs K = 1
(`pool.py`, one task at a time per worker, in-process).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop.pertask import inprocess, plan, worker
from hrm_deeploop.pertask.budget import Clock
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

# copies=0: at most this many lanes whatever the memory. CPU: a copy-step costs about a lone step (the
# LoopViT gain was 1.42x at K = 2, 1.62x at 4: the start-up shared), so more lanes only delay every
# result and split a time budget finer; CUDA: past the GPU's saturation a step's time grows with K
AUTO_MAX = {"cpu": 4, "cuda": 32}


def lanes_class(fam) -> type | None:
    """The family entry's lanes class (`Family.lanes`, "module:Class"), None for a family without one."""
    if not fam.lanes:
        return None
    module, _, name = fam.lanes.partition(":")
    return getattr(importlib.import_module(module), name)  # a name from our own registry, never from data


def lanes_for(cfg: PerTaskConfig, pending: int) -> int:
    """K: `copies`, at most the tasks to run; 1 for a family without a lanes class or a single task;
    0 for copies=0: what fits, measured once the runtime is set up (`measured_lanes`)."""
    from hrm_deeploop import families  # lazy: the registry

    if lanes_class(families.of_checkpoint(cfg.checkpoint)) is None or pending <= 1:
        return 1
    return min(cfg.copies, pending) if cfg.copies else 0


def measured_lanes(cfg: PerTaskConfig, tasks: dict[str, dict], pending: deque, cls: type, env: Any) -> int:
    """copies=0: K from a lane's footprint measured on a probe (`probe`, `sizing`), half the available
    memory less what the worker keeps between tasks (`kept_between_tasks`), at most AUTO_MAX of the
    device and the tasks to run; where the probe cannot measure, six copies of the checkpoint file a
    lane (as `checks.check_views` counts a worker's), with a note."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch
    from hrm_deeploop.pertask import sizing  # lazy: torch

    meter = sizing.Meter(env.device)
    fp, why = None, "the peak memory cannot be read here (no /proc/self/clear_refs)"
    if meter.ok:
        try:
            fp, why = probe(cfg, tasks, pending, cls, env, meter)
        except NoLane as e:  # every task of this checkpoint would train alone: one at a time (the pool)
            print(f"ttt: copies=0: K = 1: this model takes no lane ({e}); its tasks train one at a time", flush=True)
            return 1
    if fp is None:
        print(f"ttt: copies=0: {why}: K from six times the checkpoint file a lane", flush=True)
        fp = sizing.Footprint(6 * ckpt.resolve(cfg.checkpoint).stat().st_size, 0, "estimated: 6 x the checkpoint file",
                              kept=kept_between_tasks(cfg, _state_bytes(inprocess.prepared(cfg).state), len(pending)))
        meter.free = meter.available()
    cuda = env.device.type == "cuda"
    return sizing.choose(fp, meter.free, AUTO_MAX["cuda" if cuda else "cpu"], len(pending), env.device, "copies=0")


def kept_between_tasks(cfg: PerTaskConfig, model_bytes: int, tasks: int) -> int:
    """Bytes the worker's `Reuse` may keep between these tasks whatever K (its evaluation models and
    fresh records, `Reuse.most_kept`; the lanes never hand a trainer's model back), for models of
    `model_bytes`; 0 where the worker keeps none."""
    from hrm_deeploop.training.reuse import Reuse  # lazy: torch

    return Reuse.most_kept(model_bytes, tasks, handed_back=False) if inprocess.prepared(cfg).reuse is not None else 0


def _state_bytes(state: dict) -> int:
    """Bytes of a train state's model tensors (the probe's stand-in where none ran)."""
    import torch  # lazy: torch

    return sum(t.numel() * t.element_size() for t in (state.get("model") or {}).values() if isinstance(t, torch.Tensor))


class NoLane(Exception):
    """A fresh set of lanes refused the probe's trainer: for what its model or optimiser is (LoopViT's
    dropout inside SDPA, train.ema; the reasoners' Muon, compile), never for its task, so no task of
    this checkpoint would take a lane either (`Engine.alone` would train each)."""


def probe(cfg: PerTaskConfig, tasks: dict[str, dict], pending: deque, cls: type, env: Any, meter: Any
          ) -> tuple[Any, str]:
    """(a lane's `sizing.Footprint`, "") measured on a probe trainer: the first of the pending tasks (up to
    three) whose views and trainer build, its trainer opened in 1 then 2 lanes of `cls` taking one step
    each; built in a folder of output_dir removed after, printing nothing. Every task's own trainer is
    built later from its own seed and files, so no result changes. (None, why) when no probe ran."""
    from hrm_deeploop.pertask import sizing  # lazy: torch
    from hrm_deeploop.training.reuse import model_bytes  # lazy: torch

    prep = inprocess.prepared(cfg)
    work = Path(cfg.output_dir) / f".probe-{os.getpid()}"
    why = "no probe"
    built: list[int] = []  # the probe trainer's model bytes: what each kept model of its kind takes
    for tid in list(pending)[:3]:

        def build(tid: str = tid) -> Any:
            group, chal = inprocess.build_task(cfg, tid, tasks[tid], work)
            train_cfg, _ = prep.task_configs(work, math.inf, group, chal, inprocess.eval_batch)
            trainer = inprocess.build_trainer(prep, train_cfg, env)
            built.append(model_bytes(trainer.model))
            return trainer

        def step_k(k: int, trainer: Any) -> None:
            lanes = cls(k, env.device)
            try:
                lanes.open(0, trainer)
            except (AssertionError, ValueError) as e:  # a fresh set refuses what the model is, never its task
                raise NoLane(str(e).split(": ", 1)[-1]) from None
            for i in range(1, k):
                lanes.open(i, trainer)
            lanes.step()

        shutil.rmtree(work, ignore_errors=True)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                fp = sizing.measure(step_k, env.device, meter, build)
            if fp is not None and built:
                fp.kept = kept_between_tasks(cfg, built[-1], len(pending))
            return fp, ""
        except NoLane:
            raise
        except Exception as e:  # noqa: BLE001 - the task's own failure (its run reports it) or the lanes' refusal
            why = f"the probe on {tid} failed ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return None, why


@dataclass
class Lane:
    tid: str
    work: Path
    log: Any  # its log file (what its build, trainer and evaluation print)
    group: dict = field(default_factory=dict)  # the task and its pseudo-tasks
    chal: Path | None = None
    trainer: Any = None
    train_cfg: Any = None
    eval_cfg: Any = None
    minutes: float = math.inf  # its training share
    opened: float = 0.0  # time.perf_counter() at its first step
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    build_s: float = 0.0
    train_s: float = 0.0  # building its trainer, and its share of the steps
    loop_s: float = 0.0  # its share of the steps
    refused: bool = False  # the open lanes refused it: it waits until every lane is free


class Engine:
    """K lanes of one family's trainers over the tasks of a shard (module docstring)."""

    def __init__(self, cfg: PerTaskConfig, tasks: dict[str, dict], cls: type, k: int, env: Any, clock: Clock,
                 said: Callable[[str, dict], None]):
        from hrm_deeploop.pertask.inprocess import prepared  # lazy: torch

        self.cfg, self.tasks, self.cls, self.k, self.env, self.clock, self.said = cfg, tasks, cls, k, env, clock, said
        self.prep = prepared(cfg)
        self.out = Path(cfg.output_dir)
        self.lanes = cls(k, env.device)
        self.slots: list[Lane | None] = [None] * k
        self.waiting: deque[Lane] = deque()
        self.used = False  # a lane of this set has been opened

    def run(self, pending: deque) -> None:
        while pending or self.waiting or any(self.slots):
            self.fill(pending)
            for i, ln in enumerate(self.slots):  # before a step: its steps done, or its share spent
                if ln is not None and (ln.steps >= ln.trainer.total_steps or
                                       time.perf_counter() - ln.opened >= 60.0 * ln.minutes):
                    self.finish(i)
            open_ = [i for i, ln in enumerate(self.slots) if ln is not None]
            if not open_:
                continue
            t0 = time.perf_counter()
            losses = self.lanes.step()
            dt = (time.perf_counter() - t0) / len(open_)
            for i in open_:
                ln = self.slots[i]
                ln.steps += 1
                ln.losses.append(losses[i])
                ln.train_s += dt
                ln.loop_s += dt
            for i, why in dict(getattr(self.lanes, "diverged", {}) or {}).items():
                self.fail(i, f"hrm-deeploop {self.prep.trainer}: error: training diverged: {why}")

    def fill(self, pending: deque) -> None:
        """Every free lane takes the next task that fits. Once every lane is free, a new set of lanes
        starts (for the shapes of the task that takes it); a trainer even a new set refuses trains
        alone (`alone`), as K = 1 does."""
        for i in range(self.k):
            while self.slots[i] is None:
                ln = self.next_lane(pending)
                if ln is None:
                    return
                fresh = not any(self.slots)
                if fresh and self.used:
                    self.lanes, self.used = self.cls(self.k, self.env.device), False
                try:
                    with self._to(ln):
                        self.lanes.open(i, ln.trainer)
                except (AssertionError, ValueError) as e:  # the lanes' refusal (`fits`, their own checks)
                    if fresh:
                        self.alone(ln, str(e))
                    else:
                        ln.refused = True
                        self.waiting.append(ln)
                    continue
                self.used = True
                ln.opened = time.perf_counter()
                self.slots[i] = ln

    def next_lane(self, pending: deque) -> Lane | None:
        """A waiting task that fits (any, once every lane is free), else the next pending one that
        fits (one that does not waits, at most K of them)."""
        fresh = not any(self.slots)
        for j, ln in enumerate(self.waiting):
            if fresh or (not ln.refused and self._fits(ln)):
                del self.waiting[j]
                return ln
        while pending and len(self.waiting) < self.k:
            ln = self.start(pending.popleft(), len(pending))
            if ln is None:
                continue
            if self._fits(ln):
                return ln
            self.waiting.append(ln)
        return None

    def alone(self, ln: Lane, why: str) -> None:
        """A trainer no lane holds, trained alone here (from its own generator state)."""
        from hrm_deeploop.pertask.inprocess import train_alone  # lazy: torch

        try:
            with self._to(ln):
                print(f"ttt: trained alone: {why}", file=sys.stderr)
                t0 = time.monotonic()
                summary = train_alone(ln.trainer, ln.train_cfg, self.prep.trainer)
        except Exception as e:  # noqa: BLE001 - judged by `verdict`
            self.failed(ln, e)
            return
        ln.steps, ln.loop_s = summary["steps"], summary["wall_time_s"]
        ln.train_s += time.monotonic() - t0
        self.complete(ln, summary["status"])

    def _fits(self, ln: Lane) -> bool:
        fits = getattr(self.lanes, "fits", None)
        return fits is None or fits(ln.trainer) is None

    @contextlib.contextmanager
    def _to(self, ln: Lane):
        with contextlib.redirect_stdout(ln.log), contextlib.redirect_stderr(ln.log):
            yield

    def start(self, tid: str, left: int) -> Lane | None:
        """The task's views and trainer (its share of the time first); None when it ended here."""
        from hrm_deeploop.pertask.inprocess import build_trainer  # lazy: torch

        root = plan.task_dir(self.out, tid)
        work = root / worker.WORK
        shutil.rmtree(work, ignore_errors=True)
        try:
            work.mkdir(parents=True)
            ln = Lane(tid, work, open(root / worker.LOG, "w"))
        except OSError as e:
            self.record(tid, "error", f"{root}: {e.strerror or e}")
            return None
        if self.clock.budget_min is not None:
            share = 0.9 * (self.clock.end - time.time()) / math.ceil((left + 1) / self.k)
            if share < 60 * self.cfg.min_task_minutes:
                ln.log.close()
                self.record(tid, "fallback", f"time budget spent before it started ({max(share, 0) / 60:.2f} min of "
                                             f"training left, min_task_minutes={self.cfg.min_task_minutes:g})")
                return None
            ln.minutes = share / 60
        try:
            with self._to(ln):
                t0 = time.monotonic()
                ln.group, ln.chal = inprocess.build_task(self.cfg, tid, self.tasks[tid], work)
                ln.build_s = time.monotonic() - t0
                t0 = time.monotonic()
                ln.train_cfg, ln.eval_cfg = self.prep.task_configs(work, ln.minutes, ln.group, ln.chal,
                                                                   inprocess.eval_batch)
                ln.trainer = build_trainer(self.prep, ln.train_cfg, self.env)
                ln.train_s = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001 - judged by `verdict`: the task's own, or from outside
            self.failed(ln, e)
            return None
        return ln

    def finish(self, i: int) -> None:
        """Lane i's task: weights back into its trainer, predicted, voted, its result written."""
        ln, self.slots[i] = self.slots[i], None
        self.lanes.close(i)
        self.complete(ln, "finished" if ln.steps >= ln.trainer.total_steps else "stopped")

    def complete(self, ln: Lane, status: str) -> None:
        from hrm_deeploop.pertask.inprocess import evaluate_trained  # lazy: torch

        summary = {"steps": ln.steps, "wall_time_s": ln.loop_s, "minutes": ln.minutes, "status": status}
        try:
            with self._to(ln):
                print(f"done: step {ln.steps}, {status}", file=sys.stderr)
                t0 = time.monotonic()
                evaluate_trained(self.prep, ln.trainer, ln.steps, ln.eval_cfg, ln.work, self.cfg.keep_work)
                eval_s = time.monotonic() - t0
                res = worker.finish_build(self.cfg, ln.tid, self.tasks[ln.tid], ln.group, ln.work, summary, ln.train_s,
                                          ln.build_s, eval_s, t0, seconds=ln.build_s + ln.train_s + eval_s)
        except Exception as e:  # noqa: BLE001 - judged by `verdict`
            self.failed(ln, e)
            return
        ln.log.close()
        self.said(ln.tid, res)

    def fail(self, i: int, why: str) -> None:
        ln, self.slots[i] = self.slots[i], None
        self.lanes.close(i)
        self.failed(ln, worker.TaskFailed(why))

    def failed(self, ln: Lane, e: BaseException) -> None:
        status, why = verdict(e)
        with contextlib.suppress(OSError):
            print(f"ttt: {ln.tid}: {why}", file=ln.log)
            ln.log.close()
        self.record(ln.tid, status, f"{why} (log: {plan.task_dir(self.out, ln.tid) / worker.LOG})")

    def record(self, tid: str, status: str, why: str) -> None:
        res = {"task": tid, "status": status, "reason": plan.clip(why, 300), "attempts": plan.fallback_attempts(self.tasks[tid])}
        try:
            plan.write_result(self.out, tid, res)
        except OSError as e:  # a full disk: the task stays unfinished; the merge falls back
            print(f"ttt: {tid}: could not record its result ({e.strerror or e}); it will be retried", flush=True)
        self.said(tid, res)


def verdict(e: BaseException) -> tuple[str, str]:
    """(status, reason): `error` for a failure from outside the task (disk, memory; retried by a
    rerun), else `failed` (the task's own; finished)."""
    outside = isinstance(e, (OSError, MemoryError, worker.OutsideFailure)) or bool(worker.OUTSIDE.search(f"{e}"))
    return ("error" if outside else "failed"), (str(e).splitlines()[0][:300] if str(e) else type(e).__name__)


def run_shard(cfg: PerTaskConfig, index: int, count: int, tasks: dict[str, dict] | None = None,
              start: float | None = None) -> dict[str, int]:
    """`pool.run_shard` with K lanes in this process (`workers` is not used: the lanes are the
    parallelism); K = 1 (or a family without lanes): `pool.run_shard`."""
    import torch  # lazy: torch where it trains

    from hrm_deeploop import families, runtime  # lazy: torch
    from hrm_deeploop.pertask.pool import run_shard as one_at_a_time  # lazy: the pool's processes

    tasks = tasks if tasks is not None else plan.load_challenges(cfg.challenges)
    out = Path(cfg.output_dir)
    mine = plan.shard(list(tasks), index, count)
    pending = deque(t for t in mine if plan.finished(out, t) is None)
    k = lanes_for(cfg, len(pending))  # 0: measured below
    if k == 1:
        return one_at_a_time(cfg, index, count, tasks, start)
    clock = Clock(cfg.time_budget, start if start is not None else time.time(), scores=bool(cfg.solutions))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    counts: dict[str, int] = {}
    state = {"done": 0}

    def said(tid: str, res: dict) -> None:
        state["done"] += 1
        counts[res["status"]] = counts.get(res["status"], 0) + 1
        note = f"{res['status']}, {res['reason']}" if res.get("reason") else plan.task_note(res)
        print(f"ttt: [{state['done']}/{total}] {tid}: {note}", flush=True)

    total = len(pending)
    runtime.keep_freed_memory()  # the stacked copies' large tensors reuse the heap's pages (runtime's docstring)
    env = runtime.setup(cfg.device)
    try:
        t0 = time.monotonic()
        cls = lanes_class(families.of_checkpoint(cfg.checkpoint))
        if k == 0:
            k = measured_lanes(cfg, tasks, pending, cls, env)
        if k > 1:
            engine = Engine(cfg, tasks, cls, k, env, clock, said)
            print(f"ttt: {len(mine)} tasks: {len(mine) - total} already finished, {total} to run as {k} copies at "
                  f"once (copies={cfg.copies or 'auto'}), {torch.get_num_threads()} thread(s), device={env.device}, "
                  f"built in {time.monotonic() - t0:.1f} s", flush=True)
            engine.run(pending)
    finally:
        runtime.teardown()
    if k == 1:  # only one copy fits: one at a time
        return one_at_a_time(cfg, index, count, tasks, start)
    return counts
