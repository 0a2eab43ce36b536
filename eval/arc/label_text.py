"""The vote report's labels as palette indices: each label composed from cached glyphs
(`eval.arc.glyphs`: FreeType draws each character once per size, not each label) by the kernels of
`eval.arc.labels`, black on white, anti-aliased in `TEXT_LEVELS` greys from palette index `TEXT` on
(the report's palette, `eval.arc.report.PALETTE`, ends with that ramp). `draw_labels` draws many
labels in two kernel calls; `label_of` returns one, drawn once a process.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from eval.arc import glyphs
from eval.arc.labels import measure_labels, paint_labels

TEXT, TEXT_LEVELS = 15, 8  # palette index TEXT + i: i = 0 white ... 7 black


def _glyph(ch: str, size: int) -> tuple[np.ndarray, float]:
    """One character drawn at the pen's origin on a line-high strip (uint8 coverage), and its advance:
    Pillow's drawing, kept on disk once drawn (`eval.arc.glyphs`)."""
    return glyphs.store().glyph(ch, size)


class _Glyphs:
    """The glyphs of one font size met so far, as the arrays the label kernels take (`eval.arc.labels`):
    an atlas of the line-high strips of `_glyph` (one height), their widths and advances, and a
    character's place among them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.index: dict[str, int] = {"\n": -1}  # -1: the line ends there
        self.strips: list[np.ndarray] = []
        self.advance_list: list[float] = []
        self.atlas = np.zeros((0, 1, 1), np.uint8)
        self.widths, self.advances = np.zeros(0, np.int64), np.zeros(0, np.float64)

    def add(self, chars: set[str]) -> None:
        new = sorted(chars - self.index.keys())
        if not new:
            return
        for ch in new:
            strip, advance = _glyph(ch, self.size)
            self.index[ch] = len(self.strips)
            self.strips.append(strip)
            self.advance_list.append(advance)
        atlas = np.zeros((len(self.strips), self.strips[0].shape[0], max(s.shape[1] for s in self.strips)), np.uint8)
        for i, strip in enumerate(self.strips):
            atlas[i, :, :strip.shape[1]] = strip
        self.atlas = readonly(atlas)
        self.widths = readonly(np.array([s.shape[1] for s in self.strips], np.int64))
        self.advances = readonly(np.array(self.advance_list, np.float64))


def readonly(a: np.ndarray) -> np.ndarray:
    """The kernels' ahead-of-time exports take their inputs read-only (`arc_data.native`)."""
    a.flags.writeable = False
    return a


@cache
def _glyphs(size: int) -> _Glyphs:
    return _Glyphs(size)


_LABELS: dict[tuple[str, int], np.ndarray] = {}  # (text, size) -> its label, drawn once a process


def draw_labels(texts: list[str], size: int) -> None:
    """Draw the labels of `texts` not drawn yet (`label_of`), all in two kernel calls."""
    texts = list(dict.fromkeys(t for t in texts if (t, size) not in _LABELS))
    if not texts:
        return
    if len(_LABELS) > 1 << 16:  # a long-lived process drawing many reports: start afresh
        _LABELS.clear()
    atlas = _glyphs(size)
    atlas.add(set().union(*texts))
    glyphs.store().save()  # the glyphs drawn now, if any, kept for the next report
    index = atlas.index
    chars = readonly(np.array([index[ch] for text in texts for ch in text], np.int64))
    ends = readonly(np.cumsum([len(text) for text in texts], dtype=np.int64))
    ascent, descent = glyphs.store().line_metrics(size)
    line_h = ascent + descent + 3
    dims = np.empty((len(texts), 2), np.int64)
    measure_labels(atlas.widths, atlas.advances, chars, ends, line_h, dims)
    readonly(dims)
    sizes = dims[:, 0] * dims[:, 1]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), np.uint8)  # every label's canvas filled by the kernel
    extents = np.empty((len(texts), 2), np.int64)
    paint_labels(atlas.atlas, atlas.widths, atlas.advances, chars, ends, dims, readonly(offsets[:-1]), line_h,
                 TEXT, TEXT_LEVELS, flat, extents)
    readonly(flat)
    for text, (height, width), (rows, cols), at in zip(texts, dims.tolist(), extents.tolist(), offsets.tolist()):
        _LABELS[text, size] = flat[at:at + height * width].reshape(height, width)[:rows, :cols]


def label_of(text: str, size: int) -> np.ndarray:
    """A label as palette indices (uint8 [rows, cols], read-only; black on white, anti-aliased in
    TEXT_LEVELS greys), composed from cached glyphs (FreeType draws each character once per size,
    not each label: a report has a thousand distinct labels and about a hundred distinct characters)
    by `eval.arc.labels`; lines 3 px apart. `draw_labels` draws many at once."""
    label = _LABELS.get((text, size))
    if label is None:
        draw_labels([text], size)
        label = _LABELS[text, size]
    return label
