"""Mazes in Maze-Hard's charset: '#' wall, ' ' open, 'S' start, 'G' goal, 'o' the marked path.

A question is an n x n board with one S and one G; its answer is the same board with the cells of a
shortest S->G path (4-neighbour moves, S and G excluded) marked 'o'.

Generator: a recursive-backtracker (depth-first) maze on the cells at even coordinates, the walls
between them at odd ones (an even n leaves the last row and column wall), then `openings`: each
remaining wall between two cells is opened with that probability (cycles, so several routes exist).
S is a random open cell; G a random open cell at least `min_path` steps away whose shortest path
from S is unique (so the marked answer is the only right one). Rating = the path length in steps.

Checks (`first_bad_maze`): the answer equals the question except open cells marked 'o', and the
marked cells form an S->G path as short as the BFS distance. Augmentation: the 8 dihedral transforms
(`format.dihedral` numbering), batched; `invert_dihedral_rows` undoes them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from arc_data import format as F

CHARSET = "# SGo"
WALL, OPEN, START, GOAL, PATH = (ord(c) for c in CHARSET)

# error codes of _check_one -> message
_PROBLEMS = {
    1: "the question holds 'o' (only the answer marks the path)",
    2: "the question needs exactly one 'S' and one 'G'",
    3: "the answer differs from the question outside open cells marked 'o'",
    4: "'G' cannot be reached from 'S'",
    5: "the cells marked 'o' do not form one S->G path",
    6: "the marked path is longer than the shortest S->G path",
}


@njit(cache=True)
def _bfs(passable, n, src, dist, queue):
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
def _check_one(q, a, n, dist, queue, passable):
    """0 when (q, a) is a valid question/answer pair, else an error code (_PROBLEMS)."""
    N = n * n
    s, g, ns, ng, marked = -1, -1, 0, 0, 0
    for c in range(N):
        if q[c] == PATH:
            return 1
        if q[c] == START:
            s = c
            ns += 1
        elif q[c] == GOAL:
            g = c
            ng += 1
        if a[c] != q[c] and not (q[c] == OPEN and a[c] == PATH):
            return 3
        if a[c] == PATH:
            marked += 1
    if ns != 1 or ng != 1:
        return 2
    for c in range(N):
        passable[c] = 1 if q[c] != WALL else 0
    _bfs(passable, n, s, dist, queue)
    shortest = dist[g]
    if shortest < 0:
        return 4
    for c in range(N):
        passable[c] = 1 if (a[c] == PATH or a[c] == START or a[c] == GOAL) else 0
    _bfs(passable, n, s, dist, queue)
    if dist[g] != marked + 1:  # a path of marked+1 steps visits every marked cell exactly once
        return 5
    if dist[g] != shortest:
        return 6
    return 0


@njit(cache=True)
def _first_bad(questions, answers, n):
    N = n * n
    dist = np.empty(N, np.int64)
    queue = np.empty(N, np.int64)
    passable = np.empty(N, np.uint8)
    for i in range(questions.shape[0]):
        code = _check_one(questions[i], answers[i], n, dist, queue, passable)
        if code:
            return i, code
    return -1, 0


def first_bad_maze(questions: np.ndarray, answers: np.ndarray, n: int) -> tuple[int, str]:
    """(row, problem) of the first invalid question/answer pair (CSV bytes, [N, n*n]), or (-1, "")."""
    q = np.ascontiguousarray(questions, dtype=np.uint8)
    a = np.ascontiguousarray(answers, dtype=np.uint8)
    i, code = _first_bad(q, a, n)
    return int(i), _PROBLEMS.get(int(code), "")


def shortest_path_length(board: np.ndarray, n: int) -> int:
    """BFS distance S->G on a board (CSV bytes [n*n]; walls '#'), -1 when unreachable."""
    b = np.asarray(board, dtype=np.uint8).reshape(-1)
    s, g = int(np.flatnonzero(b == START)[0]), int(np.flatnonzero(b == GOAL)[0])
    dist = np.empty(n * n, np.int64)
    _bfs((b != WALL).astype(np.uint8), n, s, dist, np.empty(n * n, np.int64))
    return int(dist[g])


def shortest_path_length_reference(board: np.ndarray, n: int) -> int:
    """Plain-Python BFS (the reference the kernel is tested against)."""
    from collections import deque

    b = np.asarray(board, dtype=np.uint8).reshape(n, n)
    s = tuple(int(v) for v in np.argwhere(b == START)[0])
    g = tuple(int(v) for v in np.argwhere(b == GOAL)[0])
    seen = {s: 0}
    todo = deque([s])
    while todo:
        r, c = todo.popleft()
        if (r, c) == g:
            return seen[g]
        for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= rr < n and 0 <= cc < n and b[rr, cc] != WALL and (rr, cc) not in seen:
                seen[rr, cc] = seen[r, c] + 1
                todo.append((rr, cc))
    return -1


# ---------------------------------------------------------------------------------------------
# generator


def uniforms_per_maze(n: int) -> int:
    m = (n + 1) // 2
    return m * m + 2 * m * (m - 1) + 2


@njit(cache=True)
def _generate_one(n, u, openings, min_path, q, a):
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
    reached = _bfs(passable, n, s, dist, queue)
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


def generate(rng: np.random.Generator, n: int, min_path: int = 1, openings: float = 0.0
             ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """One maze (question bytes, answer bytes, path length), or None when this draw has no goal at
    >= min_path steps (the caller retries)."""
    q = np.empty(n * n, np.uint8)
    a = np.empty(n * n, np.uint8)
    length = _generate_one(n, rng.random(uniforms_per_maze(n)), float(openings), int(min_path), q, a)
    if length < 0:
        return None
    return q, a, int(length)


# ---------------------------------------------------------------------------------------------
# dihedral augmentation, batched


def dihedral_rows(x: np.ndarray, tid: int, n: int) -> np.ndarray:
    """format.dihedral(tid) applied to every row of x [P, n*n] (as n x n boards)."""
    b = np.asarray(x).reshape(-1, n, n)
    if tid == 0:
        out = b
    elif tid in (1, 2, 3):
        out = np.rot90(b, k=tid, axes=(1, 2))
    elif tid == 4:
        out = b[:, :, ::-1]
    elif tid == 5:
        out = b[:, ::-1, :]
    elif tid == 6:
        out = b.transpose(0, 2, 1)
    elif tid == 7:
        out = np.rot90(b, k=1, axes=(1, 2))[:, :, ::-1]
    else:
        raise ValueError(f"dihedral id must be 0..7, got {tid}")
    return np.ascontiguousarray(out).reshape(-1, n * n)


def apply_dihedral_rows(x: np.ndarray, tids: np.ndarray, n: int) -> np.ndarray:
    """Row p of x under dihedral tids[p]."""
    x = np.asarray(x)
    out = np.empty_like(x)
    for t in range(8):
        rows = np.flatnonzero(np.asarray(tids) == t)
        if rows.size:
            out[rows] = dihedral_rows(x[rows], t, n)
    return out


def invert_dihedral_rows(x: np.ndarray, tids: np.ndarray, n: int) -> np.ndarray:
    """Undo apply_dihedral_rows: row p under the inverse of tids[p]."""
    return apply_dihedral_rows(x, F.DIHEDRAL_INVERSE[np.asarray(tids, dtype=np.int64)], n)
