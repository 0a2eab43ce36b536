"""Sudoku: board shapes, a bitmask backtracking solver (numba, with a plain-Python reference), the
generator, answer checks, and the augmentation group with its inverse.

Boards are flat rows of n*n digits (row-major), 0 = blank. Sizes and their boxes (rows x cols):
4 (2x2), 6 (2x3), 8 (2x4), 9 (3x3).

Solver: depth-first search that always branches on the blank cell with the fewest candidates
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
from numba import njit

from arc_data.errors import ArcDataError
from arc_data.puzzle_config import BOX_SHAPES

_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << 10)], dtype=np.int64)


def box_shape(n: int) -> tuple[int, int]:
    if n not in BOX_SHAPES:
        raise ArcDataError(f"sudoku size {n}: supported sizes are {sorted(BOX_SHAPES)}")
    return BOX_SHAPES[n]


def size_of(seq_len: int) -> int:
    """Board size n from a row length n*n (ArcDataError when it is not a supported square)."""
    n = int(round(seq_len ** 0.5))
    if n * n != seq_len or n not in BOX_SHAPES:
        raise ArcDataError(f"a sudoku row has {seq_len} cells; expected n*n for n in {sorted(BOX_SHAPES)} "
                           f"(16, 36, 64 or 81)")
    return n


def box_index(n: int) -> np.ndarray:
    """int64 [n*n]: the box of each cell."""
    br, bc = box_shape(n)
    r, c = np.divmod(np.arange(n * n), n)
    return ((r // br) * (n // bc) + c // bc).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# solver


@njit(cache=True)
def _search(grid, n, box_of, order, limit, solution, popcount):
    """Count solutions of `grid` (int64 [n*n], 0 = blank) up to `limit`; first one -> `solution`.

    `order` (int64 [n*n, n]) gives the digit order tried at each cell. Returns (count, backtracks);
    count is 0 also when the givens already conflict.
    """
    N = n * n
    rows = np.zeros(n, np.int64)
    cols = np.zeros(n, np.int64)
    boxes = np.zeros(n, np.int64)
    g = grid.copy()
    empties = 0
    for c in range(N):
        d = g[c]
        if d == 0:
            empties += 1
            continue
        if d < 0 or d > n:
            return 0, 0
        bit = 1 << d
        r, k, b = c // n, c % n, box_of[c]
        if (rows[r] | cols[k] | boxes[b]) & bit:
            return 0, 0
        rows[r] |= bit
        cols[k] |= bit
        boxes[b] |= bit
    full = (1 << (n + 1)) - 2
    stack_cell = np.empty(N + 1, np.int64)
    stack_k = np.empty(N + 1, np.int64)
    depth = 0
    count = 0
    backtracks = 0
    choose = True
    while True:
        if choose:
            if depth == empties:  # a full board
                count += 1
                if count == 1:
                    solution[:] = g
                if count >= limit:
                    break
                depth -= 1
                if depth < 0:
                    break
                choose = False
                continue
            best, best_cnt = -1, n + 1
            for c in range(N):
                if g[c] == 0:
                    free = full & ~(rows[c // n] | cols[c % n] | boxes[box_of[c]])
                    cnt = popcount[free >> 1]
                    if cnt < best_cnt:
                        best, best_cnt = c, cnt
                        if cnt <= 1:
                            break
            stack_cell[depth] = best
            stack_k[depth] = 0
            choose = False
        c = stack_cell[depth]
        r, kc, b = c // n, c % n, box_of[c]
        d = g[c]
        if d != 0:  # undo the previous candidate at this depth
            bit = 1 << d
            rows[r] ^= bit
            cols[kc] ^= bit
            boxes[b] ^= bit
            g[c] = 0
        used = rows[r] | cols[kc] | boxes[b]
        k = stack_k[depth]
        placed = False
        while k < n:
            d = order[c, k]
            k += 1
            if not (used >> d) & 1:
                bit = 1 << d
                rows[r] |= bit
                cols[kc] |= bit
                boxes[b] |= bit
                g[c] = d
                placed = True
                break
        stack_k[depth] = k
        if placed:
            depth += 1
            choose = True
        else:
            backtracks += 1
            depth -= 1
            if depth < 0:
                break
    return count, backtracks


def _ascending(n: int) -> np.ndarray:
    return np.tile(np.arange(1, n + 1, dtype=np.int64), (n * n, 1))


def count_solutions(board: np.ndarray, limit: int = 2) -> tuple[int, int, np.ndarray]:
    """(solutions found up to `limit`, backtracks, first solution or zeros) for one flat board."""
    board = np.ascontiguousarray(board, dtype=np.int64).reshape(-1)
    n = size_of(board.size)
    sol = np.zeros(board.size, np.int64)
    cnt, bt = _search(board, n, box_index(n), _ascending(n), int(limit), sol, _POPCOUNT)
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


def rating(board: np.ndarray) -> int:
    """Backtracks of the exhaustive (limit 2) search: the generator's difficulty rating."""
    return count_solutions(board, 2)[1]


