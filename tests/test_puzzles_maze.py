"""Maze: BFS kernel against a plain-Python BFS, the generator (shortest, unique path; min_path knob),
the answer check (each kind of bad answer caught), and the batched dihedral transforms."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_data import format as fmt
from arc_data import maze

B = {ch: ord(ch) for ch in maze.CHARSET}


def _board(rows: list[str]) -> np.ndarray:
    return np.frombuffer("".join(rows).encode(), np.uint8).copy()


@settings(max_examples=120, deadline=None)
@given(n=st.integers(3, 12), seed=st.integers(0, 2**32 - 1), walls=st.floats(0.0, 0.6))
def test_bfs_matches_python_reference(n, seed, walls):
    rng = np.random.default_rng(seed)
    b = np.where(rng.random(n * n) < walls, B["#"], B[" "]).astype(np.uint8)
    s, g = rng.choice(n * n, size=2, replace=False)
    b[s], b[g] = B["S"], B["G"]
    assert maze.shortest_path_length(b, n) == maze.shortest_path_length_reference(b, n)


@pytest.mark.parametrize("n,min_path,openings", [(5, 1, 0.0), (15, 20, 0.0), (30, 80, 0.0), (30, 40, 0.2), (12, 5, 1.0)])
def test_generator_marks_the_unique_shortest_path(n, min_path, openings):
    rng = np.random.default_rng(n + min_path)
    made = 0
    for _ in range(60):
        out = maze.generate(rng, n, min_path, openings)
        if out is None:
            continue
        q, a, length = out
        made += 1
        assert set(q.tobytes()) <= set(b"# SG") and (q == B["S"]).sum() == 1 and (q == B["G"]).sum() == 1
        assert length >= min_path and length == maze.shortest_path_length_reference(q, n)
        assert (a == B["o"]).sum() == length - 1
        assert maze.first_bad_maze(q[None], a[None], n) == (-1, "")
        # unique: blocking any marked cell makes the goal farther (or unreachable)
        for c in np.flatnonzero(a == B["o"])[:8]:
            blocked = q.copy()
            blocked[c] = B["#"]
            d = maze.shortest_path_length(blocked, n)
            assert d == -1 or d > length
        if made >= 10:
            break
    assert made >= 5


def test_openings_add_cycles_and_perfect_mazes_have_none():
    def open_cells_and_edges(q, n):
        o = (q != B["#"]).reshape(n, n)
        return int(o.sum()), int((o[1:] & o[:-1]).sum() + (o[:, 1:] & o[:, :-1]).sum())

    rng = np.random.default_rng(0)
    q, _, _ = maze.generate(rng, 21, 1, 0.0)
    cells, edges = open_cells_and_edges(q, 21)
    assert edges == cells - 1  # a tree: exactly one route between any two cells
    q, _, _ = maze.generate(rng, 21, 1, 0.3)
    cells, edges = open_cells_and_edges(q, 21)
    assert edges > cells - 1


def test_generator_is_seeded():
    a = maze.generate(np.random.default_rng(1), 20, 10)
    b = maze.generate(np.random.default_rng(1), 20, 10)
    c = maze.generate(np.random.default_rng(2), 20, 10)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and not np.array_equal(a[0], c[0])


def test_impossible_min_path_gives_none():
    assert maze.generate(np.random.default_rng(0), 5, 24) is None


GOOD_Q = ["S  #", "## #", "   #", "G###"]
GOOD_A = ["Soo#", "##o#", "ooo#", "G###"]


@pytest.mark.parametrize("q,a,problem", [
    (GOOD_Q, GOOD_A, ""),
    (["S  #", "## #", "o  #", "G###"], GOOD_A, "holds 'o'"),
    (["S  #", "## #", "  S#", "G###"], ["Soo#", "##o#", "ooS#", "G###"], "exactly one 'S'"),
    (["   #", "## #", "   #", "G###"], ["ooo#", "##o#", "ooo#", "G###"], "exactly one 'S'"),
    (GOOD_Q, ["Soo#", "##o#", "ooo#", "Go##"], "differs from the question"),
    (GOOD_Q, ["Soo#", "#oo#", "ooo#", "G###"], "differs from the question"),
    (["S  #", "####", "   #", "G###"], ["S  #", "####", "   #", "G###"], "cannot be reached"),
    (GOOD_Q, ["So #", "## #", "oo #", "G###"], "do not form one S->G path"),
    (GOOD_Q, ["Soo#", "##o#", "ooo#", "G###"][:2] + ["oo #", "G###"], "do not form one S->G path"),
    (["S   ", "    ", "    ", "   G"], ["Sooo", "   o", "   o", "   G"], ""),
    (["S   ", "    ", "    ", "   G"], ["So  ", " oo ", "  oo", "   G"], ""),
])
def test_answer_check_catches_each_problem(q, a, problem):
    i, msg = maze.first_bad_maze(_board(q)[None], _board(a)[None], 4)
    if problem:
        assert i == 0 and problem in msg, msg
    else:
        assert (i, msg) == (-1, "")


def test_longer_than_shortest_path_is_refused():
    q = ["S  ", "   ", "  G"]
    detour = ["Soo", "  o", "  G"]  # 4 steps: shortest, fine
    assert maze.first_bad_maze(_board(q)[None], _board(detour)[None], 3)[0] == -1
    q2 = ["S # ", "  # ", "    ", "   G"]
    long_way = ["S # ", "o # ", "oooo", "   G"]  # 6 steps, but 6 is the shortest too: fine
    assert maze.first_bad_maze(_board(q2)[None], _board(long_way)[None], 4)[0] == -1
    q3 = ["S  G", "    ", "    ", "    "]
    around = ["S  G", "o  o", "oooo", "    "]  # 7 steps; shortest is 3
    i, msg = maze.first_bad_maze(_board(q3)[None], _board(around)[None], 4)
    assert i == 0 and "longer than the shortest" in msg


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 9), seed=st.integers(0, 2**32 - 1))
def test_batched_dihedral_matches_format_and_inverts(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, size=(16, n * n)).astype(np.uint8)
    tids = np.arange(16) % 8
    y = maze.apply_dihedral_rows(x, tids, n)
    for p in range(16):
        assert np.array_equal(y[p].reshape(n, n), fmt.dihedral(x[p].reshape(n, n), int(tids[p])))
    assert np.array_equal(maze.invert_dihedral_rows(y, tids, n), x)


def _bfs_reference(b: bytes, n: int, src: int, ok) -> list[int]:
    from collections import deque

    dist = [-1] * (n * n)
    dist[src] = 0
    todo = deque([src])
    while todo:
        c = todo.popleft()
        r, k = divmod(c, n)
        for rr, kk in ((r - 1, k), (r + 1, k), (r, k - 1), (r, k + 1)):
            nb = rr * n + kk
            if 0 <= rr < n and 0 <= kk < n and ok(b[nb]) and dist[nb] < 0:
                dist[nb] = dist[c] + 1
                todo.append(nb)
    return dist


def _code_reference(q: bytes, a: bytes, n: int) -> int:
    """Plain-Python oracle of maze.problem_codes."""
    if b"o" in q:
        return 1
    if q.count(b"S") != 1 or q.count(b"G") != 1:
        return 2
    if any(y != x and not (x == B[" "] and y == B["o"]) for x, y in zip(q, a)):
        return 3
    s, g = q.index(b"S"), q.index(b"G")
    shortest = _bfs_reference(q, n, s, lambda c: c != B["#"])[g]
    if shortest < 0:
        return 4
    on_path = _bfs_reference(a, n, s, lambda c: c in (B["o"], B["S"], B["G"]))[g]
    if on_path != a.count(b"o") + 1:
        return 5
    return 6 if on_path != shortest else 0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(4, 14))
def test_numpy_check_matches_python_oracle_on_corrupted_mazes(seed, n):
    rng = np.random.default_rng(seed)
    qs, ans = [], []
    while len(qs) < 24:
        made = maze.generate(rng, n, 2, float(rng.choice([0.0, 0.3])))
        if made is None:
            continue
        q, a, _ = made
        q, a = q.copy(), a.copy()
        kind = len(qs) % 6
        cells = rng.choice(n * n, size=int(rng.integers(1, 4)), replace=False)
        if kind == 1:
            a[cells] = B["o"]  # extra marks (on walls or open cells)
        elif kind == 2:
            a[cells] = np.where(a[cells] == B["o"], B[" "], a[cells])  # holes in the path
        elif kind == 3:
            q[cells] = B["#"]  # new walls (the path may now cross them)
            a[cells] = B["#"]
        elif kind == 4:
            q[cells[0]], a[cells[0]] = B["S"], B["S"]  # a second start
        elif kind == 5:
            q[cells] = np.where(q[cells] == B[" "], B["o"], q[cells])
        qs.append(q)
        ans.append(a)
    q, a = np.stack(qs), np.stack(ans)
    want = [_code_reference(x.tobytes(), y.tobytes(), n) for x, y in zip(q, a)]
    assert maze.problem_codes(q, a, n).tolist() == want
    assert want[0::6] == [0] * 4 and any(want)
    bad = [i for i, c in enumerate(want) if c]
    assert maze.first_bad_maze(q, a, n, chunk=5)[0] == bad[0]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 2**32 - 1))
def test_batched_bfs_matches_python_reference(n, seed):
    rng = np.random.default_rng(seed)
    passable = rng.random((6, n * n)) < 0.7
    src = rng.integers(0, n * n, 6)
    dist = maze.batched_bfs(passable, src, n)
    for i in range(6):
        ok = passable[i].astype(np.uint8).tobytes()
        assert dist[i].tolist() == _bfs_reference(ok, n, int(src[i]), lambda c: c == 1)
