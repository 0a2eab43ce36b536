"""Encoding, dihedral transforms and the numba kernels against the numpy references (spec 1.3, 1.5, 10)."""

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.arc.kernels import puzzle_hashes
from arc_data.compact import encode_examples


def _spec_transform(x: np.ndarray, tid: int) -> np.ndarray:
    """The table of spec 1.3, written with explicit index formulas."""
    h, w = x.shape
    if tid in (0, 2, 4, 5):
        out = np.empty((h, w), x.dtype)
    else:
        out = np.empty((w, h), x.dtype)
    src = {
        0: lambda i, j: (i, j),
        1: lambda i, j: (j, w - 1 - i),
        2: lambda i, j: (h - 1 - i, w - 1 - j),
        3: lambda i, j: (h - 1 - j, i),
        4: lambda i, j: (i, w - 1 - j),
        5: lambda i, j: (h - 1 - i, j),
        6: lambda i, j: (j, i),
        7: lambda i, j: (h - 1 - j, w - 1 - i),
    }[tid]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x[src(i, j)]
    return out


def test_encoding_3x4_at_origin():
    g = np.arange(12, dtype=np.uint8).reshape(3, 4) % 10
    c = fmt.encode_grid(g).reshape(30, 30)
    assert (c[:3, :4] == g + 2).all()
    assert (c[3, :4] == fmt.EOS).all() and (c[:3, 4] == fmt.EOS).all()
    assert c[3, 4] == fmt.PAD
    rest = c.copy()
    rest[:4, :5] = 0
    assert (rest == 0).all()


def test_encoding_full_side_has_no_eos_on_that_side():
    wide = np.ones((2, 30), np.uint8)
    c = fmt.encode_grid(wide).reshape(30, 30)
    assert (c[2, :] == fmt.EOS).all() and not (c[:2] == fmt.EOS).any()
    tall = np.ones((30, 3), np.uint8)
    c = fmt.encode_grid(tall).reshape(30, 30)
    assert (c[:, 3] == fmt.EOS).all() and (c[:, :3] == 3).all() and (c == fmt.EOS).sum() == 30
    full = np.full((30, 30), 9, np.uint8)
    assert (fmt.encode_grid(full) == 11).all()


@pytest.mark.parametrize("tid", range(8))
def test_dihedral_table_and_inverse(tid):
    x = np.random.default_rng(tid).integers(0, 10, size=(3, 5)).astype(np.uint8)
    y = fmt.dihedral(x, tid)
    assert np.array_equal(y, _spec_transform(x, tid))
    assert np.array_equal(fmt.inverse_dihedral(y, tid), x)
    assert fmt.DIHEDRAL_INVERSE.tolist() == [0, 3, 2, 1, 4, 5, 6, 7]


def test_augment_and_invert_roundtrip():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 10, size=(4, 7)).astype(np.uint8)
    for tid in range(8):
        cmap = np.concatenate([[0], rng.permutation(9) + 1]).astype(np.uint8)
        y = fmt.augment_grid(x, tid, cmap)
        assert np.array_equal(fmt.invert_augmentation(y, tid, cmap), x)
        assert ((x == 0) == (fmt.inverse_dihedral(y, tid) == 0)).all()  # black stays black


def _pack(grids: list[np.ndarray]):
    cells = np.concatenate([g.ravel() for g in grids]).astype(np.uint8)
    shape = np.array([g.shape for g in grids], np.int64)
    off = np.concatenate([[0], np.cumsum(shape[:, 0] * shape[:, 1])[:-1]]).astype(np.int64)
    return cells, off, shape


