"""Numba kernels of the official puzzle CSV format (serial, `cache=True`): one pass over a large
file's bytes (`csv_scan`, numpy reference: arc_data.puzzles.csvfile's block splitter) and the row
gather. Imported lazily by arc_data.puzzles.csvfile for files above its NUMBA_MIN_BYTES.
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit


@njit(cache=True)
def csv_scan(buf, parse_ratings):
    """Split a block of whole lines (bytes, LF or CRLF ends) into rows of 4 fields.

    Returns (rows, width, question offsets, answer offsets, ratings) (the arrays hold `rows` valid
    entries), or rows = -1 when the block needs the csv module: a quote, a non-ASCII byte, a stray
    CR, a row without exactly 3 commas, question/answer lengths that differ, a rating that is not
    1-18 digits. Blank lines are skipped.
    """
    cap = 1
    for j in range(buf.shape[0]):
        if buf[j] == 10:
            cap += 1
    q_off = np.empty(cap, np.int64)
    a_off = np.empty(cap, np.int64)
    ratings = np.zeros(cap if parse_ratings else 0, np.int64)
    n = buf.shape[0]
    i = 0
    rows = 0
    width = -1
    while i < n:
        start = i
        commas = 0
        c1 = c2 = c3 = -1
        j = i
        while j < n and buf[j] != 10:
            b = buf[j]
            if b >= 128 or b == 34:
                return -1, 0, q_off, a_off, ratings
            if b == 13 and not (j + 1 < n and buf[j + 1] == 10):
                return -1, 0, q_off, a_off, ratings
            if b == 44:
                if commas == 0:
                    c1 = j
                elif commas == 1:
                    c2 = j
                elif commas == 2:
                    c3 = j
                commas += 1
            j += 1
        end = j
        if end > start and buf[end - 1] == 13:
            end -= 1
        i = j + 1
        if end == start:
            continue
        if commas != 3:
            return -1, 0, q_off, a_off, ratings
        qw = c2 - c1 - 1
        if width < 0:
            width = qw
        if qw < 1 or qw != width or c3 - c2 - 1 != width:
            return -1, 0, q_off, a_off, ratings
        q_off[rows] = c1 + 1
        a_off[rows] = c2 + 1
        if parse_ratings:
            w = end - c3 - 1
            if w < 1 or w > 18:
                return -1, 0, q_off, a_off, ratings
            v = 0
            for k in range(c3 + 1, end):
                d = buf[k] - 48
                if d < 0 or d > 9:
                    return -1, 0, q_off, a_off, ratings
                v = v * 10 + d
            ratings[rows] = v
        rows += 1
    return rows, width, q_off, a_off, ratings


@njit(cache=True)
def gather_rows(buf, offsets, width, out):
    """out[r, :] = buf[offsets[r] : offsets[r] + width]."""
    for r in range(offsets.shape[0]):
        o = offsets[r]
        for k in range(width):
            out[r, k] = buf[o + k]
