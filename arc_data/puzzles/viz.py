"""Pictures of grid puzzles for the evaluation report: each task draws its own boards
(`arc_data.sudoku.viz.render_sudoku`, `arc_data.maze.viz.render_maze`); `render_puzzle` picks the
renderer by task name through the registry.

    img = render_puzzle("sudoku", inputs[i], labels[i], prediction=pred[i])   # PIL image
    save_png(img, "puzzle.png")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arc_data.maze.viz import LEGEND as MAZE_LEGEND
from arc_data.puzzles.registry import TASKS
from arc_data.sudoku.viz import LEGEND as SUDOKU_LEGEND

LEGENDS = {"sudoku": SUDOKU_LEGEND, "maze": MAZE_LEGEND}  # what a picture's colours mean (the report prints it)


def render_puzzle(task: str, inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None,
                  cell: int | None = None):
    """The task's picture of one board (its registry entry's `render`)."""
    if task not in TASKS:
        raise ValueError(f"no renderer for task {task!r} ({', '.join(TASKS)})")
    return TASKS[task].render(inputs, labels, prediction, cell)


def save_png(img, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")
    return path