def test_encode_kernels_equal_reference():
    rng = np.random.default_rng(2)
    grids = []
    for _ in range(12):
        h, w = rng.integers(1, 31, size=2)
        grids.append(rng.integers(0, 10, size=(h, w)).astype(np.uint8))
    grids.append(np.full((30, 30), 3, np.uint8))
    grids.append(np.full((30, 30), 4, np.uint8))
    cells, off, shape = _pack(grids)
    pair_grids = np.arange(len(grids), dtype=np.int64).reshape(-1, 2)
    n_pairs = len(pair_grids)
    n_ids = 9
    dihedral = np.array([0, 1, 2, 3, 4, 5, 6, 7, 1], np.uint8)
    colour_map = np.stack([np.concatenate([[0], rng.permutation(9) + 1]) for _ in range(n_ids)]).astype(np.uint8)
    ex_pair = rng.integers(0, n_pairs, size=40).astype(np.int64)
    ex_pid = rng.integers(0, n_ids, size=40).astype(np.int64)
    pads = np.zeros((40, 2), np.uint8)
    for e in range(40):
        a, b = grids[pair_grids[ex_pair[e], 0]], grids[pair_grids[ex_pair[e], 1]]
        tid = dihedral[ex_pid[e]]
        h = max(fmt.dihedral(a, tid).shape[0], fmt.dihedral(b, tid).shape[0])
        w = max(fmt.dihedral(a, tid).shape[1], fmt.dihedral(b, tid).shape[1])
        pads[e] = rng.integers(0, 31 - h), rng.integers(0, 31 - w)
    oi = np.full((40, 900), 77, np.uint8)  # garbage: the kernel must clear rows itself
    ol = np.full((40, 900), 77, np.uint8)
    encode_examples(cells, off, shape, pair_grids, ex_pair, ex_pid, dihedral, colour_map, pads, oi, ol)
    for e in range(40):
        tid, cmap = int(dihedral[ex_pid[e]]), colour_map[ex_pid[e]]
        gi, go = pair_grids[ex_pair[e]]
        ref_in = fmt.encode_grid(fmt.augment_grid(grids[gi], tid, cmap), *pads[e])
        ref_out = fmt.encode_grid(fmt.augment_grid(grids[go], tid, cmap), *pads[e])
        assert np.array_equal(oi[e], ref_in) and np.array_equal(ol[e], ref_out)


def _ref_puzzle_key(pairs, tid, cmap):
    """Reference for the puzzle hash: the sorted multiset of (input, output) contents."""
    return tuple(sorted(
        tuple((g.shape, g.tobytes()) for g in (fmt.augment_grid(a, tid, cmap), fmt.augment_grid(b, tid, cmap)))
        for a, b in pairs
    ))


def test_puzzle_hash_matches_content_equality_and_is_order_invariant():
    rng = np.random.default_rng(3)
    sym = np.array([[1, 0, 1], [0, 1, 0], [1, 0, 1]], np.uint8)  # invariant under all 8 transforms
    pairs = [(sym, sym * 2), (rng.integers(0, 3, (2, 3)).astype(np.uint8), np.zeros((1, 1), np.uint8))]
    flat = [g for p in pairs for g in p]
    cells, off, shape = _pack(flat)
    pg = np.arange(len(flat), dtype=np.int64).reshape(-1, 2)
    rev_flat = [g for p in pairs[::-1] for g in p]
    rcells, roff, rshape = _pack(rev_flat)
    k = 64
    tids = rng.integers(0, 8, size=k).astype(np.uint8)
    cmaps = np.stack([np.concatenate([[0], rng.permutation(9) + 1]) for _ in range(k)]).astype(np.uint8)
    cmaps[: k // 2, 3:] = np.arange(3, 10)  # many share the used colours -> real duplicates
    h = puzzle_hashes(cells, off, shape, pg, 0, 2, tids, cmaps)
    h_rev = puzzle_hashes(rcells, roff, rshape, pg, 0, 2, tids, cmaps)
    assert np.array_equal(h, h_rev)  # example order does not matter
    keys = [_ref_puzzle_key(pairs, int(t), c) for t, c in zip(tids, cmaps)]
    for i in range(k):
        for j in range(i + 1, k):
            assert (keys[i] == keys[j]) == bool((h[i] == h[j]).all())
    assert len(set(keys)) < k  # the test did exercise duplicates


def test_crop_of_encoded_grid():
    g = np.random.default_rng(4).integers(0, 10, size=(5, 7)).astype(np.uint8)
    assert np.array_equal(fmt.crop(fmt.encode_grid(g)), g)
