"""A vote's results: ranked candidates per test input, tasks, pass@K; what `eval.arc.report` writes
and `eval.arc.arcprize` submits. `eval.arc.vote` computes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eval.ranking import rank_order

DEFAULT_KS = (1, 2, 10, 100, 1000)
ARC_PRIZE = "arc_prize"  # scores key: pass@2 by the ARC Prize rule, computed on submission.json (eval.arc.arcprize)


@dataclass(frozen=True)
class TestInput:
    """One original test input of a task, in the original frame."""

    task: str
    index: int  # position among the task's test inputs
    input_grid: np.ndarray
    truth_grid: np.ndarray | None  # None: an unlabelled test input (build-arc test_labels=optional)
    input_key: tuple[int, int]
    truth_key: tuple[int, int] | None

    @property
    def labelled(self) -> bool:
        return self.truth_key is not None


@dataclass(frozen=True)
class Candidate:
    """A distinct de-augmented grid predicted for one test input, with its votes."""

    key: tuple[int, int]  # 128-bit grid hash in the original frame
    votes: int  # prediction rows (augmented copies) that decode to this grid
    mean_q: float  # mean of sigmoid(q_halt) over those rows
    first_seen: int  # index in predictions.npz of its first vote
    shape: tuple[int, int]  # (rows, cols) in the original frame; (0, 0) = no grid
    grid: np.ndarray | None = field(default=None, compare=False, repr=False)  # set for the top ones
    log_lik: float | None = field(default=None, compare=False)  # summed over the views (eval.arc.poe), when scored



def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Best first, by the one ranking rule (`eval.ranking`)."""
    if len(candidates) < 2:
        return list(candidates)
    order = rank_order(np.array([c.votes for c in candidates]), np.array([c.mean_q for c in candidates]),
                       np.array([c.first_seen for c in candidates]))
    return [candidates[i] for i in order]


@dataclass
class TestResult:
    test: TestInput
    candidates: list[Candidate]  # ranked, all of them
    truth_rank: int | None  # 0-based position of the true output, None if never predicted

    @property
    def num_votes(self) -> int:
        return sum(c.votes for c in self.candidates)

    def correct_at(self, k: int) -> bool:
        return self.truth_rank is not None and self.truth_rank < k


@dataclass
class TaskResult:
    name: str
    tests: list[TestResult]

    @property
    def labelled(self) -> bool:
        """Scored: every test input has its solution (a task with any unlabelled one is not scored)."""
        return all(t.test.labelled for t in self.tests)

    def correct_at(self, k: int) -> bool:
        return all(t.correct_at(k) for t in self.tests)


def pass_at_k(truth_ranks: list[list[int | None]], ks: list[int] | tuple[int, ...]) -> dict[str, dict[str, float | None]]:
    """Percentages per K. `truth_ranks[task][test input]` = 0-based rank of the true output or None.

    hrm: a task counts when every test input has its truth in the top K (HRM, the headline).
    fractional: a task earns (test inputs right) / (test inputs) (TRM).
    No tasks (an unlabelled build: nothing to score): every value is None.
    """
    out: dict[str, dict[str, float | None]] = {"hrm": {}, "fractional": {}}
    if not truth_ranks:
        return {p: {str(k): None for k in ks} for p in out}
    for k in ks:
        hits = [[r is not None and r < k for r in task] for task in truth_ranks]
        out["hrm"][str(k)] = 100.0 * float(np.mean([all(h) for h in hits]))
        # a task's fraction as count / len: np.mean of its bools, exactly (one numpy call per K, not per task)
        out["fractional"][str(k)] = 100.0 * float(np.mean([sum(h) / len(h) if h else np.mean(h) for h in hits]))
    return out


@dataclass
class VoteResult:
    tasks: list[TaskResult]
    ks: list[int]
    scores: dict[str, dict[str, float]]  # pass_at_k() output
    warnings: list[str]
    stats: dict[str, float | int]
    config: dict | None = None  # the resolved VoteConfig when run from the CLI (kept in tasks.json)
    submission: dict = field(default_factory=dict)  # submission.json (eval.arc.arcprize)
    poe: Any = None  # eval.arc.poe.PoeResult: the same candidates by the product of experts (log_probs given)
    halting: bool = True  # the rows' q_halt differ (a model with a halting head): the tie-break after votes
