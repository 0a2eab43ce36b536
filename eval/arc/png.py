"""Palette PNGs for the vote report, written with Python's zlib: the bytes of Pillow's
`Image.save(format="PNG", compress_level=1)` of a "P" image with more than 16 colours, without
Pillow's per-row encoder loop (about a third of the encoding's CPU at 400 pictures).

The picture is handed over as its *filtered* scanlines: a uint8 [rows, 1 + cols] array whose first
column is 0 (PNG's filter type None, the one Pillow uses for palette images) and whose other columns
are the palette indices, so that the whole image deflates in one call (which releases the GIL:
the report encodes on two threads). Pillow deflates with level 1, 15 window bits, memory level 9 and
the default strategy, and writes its output in IDAT chunks of `max(65536, 4 * cols)` bytes (its
encoder's buffer); the same zlib given the same stream gives the same bytes however it is fed.
tests/test_vote_png.py compares the two byte for byte (where Python's zlib is Pillow's).

The report itself now deflates its pictures with its own encoder (`eval.arc.deflate`, painted and
deflated in one kernel call: `eval.arc.paint.paint_png`), about 5x cheaper than zlib's level 1 on
them, and wraps that stream with `png_file`: other bytes than Pillow's, the same pixels.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
LEVEL, WBITS, MEMLEVEL = 1, 15, 9  # Pillow's deflateInit2 with compress_level=1
BLOCK = 65536  # PIL.ImageFile.MAXBLOCK: Pillow's smallest encoder buffer, one IDAT chunk each


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))


def palette_png(scanlines: np.ndarray, palette: bytes) -> bytes:
    """PNG bytes of a palette image: `scanlines` uint8 [rows, 1 + cols], C-contiguous, column 0 all 0
    (the filter byte); `palette` its RGB triplets (17 to 256 of them: 8 bits a pixel, as Pillow)."""
    rows, width = scanlines.shape
    if not (scanlines.dtype == np.uint8 and scanlines.flags.c_contiguous and rows > 0 and width > 1):
        raise ValueError(f"scanlines: a C-contiguous uint8 [rows, 1 + cols] array, got {scanlines.dtype} "
                         f"{scanlines.shape}")
    return png_file(rows, width - 1, zlib_stream(scanlines), palette)


def zlib_stream(scanlines: np.ndarray) -> bytes:
    """The scanlines deflated as Pillow deflates them (level 1, 15 window bits, memory level 9)."""
    z = zlib.compressobj(LEVEL, zlib.DEFLATED, WBITS, MEMLEVEL, zlib.Z_DEFAULT_STRATEGY)
    return z.compress(scanlines) + z.flush()


def png_file(rows: int, cols: int, data: bytes, palette: bytes) -> bytes:
    """The PNG file of a palette image of rows x cols pixels whose scanlines' zlib stream is `data`
    (any deflate stream of them: Pillow's, `zlib_stream`, or the report's own, `eval.arc.deflate`),
    cut into IDAT chunks as Pillow cuts its own."""
    if len(palette) % 3 or not 17 <= len(palette) // 3 <= 256:
        raise ValueError(f"palette: 17 to 256 RGB triplets (8 bits a pixel), got {len(palette)} bytes")
    step = max(BLOCK, 4 * cols)
    idat = b"".join(_chunk(b"IDAT", data[i:i + step]) for i in range(0, len(data), step))
    header = struct.pack(">IIBBBBB", cols, rows, 8, 3, 0, 0, 0)  # 8 bits, palette, deflate, filter 0, no interlace
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"PLTE", palette) + idat + _chunk(b"IEND", b"")


__all__ = ["palette_png", "png_file", "zlib_stream"]
