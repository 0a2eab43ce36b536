"""Crop rule, inverse augmentation and hashing: numba kernel vs the numpy reference."""

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.grid_key import grid_key
from arc_data.originals import inverse_colour_table
from eval.arc.decode import decode_grid, decode_keys, grid_of_shape
from tests.vote_helpers import random_grid
from tests.vote_synthetic import random_colour_map

IDENTITY = np.arange(10, dtype=np.uint8)


def kernel(tokens: np.ndarray, tids, maps) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.atleast_2d(tokens)
    n = len(tokens)
    return decode_keys(tokens, np.arange(n), np.asarray(tids, np.uint8), inverse_colour_table(np.asarray(maps)))


def canvas(rows: dict[int, list[int]]) -> np.ndarray:
    """30x30 tokens, all PAD except the given rows (token lists from column 0)."""
    c = np.zeros((fmt.MAX_SIDE, fmt.MAX_SIDE), np.uint8)
    for r, toks in rows.items():
        c[r, : len(toks)] = toks
    return c.reshape(-1)


@pytest.mark.parametrize("tid", range(8))
def test_invert_augment_roundtrip_all_transforms(tid):
    rng = np.random.default_rng(tid)
    for _ in range(6):
        g = random_grid(rng, 1, 31)
        cm = random_colour_map(rng)
        aug = fmt.augment_grid(g, tid, cm)
        assert np.array_equal(fmt.invert_augmentation(aug, tid, cm), g)
        tokens = fmt.encode_grid(aug)  # test split: never translated, top-left
        assert np.array_equal(decode_grid(tokens, tid, cm), g)
        keys, shapes = kernel(tokens, [tid], cm[None])
        assert tuple(int(k) for k in keys[0]) == grid_key(g)
        assert tuple(shapes[0]) == g.shape
        assert np.array_equal(grid_of_shape(tokens, tid, inverse_colour_table(cm[None])[0], g.shape), g)


def test_translation_needs_top_left():
    """The crop assumes (0, 0): a translated canvas (train split only) decodes to no grid, and
    the same canvas moved back to the corner decodes to the original."""
    rng = np.random.default_rng(1)
    g = random_grid(rng, 2, 10)
    tid, cm = 5, random_colour_map(rng)
    aug = fmt.augment_grid(g, tid, cm)
    moved = fmt.encode_grid(aug, pad_r=3, pad_c=2).reshape(30, 30)
    assert decode_grid(moved.reshape(-1), tid, cm).shape == (0, 0)
    back = np.zeros_like(moved)
    back[:27, :28] = moved[3:, 2:]
    assert np.array_equal(decode_grid(back.reshape(-1), tid, cm), g)


C = fmt.COLOUR_OFFSET  # colour 0's token


@pytest.mark.parametrize(
    "rows, shape",
    [
        # max area wins: row widths 5, 2, 2, 2 -> areas 5, 4, 6, 8 -> 4x2
        ({0: [C] * 5 + [1], 1: [C, C, 0], 2: [C, C, 1], 3: [C, C, 1], 4: [1, 1]}, (4, 2)),
        # tie 1x4 vs 2x2 (area 4): the earliest (fewest rows) is kept
        ({0: [C] * 4 + [1], 1: [C, C, 1]}, (1, 4)),
        # a later, wider row cannot widen the rectangle (scan stops at the running width)
        ({0: [C, C, 1], 1: [C] * 5 + [1]}, (2, 2)),
        # no colour at (0, 0): no grid
        ({0: [1, C, C]}, (0, 0)),
        ({}, (0, 0)),
        # full 30x30 colour canvas: no EOS anywhere
        ({r: [C + 3] * 30 for r in range(30)}, (30, 30)),
    ],
)
def test_crop_rules(rows, shape):
    tokens = canvas(rows)
    assert fmt.crop(tokens).shape == shape
    _, shapes = kernel(tokens, [0], IDENTITY[None])
    assert tuple(shapes[0]) == shape


def test_empty_grid_key_matches_reference():
    keys, shapes = kernel(canvas({}), [3], IDENTITY[None])
    assert tuple(shapes[0]) == (0, 0)
    assert tuple(int(k) for k in keys[0]) == grid_key(np.zeros((0, 0), np.uint8))


def test_numba_matches_numpy_on_messy_rows():
    """Random token soup (mostly colours, some PAD/EOS), random transforms and colour maps."""
    rng = np.random.default_rng(7)
    n = 300
    tokens = np.where(rng.random((n, 900)) < 0.97, rng.integers(2, 12, (n, 900)), rng.integers(0, 2, (n, 900)))
    tokens = tokens.astype(np.uint8)
    tids = rng.integers(0, 8, n).astype(np.uint8)
    maps = np.stack([random_colour_map(rng) for _ in range(n)])
    keys, shapes = kernel(tokens, tids, maps)
    inv = inverse_colour_table(maps)
    for i in range(n):
        g = decode_grid(tokens[i], tids[i], maps[i])
        assert tuple(shapes[i]) == g.shape
        assert tuple(int(k) for k in keys[i]) == grid_key(g)
        assert np.array_equal(grid_of_shape(tokens[i], tids[i], inv[i], tuple(shapes[i])), g)


def test_decode_subset_of_rows():
    rng = np.random.default_rng(3)
    grids = [random_grid(rng) for _ in range(5)]
    tokens = np.stack([fmt.encode_grid(g) for g in grids])
    keys, _ = decode_keys(tokens, np.zeros(2, np.int64), np.zeros(1, np.uint8), IDENTITY[None], rows=np.array([4, 1]))
    assert [tuple(int(k) for k in row) for row in keys] == [grid_key(grids[4]), grid_key(grids[1])]


def test_key_separates_shape_and_content():
    a = np.array([[1, 2]], np.uint8)
    assert grid_key(a) != grid_key(a.T)
    assert grid_key(a) != grid_key(np.array([[2, 1]], np.uint8))
    assert grid_key(a) == grid_key(a.copy())
