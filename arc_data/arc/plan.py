"""The build plan: packed grids, augmentation table, splits and translation offsets.

A plan holds everything needed to produce every example; the materialised build encodes all of it
to npy files, the compact build stores the plan itself (see `format.py`). Both encode through the
same kernel (`kernels.encode_examples*`), so their bytes agree.

RNG (one `np.random.Generator(PCG64(seed))`), in this order:
  1. trial dihedral ids `integers(0, 8, size=(T, 5*num_aug))`, uint8;
  2. trial colour permutations of 1..9: `permuted(tile(1..9), axis=-1)`, shape (T, 5*num_aug, 9);
  3. train split: one `integers(0, n_examples)` per puzzle (the example left untranslated), then
     per example the row offset `integers(0, 30 - max(h_in, h_out) + 1)`, then the column offset
     likewise (heights/widths after the dihedral transform). The test split draws nothing.
Trials are drawn up front (a fixed budget per task, consumed or not), so the stream does not depend
on which trials are accepted, and tasks can be augmented in parallel. T = number of tasks in
source order (`sources.load_sources`). Not byte-compatible with HRM's legacy-RNG stream (which is
not reproducible itself, spec 1.7), but the same distribution. Steps 2 and 3 are drawn a chunk at a
time (TASK_CHUNK tasks, EXAMPLE_CHUNK examples) from the same stream, which gives the same numbers
as one call (tests/test_generated_stream.py). A generated source's plan keeps every array (grids,
per grid, per task, per identifier, per puzzle, per example) in a temporary file (`spill.py`),
computed, read and written TASK_CHUNK tasks or EXAMPLE_CHUNK examples at a time, the file's pages
handed back after each chunk, so its memory does not grow with the source; its tasks are rows of a
table (`tasktable.py`). Without a spill the same code runs on arrays in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.arc.spill import Spill, save_npz, zeros
from arc_data.arc.splitplan import SplitPlan, split_plan, translate
from arc_data.arc.tasklist import TaskList
from arc_data.arc.tasktable import TaskTable, copy_runs
from arc_data.budget import check_count, check_fits
from arc_data.format import BLANK_NAME, SEQ_LEN, SPLITS, aug_name

TRIAL_FACTOR = 5  # HRM: at most 5 * num_aug trials per task
TASK_CHUNK = 1 << 12  # tasks whose colour-permutation trials are drawn and tried together
EXAMPLE_CHUNK = 1 << 16  # examples whose translation offsets are drawn together (~100 bytes each)
AUGMENT_PIECES = 8  # pieces of a task chunk: one is tried while the next one's permutations are drawn
AUGMENT_THREADS = 2  # worker threads trying them (the main thread draws)
# Distinct augmentations of one task: 8 dihedral transforms x 9! permutations of colours 1-9.
MAX_DISTINCT_AUG = 8 * 362_880 - 1
EMPTY_GRID = np.zeros((0, 0), dtype=np.uint8)  # the output of an unlabelled test input


@dataclass
class Grids:
    """All grids in one buffer: grid g = cells[offset[g]: offset[g] + h*w], shape[g] = (h, w).
    With `spill`, the buffer is a region of that temporary file: whoever reads it a chunk at a time
    calls `release()` after each chunk (a no-op for a buffer in memory)."""

    cells: np.ndarray  # uint8 [sum h*w]
    offset: np.ndarray  # int64 [G]
    shape: np.ndarray  # int64 [G, 2]
    pair_grids: np.ndarray  # int64 [num_pairs, 2]  (input grid, output grid)
    spill: Spill | None = None

    def release(self) -> None:
        if self.spill is not None:
            self.spill.release()

    def save(self, path: Path) -> None:
        """The compact layout's grids.npz."""
        arrays = {"cells": self.cells, "grid_offset": self.offset, "grid_shape": self.shape,
                  "pair_grids": self.pair_grids}
        if self.spill is None:
            np.savez(path, **arrays)
        else:
            save_npz(path, arrays, self.spill)