# ---------------------------------------------------------------------------------------------
# generator


@njit(cache=True)
def _generate_one(n, box_of, fill_order, asc_order, dig_order, target_givens, popcount, puzzle, solution):
    """Fill a random board, then blank cells in `dig_order` while the solution stays unique.

    Returns (givens, rating); `puzzle` and `solution` are written in place.
    """
    N = n * n
    empty = np.zeros(N, np.int64)
    cnt, _ = _search(empty, n, box_of, fill_order, 1, solution, popcount)
    if cnt != 1:
        return -1, 0
    scratch = np.zeros(N, np.int64)
    puzzle[:] = solution
    givens = N
    for i in range(N):
        if givens <= target_givens:
            break
        c = dig_order[i]
        d = puzzle[c]
        puzzle[c] = 0
        cnt, _ = _search(puzzle, n, box_of, asc_order, 2, scratch, popcount)
        if cnt == 1:
            givens -= 1
        else:
            puzzle[c] = d
    _, bt = _search(puzzle, n, box_of, asc_order, 2, scratch, popcount)
    return givens, bt


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
    k, bt = _generate_one(n, box_index(n), fill_order, _ascending(n), dig_order, int(givens), _POPCOUNT,
                          puzzle, solution)
    if k < 0:  # the solver always fills an empty board; this guards the kernel's contract
        raise AssertionError(f"sudoku {n}x{n}: the solver found no full board")
    return puzzle.astype(np.uint8), solution.astype(np.uint8), int(k), int(bt)


# ---------------------------------------------------------------------------------------------
# answer checks


@njit(cache=True)
def _first_invalid(answers, n, box_of):
    """Index of the first row of `answers` (uint8 [N, n*n], digits) that is not a solved board, or -1."""
    full = (1 << (n + 1)) - 2
    for i in range(answers.shape[0]):
        rows = np.zeros(n, np.int64)
        cols = np.zeros(n, np.int64)
        boxes = np.zeros(n, np.int64)
        for c in range(n * n):
            bit = 1 << answers[i, c]
            rows[c // n] |= bit
            cols[c % n] |= bit
            boxes[box_of[c]] |= bit
        for u in range(n):
            if rows[u] != full or cols[u] != full or boxes[u] != full:
                return i
    return -1


def first_invalid_solution(answers: np.ndarray, n: int) -> int:
    """Row index of the first answer (digits 1..n) that is not a valid full board, or -1."""
    a = np.ascontiguousarray(answers, dtype=np.uint8).reshape(-1, n * n)
    if a.size and (a.min() < 1 or a.max() > n):
        return int(np.flatnonzero((a < 1).any(1) | (a > n).any(1))[0])
    return int(_first_invalid(a, n, box_index(n)))


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
    """Per row p: values v in [offset, offset+n] -> table[p, v-offset] + offset; others unchanged."""
    n = table.shape[1] - 1
    y = x.astype(np.int64) - offset
    ok = (y >= 0) & (y <= n)
    mapped = np.take_along_axis(table.astype(np.int64), np.clip(y, 0, n), axis=1) + offset
    return np.where(ok, mapped, x).astype(x.dtype)


def apply_augs(x: np.ndarray, augs: SudokuAugs, offset: int = 0) -> np.ndarray:
    """Augment boards x [P, n*n] (digits, or tokens with offset=1) row by row."""
    x = np.asarray(x)
    moved = np.take_along_axis(x, augs.cell_perm(), axis=1)
    return _map_values(moved, augs.digit_map, offset)


def invert_augs(x: np.ndarray, augs: SudokuAugs, offset: int = 0) -> np.ndarray:
    """Map augmented boards (or predictions on them) back to the original frame: inverse of apply_augs."""
    x = np.asarray(x)
    inv_digits = np.empty_like(augs.digit_map)
    np.put_along_axis(inv_digits, augs.digit_map.astype(np.int64), np.broadcast_to(
        np.arange(augs.size + 1, dtype=augs.digit_map.dtype), augs.digit_map.shape), axis=1)
    y = _map_values(x, inv_digits, offset)
    out = np.empty_like(y)
    np.put_along_axis(out, augs.cell_perm(), y, axis=1)
    return out
