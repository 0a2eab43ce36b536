"""The vote report's glyphs: each character of its labels drawn once by Pillow's bundled FreeType font
(`glyph`), and kept on disk beside the compiled kernels (`arc_data.native.folder`), so that a report
whose characters were all drawn before never imports Pillow (its import and the font's start-up are
about 0.02-0.03 s of CPU of a 0.8 s `vote`; docs/notebook/2026-12-06-vote.md, fourth pass).

The cache file holds, per font size, the font's ascent and descent and each character's strip
(uint8 coverage, as `glyph` draws it) and advance: the very arrays Pillow gave, so labels drawn from
it are the same pixels (tests/test_vote_glyphs.py). Its name hashes Pillow's version file, its
FreeType module's file (name, size and time) and this file's source: another Pillow, another
FreeType build or another way of drawing reads another file. A file that is not a regular file, too large, not an
.npz of the expected arrays, or inconsistent is ignored (its glyphs drawn again and a good file
written over it); a new file is written whole under a temporary name and renamed, so a reader sees an
old file or a new one, never half of one. Where no cache folder is writable, glyphs are drawn in
every process, as before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import stat
import tempfile
from contextlib import suppress
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arc_data import native

if TYPE_CHECKING:
    from PIL import ImageFont

MAX_BYTES = 16 << 20  # a cache file larger than this is not ours


@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    from PIL import ImageFont  # lazy: only where a glyph is not in the cache

    return ImageFont.load_default(size=size)  # decodes the bundled font: once per size, not per label


def draw(ch: str, size: int) -> tuple[np.ndarray, float]:
    """One character drawn by Pillow at the pen's origin on a line-high strip (uint8 coverage), and its advance."""
    from PIL import Image, ImageDraw  # lazy: as `font`

    f = font(size)
    ascent, descent = f.getmetrics()
    right = max(1, int(np.ceil(max(f.getbbox(ch)[2], f.getlength(ch)))))
    strip = Image.new("L", (right + 1, ascent + descent + 1), 0)
    ImageDraw.Draw(strip).text((0, 0), ch, fill=255, font=f)
    return np.asarray(strip, np.uint8), f.getlength(ch)


class Store:
    """The glyphs of every size met so far in this process, read from the cache file and added to by `draw`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.metrics: dict[int, tuple[int, int]] = {}
        self.glyphs: dict[tuple[str, int], tuple[np.ndarray, float]] = {}
        self.changed = False
        if path is not None:
            self._read(path)

    def line_metrics(self, size: int) -> tuple[int, int]:
        """The font's (ascent, descent) at `size`."""
        m = self.metrics.get(size)
        if m is None:
            ascent, descent = font(size).getmetrics()
            m = self.metrics[size] = (int(ascent), int(descent))
            self.changed = True
        return m

    def glyph(self, ch: str, size: int) -> tuple[np.ndarray, float]:
        """`draw(ch, size)`, from the cache where it is there."""
        g = self.glyphs.get((ch, size))
        if g is None:
            strip, advance = draw(ch, size)
            g = self.glyphs[ch, size] = (_readonly(strip), float(advance))
            self.line_metrics(size)
            self.changed = True
        return g

    def save(self) -> None:
        """Write the cache file when glyphs were drawn in this process (best effort: a folder that
        refuses the file leaves the glyphs to be drawn next time)."""
        if self.path is None or not self.changed:
            return
        arrays: dict[str, np.ndarray] = {}
        for size, (ascent, descent) in self.metrics.items():
            chars = sorted(ch for ch, s in self.glyphs if s == size)
            strips = [self.glyphs[ch, size][0] for ch in chars]
            height = ascent + descent + 1
            if any(s.shape[0] != height for s in strips):
                continue
            atlas = np.zeros((len(chars), height, max([s.shape[1] for s in strips] + [1])), np.uint8)
            for i, s in enumerate(strips):
                atlas[i, :, :s.shape[1]] = s
            arrays[f"metrics_{size}"] = np.array([ascent, descent], np.int64)
            arrays[f"chars_{size}"] = np.array([ord(ch) for ch in chars], np.int64)
            arrays[f"widths_{size}"] = np.array([s.shape[1] for s in strips], np.int64)
            arrays[f"advances_{size}"] = np.array([self.glyphs[ch, size][1] for ch in chars], np.float64)
            arrays[f"atlas_{size}"] = atlas
        tmp = None
        try:
            with tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp",
                                             delete=False) as f:
                tmp = f.name
                np.savez(f, **arrays)
            os.replace(tmp, self.path)
            tmp = None
            self.changed = False
        except OSError:
            pass
        finally:
            if tmp is not None:
                with suppress(OSError):
                    os.unlink(tmp)

    def _read(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                return
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(MAX_BYTES + 1)
        except OSError:
            return
        finally:
            os.close(fd)
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            metrics, glyphs = _unpack(arrays)
        except Exception:  # noqa: BLE001  # whatever fails (a bad zip, a header claiming too much): not ours
            return  # drawn again and written over
        self.metrics.update(metrics)
        self.glyphs.update(glyphs)


def _unpack(arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    metrics, glyphs = {}, {}
    for name in arrays:
        if not name.startswith("metrics_"):
            continue
        size = int(name.removeprefix("metrics_"))
        m, chars, widths = arrays[name], arrays[f"chars_{size}"], arrays[f"widths_{size}"]
        advances, atlas = arrays[f"advances_{size}"], arrays[f"atlas_{size}"]
        n = len(chars)
        ok = (m.dtype == np.int64 and m.shape == (2,) and (m >= 0).all() and chars.dtype == np.int64
              and chars.shape == widths.shape == advances.shape == (n,) and widths.dtype == np.int64
              and advances.dtype == np.float64 and atlas.dtype == np.uint8 and atlas.ndim == 3
              and atlas.shape[:2] == (n, int(m.sum()) + 1) and (widths >= 1).all()
              and (widths <= atlas.shape[2]).all() and ((chars >= 0) & (chars < 0x110000)).all())
        if not ok:
            raise ValueError(f"glyphs of size {size}: not as written")
        metrics[size] = (int(m[0]), int(m[1]))
        for ch, w, adv, strip in zip(chars.tolist(), widths.tolist(), advances.tolist(), atlas):
            glyphs[chr(ch), size] = (_readonly(np.ascontiguousarray(strip[:, :w])), float(adv))
    return metrics, glyphs


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def cache_path() -> Path | None:
    """The cache file for this Pillow and this source, in the compiled kernels' folder; None where
    there is none (no writable folder, no Pillow). Pillow is found, not imported."""
    try:
        spec = importlib.util.find_spec("PIL")
        where = native.folder()
        package = Path(next(iter(spec.submodule_search_locations))) if spec is not None else None
        h = hashlib.sha256(Path(__file__).read_bytes())
        if package is None or where is None:
            return None
        h.update((package / "_version.py").read_bytes())
        for ft in sorted(package.glob("_imagingft*")):  # the FreeType module (and so its FreeType build)
            st = ft.stat()
            h.update(f"{ft.name} {st.st_size} {st.st_mtime_ns}".encode())
    except (ImportError, ValueError, OSError, StopIteration, TypeError):
        return None
    return where / f"vote_glyphs_{h.hexdigest()[:20]}.npz"


@cache
def store() -> Store:
    """This process's glyphs (the cache file read at the first call)."""
    return Store(cache_path())


__all__ = ["Store", "cache_path", "draw", "font", "store"]
