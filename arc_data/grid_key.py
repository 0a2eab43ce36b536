"""The one key of a grid: what every vote groups equal predictions by (ARC's candidates in
`eval.arc.decode`, the puzzles' test-time copies in `eval.puzzles.scoring`), and what any builder
or reader of this format uses to tell two grids apart.

A key is 128 bits, two independent 64-bit hashes (FNV-1a and a multiply-xorshift) over the grid's
(rows, cols, cells in row-major order); 420k distinct grids collide with probability ~1e-28. A
token row of a Sudoku or Maze dataset is keyed as the 1 x L grid of its tokens (`row_keys`).
`grid_key` is the reference (Python ints); `start` and `mix` are the numba steps kernels inline to
key a grid cell by cell without materialising it.
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
MIX_SEED = np.uint64(0x9E3779B97F4A7C15)
MIX_MUL = np.uint64(0xBF58476D1CE4E5B9)
MIX_SHIFT = np.uint64(29)
_M64 = (1 << 64) - 1


def grid_key(grid: np.ndarray) -> tuple[int, int]:
    """Reference 128-bit key of a 2-D grid, as two Python ints."""
    h, w = grid.shape
    k1, k2 = int(FNV_OFFSET), int(MIX_SEED)
    for v in [h, w, *np.asarray(grid, dtype=np.int64).ravel().tolist()]:
        k1 = ((k1 ^ v) * int(FNV_PRIME)) & _M64
        k2 = ((k2 ^ v) * int(MIX_MUL)) & _M64
        k2 ^= k2 >> int(MIX_SHIFT)
    return k1, k2


@njit(cache=True, inline="always")
def mix(k1, k2, v):
    """One value (a side length or a cell) into the key (k1, k2)."""
    k1 = (k1 ^ v) * FNV_PRIME
    k2 = (k2 ^ v) * MIX_MUL
    k2 ^= k2 >> MIX_SHIFT
    return k1, k2


@njit(cache=True, inline="always")
def start(rows, cols):
    """The key of a rows x cols grid before its cells."""
    k1, k2 = mix(FNV_OFFSET, MIX_SEED, np.uint64(rows))
    return mix(k1, k2, np.uint64(cols))


@njit(cache=True)
def _row_keys(tokens, keys):
    for i in range(tokens.shape[0]):
        k1, k2 = start(1, tokens.shape[1])
        for j in range(tokens.shape[1]):
            k1, k2 = mix(k1, k2, np.uint64(tokens[i, j]))
        keys[i, 0] = k1
        keys[i, 1] = k2


def row_keys(tokens: np.ndarray) -> np.ndarray:
    """uint64 [R, 2]: the key of each row of tokens [R, L] as a 1 x L grid (== grid_key(row[None]))."""
    tokens = np.ascontiguousarray(tokens)
    assert tokens.ndim == 2, tokens.shape
    keys = np.empty((tokens.shape[0], 2), dtype=np.uint64)
    _row_keys(tokens, keys)
    return keys
