"""Pictures of Sudoku and Maze puzzles (numpy + PIL), for the evaluation report.

Inputs are token rows as stored in a built dataset (`all__inputs.npy` / `all__labels.npy`) and as a
model predicts them: Sudoku PAD 0, blank 1, digit d -> d+1; Maze '#' 1, ' ' 2, 'S' 3, 'G' 4, 'o' 5.

    img = render_sudoku(inputs[i], labels[i], prediction=pred[i])   # PIL image
    img = render_maze(inputs[i], labels[i], prediction=pred[i])
    save_png(img, "puzzle.png")

Sudoku: givens in black, the solution's digits in blue; with a prediction, the blanks show the
predicted digits instead: right ones blue, wrong ones red on a red tint ('?' for a non-digit).
`render_sudoku(inputs, inputs)` draws the bare puzzle (blanks empty).
Maze: walls dark, S green, G orange, the true path light blue; with a prediction, each predicted path
cell gets an inner square: dark blue where the truth has the path, red where it does not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

WHITE = (255, 255, 255)
THIN = (170, 170, 170)
THICK = (30, 30, 30)
GIVEN = (0, 0, 0)
FILLED = (0, 90, 200)
WRONG = (210, 0, 0)
WRONG_BG = (255, 205, 205)
WALL_RGB = (45, 45, 55)
OPEN_RGB = (250, 250, 250)
START_RGB = (40, 170, 70)
GOAL_RGB = (245, 160, 0)
PATH_RGB = (150, 200, 255)
PRED_OK = (0, 60, 170)
PRED_BAD = (230, 30, 30)

SUDOKU_BLANK, MAZE_WALL, MAZE_OPEN, MAZE_START, MAZE_GOAL, MAZE_PATH = 1, 1, 2, 3, 4, 5


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow < 10.1 or no FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _side(row: np.ndarray) -> int:
    n = int(round(np.asarray(row).size ** 0.5))
    if n * n != np.asarray(row).size:
        raise ValueError(f"a board row must hold n*n tokens, got {np.asarray(row).size}")
    return n


def render_sudoku(inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None, cell: int = 28):
    """One board, (n*cell+1) pixels square. Box lines from the size (4: 2x2, 6: 2x3, 8: 2x4, 9: 3x3)."""
    from PIL import Image, ImageDraw

    from arc_data.puzzle_config import BOX_SHAPES

    x, y = np.asarray(inputs).reshape(-1), np.asarray(labels).reshape(-1)
    n = _side(x)
    br, bc = BOX_SHAPES.get(n, (n, n))
    side = n * cell + 1
    img = Image.new("RGB", (side, side), WHITE)
    draw = ImageDraw.Draw(img)
    font = _font(max(8, int(cell * 0.7)))
    for c in range(n * n):
        r, k = divmod(c, n)
        x0, y0 = k * cell, r * cell
        given = x[c] != SUDOKU_BLANK
        shown, colour = int(y[c]), GIVEN if given else FILLED
        if prediction is not None and not given:
            p = int(np.asarray(prediction).reshape(-1)[c])
            shown = p
            if p != y[c]:
                colour = WRONG
                draw.rectangle([x0 + 1, y0 + 1, x0 + cell - 1, y0 + cell - 1], fill=WRONG_BG)
        if prediction is None and not given and shown == SUDOKU_BLANK:
            continue  # labels = inputs draws the bare puzzle: its blanks stay empty
        text = str(shown - 1) if 2 <= shown <= n + 1 else "?"
        draw.text((x0 + cell / 2, y0 + cell / 2), text, fill=colour, font=font, anchor="mm")
    for thick in (False, True):  # thin lines first, so box lines stay unbroken where they cross
        for i in range(n + 1):
            pos = min(i * cell, side - 1)
            if (i % bc == 0) == thick:  # vertical: box columns every bc cells
                draw.line([(pos, 0), (pos, side - 1)], fill=THICK if thick else THIN, width=2 if thick else 1)
            if (i % br == 0) == thick:
                draw.line([(0, pos), (side - 1, pos)], fill=THICK if thick else THIN, width=2 if thick else 1)
    return img


def render_maze(inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None, cell: int = 10):
    """The maze, (n*cell) pixels square, with the true path and optionally a predicted one."""
    from PIL import Image

    x, y = np.asarray(inputs).reshape(-1), np.asarray(labels).reshape(-1)
    n = _side(x)
    rgb = np.empty((n * n, 3), np.uint8)
    rgb[:] = OPEN_RGB
    rgb[x == MAZE_WALL] = WALL_RGB
    rgb[y == MAZE_PATH] = PATH_RGB
    rgb[x == MAZE_START] = START_RGB
    rgb[x == MAZE_GOAL] = GOAL_RGB
    big = np.repeat(np.repeat(rgb.reshape(n, n, 3), cell, axis=0), cell, axis=1)
    if prediction is not None:
        p = np.asarray(prediction).reshape(n, n) == MAZE_PATH
        truth = y.reshape(n, n) == MAZE_PATH
        m = max(1, cell // 4)
        for (r, k) in np.argwhere(p):
            big[r * cell + m:(r + 1) * cell - m, k * cell + m:(k + 1) * cell - m] = PRED_OK if truth[r, k] else PRED_BAD
    return Image.fromarray(big)


def render_puzzle(task: str, inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None,
                  cell: int | None = None):
    """render_sudoku / render_maze by task name."""
    if task == "sudoku":
        return render_sudoku(inputs, labels, prediction, cell or 28)
    if task == "maze":
        return render_maze(inputs, labels, prediction, cell or 10)
    raise ValueError(f"no renderer for task {task!r} (sudoku, maze)")


def save_png(img, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")
    return path
