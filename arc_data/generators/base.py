"""What every task family is made of, and the grid helpers the families share.

A family is a rule with parameters: `params(rng, difficulty)` draws one rule instance (JSON-able
parameters: a task), `sample(rng, params, difficulty)` draws an input grid for it (or None to
redraw), and `rule(params, grid)` computes the output (or None when the rule is undefined on that
grid). `rule` is a pure function of its arguments, so a task can be re-checked from its parameters
and its inputs alone (`make_task` does, for every pair). Grids are uint8 [H, W], 1 <= H, W <= 30,
values 0..9; 0 is the background.

`difficulty` (1, 2 or 3) widens grid sizes, object counts and colour counts; each family reads it
in `params` and `sample` (the `side` and `count` helpers below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from arc_data.errors import ArcError

MAX_SIDE = 30
DIFFICULTIES = (1, 2, 3)
# grid side drawn by difficulty (inclusive bounds); families with an output larger than the input
# shrink these themselves
SIDES = {1: (3, 8), 2: (6, 14), 3: (10, 22)}

Params = dict
Grid = np.ndarray


@dataclass(frozen=True)
class Family:
    name: str
    summary: str  # one line: what the rule does (docs, manifest)
    params: Callable[[np.random.Generator, int], Params]
    sample: Callable[[np.random.Generator, Params, int], Grid | None]
    rule: Callable[[Params, Grid], Grid | None]


class GenerationError(ArcError):
    """A family could not draw a valid task (a bug in a family, or knobs that leave no room)."""


# ---------------------------------------------------------------------------------------------
# drawing helpers (every random choice goes through the task's own Generator)


def side(rng: np.random.Generator, difficulty: int, lo: int | None = None, hi: int | None = None) -> int:
    """A grid side for this difficulty, clipped to [lo, hi]."""
    a, b = SIDES[difficulty]
    a, b = max(a, lo or 1), min(b, hi or MAX_SIDE)
    return int(rng.integers(a, max(a, b) + 1))


def count(rng: np.random.Generator, difficulty: int, base: int = 1) -> int:
    """A number of objects: base .. base + 2*difficulty."""
    return int(rng.integers(base, base + 2 * difficulty + 1))


def colours(rng: np.random.Generator, k: int, exclude: tuple[int, ...] = (0,)) -> list[int]:
    """k distinct colours, none of `exclude`."""
    pool = np.array([c for c in range(10) if c not in exclude])
    return [int(c) for c in rng.choice(pool, size=k, replace=False)]


def noise_grid(rng: np.random.Generator, h: int, w: int, palette: list[int], density: float) -> Grid:
    """Background with each cell set, with probability `density`, to a colour of `palette`."""
    g = np.zeros((h, w), np.uint8)
    on = rng.random((h, w)) < density
    g[on] = rng.choice(np.array(palette, np.uint8), size=int(on.sum()))
    return g


def blob(rng: np.random.Generator, h: int, w: int, fill: float = 0.6) -> np.ndarray:
    """A 4-connected boolean shape inside an h x w box touching all four sides of it: a random walk
    of cells grown from the centre until about `fill` of the box is covered."""
    mask = np.zeros((h, w), bool)
    r, c = h // 2, w // 2
    mask[r, c] = True
    target = max(1, int(round(fill * h * w)))
    cells = [(r, c)]
    while mask.sum() < target:
        r, c = cells[int(rng.integers(len(cells)))]
        dr, dc = ((1, 0), (-1, 0), (0, 1), (0, -1))[int(rng.integers(4))]
        r2, c2 = r + dr, c + dc
        if 0 <= r2 < h and 0 <= c2 < w and not mask[r2, c2]:
            mask[r2, c2] = True
            cells.append((r2, c2))
    # make the box tight: every row and column of it holds a cell
    for i in range(h):
        if not mask[i].any():
            mask[i, c] = True
    for j in range(w):
        if not mask[:, j].any():
            mask[r, j] = True
    return _connected(mask)


def _connected(mask: np.ndarray) -> np.ndarray:
    """Join a mask's 4-connected parts with straight bridges, so it is one object."""
    labels = label_components(mask.astype(np.uint8), background=0)
    n = int(labels.max())
    while n > 1:
        ys, xs = np.nonzero(labels == 1)
        y2, x2 = np.nonzero(labels == 2)
        a, b = (int(ys[0]), int(xs[0])), (int(y2[0]), int(x2[0]))
        lo, hi = sorted((a[0], b[0]))
        mask[lo:hi + 1, a[1]] = True
        lo, hi = sorted((a[1], b[1]))
        mask[b[0], lo:hi + 1] = True
        labels = label_components(mask.astype(np.uint8), background=0)
        n = int(labels.max())
    return mask


