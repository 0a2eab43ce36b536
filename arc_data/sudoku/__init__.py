"""Sudoku: board shapes, a bitmask backtracking solver (numba, with a plain-Python reference), the
generator, answer checks, and the augmentation group with its inverse.

Boards are flat rows of n*n digits (row-major), 0 = blank. Sizes and their boxes (rows x cols):
4 (2x2), 6 (2x3), 8 (2x4), 9 (3x3).

Solver (numba kernels in arc_data.sudoku.kernels, imported on first use): depth-first search that always branches on the blank cell with the fewest candidates
(row/column/box masks as bit sets), trying digits in a given order per cell. `count_solutions`
stops at `limit` solutions (2 proves uniqueness). Its `backtracks` (dead ends met) over the
*exhaustive* search of a unique puzzle does not depend on the digit order, so it is a
deterministic difficulty rating (written to the CSV `rating` column by the generator; Sudoku-Extreme's
ratings come from a different solver, tdoku, and are not on the same scale).

Generator: a random full board (the solver on an empty board, with a random digit order per cell),
then blanks cells in a random order, keeping each blank only while the solution stays unique, down
to `givens` (0: until no given can be removed, a minimal puzzle).

Augmentation (HRM's `shuffle_sudoku`, generalised to any box shape): relabel digits, transpose
(square boxes only), permute bands and the rows within each band, stacks and the columns within each
stack. `apply_augs` / `invert_augs` work on batches and on tokens (`offset=1`: PAD 0 is left alone).
All randomness comes from the caller's `np.random.Generator`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arc_data.errors import SudokuError

BOX_SHAPES = {4: (2, 2), 6: (2, 3), 8: (2, 4), 9: (3, 3)}  # sudoku size -> (box rows, box cols)

_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << 10)], dtype=np.int64)


def box_shape(n: int) -> tuple[int, int]:
    if n not in BOX_SHAPES:
        raise SudokuError(f"sudoku size {n}: supported sizes are {sorted(BOX_SHAPES)}")
    return BOX_SHAPES[n]


def size_of(seq_len: int) -> int:
    """Board size n from a row length n*n (SudokuError when it is not a supported square)."""
    n = int(round(seq_len ** 0.5))
    if n * n != seq_len or n not in BOX_SHAPES:
        raise SudokuError(f"a sudoku row has {seq_len} cells; expected n*n for n in {sorted(BOX_SHAPES)} "
                           f"(16, 36, 64 or 81)")
    return n


def box_index(n: int) -> np.ndarray:
    """int64 [n*n]: the box of each cell."""
    br, bc = box_shape(n)
    r, c = np.divmod(np.arange(n * n), n)
    return ((r // br) * (n // bc) + c // bc).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# solver


def _ascending(n: int) -> np.ndarray:
    return np.tile(np.arange(1, n + 1, dtype=np.int64), (n * n, 1))


def count_solutions(board: np.ndarray, limit: int = 2) -> tuple[int, int, np.ndarray]:
    """(solutions found up to `limit`, backtracks, first solution or zeros) for one flat board."""
    board = np.ascontiguousarray(board, dtype=np.int64).reshape(-1)
    n = size_of(board.size)
    sol = np.zeros(board.size, np.int64)
    from arc_data.sudoku.kernels import sudoku_search  # lazy: keeps numba off `evaluate --help`

    cnt, bt = sudoku_search(board, n, box_index(n), _ascending(n), int(limit), sol, _POPCOUNT)
    return int(cnt), int(bt), sol


def count_solutions_reference(board: np.ndarray, limit: int = 2) -> tuple[int, np.ndarray]:
    """Plain-Python reference: first-blank-cell backtracking, no heuristics (small boards only)."""
    g = [int(v) for v in np.asarray(board).reshape(-1)]
    n = size_of(len(g))
    box = box_index(n)
    units = [[c for c in range(n * n) if c // n == c0 // n or c % n == c0 % n or box[c] == box[c0]]
             for c0 in range(n * n)]
    for c, d in enumerate(g):
        if d and any(g[o] == d for o in units[c] if o != c):
            return 0, np.zeros(n * n, np.int64)
    found: list[list[int]] = []

    def rec(i: int) -> None:
        while i < n * n and g[i]:
            i += 1
        if i == n * n:
            found.append(list(g))
            return
        for d in range(1, n + 1):
            if all(g[o] != d for o in units[i]):
                g[i] = d
                rec(i + 1)
                g[i] = 0
                if len(found) >= limit:
                    return

    rec(0)
    first = np.array(found[0] if found else [0] * (n * n), np.int64)
    return len(found), first


# ---------------------------------------------------------------------------------------------
# generator


def generate(rng: np.random.Generator, n: int, givens: int = 0) -> tuple[np.ndarray, np.ndarray, int, int]:
    """One puzzle with a unique solution: (puzzle, solution, number of givens, rating).

    `givens=0` blanks cells until the puzzle is minimal; otherwise it stops at `givens` (the result
    has more givens when a minimal puzzle is reached first: the caller decides whether to retry).
    """
    N = n * n
    fill_order = np.argsort(rng.random((N, n)), axis=1).astype(np.int64) + 1
    dig_order = rng.permutation(N).astype(np.int64)
    puzzle = np.zeros(N, np.int64)
    solution = np.zeros(N, np.int64)
    from arc_data.sudoku.kernels import sudoku_generate_one  # lazy: keeps numba off `evaluate --help`

    k, bt = sudoku_generate_one(n, box_index(n), fill_order, _ascending(n), dig_order, int(givens), _POPCOUNT,
                                puzzle, solution)
    if k < 0:  # the solver always fills an empty board; this guards the kernel's contract
        raise AssertionError(f"sudoku {n}x{n}: the solver found no full board")
    return puzzle.astype(np.uint8), solution.astype(np.uint8), int(k), int(bt)


# ---------------------------------------------------------------------------------------------
# answer checks


def _unit_matrix(n: int) -> np.ndarray:
    """float32 [n*n, 3n]: cell c belongs to row unit r, column unit n+k, box unit 2n+b."""
    r, k = np.divmod(np.arange(n * n), n)
    m = np.zeros((n * n, 3 * n), np.float32)
    m[np.arange(n * n), r] = 1
    m[np.arange(n * n), n + k] = 1
    m[np.arange(n * n), 2 * n + box_index(n)] = 1
    return m


def first_invalid_solution(answers: np.ndarray, n: int, chunk: int = 1 << 16) -> int:
    """Row index of the first answer (digits 1..n) that is not a valid full board, or -1.

    Each unit (row, column, box) must sum 2**d over its n digits to 2 + 4 + ... + 2**n: a sum of n
    powers of two with n one-bits is only that set, so equality means every digit once. The sums are
    one matrix product per chunk (numpy, about 0.6 s per million 9x9 boards on one core).
    """
    a = np.asarray(answers).reshape(-1, n * n)
    units = _unit_matrix(n)
    pow2 = (2.0 ** np.arange(n + 1)).astype(np.float32)
    full = float((1 << (n + 1)) - 2)
    for lo in range(0, a.shape[0], chunk):
        block = a[lo:lo + chunk]
        bad = ((block < 1) | (block > n)).any(axis=1)
        sums = pow2[np.clip(block, 0, n)] @ units
        bad |= (sums != full).any(axis=1)
        if bad.any():
            return lo + int(np.flatnonzero(bad)[0])
    return -1


def is_solution_reference(board: np.ndarray, n: int) -> bool:
    """NumPy reference of the answer check: every row, column and box holds 1..n once."""
    g = np.asarray(board).reshape(n, n).astype(np.int64)
    br, bc = box_shape(n)
    boxes = g.reshape(n // br, br, n // bc, bc).transpose(0, 2, 1, 3).reshape(n, n)
    want = np.arange(1, n + 1)
    return all(np.array_equal(np.sort(u, axis=1), np.broadcast_to(want, (n, n))) for u in (g, g.T, boxes))


# ---------------------------------------------------------------------------------------------
# augmentation


@dataclass(frozen=True)
class SudokuAugs:
    """One augmentation per puzzle row. Forward: new[i] = digit_map[old[cell_perm[i]]]."""

    digit_map: np.ndarray  # uint8 [P, n+1]; digit_map[:, 0] == 0 (blank stays blank)
    transpose: np.ndarray  # bool [P]; applied before the row/column permutation
    row_perm: np.ndarray  # uint8 [P, n]: new row r takes (transposed) row row_perm[r]
    col_perm: np.ndarray  # uint8 [P, n]

    @property
    def size(self) -> int:
        return int(self.row_perm.shape[1])

    def __len__(self) -> int:
        return int(self.row_perm.shape[0])

    def cell_perm(self) -> np.ndarray:
        """int64 [P, n*n]: new cell i takes the original cell cell_perm[:, i]."""
        n = self.size
        m = self.row_perm.astype(np.int64)[:, :, None] * n + self.col_perm.astype(np.int64)[:, None, :]
        m = m.reshape(len(self), n * n)
        return np.where(self.transpose[:, None], (m % n) * n + m // n, m)


def identity_augs(n: int, count: int) -> SudokuAugs:
    box_shape(n)
    return SudokuAugs(np.tile(np.arange(n + 1, dtype=np.uint8), (count, 1)), np.zeros(count, bool),
                      np.tile(np.arange(n, dtype=np.uint8), (count, 1)), np.tile(np.arange(n, dtype=np.uint8), (count, 1)))


def _block_perm(u_blocks: np.ndarray, u_within: np.ndarray, size: int) -> np.ndarray:
    """Permutation [P, n] that shuffles blocks (argsort of u_blocks [P, nb]) and lines within each block."""
    blocks = np.argsort(u_blocks, axis=1)  # (P, nb): new block k is old block blocks[k]
    within = np.argsort(u_within.reshape(len(u_blocks), blocks.shape[1], size), axis=2)  # (P, nb, size)
    return (blocks[:, :, None] * size + within).reshape(len(u_blocks), -1).astype(np.uint8)


def uniforms_per_aug(n: int) -> int:
    br, bc = box_shape(n)
    return n + 1 + n // br + n + n // bc + n


def augs_from_uniforms(u: np.ndarray, n: int) -> SudokuAugs:
    """Augmentations from uniforms u [P, uniforms_per_aug(n)] (one block per puzzle, so chunked draws
    give the same result as one big draw)."""
    br, bc = box_shape(n)
    nb, ns = n // br, n // bc
    p = u.shape[0]
    i = 0
    digits = np.argsort(u[:, i:i + n], axis=1).astype(np.uint8) + 1
    i += n
    transpose = (u[:, i] < 0.5) & (br == bc)  # a 2x3 box would become 3x2: transpose only square boxes
    i += 1
    row_perm = _block_perm(u[:, i:i + nb], u[:, i + nb:i + nb + n], br)
    i += nb + n
    col_perm = _block_perm(u[:, i:i + ns], u[:, i + ns:i + ns + n], bc)
    digit_map = np.concatenate([np.zeros((p, 1), np.uint8), digits], axis=1)
    return SudokuAugs(digit_map, transpose, row_perm, col_perm)


def random_augs(rng: np.random.Generator, n: int, count: int) -> SudokuAugs:
    return augs_from_uniforms(rng.random((count, uniforms_per_aug(n))), n)


def _map_values(x: np.ndarray, table: np.ndarray, offset: int) -> np.ndarray:
    """Per row p: values v in [offset, offset+n] -> table[p, v-offset] + offset; others unchanged.

    One gather through a per-row lookup table over the values present (non-negative integers)."""
    n = table.shape[1] - 1
    top = max(int(x.max()) if x.size else 0, offset + n)
    lut = np.broadcast_to(np.arange(top + 1, dtype=np.int64), (x.shape[0], top + 1)).copy()
    lut[:, offset:offset + n + 1] = table.astype(np.int64) + offset
    flat = x.astype(np.int64) + (np.arange(x.shape[0], dtype=np.int64) * (top + 1))[:, None]
    return lut.reshape(-1)[flat].astype(x.dtype)


def _perm_for(x: np.ndarray, augs: SudokuAugs) -> np.ndarray:
    """Cell permutation for rows of k boards side by side (x [P, k*n*n]): the same one on each board."""
    cells = augs.size ** 2
    k = x.shape[1] // cells
    if k * cells != x.shape[1] or k < 1:
        raise ValueError(f"rows of {x.shape[1]} values are not whole {augs.size}x{augs.size} boards")
    perm = augs.cell_perm()
    return perm if k == 1 else np.concatenate([perm + j * cells for j in range(k)], axis=1)


def apply_augs(x: np.ndarray, augs: SudokuAugs, offset: int = 0) -> np.ndarray:
    """Augment boards row by row: x [P, k*n*n] holds k boards per row (e.g. input and label side by
    side), digits (offset 0) or tokens (offset 1, PAD 0 untouched); values must be >= 0."""
    x = np.asarray(x)
    moved = np.take_along_axis(x, _perm_for(x, augs), axis=1)
    return _map_values(moved, augs.digit_map, offset)


def invert_augs(x: np.ndarray, augs: SudokuAugs, offset: int = 0) -> np.ndarray:
    """Map augmented boards (or predictions on them) back to the original frame: inverse of apply_augs."""
    x = np.asarray(x)
    inv_digits = np.empty_like(augs.digit_map)
    np.put_along_axis(inv_digits, augs.digit_map.astype(np.int64), np.broadcast_to(
        np.arange(augs.size + 1, dtype=augs.digit_map.dtype), augs.digit_map.shape), axis=1)
    y = _map_values(x, inv_digits, offset)
    out = np.empty_like(y)
    np.put_along_axis(out, _perm_for(x, augs), y, axis=1)
    return out


def augs_of(table: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> SudokuAugs:
    """The SudokuAugs of the given puzzle rows of a built split's augmentation table
    (arc_data.puzzles.build.load_table)."""
    return SudokuAugs(table["digit_map"][rows], table["transpose"][rows], table["row_perm"][rows],
                      table["col_perm"][rows])