@dataclass
class Plan:
    tasks: TaskList
    grids: Grids
    task_pairs: np.ndarray  # int64 [T+1]: task t's pairs (demos then tests)
    num_demos: np.ndarray  # int64 [T]
    base_task: np.ndarray  # int32 [num_ids]  (-1 for blank)
    dihedral: np.ndarray  # uint8 [num_ids]
    colour_map: np.ndarray  # uint8 [num_ids, 10]
    task_first_id: np.ndarray  # int64 [T]: id of the task's original puzzle
    num_puzzles: np.ndarray  # int64 [T]: 1 + accepted augmentations
    trials_used: np.ndarray  # int32 [T]
    splits: dict[str, SplitPlan]

    @property
    def num_ids(self) -> int:
        return int(self.dihedral.shape[0])

    def _read(self, arr: np.ndarray):
        """(lo, arr[lo:lo + TASK_CHUNK]) in order, the spill's pages handed back after each."""
        for lo in range(0, len(arr), TASK_CHUNK):
            yield lo, arr[lo:lo + TASK_CHUNK]
            self.grids.release()

    def short_tasks(self, num_puzzles: int) -> dict[int, int]:
        """{task: its puzzles} of the tasks with fewer than `num_puzzles`."""
        return {lo + int(i): int(n[i]) for lo, n in self._read(self.num_puzzles) for i in np.nonzero(n < num_puzzles)[0]}

    def trials(self) -> int:
        """Trials used, all tasks together."""
        return sum(int(u.sum()) for _, u in self._read(self.trials_used))

    def identifiers_json(self) -> bytes:
        """identifiers.json, byte for byte `json.dumps(names) + "\n"`: id -> HRM name, `<blank>`, then
        per task `<task>` and its augmentations `<task>_t<tid>_<map>` (`name_of`)."""
        return b"".join(self.identifier_chunks())

    def write_identifiers(self, path: Path) -> None:
        """identifiers.json written a chunk of tasks at a time (never whole in memory)."""
        with open(path, "wb") as f:
            for chunk in self.identifier_chunks():
                f.write(chunk)

    def identifier_chunks(self):
        """identifiers.json's bytes, TASK_CHUNK tasks at a time. A task's augmented names differ only
        in their fixed-width tail, so each task's are written as one uint8 block."""
        yield f"[{json.dumps(BLANK_NAME)}".encode()
        names = self.tasks.names()
        n_tasks = len(self.task_first_id)
        for lo in range(0, n_tasks, TASK_CHUNK):
            hi = min(n_tasks, lo + TASK_CHUNK)
            a = int(self.task_first_id[lo])
            b = int(self.task_first_id[hi - 1] + self.num_puzzles[hi - 1])
            tail = np.empty((b - a, 15), np.uint8)  # _t<tid>_<10 digits>"
            tail[:, 0] = tail[:, 3] = ord("_")
            tail[:, 1] = ord("t")
            tail[:, 2] = self.dihedral[a:b] + ord("0")
            tail[:, 4:14] = self.colour_map[a:b] + ord("0")
            tail[:, 14] = ord('"')
            parts = []
            for t in range(lo, hi):
                quoted = json.dumps(next(names))
                parts.append(f", {quoted}".encode())
                head = np.frombuffer(f', {quoted[:-1]}'.encode(), np.uint8)
                first, n = int(self.task_first_id[t]) + 1 - a, int(self.num_puzzles[t]) - 1
                block = np.empty((n, len(head) + tail.shape[1]), np.uint8)
                block[:, :len(head)] = head
                block[:, len(head):] = tail[first:first + n]
                parts.append(block.tobytes())
            self.grids.release()
            yield b"".join(parts)
        yield b"]\n"


