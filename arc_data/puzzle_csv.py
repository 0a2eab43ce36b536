"""The puzzle CSV format of sapientinc/sudoku-extreme and sapientinc/maze-30x30-hard-1k.

    source,question,answer,rating
    puzzles0_kaggle,..3.2.6..9..3.5..1...,483921657967345821...,0

One puzzle per row: `question` and `answer` are the board, row-major, one character per cell (all
rows of a file the same length); `source` is free text; `rating` an integer difficulty (Sudoku:
backtracks of a solver; parsed only when a filter needs it). Sudoku blanks are '.' or '0'; Maze
cells are '#', ' ', 'S', 'G', 'o'. The generators write the same format (`write_puzzle_csv`).

`read_puzzle_csv` returns the boards as uint8 byte arrays [N, L] (chunked: memory stays at about
the arrays' size), or raises a one-line ArcDataError naming the file and line.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.errors import ArcDataError

HEADER = ["source", "question", "answer", "rating"]
CHUNK_ROWS = 1 << 16


@dataclass
class PuzzleCsv:
    path: Path
    questions: np.ndarray  # uint8 [N, L]: the CSV characters
    answers: np.ndarray  # uint8 [N, L]
    ratings: np.ndarray | None  # int64 [N] when parsed

    def __len__(self) -> int:
        return int(self.questions.shape[0])

    @property
    def row_len(self) -> int:
        return int(self.questions.shape[1])

    def line_of(self, row: int) -> int:
        """1-based line number of data row `row` (re-reads the file: used for error messages only)."""
        return line_of(self.path, row)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def line_of(path: Path, row: int) -> int:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        for i, _ in enumerate(reader):
            if i == row:
                return reader.line_num
    return -1


def _bad(path: Path, line: int | str, problem: str) -> ArcDataError:
    return ArcDataError(f"{path}:{line}: {problem}")


def _to_array(path: Path, texts: list[str], first_row: int, width: int, field: str) -> np.ndarray:
    """texts (all of length `width`, checked here) -> uint8 [len, width]."""
    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    wrong = np.flatnonzero(lens != width)
    if wrong.size:
        i = int(wrong[0])
        raise _bad(path, line_of(path, first_row + i),
                   f"{field} has {lens[i]} characters, expected {width} (the first row's length)")
    try:
        data = "".join(texts).encode("ascii")
    except UnicodeEncodeError as e:
        i = e.start // width
        raise _bad(path, line_of(path, first_row + i),
                   f"{field} holds a non-ASCII character {texts[i][e.start % width]!r}") from None
    return np.frombuffer(data, np.uint8).reshape(len(texts), width)


def read_puzzle_csv(path: str | Path, parse_ratings: bool = False,
                    progress: Callable[[int], object] | None = None) -> PuzzleCsv:
    """Read a puzzle CSV. `progress(n)` is called with the rows read since the last call."""
    path = Path(path)
    if not path.is_file():
        raise ArcDataError(f"{path}: missing (expected a puzzle CSV with header {','.join(HEADER)})")
    q_chunks: list[np.ndarray] = []
    a_chunks: list[np.ndarray] = []
    ratings: list[int] = []
    width = -1
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise _bad(path, 1, f"empty file, expected the header {','.join(HEADER)}")
            if [h.strip() for h in header] != HEADER:
                raise _bad(path, 1, f"header {','.join(header)!r}, expected {','.join(HEADER)}")
            qs: list[str] = []
            ans: list[str] = []
            done = 0
            for row in reader:
                if len(row) != 4:
                    raise _bad(path, reader.line_num, f"{len(row)} fields, expected 4 ({','.join(HEADER)})")
                _, q, a, r = row
                qs.append(q)
                ans.append(a)
                if parse_ratings:
                    try:
                        ratings.append(int(r))
                    except ValueError:
                        raise _bad(path, reader.line_num, f"rating {r!r} is not an integer") from None
                if len(qs) == CHUNK_ROWS:
                    width = len(qs[0]) if width < 0 else width
                    q_chunks.append(_to_array(path, qs, done, width, "question"))
                    a_chunks.append(_to_array(path, ans, done, width, "answer"))
                    done += len(qs)
                    if progress:
                        progress(len(qs))
                    qs, ans = [], []
            if qs:
                width = len(qs[0]) if width < 0 else width
                q_chunks.append(_to_array(path, qs, done, width, "question"))
                a_chunks.append(_to_array(path, ans, done, width, "answer"))
                if progress:
                    progress(len(qs))
    except UnicodeDecodeError as e:
        raise ArcDataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise ArcDataError(f"{path}: malformed CSV ({e})") from None
    if not q_chunks:
        raise _bad(path, 2, "no puzzle rows after the header")
    if width == 0:
        raise _bad(path, 2, "empty question")
    questions = np.concatenate(q_chunks) if len(q_chunks) > 1 else q_chunks[0]
    answers = np.concatenate(a_chunks) if len(a_chunks) > 1 else a_chunks[0]
    return PuzzleCsv(path, questions, answers, np.array(ratings, np.int64) if parse_ratings else None)


def write_puzzle_csv(path: str | Path, questions: np.ndarray, answers: np.ndarray, ratings: Iterable[int],
                     source: str) -> None:
    """Write boards (uint8 CSV bytes [N, L]) in the official layout (LF line ends)."""
    q = np.ascontiguousarray(questions, dtype=np.uint8)
    a = np.ascontiguousarray(answers, dtype=np.uint8)
    width = q.shape[1]
    qb, ab = q.tobytes().decode("ascii"), a.tobytes().decode("ascii")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows((source, qb[i * width:(i + 1) * width], ab[i * width:(i + 1) * width], int(r))
                    for i, r in enumerate(ratings))
