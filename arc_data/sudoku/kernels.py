"""Numba kernels of Sudoku (serial, `cache=True`): the solver and generator, and for large sets the
encode + answer check and the augmentation in one pass per row. Imported lazily by arc_data.sudoku
and the build-puzzles pipeline, so that building a dataset (numpy only) does not pay numba's start-up
(about 0.85 s: import plus the first cached kernel). Each kernel has a reference it is tested against:
`sudoku.count_solutions_reference` (plain Python) and brute force on 4x4; the encode check against
the numpy path of `arc_data.puzzles.build.encode`, the augmentation against `sudoku.apply_augs`.
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit


@njit(cache=True)
def sudoku_search(grid, n, box_of, order, limit, solution, popcount):
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


@njit(cache=True)
def sudoku_generate_one(n, box_of, fill_order, asc_order, dig_order, target_givens, popcount, puzzle, solution):
    """Fill a random board, then blank cells in `dig_order` while the solution stays unique.

    Returns (givens, rating); `puzzle` and `solution` are written in place.
    """
    N = n * n
    empty = np.zeros(N, np.int64)
    cnt, _ = sudoku_search(empty, n, box_of, fill_order, 1, solution, popcount)
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
        cnt, _ = sudoku_search(puzzle, n, box_of, asc_order, 2, scratch, popcount)
        if cnt == 1:
            givens -= 1
        else:
            puzzle[c] = d
    _, bt = sudoku_search(puzzle, n, box_of, asc_order, 2, scratch, popcount)
    return givens, bt


@njit(cache=True)
def sudoku_encode_check(q, a, lut, n, box_of, check):
    """CSV bytes -> tokens in place (lut: 255 = not allowed), checking each answer when `check`.

    Returns (row, code, cell, byte) of the first problem, or (-1, 0, 0, 0): code 1 question byte not
    allowed, 2 answer byte not allowed, 3 blank in the answer, 4 the answer changes a given,
    5 not a solved board. Rows before the bad one are already converted.
    """
    N = n * n
    full = (1 << (n + 1)) - 2
    units = np.zeros(3 * n, np.int64)
    qt = np.empty(N, np.uint8)
    at = np.empty(N, np.uint8)
    for i in range(q.shape[0]):
        for c in range(N):
            x = lut[q[i, c]]
            if x == 255:
                return i, 1, c, q[i, c]
            qt[c] = x
        for c in range(N):
            y = lut[a[i, c]]
            if y == 255:
                return i, 2, c, a[i, c]
            at[c] = y
        if check:
            units[:] = 0
            for c in range(N):
                if at[c] == 1:
                    return i, 3, c, 0
            for c in range(N):
                if qt[c] != 1 and qt[c] != at[c]:
                    return i, 4, c, 0
            for c in range(N):
                bit = 1 << (at[c] - 1)
                units[c // n] |= bit
                units[n + c % n] |= bit
                units[2 * n + box_of[c]] |= bit
            for u in range(3 * n):
                if units[u] != full:
                    return i, 5, 0, 0
        for c in range(N):
            q[i, c] = qt[c]
            a[i, c] = at[c]
    return -1, 0, 0, 0


@njit(cache=True)
def sudoku_augment(src_q, src_a, src_row, digit_map, transpose, row_perm, col_perm, n, out_q, out_a):
    """out_q[p], out_a[p] = augmentation p of the token rows src_q/src_a[src_row[p]] (PAD 0 and blank 1
    stay, digit token d+1 -> digit_map[p, d] + 1). arc_data.sudoku.apply_augs is the numpy
    reference: new cell i takes old cell row_perm[r]*n + col_perm[c] of the (transposed) board."""
    N = n * n
    for p in range(out_q.shape[0]):
        s = src_row[p]
        for i in range(N):
            old = row_perm[p, i // n] * n + col_perm[p, i % n]
            if transpose[p]:
                old = (old % n) * n + old // n
            v = src_q[s, old]
            out_q[p, i] = digit_map[p, v - 1] + 1 if v >= 2 else v
            v = src_a[s, old]
            out_a[p, i] = digit_map[p, v - 1] + 1 if v >= 2 else v
