"""The vote report's pixel and text kernels (numba's, run from the ahead-of-time module
`arc_data.native`, so that `vote` starts without numba): a picture's background, grids and frames
in one call, and the JSON text of many grids in one call.

`paint_picture` draws into a picture's *filtered scanlines* (`eval.arc.png`): uint8 [rows, 1 + cols],
column 0 the PNG filter byte (0), the picture in columns 1..cols; coordinates below are the
picture's (column 0 of the picture is column 1 of the array). It is what `eval.arc.report` drew
with numpy slices before, pixel for pixel (tests/test_vote_png.py): a grid is its cells, `cell` px a
side, with a line of index `line` on every cell-th row and column of its `rows * cell + 1` by
`cols * cell + 1` px (the last ones included); a frame is Pillow's `ImageDraw.rectangle(outline,
width)` (corners included); every region clipped to the picture as numpy's slices clip.

`grid_texts` writes `json.dumps(grid.tolist())` of each grid (uint8 cells, rows of them) as ASCII.
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit
from eval.arc.deflate import add_rows, encode_row, end_stream, repeat_rows, row_sums


@njit(cache=True, inline="always")
def _fill(canvas, r0, r1, c0, c1, value):
    """canvas[r0:r1, 1 + c0:1 + c1] = value, the rectangle clipped to the picture."""
    r0, c0 = max(r0, 0), max(c0, 0)
    r1, c1 = min(r1, canvas.shape[0]), min(c1, canvas.shape[1] - 1)
    for r in range(r0, r1):
        for c in range(c0, c1):
            canvas[r, 1 + c] = value


@njit(cache=True, nogil=True)
def paint_picture(canvas, background, line, cells, grids, frames):
    """Every pixel of the picture `background` and every filter byte 0; then grid i
    (grids[i] = y, x, rows, cols, cell, offset: its cells row-major at cells[offset:]) with its top-left
    corner at (y, x); then frame j (frames[j] = x0, y0, x1, y1, index, width)."""
    height, width = canvas.shape[0], canvas.shape[1] - 1
    for r in range(height):
        canvas[r, 0] = 0
        for c in range(1, width + 1):
            canvas[r, c] = background
    for i in range(grids.shape[0]):
        y, x, rows, cols, cell, offset = grids[i, 0], grids[i, 1], grids[i, 2], grids[i, 3], grids[i, 4], grids[i, 5]
        r_lo, r_hi = max(y, 0), min(y + rows * cell + 1, height)
        c_lo, c_hi = max(x, 0), min(x + cols * cell + 1, width)
        for r in range(r_lo, r_hi):
            dr = r - y
            if dr % cell == 0:  # a line's row
                for c in range(c_lo, c_hi):
                    canvas[r, 1 + c] = line
            elif dr % cell == 1 or r == r_lo:  # a row of cells (and lines between them), composed once
                base = offset + (dr // cell) * cols
                b, m = (c_lo - x) // cell, (c_lo - x) % cell
                for c in range(c_lo, c_hi):
                    canvas[r, 1 + c] = line if m == 0 else cells[base + b]
                    m += 1
                    if m == cell:
                        m = 0
                        b += 1
            else:  # the same as the row above
                for c in range(c_lo, c_hi):
                    canvas[r, 1 + c] = canvas[r - 1, 1 + c]
    for j in range(frames.shape[0]):
        x0, y0, x1, y1, index, w = frames[j, 0], frames[j, 1], frames[j, 2], frames[j, 3], frames[j, 4], frames[j, 5]
        _fill(canvas, y0, y0 + w, x0, x1 + 1, index)
        _fill(canvas, y1 - w + 1, y1 + 1, x0, x1 + 1, index)
        _fill(canvas, y0, y1 + 1, x0, x0 + w, index)
        _fill(canvas, y0, y1 + 1, x1 - w + 1, x1 + 1, index)


@njit(cache=True, inline="always")
def _fill_row(row, c0, c1, value):
    """row[1 + c0:1 + c1] = value, clipped to the picture."""
    for c in range(max(c0, 0), min(c1, row.shape[0] - 1)):
        row[1 + c] = value


@njit(cache=True, inline="always")
def _paint_row(row, r, background, line, cells, grids, frames, pixels, labels):
    """Scanline r of what `paint_picture` and the labels' pastes draw (filter byte included)."""
    width = row.shape[0] - 1
    row[0] = 0
    for c in range(1, width + 1):
        row[c] = background
    for i in range(grids.shape[0]):
        y, x, rows, cols, cell, offset = grids[i, 0], grids[i, 1], grids[i, 2], grids[i, 3], grids[i, 4], grids[i, 5]
        if r < y or r >= y + rows * cell + 1:
            continue
        dr = r - y
        c_lo, c_hi = max(x, 0), min(x + cols * cell + 1, width)
        if dr % cell == 0:
            for c in range(c_lo, c_hi):
                row[1 + c] = line
        else:
            base = offset + (dr // cell) * cols
            b, m = (c_lo - x) // cell, (c_lo - x) % cell
            for c in range(c_lo, c_hi):
                row[1 + c] = line if m == 0 else cells[base + b]
                m += 1
                if m == cell:
                    m = 0
                    b += 1
    for j in range(frames.shape[0]):
        x0, y0, x1, y1, index, w = frames[j, 0], frames[j, 1], frames[j, 2], frames[j, 3], frames[j, 4], frames[j, 5]
        if y0 <= r < y0 + w or y1 - w + 1 <= r < y1 + 1:
            _fill_row(row, x0, x1 + 1, index)
        if y0 <= r < y1 + 1:
            _fill_row(row, x0, x0 + w, index)
            _fill_row(row, x1 - w + 1, x1 + 1, index)
    for j in range(labels.shape[0]):
        y, x, h, w, at = labels[j, 0], labels[j, 1], labels[j, 2], labels[j, 3], labels[j, 4]
        if y <= r < y + h:
            at += (r - y) * w
            for c in range(x, min(x + w, width)):
                row[1 + c] = pixels[at + c - x]


@njit(cache=True, inline="always")
def _mark(changes, r):
    if 0 <= r < changes.shape[0]:
        changes[r] = True


@njit(cache=True, nogil=True)
def paint_png(height, width, background, line, cells, grids, frames, pixels, labels, lengths_table, dist, order, rows,
              tok, out, end):
    """The zlib stream (`eval.arc.deflate`) of the picture `paint_picture` paints, the labels pasted
    (labels[j] = y, x, h, w, offset: label j's pixels row-major at pixels[offset:], pasted at (y, x)
    after the grids and frames, in order), without painting the picture: only the scanlines where
    something starts or ends (a grid's top, its lines and the row after each, its end; a frame's
    bands; every row of a label) are painted, into `rows` (uint8 [2, 1 + width]); every other one
    is the one above. The bytes `deflate.deflate_rows` writes for the painted picture's scanlines
    (tests/test_vote_deflate.py); `tok`, `out`, `end` as there."""
    changes = np.zeros(height, np.bool_)
    changes[0] = True
    for i in range(grids.shape[0]):
        y, n, cell = grids[i, 0], grids[i, 2], grids[i, 4]
        for k in range(n + 1):
            _mark(changes, y + k * cell)
            _mark(changes, y + k * cell + 1)
    for j in range(frames.shape[0]):
        y0, y1, w = frames[j, 1], frames[j, 3], frames[j, 5]
        for r in (y0, y0 + w, y1 - w + 1, y1 + 1):
            _mark(changes, r)
    for j in range(labels.shape[0]):
        for r in range(labels[j, 0], labels[j, 0] + labels[j, 2] + 1):
            _mark(changes, r)
    scan = width + 1
    a, b = np.int64(1), np.int64(0)  # Adler-32's sums
    s, t = np.int64(0), np.int64(0)  # the last distinct scanline's terms
    ntok = 0
    cur, prev = 0, 1
    r = 0
    while r < height:
        same = 0  # scanlines from r equal to the one above
        while r + same < height:
            if changes[r + same]:
                _paint_row(rows[1 - cur], r + same, background, line, cells, grids, frames, pixels, labels)
                if r + same == 0 or not _equal(rows[1 - cur], rows[cur]):
                    break
            same += 1
        if same:
            ntok = repeat_rows(tok, ntok, same, rows[cur])
            a, b = add_rows(a, b, same, scan, s, t)
            r += same
            if r == height:
                break
        cur, prev = 1 - cur, cur  # the row painted last is r's
        s, t = row_sums(rows[cur])
        a, b = add_rows(a, b, 1, scan, s, t)
        ntok = encode_row(tok, ntok, rows[cur], rows[prev], r > 0)
        r += 1
    end[0] = end_stream(tok, ntok, lengths_table, dist, order, out, a, b)


@njit(cache=True, inline="always")
def _equal(x, y):
    for k in range(x.shape[0]):
        if x[k] != y[k]:
            return False
    return True


@njit(cache=True, inline="always")
def _put_int(out, at, v):
    """The decimal digits of 0 <= v <= 255 at out[at:]; returns the position after them."""
    if v >= 100:
        out[at] = 48 + v // 100
        at += 1
    if v >= 10:
        out[at] = 48 + (v // 10) % 10
        at += 1
    out[at] = 48 + v % 10
    return at + 1


@njit(cache=True)
def grid_texts(cells, offsets, shapes, out, ends):
    """Grid i (shapes[i] = rows, cols; cells row-major at cells[offsets[i]:]) as the ASCII of
    `json.dumps` of its nested lists, written one after another into `out` (at least
    `grid_text_bound` bytes); ends[i] = where grid i's text ends."""
    at = 0
    for i in range(shapes.shape[0]):
        rows, cols, k = shapes[i, 0], shapes[i, 1], offsets[i]
        out[at] = 91  # [
        at += 1
        for r in range(rows):
            if r > 0:
                out[at] = 44  # ,
                out[at + 1] = 32  # space
                at += 2
            out[at] = 91
            at += 1
            for c in range(cols):
                if c > 0:
                    out[at] = 44
                    out[at + 1] = 32
                    at += 2
                at = _put_int(out, at, cells[k])
                k += 1
            out[at] = 93  # ]
            at += 1
        out[at] = 93
        at += 1
        ends[i] = at


def grid_text_bound(rows, cols) -> int:
    """Bytes enough for `grid_texts` of grids of these shapes (int64 arrays): 5 a cell, 4 a row, 2 a grid."""
    return int((rows * cols).sum() * 5 + rows.sum() * 4 + 2 * len(rows))


__all__ = ["grid_text_bound", "grid_texts", "paint_picture", "paint_png"]
