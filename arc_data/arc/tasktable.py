"""A build's task list without a Python object per generated task: 12 bytes a task for the table,
8 for the rows a task list selects (shared by the lists taken from it when they keep every row),
1 for its is_eval flags; the plan's arrays go to the spill (`plan.py`).

`TaskTable`: one generated source (`rearc:` / `arcgen:` / `barc:`) read with a spill. Its pairs' cells
and a per-grid index (one int64 a grid: absolute cell offset << 10 | h << 5 | w, sides <= 30) are in
the spill file; in memory, per task, 12 bytes (unit, first pair within the unit, demonstrations),
per unit 28 bytes and its name, per distinct imitated-id tuple one tuple. Tasks are kept in name
order, as `load_sources` sorts every source (the order they are added in when it is already sorted,
which is the usual case; else a stable sort of the names as fixed-width bytes, the same order as
Python's for these ASCII names).

`TaskList`: the build's tasks, parts of plain `Task` lists (ARC sources) and of tables, each part a
row selection with its own is_eval flags. The hold-out split, the plan and the writers read its
columns (`is_eval`, `num_train`, `num_test`, `names()`); a `Task` is made only when one is asked
for (`tasks[i]`, iteration), its pairs read from the spill.
"""

from __future__ import annotations

import bisect
import dataclasses
from array import array
from collections.abc import Iterator

import numba
import numpy as np

from arc_data.arc.sources import Task, sorted_checked
from arc_data.arc.spill import Column, Spill
from arc_data.errors import ArcError
from arc_data.files.names import check_task_name

NAME_CHUNK = 1 << 12  # task names made at a time when written


@numba.njit(cache=True, nogil=True)
def copy_runs(src: np.ndarray, src_start: np.ndarray, dst: np.ndarray, dst_start: np.ndarray,
              size: np.ndarray) -> None:  # pragma: no cover - numba
    """dst[dst_start[i]: + size[i]] = src[src_start[i]: + size[i]] for every i."""
    for i in range(size.shape[0]):
        a, b = src_start[i], dst_start[i]
        for j in range(size[i]):
            dst[b + j] = src[a + j]


def ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """concatenate(arange(s, s + n) for s, n in zip(start, count)), int64, without a list of arrays."""
    count = np.asarray(count, np.int64)
    ends = np.cumsum(count)
    return np.repeat(np.asarray(start, np.int64) - (ends - count), count) + np.arange(int(ends[-1]) if len(ends) else 0)


