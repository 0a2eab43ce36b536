"""The vote report's labels (`eval.arc.report`): lines of text composed from glyph strips drawn once per
character and size, every label of a report in two kernel calls (numba's, run from the ahead-of-time
module `arc_data.native`).

Each character's glyph is a line-high strip of coverage (uint8, FreeType's anti-aliasing), drawn at
the pen's origin; a line places its glyphs at the rounded pen position (the running sum of the
advances, rounded half to even as Python's `round`), each taking the brighter of its pixels and
those already there (glyphs may overlap their neighbours); lines are `line_h` px apart. A label's
canvas is wide enough for every glyph (its widest line's advances, rounded up, plus the widest
glyph and a pixel), and the label is the inked top-left extent of it (at least 1 x 1), its coverage
turned into palette indices. tests/test_vote_report_speed.py checks the kernels against the
per-glyph numpy composition they replaced, pixel for pixel.

`chars` holds every label's glyph indices one after another, -1 where a line ends and the next one
starts; label i is chars[ends[i - 1]:ends[i]].
"""

from __future__ import annotations

import math

import numpy as np

from arc_data.jit import njit


@njit(cache=True)
def measure_labels(widths, advances, chars, ends, line_h, dims):
    """dims[i] = (rows, cols) of label i's canvas."""
    start = 0
    for i in range(ends.shape[0]):
        lines, widest, glyph_w, pen = 1, 0.0, 1, 0.0
        seen = False
        for j in range(start, ends[i]):
            g = chars[j]
            if g < 0:
                lines += 1
                pen = 0.0
                continue
            pen += advances[g]
            if pen > widest:
                widest = pen
            if not seen or widths[g] > glyph_w:
                glyph_w = widths[g]
                seen = True
        dims[i, 0] = lines * line_h
        dims[i, 1] = math.ceil(widest) + glyph_w + 1
        start = ends[i]


@njit(cache=True)
def paint_labels(atlas, widths, advances, chars, ends, dims, offsets, line_h, first_index, levels, flat, extents):
    """Compose label i into flat[offsets[i]:] (dims[i] row-major; what is there before does not matter)
    as palette indices (`first_index` + coverage in `levels` steps, rounded: (c * (levels - 1) + 127) // 255)
    and set extents[i] = (rows, cols) of its inked extent (every pixel a glyph's nonzero coverage reached).
    The glyphs are composed in index space: the index is a non-decreasing function of the coverage, so
    the brighter index of two is the index of the brighter coverage, and the canvas starts as the index
    of coverage 0 (no pass turning coverage into indices after)."""
    index = np.empty(256, np.uint8)  # coverage -> palette index, looked up (a division a pixel cost 2/3 of the call)
    for v in range(256):
        index[v] = first_index + (v * (levels - 1) + 127) // 255
    start = 0
    for i in range(ends.shape[0]):
        height, width, base = dims[i, 0], dims[i, 1], offsets[i]
        for k in range(base, base + height * width):
            flat[k] = index[0]
        top, pen = 0, 0.0
        rows, cols = 1, 1  # the inked extent: every pixel a glyph's nonzero coverage reached
        for j in range(start, ends[i]):
            g = chars[j]
            if g < 0:
                top += line_h
                pen = 0.0
                continue
            left = math.floor(pen)
            frac = pen - left
            if frac > 0.5 or (frac == 0.5 and left % 2 == 1):  # Python's round: half to even
                left += 1
            for r in range(min(atlas.shape[1], height - top)):
                row = base + (top + r) * width + left
                for c in range(min(widths[g], width - left)):
                    v = atlas[g, r, c]
                    if v != 0:
                        x = index[v]
                        if x > flat[row + c]:
                            flat[row + c] = x
                        if top + r + 1 > rows:
                            rows = top + r + 1
                        if left + c + 1 > cols:
                            cols = left + c + 1
            pen += advances[g]
        extents[i, 0] = rows
        extents[i, 1] = cols
        start = ends[i]


__all__ = ["measure_labels", "paint_labels"]
