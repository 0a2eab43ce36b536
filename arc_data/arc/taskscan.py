"""A numba scanner for the bytes of one ARC task file (the original layout, `<subset>/<task>.json`):

    {"train": [{"input": [[0, 1]], "output": [[1]]}, ...], "test": [{"output": ..., "input": ...}]}

Like `pairscan` (whose grid reader it shares), it accepts only a strict subset of JSON: an object
with exactly the keys "train" and "test" (either order, once each), each a non-empty list of
objects with exactly the keys "input" and "output" (either order, once each), each grid a non-empty
list of non-empty rows of equal length (at most 30 x 30) of single digits 0-9, JSON whitespace
anywhere between tokens. On such a file `scan_task` gives what `json.loads` and `sources.parse_task`
give (tests/test_arc_sources.py compares them). Anything else (a "name" key, a test pair without an
output, a 10, a bool, an escape, a BOM) makes it return None, and the caller parses the file the
slow way, which accepts it or names the problem: this scanner never decides what is an error.
"""

from __future__ import annotations

import numpy as np

from arc_data.arc.pairscan import _grid, _word, _ws
from arc_data.jit import njit

_TRAIN = np.frombuffer(b'"train"', np.uint8)
_TEST = np.frombuffer(b'"test"', np.uint8)
_INPUT = np.frombuffer(b'"input"', np.uint8)
_OUTPUT = np.frombuffer(b'"output"', np.uint8)


@njit(cache=True, nogil=True)
def _pair_list(buf, i, cells, starts, shapes, lists, p, which):
    """The pair list at buf[i] ('['): pairs numbered from p, list id `which`. (next i, next p) or (-1, 0)."""
    n = len(buf)
    if i >= n or buf[i] != 91:  # '['
        return -1, 0
    i = _ws(buf, i + 1)
    while True:
        if i >= n or buf[i] != 123:  # '{'
            return -1, 0
        i = _ws(buf, i + 1)
        seen_in = False
        seen_out = False
        for k in range(2):
            if _word(buf, i, _INPUT) and not seen_in:
                seen_in = True
                side = 0
                i += len(_INPUT)
            elif _word(buf, i, _OUTPUT) and not seen_out:
                seen_out = True
                side = 1
                i += len(_OUTPUT)
            else:
                return -1, 0
            i = _ws(buf, i)
            if i >= n or buf[i] != 58:  # ':'
                return -1, 0
            i = _ws(buf, i + 1)
            g = 2 * p + side
            starts[g] = starts[2 * len(lists)]  # cells so far (kept in the spare last slot)
            i, nc = _grid(buf, i, cells, starts[g], shapes, g)
            if i < 0:
                return -1, 0
            starts[2 * len(lists)] = nc
            i = _ws(buf, i)
            if k == 0:
                if i >= n or buf[i] != 44:  # ','
                    return -1, 0
                i = _ws(buf, i + 1)
        if i >= n or buf[i] != 125:  # '}'
            return -1, 0
        lists[p] = which
        p += 1
        i = _ws(buf, i + 1)
        if i < n and buf[i] == 44:
            i = _ws(buf, i + 1)
            continue
        if i < n and buf[i] == 93:  # ']'
            return i + 1, p
        return -1, 0


@njit(cache=True, nogil=True)
def scan_task_bytes(buf, cells, starts, shapes, lists):
    """buf: uint8 file bytes; cells uint8 [>= len(buf)//2 + 1]; starts int64 [2 * P + 1] and shapes
    int64 [2 * P, 2] for P >= len(buf)//16 + 1 pairs: grid g = 2 * pair + (0 input, 1 output) starts
    at cells[starts[g]]; lists uint8 [P]: 0 train, 1 test. Returns the number of pairs, or -1 where
    the file is not in the strict form."""
    n = len(buf)
    i = _ws(buf, 0)
    if i >= n or buf[i] != 123:  # '{'
        return -1
    i = _ws(buf, i + 1)
    starts[2 * len(lists)] = 0
    seen_train = False
    seen_test = False
    p = 0
    for k in range(2):
        if _word(buf, i, _TRAIN) and not seen_train:
            seen_train = True
            which = 0
            i += len(_TRAIN)
        elif _word(buf, i, _TEST) and not seen_test:
            seen_test = True
            which = 1
            i += len(_TEST)
        else:
            return -1
        i = _ws(buf, i)
        if i >= n or buf[i] != 58:  # ':'
            return -1
        i = _ws(buf, i + 1)
        i, p = _pair_list(buf, i, cells, starts, shapes, lists, p, which)
        if i < 0:
            return -1
        i = _ws(buf, i)
        if k == 0:
            if i >= n or buf[i] != 44:  # ','
                return -1
            i = _ws(buf, i + 1)
    if i >= n or buf[i] != 125:  # '}'
        return -1
    if _ws(buf, i + 1) != n:
        return -1
    return p


def scan_task(data: bytes) -> tuple[list, list] | None:
    """(train pairs, test pairs) of a task file in the strict form, each pair (input, output) uint8
    [h, w] arrays (views of one buffer); None when the file is not in the strict form."""
    buf = np.frombuffer(data, np.uint8)
    max_pairs = len(buf) // 16 + 1  # the shortest pair, {"input":[[0]],"output":[[0]]}, is 32 bytes
    cells = np.empty(len(buf) // 2 + 1, np.uint8)
    starts = np.empty(2 * max_pairs + 1, np.int64)
    shapes = np.empty((2 * max_pairs, 2), np.int64)
    lists = np.empty(max_pairs, np.uint8)
    pairs = scan_task_bytes(buf, cells, starts, shapes, lists)
    if pairs < 0:
        return None
    ends = starts[:2 * pairs] + shapes[:2 * pairs, 0] * shapes[:2 * pairs, 1]
    grids = [cells[a:b].reshape(h, w) for a, b, (h, w) in zip(starts[:2 * pairs].tolist(), ends.tolist(),
                                                              shapes[:2 * pairs].tolist())]
    out: tuple[list, list] = ([], [])
    for q, which in enumerate(lists[:pairs].tolist()):
        out[which].append((grids[2 * q], grids[2 * q + 1]))
    return out
