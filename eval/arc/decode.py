"""Decode token rows into candidates: crop (HRM rule), undo the augmentation, hash. Batched in numba.

The numba kernel `decode_keys` never materialises a grid: for each row it finds the crop shape
in the augmented frame, then walks the original frame cell by cell, reading the augmented cell
that the dihedral transform sent there and mapping its colour back. The numpy reference is
`decode_grid` (arc_data.format's `crop` + `invert_augmentation`) followed by
`arc_data.grid_key.grid_key`, the one grid key, whose numba steps the kernel inlines; the tests
check that both agree.
"""

from __future__ import annotations

import numpy as np

from arc_data.format import COLOUR_OFFSET, MAX_SIDE, crop, inverse_dihedral, invert_augmentation
from arc_data.grid_key import mix, start
from arc_data.jit import njit

# Dihedral ids whose output swaps rows and columns.
_TRANSPOSING = (1, 3, 6, 7)


# ---------------------------------------------------------------- numpy reference


def decode_grid(tokens: np.ndarray, tid: int, colour_map: np.ndarray) -> np.ndarray:
    """Reference: a [900] token row in an augmented frame -> the grid in the original frame."""
    return invert_augmentation(crop(tokens), int(tid), np.asarray(colour_map))


def grid_of_shape(tokens: np.ndarray, tid: int, inv_colour: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """`decode_grid` for a row whose original-frame shape `decode_keys` already found: the crop is
    read off the canvas instead of searched for. `inv_colour`: the row's inverse colour map."""
    nr, nc = int(shape[0]), int(shape[1])
    h, w = (nc, nr) if tid in _TRANSPOSING else (nr, nc)  # the crop, in the augmented frame
    crop = tokens[: h * MAX_SIDE].reshape(h, MAX_SIDE)[:, :w] - COLOUR_OFFSET
    return inv_colour[inverse_dihedral(crop, int(tid))]


# ---------------------------------------------------------------- numba kernels


@njit(cache=True, inline="always")
def _crop_shape(tokens, i):
    """HRM crop rule on tokens row i: (rows, cols) of the largest top-left all-colour rectangle."""
    best_area, best_r, best_w = 0, 0, 0
    w = np.int64(MAX_SIDE)  # not the literal: numba.pycc cannot retype a literal int variable
    for r in range(1, MAX_SIDE + 1):
        base = (r - 1) * MAX_SIDE
        for c in range(1, w + 1):
            t = tokens[i, base + c - 1]
            if t < COLOUR_OFFSET or t > COLOUR_OFFSET + 9:
                w = c - 1
                break
        if w == 0:  # every later row has area 0 too
            break
        area = r * w
        if area > best_area:
            best_area, best_r, best_w = area, r, w
    return best_r, best_w


@njit(cache=True, inline="always")
def _walk(tid, nr, nc):
    """Where the original frame's cells (nr x nc, row-major) sit in a row of dihedral(original, tid)'s
    tokens: cell (a, b) at base + a * step_a + b * step_b."""
    last_r, last_c = (nr - 1) * MAX_SIDE, (nc - 1) * MAX_SIDE
    if tid == 1:  # rot90 ccw: out[i, j] = in[j, W-1-i]; (a, b) at (nc-1-b, a)
        return last_c, 1, -MAX_SIDE
    if tid == 2:  # (nr-1-a, nc-1-b)
        return last_r + nc - 1, -MAX_SIDE, -1
    if tid == 3:  # rot90 cw: out[i, j] = in[H-1-j, i]; (a, b) at (b, nr-1-a)
        return nr - 1, -1, MAX_SIDE
    if tid == 4:  # (a, nc-1-b)
        return nc - 1, MAX_SIDE, -1
    if tid == 5:  # (nr-1-a, b)
        return last_r, -MAX_SIDE, 1
    if tid == 6:  # (b, a)
        return 0, 1, MAX_SIDE
    if tid == 7:  # anti-diagonal: out[i, j] = in[H-1-j, W-1-i]; (a, b) at (nc-1-b, nr-1-a)
        return last_c + nr - 1, -1, -MAX_SIDE
    return 0, MAX_SIDE, 1


@njit(cache=True, nogil=True)
def _decode_keys(tokens, rows, table_row, dihedral, inv_colour, keys, shapes, top):
    # One thread: a row takes about 0.3 us (ARC-1 at num_aug 300: 126k rows in 0.04 s); numba's
    # thread pool measured no faster on two cores and would not be fork-safe. Without the GIL: the
    # vote decodes the inputs and the predictions side by side (two Python threads). Each row is
    # read whole first, in order, for its largest token (top[0]: the largest of every row): that
    # read brings the row into the cache, and the crop and the walk after it, which jump about the
    # row, find it there (decoding with it took 0.04 s where decoding alone took 0.05 s, and the
    # vote's separate pass for the largest token, 0.025 s over 227 MB, is gone).
    best = np.uint8(0)
    for i in range(rows.shape[0]):
        row = rows[i]
        largest = np.uint8(0)
        for c in range(tokens.shape[1]):
            largest = max(largest, tokens[row, c])
        best = max(best, largest)
        h, w = _crop_shape(tokens, row)
        aug = table_row[i]
        tid = dihedral[aug]
        if tid == 1 or tid == 3 or tid == 6 or tid == 7:
            nr, nc = w, h
        else:
            nr, nc = h, w
        base, step_a, step_b = _walk(tid, nr, nc)
        k1, k2 = start(nr, nc)
        for a in range(nr):
            at = base + a * step_a
            for _ in range(nc):
                v = inv_colour[aug, tokens[row, at] - COLOUR_OFFSET]
                k1, k2 = mix(k1, k2, np.uint64(v))
                at += step_b
        keys[i, 0] = k1
        keys[i, 1] = k2
        shapes[i, 0] = nr
        shapes[i, 1] = nc
    top[0] = best


def _readonly(a: np.ndarray, dtype) -> np.ndarray:
    """`a` as a C-contiguous array of `dtype` (no copy where it is one), read-only: the one type the
    kernels' ahead-of-time exports take (`arc_data.native`), whether it came from a memory map or not."""
    a = np.ascontiguousarray(a, dtype=dtype)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def decode_keys(
    tokens: np.ndarray,
    table_row: np.ndarray,
    dihedral: np.ndarray,
    inv_colour: np.ndarray,
    rows: np.ndarray | None = None,
    top: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Batch crop + inverse augmentation + hash of tokens[rows] (all rows by default; no copy).

    tokens      uint8 [N, 900]  rows in their augmented frame
    table_row   int64 [n]       augmentation-table row (puzzle identifier) of each selected row
    rows        int64 [n]       which rows of tokens to decode
    dihedral    uint8 [m]       the table's dihedral ids
    inv_colour  uint8 [m, 10]   inverse colour maps (`arc_data.originals.inverse_colour_table`)
    top         uint8 [1]       if given: top[0] = the largest token of the selected rows (every token of each)
    Returns keys uint64 [n, 2] (== arc_data.grid_key.grid_key(decode_grid(row))) and shapes uint8 [n, 2] (original
    frame rows, cols; (0, 0) when the row decodes to no grid). Any token outside the colours ends a crop,
    so rows of any token values decode (a check of them can read `top` after).
    """
    assert tokens.ndim == 2 and tokens.shape[1] == MAX_SIDE * MAX_SIDE, tokens.shape
    if rows is None:
        rows = np.arange(tokens.shape[0], dtype=np.int64)
    n = rows.shape[0]
    assert table_row.shape == (n,), (table_row.shape, rows.shape)
    keys = np.empty((n, 2), dtype=np.uint64)
    shapes = np.empty((n, 2), dtype=np.uint8)
    largest = np.zeros(1, np.uint8) if top is None else top
    assert largest.shape == (1,) and largest.dtype == np.uint8, (largest.shape, largest.dtype)
    _decode_keys(_readonly(tokens, np.uint8), _readonly(rows, np.int64), _readonly(table_row, np.int64),
                 _readonly(dihedral, np.uint8), _readonly(inv_colour, np.uint8), keys, shapes, largest)
    return keys, shapes


@njit(cache=True)
def _decode_grids(tokens, rows, table_row, dihedral, inv_colour, shapes, offsets, out):
    # grid i: shapes[i] (original frame, from _decode_keys) cells at out[offsets[i]:], row-major
    for i in range(rows.shape[0]):
        row = rows[i]
        aug = table_row[i]
        tid = dihedral[aug]
        nr, nc = np.int64(shapes[i, 0]), np.int64(shapes[i, 1])  # int64 indices (uint8 ones mix into floats)
        base, step_a, step_b = _walk(tid, nr, nc)
        to = offsets[i]
        for a in range(nr):
            at = base + a * step_a
            for _ in range(nc):
                out[to] = inv_colour[aug, tokens[row, at] - COLOUR_OFFSET]
                at += step_b
                to += 1


def decode_grids(
    tokens: np.ndarray,
    rows: np.ndarray,
    table_row: np.ndarray,
    dihedral: np.ndarray,
    inv_colour: np.ndarray,
    shapes: np.ndarray,
) -> list[np.ndarray]:
    """`grid_of_shape` of many rows at once: the grid of tokens[rows[i]] in the original frame, at the
    shape `decode_keys` found for it (shapes uint8 [n, 2]); uint8 arrays (views of one buffer)."""
    n = rows.shape[0]
    assert table_row.shape == (n,) and shapes.shape == (n, 2), (rows.shape, table_row.shape, shapes.shape)
    shapes = _readonly(shapes, np.uint8)
    sizes = shapes[:, 0].astype(np.int64) * shapes[:, 1]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    _decode_grids(_readonly(tokens, np.uint8), _readonly(rows, np.int64), _readonly(table_row, np.int64),
                  _readonly(dihedral, np.uint8), _readonly(inv_colour, np.uint8), shapes,
                  _readonly(offsets[:-1], np.int64), out)
    return [out[s:e].reshape(shape) for s, e, shape in zip(offsets[:-1].tolist(), offsets[1:].tolist(),
                                                             shapes.tolist())]


__all__ = ["decode_grid", "decode_grids", "decode_keys", "grid_of_shape"]
