"""Pictures of Sudoku boards (numpy + PIL), for the evaluation report.

Inputs are token rows as stored in a built dataset and as a model predicts them: PAD 0, blank 1,
digit d -> d+1. Givens in black, the solution's digits in blue; with a prediction, every cell shows
the predicted digit instead: right ones blue (black on a given), wrong ones red on a red tint ('?' for
a non-digit), a given the model changed included.
`render_sudoku(inputs, inputs)` draws the bare puzzle (blanks empty).
"""

from __future__ import annotations

import numpy as np

from arc_data import format as fmt
from arc_data.sudoku import BOX_SHAPES

WHITE = (255, 255, 255)
THIN = (170, 170, 170)
THICK = (30, 30, 30)
GIVEN = (0, 0, 0)
FILLED = (0, 90, 200)
WRONG = (210, 0, 0)
WRONG_BG = (255, 205, 205)
BLANK = 1
LEGEND = ("givens black, the solution's digits blue; with a prediction every cell shows the predicted digit, "
          "a wrong one (a changed given included) red on a red tint, '?' for a non-digit")


def _font(size: int):
    from PIL import ImageFont  # lazy: PIL only for pictures

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow < 10.1 or no FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _side(row: np.ndarray) -> int:
    n = fmt.square_side(row.size)
    if not n:
        raise ValueError(f"a board row must hold n*n tokens, got {row.size}")
    return n


def render_sudoku(inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None, cell: int = 28):
    """One board, (n*cell+1) pixels square. Box lines from the size (4: 2x2, 6: 2x3, 8: 2x4, 9: 3x3)."""
    from PIL import Image, ImageDraw  # lazy: PIL only for pictures

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
        given = x[c] != BLANK
        shown, colour = int(y[c]), GIVEN if given else FILLED
        if prediction is not None:  # a changed given is an error too: drawn like a wrong blank
            p = int(np.asarray(prediction).reshape(-1)[c])
            shown = p
            if p != y[c]:
                colour = WRONG
                draw.rectangle([x0 + 1, y0 + 1, x0 + cell - 1, y0 + cell - 1], fill=WRONG_BG)
        if prediction is None and not given and shown == BLANK:
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
