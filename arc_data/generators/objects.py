"""Families on objects (4-connected same-colour shapes on the background): gravity, moves, copies,
recolouring by size, cropping, hollowing."""

from __future__ import annotations

import numpy as np

from arc_data.generators.base import (
    Family,
    Grid,
    Params,
    blob,
    colours,
    count,
    free_spot,
    label_components,
    noise_grid,
    scatter_blocks,
    side,
)

DIRECTIONS = ("down", "up", "left", "right")


def _scatter(rng: np.random.Generator, h: int, w: int, n: int, palette: list[int], max_box: int,
             margin: int = 1) -> tuple[Grid, list[tuple[int, int, np.ndarray, int]]] | None:
    """n blobs of palette colours placed apart (`margin` cells between them): the grid and each
    object's (row, col, mask, colour); None when they do not fit."""
    g = np.zeros((h, w), np.uint8)
    occupied = np.zeros((h, w), bool)
    placed = []
    for _ in range(n):
        bh, bw = int(rng.integers(1, max_box + 1)), int(rng.integers(1, max_box + 1))
        spot = free_spot(rng, occupied, bh, bw, margin)
        if spot is None:
            return None
        r, c = spot
        mask = blob(rng, bh, bw, float(rng.uniform(0.5, 1.0)))
        colour = palette[int(rng.integers(len(palette)))]
        g[r:r + bh, c:c + bw][mask] = colour
        occupied[r:r + bh, c:c + bw] |= mask
        placed.append((r, c, mask, colour))
    return g, placed


# --- gravity: every coloured cell falls as far as it can in one direction ---------------------

def _gravity_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"direction": DIRECTIONS[int(rng.integers(4))], "palette": colours(rng, 1 + difficulty)}


def _gravity_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid:
    return noise_grid(rng, side(rng, difficulty), side(rng, difficulty), p["palette"], float(rng.uniform(0.1, 0.4)))


def _gravity_rule(p: Params, g: Grid) -> Grid:
    k = DIRECTIONS.index(p["direction"])  # rotate so that the fall is "down", then back
    a = np.rot90(g, (0, 2, 1, 3)[k])
    out = np.zeros_like(a)
    for j in range(a.shape[1]):
        col = a[:, j][a[:, j] != 0]
        if len(col):
            out[-len(col):, j] = col
    return np.ascontiguousarray(np.rot90(out, -(0, 2, 1, 3)[k]))


GRAVITY = Family("gravity", "every coloured cell falls (down, up, left or right) to rest on the edge or on others",
                 _gravity_params, _gravity_sample, _gravity_rule)


# --- move_objects / copy_objects: the objects of one colour shift by a fixed offset ----------

def _shift_params(rng: np.random.Generator, difficulty: int) -> Params:
    mover, *others = colours(rng, 1 + difficulty)
    dy, dx = 0, 0
    while dy == 0 and dx == 0:
        dy, dx = (int(v) for v in rng.integers(-difficulty - 1, difficulty + 2, size=2))
    return {"colour": mover, "offset": [dy, dx], "others": others}


def _shift_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    palette = [p["colour"]] + p["others"]
    n = count(rng, difficulty)
    made = _scatter(rng, side(rng, difficulty, lo=6), side(rng, difficulty, lo=6), n, palette, 3)
    if made is None:
        return None
    g, placed = made
    if not any(c == p["colour"] for *_, c in placed):
        return None
    return g if _shifted(p, g, keep=False) is not None else None


def _shifted(p: Params, g: Grid, keep: bool) -> Grid | None:
    """Cells of p's colour moved by p's offset (kept in place too if `keep`), painted over the
    rest; None if a moved cell would leave the grid or land on another colour."""
    dy, dx = p["offset"]
    ys, xs = np.nonzero(g == p["colour"])
    if len(ys) == 0:
        return None
    y2, x2 = ys + dy, xs + dx
    h, w = g.shape
    if y2.min() < 0 or x2.min() < 0 or y2.max() >= h or x2.max() >= w:
        return None
    out = g.copy()
    if not keep:
        out[ys, xs] = 0
    land = out[y2, x2]
    if ((land != 0) & (land != p["colour"])).any():
        return None
    out[y2, x2] = p["colour"]
    return out


