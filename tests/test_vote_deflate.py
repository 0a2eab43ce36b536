"""The report's own deflate (`eval.arc.deflate`) and its pictures painted and deflated in one call
(`eval.arc.paint.paint_png`): other bytes than Pillow's zlib writes, the same pixels (issue 61).

- `deflate_rows`: zlib inflates its stream to the scanlines it was given (noise, repeated and
  2-byte scanlines, one row, 255-valued bytes; dynamic and fixed codes), and Pillow reads its PNG
  to the same pixels;
- `paint_png`: the stream `deflate_rows` writes for what `paint_picture` and the labels' pastes
  paint, byte for byte, for random layouts (clipped at the edges, labels overlapping grids);
- a report picture: `report.task_png` reads back (Pillow) to `report.task_scanlines`' pixels, and
  one too wide for a match one scanline up goes through zlib; the ahead-of-time exports are the JIT.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from arc_data import native
from eval.arc import deflate, paint
from eval.arc import report as R
from eval.arc.png import png_file
from tests.test_vote_png import _args, _both, _layout, _ro


def _repeats(scan: np.ndarray) -> np.ndarray:
    same = np.zeros(scan.shape[0], bool)
    same[1:] = (scan[1:] == scan[:-1]).all(axis=1)
    return _ro(same)


def _deflate(scan: np.ndarray, fn=deflate.deflate_rows) -> bytes:
    out, end = np.empty(deflate.bound(scan.size), np.uint8), np.zeros(1, np.int64)
    call = (_ro(scan), _repeats(scan), deflate.LENGTHS, deflate.distances(scan.shape[1]), deflate.CL_ORDER,
            np.empty(scan.size + 1, np.int32), out, end)
    assert not isinstance(fn, native.Native) or fn.accepts(call)
    fn(*call)
    return out[:end[0]].tobytes()


def _picture(rng, rows: int, width: int) -> np.ndarray:
    noise = rng.random()
    scan = np.where(rng.random((rows, width)) < noise, rng.integers(0, 256, (rows, width)),
                    rng.integers(0, 3)).astype(np.uint8)
    scan[rng.random(rows) < 0.5] = scan[0]  # scanlines equal to the one above, alone and in runs
    scan[:, 0] = 0
    return scan


@pytest.mark.parametrize("rows, width", [(1, 2), (3, 2), (7, 3), (1, 700), (40, 600), (300, 31), (5, 1200)])
def test_deflate_rows_inflates_to_its_scanlines(rows, width):
    rng = np.random.default_rng(rows * 1000 + width)
    for _ in range(20):
        scan = _picture(rng, rows, width)
        stream = _deflate(scan)
        assert zlib.decompress(stream) == scan.tobytes()
    picture = scan[:, 1:]
    palette = bytes(range(3 * 23))
    img = Image.open(io.BytesIO(png_file(rows, width - 1, stream, palette)))
    assert img.mode == "P" and np.array_equal(np.asarray(img), picture)


def test_deflate_rows_of_flat_colour_is_small():
    scan = np.zeros((400, 801), np.uint8)
    scan[:, 1:] = 7
    stream = _deflate(scan)
    assert zlib.decompress(stream) == scan.tobytes()
    assert len(stream) < 1700  # one row's runs, then 1,242 matches one row up: 2 bits + 8 extra of distance each


def test_deflate_rows_takes_the_fixed_codes_where_they_are_shorter():
    scan = np.zeros((1, 6), np.uint8)  # a few literals: a dynamic block's code tables would cost more
    stream = _deflate(scan)
    assert zlib.decompress(stream) == scan.tobytes()
    assert stream[2] & 0b111 == 0b011  # BFINAL 1, BTYPE 01 (fixed)
    scan = np.random.default_rng(0).integers(0, 4, (50, 300)).astype(np.uint8)
    stream = _deflate(scan)
    assert zlib.decompress(stream) == scan.tobytes()
    assert stream[2] & 0b111 == 0b101  # BTYPE 10 (dynamic): 4 literals in 2 bits each, not 8


def _labels(rng, height: int, width: int):
    """Label pastes as `report._layout` gives them: (pixels uint8 [h, w], y, x), some past the edges."""
    out = []
    for _ in range(int(rng.integers(0, 5))):
        h, w = int(rng.integers(1, 20)), int(rng.integers(1, 90))
        out.append((rng.integers(15, 23, (h, w)).astype(np.uint8), int(rng.integers(0, height)),
                    int(rng.integers(0, width))))
    return out


def _painted(height, width, grids, frames, labels) -> np.ndarray:
    scan = np.empty((height, width + 1), np.uint8)
    paint.paint_picture(scan, 10, 11, *_args(grids, frames))
    for label, y, x in labels:
        R._paste(scan[:, 1:], label, y, x)
    return scan


def _paint_png(height, width, grids, frames, labels, fn=paint.paint_png) -> bytes:
    table = _ro(np.array([(y, x, lab.shape[0], lab.shape[1], 0) for lab, y, x in labels], np.int64).reshape(-1, 5))
    if len(labels):
        table = np.array(table)
        table[1:, 4] = np.cumsum([lab.size for lab, _, _ in labels])[:-1]
        table = _ro(table)
    pixels = _ro(np.concatenate([lab.reshape(-1) for lab, _, _ in labels] + [np.zeros(0, np.uint8)]))
    out, end = np.empty(deflate.bound(height * (width + 1)), np.uint8), np.zeros(1, np.int64)
    call = (height, width, 10, 11, *_args(grids, frames), pixels, table, deflate.LENGTHS, deflate.distances(width + 1),
            deflate.CL_ORDER, np.empty((2, width + 1), np.uint8), np.empty(height * (width + 1) + 1, np.int32), out, end)
    assert not isinstance(fn, native.Native) or fn.accepts(call)
    fn(*call)
    return out[:end[0]].tobytes()


@pytest.mark.parametrize("seed", range(16))
def test_paint_png_is_deflate_rows_of_the_painted_picture(seed):
    height, width, grids, frames = _layout(seed)
    labels = _labels(np.random.default_rng(100 + seed), height, width)
    scan = _painted(height, width, grids, frames, labels)
    stream = _paint_png(height, width, grids, frames, labels)
    assert stream == _deflate(scan)
    assert zlib.decompress(stream) == scan.tobytes()


def test_deflate_exports_are_the_jit():
    height, width, grids, frames = _layout(5)
    labels = _labels(np.random.default_rng(7), height, width)
    streams = [_paint_png(height, width, grids, frames, labels, fn) for fn in _both(paint.paint_png)]
    assert streams[0] == streams[1]
    scan = _painted(height, width, grids, frames, labels)
    export, jit = _both(deflate.deflate_rows)
    assert _deflate(scan, export) == _deflate(scan, jit) == streams[0]


def test_a_picture_too_wide_for_a_match_one_row_up_goes_through_zlib():
    width = deflate.MAX_DISTANCE + 5
    grids = [(2, 30000, np.arange(6, dtype=np.uint8).reshape(2, 3), 4)]
    label = np.full((3, 9), 20, np.uint8)
    layout = (16, width, *_args(grids, []), [(label, 1, width - 4)])
    rows, cols, stream = R._task_stream(layout)
    assert (rows, cols) == (16, width)
    scan = _painted(16, width, grids, [], [(label, 1, width - 4)])
    assert zlib.decompress(stream) == scan.tobytes()
