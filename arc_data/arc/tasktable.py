"""One generated source's tasks as rows of a table whose columns are in the build's spill: what lets
`build-arc` read a source of any size in memory that does not grow with it.

`TaskTable`: one generated source (`rearc:` / `arcgen:` / `barc:`) read with a spill. Its pairs'
cells and a per-grid index (one int64 a grid: absolute cell offset << 10 | h << 5 | w, sides <= 30)
are in the spill file, and so are its columns: per task its unit, its first pair within the unit
and its demonstrations (int32 each); per unit where its index starts, its file, line, imitated ids
and name. The columns grow a block at a time while the source is read (`spill.Appender`) and
`finish` makes each one array in the spill. In memory: a block of each column while reading, and
the distinct imitated-id tuples of the units that imitate more than their own name (BARC's seeds;
a RE-ARC or ARC-GEN file imitates the task it is named after, `-1` in `unit_imit`).

Tasks are kept in name order, as `load_sources` sorts every source: the order they are added in
when it is already sorted, which is the usual case; else (a unit of more than 10,000 tasks, whose
5-digit numbers sort before 4-digit ones, or units out of name order) a stable sort of the names as
fixed-width bytes, the same order as Python's for these ASCII names, made in memory (the names and
the order, about 40 bytes a task: the one case that holds something a task).

The build's task list over tables and plain lists is `tasklist.TaskList`.
"""

from __future__ import annotations

import numpy as np

from arc_data.arc.sources import Task
from arc_data.arc.spill import Appender, Spill
from arc_data.errors import ArcError, DatasetError
from arc_data.files.names import check_task_name
from arc_data.jit import njit

OWN_NAME = -1  # unit_imit of a unit that imitates the task it is named after (a RE-ARC / ARC-GEN file)
SORTED_TASKS = 10_000  # tasks a unit may have with its names in order (`-9999` sorts after `-10000`)


