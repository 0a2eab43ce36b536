"""What a vote reads of a built ARC dataset, beside `arc_data.dataset`: the augmentation table by
puzzle identifier, and every task's un-augmented test examples (dihedral 0, identity colours) as
token rows, read by seek + read instead of whole arrays.

The table comes from `augmentations.npz` (`dataset.load_augmentations`) or, for a dataset built by
HRM's own builder (which writes none), from the names in `identifiers.json`
(`<task>_t<tid>_<10 digits>`). Every problem is one DatasetError naming the file.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.errors import DatasetError
from arc_data.files.jsonio import parse_json
from arc_data.files.names import why_not_a_file

IDENTITY_COLOURS = np.arange(10, dtype=np.uint8)


def inverse_colour_table(colour_map: np.ndarray) -> np.ndarray:
    """colour_map [m, 10] (original -> augmented) -> inverse [m, 10] uint8 (augmented -> original):
    `np.argsort(colour_map, axis=1, kind="stable")` as uint8. A permutation's inverse is scattered
    (one scatter of every row's colours, not argsort's int64 [m, 10]: 0.02 s -> 0.005 s at 120k rows); a row that
    is not a permutation of 0..9 is argsorted."""
    cm = np.asarray(colour_map)
    if cm.ndim != 2 or cm.shape[1] != 10 or not cm.size or cm.dtype.kind not in "iu" or cm.min() < 0 or cm.max() > 9:
        return np.argsort(cm, axis=1, kind="stable").astype(np.uint8)
    inv = np.full(cm.shape, 255, np.uint8)  # one scatter of every row's 10 colours (a repeated one leaves a 255)
    inv.reshape(-1)[(np.arange(0, 10 * len(cm), 10)[:, None] + cm).reshape(-1)] = np.tile(IDENTITY_COLOURS, len(cm))
    other = np.flatnonzero((inv == 255).any(axis=1))  # a colour never mapped to: not a permutation
    inv[other] = np.argsort(cm[other], axis=1, kind="stable")
    return inv


@dataclass(frozen=True)
class AugTable:
    """The augmentation table, indexed by puzzle identifier (arc_data.format docstring)."""

    base_task: np.ndarray  # int32 [m], -1 for the blank row
    dihedral: np.ndarray  # uint8 [m]
    colour_map: np.ndarray  # uint8 [m, 10], original colour k -> colour_map[k]
    task_names: list[str]

    def __len__(self) -> int:
        return int(self.base_task.shape[0])

    @functools.cached_property
    def inv_colour(self) -> np.ndarray:
        """uint8 [m, 10]: augmented colour -> original colour."""
        return inverse_colour_table(self.colour_map)

    def is_identity(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 1:
            return (self.dihedral[ids] == 0) & (self.colour_map[ids] == IDENTITY_COLOURS).all(axis=-1)
        out = self.dihedral[ids] == 0
        kept = np.flatnonzero(out)  # the colour maps of dihedral 0's rows only (an eighth of an ARC build's)
        out[kept] = (self.colour_map[ids[kept]] == IDENTITY_COLOURS).all(axis=-1)
        return out


def table_from_names(names: list[str]) -> AugTable:
    """Parse HRM names (`<task>_t<tid>_<10 digits>`) into a table; for datasets built by HRM's own
    builder, which has no augmentations.npz."""
    m = len(names)
    base = np.full(m, -1, dtype=np.int32)
    dihedral = np.zeros(m, dtype=np.uint8)
    colour_map = np.tile(IDENTITY_COLOURS, (m, 1))
    task_index: dict[str, int] = {}
    for i, name in enumerate(names):
        if i == fmt.BLANK_ID:
            continue
        parts = name.split(fmt.AUG_SEPARATOR)
        if len(parts) >= 3 and parts[-2][:1] == "t" and len(parts[-1]) == 10 and parts[-1].isdigit():
            task = fmt.AUG_SEPARATOR.join(parts[:-2])
            dihedral[i] = int(parts[-2][1:])
            colour_map[i] = [int(c) for c in parts[-1]]
        else:
            task = name
        base[i] = task_index.setdefault(task, len(task_index))
    return AugTable(base, dihedral, colour_map, list(task_index))


def load_aug_table(data_dir: Path) -> AugTable:
    """The dataset's augmentation table, checked (dihedral ids 0..7, colour maps permutations)."""
    from arc_data.dataset import load_augmentations  # lazy: `vote --help` skips it

    path = data_dir / fmt.AUGMENTATIONS_FILE
    if path.is_file():
        z = load_augmentations(data_dir)
        table = AugTable(z.base_task.astype(np.int32), z.dihedral.astype(np.uint8), z.colour_map.astype(np.uint8),
                         [str(s) for s in z.task_names])
    else:
        ids = data_dir / fmt.IDENTIFIERS_FILE
        if not ids.is_file():
            raise DatasetError(f"{data_dir}: neither {fmt.AUGMENTATIONS_FILE} nor {fmt.IDENTIFIERS_FILE} found")
        table = table_from_names(parse_json(ids.read_bytes(), str(ids)))
    if (table.dihedral > 7).any():
        raise DatasetError(f"{path}: dihedral ids outside 0..7")
    rows = np.flatnonzero(table.base_task >= 0)
    if not all_permutations(table.colour_map[rows]):
        raise DatasetError(f"{path}: a colour_map row is not a permutation of 0..9")
    return table


