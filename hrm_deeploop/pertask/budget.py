"""The whole set's time budget, torch-free: when the set must end, how long each task's window is,
how much of it is training, and the estimate of the time left.

- The set ends at `start + budget - reserve` (`Clock.end`): the reserve keeps time for the merge,
  the summary and the scores after the last task (`RESERVE_FRACTION` of the budget, at least
  `RESERVE_MIN_S`, and `SCORE_S` more with solutions). A task still running then is stopped (its
  worker killed) and submits the fallback, so the command ends within its budget whatever a task does.
- A task's window is an equal share of the worker-time left: the tasks still to start spread over
  the worker slots, each free now or when its running task's window ends (`window`).
- A task's training gets its window less what it spends outside the training loop: its build, the
  start of its `train`, its `evaluate` (prediction and vote) and the write of its result.
  `Outside` estimates that from the tasks finished (the fixed part, and the prediction per test
  row, each the mean over the tasks seen, padded by `PAD`); before any task has finished, it
  reserves `PRIOR_FRACTION` of the window.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

RESERVE_FRACTION, RESERVE_MIN_S, SCORE_S = 0.02, 3.0, 4.0
PRIOR_FRACTION = 0.4  # of a window, kept outside training until a task has been measured
PAD = 1.15  # on the measured means: a task's prediction varies with the machine's load
RECENT = 4  # tasks the estimate averages over


def process_start() -> float:
    """time.time() at which this process started (Linux: /proc; elsewhere: now), so that the budget
    also counts Python's start and the imports before ttt runs."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the command name
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


@dataclass
class Clock:
    budget_min: float | None
    start: float  # time.time() when ttt started
    scores: bool = False  # solutions given: scoring runs after the merge

    @property
    def reserve_s(self) -> float:
        if self.budget_min is None:
            return 0.0
        return max(RESERVE_MIN_S, RESERVE_FRACTION * 60 * self.budget_min) + (SCORE_S if self.scores else 0.0)

    @property
    def end(self) -> float:
        """time.time() by which every task has ended (inf without a budget)."""
        return math.inf if self.budget_min is None else self.start + 60 * self.budget_min - self.reserve_s


def window(now: float, end: float, to_start: int, busy_until: list[float], workers: int) -> float:
    """Seconds for the next task's whole life: the largest equal share s such that the `to_start`
    tasks (this one included) fit in the worker slots, this one free now, the others free now or
    at `busy_until` (their running tasks' window ends): sum over slots of floor((end - free) / s)."""
    if not math.isfinite(end):
        return math.inf
    free = [now] + sorted(max(now, b) for b in busy_until)[:workers - 1]
    free += [now] * (workers - len(free))
    left = end - now
    if left <= 0:
        return 0.0

    def fits(s: float) -> bool:
        return sum(math.floor((end - f) / s + 1e-9) for f in free if end > f) >= to_start

    lo, hi = 0.0, left
    if fits(hi):
        return hi
    for _ in range(60):  # fits() is monotone in s
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@dataclass
class Outside:
    """Seconds a task spends outside its training loop, estimated from the tasks finished."""

    fixed: list[float] = field(default_factory=list)  # build, train start and end, result, per task
    per_row: list[float] = field(default_factory=list)  # evaluate seconds per test row (views x test inputs)

    def record(self, result: dict, rows: int) -> None:
        loop = result.get("loop_seconds")
        if loop is None or "evaluate_seconds" not in result:
            return
        evaluate = result["evaluate_seconds"]
        self.fixed.append(max(result["seconds"] - loop - evaluate, 0.0))
        self.per_row.append(evaluate / max(rows, 1))

    @property
    def measured(self) -> bool:
        return bool(self.fixed)

    def estimate(self, rows: int, window_s: float) -> float:
        """The mean of the latest `RECENT` tasks (the machine's load drifts), padded; before any, a
        fraction of the window."""
        if not self.fixed:
            return PRIOR_FRACTION * window_s
        fixed, per_row = self.fixed[-RECENT:], self.per_row[-RECENT:]
        return PAD * (sum(fixed) / len(fixed) + rows * sum(per_row) / len(per_row))


def time_left(now: float, running_ends: list[float], to_start: int, natural_s: float | None, workers: int,
              end: float) -> float | None:
    """Seconds until the last task ends, as the pool will run them: running tasks end at their
    expected ends; each task still to start goes to the first free slot with the window it will get
    there (`window`), lasting `natural_s` (a task's measured length without a budget) or its window if
    shorter; never past `end`. None before any task has been measured (nothing to go by)."""
    if natural_s is None:
        return None if to_start or not running_ends else max(0.0, min(max(running_ends), end) - now)
    slots = sorted([max(now, e) for e in running_ends] + [now] * max(0, workers - len(running_ends)))[:workers]
    for left in range(to_start, 0, -1):
        free = slots[0]
        w = window(free, end, left, slots[1:], workers)
        slots[0] = free + min(natural_s, w)
        slots.sort()
    return max(0.0, min(max(slots), end) - now)
