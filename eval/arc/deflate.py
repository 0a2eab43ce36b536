"""A deflate encoder for the report's pictures (numba's, run from the ahead-of-time module
`arc_data.native`): on the 400 pictures of an ARC-1 report 0.09 s of CPU against zlib's 0.23 s at
its fastest level, and 20% smaller output (docs/notebook/2026-12-06-vote.md, third pass); a stream
that any inflater (zlib, Pillow, a browser) reads back to the same bytes.

A report picture is flat colour: grids of 8-24 px cells, most of its scanlines the scanline above
repeated, the rest runs of one palette index with a few anti-aliased labels between them. zlib's
level 1 hashes every byte looking for matches anywhere in its window (about 0.2 s of CPU for the
400 pictures of an ARC-1 report, 115 MB of scanlines). This encoder looks at two places only: the
byte one scanline up (a match at the distance of the scanline's width) and the byte before it (a
run), and takes the longer match greedily (3 to 258 bytes, within the scanline; else a literal); a
run of scanlines equal to the one above is matches one scanline up, 258 bytes a piece, without
comparing a byte when the caller knows them equal. The tokens are then written as one final block
with Huffman codes built for them (RFC 1951 3.2.7), or with deflate's fixed codes where those come
out shorter, in a zlib stream (RFC 1950: header, block, Adler-32).

A token is an int32: a literal byte (0..255), or 256 + 2 * (length - 3) + (1 for the distance of a
scanline, 0 for distance 1). The kernels' pieces (`start_stream`, `repeat_rows`, `encode_row`,
`row_sums`, `add_rows`, `end_stream`) are shared with `eval.arc.paint.paint_png`, which feeds them
scanlines as it paints them; `deflate_rows` feeds them a picture's scanlines.
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
_CL_ORDER = (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)  # code length codes' order


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _length_table() -> np.ndarray:
    """int64 [259, 3]: per match length 3..258, its symbol (257..285), extra bits' value and count."""
    table = np.zeros((259, 3), np.int64)
    for n in range(3, 259):
        i = max(j for j, base in enumerate(_LEN_BASE) if base <= n)
        table[n] = 257 + i, n - _LEN_BASE[i], _LEN_EXTRA[i]
    return table


LENGTHS = _readonly(_length_table())
CL_ORDER = _readonly(np.array(_CL_ORDER, np.int64))


def distances(width: int) -> np.ndarray:
    """int64 [2, 3]: the (code, extra bits' value, count) of distance 1 and of distance `width`
    (1 < width <= MAX_DISTANCE), read-only as the kernels take it."""
    out = np.zeros((2, 3), np.int64)
    for row, d in enumerate((1, width)):
        i = max(j for j, base in enumerate(_DIST_BASE) if base <= d)
        out[row] = i, d - _DIST_BASE[i], _DIST_EXTRA[i]
    return _readonly(out)


def bound(n: int) -> int:
    """Bytes enough for the stream of any `n` bytes: never more than deflate's fixed codes take (9
    bits a literal at worst), with the headers."""
    return n + n // 8 + 64


# ---------------------------------------------------------------- the tokens


@njit(cache=True, inline="always")
def repeat_rows(tok, ntok, count, row):
    """`count` scanlines equal to the one above, `row` (its bytes): matches one scanline up, 258
    bytes a piece (the last ones cut so that none is under 3; a 2-byte scanline once: literals)."""
    width = row.shape[0]
    left = count * width
    while left >= 3:
        m = min(258, left)
        if 0 < left - m < 3:
            m = left - 3
        tok[ntok] = 256 + 2 * (m - 3) + 1
        ntok += 1
        left -= m
    for k in range(width - left, width):
        tok[ntok] = row[k]
        ntok += 1
    return ntok


