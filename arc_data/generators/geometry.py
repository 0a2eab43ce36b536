"""Families on the whole grid: dihedral transforms, colour maps, tiling, scaling, symmetry
completion, pattern extension."""

from __future__ import annotations

import numpy as np

from arc_data.generators.base import MAX_SIDE, Family, Grid, Params, colours, noise_grid, side

TRANSFORMS = ("rot90", "rot180", "rot270", "flip_lr", "flip_ud", "transpose", "anti_transpose")


def _transform(name: str, g: Grid) -> Grid:
    return {
        "rot90": lambda: np.rot90(g, 1), "rot180": lambda: np.rot90(g, 2), "rot270": lambda: np.rot90(g, 3),
        "flip_lr": lambda: g[:, ::-1], "flip_ud": lambda: g[::-1, :], "transpose": lambda: g.T,
        "anti_transpose": lambda: np.rot90(g, 2).T,
    }[name]().copy()


def _palette_grid(rng: np.random.Generator, p: Params, difficulty: int, hi: int = MAX_SIDE) -> Grid:
    h, w = side(rng, difficulty, hi=hi), side(rng, difficulty, hi=hi)
    return noise_grid(rng, h, w, p["palette"], float(rng.uniform(0.3, 0.7)))


# --- dihedral: rotate or flip the whole grid --------------------------------------------------

def _dihedral_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"transform": TRANSFORMS[int(rng.integers(len(TRANSFORMS)))], "palette": colours(rng, 1 + difficulty)}


DIHEDRAL = Family("dihedral", "rotate or flip the whole grid (one of the 7 non-identity dihedral transforms)",
                  _dihedral_params, _palette_grid, lambda p, g: _transform(p["transform"], g))


# --- colour_map: a fixed substitution of some colours -----------------------------------------

def _cmap_params(rng: np.random.Generator, difficulty: int) -> Params:
    k = 1 + difficulty  # colours swapped in a cycle (a derangement of k colours)
    src = colours(rng, k)
    shift = int(rng.integers(1, k)) if k > 1 else 0
    dst = src[shift:] + src[:shift] if k > 1 else colours(rng, 1, exclude=(0, src[0]))
    extra = colours(rng, 1, exclude=(0, *src, *dst))
    return {"map": [[a, b] for a, b in zip(src, dst)], "palette": sorted(set(src) | set(extra))}


def _cmap_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid:
    g = _palette_grid(rng, p, difficulty)
    cells = rng.choice(g.size, size=min(g.size, len(p["map"])), replace=False)
    for cell, (a, _) in zip(cells, p["map"]):  # every mapped colour shows in every grid
        g.flat[cell] = a
    return g


def _cmap_rule(p: Params, g: Grid) -> Grid:
    lut = np.arange(10, dtype=np.uint8)
    for a, b in p["map"]:
        lut[a] = b
    return lut[g]


COLOUR_MAP = Family("colour_map", "substitute colours by a fixed map (a cycle of 2-4 colours)",
                    _cmap_params, _cmap_sample, _cmap_rule)


# --- tile: repeat the grid ry x rx times, plainly or mirrored ---------------------------------

def _tile_params(rng: np.random.Generator, difficulty: int) -> Params:
    ry, rx = (int(v) for v in rng.integers(1, 4, size=2))
    if ry * rx == 1:
        rx = 2
    return {"reps": [ry, rx], "mirror": bool(rng.random() < 0.5), "palette": colours(rng, 1 + difficulty)}


