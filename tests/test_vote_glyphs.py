"""The report's glyph cache (`eval.arc.glyphs`): glyphs read back from the file are Pillow's drawing
(strips, advances, line metrics), so labels are the same pixels; a second process draws nothing; a
damaged or hostile cache file is ignored and written over; the file's name follows Pillow and the source."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import eval.arc.label_text as LT
import eval.arc.report as R
from eval.arc import glyphs

CHARS = "#1: 301 votes\nright, mean q 0.523 truth (not given) ŝü_[]{}|~"
LABELS = ["#1: 301 votes\nright, mean q 0.523", "truth\n(not given)", "ŝü_[]{}|~ test 0: input"]


def _fill(store: glyphs.Store) -> dict:
    drawn = {}
    for size in (R.LABEL_SIZE, R.TITLE_SIZE):
        for ch in set(CHARS) - {"\n"}:
            drawn[ch, size] = store.glyph(ch, size)
        drawn[size] = store.line_metrics(size)
    return drawn


def test_cached_glyphs_are_pillows(tmp_path, monkeypatch):
    path = tmp_path / "glyphs.npz"
    first = glyphs.Store(path)
    drawn = _fill(first)
    for (ch, size), (strip, advance) in ((k, v) for k, v in drawn.items() if isinstance(k, tuple)):
        want_strip, want_advance = glyphs.draw(ch, size)
        assert np.array_equal(strip, want_strip) and strip.dtype == np.uint8 and advance == want_advance
    assert drawn[R.LABEL_SIZE] == tuple(glyphs.font(R.LABEL_SIZE).getmetrics())
    first.save()
    assert path.is_file() and not first.changed

    def refuse(ch, size):
        raise AssertionError(f"drew {ch!r} at {size}: it was in the cache")

    monkeypatch.setattr(glyphs, "draw", refuse)
    monkeypatch.setattr(glyphs, "font", refuse)
    second = glyphs.Store(path)
    again = _fill(second)
    assert again.keys() == drawn.keys()
    for k, v in drawn.items():
        if isinstance(k, tuple):
            assert np.array_equal(again[k][0], v[0]) and again[k][1] == v[1]
        else:
            assert again[k] == v
    second.save()  # nothing new: nothing written
    assert not second.changed


def test_labels_from_the_cache_are_the_same_pixels(tmp_path, monkeypatch):
    fresh = glyphs.Store(tmp_path / "g.npz")
    monkeypatch.setattr(glyphs, "store", lambda: fresh)
    LT._LABELS.clear()
    LT._glyphs.cache_clear()
    want = {(t, s): LT.label_of(t, s).copy() for t in LABELS for s in (R.LABEL_SIZE, R.TITLE_SIZE)}
    assert (tmp_path / "g.npz").is_file()  # `_texts` saved what it drew
    cached = glyphs.Store(tmp_path / "g.npz")
    monkeypatch.setattr(glyphs, "store", lambda: cached)
    monkeypatch.setattr(glyphs, "draw", lambda ch, size: pytest.fail(f"drew {ch!r}"))
    LT._LABELS.clear()
    LT._glyphs.cache_clear()
    try:
        for (t, s), pixels in want.items():
            assert np.array_equal(LT.label_of(t, s), pixels), t
    finally:
        LT._LABELS.clear()
        LT._glyphs.cache_clear()


def _damaged(path, kind: str) -> None:
    if kind == "garbage":
        path.write_bytes(b"PK\x03\x04 not a zip at all" * 10)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        target = path.parent / "elsewhere.npz"
        elsewhere = glyphs.Store(target)
        elsewhere.glyph("a", R.LABEL_SIZE)
        elsewhere.save()
        os.symlink(target, path)
    elif kind == "shapes":  # an .npz of the right names, the atlas a row short
        np.savez(path, metrics_13=np.array([12, 3], np.int64), chars_13=np.array([97], np.int64),
                 widths_13=np.array([5], np.int64), advances_13=np.array([6.0]),
                 atlas_13=np.zeros((1, 15, 5), np.uint8))
    elif kind == "pickle":
        np.savez(path, metrics_13=np.array([object()], dtype=object))


@pytest.mark.parametrize("kind", ["garbage", "empty", "fifo", "link", "shapes", "pickle"])
def test_a_damaged_cache_is_drawn_again_and_written_over(tmp_path, kind):
    path = tmp_path / "glyphs.npz"
    _damaged(path, kind)
    store = glyphs.Store(path)  # never blocks on a FIFO, never follows the link, never unpickles
    assert store.glyphs == {} and store.metrics == {}
    strip, advance = store.glyph("a", R.LABEL_SIZE)
    want_strip, want_advance = glyphs.draw("a", R.LABEL_SIZE)
    assert np.array_equal(strip, want_strip) and advance == want_advance
    store.save()  # the rename replaces whatever was under the name (a FIFO, a link) without opening it
    assert path.is_file() and not path.is_symlink()
    assert ("a", R.LABEL_SIZE) in glyphs.Store(path).glyphs
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cache_name_follows_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    path = glyphs.cache_path()
    assert path is not None and path.parent == tmp_path / "arc_data_native" and path.name.startswith("vote_glyphs_")
    source = tmp_path / "glyphs_copy.py"
    source.write_text(Path(glyphs.__file__).read_text() + "\n# another way of drawing\n")
    monkeypatch.setattr(glyphs, "__file__", str(source))
    assert glyphs.cache_path() != path
