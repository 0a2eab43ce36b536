"""A numba scanner for the bytes of a pair-list file (RE-ARC's and ARC-GEN's layout):

    [{"input": [[0, 1], [2, 3]], "output": [[3]]}, {"output": ..., "input": ...}, ...]

It accepts only a strict subset of JSON: a list of objects, each with exactly the keys "input"
and "output" (either order, once each), each a non-empty list of non-empty rows of equal length
(at most 30 x 30) of single digits 0-9, with JSON whitespace anywhere between tokens. On such a
file its result equals `json.loads` followed by `sources.parse_grid` on every grid (the tests
compare them). Anything else (another key, a float, a 10, a ragged row, an escape, a BOM) makes
it return a failure, and the caller parses the file the slow way, which accepts it or names the
problem; so this scanner never decides what is an error, only how fast a clean file is read.
"""

from __future__ import annotations

import numpy as np

from arc_data.format import MAX_SIDE
from arc_data.jit import njit

_INPUT = np.frombuffer(b'"input"', np.uint8)
_OUTPUT = np.frombuffer(b'"output"', np.uint8)


@njit(cache=True, nogil=True)
def _ws(buf, i):
    n = len(buf)
    while i < n and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _word(buf, i, word):
    if i + len(word) > len(buf):
        return False
    for k in range(len(word)):
        if buf[i + k] != word[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _grid(buf, i, cells, nc, shapes, g):
    """Parse one grid at buf[i] ('['); cells appended from nc. Returns (next i, new nc) or (-1, 0)."""
    n = len(buf)
    if i >= n or buf[i] != 91:  # '['
        return -1, 0
    i = _ws(buf, i + 1)
    h = 0
    w = -1
    while True:
        if i >= n or buf[i] != 91:
            return -1, 0
        i = _ws(buf, i + 1)
        row = 0
        while True:
            if i >= n or buf[i] < 48 or buf[i] > 57:
                return -1, 0
            if i + 1 < n and ((48 <= buf[i + 1] <= 57) or buf[i + 1] == 46 or buf[i + 1] == 101 or buf[i + 1] == 69):
                return -1, 0  # 10, 1.0, 1e0: not a single digit
            cells[nc] = buf[i] - 48
            nc += 1
            row += 1
            i = _ws(buf, i + 1)
            if i < n and buf[i] == 44:  # ','
                i = _ws(buf, i + 1)
                continue
            if i < n and buf[i] == 93:  # ']'
                break
            return -1, 0
        if (w >= 0 and row != w) or row > MAX_SIDE:
            return -1, 0
        w = row
        h += 1
        if h > MAX_SIDE:
            return -1, 0
        i = _ws(buf, i + 1)
        if i < n and buf[i] == 44:
            i = _ws(buf, i + 1)
            continue
        if i < n and buf[i] == 93:
            shapes[g, 0] = h
            shapes[g, 1] = w
            return i + 1, nc
        return -1, 0


@njit(cache=True, nogil=True)
def scan_pairs(buf, cells, shapes, swapped):
    """buf: uint8 file bytes. Fills cells (uint8, >= len(buf)//2 + 1), shapes (int64 [>= len(buf)//8 + 2, 2]:
    grid g = 2*pair + (0 input, 1 output as written), swapped (bool [pairs]: "output" came first).
    Returns (number of pairs, number of cells), or (-1, byte offset) where the strict form ends."""
    n = len(buf)
    i = _ws(buf, 0)
    if i >= n or buf[i] != 91:
        return -1, i
    i = _ws(buf, i + 1)
    if i < n and buf[i] == 93:
        return -1, i  # an empty list: the slow path says so
    pairs = 0
    nc = 0
    while True:
        if i >= n or buf[i] != 123:  # '{'
            return -1, i
        i = _ws(buf, i + 1)
        seen_in = False
        seen_out = False
        for k in range(2):
            if _word(buf, i, _INPUT) and not seen_in:
                seen_in = True
                i += len(_INPUT)
                if k == 0:
                    swapped[pairs] = False
            elif _word(buf, i, _OUTPUT) and not seen_out:
                seen_out = True
                i += len(_OUTPUT)
                if k == 0:
                    swapped[pairs] = True
            else:
                return -1, i
            i = _ws(buf, i)
            if i >= n or buf[i] != 58:  # ':'
                return -1, i
            i = _ws(buf, i + 1)
            i, nc = _grid(buf, i, cells, nc, shapes, 2 * pairs + k)
            if i < 0:
                return -1, 0
            i = _ws(buf, i)
            if k == 0:
                if i >= n or buf[i] != 44:
                    return -1, i
                i = _ws(buf, i + 1)
        if i >= n or buf[i] != 125:  # '}'
            return -1, i
        pairs += 1
        i = _ws(buf, i + 1)
        if i < n and buf[i] == 44:
            i = _ws(buf, i + 1)
            continue
        if i < n and buf[i] == 93:
            i = _ws(buf, i + 1)
            if i != n:
                return -1, i
            return pairs, nc
        return -1, i


def scan_file(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """The pairs of a strict pair-list file: (cells uint8 [sum h*w] in input, output order per
    pair, shapes int64 [2 * pairs, 2]); None when the file is not in the strict form."""
    buf = np.frombuffer(data, np.uint8)
    cells = np.empty(len(buf) // 2 + 1, np.uint8)
    shapes = np.empty((len(buf) // 8 + 2, 2), np.int64)
    swapped = np.zeros(len(buf) // 16 + 1, np.bool_)
    pairs, nc = scan_pairs(buf, cells, shapes, swapped)
    if pairs < 0:
        return None
    shapes = shapes[:2 * pairs]
    sizes = shapes[:, 0] * shapes[:, 1]
    if not swapped[:pairs].any():
        return cells[:nc].copy(), shapes.copy()
    # put each swapped pair's input first: reorder whole grids
    order = np.arange(2 * pairs).reshape(pairs, 2)
    order[swapped[:pairs]] = order[swapped[:pairs]][:, ::-1]
    order = order.ravel()
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    parts = [cells[starts[g]:starts[g] + sizes[g]] for g in order]
    return np.concatenate(parts), shapes[order].copy()
