"""The vote's report and tasks.json written without Pillow's encoder and without `tolist()` (issue 61)
change no byte: each new path against the one it replaced.

- `eval.arc.png.palette_png` against Pillow's `save(format="PNG", compress_level=1)` (one IDAT chunk
  and several, a picture wider than 16,384 px);
- `eval.arc.paint.paint_picture` against the numpy slices the report drew with before, clipping
  included; `grid_texts` / `eval.arc.jsontext` against `json.dumps`; both kernels' ahead-of-time
  exports against numba's JIT;
- `results.Ranked`'s candidates, made when read, against the dataclass's own constructor.
(A whole report picture against the Pillow drawing: tests/test_vote_speed.py.)
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zlib

import numpy as np
import pytest
from PIL import Image, features

from arc_data import native
from eval.arc import jsontext, paint
from eval.arc.png import palette_png
from eval.arc.results import Candidate, Columns, Ranked

SAME_ZLIB = features.version("zlib") == zlib.ZLIB_RUNTIME_VERSION


def _pillow_png(picture: np.ndarray, palette: bytes) -> bytes:
    img = Image.frombytes("P", (picture.shape[1], picture.shape[0]), np.ascontiguousarray(picture).tobytes())
    img.putpalette(palette)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _scanlines(picture: np.ndarray) -> np.ndarray:
    out = np.zeros((picture.shape[0], picture.shape[1] + 1), np.uint8)
    out[:, 1:] = picture
    return out


@pytest.mark.skipif(not SAME_ZLIB, reason="Pillow's zlib is not Python's here: the same image, other bytes")
@pytest.mark.parametrize("rows, cols, noise, colours", [(1, 1, 0.0, 23), (37, 53, 0.3, 23), (300, 500, 1.0, 17),
                                                        (40, 17000, 1.0, 256), (200, 700, 0.05, 23)])
def test_palette_png_is_pillows(rows, cols, noise, colours):
    rng = np.random.default_rng(rows)
    picture = np.where(rng.random((rows, cols)) < noise, rng.integers(0, colours, (rows, cols)), 3).astype(np.uint8)
    palette = rng.integers(0, 256, 3 * colours).astype(np.uint8).tobytes()
    ours = palette_png(_scanlines(picture), palette)
    assert ours == _pillow_png(picture, palette)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(ours))), picture)


def test_palette_png_refuses_what_pillow_would_write_otherwise():
    ok = _scanlines(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="17 to 256"):
        palette_png(ok, bytes(16 * 3))  # 16 colours: Pillow writes 4 bits a pixel
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        palette_png(ok.astype(np.int64), bytes(23 * 3))
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        palette_png(np.zeros((2, 1), np.uint8), bytes(23 * 3))  # no pixel after the filter byte


# ---------------------------------------------------------------- painting


def _reference(height, width, background, line, grids, frames):
    """The report's drawing before the kernel: numpy slices (`report._paint_grid`, `report._frame`)."""
    canvas = np.full((height, width), background, np.uint8)
    for y, x, g, cell in grids:
        h, w = g.shape
        region = canvas[y:y + h * cell + 1, x:x + w * cell + 1]
        region[:h * cell, :w * cell] = g.repeat(cell, axis=0).repeat(cell, axis=1)[:region.shape[0], :region.shape[1]]
        region[::cell, :] = line
        region[:, ::cell] = line
    for x0, y0, x1, y1, index, fw in frames:
        canvas[y0:y0 + fw, x0:x1 + 1] = index
        canvas[y1 - fw + 1:y1 + 1, x0:x1 + 1] = index
        canvas[y0:y1 + 1, x0:x0 + fw] = index
        canvas[y0:y1 + 1, x1 - fw + 1:x1 + 1] = index
    return canvas


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _layout(seed: int):
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(20, 120)), int(rng.integers(20, 160))
    grids, frames = [], []
    for _ in range(int(rng.integers(0, 6))):  # some reach past the picture's edge: clipped as slices clip
        g = rng.integers(0, 10, (int(rng.integers(1, 8)), int(rng.integers(1, 8)))).astype(np.uint8)
        grids.append((int(rng.integers(0, height)), int(rng.integers(0, width)), g, int(rng.integers(1, 9))))
    for _ in range(int(rng.integers(0, 4))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        fw = int(rng.integers(1, 4))
        frames.append((x0, y0, x0 + int(rng.integers(2 * fw, 60)), y0 + int(rng.integers(2 * fw, 60)),
                       int(rng.integers(12, 14)), fw))
    return height, width, grids, frames


def _args(grids, frames):
    cells = [g.reshape(-1) for _, _, g, _ in grids]
    offsets = np.concatenate([[0], np.cumsum([c.size for c in cells])]).astype(np.int64)
    ops = np.array([(y, x, g.shape[0], g.shape[1], cell, o) for (y, x, g, cell), o in zip(grids, offsets)],
                   np.int64).reshape(-1, 6)
    return (_ro(np.concatenate(cells) if cells else np.zeros(0, np.uint8)), _ro(ops),
            _ro(np.array(frames, np.int64).reshape(-1, 6)))


@pytest.mark.parametrize("seed", range(12))
def test_paint_picture_is_the_numpy_drawing(seed):
    height, width, grids, frames = _layout(seed)
    scan = np.full((height, width + 1), 77, np.uint8)  # a used buffer: every byte is painted over
    paint.paint_picture(scan, 10, 11, *_args(grids, frames))
    assert (scan[:, 0] == 0).all()
    assert np.array_equal(scan[:, 1:], _reference(height, width, 10, 11, grids, frames))


def _both(kernel):
    """The kernel's ahead-of-time export and its numba dispatcher (skipped where there is no module)."""
    export = native.function(kernel.py_func) if os.environ.get(native.ENV, "1") != "0" else None
    if export is None:
        pytest.skip("no ahead-of-time module here (no C compiler, or HRM_DEEPLOOP_NATIVE=0)")
    return export, kernel.dispatcher if hasattr(kernel, "dispatcher") else kernel


def test_paint_exports_are_the_jit():
    height, width, grids, frames = _layout(3)
    out = []
    for fn in _both(paint.paint_picture):
        scan = np.empty((height, width + 1), np.uint8)
        call = (scan, 10, 11, *_args(grids, frames))
        assert not isinstance(fn, native.Native) or fn.accepts(call)
        fn(*call)
        out.append(scan)
    assert np.array_equal(out[0], out[1])
    grids = [np.arange(12, dtype=np.uint8).reshape(3, 4), np.zeros((0, 0), np.uint8), np.full((1, 2), 255, np.uint8)]
    texts = []
    for fn in _both(paint.grid_texts):
        shapes = _ro(np.array([g.shape for g in grids], np.int64))
        offsets = _ro(np.array([0, 12, 12], np.int64))
        buf, ends = np.zeros(paint.grid_text_bound(shapes[:, 0], shapes[:, 1]), np.uint8), np.empty(3, np.int64)
        call = (_ro(np.concatenate([g.reshape(-1) for g in grids])), offsets, shapes, buf, ends)
        assert not isinstance(fn, native.Native) or fn.accepts(call)
        fn(*call)
        texts.append(buf[:ends[-1]].tobytes())
    assert texts[0] == texts[1] == "".join(json.dumps(g.tolist()) for g in grids).encode()


# ---------------------------------------------------------------- tasks.json's grids


def test_grid_json_is_json_dumps():
    rng = np.random.default_rng(0)
    grids = [rng.integers(0, 256, (int(rng.integers(0, 6)), int(rng.integers(0, 6)))).astype(np.uint8)
             for _ in range(40)]
    grids += [np.zeros((0, 0), np.uint8), np.zeros((3, 0), np.uint8), np.arange(20, dtype=np.uint8).reshape(4, 5).T,
              np.array([[1, -2]], np.int64), [[1, 2]], np.arange(3, dtype=np.uint8)]  # not uint8 2-d: as lists
    assert jsontext.grid_json(grids) == [json.dumps(np.asarray(g).tolist()) for g in grids]


@pytest.mark.parametrize("name", ["task", "\x00", "a\x00", "\u0000\u0000"])
def test_dumps_with_grids_is_json_dumps(name):
    """A string of the object that is the placeholder itself sends it the plain way: the same bytes."""
    grid = np.arange(6, dtype=np.uint8).reshape(2, 3)

    def build(g):
        return {name: {"input": g(grid), "truth": g(None), "note": name, "c": [{"grid": g(grid[:1])}], "n": 1.5}}

    assert jsontext.dumps(build) == json.dumps(build(jsontext.as_list))


def test_candidates_made_when_read_are_the_dataclass():
    """`results.Ranked` makes each `Candidate` at its first reading, without the frozen dataclass's
    __init__: the same values, equality, hash and repr as the constructor's; a list's reading."""
    grid = np.zeros((2, 2), np.uint8)
    col = lambda *v, dt=np.int64: np.array(v, dt)  # noqa: E731
    columns = Columns(col(1, 5, 9, dt=np.uint64), col(2, 6, 2**64 - 1, dt=np.uint64), col(3, 2, 1), col(0.25, 0.5, 0.75,
                      dt=np.float64), col(7, 0, 4), col(2, 0, 30, dt=np.uint8), col(2, 0, 1, dt=np.uint8), [grid, None, None])
    fields = {"key": (1, 2), "votes": 3, "mean_q": 0.25, "first_seen": 7, "shape": (2, 2), "grid": grid, "log_lik": None}
    assert list(fields) == [f.name for f in dataclasses.fields(Candidate)]  # every field, in order
    ranked = Ranked(columns, 0, 3)
    made, want = ranked[0], Candidate(**fields)
    assert made == want and hash(made) == hash(want) and repr(made) == repr(want) and ranked[0] is made
    assert type(made.key[0]) is int and type(made.votes) is int and type(made.mean_q) is float
    assert ranked[2] == Candidate((9, 2**64 - 1), 1, 0.75, 4, (30, 1)) and ranked[-1] is ranked[2]
    assert len(ranked) == 3 and ranked.votes == 6 and ranked[1:] == [ranked[1], ranked[2]] and list(ranked) == ranked[:]
    assert ranked == list(ranked) and Ranked(columns, 1, 1) == [] and not Ranked(columns, 3, 3)
    assert Ranked(columns, 1, 3).votes == 3 and Ranked(columns, 1, 3)[0] is ranked[1]
    with pytest.raises(IndexError):
        ranked[3]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.votes = 4
