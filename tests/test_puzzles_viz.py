"""Sudoku and Maze pictures: the right size, and a wrong prediction changes the pixels of its cell."""

import numpy as np
import pytest

from arc_data import maze, sudoku
from arc_data.maze.viz import render_maze
from arc_data.puzzles.viz import render_puzzle, save_png
from arc_data.sudoku.viz import render_sudoku


def _sudoku_tokens(n: int, seed: int = 0):
    puzzle, solution, _, _ = sudoku.generate(np.random.default_rng(seed), n)
    return puzzle.astype(np.uint8) + 1, solution.astype(np.uint8) + 1


def _maze_tokens(n: int, seed: int = 0):
    q, a, _ = maze.generate(np.random.default_rng(seed), n, 5)
    lut = np.zeros(256, np.uint8)
    lut[np.frombuffer(maze.CHARSET.encode(), np.uint8)] = np.arange(1, 6)
    return lut[q], lut[a]


@pytest.mark.parametrize("n", [4, 6, 9])
def test_sudoku_picture_size_and_wrong_cell(tmp_path, n):
    x, y = _sudoku_tokens(n, n)
    cell = 20
    plain = np.asarray(render_sudoku(x, y, cell=cell))
    assert plain.shape == (n * cell + 1, n * cell + 1, 3)
    right = np.asarray(render_sudoku(x, y, prediction=y, cell=cell))
    assert np.array_equal(right, plain)  # a right prediction shows the solution
    c = int(np.flatnonzero(x == 1)[0])  # a blank cell
    wrong_pred = y.copy()
    wrong_pred[c] = 2 + (int(y[c]) - 1) % n  # another digit
    wrong = np.asarray(render_sudoku(x, y, prediction=wrong_pred, cell=cell))
    r, k = divmod(c, n)
    changed = np.argwhere((wrong != right).any(axis=2))
    assert len(changed) > 20
    assert (changed[:, 0] // cell == r).all() and (changed[:, 1] // cell == k).all()  # only inside that cell
    assert tuple(wrong[r * cell + 2, k * cell + 2]) == (255, 205, 205)  # red tint
    path = save_png(render_sudoku(x, y), tmp_path / "s" / "board.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_maze_picture_size_and_wrong_path():
    x, y = _maze_tokens(15, 1)
    img = np.asarray(render_maze(x, y, cell=6))
    assert img.shape == (90, 90, 3)
    good = np.asarray(render_maze(x, y, prediction=y, cell=6))
    bad_pred = y.copy()
    off_path = int(np.flatnonzero(x == 2)[np.isin(np.flatnonzero(x == 2), np.flatnonzero(y == 5), invert=True)][0])
    bad_pred[off_path] = 5
    bad = np.asarray(render_maze(x, y, prediction=bad_pred, cell=6))
    r, k = divmod(off_path, 15)
    diff = np.argwhere((bad != good).any(axis=2))
    assert len(diff) and (diff[:, 0] // 6 == r).all() and (diff[:, 1] // 6 == k).all()
    assert tuple(bad[r * 6 + 3, k * 6 + 3]) == (230, 30, 30)
    assert not np.array_equal(good, img)  # the predicted path is drawn over the truth
    assert render_puzzle("maze", x, y).size == (150, 150)
    with pytest.raises(ValueError, match="no renderer"):
        render_puzzle("arc", x, y)


def test_sudoku_changed_given_is_drawn_wrong():
    x, y = _sudoku_tokens(4, 3)
    c = int(np.flatnonzero(x != 1)[0])  # a given
    pred = y.copy()
    pred[c] = 2 + (int(y[c]) - 1) % 4
    img = np.asarray(render_sudoku(x, y, prediction=pred, cell=20))
    r, k = divmod(c, 4)
    assert tuple(img[r * 20 + 2, k * 20 + 2]) == (255, 205, 205)  # the model changed a given: red tint
    assert not np.array_equal(img, np.asarray(render_sudoku(x, y, prediction=y, cell=20)))
