"""Recurrence depth chosen per training step (the `depth.*` section of train-gpt): the R a step
loops, the rounds it back-propagates through, and the R whose N = K*R sets DeepLoop's alpha and
beta (docs/generation.md derives it). Not the depth accounting of `models/scaling.py` (N, M of a
model config), which this only feeds an R.

| depth.sampler       | R at step s                                                               |
|---------------------|---------------------------------------------------------------------------|
| fixed (default)     | model.num_rounds (training as before, bit for bit)                         |
| uniform             | uniform integer in [depth.min_rounds, depth.max_rounds]                   |
| lognormal_poisson   | 1 + Poisson(lam), lam ~ LogNormal(log(m - 1) - sigma^2/2, sigma): E[R] = m  |
|                     | (Huginn's heavy-tailed draw; m = depth.mean_rounds, capped at max_rounds)  |
| schedule            | depth.schedule_rounds[i] for the last i with schedule_steps[i] <= s        |

Draws come from `numpy.random.default_rng([seed, step])`: a function of the run's seed and the
step alone, so every DDP rank loops the same R in a step without communicating, and a resumed
run draws what the uninterrupted one drew. `depth.backprop_rounds=k` keeps only the last min(k, R)
rounds on the autograd tape (Huginn's `mean_backprop_depth`).

Torch-free: the trainer and `eval-gpt` (which rebuilds alpha/beta from a checkpoint) both read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hrm_deeploop.typed_config import at_least, check, one_of, positive, typed

SAMPLERS = ("fixed", "uniform", "lognormal_poisson", "schedule")
SCALING_N = ("fixed", "mean", "max")


@dataclass
class DepthConfig:
    sampler: str = "fixed"  # fixed | uniform | lognormal_poisson | schedule
    min_rounds: int = 1  # uniform: the smallest R
    max_rounds: int | None = None  # uniform: the largest R; lognormal_poisson: a cap (null: none)
    mean_rounds: float = 3.0  # lognormal_poisson: E[R] (> 1)
    sigma: float = 0.5  # lognormal_poisson: the log-normal's sigma (Huginn's 0.5)
    schedule_steps: list[int] = field(default_factory=list)  # schedule: step where each R starts (first 0)
    schedule_rounds: list[int] = field(default_factory=list)  # schedule: R from that step on
    backprop_rounds: int | None = None  # back-propagate through the last k rounds only; null: all
    scaling_n: str = "fixed"  # R in DeepLoop's N = K*R: fixed (model.num_rounds) | mean | max of the draw

    def __post_init__(self) -> None:
        one_of("depth.sampler", self.sampler, SAMPLERS)
        one_of("depth.scaling_n", self.scaling_n, SCALING_N)
        at_least("depth.min_rounds", self.min_rounds, 1)
        if self.max_rounds is not None:
            at_least("depth.max_rounds", self.max_rounds, self.min_rounds if self.sampler == "uniform" else 1)
        if self.backprop_rounds is not None:
            at_least("depth.backprop_rounds", self.backprop_rounds, 1)
        positive("depth.sigma", self.sigma)
        if self.sampler == "uniform":
            check(self.max_rounds is not None, "depth.max_rounds", self.max_rounds, "set for sampler=uniform")
        if self.sampler == "lognormal_poisson":
            check(self.mean_rounds > 1, "depth.mean_rounds", self.mean_rounds, "> 1 (R = 1 + Poisson)")
            check(self.scaling_n != "max" or self.max_rounds is not None, "depth.max_rounds", self.max_rounds,
                  "set for scaling_n=max (the Poisson draw has no maximum otherwise)")
        if self.sampler == "schedule":
            steps, rounds = self.schedule_steps, self.schedule_rounds
            check(len(steps) > 0 and len(steps) == len(rounds), "depth.schedule_steps", steps,
                  "as long as depth.schedule_rounds and not empty")
            check(steps[0] == 0 and all(a < b for a, b in zip(steps, steps[1:])), "depth.schedule_steps", steps,
                  "increasing, starting at 0")
            for r in rounds:
                at_least("depth.schedule_rounds", r, 1)

    @property
    def varies(self) -> bool:
        return self.sampler != "fixed"

    def rounds_at(self, step: int, seed: int, model_rounds: int) -> int:
        """R for training step `step` (the same on every rank)."""
        if self.sampler == "fixed":
            return model_rounds
        if self.sampler == "schedule":
            i = max(j for j, s in enumerate(self.schedule_steps) if s <= step)
            return self.schedule_rounds[i]
        rng = np.random.default_rng([seed, step])
        if self.sampler == "uniform":
            return int(rng.integers(self.min_rounds, int(self.max_rounds) + 1))
        mu = math.log(self.mean_rounds - 1) - self.sigma ** 2 / 2  # E[lam] = mean - 1
        r = 1 + int(rng.poisson(rng.lognormal(mu, self.sigma)))
        return r if self.max_rounds is None else min(r, self.max_rounds)

    def mean(self, model_rounds: int, total_steps: int | None = None) -> float:
        """E[R] of the draw (the schedule's step-weighted mean over `total_steps`)."""
        if self.sampler == "fixed":
            return float(model_rounds)
        if self.sampler == "uniform":
            return (self.min_rounds + int(self.max_rounds)) / 2
        if self.sampler == "lognormal_poisson":
            return float(self.mean_rounds)  # (a cap lowers it a little)
        check(total_steps is not None, "train.max_steps", total_steps, "set for a schedule's mean")
        ends = [*self.schedule_steps[1:], int(total_steps)]
        spans = [max(min(e, int(total_steps)) - s, 0) for s, e in zip(self.schedule_steps, ends)]
        return sum(r * n for r, n in zip(self.schedule_rounds, spans)) / max(sum(spans), 1)

    def max(self, model_rounds: int) -> int:
        if self.sampler == "fixed":
            return model_rounds
        if self.sampler == "schedule":
            return max(self.schedule_rounds)
        return int(self.max_rounds)  # checked set where needed

    def scaling_rounds(self, model_rounds: int, total_steps: int | None = None) -> float | None:
        """The R in N = K*R for alpha/beta; None: model.num_rounds (scaling_n=fixed)."""
        if self.scaling_n == "fixed":
            return None
        return self.mean(model_rounds, total_steps) if self.scaling_n == "mean" else float(self.max(model_rounds))


def scaling_rounds_of(config: dict[str, Any], model_rounds: int) -> float | None:
    """The alpha/beta R a train-gpt run's saved config implies (None: model.num_rounds; also for
    runs from before `depth` existed)."""
    depth = typed(config.get("depth") or {}, DepthConfig, "depth.")
    return depth.scaling_rounds(model_rounds, (config.get("train") or {}).get("max_steps"))
