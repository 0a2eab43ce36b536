"""The compact layout's encoder (`materialize=false`, arc_data.format): a pair drawn onto the 30x30
canvas under its puzzle's augmentation (`encode_examples`, numba, serial; the pairs come from
`arc_data.dataset.resolve_examples`). The reader (arc_data.dataset) and the ARC builder
(arc_data.arc.build, which materialises with it) share both, so their bytes agree. Imported lazily,
so that a reader or builder that does not encode pays no numba start-up.

A dihedral transform tid maps an H x W grid to `out[i, j] = in.flat[base + i*si + j*sj]` with the
output shape and (base, si, sj) from `dihedral_walk`; this equals `format.dihedral` (tested).
Every kernel has `cache=True`, runs on its caller's thread (safe in forked DataLoader workers) and
is called with one fixed set of dtypes, so each compiles once per machine.
"""

from __future__ import annotations

from arc_data.format import COLOUR_OFFSET, EOS, MAX_SIDE
from arc_data.jit import njit


@njit(inline="always", cache=True)
def dihedral_walk(tid, h, w):
    """(out_h, out_w, base, si, sj) such that out[i, j] = in.flat[base + i*si + j*sj]."""
    if tid == 1:  # rot90 CCW: out[i,j] = in[j, W-1-i]
        return w, h, w - 1, -1, w
    if tid == 2:  # rot180
        return h, w, h * w - 1, -w, -1
    if tid == 3:  # rot270 CCW: out[i,j] = in[H-1-j, i]
        return w, h, (h - 1) * w, 1, -w
    if tid == 4:  # fliplr
        return h, w, w - 1, w, -1
    if tid == 5:  # flipud
        return h, w, (h - 1) * w, -w, 1
    if tid == 6:  # transpose
        return w, h, 0, 1, w
    if tid == 7:  # anti-diagonal: out[i,j] = in[H-1-j, W-1-i]
        return w, h, h * w - 1, -1, -w
    return h, w, 0, w, 1


@njit(inline="always", cache=True)
def _draw(cells, off, h, w, tid, cmap, row, pr, pc):
    """Write one recoloured, transformed grid into the 900-row at (pr, pc), with its EOS marks."""
    oh, ow, base, si, sj = dihedral_walk(tid, h, w)
    for i in range(oh):
        src = off + base + i * si
        dst = (pr + i) * MAX_SIDE + pc
        for j in range(ow):
            row[dst + j] = cmap[cells[src]] + COLOUR_OFFSET
            src += sj
        if pc + ow < MAX_SIDE:
            row[dst + ow] = EOS
    if pr + oh < MAX_SIDE:
        dst = (pr + oh) * MAX_SIDE + pc
        for j in range(ow):
            row[dst + j] = EOS


@njit(cache=True, nogil=True)  # the builder's writer threads and table writer run meanwhile
def encode_examples(cells, goff, gshape, pair_grids, ex_pair, ex_pid, dihedral, colour_map, pads, out_in, out_lab):
    """Encode examples: pair ex_pair[e] under puzzle ex_pid[e]'s augmentation at pads[e] -> rows e."""
    for e in range(ex_pair.shape[0]):
        pair = ex_pair[e]
        pid = ex_pid[e]
        tid = dihedral[pid]
        cmap = colour_map[pid]
        pr = pads[e, 0]
        pc = pads[e, 1]
        out_in[e, :] = 0
        out_lab[e, :] = 0
        gi = pair_grids[pair, 0]
        go = pair_grids[pair, 1]
        _draw(cells, goff[gi], gshape[gi, 0], gshape[gi, 1], tid, cmap, out_in[e], pr, pc)
        _draw(cells, goff[go], gshape[go, 0], gshape[go, 1], tid, cmap, out_lab[e], pr, pc)
