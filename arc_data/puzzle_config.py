"""Typed configs of `build-puzzles` and `generate-puzzles` (light: no numba, so the CLI can register
them as schemas cheaply). `__post_init__` checks ranges and raises a one-line ArcDataError naming
the field. The work is in arc_data.puzzles."""

from __future__ import annotations

from dataclasses import dataclass

from arc_data.errors import ArcDataError

TASKS = ("sudoku", "maze")
BOX_SHAPES = {4: (2, 2), 6: (2, 3), 8: (2, 4), 9: (3, 3)}  # sudoku size -> (box rows, box cols)
MAZE_NUM_AUG = (0, 7)  # 7: all eight dihedral transforms per maze (the reference's aug=True)
AUG_TABLE_FILE = "puzzle_augmentations.npz"


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ArcDataError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")


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
        _check_task(self.task)
        if not str(self.source):
            raise ArcDataError("source: required (a folder holding train.csv and test.csv, or a dataset "
                               "repository id such as sapientinc/sudoku-extreme)")
        if not str(self.output_dir):
            raise ArcDataError("output_dir: required")
        if self.subsample_size is not None and self.subsample_size < 1:
            raise ArcDataError(f"subsample_size: must be >= 1 (or null for all), got {self.subsample_size}")
        if self.min_difficulty is not None and self.min_difficulty < 0:
            raise ArcDataError(f"min_difficulty: must be >= 0 (or null), got {self.min_difficulty}")
        if self.num_aug < 0:
            raise ArcDataError(f"num_aug: must be >= 0, got {self.num_aug}")
        if self.task == "maze" and self.num_aug not in MAZE_NUM_AUG:
            raise ArcDataError(f"num_aug: maze takes 0 or 7 (all eight dihedral transforms), got {self.num_aug}")


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
        _check_task(self.task)
        if self.size == 0:
            self.size = 9 if self.task == "sudoku" else 30
        if self.task == "sudoku":
            if self.size not in BOX_SHAPES:
                raise ArcDataError(f"size: sudoku sizes are {sorted(BOX_SHAPES)}, got {self.size}")
            if not 0 <= self.givens <= self.size ** 2:
                raise ArcDataError(f"givens: must be in 0..{self.size ** 2} for size {self.size}, got {self.givens}")
            if self.min_rating < 0:
                raise ArcDataError(f"min_rating: must be >= 0, got {self.min_rating}")
            for name in ("min_path", "openings"):
                if getattr(self, name):
                    raise ArcDataError(f"{name}: a maze option (task=sudoku)")
        else:
            if not 3 <= self.size <= 255:
                raise ArcDataError(f"size: maze side must be in 3..255, got {self.size}")
            if self.min_path < 0 or self.min_path >= self.size ** 2:
                raise ArcDataError(f"min_path: must be in 0..{self.size ** 2 - 1}, got {self.min_path}")
            if not 0.0 <= self.openings <= 1.0:
                raise ArcDataError(f"openings: must be in [0, 1], got {self.openings}")
            for name in ("givens", "min_rating"):
                if getattr(self, name):
                    raise ArcDataError(f"{name}: a sudoku option (task=maze)")
        if self.count_train < 1 or self.count_test < 1:
            raise ArcDataError(f"count_train/count_test: must be >= 1, got {self.count_train}/{self.count_test}")
        if not str(self.output_dir):
            raise ArcDataError("output_dir: required (the folder that receives train.csv and test.csv)")