def pack_grids(tasks, spill: Spill | None = None) -> tuple[Grids, np.ndarray, np.ndarray]:
    """Tasks -> packed grids, task pair ranges [T+1], demo counts [T].

    Two passes (shapes, then cells copied into one buffer allocated once), so packing holds the
    grids once more and nothing per grid (a 400k-pair source: no list of 800k views). A task's
    `train` / `test` is a list of pairs, or a packed sequence of them (`generated.PackedPairs`)
    that gives its grids' shapes (`grid_shapes()`) and copies its cells (`copy_cells(cells, offsets)`)
    without making a grid object each; a generated table's tasks (`tasktable.TaskTable`) are packed
    from its index in the spill, TASK_CHUNK tasks at a time, no task object made. With `spill`, the
    buffer and the per-grid arrays (offset, shape, pair_grids) are allocated in it, and its pages
    handed back every TASK_CHUNK tasks."""
    tl = TaskList.of(tasks)
    num_demos = zeros(spill, (len(tl),), np.int64)
    task_pairs = zeros(spill, (len(tl) + 1,), np.int64)
    t = 0
    for n_train, n_test in tl.count_chunks(TASK_CHUNK):
        num_demos[t:t + len(n_train)] = n_train
        task_pairs[t + 1:t + 1 + len(n_train)] = task_pairs[t] + np.cumsum(n_train + n_test)
        t += len(n_train)
        if spill is not None:
            spill.release()
    n_grids = 2 * int(task_pairs[-1])
    shape = zeros(spill, (n_grids, 2), np.int64)
    g = 0
    for part, entries in _parts(tl, spill):
        if entries is not None:
            shape[g:g + len(entries), 0] = (entries >> 5) & 31
            shape[g:g + len(entries), 1] = entries & 31
            g += len(entries)
            continue
        for t in part:
            for pairs in (t.train, t.test):
                if hasattr(pairs, "grid_shapes"):
                    shape[g:g + 2 * len(pairs)] = pairs.grid_shapes()
                    g += 2 * len(pairs)
                    continue
                for inp, out in pairs:
                    # An unlabelled test input (test_labels=optional) gets an empty 0x0 output: encoded as
                    # an all-PAD label row, which the loader ignores and evaluation reads as "no solution".
                    assert out is not None or t.is_eval, f"{t.file}: task {t.name}: test output missing"
                    shape[g] = inp.shape
                    shape[g + 1] = EMPTY_GRID.shape if out is None else out.shape
                    g += 2
    offset = zeros(spill, (n_grids,), np.int64)  # exclusive cumulative sizes, a chunk at a time
    pair_grids = zeros(spill, (n_grids // 2, 2), np.int64)
    total = 0
    for lo in range(0, n_grids, EXAMPLE_CHUNK):
        size = shape[lo:lo + EXAMPLE_CHUNK, 0] * shape[lo:lo + EXAMPLE_CHUNK, 1]
        ends = np.cumsum(size) + total
        offset[lo:lo + EXAMPLE_CHUNK] = ends - size
        total = int(ends[-1])
        pair_grids.reshape(-1)[lo:lo + EXAMPLE_CHUNK] = np.arange(lo, lo + len(size))
        if spill is not None:
            spill.release()
    cells = np.empty(total, np.uint8) if spill is None else spill.allocate(total)
    g = 0
    for part, entries in _parts(tl, spill):
        if entries is not None:
            n = len(entries)
            copy_runs(spill.cells(), entries >> 10, cells, offset[g:g + n], ((entries >> 5) & 31) * (entries & 31))
            g += n
            continue
        for t in part:
            for pairs in (t.train, t.test):
                if hasattr(pairs, "copy_cells"):
                    pairs.copy_cells(cells, offset[g:g + 2 * len(pairs)])
                    g += 2 * len(pairs)
                    continue
                for inp, out in pairs:
                    cells[offset[g]:offset[g] + inp.size] = inp.ravel()
                    if out is not None:
                        cells[offset[g + 1]:offset[g + 1] + out.size] = out.ravel()
                    g += 2
    grids = Grids(cells, offset, shape, pair_grids, spill)
    grids.release()
    return grids, task_pairs, num_demos


def _parts(tl: TaskList, spill: Spill | None):
    """TASK_CHUNK tasks at a time, in order: (None, their grid index entries) for a table's rows,
    (their tasks, None) for a plain list's; the spill's pages handed back after each chunk."""
    for p in tl.parts:
        for lo in range(0, len(p.rows), TASK_CHUNK):
            rows = p.rows[lo:lo + TASK_CHUNK]
            if isinstance(p.source, TaskTable):
                yield None, p.source.grid_entries(rows)
            else:
                yield [TaskList._task(p, j) for j in range(lo, lo + len(rows))], None
            if spill is not None:
                spill.release()


def draw_dihedrals(rng: np.random.Generator, num_tasks: int, num_trials: int, spill: Spill | None) -> np.ndarray:
    """RNG step 1, `rng.integers(0, 8, size=(num_tasks, num_trials), dtype=np.uint8)`, drawn a multiple
    of 4 rows at a time (TASK_CHUNK rounded up), into the spill with `spill`. numpy draws a bounded
    uint8 from one byte of a 32-bit word (never rejected for 8 values) and drops the rest of the last
    word at the end of a call, so calls of a multiple of 4 values give one call's values and leave
    the stream where one call leaves it (tested; other sizes would not)."""
    tids = zeros(spill, (num_tasks, num_trials), np.uint8)
    rows = -(-TASK_CHUNK // 4) * 4
    for lo in range(0, num_tasks, rows):
        tids[lo:lo + rows] = rng.integers(0, 8, size=(min(rows, num_tasks - lo), num_trials), dtype=np.uint8)
        if spill is not None:
            spill.release()
    return tids


def augment_in_chunks(rng: np.random.Generator, grids: Grids, task_pairs: np.ndarray,
                      num_aug: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RNG steps 1-2 and the augmentation, TASK_CHUNK tasks at a time: every task's trial dihedral
    ids (T x 5 num_aug bytes, `draw_dihedrals`), then each chunk's colour permutations drawn, tried
    and only the accepted ones kept. `permuted` shuffles row after row from one stream, so drawing it a chunk of
    rows at a time gives what one call over all tasks gives (tested): the plan of the in-memory
    build, with the trials' memory bounded by a chunk. A chunk is drawn AUGMENT_PIECES pieces at a
    time, each piece tried on AUGMENT_THREADS worker threads while the next one is drawn (the
    kernels run without the GIL: on two cores 0.12 s became 0.07 s at ARC-1 num_aug=200).
    Returns the trial dihedral ids [T, 5 num_aug], accepted trial ids [T, num_aug] (-1 padded),
    their colour permutations [T, num_aug, 9], accepted counts [T] and trials used [T]."""
    from concurrent.futures import ThreadPoolExecutor  # lazy: threads stay off viz-arc --help

    from arc_data.arc.kernels import permuted_colours  # lazy: numba kernels stay off viz-arc --help

    n_tasks = len(task_pairs) - 1
    spill = grids.spill  # every row of acc, n_acc and used is set below
    trial_tid = draw_dihedrals(rng, n_tasks, TRIAL_FACTOR * num_aug, spill)
    acc = zeros(spill, (n_tasks, num_aug), np.int32)
    acc_perm = zeros(spill, (n_tasks, num_aug, 9), np.uint8)
    n_acc = zeros(spill, (n_tasks,), np.int32)
    used = zeros(spill, (n_tasks,), np.int32)
    with ThreadPoolExecutor(AUGMENT_THREADS, thread_name_prefix="arc-augment") as pool:
        for lo in range(0, n_tasks, TASK_CHUNK):
            hi = min(n_tasks, lo + TASK_CHUNK)
            step = -(-(hi - lo) // AUGMENT_PIECES)
            pieces = []
            for a in range(lo, hi, step):
                b = min(hi, a + step)
                perm = permuted_colours(rng, (b - a, TRIAL_FACTOR * num_aug))  # rng.permuted's values
                pieces.append((a, b, perm, pool.submit(augment, grids, task_pairs[a:b + 1], trial_tid[a:b], perm,
                                                       num_aug)))
            for a, b, perm, job in pieces:
                acc[a:b], n_acc[a:b], used[a:b] = job.result()
                t_idx, k = np.nonzero(acc[a:b] >= 0)
                acc_perm[a + t_idx, k] = perm[t_idx, acc[a + t_idx, k]]
            grids.release()
    return trial_tid, acc, acc_perm, n_acc, used


def augment(grids: Grids, task_pairs: np.ndarray, trial_tid: np.ndarray, trial_perm: np.ndarray,
            num_aug: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accepted trial ids [T, num_aug] (-1 padded), accepted counts [T], trials used [T]: the
    kernel, on the caller's thread, without the GIL (a trial costs a few hundred nanoseconds)."""
    from arc_data.arc.kernels import augment_tasks  # lazy: numba kernels stay off viz-arc --help

    return augment_tasks(grids.cells, grids.offset, grids.shape, grids.pair_grids, task_pairs, trial_tid,
                         trial_perm, np.int64(num_aug))


def check_request(tasks, num_aug: int, materialize: bool, out: Path) -> None:
    """Refuse, before `make_plan` allocates anything, a num_aug that cannot exist or that this
    machine cannot hold: the trial draws (T x 5 num_aug x 10 bytes), the accepted ids (8 bytes each),
    the augmentation table (15 bytes an id), about 50 bytes an example while planning; on disk 2 x 900
    bytes an example (materialized) or the compact plan. Examples are counted as if every task got
    all num_aug augmentations (an upper bound: some tasks have fewer distinct ones)."""
    check_count("num_aug", num_aug, MAX_DISTINCT_AUG, "8 dihedral transforms x 9! colour permutations per task",
                "lower num_aug")
    tl = TaskList.of(tasks)
    n_tasks = len(tl)
    copies = n_tasks * (num_aug + 1)
    examples = (num_aug + 1) * sum(int((n_train + n_test).sum()) for n_train, n_test in tl.count_chunks(TASK_CHUNK))
    memory = n_tasks * num_aug * (TRIAL_FACTOR * 10 + 8) + copies * 15 + examples * 50
    disk = copies * 19 + examples * (2 * SEQ_LEN if materialize else 14)
    check_fits(f"num_aug={num_aug} over {n_tasks:,} tasks (up to {examples:,} examples)", memory=memory, disk=disk,
               at=out.parent, fix="lower num_aug" + ("" if not materialize else " (or materialize=false, the compact plan)"))


def make_plan(tasks, num_aug: int, seed: int, spill: Spill | None = None) -> Plan:
    """The plan of `tasks` (a list of Task or a `TaskList`); with `spill`, their grids are packed
    into it (`pack_grids`)."""
    tasks = TaskList.of(tasks)
    rng = np.random.Generator(np.random.PCG64(seed))
    grids, task_pairs, num_demos = pack_grids(tasks, spill)
    trial_tid, acc, acc_perm, n_acc, used = augment_in_chunks(rng, grids, task_pairs, num_aug)
    num_puzzles, task_first_id, base_task, dihedral, colour_map = _id_table(trial_tid, acc, acc_perm, n_acc, spill)
    del trial_tid, acc, acc_perm
    is_eval = tasks.is_eval
    splits = {split: split_plan(split == "test", task_pairs, num_demos, is_eval, task_first_id, num_puzzles, spill,
                                TASK_CHUNK) for split in SPLITS}
    translate(rng, splits["train"], grids.shape, grids.pair_grids, dihedral, spill, EXAMPLE_CHUNK)
    return Plan(tasks, grids, task_pairs, num_demos, base_task, dihedral, colour_map, task_first_id,
                num_puzzles, used, splits)


def _id_table(trial_tid: np.ndarray, acc: np.ndarray, acc_perm: np.ndarray, n_acc: np.ndarray,
              spill: Spill | None) -> tuple[np.ndarray, ...]:
    """The augmentation table from the accepted trials, TASK_CHUNK tasks at a time (in the spill,
    with `spill`): num_puzzles [T], task_first_id [T], base_task, dihedral, colour_map [num_ids].
    Row 0 is the blank; then per task its original (tid 0, identity) and its accepted trials, in
    the order accepted."""
    n_tasks = len(n_acc)
    num_puzzles, task_first_id = zeros(spill, (n_tasks,), np.int64), zeros(spill, (n_tasks,), np.int64)
    num_ids = 1
    for lo in range(0, n_tasks, TASK_CHUNK):
        n = 1 + n_acc[lo:lo + TASK_CHUNK].astype(np.int64)
        num_puzzles[lo:lo + TASK_CHUNK] = n
        task_first_id[lo:lo + TASK_CHUNK] = num_ids + np.cumsum(n) - n
        num_ids += int(n.sum())
    base_task, dihedral = zeros(spill, (num_ids,), np.int32), zeros(spill, (num_ids,), np.uint8)
    colour_map = zeros(spill, (num_ids, 10), np.uint8)
    base_task[0], colour_map[0] = -1, np.arange(10)
    for lo in range(0, n_tasks, TASK_CHUNK):
        hi = min(n_tasks, lo + TASK_CHUNK)
        a, b = int(task_first_id[lo]), int(task_first_id[hi - 1] + num_puzzles[hi - 1])
        base_task[a:b] = np.repeat(np.arange(lo, hi, dtype=np.int32), num_puzzles[lo:hi])
        colour_map[a:b] = np.arange(10, dtype=np.uint8)
        t_idx, k = np.nonzero(acc[lo:hi] >= 0)  # row-major: task, then acceptance order
        rows = task_first_id[lo + t_idx] + 1 + k
        dihedral[rows] = trial_tid[lo + t_idx, acc[lo + t_idx, k]]
        colour_map[rows, 1:] = acc_perm[lo + t_idx, k]
        if spill is not None:
            spill.release()
    return num_puzzles, task_first_id, base_task, dihedral, colour_map


def name_of(plan: Plan, pid: int) -> str:
    """HRM name of one puzzle id (the reference for `Plan.identifiers`)."""
    t = int(plan.base_task[pid])
    if pid == plan.task_first_id[t]:
        return plan.tasks.name(t)
    return aug_name(plan.tasks.name(t), int(plan.dihedral[pid]), plan.colour_map[pid])
