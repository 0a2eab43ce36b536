"""Numba kernels of the puzzle tasks (serial, `cache=True`): the Sudoku solver and generator, the
maze BFS and generator. Imported lazily by arc_data.sudoku / arc_data.maze, so that building a
dataset (numpy only) does not pay numba's start-up (about 0.85 s: import plus the first cached
kernel). Each kernel has a reference it is tested against: `sudoku.count_solutions_reference`
(plain Python) and brute force on 4x4; `maze.shortest_path_length_reference` (plain-Python BFS).
"""

from __future__ import annotations

import numpy as np
from numba import njit

WALL, OPEN, START, GOAL, PATH = (ord(c) for c in "# SGo")  # maze.CHARSET


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
def maze_bfs(passable, n, src, dist, queue):
    """4-neighbour BFS over cells with passable[c] != 0; dist (int64 [n*n]) gets -1 where unreached.

    Returns the number of cells reached; queue[:that] lists them in BFS order."""
    dist[:] = -1
    dist[src] = 0
    head, tail = 0, 1
    queue[0] = src
    while head < tail:
        c = queue[head]
        head += 1
        r, k = c // n, c % n
        for t in range(4):
            if t == 0:
                if r == 0:
                    continue
                nb = c - n
            elif t == 1:
                if r == n - 1:
                    continue
                nb = c + n
            elif t == 2:
                if k == 0:
                    continue
                nb = c - 1
            else:
                if k == n - 1:
                    continue
                nb = c + 1
            if passable[nb] != 0 and dist[nb] < 0:
                dist[nb] = dist[c] + 1
                queue[tail] = nb
                tail += 1
    return tail


@njit(cache=True)
def maze_generate_one(n, u, openings, min_path, q, a):
    """One maze from uniforms u (uniforms_per_maze(n)) into q, a (uint8 [n*n]). Returns the path
    length, or -1 when no goal at >= min_path steps with a unique shortest path exists."""
    N = n * n
    m = (n + 1) // 2
    q[:] = WALL
    visited = np.zeros(m * m, np.uint8)
    stack = np.empty(m * m, np.int64)
    nbrs = np.empty(4, np.int64)
    ui = 0
    top = 0
    stack[0] = 0
    visited[0] = 1
    q[0] = OPEN
    while top >= 0:
        cell = stack[top]
        ci, cj = cell // m, cell % m
        k = 0
        if ci > 0 and visited[cell - m] == 0:
            nbrs[k] = cell - m
            k += 1
        if ci < m - 1 and visited[cell + m] == 0:
            nbrs[k] = cell + m
            k += 1
        if cj > 0 and visited[cell - 1] == 0:
            nbrs[k] = cell - 1
            k += 1
        if cj < m - 1 and visited[cell + 1] == 0:
            nbrs[k] = cell + 1
            k += 1
        if k == 0:
            top -= 1
            continue
        nxt = nbrs[min(int(u[ui] * k), k - 1)]
        ui += 1
        ni, nj = nxt // m, nxt % m
        q[(ci + ni) * n + (cj + nj)] = OPEN  # the wall between them (coordinates 2ci+1 etc. halved)
        q[2 * ni * n + 2 * nj] = OPEN
        visited[nxt] = 1
        top += 1
        stack[top] = nxt
    ui = m * m
    for i in range(m):  # walls between horizontal then vertical neighbours, in a fixed order
        for j in range(m - 1):
            if u[ui] < openings:
                q[2 * i * n + 2 * j + 1] = OPEN
            ui += 1
    for i in range(m - 1):
        for j in range(m):
            if u[ui] < openings:
                q[(2 * i + 1) * n + 2 * j] = OPEN
            ui += 1
    # start: a uniformly drawn open cell
    num_open = 0
    for c in range(N):
        if q[c] == OPEN:
            num_open += 1
    pick = min(int(u[ui] * num_open), num_open - 1)
    ui += 1
    s = -1
    for c in range(N):
        if q[c] == OPEN:
            if pick == 0:
                s = c
                break
            pick -= 1
    passable = np.empty(N, np.uint8)
    for c in range(N):
        passable[c] = 1 if q[c] != WALL else 0
    dist = np.empty(N, np.int64)
    queue = np.empty(N, np.int64)
    reached = maze_bfs(passable, n, s, dist, queue)
    # number of shortest paths (capped at 2), in BFS order
    ways = np.zeros(N, np.int64)
    ways[s] = 1
    for h in range(1, reached):
        c = queue[h]
        r, k = c // n, c % n
        w = 0
        if r > 0 and dist[c - n] == dist[c] - 1:
            w += ways[c - n]
        if r < n - 1 and dist[c + n] == dist[c] - 1:
            w += ways[c + n]
        if k > 0 and dist[c - 1] == dist[c] - 1:
            w += ways[c - 1]
        if k < n - 1 and dist[c + 1] == dist[c] - 1:
            w += ways[c + 1]
        ways[c] = min(w, 2)
    num_goal = 0
    for c in range(N):
        if dist[c] >= min_path and dist[c] > 0 and ways[c] == 1:
            num_goal += 1
    if num_goal == 0:
        return -1
    pick = min(int(u[ui] * num_goal), num_goal - 1)
    g = -1
    for c in range(N):
        if dist[c] >= min_path and dist[c] > 0 and ways[c] == 1:
            if pick == 0:
                g = c
                break
            pick -= 1
    q[s] = START
    q[g] = GOAL
    a[:] = q
    c = g
    while dist[c] > 1:  # walk back along the unique shortest path
        r, k = c // n, c % n
        if r > 0 and dist[c - n] == dist[c] - 1:
            c = c - n
        elif r < n - 1 and dist[c + n] == dist[c] - 1:
            c = c + n
        elif k > 0 and dist[c - 1] == dist[c] - 1:
            c = c - 1
        else:
            c = c + 1
        a[c] = PATH
    return dist[g]


