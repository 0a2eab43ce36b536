"""A deflate encoder for the report's pictures (numba's, run from the ahead-of-time module
`arc_data.native`): about 5x less CPU than zlib's fastest level on them, for a stream that any
inflater (zlib, Pillow, a browser) reads back to the same bytes.

A report picture is flat colour: grids of 8-24 px cells, most of its scanlines the scanline above
repeated, the rest runs of one palette index with a few anti-aliased labels between them. zlib's
level 1 hashes every byte looking for matches anywhere in its window (about 0.2 s of CPU for the
400 pictures of an ARC-1 report, 115 MB of scanlines). This encoder looks at two places only: the
byte one scanline up (a match at the distance of the scanline's width) and the byte before it (a
run), takes the longer match greedily (3 to 258 bytes, else a literal), and writes one final block
with deflate's fixed Huffman codes (RFC 1951 3.2.6): no tables to build or send. Its output is a
zlib stream (RFC 1950) without its Adler-32 trailer, which the caller appends (`zlib.adler32`).

`fixed_codes()` gives the codes as the kernel takes them (bit-reversed, extra bits above);
`deflate_rows(data, width, lit, length, dist, out, end)` encodes data (the scanlines, flat) into
`out` (at least `bound(len(data))` bytes) and puts the number of bytes written in end[0].
"""

from __future__ import annotations

import numpy as np

from arc_data.jit import njit

MAX_DISTANCE = 32768  # deflate's window: a scanline wider than this cannot be matched one row up
_LEN_BASE = (3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195,
             227, 258)
_LEN_EXTRA = (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0)
_DIST_BASE = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073,
              4097, 6145, 8193, 12289, 16385, 24577)
_DIST_EXTRA = (0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13)


def _reverse(code: int, bits: int) -> int:
    """Huffman codes go MSB first into deflate's LSB-first bit stream."""
    return int(f"{code:0{bits}b}"[::-1], 2)


def _symbol_code(sym: int) -> tuple[int, int]:
    """The fixed Huffman code of literal/length symbol `sym` (RFC 1951 3.2.6), reversed, and its bits."""
    if sym < 144:
        return _reverse(0x30 + sym, 8), 8
    if sym < 256:
        return _reverse(0x190 + sym - 144, 9), 9
    if sym < 280:
        return _reverse(sym - 256, 7), 7
    return _reverse(0xC0 + sym - 280, 8), 8


def fixed_codes() -> tuple[np.ndarray, np.ndarray]:
    """(lit [256, 2], length [259, 2]): per literal byte and per match length 3..258, the bits to write
    (code, count), the length's extra bits included."""
    lit = np.array([_symbol_code(b) for b in range(256)], np.int64)
    length = np.zeros((259, 2), np.int64)
    for n in range(3, 259):
        i = max(j for j, base in enumerate(_LEN_BASE) if base <= n)
        code, bits = _symbol_code(257 + i)
        length[n] = code | (n - _LEN_BASE[i]) << bits, bits + _LEN_EXTRA[i]
    return lit, length


def distance_code(d: int) -> tuple[int, int]:
    """The bits of match distance 1 <= d <= 32768 (fixed 5-bit code, then its extra bits)."""
    i = max(j for j, base in enumerate(_DIST_BASE) if base <= d)
    return _reverse(i, 5) | (d - _DIST_BASE[i]) << 5, 5 + _DIST_EXTRA[i]


def bound(n: int) -> int:
    """Bytes enough for any `n` bytes: 9 bits a literal at worst, the headers and end code."""
    return n + n // 8 + 16


@njit(cache=True, inline="always")
def _flush(out, pos, acc, nacc):
    while nacc >= 8:
        out[pos] = acc & 255
        acc >>= 8
        nacc -= 8
        pos += 1
    return pos, acc, nacc


@njit(cache=True, inline="always")
def _match(out, pos, acc, nacc, n, length, dcode, dbits):
    """A match of n (3..258) bytes at the distance whose bits are (dcode, dbits)."""
    acc |= length[n, 0] << nacc
    nacc += length[n, 1]
    acc |= dcode << nacc
    nacc += dbits
    return _flush(out, pos, acc, nacc)


@njit(cache=True, inline="always")
def _literal(out, pos, acc, nacc, v, lit):
    acc |= lit[v, 0] << nacc
    nacc += lit[v, 1]
    return _flush(out, pos, acc, nacc)


@njit(cache=True, inline="always")
def start_stream(out):
    """The zlib header and the final fixed-Huffman block's 3 bits: (pos, acc, nacc, adler a, adler b)."""
    out[0] = 0x78  # deflate, 32 KiB window
    out[1] = 0x01  # no dictionary, fastest level; (0x78 << 8 | 0x01) % 31 == 0
    return 2, np.int64(3), 3, np.int64(1), np.int64(0)  # BFINAL 1, BTYPE 01


