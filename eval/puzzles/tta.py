"""Test-time augmentation groups: each grid task's own invertible transforms, on token rows.

ARC's vote undoes dihedral + colour maps (`eval.arc.decode`); the puzzle evaluation does the same with
the group the task's builder augments with, which the task's registry object owns
(`arc_data.puzzles.registry.GridTask`: `num_transforms`, `draw_transforms`, `apply_transforms`,
`invert_transforms`, in `arc_data/<task>/task.py`); `Group` is that object at one board size:

- Sudoku (n x n, boxes br x bc): relabel the digits, transpose (square boxes only), permute the bands
  and the rows within each band, the stacks and the columns within each stack (HRM's
  `shuffle_sudoku`). n! * 2 * (n/br)! br!^(n/br) * (n/bc)! bc!^(n/bc) elements (3,072 for 4x4,
  about 1.2e12 for 9x9); `draw` takes independent uniform draws, so a copy may repeat another
  (rarely, except on 4x4).
- Maze (n x n): the 8 dihedral transforms; `draw` gives each example distinct non-identity
  transforms in a seeded order, so tta <= 7.

A table holds one transform per row, in the fields of the builders' `puzzle_augmentations.npz`
(Sudoku: digit_map, transpose, row_perm, col_perm; Maze: dihedral). `apply` maps inputs into the
augmented frame, `invert` maps a prediction made there back; tokens outside the digit range (PAD, a
mispredicted blank) are moved but never relabelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.budget import check_fits
from arc_data.puzzles.registry import TASKS, GridTask
from hrm_deeploop.errors import UserError

Table = dict[str, np.ndarray]


@dataclass(frozen=True)
class Group:
    """The augmentation group of one task at one board size: the task's own transforms
    (`GridTask.*_transforms`), with its errors as one-line UserErrors."""

    task: GridTask
    n: int  # board side

    @property
    def size(self) -> int:
        """Number of distinct transforms."""
        return self.task.num_transforms(self.n)

    @property
    def description(self) -> str:
        return self.task.describe_transforms(self.n)

    def identity(self, count: int) -> Table:
        return self.task.identity_table(self.n, count)

    def draw(self, rng: np.random.Generator, num_examples: int, copies: int) -> Table:
        """`copies` transforms per example, example-major ([num_examples * copies] rows)."""
        try:
            return self.task.draw_transforms(self.n, rng, num_examples, copies)
        except self.task.error as e:
            raise UserError(str(e)) from None

    def apply(self, tokens: np.ndarray, table: Table) -> np.ndarray:
        """Row p of tokens [P, n*n] under transform p of the table."""
        return self.task.apply_transforms(self.n, tokens, table)

    def invert(self, tokens: np.ndarray, table: Table) -> np.ndarray:
        """Undo `apply` row by row (a prediction in the augmented frame -> the original frame)."""
        return self.task.invert_transforms(self.n, tokens, table)


def take(table: Table, rows: np.ndarray | slice) -> Table:
    return {k: v[rows] for k, v in table.items()}


def check_request(tta: int, num_examples: int, seq_len: int, out: Path, segments: int = 1) -> None:
    """Refuse, before the checkpoint is even used, test-time augmentation (or a number of ACT
    segments, halt_max_steps) this machine cannot hold: every copy is a row of the transform table
    (three copies of up to 3n+2 bytes while interleaving), of the inputs and predictions kept for
    predictions.npz (2 x seq_len bytes) and of its scores; every (row, segment) holds the
    per-segment scores (exact, token and to-solve counts, Q(halt), halted: 14 bytes; and the
    16-byte vote key when there are copies)."""
    rows = num_examples * (1 + tta)
    per_row = 3 * (3 * math.isqrt(seq_len) + 2) + 2 * seq_len + 24 + segments * (14 + (16 if tta else 0))
    asked = [f"tta={tta}"] * bool(tta) + [f"halt_max_steps={segments}"] * (segments > 1)
    check_fits(f"{' '.join(asked)} over {num_examples:,} examples ({rows:,} rows)", memory=rows * per_row,
               disk=rows * (2 * seq_len + 8), at=out,
               fix=f"lower {' or '.join(a.split('=')[0] for a in asked)} (or evaluate fewer examples with max_batches)")


def group_of(task: GridTask, seq_len: int, vocab_size: int) -> Group:
    """The group of a dataset of `task`; a one-line UserError when its sizes do not fit the task."""
    try:
        n = task.size_of(seq_len)
    except task.error as e:
        raise UserError(f"task {task.name}: seq_len {seq_len}: {e}") from None
    if vocab_size != task.vocab_size(n):
        raise UserError(f"task {task.name}: a {n}x{n} dataset has vocab_size {task.vocab_size(n)} (PAD and "
                        f"{task.charset(n)!r}), this one {vocab_size}")
    return Group(task, n)


def group_for(task: str, seq_len: int, vocab_size: int) -> Group:
    """The group of a dataset of the grid task named `task` (`arc_data.puzzles.registry.TASKS`); a
    one-line UserError for any other task or for a dataset whose sizes do not fit the task."""
    if task not in TASKS:
        raise UserError(f"task '{task}' has no invertible augmentation group here ({' and '.join(TASKS)} have one; "
                        "an ARC test split holds its augmented copies already and `hrm-deeploop vote` votes over "
                        "them): use tta=0")
    return group_of(TASKS[task], seq_len, vocab_size)
