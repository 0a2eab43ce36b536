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

from arc_data.jit import njit


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


__all__ = ["grid_text_bound", "grid_texts", "paint_picture"]