# ---------------------------------------------------------------------------------------------
# large files: one pass over the CSV bytes, and the Sudoku encode + check in place
# (numpy references: puzzle_csv._parse_block, and puzzles.encode's numpy path)


@njit(cache=True)
def csv_scan(buf, parse_ratings):
    """Split a block of whole lines (bytes, LF or CRLF ends) into rows of 4 fields.

    Returns (rows, width, question offsets, answer offsets, ratings) (the arrays hold `rows` valid
    entries), or rows = -1 when the block needs the csv module: a quote, a non-ASCII byte, a stray
    CR, a row without exactly 3 commas, question/answer lengths that differ, a rating that is not
    1-18 digits. Blank lines are skipped.
    """
    cap = 1
    for j in range(buf.shape[0]):
        if buf[j] == 10:
            cap += 1
    q_off = np.empty(cap, np.int64)
    a_off = np.empty(cap, np.int64)
    ratings = np.zeros(cap if parse_ratings else 0, np.int64)
    n = buf.shape[0]
    i = 0
    rows = 0
    width = -1
    while i < n:
        start = i
        commas = 0
        c1 = c2 = c3 = -1
        j = i
        while j < n and buf[j] != 10:
            b = buf[j]
            if b >= 128 or b == 34:
                return -1, 0, q_off, a_off, ratings
            if b == 13 and not (j + 1 < n and buf[j + 1] == 10):
                return -1, 0, q_off, a_off, ratings
            if b == 44:
                if commas == 0:
                    c1 = j
                elif commas == 1:
                    c2 = j
                elif commas == 2:
                    c3 = j
                commas += 1
            j += 1
        end = j
        if end > start and buf[end - 1] == 13:
            end -= 1
        i = j + 1
        if end == start:
            continue
        if commas != 3:
            return -1, 0, q_off, a_off, ratings
        qw = c2 - c1 - 1
        if width < 0:
            width = qw
        if qw < 1 or qw != width or c3 - c2 - 1 != width:
            return -1, 0, q_off, a_off, ratings
        q_off[rows] = c1 + 1
        a_off[rows] = c2 + 1
        if parse_ratings:
            w = end - c3 - 1
            if w < 1 or w > 18:
                return -1, 0, q_off, a_off, ratings
            v = 0
            for k in range(c3 + 1, end):
                d = buf[k] - 48
                if d < 0 or d > 9:
                    return -1, 0, q_off, a_off, ratings
                v = v * 10 + d
            ratings[rows] = v
        rows += 1
    return rows, width, q_off, a_off, ratings


@njit(cache=True)
def gather_rows(buf, offsets, width, out):
    """out[r, :] = buf[offsets[r] : offsets[r] + width]."""
    for r in range(offsets.shape[0]):
        o = offsets[r]
        for k in range(width):
            out[r, k] = buf[o + k]


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
