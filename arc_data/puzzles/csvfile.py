"""The puzzle CSV format of sapientinc/sudoku-extreme and sapientinc/maze-30x30-hard-1k.

    source,question,answer,rating
    generated-sudoku-4x4,1.3.....2...4..1,1234341221434321,5       (a 4x4 board: 16 characters)

One puzzle per row: `question` and `answer` are the board, row-major, one character per cell (all
rows of a file the same length); `source` is free text; `rating` an integer difficulty (Sudoku:
backtracks of a solver; parsed only when a filter needs it). Sudoku blanks are '.' or '0'; Maze
cells are '#', ' ', 'S', 'G', 'o'. The generators write the same format (`write_puzzle_csv`).

`read_puzzle_csv` returns the boards as uint8 byte arrays [N, L], or raises a one-line
DatasetError naming the file and line. Two readers, one result:
- fast: the file in 64 MB blocks, rows split at newlines and commas, with vectorised numpy searches
  (`_split_block`) or, for files over NUMBA_MIN_BYTES, one numba pass (`_split_block_numba`: on big
  files it is faster; on small ones numba's start-up does not pay). It takes
  plain files only: ASCII, no quotes, LF or CRLF line ends, exactly four fields of the right
  lengths, integer ratings. The official and generated files are such files.
- the `csv` module, for everything else (quoted fields, odd rows); it also words every error.
Blank lines are skipped.
Both fill arrays preallocated at an upper bound of the row count (untouched pages of `np.empty`
are never resident), so memory stays at about the arrays' size.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.errors import DatasetError

HEADER = ["source", "question", "answer", "rating"]
CHUNK_ROWS = 1 << 16
BLOCK_BYTES = 1 << 26
NUMBA_MIN_BYTES = 1 << 25  # files larger than this are split by the numba kernel (its start-up, ~0.85 s, pays)


@dataclass
class PuzzleCsv:
    path: Path
    questions: np.ndarray  # uint8 [N, L]: the CSV characters
    answers: np.ndarray  # uint8 [N, L]
    ratings: np.ndarray | None  # int64 [N] when parsed
    sha256: str

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
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        next(reader, None)
        i = 0
        for fields in reader:
            if not fields:  # blank lines are skipped by the readers
                continue
            if i == row:
                return reader.line_num
            i += 1
    return -1


def _bad(path: Path, line: int | str, problem: str) -> DatasetError:
    return DatasetError(f"{path}:{line}: {problem}")


class _Rows:
    """Row storage preallocated at an upper bound of the row count; filled in order."""

    def __init__(self, path: Path, header_bytes: int, width: int, ratings: bool):
        upper = max(path.stat().st_size - header_bytes, 0) // (2 * width + 4) + 1  # a row: 2L chars + 3 commas + LF
        self.q = np.empty((upper, width), np.uint8)
        self.a = np.empty((upper, width), np.uint8)
        self.r = np.empty(upper, np.int64) if ratings else None
        self.count = 0

    def add(self, q: np.ndarray, a: np.ndarray, r: np.ndarray | None) -> None:
        lo, hi = self.count, self.count + q.shape[0]
        self.q[lo:hi], self.a[lo:hi] = q, a
        if self.r is not None:
            self.r[lo:hi] = r
        self.count = hi

    def result(self, path: Path, sha: str) -> PuzzleCsv:
        n = self.count
        return PuzzleCsv(path, self.q[:n], self.a[:n], None if self.r is None else self.r[:n], sha)


Split = tuple[np.ndarray, np.ndarray, np.ndarray | None, int]  # question offsets, answer offsets, ratings, width


def _split_block(buf: np.ndarray, ratings: bool) -> Split | None:
    """Rows of a block of whole LF-terminated lines (numpy), or None when it needs the csv module."""
    empty = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64) if ratings else None, 0)
    if (buf >= 128).any() or (buf == ord('"')).any():
        return None
    nl = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate([[0], nl[:-1] + 1])
    ends = nl.copy()
    cr = np.flatnonzero(buf == ord("\r"))
    if cr.size:  # CRLF line ends only
        if not np.isin(cr + 1, nl).all():
            return None
        ends[np.isin(nl - 1, cr)] -= 1
    keep = ends > starts  # blank lines are skipped (as by the csv reader below)
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return empty
    commas = np.flatnonzero(buf == ord(","))
    first = np.searchsorted(commas, starts)
    if not (np.searchsorted(commas, ends) - first == 3).all():
        return None
    c1, c2, c3 = commas[first], commas[first + 1], commas[first + 2]
    width = int(c2[0] - c1[0] - 1)
    if width < 1 or not ((c2 - c1 - 1 == width) & (c3 - c2 - 1 == width)).all():
        return None
    r = None
    if ratings:
        w = ends - c3 - 1
        if w.min() < 1 or w.max() > 18:
            return None
        wmax = int(w.max())
        pos = np.arange(wmax)
        digits = buf[ends[:, None] - wmax + pos].astype(np.int64) - ord("0")
        used = pos >= (wmax - w)[:, None]
        if ((digits < 0) | (digits > 9))[used].any():
            return None
        r = (np.where(used, digits, 0) * 10 ** (wmax - 1 - pos)).sum(axis=1)
    return c1 + 1, c2 + 1, r, width


def _split_block_numba(buf: np.ndarray, ratings: bool) -> Split | None:
    """_split_block in one pass (arc_data.puzzles.kernels.csv_scan): the same rows, or None."""
    from arc_data.puzzles.kernels import csv_scan  # lazy: numba only for large files (NUMBA_MIN_BYTES)

    rows, width, q_off, a_off, r = csv_scan(buf, ratings)
    if rows < 0:
        return None
    return q_off[:rows], a_off[:rows], (r[:rows] if ratings else None), max(width, 0)


def _gather(buf: np.ndarray, offsets: np.ndarray, width: int, out: np.ndarray, numba: bool) -> None:
    """out[r] = buf[offsets[r] : offsets[r] + width]."""
    if numba:
        from arc_data.puzzles.kernels import gather_rows  # lazy: numba only for large files (NUMBA_MIN_BYTES)

        gather_rows(buf, offsets, width, out)
        return
    cols = np.arange(width)
    for lo in range(0, offsets.size, CHUNK_ROWS):  # bounded index arrays
        out[lo:lo + CHUNK_ROWS] = buf[offsets[lo:lo + CHUNK_ROWS, None] + cols]


def _read_fast(path: Path, parse_ratings: bool, progress: Callable[[int], object] | None) -> PuzzleCsv | None:
    numba = path.stat().st_size > NUMBA_MIN_BYTES
    split = _split_block_numba if numba else _split_block
    h = hashlib.sha256()
    with open(path, "rb") as f:
        header = f.readline()
        h.update(header)
        if header.decode("utf-8-sig", errors="replace").rstrip("\r\n").split(",") != HEADER:
            return None
        rows: _Rows | None = None
        buf = np.empty(BLOCK_BYTES + 1, np.uint8)  # +1: room for a final LF
        kept = 0  # bytes of an unfinished line carried to the front of buf
        while True:
            got = f.readinto(memoryview(buf)[kept:-1])
            h.update(memoryview(buf)[kept:kept + got])
            total = kept + got
            if got:
                cut = _last_newline(buf, total) + 1
                if cut == 0:  # a line longer than the buffer: grow it
                    buf = np.concatenate([buf, np.empty(buf.size, np.uint8)])
                    kept = total
                    continue
            else:
                cut = total
                if total and buf[total - 1] != ord("\n"):
                    buf[total] = ord("\n")
                    cut += 1
            if cut:
                block = buf[:cut]
                found = split(block, parse_ratings)
                if found is None:
                    return None
                q_off, a_off, r, width = found
                if q_off.size:
                    if rows is None:
                        rows = _Rows(path, len(header), width, parse_ratings)
                    if width != rows.q.shape[1]:
                        return None
                    lo, hi = rows.count, rows.count + q_off.size
                    _gather(block, q_off, width, rows.q[lo:hi], numba)
                    _gather(block, a_off, width, rows.a[lo:hi], numba)
                    if rows.r is not None:
                        rows.r[lo:hi] = r
                    rows.count = hi
                    if progress:
                        progress(q_off.size)
            if not got:
                break
            kept = total - cut
            buf[:kept] = buf[cut:total].copy()
    if rows is None:
        return None
    return rows.result(path, h.hexdigest())


def _last_newline(buf: np.ndarray, total: int) -> int:
    """Index of the last LF in buf[:total], or -1 (looks at the tail first: lines are short)."""
    for width in (1 << 16, total):
        lo = max(total - width, 0)
        hits = np.flatnonzero(buf[lo:total] == ord("\n"))
        if hits.size:
            return lo + int(hits[-1])
    return -1


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


def _read_csv_module(path: Path, parse_ratings: bool, progress: Callable[[int], object] | None) -> PuzzleCsv:
    rows: _Rows | None = None
    line = 1
    qs: list[str] = []
    ans: list[str] = []
    ratings: list[int] = []
    done = 0

    def flush() -> None:
        nonlocal rows, done, qs, ans, ratings
        if rows is None:
            rows = _Rows(path, 0, len(qs[0]), parse_ratings)
        width = rows.q.shape[1]
        rows.add(_to_array(path, qs, done, width, "question"), _to_array(path, ans, done, width, "answer"),
                 np.array(ratings, np.int64) if parse_ratings else None)
        done += len(qs)
        if progress:
            progress(len(qs))
        qs, ans, ratings = [], [], []

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, strict=True)
            header = next(reader, None)
            if header is None:
                raise _bad(path, 1, f"empty file, expected the header {','.join(HEADER)}")
            if [h.strip() for h in header] != HEADER:
                raise _bad(path, 1, f"header {','.join(header)!r}, expected {','.join(HEADER)}")
            for row in reader:
                line = reader.line_num
                if not row:  # a blank line
                    continue
                if len(row) != 4:
                    raise _bad(path, line, f"{len(row)} fields, expected 4 ({','.join(HEADER)})")
                _, q, a, r = row
                if rows is None and not qs and not q:
                    raise _bad(path, line, "empty question")
                qs.append(q)
                ans.append(a)
                if parse_ratings:
                    try:
                        ratings.append(int(r))
                    except ValueError:
                        raise _bad(path, line, f"rating {r!r} is not an integer") from None
                if len(qs) == CHUNK_ROWS:
                    flush()
            if qs:
                flush()
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise _bad(path, line + 1, f"malformed CSV ({e})") from None
    if rows is None:
        raise _bad(path, 2, "no puzzle rows after the header")
    return rows.result(path, file_sha256(path))


def read_puzzle_csv(path: str | Path, parse_ratings: bool = False,
                    progress: Callable[[int], object] | None = None) -> PuzzleCsv:
    """Read a puzzle CSV. `progress(n)` is called with the rows read since the last call."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: missing (expected a puzzle CSV with header {','.join(HEADER)})")
    counted = [0]

    def count(n: int) -> None:
        counted[0] += n
        if progress:
            progress(n)

    fast = _read_fast(path, parse_ratings, count)
    if fast is not None:
        return fast
    if progress and counted[0]:
        progress(-counted[0])  # the fast reader gave up part way: the csv module starts over
    return _read_csv_module(path, parse_ratings, progress)


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
