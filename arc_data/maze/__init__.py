"""Mazes in Maze-Hard's charset: '#' wall, ' ' open, 'S' start, 'G' goal, 'o' the marked path.

A question is an n x n board with one S and one G; its answer is the same board with the cells of a
shortest S->G path (4-neighbour moves, S and G excluded) marked 'o'.

Generator: a recursive-backtracker (depth-first) maze on the cells at even coordinates, the walls
between them at odd ones (an even n leaves the last row and column wall), then `openings`: each
remaining wall between two cells is opened with that probability (cycles, so several routes exist).
S is a random open cell; G a random open cell at least `min_path` steps away whose shortest path
from S is unique (so the marked answer is the only right one). Rating = the path length in steps.

Kernels (numba: BFS, generator) live in arc_data.maze.kernels, imported on first use. The
builder's check (`first_bad_maze`, a batched level-by-level BFS) is numpy only: the answer equals
the question except open cells marked 'o', and the marked cells form an S->G path as short as the
BFS distance. Augmentation: the 8 dihedral transforms (`format.dihedral` numbering), batched;
`invert_dihedral_rows` undoes them.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from arc_data import format as fmt

CHARSET = "# SGo"
WALL, OPEN, START, GOAL, PATH = (ord(c) for c in CHARSET)

# first_bad_maze's problems, in the order they are checked
_PROBLEMS = {
    1: "the question holds 'o' (only the answer marks the path)",
    2: "the question needs exactly one 'S' and one 'G'",
    3: "the answer differs from the question outside open cells marked 'o'",
    4: "'G' cannot be reached from 'S'",
    5: "the cells marked 'o' do not form one S->G path",
    6: "the marked path is longer than the shortest S->G path",
}


def batched_bfs(passable: np.ndarray, src: np.ndarray, n: int) -> np.ndarray:
    """BFS distances (int32 [N, n*n], -1 unreached) of N boards at once, level by level (numpy).

    passable bool [N, n*n]; src int [N]. Work is linear in the cells reached; the Python loop runs
    once per BFS level (the largest distance in the batch)."""
    N, C = passable.shape
    flat = np.ascontiguousarray(passable).reshape(-1)
    dist = np.full(N * C, -1, np.int32)
    mark = np.full(N * C, -1, np.int64)
    front = np.arange(N, dtype=np.int64) * C + np.asarray(src, np.int64)
    dist[front] = 0
    level = 0
    while front.size:
        level += 1
        cell = front % C
        r, k = cell // n, cell % n
        cand = np.concatenate([front[r > 0] - n, front[r < n - 1] + n, front[k > 0] - 1, front[k < n - 1] + 1])
        cand = cand[flat[cand] & (dist[cand] < 0)]
        order = np.arange(cand.size, dtype=np.int64)
        mark[cand] = order  # duplicates: the last write wins, so keep one copy of each cell
        cand = cand[mark[cand] == order]
        dist[cand] = level
        front = cand
    return dist.reshape(N, C)


def problem_codes(questions: np.ndarray, answers: np.ndarray, n: int) -> np.ndarray:
    """int64 [N]: 0 for a valid question/answer pair (CSV bytes [N, n*n]), else its first problem's
    code (_PROBLEMS, checked in that order).

    Valid: one 'S' and one 'G', no 'o' in the question; the answer equals the question except open
    cells marked 'o'; the marked cells form one S->G path (a BFS through S, G and the marked cells
    reaches G in exactly marked+1 steps, so it visits every marked cell once) as short as the BFS
    distance through all open cells."""
    q, a = np.asarray(questions, np.uint8), np.asarray(answers, np.uint8)
    rows = np.arange(q.shape[0])
    s, g = np.argmax(q == START, axis=1), np.argmax(q == GOAL, axis=1)
    marked = (a == PATH).sum(axis=1)
    shortest = batched_bfs(q != WALL, s, n)[rows, g]
    on_path = batched_bfs((a == PATH) | (a == START) | (a == GOAL), s, n)[rows, g]
    code = np.zeros(q.shape[0], np.int64)
    for c, bad in ((6, on_path != shortest), (5, on_path != marked + 1), (4, shortest < 0),
                   (3, ((a != q) & ~((q == OPEN) & (a == PATH))).any(axis=1)),
                   (2, ((q == START).sum(axis=1) != 1) | ((q == GOAL).sum(axis=1) != 1)),
                   (1, (q == PATH).any(axis=1))):
        code[bad] = c  # later (earlier-listed) checks win
    return code


def first_bad_maze(questions: np.ndarray, answers: np.ndarray, n: int, chunk: int = 1 << 13) -> tuple[int, str]:
    """(row, problem) of the first invalid question/answer pair (CSV bytes, [N, n*n]), or (-1, "")."""
    for lo in range(0, np.shape(questions)[0], chunk):
        code = problem_codes(questions[lo:lo + chunk], answers[lo:lo + chunk], n)
        if code.any():
            i = int(np.flatnonzero(code)[0])
            return lo + i, _PROBLEMS[int(code[i])]
    return -1, ""


def shortest_path_length(board: np.ndarray, n: int) -> int:
    """BFS distance S->G on a board (CSV bytes [n*n]; walls '#'), -1 when unreachable."""
    b = np.asarray(board, dtype=np.uint8).reshape(-1)
    s, g = int(np.flatnonzero(b == START)[0]), int(np.flatnonzero(b == GOAL)[0])
    from arc_data.maze.kernels import maze_bfs  # lazy: keeps numba off `evaluate --help`

    dist = np.empty(n * n, np.int64)
    maze_bfs((b != WALL).astype(np.uint8), n, s, dist, np.empty(n * n, np.int64))
    return int(dist[g])


def shortest_path_length_reference(board: np.ndarray, n: int) -> int:
    """Plain-Python BFS (the reference the kernel is tested against)."""
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


def generate(rng: np.random.Generator, n: int, min_path: int = 1, openings: float = 0.0
             ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """One maze (question bytes, answer bytes, path length), or None when this draw has no goal at
    >= min_path steps (the caller retries)."""
    q = np.empty(n * n, np.uint8)
    a = np.empty(n * n, np.uint8)
    from arc_data.maze.kernels import maze_generate_one  # lazy: keeps numba off `evaluate --help`

    length = maze_generate_one(n, rng.random(uniforms_per_maze(n)), float(openings), int(min_path), q, a)
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
    return apply_dihedral_rows(x, fmt.DIHEDRAL_INVERSE[np.asarray(tids, dtype=np.int64)], n)
