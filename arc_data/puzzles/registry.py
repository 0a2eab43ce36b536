"""The grid-puzzle tasks that build-puzzles and generate-puzzles know, by name (`task=`).

Each task is a room of its own (`arc_data/<task>/`: the rules in `__init__.py`, numba kernels in
`kernels.py`, pictures in `viz.py`) with a `task.py` whose one object has the hooks below; a new
task is that folder plus one line in TASKS. The pipeline (arc_data.puzzles.build / generate) reads
the official CSV format, checks, augments and writes the HRM layout; it reaches a task only here, and
so does `evaluate` (eval/puzzles: scoring, test-time augmentation, pictures). TASKS is the one list
of grid tasks: `evaluate task=` takes its names (eval/evaluate_config.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from arc_data.errors import DatasetError
from arc_data.maze.task import MAZE
from arc_data.sudoku.task import SUDOKU


class Draws(Protocol):
    def draw(self) -> tuple[np.ndarray, np.ndarray, int] | None: ...  # (question bytes, answer bytes, rating)
    def knobs(self) -> str: ...  # the generator's knobs, for the "too few puzzles" message


class GridTask(Protocol):
    """What the pipeline asks of a task; boards are n x n, rows n*n tokens, PAD 0."""

    name: str  # the `task=` value, also recorded in manifest.json
    error: type[DatasetError]  # what its errors (and the pipeline's on its behalf) are raised as
    default_size: int  # generate-puzzles' side when size=0
    render_cell: int  # pixels per cell in pictures

    def size_of(self, num_cells: int) -> int: ...  # the side n of a CSV row, or raise `error`
    def vocab_size(self, n: int) -> int: ...
    def charset(self, n: int) -> str: ...  # the CSV bytes allowed, for messages
    def lut(self, n: int) -> np.ndarray: ...  # uint8 [256]: CSV byte -> token, 255 = not allowed
    def first_bad_answer(self, n: int, q_bytes, a_bytes, inputs, labels) -> tuple[int, str]: ...
    # encode_large(n, inputs, labels, lut, check) -> (row, problem, cell, byte): optional one-pass
    # kernel for sets above build.NUMBA_MIN_ROWS, or None
    encode_large: object
    def identity_table(self, n: int, count: int) -> dict[str, np.ndarray]: ...  # the aug table's columns
    def augment(self, n: int, inputs: np.ndarray, labels: np.ndarray, src: np.ndarray, copy: np.ndarray,
                rng: np.random.Generator, large: bool) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]: ...
    def board_info(self, n: int) -> dict: ...  # extra fields of the manifest's `board`
    def check_build(self, cfg) -> None: ...  # task-specific build-puzzles options
    def check_generate(self, cfg) -> None: ...  # task-specific generate-puzzles options
    def most_distinct(self, cfg) -> tuple[int, str] | None: ...  # (count, why) when few puzzles exist
    def generator(self, cfg, rng: np.random.Generator) -> Draws: ...
    def render(self, inputs, labels, prediction=None, cell: int | None = None): ...  # a PIL image
    legend: str  # what the colours of a picture with a prediction mean (the report prints it)
    # evaluate (eval/puzzles): the cells to solve, the test-time augmentation group (tables with the
    # columns of identity_table, one transform per row), the report's pictures
    solve_cells: str  # what the cells to solve are (metrics.json's `cells_to_solve`)
    solve_short: str  # the same in two words, for a picture's caption
    def solve_mask(self, inputs: np.ndarray, labels: np.ndarray) -> np.ndarray: ...  # bool [E, L]
    def num_transforms(self, n: int) -> int: ...
    def describe_transforms(self, n: int) -> str: ...
    def draw_transforms(self, n: int, rng: np.random.Generator, num_examples: int,
                        copies: int) -> dict[str, np.ndarray]: ...  # example-major; raise `error` if too many
    def apply_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray: ...
    def invert_transforms(self, n: int, tokens: np.ndarray, table: dict[str, np.ndarray]) -> np.ndarray: ...
    def picture_cell(self, n: int) -> int: ...  # pixels per cell in the report's pictures


TASKS: dict[str, GridTask] = {t.name: t for t in (SUDOKU, MAZE)}


def task_named(name: str) -> GridTask:
    if name not in TASKS:
        raise DatasetError(f"task: expected one of {', '.join(TASKS)}, got {name!r}")
    return TASKS[name]
