"""A vote's results: ranked candidates per test input, tasks, pass@K; what `eval.arc.report` writes
and `eval.arc.arcprize` submits. `eval.arc.vote` computes them."""

from __future__ import annotations

from collections.abc import Sequence
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


class Columns:
    """Every candidate of a vote as columns, ranked (test input first, then best first): the
    `Candidate`s are made one by one when read (`Ranked`), the same values as the dataclass's own
    constructor gives; about a tenth of them ever are (36k at ARC-1 x 301 copies; tasks.json and the
    report read the top ten of each test input)."""

    def __init__(self, k1: np.ndarray, k2: np.ndarray, votes: np.ndarray, mean_q: np.ndarray, first_seen: np.ndarray,
                 rows: np.ndarray, cols: np.ndarray, grids: list) -> None:
        self.columns = (k1, k2, votes, mean_q, first_seen, rows, cols)
        self.grids = grids  # a grid or None per candidate
        self.made: list[Candidate | None] = [None] * len(votes)
        self.votes_before = np.concatenate([[0], np.cumsum(votes)]).tolist()

    def candidate(self, i: int) -> Candidate:
        c = self.made[i]
        if c is None:
            k1, k2, votes, mean_q, first_seen, rows, cols = (col.item(i) for col in self.columns)
            c = self.made[i] = _new(Candidate)
            c.__dict__.update(key=(k1, k2), votes=votes, mean_q=mean_q, first_seen=first_seen, shape=(rows, cols),
                              grid=self.grids[i], log_lik=None)  # `Candidate(...)` without its per-field setattr
        return c


_new = object.__new__


class Ranked(Sequence):
    """One test input's candidates, best first, read as a list is (len, indexing, slices as lists,
    iteration, ==) and made at their first reading (`Columns`)."""

    def __init__(self, columns: Columns, lo: int, hi: int) -> None:
        self.columns, self.lo, self.hi = columns, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.columns.candidate(self.lo + j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self.columns.candidate(self.lo + i % n)

    def __iter__(self):
        for j in range(self.lo, self.hi):
            yield self.columns.candidate(j)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Ranked({list(self)!r})"

    @property
    def votes(self) -> int:
        """Their votes, summed (without making them)."""
        return self.columns.votes_before[self.hi] - self.columns.votes_before[self.lo]


@dataclass
class TestResult:
    test: TestInput
    candidates: list[Candidate] | Ranked  # ranked, all of them
    truth_rank: int | None  # 0-based position of the true output, None if never predicted

    @property
    def num_votes(self) -> int:
        if isinstance(self.candidates, Ranked):
            return self.candidates.votes
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