@njit(cache=True, inline="always")
def encode_row(tok, ntok, cur, prev, has_prev):
    """A scanline `cur` (the one above: `prev`, when `has_prev`), greedily: at each byte the longer
    of the match one scanline up and the run of the byte before (3..258 bytes, within the scanline),
    else a literal."""
    width = cur.shape[0]
    i = 0
    while i < width:
        lim = min(258, width - i)
        best = 0
        up = 0
        if has_prev:
            k = 0
            while k < lim and cur[i + k] == prev[i + k]:
                k += 1
            best = k
            up = 1
        if best < lim and i >= 1:
            c = cur[i - 1]
            k = 0
            while k < lim and cur[i + k] == c:
                k += 1
            if k > best:
                best = k
                up = 0
        if best >= 3:
            tok[ntok] = 256 + 2 * (best - 3) + up
            i += best
        else:
            tok[ntok] = cur[i]
            i += 1
        ntok += 1
    return ntok


@njit(cache=True, inline="always")
def row_sums(row):
    """Adler-32's terms of a scanline of w bytes: sum of its bytes, sum of (w - j) * byte j, mod 65521."""
    s, t = np.int64(0), np.int64(0)
    for k in range(row.shape[0]):  # t: the sum of the running sums, sum of (w - j) * byte j (no multiply)
        s += np.int64(row[k])
        t += s
    return s % 65521, t % 65521


@njit(cache=True, inline="always")
def add_rows(a, b, count, width, s, t):
    """Adler-32's sums after `count` scanlines of `width` bytes with terms (s, t)."""
    for _ in range(count):
        b = (b + width * a + t) % 65521
        a = (a + s) % 65521
    return a, b


# ---------------------------------------------------------------- the codes


@njit(cache=True)
def _huffman(freq, limit, lengths):
    """Code lengths (at most `limit` bits) of a Huffman code for `freq` into `lengths`: two queues
    over the symbols sorted by frequency (ties: the lower symbol first, a leaf before a node), the
    frequencies halved until the longest code fits. Deterministic: the same tokens, the same code."""
    f = freq.copy()
    n = f.shape[0]
    while True:
        lengths[:] = 0
        syms = np.flatnonzero(f > 0)
        m = syms.shape[0]
        if m == 0:
            return
        if m == 1:
            lengths[syms[0]] = 1
            return
        order = syms[np.argsort(f[syms], kind="mergesort")]
        weight = np.empty(2 * m - 1, np.int64)
        parent = np.zeros(2 * m - 1, np.int64)
        for i in range(m):
            weight[i] = f[order[i]]
        leaf, node, made = 0, m, m
        for _ in range(m - 1):
            if leaf < m and (node >= made or weight[leaf] <= weight[node]):
                first = leaf
                leaf += 1
            else:
                first = node
                node += 1
            if leaf < m and (node >= made or weight[leaf] <= weight[node]):
                second = leaf
                leaf += 1
            else:
                second = node
                node += 1
            weight[made] = weight[first] + weight[second]
            parent[first] = made
            parent[second] = made
            made += 1
        depth = np.zeros(2 * m - 1, np.int64)
        longest = 0
        for i in range(2 * m - 3, -1, -1):  # parents come after their children
            depth[i] = depth[parent[i]] + 1
            if i < m and depth[i] > longest:
                longest = depth[i]
        if longest <= limit:
            for i in range(m):
                lengths[order[i]] = depth[i]
            return
        for i in range(n):
            if f[i] > 0:
                f[i] = (f[i] >> 1) | 1


@njit(cache=True)
def _codes(lengths, codes):
    """The canonical Huffman codes of `lengths` (RFC 1951 3.2.2), bit-reversed for the LSB-first stream."""
    count = np.zeros(16, np.int64)
    for v in lengths:
        count[v] += 1
    count[0] = 0
    following = np.zeros(16, np.int64)
    code = 0
    for bits in range(1, 16):
        code = (code + count[bits - 1]) << 1
        following[bits] = code
    for sym in range(lengths.shape[0]):
        bits = lengths[sym]
        if bits:
            c = following[bits]
            following[bits] += 1
            r = 0
            for _ in range(bits):
                r = (r << 1) | (c & 1)
                c >>= 1
            codes[sym] = r


@njit(cache=True, inline="always")
def _put(out, pos, acc, nacc, value, bits):
    acc |= value << nacc
    nacc += bits
    while nacc >= 8:
        out[pos] = acc & 255
        acc >>= 8
        nacc -= 8
        pos += 1
    return pos, acc, nacc