def free_spot(rng: np.random.Generator, occupied: np.ndarray, h: int, w: int, margin: int = 1,
              tries: int = 60) -> tuple[int, int] | None:
    """A top-left corner where an h x w box (plus `margin` around it) touches nothing occupied."""
    gh, gw = occupied.shape
    if h > gh or w > gw:
        return None
    for _ in range(tries):
        r, c = int(rng.integers(0, gh - h + 1)), int(rng.integers(0, gw - w + 1))
        if not occupied[max(0, r - margin):r + h + margin, max(0, c - margin):c + w + margin].any():
            return r, c
    return None


def scatter_blocks(rng: np.random.Generator, h: int, w: int, n: int,
                   size: Callable[[np.random.Generator], tuple[int, int]], palette: list[int]) -> np.ndarray:
    """An h x w grid with up to `n` solid blocks, each `size(rng)` large, a colour of `palette`, apart
    from the others (`free_spot`, margin 1); placing stops at the first block that finds no room."""
    g = np.zeros((h, w), np.uint8)
    occupied = np.zeros((h, w), bool)
    for _ in range(n):
        bh, bw = size(rng)
        spot = free_spot(rng, occupied, bh, bw)
        if spot is None:
            break
        r, c = spot
        g[r:r + bh, c:c + bw] = palette[int(rng.integers(len(palette)))]
        occupied[r:r + bh, c:c + bw] = True
    return g


# ---------------------------------------------------------------------------------------------
# analysis helpers (pure: the rules use them)


def label_components(grid: Grid, background: int = 0, by_colour: bool = True) -> np.ndarray:
    """4-connected components of the non-background cells: int32 labels 1..n (0 = background),
    numbered in row-major order of their first cell. With by_colour, neighbours join only if they
    have the same colour."""
    h, w = grid.shape
    labels = np.zeros((h, w), np.int32)
    n = 0
    for r0 in range(h):
        for c0 in range(w):
            if grid[r0, c0] == background or labels[r0, c0]:
                continue
            n += 1
            labels[r0, c0] = n
            stack = [(r0, c0)]
            while stack:
                r, c = stack.pop()
                for r2, c2 in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                    if (0 <= r2 < h and 0 <= c2 < w and not labels[r2, c2] and grid[r2, c2] != background
                            and (not by_colour or grid[r2, c2] == grid[r, c])):
                        labels[r2, c2] = n
                        stack.append((r2, c2))
    return labels


def reachable_from_border(passable: np.ndarray) -> np.ndarray:
    """Cells of `passable` 4-connected to the grid's border through passable cells."""
    h, w = passable.shape
    seen = np.zeros((h, w), bool)
    stack = [(r, c) for r in range(h) for c in (0, w - 1) if passable[r, c]]
    stack += [(r, c) for c in range(w) for r in (0, h - 1) if passable[r, c]]
    for r, c in stack:
        seen[r, c] = True
    while stack:
        r, c = stack.pop()
        for r2, c2 in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= r2 < h and 0 <= c2 < w and passable[r2, c2] and not seen[r2, c2]:
                seen[r2, c2] = True
                stack.append((r2, c2))
    return seen


def fits(grid: Grid | None) -> bool:
    """A grid the ARC format accepts: uint8 2-D, sides 1..30, values 0..9."""
    return (isinstance(grid, np.ndarray) and grid.ndim == 2 and grid.dtype == np.uint8
            and 1 <= grid.shape[0] <= MAX_SIDE and 1 <= grid.shape[1] <= MAX_SIDE and int(grid.max(initial=0)) <= 9)
