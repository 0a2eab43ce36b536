"""Numba kernels of the ARC builder's hot path (HRM spec 1.9): transform + hash trials. The
encoder of examples (`encode_examples`) is the compact layout's, in arc_data.compact.

Grids live in one flat uint8 buffer `cells`; grid g is `cells[off[g] : off[g] + h*w]` (row-major)
with `shape[g] = (h, w)`. A pair is `(input grid, output grid)`.

A dihedral transform tid maps an H x W grid to `out[i, j] = in.flat[base + i*si + j*sj]` with the
output shape and (base, si, sj) from `dihedral_walk`; this equals `format.dihedral` (tested).

Hash: two independent 64-bit lanes, so a puzzle hash is 128 bits: per grid a weighted sum of
its cells (see `_W`), finished with a splitmix64 mixer together with the shape; per pair the two
grid hashes mixed; per puzzle the pair hashes sorted, then mixed in turn, so it does not depend on
example order (spec 1.3). It is not cryptographic; it only has to tell augmented puzzles apart (a
false "duplicate" needs a collision in both lanes).

Threading: none inside a kernel. Every kernel runs on its caller's thread (numba's thread pool
never starts, so DataLoader workers forked from a process are safe); the builder overlaps encoding
with its two writer threads instead, which on two cores was as fast as encoding on numba's pool,
and tries one piece of the tasks on worker threads while the next piece's colour permutations are
drawn (`plan.augment_in_chunks`): `augment_tasks` and `_shuffle_rows` run without the GIL.
Every kernel has `cache=True` and is called with one fixed set of dtypes (see the wrappers), so
each compiles once per machine.
"""

from __future__ import annotations

import numpy as np