@njit(cache=True)
def _write_block(tok, ntok, lengths_table, dist, order, out, pos, acc, nacc):
    """The tokens as one final block: dynamic codes (RFC 1951 3.2.7; code lengths run-length coded
    with symbols 17 and 18 for zeros), or the fixed ones where those take fewer bits."""
    hist = np.zeros(768, np.int64)  # the tokens by value: one count a token, no branch on its kind
    for j in range(ntok):
        hist[tok[j]] += 1
    freq = np.zeros(286, np.int64)
    dfreq = np.zeros(30, np.int64)
    extra = 0
    for v in range(256):
        freq[v] = hist[v]
    for v in range(256, 768):
        h = hist[v]
        if h:
            n, up = 3 + ((v - 256) >> 1), (v - 256) & 1
            freq[lengths_table[n, 0]] += h
            dfreq[dist[up, 0]] += h
            extra += h * (lengths_table[n, 2] + dist[up, 2])
    freq[256] = 1  # end of block
    dfreq[dist[0, 0]] = max(dfreq[dist[0, 0]], 1)  # two distance codes at least: one-code sets are special
    dfreq[dist[1, 0]] = max(dfreq[dist[1, 0]], 1)
    lit_len = np.zeros(286, np.int64)
    dist_len = np.zeros(30, np.int64)
    _huffman(freq, 15, lit_len)
    _huffman(dfreq, 15, dist_len)
    hlit, hdist = 286, 30
    while hlit > 257 and lit_len[hlit - 1] == 0:
        hlit -= 1
    while hdist > 1 and dist_len[hdist - 1] == 0:
        hdist -= 1
    seq = np.concatenate((lit_len[:hlit], dist_len[:hdist]))
    cl = np.zeros((seq.shape[0], 2), np.int64)  # code length symbols and their repeat counts
    ncl = 0
    i = 0
    while i < seq.shape[0]:
        run = 1
        if seq[i] == 0:
            while i + run < seq.shape[0] and seq[i + run] == 0 and run < 138:
                run += 1
        if run >= 11:
            cl[ncl, 0] = 18
            cl[ncl, 1] = run - 11
        elif run >= 3:
            cl[ncl, 0] = 17
            cl[ncl, 1] = run - 3
        else:
            run = 1
            cl[ncl, 0] = seq[i]
        ncl += 1
        i += run
    cfreq = np.zeros(19, np.int64)
    for j in range(ncl):
        cfreq[cl[j, 0]] += 1
    cl_len = np.zeros(19, np.int64)
    _huffman(cfreq, 7, cl_len)
    hclen = 19
    while hclen > 4 and cl_len[order[hclen - 1]] == 0:
        hclen -= 1
    dynamic = 17 + 3 * hclen + extra
    for j in range(ncl):
        dynamic += cl_len[cl[j, 0]] + (7 if cl[j, 0] == 18 else 3 if cl[j, 0] == 17 else 0)
    fixed_lit = np.full(288, 8, np.int64)  # RFC 1951 3.2.6: 8 bits, 9 for 144..255, 7 for 256..279
    fixed_lit[144:256] = 9
    fixed_lit[256:280] = 7
    fixed = 3 + extra
    for s in range(286):
        dynamic += freq[s] * lit_len[s]
        fixed += freq[s] * fixed_lit[s]
    for s in range(30):
        dynamic += dfreq[s] * dist_len[s]
        fixed += dfreq[s] * 5
    lit_codes = np.zeros(288, np.int64)
    dist_codes = np.zeros(30, np.int64)
    if fixed <= dynamic:
        lit_len = fixed_lit
        dist_len = np.full(30, 5, np.int64)
        pos, acc, nacc = _put(out, pos, acc, nacc, 3, 3)  # BFINAL 1, BTYPE 01
    else:
        pos, acc, nacc = _put(out, pos, acc, nacc, 5, 3)  # BFINAL 1, BTYPE 10
        pos, acc, nacc = _put(out, pos, acc, nacc, hlit - 257, 5)
        pos, acc, nacc = _put(out, pos, acc, nacc, hdist - 1, 5)
        pos, acc, nacc = _put(out, pos, acc, nacc, hclen - 4, 4)
        for j in range(hclen):
            pos, acc, nacc = _put(out, pos, acc, nacc, cl_len[order[j]], 3)
        cl_codes = np.zeros(19, np.int64)
        _codes(cl_len, cl_codes)
        for j in range(ncl):
            s = cl[j, 0]
            pos, acc, nacc = _put(out, pos, acc, nacc, cl_codes[s], cl_len[s])
            if s == 18:
                pos, acc, nacc = _put(out, pos, acc, nacc, cl[j, 1], 7)
            elif s == 17:
                pos, acc, nacc = _put(out, pos, acc, nacc, cl[j, 1], 3)
    _codes(lit_len, lit_codes)
    _codes(dist_len, dist_codes)
    # every token's bits as one value: a literal's code, or a match's length code, its extra bits,
    # distance code and extra bits one after another (at most 15 + 5 + 15 + 13 bits), so that each
    # token is one `_put`
    bits = np.empty(768, np.int64)
    nbits = np.empty(768, np.int64)
    for v in range(256):
        bits[v] = lit_codes[v]
        nbits[v] = lit_len[v]
    for v in range(256, 768):
        n, up = 3 + ((v - 256) >> 1), (v - 256) & 1
        sym, d = lengths_table[n, 0], dist[up, 0]
        value, count = lit_codes[sym], lit_len[sym]
        value |= lengths_table[n, 1] << count
        count += lengths_table[n, 2]
        value |= dist_codes[d] << count
        count += dist_len[d]
        value |= dist[up, 1] << count
        bits[v] = value
        nbits[v] = count + dist[up, 2]
    for j in range(ntok):
        v = tok[j]
        pos, acc, nacc = _put(out, pos, acc, nacc, bits[v], nbits[v])
    return _put(out, pos, acc, nacc, lit_codes[256], lit_len[256])