def _copy_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    g = _shift_sample(rng, p, difficulty)
    return g if g is not None and _shifted(p, g, keep=True) is not None else None


MOVE_OBJECTS = Family("move_objects", "the objects of one colour move by a fixed offset; the others stay",
                      _shift_params, _shift_sample, lambda p, g: _shifted(p, g, keep=False))
COPY_OBJECTS = Family("copy_objects", "the objects of one colour are copied at a fixed offset",
                      _shift_params, _copy_sample, lambda p, g: _shifted(p, g, keep=True))


# --- recolour_by_size: the largest object takes one colour, the smallest another --------------

def _size_params(rng: np.random.Generator, difficulty: int) -> Params:
    base, largest, smallest = colours(rng, 3)
    return {"colour": base, "largest": largest, "smallest": smallest}


def _size_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    made = _scatter(rng, side(rng, difficulty, lo=7), side(rng, difficulty, lo=7), count(rng, difficulty, base=3),
                    [p["colour"]], 2 + difficulty)
    return None if made is None else made[0]


def _size_rule(p: Params, g: Grid) -> Grid | None:
    labels = label_components(g)
    sizes = np.bincount(labels.ravel())[1:]
    if len(sizes) < 3 or (g[labels > 0] != p["colour"]).any():
        return None
    big, small = sizes.max(), sizes.min()
    if (sizes == big).sum() != 1 or (sizes == small).sum() != 1:
        return None  # a tie: the rule would be ambiguous
    out = g.copy()
    out[labels == 1 + int(np.argmax(sizes))] = p["largest"]
    out[labels == 1 + int(np.argmin(sizes))] = p["smallest"]
    return out


RECOLOUR_BY_SIZE = Family("recolour_by_size", "the largest object takes one colour, the smallest another",
                          _size_params, _size_sample, _size_rule)


# --- crop_largest: the output is the largest object's bounding box ---------------------------

def _crop_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"palette": colours(rng, 1 + difficulty)}


def _crop_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    made = _scatter(rng, side(rng, difficulty, lo=7), side(rng, difficulty, lo=7), count(rng, difficulty, base=2),
                    p["palette"], 2 + difficulty)
    return None if made is None else made[0]


def _crop_rule(p: Params, g: Grid) -> Grid | None:
    labels = label_components(g)
    sizes = np.bincount(labels.ravel())[1:]
    if len(sizes) < 2 or (sizes == sizes.max()).sum() != 1:
        return None
    ys, xs = np.nonzero(labels == 1 + int(np.argmax(sizes)))
    return g[ys.min():ys.max() + 1, xs.min():xs.max() + 1].copy()


CROP_LARGEST = Family("crop_largest", "output the bounding box of the largest object",
                      _crop_params, _crop_sample, _crop_rule)


# --- hollow: cells whose 8 neighbours all share their colour become background ---------------

def _hollow_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"palette": colours(rng, 1 + difficulty)}


def _hollow_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    h, w = side(rng, difficulty, lo=7), side(rng, difficulty, lo=7)
    top = 3 + 2 * difficulty
    g = scatter_blocks(rng, h, w, count(rng, difficulty),
                       lambda r: (int(r.integers(3, min(h, top) + 1)), int(r.integers(3, min(w, top) + 1))), p["palette"])
    return g if g.any() else None


def _hollow_rule(p: Params, g: Grid) -> Grid:
    h, w = g.shape
    pad = np.full((h + 2, w + 2), 255, np.int16)  # outside the grid matches no colour
    pad[1:-1, 1:-1] = g
    inner = g != 0
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            inner &= pad[1 + dy:h + 1 + dy, 1 + dx:w + 1 + dx] == g
    out = g.copy()
    out[inner] = 0
    return out


HOLLOW = Family("hollow", "solid shapes become outlines: a cell whose 8 neighbours share its colour is cleared",
                _hollow_params, _hollow_sample, _hollow_rule)

FAMILIES = (GRAVITY, MOVE_OBJECTS, COPY_OBJECTS, RECOLOUR_BY_SIZE, CROP_LARGEST, HOLLOW)
