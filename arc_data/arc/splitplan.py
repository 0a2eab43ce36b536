"""Each split's plan: its groups, puzzles and examples (the index arrays of the HRM layout, plus the
compact plan's pair lists) and every example's translation offset (RNG step 3 of `plan.py`).

Computed a chunk of tasks or examples at a time (`plan.TASK_CHUNK`, `plan.EXAMPLE_CHUNK`, passed in
by `plan.make_plan`); with a spill (a generated source's build, `spill.py`) every array is allocated
in it and its pages are handed back after each chunk, so a split's plan holds nothing an example in
memory. Without one the same code runs on arrays in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arc_data.arc.spill import Spill, zeros
from arc_data.arc.tasktable import ranges
from arc_data.format import MAX_SIDE

TRANSPOSING = np.array([0, 1, 0, 1, 0, 0, 1, 1], dtype=bool)  # tids whose output is W x H


@dataclass
class SplitPlan:
    puzzle_identifiers: np.ndarray  # int32 [P]
    puzzle_indices: np.ndarray  # int32 [P+1]
    group_indices: np.ndarray  # int32 [G+1]
    group_pairs: np.ndarray  # int64 [sum over groups]: pair ids of each group's examples, in order
    group_pair_indices: np.ndarray  # int64 [G+1]: CSR into group_pairs
    offsets: np.ndarray  # uint8 [E, 2]: (row, col) translation of each example

    @property
    def num_examples(self) -> int:
        return int(self.puzzle_indices[-1])


def split_plan(test: bool, task_pairs: np.ndarray, num_demos: np.ndarray, is_eval: np.ndarray,
               first_id: np.ndarray, num_puzzles: np.ndarray, spill: Spill | None, chunk: int) -> SplitPlan:
    """One split's arrays, `chunk` tasks at a time: a pass that counts, then one that fills them
    (in the spill, with `spill`). Its groups: train, every task (an evaluation task's demonstrations,
    another's pairs); test, the evaluation tasks (their test pairs)."""
    def chunks():
        for lo in range(0, len(num_demos), chunk):
            hi = min(len(num_demos), lo + chunk)
            t, pair_lo, demos, ev = np.arange(lo, hi), task_pairs[lo:hi], num_demos[lo:hi], is_eval[lo:hi]
            n_pairs = task_pairs[lo + 1:hi + 1] - pair_lo
            if test:
                t, pair_lo, pair_n = t[ev], pair_lo[ev] + demos[ev], n_pairs[ev] - demos[ev]
            else:
                pair_n = np.where(ev, demos, n_pairs)
            yield t, pair_lo, pair_n, num_puzzles[t]
            if spill is not None:
                spill.release()

    n_groups = n_puz = n_ex = n_pairs = 0
    for t, _, pair_n, puz in chunks():
        n_groups, n_puz, n_ex, n_pairs = n_groups + len(t), n_puz + int(puz.sum()), \
            n_ex + int((pair_n * puz).sum()), n_pairs + int(pair_n.sum())
    if n_ex >= 2**31:
        raise OverflowError("more than 2**31 examples in one split")
    sp = SplitPlan(zeros(spill, (n_puz,), np.int32), zeros(spill, (n_puz + 1,), np.int32),
                   zeros(spill, (n_groups + 1,), np.int32), zeros(spill, (n_pairs,), np.int64),
                   zeros(spill, (n_groups + 1,), np.int64), zeros(spill, (n_ex, 2), np.uint8))
    g = p = e = q = 0
    for t, pair_lo, pair_n, puz in chunks():
        n, m, k = len(t), int(puz.sum()), int(pair_n.sum())
        sp.group_indices[g + 1:g + n + 1] = p + np.cumsum(puz)
        sp.puzzle_identifiers[p:p + m] = ranges(first_id[t], puz)
        sp.puzzle_indices[p + 1:p + m + 1] = e + np.cumsum(np.repeat(pair_n, puz))
        sp.group_pair_indices[g + 1:g + n + 1] = q + np.cumsum(pair_n)
        sp.group_pairs[q:q + k] = ranges(pair_lo, pair_n)
        g, p, e, q = g + n, p + m, e + int((pair_n * puz).sum()), q + k
    return sp


def chunk_bounds(pi: np.ndarray, gi: np.ndarray, chunk: int) -> list[int]:
    """Group bounds of chunks of about `chunk` examples (whole groups, one at least), found by
    bisection (no array a group long)."""
    n_groups = len(gi) - 1
    bounds = [0]
    while bounds[-1] < n_groups:
        g0 = bounds[-1]
        limit = int(pi[gi[g0]]) + chunk
        lo, hi = g0, n_groups  # the first group that ends past limit
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if int(pi[gi[mid + 1]]) <= limit else (lo, mid)
        bounds.append(max(g0 + 1, lo))
    return bounds


def translate(rng: np.random.Generator, sp: SplitPlan, shape: np.ndarray, pair_grids: np.ndarray,
              dihedral: np.ndarray, spill: Spill | None, chunk: int) -> None:
    """Random offsets for every example but one per puzzle (HRM spec 1.5), in place: the example
    left untranslated of every puzzle, every row offset, then every column offset, each drawn about
    `chunk` examples or puzzles (whole groups) at a time, their sides computed for that chunk from
    the grids' shapes (an array-bounded `integers` draws element after element from one stream, so
    chunks give what one call gives)."""
    e = sp.num_examples
    if e == 0:
        return
    from arc_data.arc.kernels import example_sides  # lazy: numba kernels stay off viz-arc --help

    pi, gi = sp.puzzle_indices, sp.group_indices
    n_puz = len(sp.puzzle_identifiers)
    release = spill.release if spill is not None else lambda: None
    keep = zeros(spill, (n_puz,), np.int64)  # the untranslated example of each puzzle
    for lo in range(0, n_puz, chunk):
        keep[lo:lo + chunk] = rng.integers(0, np.diff(pi[lo:lo + chunk + 1].astype(np.int64)))
        release()
    bounds = chunk_bounds(pi, gi, chunk)
    for axis in (0, 1):  # rows, then columns: one stream, drawn a chunk at a time
        for g0, g1 in zip(bounds[:-1], bounds[1:]):
            p0, p1 = int(gi[g0]), int(gi[g1])
            starts = pi[p0:p1 + 1].astype(np.int64)
            e0, e1 = int(starts[0]), int(starts[-1])
            sides = example_sides(sp.puzzle_identifiers[p0:p1], starts - e0, (gi[g0:g1 + 1] - p0).astype(gi.dtype),
                                  sp.group_pairs, sp.group_pair_indices[g0:g1 + 1], shape, pair_grids,
                                  dihedral, TRANSPOSING)
            sp.offsets[e0:e1, axis] = rng.integers(0, MAX_SIDE - sides[axis] + 1).astype(np.uint8)
            release()
    for lo in range(0, n_puz, chunk):
        hi = min(n_puz, lo + chunk)
        sp.offsets[pi[lo:hi].astype(np.int64) + keep[lo:hi]] = 0
        release()