@njit(cache=True, inline="always")
def row_sums(row):
    """Adler-32's terms of a scanline of w bytes: sum of its bytes, sum of (w - j) * byte j, mod 65521."""
    w = row.shape[0]
    s, t = np.int64(0), np.int64(0)
    for k in range(w):
        v = np.int64(row[k])
        s += v
        t += (w - k) * v
    return s % 65521, t % 65521


@njit(cache=True, inline="always")
def add_rows(a, b, count, width, s, t):
    """Adler-32's sums after `count` scanlines of `width` bytes with terms (s, t)."""
    for _ in range(count):
        b = (b + width * a + t) % 65521
        a = (a + s) % 65521
    return a, b


@njit(cache=True, inline="always")
def repeat_rows(out, pos, acc, nacc, count, row, length, lit, dw, bw):
    """`count` scanlines equal to the one above, `row` (its bytes): matches one scanline up, 258
    bytes a piece (the last ones cut so that none is under 3; a 2-byte scanline once: literals)."""
    width = row.shape[0]
    left = count * width
    while left >= 3:
        m = min(258, left)
        if 0 < left - m < 3:
            m = left - 3
        pos, acc, nacc = _match(out, pos, acc, nacc, m, length, dw, bw)
        left -= m
    for k in range(width - left, width):
        pos, acc, nacc = _literal(out, pos, acc, nacc, row[k], lit)
    return pos, acc, nacc


@njit(cache=True, inline="always")
def encode_row(out, pos, acc, nacc, cur, prev, has_prev, lit, length, d1, b1, dw, bw):
    """A scanline `cur` (the one above: `prev`, when `has_prev`), greedily: at each byte the longer
    of the match one scanline up and the run of the byte before (3..258 bytes, within the scanline),
    else a literal."""
    width = cur.shape[0]
    i = 0
    while i < width:
        lim = min(258, width - i)
        best = 0
        up = False
        if has_prev:
            k = 0
            while k < lim and cur[i + k] == prev[i + k]:
                k += 1
            best = k
            up = True
        if best < lim and i >= 1:
            c = cur[i - 1]
            k = 0
            while k < lim and cur[i + k] == c:
                k += 1
            if k > best:
                best = k
                up = False
        if best >= 3:
            if up:
                pos, acc, nacc = _match(out, pos, acc, nacc, best, length, dw, bw)
            else:
                pos, acc, nacc = _match(out, pos, acc, nacc, best, length, d1, b1)
            i += best
        else:
            pos, acc, nacc = _literal(out, pos, acc, nacc, cur[i], lit)
            i += 1
    return pos, acc, nacc


@njit(cache=True, inline="always")
def end_stream(out, pos, acc, nacc, a, b):
    """The end-of-block code, the last byte, Adler-32 (big-endian); returns the stream's length."""
    nacc += 7  # symbol 256: seven 0 bits
    pos, acc, nacc = _flush(out, pos, acc, nacc)
    if nacc > 0:
        out[pos] = acc & 255
        pos += 1
    adler = b << 16 | a
    for shift in (24, 16, 8, 0):
        out[pos] = (adler >> shift) & 255
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def deflate_rows(data, repeats, lit, length, dist, out, end):
    """The zlib stream of scanlines `data` (uint8 [rows, width], width at most MAX_DISTANCE): header,
    one final fixed-Huffman block, Adler-32; end[0] = its length in `out` (at least `bound` bytes).
    repeats[r]: scanline r is scanline r - 1's bytes (repeats[0] False); dist = (code, bits) of
    distance 1, then of distance `width`. A run of scanlines equal to the one above is matches one
    scanline up; any other scanline goes through `encode_row`."""
    rows, width = data.shape[0], data.shape[1]
    d1, b1, dw, bw = dist[0], dist[1], dist[2], dist[3]
    pos, acc, nacc, a, b = start_stream(out)
    s, t = np.int64(0), np.int64(0)  # the last scanline's Adler-32 terms
    r = 0
    while r < rows:
        same = 0
        while r + same < rows and repeats[r + same]:
            same += 1
        if same:
            pos, acc, nacc = repeat_rows(out, pos, acc, nacc, same, data[r - 1], length, lit, dw, bw)
            a, b = add_rows(a, b, same, width, s, t)
            r += same
            continue
        s, t = row_sums(data[r])
        a, b = add_rows(a, b, 1, width, s, t)
        pos, acc, nacc = encode_row(out, pos, acc, nacc, data[r], data[max(r - 1, 0)], r > 0, lit, length, d1, b1, dw,
                                    bw)
        r += 1
    end[0] = end_stream(out, pos, acc, nacc, a, b)


__all__ = ["MAX_DISTANCE", "add_rows", "bound", "deflate_rows", "distance_code", "encode_row", "end_stream", "fixed_codes",
           "repeat_rows", "row_sums", "start_stream"]
