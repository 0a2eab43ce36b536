"""Typed configs of `build-puzzles` and `generate-puzzles` (light: numpy, no numba, so the CLI can
register them as schemas cheaply). `__post_init__` checks ranges and raises a one-line error of the
task's class (SudokuError, MazeError) naming the field; the task's own knobs are checked by its
registry entry (`check_build`, `check_generate`). The work is in arc_data.puzzles.build / generate."""

from __future__ import annotations

from dataclasses import dataclass

from arc_data.puzzles.registry import task_named


@dataclass
class BuildPuzzlesConfig:
    """`hrm-deeploop build-puzzles`: Sudoku / Maze CSVs (`source,question,answer,rating`) -> a dataset
    in HRM's layout. source: a folder holding train.csv and test.csv, or a Hugging Face dataset id."""

    task: str = "sudoku"  # sudoku | maze
    source: str = ""  # folder with train.csv and test.csv, or a Hugging Face dataset repository id
    output_dir: str = ""
    subsample_size: int | None = None  # train split: keep this many puzzles, drawn without replacement
    min_difficulty: int | None = None  # keep rows whose rating >= this (both splits)
    num_aug: int = 0  # augmented copies per train puzzle (maze: 0 or 7 = all eight dihedral transforms)
    seed: int = 0
    check_answers: bool = True  # refuse puzzles whose answer is not a solution (see docs/puzzles.md)
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        task = task_named(self.task)
        if not str(self.source):
            raise task.error("source: required (a folder holding train.csv and test.csv, or a dataset "
                             "repository id such as sapientinc/sudoku-extreme)")
        if not str(self.output_dir):
            raise task.error("output_dir: required")
        if self.subsample_size is not None and self.subsample_size < 1:
            raise task.error(f"subsample_size: must be >= 1 (or null for all), got {self.subsample_size}")
        if self.min_difficulty is not None and self.min_difficulty < 0:
            raise task.error(f"min_difficulty: must be >= 0 (or null), got {self.min_difficulty}")
        if self.num_aug < 0:
            raise task.error(f"num_aug: must be >= 0, got {self.num_aug}")
        task.check_build(self)


@dataclass
class GeneratePuzzlesConfig:
    """`hrm-deeploop generate-puzzles`: Sudoku (unique solutions) or Maze (marked shortest path) puzzles
    into train.csv / test.csv, offline, in the official CSV format."""

    task: str = "sudoku"  # sudoku | maze
    size: int = 0  # board side; 0: 9 for sudoku (4, 6, 8, 9 allowed), 30 for maze
    count_train: int = 1000
    count_test: int = 1000
    output_dir: str = ""  # receives train.csv, test.csv, generated.json
    seed: int = 0
    givens: int = 0  # sudoku: exact number of givens; 0: blank until minimal (no given removable)
    min_rating: int = 0  # sudoku: keep puzzles whose rating (solver backtracks) is >= this
    min_path: int = 0  # maze: shortest S->G path length in steps is >= this
    openings: float = 0.0  # maze: chance to open each remaining wall between cells (adds cycles)
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        task = task_named(self.task)
        if self.size == 0:
            self.size = task.default_size
        task.check_generate(self)
        if self.count_train < 1 or self.count_test < 1:
            raise task.error(f"count_train/count_test: must be >= 1, got {self.count_train}/{self.count_test}")
        if not str(self.output_dir):
            raise task.error("output_dir: required (the folder that receives train.csv and test.csv)")
