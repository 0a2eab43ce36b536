"""The canvas view (data/canvas.py): grids from encoded rows, placement (border, mask, ignored
cells), the view's ranges, decoding a canvas back to its grid, and batches from a dataset split.
(Equality with the official loader's canvases: benchmarks/compare_reference_loopvit.py.)"""

import numpy as np
import pytest

from arc_data.format import encode_grid
from hrm_deeploop.data.canvas import BACKGROUND, BORDER, View, canvas_batch, decode, draw_view, grid_of, place
from hrm_deeploop.errors import UserError
from tests.hrm_helpers import make_dataset, stand_in_open_split


def test_grid_of_finds_the_grid_wherever_it_was_translated():
    g = np.arange(6, dtype=np.uint8).reshape(2, 3)
    for r, c in ((0, 0), (5, 7), (28, 27)):
        assert np.array_equal(grid_of(encode_grid(g, r, c)), g)
    assert grid_of(np.zeros(900, np.uint8)).shape == (0, 0)
    bad = encode_grid(g, 0, 0).reshape(30, 30)
    bad[0, 1] = 1  # an EOS inside the colour box
    with pytest.raises(ValueError, match="rectangle"):
        grid_of(bad)


def test_place_by_hand():
    inp = np.array([[1, 2]], np.uint8)
    out = np.array([[3], [4]], np.uint8)
    c, m, t = place(inp, out, 10, View(scale=2, x0=1, y0=3))
    assert (c[3:5, 1:5] == np.repeat(np.repeat(inp, 2, 0), 2, 1)).all() and (c[m == 0] == BACKGROUND).all()
    assert m.sum() == 8 and m[3:5, 1:5].all()
    assert (t[3:7, 1:3] == np.repeat(np.repeat(out, 2, 0), 2, 1)).all()
    assert (t[3:7, 3] == BORDER).all() and (t[7, 1:4] == BORDER).all()  # right column, bottom row + corner
    assert (t != BACKGROUND).sum() == 8 + 4 + 3
    _, _, empty = place(inp, None, 10, View(1, 1, 1))
    assert (empty == BACKGROUND).all()


def test_views_stay_on_the_canvas_and_cover_their_ranges():
    rng = np.random.default_rng(0)
    S, m = 16, 14
    scales, xs = set(), set()
    for _ in range(400):
        v = draw_view((3, 2), (4, 3), S, rng)  # largest side 4: scale 1..3
        scales.add(v.scale)
        xs.add(v.x0)
        assert 1 <= v.x0 and v.x0 + 3 * v.scale <= m and v.y0 + 4 * v.scale <= m
    assert scales == {1, 2, 3} and min(xs) == 1
    assert draw_view((3, 2), (4, 3), S, rng, resolution=False, translation=False, fix_scale=2) == View(2, 1, 1)
    with pytest.raises(ValueError, match="does not fit"):
        draw_view((15, 1), (1, 1), S, rng)


def test_decode_inverts_place():
    rng = np.random.default_rng(1)
    for _ in range(50):
        out = rng.integers(0, 10, size=rng.integers(1, 8, size=2)).astype(np.uint8)
        inp = rng.integers(0, 10, size=(2, 2)).astype(np.uint8)
        v = draw_view(inp.shape, out.shape, 32, rng)
        _, _, t = place(inp, out, 32, v)
        assert np.array_equal(decode(t, v), out)


def test_decode_majority_ties_go_to_the_lower_colour():
    pred = np.full((8, 8), BACKGROUND)
    pred[1:3, 1:3] = [[5, 2], [2, 5]]  # a 2 x 2 block, tied between 2 and 5
    pred[1:3, 3] = BORDER
    pred[3, 1:4] = BORDER
    assert decode(pred, View(2, 1, 1)).tolist() == [[2]]


def test_canvas_batch_from_a_split(tmp_path):
    data = make_dataset(tmp_path, num_tasks=2, side=3)
    split = stand_in_open_split(data, "train")
    idx = np.arange(4)
    b = canvas_batch(split, idx, np.array([1, 1, 2, 2]), 16, np.random.default_rng(0))
    assert b["canvas"].shape == (4, 16, 16) and b["task_ids"].tolist() == [1, 1, 2, 2]
    x, y = split.examples(idx)
    for k in range(4):
        v = View(*map(int, b["views"][k]))
        assert np.array_equal(decode(b["target"][k], v), grid_of(y[k]))
        assert b["mask"][k].sum() == 9 * v.scale ** 2
    again = canvas_batch(split, idx, np.array([1, 1, 2, 2]), 16, np.random.default_rng(0))
    assert all(np.array_equal(b[k], again[k]) for k in b)  # a function of the generator
    with pytest.raises(UserError, match="example 0 of the dataset.*model.image_size"):
        canvas_batch(split, idx, np.array([1, 1, 2, 2]), 4, np.random.default_rng(0))  # 3 x 3 grids, sides up to 2
