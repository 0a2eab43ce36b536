"""Test-time augmentation groups: each puzzle task's own invertible transforms, on token rows.

ARC's vote undoes dihedral + colour maps (`eval.arc.decode`); the puzzle evaluation does the same with
the group the task's builder augments with (`arc_data.sudoku`, `arc_data.maze`):

- Sudoku (n x n, boxes br x bc): relabel the digits, transpose (square boxes only), permute the bands
  and the rows within each band, the stacks and the columns within each stack (HRM's
  `shuffle_sudoku`). n! * 2 * (n/br)! br!^(n/br) * (n/bc)! bc!^(n/bc) elements (3,072 for 4x4,
  about 1.2e12 for 9x9); `draw` takes independent uniform draws, so a copy may repeat another
  (rarely, except on 4x4).
- Maze (n x n): the 8 dihedral transforms; `draw` gives each example distinct non-identity
  transforms in a seeded order, so tta <= 7.

A table holds one transform per row, in the fields of the builders' `puzzle_augmentations.npz`
(Sudoku: digit_map, transpose, row_perm, col_perm; Maze: dihedral). Tokens are the datasets'
(Sudoku: PAD 0, blank 1, digit d -> d+1; Maze: PAD 0, '#' 1, ' ' 2, 'S' 3, 'G' 4, 'o' 5): `apply`
maps inputs into the augmented frame, `invert` maps a prediction made there back; tokens outside
the digit range (PAD, a mispredicted blank) are moved but never relabelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data import maze, sudoku
from arc_data.budget import check_fits
from arc_data.errors import DatasetError
from hrm_deeploop.errors import UserError

Table = dict[str, np.ndarray]


@dataclass(frozen=True)
class Group:
    """The augmentation group of one task at one board size."""

    task: str  # "sudoku" | "maze"
    n: int  # board side

    @property
    def size(self) -> int:
        """Number of distinct transforms."""
        if self.task == "maze":
            return 8
        br, bc = sudoku.box_shape(self.n)
        nb, ns = self.n // br, self.n // bc
        f = math.factorial
        return f(self.n) * (2 if br == bc else 1) * f(nb) * f(br) ** nb * f(ns) * f(bc) ** ns

    @property
    def description(self) -> str:
        if self.task == "maze":
            return f"maze {self.n}x{self.n}: the 8 dihedral transforms"
        return (f"sudoku {self.n}x{self.n}: digit permutation, transpose (square boxes), band/stack and "
                f"row/column-within-band permutations ({self.size:.3g} elements)")

    def max_copies(self) -> int | None:
        """Most distinct non-identity copies `draw` can give an example (None: no limit)."""
        return 7 if self.task == "maze" else None

    def identity(self, count: int) -> Table:
        if self.task == "maze":
            return {"dihedral": np.zeros(count, np.uint8)}
        a = sudoku.identity_augs(self.n, count)
        return {"digit_map": a.digit_map, "transpose": a.transpose, "row_perm": a.row_perm, "col_perm": a.col_perm}

    def draw(self, rng: np.random.Generator, num_examples: int, copies: int) -> Table:
        """`copies` transforms per example, example-major ([num_examples * copies] rows)."""
        count = num_examples * copies
        if self.task == "maze":
            if copies > 7:
                raise UserError(f"tta={copies}: a maze has 7 non-identity dihedral transforms; use tta <= 7")
            order = np.argsort(rng.random((num_examples, 7)), axis=1)[:, :copies] + 1  # a seeded permutation of 1..7
            return {"dihedral": order.reshape(count).astype(np.uint8)}
        a = sudoku.random_augs(rng, self.n, count)
        return {"digit_map": a.digit_map, "transpose": a.transpose, "row_perm": a.row_perm, "col_perm": a.col_perm}

    def apply(self, tokens: np.ndarray, table: Table) -> np.ndarray:
        """Row p of tokens [P, n*n] under transform p of the table."""
        if self.task == "maze":
            return maze.apply_dihedral_rows(tokens, table["dihedral"], self.n)
        return sudoku.apply_augs(tokens, sudoku.augs_of(table), offset=1)

    def invert(self, tokens: np.ndarray, table: Table) -> np.ndarray:
        """Undo `apply` row by row (a prediction in the augmented frame -> the original frame)."""
        if self.task == "maze":
            return maze.invert_dihedral_rows(tokens, table["dihedral"], self.n)
        return sudoku.invert_augs(tokens, sudoku.augs_of(table), offset=1)


def take(table: Table, rows: np.ndarray | slice) -> Table:
    return {k: v[rows] for k, v in table.items()}


def concat(tables: list[Table]) -> Table:
    return {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}


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


def group_for(task: str, seq_len: int, vocab_size: int) -> Group:
    """The group of a Sudoku or Maze dataset; a one-line UserError for any other task or for a
    dataset whose sizes do not fit the task."""
    if task == "sudoku":
        try:
            n = sudoku.size_of(seq_len)
        except DatasetError as e:
            raise UserError(f"task sudoku: {e}") from None
        if vocab_size != n + 2:
            raise UserError(f"task sudoku: a {n}x{n} dataset has vocab_size {n + 2} (PAD, blank, digits), "
                            f"this one {vocab_size}")
        return Group("sudoku", n)
    if task == "maze":
        n = math.isqrt(seq_len)
        if n * n != seq_len or n < 2:
            raise UserError(f"task maze: seq_len {seq_len} is not a square board")
        if vocab_size != 6:
            raise UserError(f"task maze: a maze dataset has vocab_size 6 (PAD '#' ' ' 'S' 'G' 'o'), this one {vocab_size}")
        return Group("maze", n)
    raise UserError(f"task '{task}' has no invertible augmentation group here (sudoku and maze have one; an ARC "
                    "test split holds its augmented copies already and `hrm-deeploop vote` votes over them): "
                    "use tta=0")
