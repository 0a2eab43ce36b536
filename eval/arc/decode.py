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
    w = MAX_SIDE
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
def _source(tid, a, b, nr, nc):
    """Cell (a, b) of the original frame (nr x nc) sits at this cell of dihedral(original, tid)."""
    if tid == 1:  # rot90 ccw: out[i, j] = in[j, W-1-i]
        return nc - 1 - b, a
    if tid == 2:
        return nr - 1 - a, nc - 1 - b
    if tid == 3:  # rot90 cw: out[i, j] = in[H-1-j, i]
        return b, nr - 1 - a
    if tid == 4:
        return a, nc - 1 - b
    if tid == 5:
        return nr - 1 - a, b
    if tid == 6:
        return b, a
    if tid == 7:  # anti-diagonal: out[i, j] = in[H-1-j, W-1-i]
        return nc - 1 - b, nr - 1 - a
    return a, b


@njit(cache=True)
def _decode_keys(tokens, rows, table_row, dihedral, inv_colour, keys, shapes):
    # One thread: a row takes about 0.4 us (ARC-1 at num_aug 300: 252k rows in 0.1 s); numba's
    # thread pool measured no faster on two cores and would not be fork-safe.
    for i in range(rows.shape[0]):
        row = rows[i]
        h, w = _crop_shape(tokens, row)
        aug = table_row[i]
        tid = dihedral[aug]
        if tid == 1 or tid == 3 or tid == 6 or tid == 7:
            nr, nc = w, h
        else:
            nr, nc = h, w
        k1, k2 = start(nr, nc)
        for a in range(nr):
            for b in range(nc):
                r, c = _source(tid, a, b, nr, nc)
                v = inv_colour[aug, tokens[row, r * MAX_SIDE + c] - COLOUR_OFFSET]
                k1, k2 = mix(k1, k2, np.uint64(v))
        keys[i, 0] = k1
        keys[i, 1] = k2
        shapes[i, 0] = nr
        shapes[i, 1] = nc


def decode_keys(
    tokens: np.ndarray,
    table_row: np.ndarray,
    dihedral: np.ndarray,
    inv_colour: np.ndarray,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Batch crop + inverse augmentation + hash of tokens[rows] (all rows by default; no copy).

    tokens      uint8 [N, 900]  rows in their augmented frame
    table_row   int64 [n]       augmentation-table row (puzzle identifier) of each selected row
    rows        int64 [n]       which rows of tokens to decode
    dihedral    uint8 [m]       the table's dihedral ids
    inv_colour  uint8 [m, 10]   inverse colour maps (`arc_data.originals.inverse_colour_table`)
    Returns keys uint64 [n, 2] (== arc_data.grid_key.grid_key(decode_grid(row))) and shapes uint8 [n, 2] (original
    frame rows, cols; (0, 0) when the row decodes to no grid).
    """
    assert tokens.ndim == 2 and tokens.shape[1] == MAX_SIDE * MAX_SIDE, tokens.shape
    if rows is None:
        rows = np.arange(tokens.shape[0], dtype=np.int64)
    n = rows.shape[0]
    assert table_row.shape == (n,), (table_row.shape, rows.shape)
    keys = np.empty((n, 2), dtype=np.uint64)
    shapes = np.empty((n, 2), dtype=np.uint8)
    _decode_keys(
        np.ascontiguousarray(tokens, dtype=np.uint8),
        np.ascontiguousarray(rows, dtype=np.int64),
        np.ascontiguousarray(table_row, dtype=np.int64),
        np.ascontiguousarray(dihedral, dtype=np.uint8),
        np.ascontiguousarray(inv_colour, dtype=np.uint8),
        keys,
        shapes,
    )
    return keys, shapes


__all__ = ["decode_grid", "decode_keys", "grid_of_shape"]