@njit(cache=True, nogil=True)
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
        self.unit, self.first, self.num_train = (Appender(spill, np.int32) for _ in range(3))  # a task each
        self.unit_index = Appender(spill, np.int64)  # a unit each: where its grid index starts in the spill
        self.unit_file, self.unit_line, self.unit_imit = (Appender(spill, np.int32) for _ in range(3))
        # unit u's name: unit_names[unit_name_at[u]:unit_name_at[u + 1]], UTF-8; file f's likewise
        self.unit_names, self.unit_name_at = Appender(spill, np.uint8), Appender(spill, np.int64)
        self.file_names, self.file_name_at = Appender(spill, np.uint8), Appender(spill, np.int64)
        self.unit_name_at.append(0)
        self.file_name_at.append(0)
        self.imitations: list[tuple[str, ...]] = []  # unit_imit's tuples (but OWN_NAME)
        self._imit_ids: dict[tuple[str, ...], int] = {}
        self._last_file: str | None = None
        self._last_name = ""
        self._in_order = True
        self._bad_name: tuple[str, str] | None = None  # (name, where) of the first unit named not plainly

    # -- building --------------------------------------------------------------------------------

    def add_unit(self, unit: str, imitates: tuple[str, ...], file: str, line: int, cells: np.ndarray,
                 start: np.ndarray, hw: np.ndarray, order: np.ndarray) -> int:
        """One unit's pairs (grid g: cells[start[g]:] of shape hw[g]), kept in `order` (shuffled,
        cut to `examples`), cut into tasks; returns the pairs left over (a last chunk of test_pairs
        or fewer). Its kept cells, their index and its columns' rows go to the spill."""
        grids = np.stack([2 * order, 2 * order + 1], axis=1).ravel()  # the unit's grids in pair order
        size = hw[grids, 0] * hw[grids, 1]
        new_start = np.cumsum(size) - size
        kept = np.empty(int(size.sum()), np.uint8)  # no index a cell: a unit's temporaries stay small
        copy_runs(cells, start[grids].astype(np.int64), kept, new_start.astype(np.int64), size.astype(np.int64))
        at = self.spill.append(kept)
        entries = ((at + new_start) << 10) | (hw[grids, 0] << 5) | hw[grids, 1]
        u = self.unit_index.length
        self.unit_index.append(self.spill.append(entries.astype(np.int64).view(np.uint8), align=8))
        if file != self._last_file:
            self.file_names.extend(np.frombuffer(file.encode(), np.uint8))
            self.file_name_at.append(self.file_names.length)
            self._last_file = file
        self.unit_file.append(self.file_name_at.length - 2)
        self.unit_line.append(line)
        if imitates == (unit,):
            self.unit_imit.append(OWN_NAME)
        else:
            self.unit_imit.append(self._imit_ids.setdefault(imitates, len(self._imit_ids)))
            if len(self._imit_ids) > len(self.imitations):
                self.imitations.append(imitates)
        self.unit_names.extend(np.frombuffer(unit.encode(), np.uint8))
        self.unit_name_at.append(self.unit_names.length)
        k, n_test = self.pairs_per_task, self.test_pairs
        first = np.arange(0, len(order), k)
        chunk = np.minimum(k, len(order) - first)
        made = chunk > n_test  # a last chunk of test_pairs or fewer is left over
        first, chunk = first[made], chunk[made]
        if len(first):
            self.unit.extend(np.full(len(first), u))
            self.first.extend(first)
            self.num_train.extend(chunk - n_test)
            name, last = (f"{self.kind}-{unit}-{int(f) // k:04d}" for f in (first[0], first[-1]))
            if self._bad_name is None:
                where = f"{file}: line {line}" if line else file
                try:
                    check_task_name(name, where)  # a task's name is plain iff its unit's is
                except DatasetError:
                    self._bad_name = (name, where)  # raised by `finish`, after every unit is read
            if name <= self._last_name or len(first) > SORTED_TASKS:
                self._in_order = False
            self._last_name = last
        return len(order) - int(chunk.sum())

    def finish(self) -> TaskTable:
        """The columns made arrays in the spill, tasks in name order, names checked (plain, unique)."""
        if self._bad_name is not None:
            check_task_name(*self._bad_name)
        for col in ("unit", "first", "num_train", "unit_index", "unit_file", "unit_line", "unit_imit",
                    "unit_names", "unit_name_at", "file_names", "file_name_at"):
            setattr(self, col, getattr(self, col).finish())
        del self._imit_ids
        if not self._in_order:
            names = np.array(self.names(np.arange(len(self))), dtype="S")
            order = np.argsort(names, kind="stable")
            names = names[order]
            dup = np.nonzero(names[1:] == names[:-1])[0]
            if len(dup):
                i = int(order[dup[0] + 1])
                raise ArcError(f"{self.file(i)}: task {self.name(i)}: the same task id is also in "
                               f"{self.file(int(order[dup[0]]))}")
            for col in (self.unit, self.first, self.num_train):
                col[:] = col[order]
        self.spill.release()
        return self

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.unit)

    def _unit_name(self, u: int) -> str:
        return self.unit_names[self.unit_name_at[u]:self.unit_name_at[u + 1]].tobytes().decode()

    def _name(self, u: int, first: int) -> str:
        return f"{self.kind}-{self._unit_name(u)}-{first // self.pairs_per_task:04d}"

    def _file(self, u: int) -> str:
        f = int(self.unit_file[u])
        path = self.file_names[self.file_name_at[f]:self.file_name_at[f + 1]].tobytes().decode()
        line = int(self.unit_line[u])
        return f"{path}: line {line}" if line else path

    def name(self, i: int) -> str:
        return self._name(int(self.unit[i]), int(self.first[i]))

    def names(self, rows: np.ndarray) -> list[str]:
        """The names of `rows` (a chunk of them), each unit's name read once."""
        prefix: dict[int, str] = {}
        out = []
        for u, j in zip(self.unit[rows].tolist(), (self.first[rows] // self.pairs_per_task).tolist()):
            p = prefix.get(u)
            if p is None:
                p = prefix[u] = f"{self.kind}-{self._unit_name(u)}-"
            out.append(f"{p}{j:04d}")
        return out

    def file(self, i: int) -> str:
        return self._file(int(self.unit[i]))

    def imitates(self, i: int) -> tuple[str, ...]:
        u = int(self.unit[i])
        k = int(self.unit_imit[u])
        return (self._unit_name(u),) if k == OWN_NAME else self.imitations[k]

    def imitates_any(self, rows: np.ndarray, held: set[str]) -> np.ndarray:
        """For each row (a chunk of them): does its task imitate one of `held`?"""
        units = self.unit[rows]
        ids = self.unit_imit[units]
        out = np.zeros(len(rows), bool)
        other = ids != OWN_NAME
        if self.imitations:
            hit = np.array([bool(held.intersection(t)) for t in self.imitations], bool)
            out[other] = hit[ids[other]]
        own = np.nonzero(~other)[0]
        if len(own):
            u, inverse = np.unique(units[own], return_inverse=True)
            out[own] = np.array([self._unit_name(x) in held for x in u.tolist()], bool)[inverse]
        return out

    def imitated(self, rows: np.ndarray) -> dict[str, int]:
        """Real ARC task id -> how many of `rows`' tasks imitate it (a chunk of rows at a time)."""
        units, counts = np.unique(self.unit[rows], return_counts=True)
        out: dict[str, int] = {}
        for u, n in zip(units.tolist(), counts.tolist()):
            k = int(self.unit_imit[u])
            for tid in (self._unit_name(u),) if k == OWN_NAME else self.imitations[k]:
                out[tid] = out.get(tid, 0) + n
        return out

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
