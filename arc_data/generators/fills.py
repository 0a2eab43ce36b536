"""Families that fill, count and draw: flood fill of enclosed areas, counting objects, the most
frequent colour, lines shot from single cells."""

from __future__ import annotations

import numpy as np

from arc_data.generators.base import (
    Family,
    Grid,
    Params,
    colours,
    count,
    free_spot,
    label_components,
    noise_grid,
    reachable_from_border,
    scatter_blocks,
    side,
)

# --- flood_fill: background enclosed by walls (not reachable from the border) is filled -------

def _fill_params(rng: np.random.Generator, difficulty: int) -> Params:
    wall, fill = colours(rng, 2)
    return {"wall": wall, "fill": fill}


def _fill_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    h, w = side(rng, difficulty, lo=6), side(rng, difficulty, lo=6)
    g = np.zeros((h, w), np.uint8)
    occupied = np.zeros((h, w), bool)
    for _ in range(count(rng, difficulty)):
        bh, bw = int(rng.integers(3, min(h, 4 + 2 * difficulty) + 1)), int(rng.integers(3, min(w, 4 + 2 * difficulty) + 1))
        spot = free_spot(rng, occupied, bh, bw, margin=1)
        if spot is None:
            break
        r, c = spot
        g[r:r + bh, c:c + bw] = p["wall"]
        g[r + 1:r + bh - 1, c + 1:c + bw - 1] = 0
        if rng.random() < 0.3:  # an open box: a gap in its wall lets the background in
            g[r, c + 1 + int(rng.integers(bw - 2))] = 0
        occupied[r:r + bh, c:c + bw] = True
    return g if g.any() else None


def _fill_rule(p: Params, g: Grid) -> Grid:
    enclosed = (g == 0) & ~reachable_from_border(g == 0)
    out = g.copy()
    out[enclosed] = p["fill"]
    return out


FLOOD_FILL = Family("flood_fill", "background cells enclosed by walls (cut off from the border) are filled",
                    _fill_params, _fill_sample, _fill_rule)


# --- count_objects: a bar as long as the number of objects -------------------------------------

def _count_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"vertical": bool(rng.random() < 0.5), "paint": colours(rng, 1)[0], "palette": colours(rng, difficulty)}


def _count_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    h, w = side(rng, difficulty, lo=5), side(rng, difficulty, lo=5)
    g = scatter_blocks(rng, h, w, count(rng, difficulty), lambda r: (int(r.integers(1, 3)), int(r.integers(1, 3))),
                       p["palette"])
    return g if g.any() else None


def _count_rule(p: Params, g: Grid) -> Grid | None:
    n = int(label_components(g, by_colour=False).max())
    if not 1 <= n <= 30:
        return None
    return np.full((n, 1) if p["vertical"] else (1, n), p["paint"], np.uint8)


COUNT_OBJECTS = Family("count_objects", "output a bar of one colour as long as the number of objects",
                       _count_params, _count_sample, _count_rule)


# --- majority_colour: an s x s square of the most frequent colour -----------------------------

def _major_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"size": int(rng.integers(1, 4)), "palette": colours(rng, 2 + difficulty)}


def _major_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid:
    return noise_grid(rng, side(rng, difficulty), side(rng, difficulty), p["palette"], float(rng.uniform(0.3, 0.8)))


def _major_rule(p: Params, g: Grid) -> Grid | None:
    counts = np.bincount(g.ravel(), minlength=10)[1:]
    if counts.max() == 0 or (counts == counts.max()).sum() != 1:
        return None  # a tie
    return np.full((p["size"], p["size"]), 1 + int(np.argmax(counts)), np.uint8)


MAJORITY_COLOUR = Family("majority_colour", "output a small square of the most frequent colour",
                         _major_params, _major_sample, _major_rule)


# --- draw_lines: every single cell shoots a line across the background to the border ---------

RAYS = {"up": [(-1, 0)], "down": [(1, 0)], "left": [(0, -1)], "right": [(0, 1)],
        "vertical": [(-1, 0), (1, 0)], "horizontal": [(0, -1), (0, 1)],
        "cross": [(-1, 0), (1, 0), (0, -1), (0, 1)], "diagonal": [(-1, -1), (-1, 1), (1, -1), (1, 1)]}


def _lines_params(rng: np.random.Generator, difficulty: int) -> Params:
    names = list(RAYS)
    return {"rays": names[int(rng.integers(len(names)))], "palette": colours(rng, difficulty)}


def _lines_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    h, w = side(rng, difficulty, lo=5), side(rng, difficulty, lo=5)
    g = noise_grid(rng, h, w, p["palette"], min(0.5, count(rng, difficulty) / (h * w)))
    return g if g.any() else None


def _lines_rule(p: Params, g: Grid) -> Grid:
    h, w = g.shape
    out = g.copy()
    for r, c in zip(*np.nonzero(g)):
        for dy, dx in RAYS[p["rays"]]:
            y, x = int(r) + dy, int(c) + dx
            while 0 <= y < h and 0 <= x < w:
                if g[y, x] == 0 and out[y, x] == 0:  # paint the background only; the first ray wins
                    out[y, x] = g[r, c]
                y, x = y + dy, x + dx
    return out


DRAW_LINES = Family("draw_lines", "every coloured cell shoots rays (a fixed set of directions) over the background",
                    _lines_params, _lines_sample, _lines_rule)

FAMILIES = (FLOOD_FILL, COUNT_OBJECTS, MAJORITY_COLOUR, DRAW_LINES)
