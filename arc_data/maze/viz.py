"""Pictures of mazes (numpy + PIL), for the evaluation report.

Inputs are token rows as stored in a built dataset and as a model predicts them: '#' 1, ' ' 2,
'S' 3, 'G' 4, 'o' 5. Walls dark, S green, G orange, the true path light blue; with a prediction,
each predicted path cell gets an inner square: dark blue where the truth has the path, red where it
does not.
"""

from __future__ import annotations

import numpy as np

from arc_data import format as fmt

WALL_RGB = (45, 45, 55)
OPEN_RGB = (250, 250, 250)
START_RGB = (40, 170, 70)
GOAL_RGB = (245, 160, 0)
PATH_RGB = (150, 200, 255)
PRED_OK = (0, 60, 170)
LEGEND = ("walls dark, S green, G orange, the true path light blue; a predicted path cell has an inner square, "
          "dark blue on the true path, red off it (a light blue cell without a square: path the prediction missed)")
PRED_BAD = (230, 30, 30)
WALL, OPEN, START, GOAL, PATH = 1, 2, 3, 4, 5  # tokens: arc_data.maze.CHARSET index + 1


def render_maze(inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None, cell: int = 10):
    """The maze, (n*cell) pixels square, with the true path and optionally a predicted one."""
    from PIL import Image  # lazy: PIL only for pictures

    x, y = np.asarray(inputs).reshape(-1), np.asarray(labels).reshape(-1)
    n = fmt.square_side(x.size)
    if not n:
        raise ValueError(f"a board row must hold n*n tokens, got {x.size}")
    rgb = np.empty((n * n, 3), np.uint8)
    rgb[:] = OPEN_RGB
    rgb[x == WALL] = WALL_RGB
    rgb[y == PATH] = PATH_RGB
    rgb[x == START] = START_RGB
    rgb[x == GOAL] = GOAL_RGB
    big = np.repeat(np.repeat(rgb.reshape(n, n, 3), cell, axis=0), cell, axis=1)
    if prediction is not None:
        p = np.asarray(prediction).reshape(n, n) == PATH
        truth = y.reshape(n, n) == PATH
        m = max(1, cell // 4)
        for (r, k) in np.argwhere(p):
            big[r * cell + m:(r + 1) * cell - m, k * cell + m:(k + 1) * cell - m] = PRED_OK if truth[r, k] else PRED_BAD
    return Image.fromarray(big)
