"""Pictures of grid puzzles for the evaluation report: each task draws its own boards
(`arc_data.sudoku.viz.render_sudoku`, `arc_data.maze.viz.render_maze`); `render_puzzle` picks the
renderer by task name through the registry.

    img = render_puzzle("sudoku", inputs[i], labels[i], prediction=pred[i])   # PIL image
    save_png(img, "puzzle.png")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arc_data.puzzles.registry import TASKS


def render_puzzle(task: str, inputs: np.ndarray, labels: np.ndarray, prediction: np.ndarray | None = None,
                  cell: int | None = None):
    """The task's picture of one board (its registry entry's `render`)."""
    if task not in TASKS:
        raise ValueError(f"no renderer for task {task!r} ({', '.join(TASKS)})")
    return TASKS[task].render(inputs, labels, prediction, cell)


def legend(task: str) -> str:
    """What the colours of the task's pictures mean ('' for a task without pictures)."""
    return TASKS[task].legend if task in TASKS else ""


def save_png(img, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")
    return path
