"""Errors raised on bad dataset input: one line naming the file, the task and the problem.

`DatasetError` is the base (the CLI catches it) and what the format root raises (reader, file
rules, size checks); each task room raises its own subclass, so the class says which task an error
came from. A task's build wraps its body in `raised_as(<its error>)`, so that what the shared code
raises on its behalf (a bad output folder, a short disk, a bad CSV) carries the task's name too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class DatasetError(ValueError):
    """Invalid dataset source, dataset on disk or option (any task)."""

    task: str | None = None  # the task room it came from; the CLI's error line names it


class ArcError(DatasetError):
    """Invalid ARC-AGI source data, dataset or option."""

    task = "arc"


class SudokuError(DatasetError):
    """Invalid Sudoku CSV, dataset or option."""

    task = "sudoku"


class MazeError(DatasetError):
    """Invalid Maze CSV, dataset or option."""

    task = "maze"


@contextmanager
def raised_as(error: type[DatasetError]) -> Iterator[None]:
    """Re-raise a neutral DatasetError from the block as `error` (same one-line message, no chained
    traceback); a task's own error passes as it is."""
    try:
        yield
    except DatasetError as e:
        if type(e) is not DatasetError:
            raise
        raise error(str(e)) from None