def all_permutations(cm: np.ndarray) -> bool:
    """Whether every row of `cm` [n, 10] is a permutation of 0..9 (`np.sort(cm, axis=1) == 0..9` for
    all): every value 0..9 and all ten present, a bit each (0.002 s at 126k rows; sorting them took 0.02 s)."""
    if cm.ndim != 2 or cm.shape[1] != 10 or cm.dtype.kind not in "iu":
        return bool((np.sort(cm, axis=1) == IDENTITY_COLOURS).all())
    if not cm.size:
        return True
    if cm.min() < 0 or cm.max() > 9:
        return False
    seen = np.zeros(len(cm), np.uint16)
    for k in range(10):
        seen |= np.left_shift(np.uint16(1), cm[:, k].astype(np.uint16))
    return bool((seen == 0x3FF).all())


def read_rows(path: Path, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Rows [a, b) for each range of a 2-D .npy file, concatenated, by seek + read.

    Not np.load(mmap_mode="r"): with the kernel's read-ahead, touching 400 scattered rows of an
    ARC-1-sized file maps hundreds of MB into the process.
    """
    if not path.is_file():  # a FIFO would block open() forever
        raise DatasetError(f"{path}: {why_not_a_file(path)}")
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except (ValueError, EOFError) as e:
            raise DatasetError(f"{path}: not a readable .npy ({e})") from None
        if len(shape) != 2 or fortran or dtype.hasobject:
            raise DatasetError(f"{path}: expected a C-order 2-D array, got shape {shape}, dtype {dtype}")
        offset, row_bytes = f.tell(), shape[1] * dtype.itemsize
        size = os.fstat(f.fileno()).st_size
        if size < offset + shape[0] * row_bytes:
            raise DatasetError(f"{path}: truncated ({size:,} bytes, its header says {shape[0]:,} rows of "
                               f"{row_bytes} bytes after a {offset}-byte header)")
        parts = []
        for a, b in ranges:
            if not 0 <= a <= b <= shape[0]:
                raise DatasetError(f"{path}: rows [{a}, {b}) outside its {shape[0]} rows")
            f.seek(offset + a * row_bytes)
            parts.append(np.frombuffer(f.read((b - a) * row_bytes), dtype=dtype).reshape(b - a, shape[1]))
    return np.concatenate(parts) if parts else np.empty((0, shape[1]), dtype=dtype)


def read_examples(data_dir: Path, split: str, ranges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of the example ranges: seek+read in the materialised layout; the compact
    layout encodes them on the fly through `dataset.open_split`."""
    d = data_dir / split
    try:
        if (d / fmt.INPUTS_FILE).exists():
            return read_rows(d / fmt.INPUTS_FILE, ranges), read_rows(d / fmt.LABELS_FILE, ranges)
        from arc_data.dataset import open_split  # lazy: `vote --help` skips it

        idx = np.concatenate([np.arange(a, b) for a, b in ranges]) if ranges else np.empty(0, np.int64)
        return open_split(data_dir, split).examples(idx)
    except OSError as e:
        raise DatasetError(f"{d}: cannot read the {split} split ({e})") from None


@dataclass(frozen=True)
class Originals:
    """Every task's un-augmented test examples, in dataset order (one puzzle per task)."""

    names: list[str]  # task name of each original puzzle
    puzzle_ids: np.ndarray  # int64 [t]: their puzzle identifiers
    counts: np.ndarray  # int64 [t]: test examples of each
    inputs: np.ndarray  # uint8 [n, L]: the examples, task by task
    labels: np.ndarray  # uint8 [n, L]


def read_originals(data_dir: Path, split: str, table: AugTable) -> Originals:
    """The un-augmented copy (dihedral 0, identity colours) of every task of the split; an error
    when a task has none or two, or the split names puzzle ids outside the table."""
    d = data_dir / split
    try:
        pids = np.load(d / fmt.PUZZLE_IDS_FILE)
        pidx = np.load(d / fmt.PUZZLE_INDICES_FILE)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{d}: cannot read the {split} split ({e})") from None
    if pidx.shape != (len(pids) + 1,):
        raise DatasetError(f"{d}: {fmt.PUZZLE_INDICES_FILE} has {len(pidx)} entries for {len(pids)} puzzles")
    if pids.size and (int(pids.max()) >= len(table) or int(pids.min()) < 0):
        raise DatasetError(f"{d}: puzzle ids outside the augmentation table ({len(table)} rows)")
    originals = np.flatnonzero(table.is_identity(pids) & (table.base_task[pids] >= 0))
    # the tasks with rows but no un-augmented copy, ascending (as np.setdiff1d of np.unique's, whose
    # import of numpy.ma a vote would pay for nothing)
    tasks = table.base_task[pids]
    tasks = tasks[tasks >= 0]
    seen = np.zeros(int(tasks.max()) + 1 if tasks.size else 0, dtype=bool)
    seen[tasks] = True
    seen[table.base_task[pids[originals]]] = False
    missing = np.flatnonzero(seen)
    if missing.size:
        names = sorted(table.task_names[t] for t in missing)
        raise DatasetError(f"{d}: {len(names)} task(s) have no un-augmented copy, e.g. {names[:3]}")
    if originals.size == 0:
        raise DatasetError(f"{d}: no tasks found in the {split} split")
    names = [table.task_names[table.base_task[pids[p]]] for p in originals]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DatasetError(f"{d}: task '{name}' has two un-augmented copies")
        seen.add(name)
    ranges = [(int(pidx[p]), int(pidx[p + 1])) for p in originals]
    inputs, labels = read_examples(data_dir, split, ranges)
    return Originals(names, pids[originals].astype(np.int64), np.array([b - a for a, b in ranges], np.int64),
                     inputs, labels)
