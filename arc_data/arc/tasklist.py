"""The build's task list: parts of plain `Task` lists (ARC sources) and of generated sources' tables
(`tasktable.TaskTable`), each part a row selection with its own is_eval flags.

The hold-out split, the plan and the writers read its columns (`is_eval`, `count_chunks`, `names()`)
a chunk at a time; a `Task` is made only when one is asked for (`tasks[i]`, iteration), a table's
pairs read from the spill. A table's part keeps its rows (int64) and flags (bool) in the spill too,
written a chunk at a time (`load_tasks`, `take`; a selection that keeps every row shares them), and
so does a list with a table part for its `is_eval` column: a task list over generated sources holds
nothing a task in memory.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator

import numpy as np

from arc_data.arc.sources import Task, sorted_checked
from arc_data.arc.spill import Column, zeros
from arc_data.arc.tasktable import TaskTable
from arc_data.errors import ArcError

NAME_CHUNK = 1 << 12  # task names made at a time (then the spill's pages handed back)
ROW_CHUNK = 1 << 16  # a table part's rows and flags copied at a time


@dataclasses.dataclass
class _Part:
    source: list[Task] | TaskTable
    rows: np.ndarray  # int64: rows of `source`, in order
    is_eval: np.ndarray  # bool, one a row


def _table_part(table: TaskTable) -> _Part:
    """Every row of `table`, none an evaluation task, both columns in its spill."""
    rows = zeros(table.spill, (len(table),), np.int64)
    for lo in range(0, len(table), ROW_CHUNK):
        rows[lo:lo + ROW_CHUNK] = np.arange(lo, min(len(table), lo + ROW_CHUNK))
        table.spill.release()
    return _Part(table, rows, zeros(table.spill, (len(table),), bool))


def _taken(p: _Part, keep: np.ndarray, is_eval: np.ndarray) -> _Part:
    """A table's part where `keep` holds, its flags from `is_eval`: written to the spill ROW_CHUNK rows
    at a time (rows shared when every one is kept)."""
    spill = p.source.spill
    n = int(np.count_nonzero(keep))
    rows = p.rows if n == len(keep) else zeros(spill, (n,), np.int64)
    flags = zeros(spill, (n,), bool)
    at = 0
    for lo in range(0, len(keep), ROW_CHUNK):
        k = keep[lo:lo + ROW_CHUNK]
        m = int(np.count_nonzero(k))
        if rows is not p.rows:
            rows[at:at + m] = p.rows[lo:lo + ROW_CHUNK][k]
        flags[at:at + m] = is_eval[lo:lo + ROW_CHUNK][k]
        at += m
        spill.release()
    return _Part(p.source, rows, flags)


class TaskList:
    """The build's tasks (see the module's docstring): a sequence of `Task`, made when read."""

    def __init__(self, parts: list[_Part]) -> None:
        self.parts = [p for p in parts if len(p.rows)]
        self._ends = np.cumsum([len(p.rows) for p in self.parts], dtype=np.int64)
        self.spill = next((p.source.spill for p in self.parts if isinstance(p.source, TaskTable)), None)
        self._is_eval: np.ndarray | None = None

    @classmethod
    def of(cls, tasks) -> TaskList:
        if isinstance(tasks, TaskList):
            return tasks
        tasks = list(tasks)
        return cls([_Part(tasks, np.arange(len(tasks), dtype=np.int64), np.array([t.is_eval for t in tasks], bool))])

    @classmethod
    def of_table(cls, table: TaskTable) -> TaskList:
        return cls([_table_part(table)])

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _locate(self, i: int) -> tuple[_Part, int]:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = int(np.searchsorted(self._ends, i, side="right"))
        return self.parts[k], i - (int(self._ends[k - 1]) if k else 0)

    @staticmethod
    def _task(p: _Part, j: int) -> Task:
        r, ev = int(p.rows[j]), bool(p.is_eval[j])
        if isinstance(p.source, TaskTable):
            return p.source.task(r, ev)
        t = p.source[r]
        return t if t.is_eval == ev else dataclasses.replace(t, is_eval=ev)

    def __getitem__(self, i: int) -> Task:
        return self._task(*self._locate(i))

    def __iter__(self) -> Iterator[Task]:
        for p in self.parts:
            for j in range(len(p.rows)):
                yield self._task(p, j)

    def name(self, i: int) -> str:
        p, j = self._locate(i)
        return p.source.name(int(p.rows[j])) if isinstance(p.source, TaskTable) else p.source[int(p.rows[j])].name

    def names(self) -> Iterator[str]:
        """Every task's name, in order (a table's NAME_CHUNK at a time, the spill's pages handed back)."""
        for p in self.parts:
            if isinstance(p.source, TaskTable):
                for lo in range(0, len(p.rows), NAME_CHUNK):
                    yield from p.source.names(p.rows[lo:lo + NAME_CHUNK])
                    p.source.spill.release()
            else:
                yield from (p.source[int(r)].name for r in p.rows)

    def _column(self, of_table, of_task) -> np.ndarray:
        cols = [of_table(p.source, p.rows) if isinstance(p.source, TaskTable) else
                np.array([of_task(p.source[int(r)]) for r in p.rows], np.int64) for p in self.parts]
        return np.concatenate(cols).astype(np.int64) if cols else np.zeros(0, np.int64)

    @property
    def is_eval(self) -> np.ndarray:
        """One flag a task, in order; with a table part, a read-only array in the spill, made once."""
        if self.spill is None:
            return np.concatenate([p.is_eval for p in self.parts]) if self.parts else np.zeros(0, bool)
        if self._is_eval is None:
            out = zeros(self.spill, (len(self),), bool)
            at = 0
            for p in self.parts:
                for lo in range(0, len(p.is_eval), ROW_CHUNK):
                    flags = p.is_eval[lo:lo + ROW_CHUNK]
                    out[at:at + len(flags)] = flags
                    at += len(flags)
                    self.spill.release()
            out.setflags(write=False)
            self._is_eval = out
        return self._is_eval

    @property
    def num_train(self) -> np.ndarray:
        """Demonstrations a task, int64, whole in memory (the build reads `count_chunks`)."""
        return self._column(lambda tb, rows: tb.num_train[rows], lambda t: len(t.train))

    @property
    def num_test(self) -> np.ndarray:
        """Test pairs a task, int64, whole in memory (the build reads `count_chunks`)."""
        return self._column(lambda tb, rows: np.full(len(rows), tb.test_pairs), lambda t: len(t.test))

    def count_chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(num_train, num_test), int64, of at most `size` tasks at a time, in order: the columns
        without an array a task long (a table's pages handed back after each chunk)."""
        for p in self.parts:
            for lo in range(0, len(p.rows), size):
                rows = p.rows[lo:lo + size]
                if isinstance(p.source, TaskTable):
                    yield p.source.num_train[rows].astype(np.int64), np.full(len(rows), p.source.test_pairs, np.int64)
                    p.source.spill.release()
                else:
                    tasks = [p.source[int(r)] for r in rows]
                    yield (np.array([len(t.train) for t in tasks], np.int64),
                           np.array([len(t.test) for t in tasks], np.int64))

    def lists(self) -> Iterator[Task]:
        """The tasks of the plain parts (those that may have unlabelled test inputs)."""
        for p in self.parts:
            if not isinstance(p.source, TaskTable):
                for j in range(len(p.rows)):
                    yield self._task(p, j)

    def imitates_any(self, held: set[str]) -> np.ndarray:
        out = []
        for p in self.parts:
            if isinstance(p.source, TaskTable):
                for lo in range(0, len(p.rows), ROW_CHUNK):
                    out.append(p.source.imitates_any(p.rows[lo:lo + ROW_CHUNK], held))
                    p.source.spill.release()
            else:
                out.append(np.array([bool(held.intersection(p.source[int(r)].imitates)) for r in p.rows], bool))
        return np.concatenate(out) if out else np.zeros(0, bool)

    def imitated(self) -> dict[str, int]:
        """Real ARC task id -> how many generated tasks of the list imitate it (`Task.imitates`), sorted
        by id: what the build's manifest records (`imitated_tasks`) for the strict protocol's check."""
        out: dict[str, int] = {}
        for p in self.parts:
            if isinstance(p.source, TaskTable):
                for lo in range(0, len(p.rows), ROW_CHUNK):
                    for tid, n in p.source.imitated(p.rows[lo:lo + ROW_CHUNK]).items():
                        out[tid] = out.get(tid, 0) + n
                    p.source.spill.release()
            else:
                for r in p.rows:
                    for tid in p.source[int(r)].imitates:
                        out[tid] = out.get(tid, 0) + 1
        return dict(sorted(out.items()))

    def take(self, keep: np.ndarray, is_eval: np.ndarray | None = None) -> TaskList:
        """The tasks where `keep` (bool, one a task) holds, in order; is_eval replaced where given."""
        ev = self.is_eval if is_eval is None else is_eval
        parts, lo = [], 0
        for p in self.parts:
            hi = lo + len(p.rows)
            k = keep[lo:hi]
            if isinstance(p.source, TaskTable):
                parts.append(_taken(p, k, ev[lo:hi]))
            else:
                parts.append(_Part(p.source, p.rows if k.all() else p.rows[k], ev[lo:hi][k]))  # rows shared: one copy
            lo = hi
        return TaskList(parts)

    def names_column(self) -> Column:
        """`np.array([t.name for t in tasks], dtype=str)` as a `spill.Column`: made NAME_CHUNK names at a
        time when written (its width, the longest name's, found first)."""
        chunk = NAME_CHUNK
        width = max((len(n) for n in self.names()), default=1)

        def chunks():
            names = self.names()
            for lo in range(0, len(self), chunk):
                yield np.array([next(names) for _ in range(min(chunk, len(self) - lo))], f"<U{width}")
        return Column(np.dtype(f"<U{width}"), len(self), chunks)


def load_tasks(specs: list[str], eval_name: str, require_outputs: bool, load) -> tuple[TaskList, list]:
    """`sources.load_sources` for a build whose generated sources come as `TaskTable`s (`load` is
    `generated.loader(..., spill)`): the same tasks in the same order, the same checks (plain names,
    no task id twice), as a `TaskList`."""
    parts: list[_Part] = []
    infos = []
    seen: dict[str, Task] = {}
    tables: list[TaskTable] = []
    for spec in specs:
        got, info = load(str(spec), eval_name, require_outputs)
        infos.append(info)
        if isinstance(got, TaskTable):
            for other in (t for t in tables if t.kind == got.kind):  # the same unit names twice
                small, big = (got, other) if len(got) <= len(other) else (other, got)
                for i in range(len(small)):
                    j = bisect.bisect_left(range(len(big)), small.name(i), key=big.name)
                    if j < len(big) and big.name(j) == small.name(i):
                        mine, theirs = (i, j) if small is got else (j, i)
                        raise ArcError(f"{got.file(mine)}: task {small.name(i)}: the same task id is also in "
                                       f"{other.file(theirs)}")
                    if i % NAME_CHUNK == NAME_CHUNK - 1:
                        got.spill.release()
            for name, t in seen.items():
                _not_in(got, name, t.file, table_later=True)
            tables.append(got)
            parts.append(_table_part(got))
            continue
        got = sorted_checked(got, seen)
        for t in got:
            for tb in tables:
                _not_in(tb, t.name, t.file)
        parts.append(_Part(got, np.arange(len(got), dtype=np.int64), np.array([t.is_eval for t in got], bool)))
    return TaskList(parts), infos


def _not_in(table: TaskTable, name: str, file: str, table_later: bool = False) -> None:
    """An error naming both files (the later source's first) if `table` has a task named `name`."""
    j = bisect.bisect_left(range(len(table)), name, key=table.name)
    if j < len(table) and table.name(j) == name:
        first, then = (table.file(j), file) if table_later else (file, table.file(j))
        raise ArcError(f"{first}: task {name}: the same task id is also in {then}")
