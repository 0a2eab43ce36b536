"""Sudoku as a grid-puzzle task of the build-puzzles / generate-puzzles pipeline: the hooks that
arc_data.puzzles.registry lists (board size, tokens, answer check, augmentation, generator,
options, pictures). The rules themselves live in arc_data.sudoku; this file only plugs them in.

Tokens (HRM): PAD 0, blank ('.' or '0') 1, digit d -> d+1 (vocab n+2; 11 for 9x9).
"""

from __future__ import annotations

import math

import numpy as np

from arc_data import sudoku
from arc_data.errors import SudokuError

BLANKS = ".0"  # CSV bytes of a blank cell
INVALID = "the answer is not a solved sudoku (a row, column or box repeats a digit)"
AUG_FIELDS = ("digit_map", "transpose", "row_perm", "col_perm")  # the augmentation table's columns
DIGITS = np.frombuffer(b"." + b"".join(str(d).encode() for d in range(1, 10)), np.uint8)  # digit -> CSV byte


class Sudoku:
    name = "sudoku"
    error = SudokuError
    default_size = 9
    render_cell = 28  # pixels per cell in pictures

    # ---- build-puzzles

    def size_of(self, num_cells: int) -> int:
        return sudoku.size_of(num_cells)

    def vocab_size(self, n: int) -> int:
        return n + 2

    def charset(self, n: int) -> str:
        return BLANKS + "".join(str(d) for d in range(1, n + 1))

    def lut(self, n: int) -> np.ndarray:
        """CSV byte -> token (255: not allowed)."""
        lut = np.full(256, 255, np.uint8)
        for ch in BLANKS:
            lut[ord(ch)] = 1
        for d in range(1, n + 1):
            lut[ord(str(d))] = d + 1
        return lut

    def first_bad_answer(self, n: int, q_bytes, a_bytes, inputs, labels) -> tuple[int, str]:
        """(row, problem) of the first row whose answer does not solve its question, or (-1, "")."""
        blank = (labels == 1).any(axis=1)
        clash = ((inputs != 1) & (inputs != labels)).any(axis=1)
        invalid = sudoku.first_invalid_solution(labels - 1, n)
        first = [int(np.flatnonzero(blank)[0]) if blank.any() else -1,
                 int(np.flatnonzero(clash)[0]) if clash.any() else -1, invalid]
        hits = [i for i in first if i >= 0]
        if not hits:
            return -1, ""
        i = min(hits)
        if blank[i]:
            return i, "the answer has a blank cell"
        if clash[i]:
            c = int(np.flatnonzero((inputs[i] != 1) & (inputs[i] != labels[i]))[0])
            return i, f"the answer changes the given at cell {c}"
        return i, INVALID

    def encode_large(self, n: int, inputs: np.ndarray, labels: np.ndarray, lut: np.ndarray,
                     check: bool) -> tuple[int, str, int, int]:
        """The numpy encode + check of the pipeline in one numba pass per row, in place, for large
        sets: (row, problem, cell, byte), row -1 when all is well; problem "question" / "answer"
        for a byte outside the charset, else the answer check's message."""
        from arc_data.sudoku.kernels import sudoku_encode_check  # lazy: keeps numba off `evaluate --help`

        i, code, cell, byte = sudoku_encode_check(inputs, labels, lut, n, sudoku.box_index(n), check)
        problem = {1: "question", 2: "answer", 3: "the answer has a blank cell",
                   4: f"the answer changes the given at cell {cell}", 5: INVALID}.get(int(code), "")
        return int(i), problem, int(cell), int(byte)

    def identity_table(self, n: int, count: int) -> dict[str, np.ndarray]:
        ident = sudoku.identity_augs(n, count)
        return {name: getattr(ident, name) for name in AUG_FIELDS}

    def augment(self, n: int, inputs: np.ndarray, labels: np.ndarray, src: np.ndarray, copy: np.ndarray,
                rng: np.random.Generator, large: bool) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Rows `src` of (inputs, labels) under fresh random augmentations (one uniform block per row,
        so the result does not depend on how the pipeline chunks); `copy` is unused (every copy is drawn)."""
        augs = sudoku.random_augs(rng, n, src.size)
        if large:
            q, a = self._augment_numba(inputs, labels, src, augs, n)
        else:
            both = sudoku.apply_augs(np.concatenate([inputs[src], labels[src]], axis=1), augs, offset=1)
            q, a = both[:, :n * n], both[:, n * n:]
        return q, a, {name: getattr(augs, name) for name in AUG_FIELDS}

    @staticmethod
    def _augment_numba(inputs: np.ndarray, labels: np.ndarray, src: np.ndarray, augs: sudoku.SudokuAugs,
                       n: int) -> tuple[np.ndarray, np.ndarray]:
        """sudoku.apply_augs(x[src], augs, offset=1) for inputs and labels in one numba pass."""
        from arc_data.sudoku.kernels import sudoku_augment  # lazy: keeps numba off `evaluate --help`

        out_q = np.empty((src.size, inputs.shape[1]), np.uint8)
        out_a = np.empty_like(out_q)
        sudoku_augment(np.ascontiguousarray(inputs), np.ascontiguousarray(labels), src.astype(np.int64),
                       augs.digit_map, augs.transpose, augs.row_perm.astype(np.int64),
                       augs.col_perm.astype(np.int64), n, out_q, out_a)
        return out_q, out_a

    def board_info(self, n: int) -> dict:
        """What the manifest's `board` records beyond n, seq_len and vocab_size."""
        return {"box": list(sudoku.box_shape(n))}

    def check_build(self, cfg) -> None:
        pass  # any num_aug

    # ---- generate-puzzles

    def check_generate(self, cfg) -> None:
        """Range checks of the Sudoku knobs (cfg.size is filled in already); raises SudokuError."""
        if cfg.size not in sudoku.BOX_SHAPES:
            raise SudokuError(f"size: sudoku sizes are {sorted(sudoku.BOX_SHAPES)}, got {cfg.size}")
        if not 0 <= cfg.givens <= cfg.size ** 2:
            raise SudokuError(f"givens: must be in 0..{cfg.size ** 2} for size {cfg.size}, got {cfg.givens}")
        if cfg.min_rating < 0:
            raise SudokuError(f"min_rating: must be >= 0, got {cfg.min_rating}")
        for name in ("min_path", "openings"):
            if getattr(cfg, name):
                raise SudokuError(f"{name}: a maze option (task=sudoku)")

    def most_distinct(self, cfg) -> tuple[int, str] | None:
        """(how many distinct puzzles exist, why) where that is few enough to matter: 4x4 has 288
        full boards, each with at most C(16, givens) or 2**16 sets of givens."""
        if cfg.size != 4:
            return None
        most = 288 * (math.comb(16, cfg.givens) if cfg.givens else 2**16)
        return most, "288 full 4x4 boards x " + (f"C(16, {cfg.givens})" if cfg.givens else "2**16") + " sets of givens"

    def generator(self, cfg, rng: np.random.Generator) -> SudokuDraws:
        return SudokuDraws(cfg, rng)

    # ---- evaluate (eval/puzzles): the cells to solve, the test-time augmentation group, pictures

    solve_cells = "the blank cells of the input"  # metrics.json's `cells_to_solve`
    solve_short = "blank cells"  # in a picture's caption

    def solve_mask(self, inputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """bool [E, L]: the cells to solve, before the supervised mask."""
        return inputs == 1  # the blank token

    def num_transforms(self, n: int) -> int:
        """Elements of the group (HRM's `shuffle_sudoku`): digit maps x transpose (square boxes) x
        band / row-within-band and stack / column-within-stack permutations."""
        br, bc = sudoku.box_shape(n)
        nb, ns = n // br, n // bc
        f = math.factorial
        return f(n) * (2 if br == bc else 1) * f(nb) * f(br) ** nb * f(ns) * f(bc) ** ns

    def describe_transforms(self, n: int) -> str:
        return (f"sudoku {n}x{n}: digit permutation, transpose (square boxes), band/stack and "
                f"row/column-within-band permutations ({self.num_transforms(n):.3g} elements)")

    def draw_transforms(self, n: int, rng: np.random.Generator, num_examples: int, copies: int) -> dict[str, np.ndarray]:
        """`copies` independent uniform draws per example, example-major (a copy may repeat another)."""
        a = sudoku.random_augs(rng, n, num_examples * copies)
        return {name: getattr(a, name) for name in AUG_FIELDS}

    def apply_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray:
        """Row p of tokens [P, n*n] under transform p of the table (PAD and blank move, never relabelled)."""
        return sudoku.apply_augs(tokens, sudoku.augs_of(table), offset=1)

    def invert_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray:
        return sudoku.invert_augs(tokens, sudoku.augs_of(table), offset=1)

    def picture_cell(self, n: int) -> int:
        return min(40, max(20, 252 // n))  # pixels per cell: boards of 240-300 px

    # ---- pictures

    @property
    def legend(self) -> str:
        from arc_data.sudoku.viz import LEGEND  # lazy: `build-puzzles --help` skips it

        return LEGEND

    def render(self, inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None,
               cell: int | None = None):
        from arc_data.sudoku.viz import render_sudoku  # lazy: `build-puzzles --help` skips it

        return render_sudoku(inputs, labels, prediction, cell or self.render_cell)


class SudokuDraws:
    """Draws of generate-puzzles: `draw()` is (question bytes, answer bytes, rating) or None when
    this draw misses the knobs; `knobs()` says them (with the fewest givens reached) when too few pass."""

    def __init__(self, cfg, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng
        self.fewest = cfg.size * cfg.size + 1

    def draw(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        puzzle, solution, k, rating = sudoku.generate(self.rng, self.cfg.size, self.cfg.givens)
        self.fewest = min(self.fewest, k)
        if (self.cfg.givens and k != self.cfg.givens) or rating < self.cfg.min_rating:
            return None
        return DIGITS[puzzle], DIGITS[solution], rating

    def knobs(self) -> str:
        return f"givens={self.cfg.givens} (fewest reached {self.fewest}), min_rating={self.cfg.min_rating}"


SUDOKU = Sudoku()