from arc_data.compact import dihedral_walk
from arc_data.format import MAX_SIDE
from arc_data.jit import njit

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_G1 = np.uint64(0x9E3779B97F4A7C15)
_G2 = np.uint64(0xD6E8FEB86659FD93)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@njit(inline="always", cache=True)
def _mix(x):
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def _splitmix_table(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Fixed pseudo-random uint64 constants (splitmix64 of a counter); numpy wraps uint64 arrays."""
    x = np.arange(np.prod(shape), dtype=np.uint64) * _G1 + np.uint64(seed)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return (x ^ (x >> _S31)).reshape(shape)


# Grid hash, per lane: H = sum over the cells of the transformed, recoloured grid of
# W[position] * F[colour] (mod 2^64), then mixed with the shape. Grouped by original colour,
# H = sum_c F[cmap[c]] * S[c], where S[c] sums W over the positions the transform sends the
# colour-c cells to. S depends on the transform only, so a task's S for all 8 transforms is one
# walk over its cells each (`_colour_sums`), and a trial's grid hash is 10 multiply-adds per lane.
_W = _splitmix_table((2, MAX_SIDE * MAX_SIDE), 1)
_F = _splitmix_table((2, 10), 2)


@njit(cache=True)
def _colour_sums(cells, goff, gshape, pair_grids, p_lo, p_hi):
    """S for pairs [p_lo, p_hi): uint64 [8 tids, pairs, 2 sides, 2 lanes, 10 colours]."""
    sums = np.zeros((8, p_hi - p_lo, 2, 2, 10), dtype=np.uint64)
    for tid in range(8):
        for k in range(p_hi - p_lo):
            for side in range(2):
                g = pair_grids[p_lo + k, side]
                oh, ow, base, si, sj = dihedral_walk(tid, gshape[g, 0], gshape[g, 1])
                s = sums[tid, k, side]
                pos = 0
                for i in range(oh):
                    src = goff[g] + base + i * si
                    for _ in range(ow):
                        c = cells[src]
                        s[0, c] += _W[0, pos]
                        s[1, c] += _W[1, pos]
                        src += sj
                        pos += 1
    return sums


@njit(inline="always", cache=True)
def _grid_hash(s, h, w, tid, cmap):
    """128-bit hash (two uint64) of one grid (h x w before the transform) under (tid, cmap), from its S."""
    oh, ow, _, _, _ = dihedral_walk(tid, h, w)
    a = np.uint64(0)
    b = np.uint64(0)
    for c in range(10):
        a += _F[0, cmap[c]] * s[0, c]
        b += _F[1, cmap[c]] * s[1, c]
    shape = np.uint64(oh * 64 + ow)
    return _mix(a ^ _mix(shape ^ _G1)), _mix(b ^ _mix(shape ^ _G2))


@njit(cache=True)
def _puzzle_hash(sums, gshape, pair_grids, p_lo, p_hi, tid, cmap, ha, hb):
    """Order-invariant 128-bit hash of pairs [p_lo, p_hi) under (tid, cmap); ha/hb are scratch."""
    n = p_hi - p_lo
    for k in range(n):
        gi = pair_grids[p_lo + k, 0]
        go = pair_grids[p_lo + k, 1]
        ia, ib = _grid_hash(sums[tid, k, 0], gshape[gi, 0], gshape[gi, 1], tid, cmap)
        oa, ob = _grid_hash(sums[tid, k, 1], gshape[go, 0], gshape[go, 1], tid, cmap)
        ha[k] = _mix(ia ^ _mix(oa + _G1))
        hb[k] = _mix(ib ^ _mix(ob + _G2))
    # insertion sort by (ha, hb): a handful of pairs per task
    for k in range(1, n):
        xa, xb = ha[k], hb[k]
        m = k - 1
        while m >= 0 and (ha[m] > xa or (ha[m] == xa and hb[m] > xb)):
            ha[m + 1] = ha[m]
            hb[m + 1] = hb[m]
            m -= 1
        ha[m + 1] = xa
        hb[m + 1] = xb
    a = _mix(np.uint64(n) ^ _G2)
    b = _mix(np.uint64(n) ^ _G1)
    for k in range(n):
        a = _mix(a ^ ha[k])
        b = _mix((b + hb[k]) * _G2)
    return a, b


@njit(cache=True)
def puzzle_hashes(cells, goff, gshape, pair_grids, p_lo, p_hi, tids, cmaps):
    """Puzzle hash of pairs [p_lo, p_hi) under each (tids[k], cmaps[k]) -> uint64 [K, 2]. For tests."""
    out = np.empty((tids.shape[0], 2), dtype=np.uint64)
    sums = _colour_sums(cells, goff, gshape, pair_grids, p_lo, p_hi)
    ha = np.empty(p_hi - p_lo, dtype=np.uint64)
    hb = np.empty(p_hi - p_lo, dtype=np.uint64)
    for k in range(tids.shape[0]):
        tid = np.int64(tids[k])  # the builder's type, so the compiled helper is shared
        a, b = _puzzle_hash(sums, gshape, pair_grids, p_lo, p_hi, tid, cmaps[k], ha, hb)
        out[k, 0] = a
        out[k, 1] = b
    return out


@njit(inline="always", cache=True)
def _insert(tab_a, tab_b, used, mask, a, b):
    """Insert (a, b) into an open-addressing set; False if it was already there."""
    slot = np.int64(a & np.uint64(mask))
    while used[slot]:
        if tab_a[slot] == a and tab_b[slot] == b:
            return False
        slot = (slot + 1) & mask
    used[slot] = True
    tab_a[slot] = a
    tab_b[slot] = b
    return True


@njit(cache=True)
def _augment_task(cells, goff, gshape, pair_grids, p_lo, p_hi, trial_tid, trial_perm, num_aug, accepted):
    """Run the trials of one task; write accepted trial indices; return (num accepted, trials used).

    A trial is accepted when its whole-task hash is new (the original's hash is seen first). Trials
    whose (tid, map restricted to the task's colours) was already tried give the same content, so
    they are rejected without hashing: this saves most of the work of short groups, which burn all
    5*num_aug trials on a few hundred distinct candidates.
    """
    n_trials = trial_tid.shape[0]
    cap = 1
    while cap < 2 * (n_trials + 1):
        cap *= 2
    mask = cap - 1
    tab_a = np.zeros(cap, dtype=np.uint64)
    tab_b = np.zeros(cap, dtype=np.uint64)
    used = np.zeros(cap, dtype=np.bool_)
    key_a = np.zeros(cap, dtype=np.uint64)
    key_b = np.zeros(cap, dtype=np.uint64)
    key_used = np.zeros(cap, dtype=np.bool_)
    present = np.zeros(10, dtype=np.bool_)
    for k in range(p_lo, p_hi):
        for side in range(2):
            g = pair_grids[k, side]
            for c in range(goff[g], goff[g] + gshape[g, 0] * gshape[g, 1]):
                present[cells[c]] = True
    sums = _colour_sums(cells, goff, gshape, pair_grids, p_lo, p_hi)
    ha = np.empty(p_hi - p_lo, dtype=np.uint64)
    hb = np.empty(p_hi - p_lo, dtype=np.uint64)
    cmap = np.arange(10).astype(np.uint8)
    n_acc = 0
    t = -1  # -1 = the original (identity), which seeds the seen set
    while t < n_trials and n_acc < num_aug:
        tid = 0
        if t >= 0:
            tid = trial_tid[t]
            for c in range(9):
                cmap[c + 1] = trial_perm[t, c]
        key = np.uint64(tid)
        for c in range(1, 10):
            if present[c]:
                key = (key << np.uint64(4)) | np.uint64(cmap[c])
        if _insert(key_a, key_b, key_used, mask, _mix(key), key):
            a, b = _puzzle_hash(sums, gshape, pair_grids, p_lo, p_hi, tid, cmap, ha, hb)
            if _insert(tab_a, tab_b, used, mask, a, b) and t >= 0:
                accepted[n_acc] = t
                n_acc += 1
        t += 1
    return n_acc, t


@njit(cache=True, nogil=True)
def augment_tasks(cells, goff, gshape, pair_grids, task_pairs, trial_tid, trial_perm, num_aug):
    """Per task t (pairs task_pairs[t]..task_pairs[t+1]): accepted trial ids [T, num_aug], counts, trials."""
    n_tasks = task_pairs.shape[0] - 1
    accepted = np.full((n_tasks, num_aug), -1, dtype=np.int32)
    n_acc = np.zeros(n_tasks, dtype=np.int32)
    n_used = np.zeros(n_tasks, dtype=np.int32)
    for t in range(n_tasks):
        a, u = _augment_task(cells, goff, gshape, pair_grids, task_pairs[t], task_pairs[t + 1],
                             trial_tid[t], trial_perm[t], num_aug, accepted[t])
        n_acc[t] = a
        n_used[t] = u
    return accepted, n_acc, n_used


# ---------------------------------------------------------------------------------------------
# `Generator.permuted` of colour rows, drawn from the same stream 10x faster


@njit(cache=True, nogil=True)
def _shuffle_rows(raw, has_half, half, out):
    """numpy's Fisher-Yates of each row of `out` (in place, row after row), as `Generator.permuted`
    does it: for i = n-1 .. 1, j = random_interval(i) (the masked rejection of `next_uint32`), swap.
    A PCG64 `next_uint32` is the low half of a raw draw, then its high half (kept in the bit
    generator as has_uint32 / uinteger). raw: uint64 draws. Returns (raw draws used, has_half,
    half) after the last row, or (-1, 0, 0) when `raw` ran out."""
    pos = 0
    n = out.shape[1]
    for r in range(out.shape[0]):
        for i in range(n - 1, 0, -1):
            mask = np.uint64(i)
            for s in (1, 2, 4, 8, 16, 32):
                mask |= mask >> np.uint64(s)
            while True:
                if has_half:
                    v = half
                    has_half = False
                else:
                    if pos == raw.shape[0]:
                        return -1, False, np.uint64(0)
                    x = raw[pos]
                    pos += 1
                    v = x & np.uint64(0xFFFFFFFF)
                    half = x >> np.uint64(32)
                    has_half = True
                v &= mask
                if v <= np.uint64(i):
                    break
            j = np.int64(v)
            t = out[r, i]
            out[r, i] = out[r, j]
            out[r, j] = t
    return pos, has_half, half


SHUFFLE_ROWS = 1 << 18  # rows shuffled per batch of raw draws (1.4M draws, 11.5 MB)


def permuted_colours(rng: np.random.Generator, shape: tuple[int, ...], draws_per_row: float = 5.5,
                     rows_per_batch: int = SHUFFLE_ROWS) -> np.ndarray:
    """`rng.permuted(np.broadcast_to(np.arange(1, 10, dtype=np.uint8), (*shape, 9)), axis=-1)`:
    the same values, and `rng` left in the same state (tested), for a PCG64 generator; about twice
    as fast (numpy shuffles the rows one call each). Rows go in batches: each batch's raw draws
    come from `random_raw` on the state just past the draws used so far (about 5.1 a row are used;
    `draws_per_row` are drawn, twice as many if they run out), and at the end the state is set to
    just past the last draw used, with the half draw numpy keeps. Other bit generators get numpy's call."""
    base = np.broadcast_to(np.arange(1, 10, dtype=np.uint8), (*shape, 9))
    bg = rng.bit_generator
    if type(bg) is not np.random.PCG64:
        return np.ascontiguousarray(rng.permuted(base, axis=-1))
    out = base.reshape(-1, 9).copy()  # a fresh writable array (ascontiguousarray may give the view)
    start = bg.state
    used, has_half, half = 0, bool(start["has_uint32"]), np.uint64(start["uinteger"])
    for lo in range(0, out.shape[0], rows_per_batch):
        rows = out[lo:lo + rows_per_batch]
        budget = int(draws_per_row * rows.shape[0]) + 64
        while True:
            bg.state = start
            bg.advance(used)
            k, h, x = _shuffle_rows(bg.random_raw(budget), has_half, half, rows)
            if k >= 0:
                break
            rows[:] = base.reshape(-1, 9)[:rows.shape[0]]  # ran out part way: again with twice the draws
            budget *= 2
        used, has_half, half = used + k, bool(h), np.uint64(x)  # the types of the first call
    bg.state = start
    bg.advance(used)
    state = bg.state
    state["has_uint32"], state["uinteger"] = int(has_half), int(half)
    bg.state = state
    return out.reshape(*shape, 9)


# ---------------------------------------------------------------------------------------------
# translation bounds of every example


@njit(cache=True)
def example_sides(puzzle_identifiers, puzzle_indices, group_indices, group_pairs, group_pair_indices,
                  gshape, pair_grids, dihedral, transposing):
    """Per example of a split (in order): the height and width, after its puzzle's dihedral
    transform (`transposing[tid]`: it makes H x W grids W x H), of the larger of its two grids ->
    (h int64 [E], w int64 [E]); the examples are resolved as `dataset.resolve_examples` does (the
    k-th example of a puzzle is its group's k-th pair)."""
    e = puzzle_indices[-1]
    h = np.empty(e, dtype=np.int64)
    w = np.empty(e, dtype=np.int64)
    for g in range(group_indices.shape[0] - 1):
        for p in range(group_indices[g], group_indices[g + 1]):
            swap = transposing[dihedral[puzzle_identifiers[p]]]
            for x in range(puzzle_indices[p], puzzle_indices[p + 1]):
                pair = group_pairs[group_pair_indices[g] + x - puzzle_indices[p]]
                gi = pair_grids[pair, 0]
                go = pair_grids[pair, 1]
                a = max(gshape[gi, 0], gshape[go, 0])
                b = max(gshape[gi, 1], gshape[go, 1])
                h[x] = b if swap else a
                w[x] = a if swap else b
    return h, w