@njit(cache=True, inline="always")
def end_stream(tok, ntok, lengths_table, dist, order, out, a, b):
    """The zlib stream of the tokens (header, block, Adler-32 of the sums (a, b)) into `out`; its length."""
    out[0] = 0x78  # deflate, 32 KiB window
    out[1] = 0x01  # no dictionary, fastest level; (0x78 << 8 | 0x01) % 31 == 0
    pos, acc, nacc = _write_block(tok, ntok, lengths_table, dist, order, out, 2, np.int64(0), 0)
    if nacc > 0:
        out[pos] = acc & 255
        pos += 1
    adler = b << 16 | a
    for shift in (24, 16, 8, 0):
        out[pos] = (adler >> shift) & 255
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def deflate_rows(data, repeats, lengths_table, dist, order, tok, out, end):
    """The zlib stream of scanlines `data` (uint8 [rows, width], width at most MAX_DISTANCE) into `out`
    (at least `bound(data.size)` bytes; `tok`: int32, at least data.size + 1); end[0] = its length.
    repeats[r]: scanline r is scanline r - 1's bytes (repeats[0] False); `lengths_table`: LENGTHS,
    `dist`: distances(width), `order`: CL_ORDER."""
    rows, width = data.shape[0], data.shape[1]
    a, b = np.int64(1), np.int64(0)  # Adler-32's sums
    s, t = np.int64(0), np.int64(0)  # the last scanline's terms
    ntok = 0
    r = 0
    while r < rows:
        same = 0
        while r + same < rows and repeats[r + same]:
            same += 1
        if same:
            ntok = repeat_rows(tok, ntok, same, data[r - 1])
            a, b = add_rows(a, b, same, width, s, t)
            r += same
            continue
        s, t = row_sums(data[r])
        a, b = add_rows(a, b, 1, width, s, t)
        ntok = encode_row(tok, ntok, data[r], data[max(r - 1, 0)], r > 0)
        r += 1
    end[0] = end_stream(tok, ntok, lengths_table, dist, order, out, a, b)


__all__ = ["CL_ORDER", "LENGTHS", "MAX_DISTANCE", "add_rows", "bound", "deflate_rows", "distances", "encode_row",
           "end_stream", "repeat_rows", "row_sums"]