class TaskTable:
    """One generated source's tasks (see the module's docstring); built by `add_unit`, then `finish`."""

    def __init__(self, spec: str, kind: str, spill: Spill, pairs_per_task: int, test_pairs: int) -> None:
        self.spec, self.kind, self.spill = spec, kind, spill
        self.pairs_per_task, self.test_pairs = pairs_per_task, test_pairs
        self.unit_names, self.unit_name_at = bytearray(), array("q", [0])
        self.unit_index, self.unit_file, self.unit_line, self.unit_imit = array("q"), array("i"), array("i"), array("i")
        self.files: list[str] = []
        self.imitations: list[tuple[str, ...]] = []
        self._imit_ids: dict[tuple[str, ...], int] = {}
        self.unit, self.first, self.num_train = array("i"), array("i"), array("i")
        self._last_name = ""
        self._in_order = True

    # -- building --------------------------------------------------------------------------------

    def add_unit(self, unit: str, imitates: tuple[str, ...], file: str, line: int, cells: np.ndarray,
                 start: np.ndarray, hw: np.ndarray, order: np.ndarray) -> int:
        """One unit's pairs (grid g: cells[start[g]:] of shape hw[g]), kept in `order` (shuffled,
        cut to `examples`), cut into tasks; returns the pairs left over (a last chunk of test_pairs
        or fewer). Its kept cells and their index go to the spill."""
        grids = np.stack([2 * order, 2 * order + 1], axis=1).ravel()  # the unit's grids in pair order
        size = hw[grids, 0] * hw[grids, 1]
        new_start = np.cumsum(size) - size
        cell = np.repeat(start[grids] - new_start, size) + np.arange(int(size.sum()))
        at = self.spill.append(cells[cell])
        entries = ((at + new_start) << 10) | (hw[grids, 0] << 5) | hw[grids, 1]
        u = len(self.unit_index)
        self.unit_index.append(self.spill.append(entries.astype(np.int64).view(np.uint8), align=8))
        if not self.files or self.files[-1] != file:
            self.files.append(file)
        self.unit_file.append(len(self.files) - 1)
        self.unit_line.append(line)
        self.unit_imit.append(self._imit_ids.setdefault(imitates, len(self._imit_ids)))
        if len(self._imit_ids) > len(self.imitations):
            self.imitations.append(imitates)
        self.unit_names += unit.encode()
        self.unit_name_at.append(len(self.unit_names))
        k, n_test, n = self.pairs_per_task, self.test_pairs, len(order)
        left = 0
        for lo in range(0, n, k):
            c = min(k, n - lo)
            if c <= n_test:
                left += c
                continue
            self.unit.append(u)
            self.first.append(lo)
            self.num_train.append(c - n_test)
            name = self._name(u, lo)
            if name <= self._last_name:
                self._in_order = False
            self._last_name = name
        return left

    def finish(self) -> TaskTable:
        """Arrays from the growing buffers, tasks in name order, names checked (plain, unique)."""
        self.unit = np.frombuffer(self.unit, np.int32).astype(np.int32)
        self.first = np.frombuffer(self.first, np.int32).astype(np.int32)
        self.num_train = np.frombuffer(self.num_train, np.int32).astype(np.int32)
        self.unit_index = np.frombuffer(self.unit_index, np.int64).astype(np.int64)
        self.unit_file = np.frombuffer(self.unit_file, np.int32).astype(np.int32)
        self.unit_line = np.frombuffer(self.unit_line, np.int32).astype(np.int32)
        self.unit_imit = np.frombuffer(self.unit_imit, np.int32).astype(np.int32)
        self.unit_name_at = np.frombuffer(self.unit_name_at, np.int64).astype(np.int64)
        self.unit_names = bytes(self.unit_names)
        del self._imit_ids
        units, lo = np.unique(self.unit, return_index=True)  # a task's name is plain iff its unit's is
        for u, i in zip(units.tolist(), lo.tolist()):
            check_task_name(self._name(u, int(self.first[i])), self._file(u))
        if not self._in_order:
            names = np.array([self.name(i) for i in range(len(self))], dtype="S")
            order = np.argsort(names, kind="stable")
            names = names[order]
            dup = np.nonzero(names[1:] == names[:-1])[0]
            if len(dup):
                i = int(order[dup[0] + 1])
                raise ArcError(f"{self.file(i)}: task {self.name(i)}: the same task id is also in "
                               f"{self.file(int(order[dup[0]]))}")
            self.unit, self.first, self.num_train = self.unit[order], self.first[order], self.num_train[order]
        return self

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.unit)

    def _unit_name(self, u: int) -> str:
        return self.unit_names[self.unit_name_at[u]:self.unit_name_at[u + 1]].decode()

    def _name(self, u: int, first: int) -> str:
        return f"{self.kind}-{self._unit_name(u)}-{first // self.pairs_per_task:04d}"

    def _file(self, u: int) -> str:
        f, line = self.files[self.unit_file[u]], int(self.unit_line[u])
        return f"{f}: line {line}" if line else f

    def name(self, i: int) -> str:
        return self._name(int(self.unit[i]), int(self.first[i]))

    def file(self, i: int) -> str:
        return self._file(int(self.unit[i]))

    def imitates(self, i: int) -> tuple[str, ...]:
        return self.imitations[self.unit_imit[self.unit[i]]]

    def imitates_any(self, rows: np.ndarray, held: set[str]) -> np.ndarray:
        """For each row: does its task imitate one of `held`?"""
        hit = np.array([bool(held.intersection(t)) for t in self.imitations], bool)
        return hit[self.unit_imit[self.unit[rows]]] if len(hit) else np.zeros(len(rows), bool)

    def grid_entries(self, rows: np.ndarray) -> np.ndarray:
        """The index entries of `rows`' grids, in order (each row: its demonstrations' then its test
        pairs' input, output), int64."""
        base = self.unit_index[self.unit[rows]] // 8 + 2 * self.first[rows].astype(np.int64)
        pos = ranges(base, 2 * (self.num_train[rows] + self.test_pairs))
        index = self.spill.cells()[:8 * (int(pos.max()) + 1) if len(pos) else 0].view(np.int64)
        return index[pos]

    def task(self, i: int, is_eval: bool) -> Task:
        """Row i as a Task, its pairs views of the spill."""
        e = self.grid_entries(np.array([i]))
        cells = self.spill.cells()
        grids = [cells[a:a + h * w].reshape(h, w) for a, h, w in
                 zip((e >> 10).tolist(), ((e >> 5) & 31).tolist(), (e & 31).tolist())]
        pairs = list(zip(grids[0::2], grids[1::2]))
        n = int(self.num_train[i])
        return Task(self.name(i), self.spec, self.file(i), self.kind, is_eval, pairs[:n], pairs[n:],
                    imitates=self.imitates(i))