def _tile_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid:
    ry, rx = p["reps"]
    h, w = side(rng, 1, lo=2, hi=min(MAX_SIDE // ry, 4 + 2 * difficulty)), side(rng, 1, lo=2, hi=min(MAX_SIDE // rx, 4 + 2 * difficulty))
    return noise_grid(rng, h, w, p["palette"], float(rng.uniform(0.3, 0.7)))


def _tile_rule(p: Params, g: Grid) -> Grid:
    ry, rx = p["reps"]
    rows = []
    for i in range(ry):
        row = []
        for j in range(rx):
            t = g
            if p["mirror"] and i % 2:
                t = t[::-1, :]
            if p["mirror"] and j % 2:
                t = t[:, ::-1]
            row.append(t)
        rows.append(np.concatenate(row, axis=1))
    return np.ascontiguousarray(np.concatenate(rows, axis=0))


TILE = Family("tile", "repeat the grid ry x rx times, plainly or with alternate copies mirrored",
              _tile_params, _tile_sample, _tile_rule)


# --- scale_up: every cell becomes a k x k block -------------------------------------------------

def _scale_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"k": int(rng.integers(2, 2 + difficulty + (difficulty == 1))), "palette": colours(rng, 1 + difficulty)}


def _scale_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid:
    hi = MAX_SIDE // p["k"]
    return noise_grid(rng, side(rng, 1, lo=2, hi=min(hi, 3 + 2 * difficulty)), side(rng, 1, lo=2, hi=min(hi, 3 + 2 * difficulty)),
                      p["palette"], float(rng.uniform(0.3, 0.7)))


SCALE_UP = Family("scale_up", "magnify the grid: every cell becomes a k x k block",
                  _scale_params, _scale_sample, lambda p, g: np.kron(g, np.ones((p["k"], p["k"]), np.uint8)))


# --- symmetry_complete: restore the cells hidden under a mask colour --------------------------

SYMMETRIES = ("flip_lr", "flip_ud", "both", "rot180")


def _orbit(sym: str, h: int, w: int, r: int, c: int) -> list[tuple[int, int]]:
    lr, ud = (r, w - 1 - c), (h - 1 - r, c)
    rot = (h - 1 - r, w - 1 - c)
    return {"flip_lr": [lr], "flip_ud": [ud], "both": [lr, ud, rot], "rot180": [rot]}[sym]


def _sym_params(rng: np.random.Generator, difficulty: int) -> Params:
    hole, *palette = colours(rng, 2 + difficulty)
    return {"symmetry": SYMMETRIES[int(rng.integers(len(SYMMETRIES)))], "hole": hole, "palette": palette}


def _sym_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    h, w = side(rng, difficulty, lo=4), side(rng, difficulty, lo=4)
    g = noise_grid(rng, h, w, p["palette"], float(rng.uniform(0.5, 0.9)))
    sym = p["symmetry"]
    if sym in ("flip_lr", "both"):
        g[:, w - w // 2:] = g[:, :w // 2][:, ::-1]
    if sym in ("flip_ud", "both"):
        g[h - h // 2:, :] = g[:h // 2, :][::-1, :]
    if sym == "rot180":
        full = g.copy()
        flat = full.ravel()
        flat[(h * w + 1) // 2:] = flat[:h * w // 2][::-1]
        g = full
    # a rectangle of the hole colour, small enough that every hidden cell has a visible mirror
    bh, bw = int(rng.integers(1, max(2, h // 3))), int(rng.integers(1, max(2, w // 3)))
    r, c = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
    g[r:r + bh, c:c + bw] = p["hole"]
    return g


def _sym_rule(p: Params, g: Grid) -> Grid | None:
    h, w = g.shape
    out = g.copy()
    for r, c in zip(*np.nonzero(g == p["hole"])):
        seen = [g[r2, c2] for r2, c2 in _orbit(p["symmetry"], h, w, int(r), int(c)) if g[r2, c2] != p["hole"]]
        if not seen:
            return None  # hidden with all its mirrors: not recoverable
        out[r, c] = seen[0]
    return out


SYMMETRY_COMPLETE = Family("symmetry_complete",
                           "a mirror- or point-symmetric picture with a patch hidden under one colour: restore it",
                           _sym_params, _sym_sample, _sym_rule)


# --- pattern_extend: continue a periodic band of rows (or columns) to fill the grid -----------

def _pat_params(rng: np.random.Generator, difficulty: int) -> Params:
    return {"axis": int(rng.integers(2)), "palette": colours(rng, 1 + difficulty)}


def _pat_sample(rng: np.random.Generator, p: Params, difficulty: int) -> Grid | None:
    period = int(rng.integers(2, 3 + difficulty))
    length = side(rng, difficulty, lo=3 * period + 1)
    width = side(rng, difficulty, lo=2)
    motif = np.array(p["palette"], np.uint8)[rng.integers(0, len(p["palette"]), size=(period, width))]
    if len({motif[i].tobytes() for i in range(period)}) < period:
        return None  # a motif with a repeated row has a shorter period
    shown = int(rng.integers(2 * period, length))
    g = np.zeros((length, width), np.uint8)
    g[:shown] = np.resize(motif, (shown, width))
    return g if p["axis"] == 0 else np.ascontiguousarray(g.T)


def _pat_rule(p: Params, g: Grid) -> Grid | None:
    a = g if p["axis"] == 0 else g.T
    filled = (a != 0).all(axis=1)
    shown = int(np.argmin(filled)) if not filled.all() else a.shape[0]
    if shown == a.shape[0] or (a[shown:] != 0).any():
        return None
    for period in range(1, shown // 2 + 1):
        if (a[period:shown] == a[:shown - period]).all():
            out = np.resize(a[:period], a.shape).astype(np.uint8)
            return out if p["axis"] == 0 else np.ascontiguousarray(out.T)
    return None


PATTERN_EXTEND = Family("pattern_extend", "continue a periodic band of rows (or columns) to the end of the grid",
                        _pat_params, _pat_sample, _pat_rule)

FAMILIES = (DIHEDRAL, COLOUR_MAP, TILE, SCALE_UP, SYMMETRY_COMPLETE, PATTERN_EXTEND)
