"""Numba kernels of Maze (serial, `cache=True`): the BFS and the generator. Imported lazily by
arc_data.maze; tested against `maze.shortest_path_length_reference` (plain-Python BFS).
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit

WALL, OPEN, START, GOAL, PATH = (ord(c) for c in "# SGo")  # arc_data.maze.CHARSET


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