@dataclasses.dataclass
class _Part:
    source: list[Task] | TaskTable
    rows: np.ndarray  # int64: rows of `source`, in order
    is_eval: np.ndarray  # bool, one a row


class TaskList:
    """The build's tasks (see the module's docstring): a sequence of `Task`, made when read."""

    def __init__(self, parts: list[_Part]) -> None:
        self.parts = [p for p in parts if len(p.rows)]
        self._ends = np.cumsum([len(p.rows) for p in self.parts], dtype=np.int64)

    @classmethod
    def of(cls, tasks) -> TaskList:
        if isinstance(tasks, TaskList):
            return tasks
        tasks = list(tasks)
        return cls([_Part(tasks, np.arange(len(tasks), dtype=np.int64), np.array([t.is_eval for t in tasks], bool))])

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
        for p in self.parts:
            if isinstance(p.source, TaskTable):
                yield from (p.source.name(int(r)) for r in p.rows)
            else:
                yield from (p.source[int(r)].name for r in p.rows)

    def _column(self, of_table, of_task) -> np.ndarray:
        cols = [of_table(p.source, p.rows) if isinstance(p.source, TaskTable) else
                np.array([of_task(p.source[int(r)]) for r in p.rows], np.int64) for p in self.parts]
        return np.concatenate(cols).astype(np.int64) if cols else np.zeros(0, np.int64)

    @property
    def is_eval(self) -> np.ndarray:
        return np.concatenate([p.is_eval for p in self.parts]) if self.parts else np.zeros(0, bool)

    @property
    def num_train(self) -> np.ndarray:
        return self._column(lambda tb, rows: tb.num_train[rows], lambda t: len(t.train))

    @property
    def num_test(self) -> np.ndarray:
        return self._column(lambda tb, rows: np.full(len(rows), tb.test_pairs), lambda t: len(t.test))

    def count_chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(num_train, num_test), int64, of at most `size` tasks at a time, in order: the columns
        without an array a task long."""
        for p in self.parts:
            for lo in range(0, len(p.rows), size):
                rows = p.rows[lo:lo + size]
                if isinstance(p.source, TaskTable):
                    yield p.source.num_train[rows].astype(np.int64), np.full(len(rows), p.source.test_pairs, np.int64)
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
        out = [p.source.imitates_any(p.rows, held) if isinstance(p.source, TaskTable) else
               np.array([bool(held.intersection(p.source[int(r)].imitates)) for r in p.rows], bool)
               for p in self.parts]
        return np.concatenate(out) if out else np.zeros(0, bool)

    def take(self, keep: np.ndarray, is_eval: np.ndarray | None = None) -> TaskList:
        """The tasks where `keep` (bool, one a task) holds, in order; is_eval replaced where given."""
        ev = self.is_eval if is_eval is None else is_eval
        parts, lo = [], 0
        for p in self.parts:
            hi = lo + len(p.rows)
            k = keep[lo:hi]
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
            for name, t in seen.items():
                _not_in(got, name, t.file, table_later=True)
            tables.append(got)
            parts.append(_Part(got, np.arange(len(got), dtype=np.int64), np.zeros(len(got), bool)))
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
