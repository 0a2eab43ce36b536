"""Read a built dataset (ARC, Sudoku, Maze or any HRM-layout set), materialised or compact, through one API.

    split = open_split(data_dir, "train")
    inputs, labels = split.examples(np.arange(16))     # uint8 [16, split.meta.seq_len] each
    split.meta                                          # DatasetMeta: dataset.json, typed
    split.task                                          # "arc" | "sudoku" | "maze" | "generic"

Shapes and token ids come from each split's `dataset.json` (`seq_len`, `vocab_size`, `pad_id`,
`ignore_label_id`, `blank_identifier_id`, `num_puzzle_identifiers`), validated at open time; a bad
field or array is a one-line DatasetError naming the file and field.

Token range (every token < vocab_size): arrays up to TOKEN_CHECK_FULL_BYTES each are scanned whole
at open (chunked max, about 50 ms per 256 MB); larger ones (ARC-1 train is 3.3 GB per array) get
their first and last TOKEN_CHECK_CHUNK rows checked at open and every batch `examples()` returns
checked as it is read, so opening stays cheap and a bad byte is still caught before it reaches a
model. `verify_tokens()` scans everything on demand.

Materialised splits memory-map `all__inputs.npy`/`all__labels.npy`; compact splits (ARC only)
encode the requested examples on the fly with the serial numba kernel (no thread pool, so it is
safe inside forked DataLoader workers). Both return the same bytes for the same build options and seed.
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.errors import DatasetError
from arc_data.files.jsonio import parse_json
from arc_data.files.names import why_not_a_file

META_KEYS = ("pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
             "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "sets")
META_INT_KEYS = ("pad_id", "blank_identifier_id", "vocab_size", "seq_len", "num_puzzle_identifiers", "total_groups")
TOKEN_CHECK_FULL_BYTES = 1 << 28  # arrays up to 256 MB are scanned whole at open
TOKEN_CHECK_CHUNK = 1 << 16  # rows per scanned block
# HRM's ARC names: an ARC-AGI task id, or any task with HRM's / TRM's augmentation suffix
_ARC_NAME = re.compile(r"^[0-9a-f]{8}($|_|\|)|(_|\|\|\|)t[0-7](_|\|\|\|)[0-9]{10}$")


def _bad(path: Path, problem: str) -> DatasetError:
    return DatasetError(f"{path}: {problem}")


def _not_a_file(path: Path) -> DatasetError:
    if not os.path.lexists(path):
        return _bad(path, "missing (not a built dataset, or a half-written one?)")
    return _bad(path, why_not_a_file(path))  # a FIFO, a device, a folder, a symlink loop: never opened


def _load_json(path: Path) -> object:
    if not path.is_file():
        raise _not_a_file(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _bad(path, f"unreadable ({e.strerror})") from None
    return parse_json(data, str(path))


def _load_npy(path: Path, mmap: bool = False, ndim: int | None = None) -> np.ndarray:
    if not path.is_file():
        raise _not_a_file(path)
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _bad(path, f"unreadable or truncated .npy ({e})") from None
    if ndim is not None and arr.ndim != ndim:
        raise _bad(path, f"expected a {ndim}-D array, got shape {arr.shape}")
    return arr


def load_npz(path: Path, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The arrays `keys` (None: all) of an .npz, every member read in full: a missing, truncated or
    corrupt file (not a zip, a bad CRC, a member cut short, a pickled object) is one DatasetError."""
    if not path.is_file():
        raise _not_a_file(path)
    try:
        # np.load(path) leaks its open file when the zip is unreadable; given a file, it leaves closing to us
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            keys = tuple(z.files) if keys is None else keys
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise _bad(path, f"missing arrays {missing}")
            return {k: z[k] for k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise _bad(path, f"unreadable or truncated .npz ({type(e).__name__}: {e})") from None


def layout(data_dir: str | Path) -> str:
    """'materialized' or 'compact' (a dataset from HRM's own builder has no manifest: materialized)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise _bad(root, "no such dataset directory")
    manifest = root / fmt.MANIFEST_FILE
    if manifest.is_file():
        lay = _load_json(manifest).get("layout", "materialized")  # type: ignore[union-attr]
        if lay not in ("materialized", "compact"):
            raise _bad(manifest, f"unknown layout {lay!r}")
        return lay
    return "materialized"


def load_identifiers(data_dir: str | Path) -> list[str]:
    """id -> puzzle name (`identifiers.json`; 0 = `<blank>`)."""
    path = Path(data_dir) / fmt.IDENTIFIERS_FILE
    ids = _load_json(path)
    if not isinstance(ids, list) or not ids or ids[0] != fmt.BLANK_NAME:
        raise _bad(path, f"expected a JSON list starting with {fmt.BLANK_NAME!r}")
    return ids


@dataclass(frozen=True)
class Augmentations:
    """The augmentation table (`augmentations.npz`), indexed by puzzle identifier (row 0 = blank)."""

    base_task: np.ndarray  # int32 [num_ids], index into task_names (-1 for blank)
    dihedral: np.ndarray  # uint8 [num_ids]
    colour_map: np.ndarray  # uint8 [num_ids, 10]: original colour k -> colour_map[k]
    task_names: np.ndarray  # str [num_tasks]

    def __len__(self) -> int:
        return int(self.dihedral.shape[0])


def load_augmentations(data_dir: str | Path) -> Augmentations:
    path = Path(data_dir) / fmt.AUGMENTATIONS_FILE
    z = load_npz(path, ("base_task", "dihedral", "colour_map", "task_names"))
    n = z["dihedral"].shape[0]
    if z["base_task"].shape != (n,) or z["colour_map"].shape != (n, 10):
        raise _bad(path, "inconsistent shapes: base_task, dihedral and colour_map must have one row per id")
    return Augmentations(z["base_task"], z["dihedral"], z["colour_map"], z["task_names"])


@dataclass(frozen=True)
class DatasetMeta:
    """A split's `dataset.json` (HRM's fields, plus TRM's `total_puzzles` where written), typed and
    validated: the one place readers take a dataset's shapes and token ids from (`split.meta`)."""

    pad_id: int
    ignore_label_id: int | None  # HRM: Optional (None: no label is ignored)
    blank_identifier_id: int
    vocab_size: int
    seq_len: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    sets: tuple[str, ...]
    total_puzzles: int | None = None


def read_meta(path: Path) -> DatasetMeta:
    """A split's dataset.json, validated (fields present, integers, non-negative, consistent)."""
    meta = _load_json(path)
    if not isinstance(meta, dict):
        raise _bad(path, "expected a JSON object")
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise _bad(path, f"missing field(s) {', '.join(missing)}")
    for k in META_INT_KEYS + ("ignore_label_id",) + (("total_puzzles",) if "total_puzzles" in meta else ()):
        v = meta[k]
        if k == "ignore_label_id" and v is None:  # HRM: Optional (no label is ignored)
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            raise _bad(path, f"field {k} = {v!r} is not an integer")
        if v < 0:
            raise _bad(path, f"field {k} = {v} is negative")
    for k in ("vocab_size", "seq_len", "num_puzzle_identifiers"):
        if meta[k] < 1:
            raise _bad(path, f"field {k} = {meta[k]} must be >= 1")
    if meta["pad_id"] >= meta["vocab_size"]:
        raise _bad(path, f"field pad_id = {meta['pad_id']} is not below vocab_size = {meta['vocab_size']}")
    if meta["blank_identifier_id"] >= meta["num_puzzle_identifiers"]:
        raise _bad(path, f"field blank_identifier_id = {meta['blank_identifier_id']} is not below "
                         f"num_puzzle_identifiers = {meta['num_puzzle_identifiers']}")
    mpe = meta["mean_puzzle_examples"]
    if not isinstance(mpe, (int, float)) or isinstance(mpe, bool) or not mpe >= 0:
        raise _bad(path, f"field mean_puzzle_examples = {mpe!r} is not a non-negative number")
    sets = meta["sets"]
    if not isinstance(sets, list) or fmt.SET_NAME not in sets:
        raise _bad(path, f"field sets = {sets!r}: expected a list holding {fmt.SET_NAME!r} (the only set read)")
    return DatasetMeta(**{k: meta[k] for k in META_KEYS if k != "sets"}, sets=tuple(sets),
                       total_puzzles=meta.get("total_puzzles"))


def _first_out_of_range(arr: np.ndarray, vocab: int, lo: int = 0, hi: int | None = None) -> int:
    """Row (in [lo, hi)) of the first token outside [0, vocab), or -1; chunked, so memory stays small."""
    hi = arr.shape[0] if hi is None else hi
    signed = arr.dtype.kind == "i"
    for a in range(lo, hi, TOKEN_CHECK_CHUNK):
        block = np.asarray(arr[a:min(a + TOKEN_CHECK_CHUNK, hi)])
        if block.size and (block.max() >= vocab or (signed and block.min() < 0)):
            bad = (block >= vocab) | (block < 0) if signed else block >= vocab
            return a + int(np.flatnonzero(bad.any(axis=1))[0])
    return -1


def _looks_like_arc(root: Path, meta: DatasetMeta) -> bool:
    if meta.seq_len != fmt.SEQ_LEN or meta.vocab_size != fmt.VOCAB_SIZE or meta.num_puzzle_identifiers < 2:
        return False
    path = root / fmt.IDENTIFIERS_FILE
    if not path.is_file():
        return False
    names = _load_json(path)
    if not isinstance(names, list) or len(names) < 2:
        return False
    return any(isinstance(n, str) and _ARC_NAME.search(n) for n in names[1:])


def task_kind(data_dir: str | Path) -> str:
    """"arc" | "sudoku" | "maze" | ... | "generic": what a dataset holds, for steps that apply to one task
    only (the ARC decoder and vote). Our builders record it in manifest.json (`task`); a dataset from
    HRM's own builders has no manifest and is "arc" when its seq_len is 900, vocab 12 and identifiers
    look like ARC task names, else "generic"."""
    root = Path(data_dir)
    if not root.is_dir():
        raise _bad(root, "no such dataset directory")
    manifest = root / fmt.MANIFEST_FILE
    if manifest.is_file():
        m = _load_json(manifest)
        if not isinstance(m, dict):
            raise _bad(manifest, "expected a JSON object")
        task = m.get("task", "arc" if m.get("format") == "hrm-arc" else None)
        if task is not None:
            if not isinstance(task, str) or not task:
                raise _bad(manifest, f"field task = {task!r} is not a task name")
            return task
    for split in reversed(fmt.SPLITS):  # test is the smaller one
        if (root / split / fmt.META_FILE).is_file():
            return "arc" if _looks_like_arc(root, read_meta(root / split / fmt.META_FILE)) else "generic"
    raise _bad(root, f"no {fmt.META_FILE} in {' or '.join(fmt.SPLITS)} (not a built dataset?)")


def resolve_examples(
    puzzle_identifiers: np.ndarray,
    puzzle_indices: np.ndarray,
    group_indices: np.ndarray,
    group_pairs: np.ndarray,
    group_pair_indices: np.ndarray,
    idx: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Example indices -> (pair id int64, puzzle identifier int64), by the CSR arrays."""
    idx = np.asarray(idx, dtype=np.int64)
    p = np.searchsorted(puzzle_indices, idx, side="right") - 1
    g = np.searchsorted(group_indices, p, side="right") - 1
    k = idx - puzzle_indices[p]
    pair = group_pairs[group_pair_indices[g] + k].astype(np.int64)
    return pair, puzzle_identifiers[p].astype(np.int64)


class PuzzleSplit:
    """One split of a built dataset. Index arrays as in HRM; `examples(idx)` gives encoded rows."""

    def __init__(self, data_dir: str | Path, split: str):
        if split not in fmt.SPLITS:
            raise DatasetError(f"split {split!r}: expected one of {fmt.SPLITS}")
        root = Path(data_dir)
        self.root = root
        self.layout = layout(root)
        d = root / split
        if not d.is_dir():
            raise _bad(d, "missing split directory (not a built dataset, or a half-written one?)")
        self.path = d
        self.split = split
        meta_path = d / fmt.META_FILE
        meta = read_meta(meta_path)
        self.meta: DatasetMeta = meta
        self.puzzle_identifiers = _load_npy(d / fmt.PUZZLE_IDS_FILE, ndim=1).astype(np.int32, copy=False)
        self.puzzle_indices = _load_npy(d / fmt.PUZZLE_INDICES_FILE, ndim=1).astype(np.int32, copy=False)
        self.group_indices = _load_npy(d / fmt.GROUP_INDICES_FILE, ndim=1).astype(np.int32, copy=False)
        p = len(self.puzzle_identifiers)
        pi, gi = self.puzzle_indices, self.group_indices
        if len(pi) != p + 1 or pi[0] != 0 or np.any(np.diff(pi) < 0):
            raise _bad(d / fmt.PUZZLE_INDICES_FILE, f"not a CSR index over {p} puzzles")
        if len(gi) < 1 or gi[0] != 0 or gi[-1] != p or np.any(np.diff(gi) < 0):
            raise _bad(d / fmt.GROUP_INDICES_FILE, f"not a CSR index over {p} puzzles")
        if meta.total_groups != len(gi) - 1:
            raise _bad(meta_path, f"field total_groups = {meta.total_groups}, but {fmt.GROUP_INDICES_FILE} "
                                  f"holds {len(gi) - 1} groups")
        if p and (self.puzzle_identifiers.min() < 0 or self.puzzle_identifiers.max() >= self.meta.num_puzzle_identifiers):
            raise _bad(meta_path, f"field num_puzzle_identifiers = {self.meta.num_puzzle_identifiers}, but "
                                  f"{fmt.PUZZLE_IDS_FILE} uses ids {self.puzzle_identifiers.min()}.."
                                  f"{self.puzzle_identifiers.max()}")
        self.num_examples = int(pi[-1])
        self._checked_tokens = True
        if self.layout == "materialized":
            self._inputs = _load_npy(d / fmt.INPUTS_FILE, mmap=True, ndim=2)
            self._labels = _load_npy(d / fmt.LABELS_FILE, mmap=True, ndim=2)
            for arr, name in ((self._inputs, fmt.INPUTS_FILE), (self._labels, fmt.LABELS_FILE)):
                if arr.dtype.kind not in "ui":
                    raise _bad(d / name, f"dtype {arr.dtype}: expected integer tokens")
                if arr.shape[1] != self.meta.seq_len:
                    raise _bad(meta_path, f"field seq_len = {self.meta.seq_len}, but {name} rows hold {arr.shape[1]} tokens")
                if arr.shape[0] != self.num_examples:
                    raise _bad(d / name, f"{arr.shape[0]} rows, but {fmt.PUZZLE_INDICES_FILE} indexes "
                                         f"{self.num_examples} examples")
            self._checked_tokens = all(a.nbytes <= TOKEN_CHECK_FULL_BYTES for a in (self._inputs, self._labels))
            if self._checked_tokens:
                self.verify_tokens()
            else:
                e = self.num_examples
                for lo, hi in ((0, min(TOKEN_CHECK_CHUNK, e)), (max(e - TOKEN_CHECK_CHUNK, 0), e)):
                    self._check_range(lo, hi)
        else:
            if self.meta.seq_len != fmt.SEQ_LEN or self.meta.vocab_size != fmt.VOCAB_SIZE:
                raise _bad(meta_path, f"the compact layout is ARC's (seq_len {fmt.SEQ_LEN}, vocab_size {fmt.VOCAB_SIZE}); "
                                      f"got seq_len {self.meta.seq_len}, vocab_size {self.meta.vocab_size}")
            self._open_compact(root, d)

    def _check_range(self, lo: int, hi: int) -> None:
        for arr, name in ((self._inputs, fmt.INPUTS_FILE), (self._labels, fmt.LABELS_FILE)):
            row = _first_out_of_range(arr, self.meta.vocab_size, lo, hi)
            if row >= 0:
                raise _bad(self.path / name, f"example {row} holds a token outside [0, vocab_size = "
                                             f"{self.meta.vocab_size}) (dataset.json)")

    def verify_tokens(self) -> None:
        """Scan every token of a materialised split (chunked): all must be < vocab_size."""
        if self.layout == "materialized":
            self._check_range(0, self.num_examples)

    @cached_property
    def task(self) -> str:
        """See task_kind()."""
        return task_kind(self.root)

    def _open_compact(self, root: Path, d: Path) -> None:
        g = load_npz(root / fmt.GRIDS_FILE, ("cells", "grid_offset", "grid_shape", "pair_grids"))
        self._cells = np.ascontiguousarray(g["cells"], dtype=np.uint8)
        self._goff = np.ascontiguousarray(g["grid_offset"], dtype=np.int64)
        self._gshape = np.ascontiguousarray(g["grid_shape"], dtype=np.int64)
        self._pair_grids = np.ascontiguousarray(g["pair_grids"], dtype=np.int64)
        aug = load_augmentations(root)
        self._dihedral = np.ascontiguousarray(aug.dihedral, dtype=np.uint8)
        self._colour_map = np.ascontiguousarray(aug.colour_map, dtype=np.uint8)
        self._group_pairs = _load_npy(d / fmt.PLAN_GROUP_PAIRS_FILE, ndim=1).astype(np.int64)
        self._gpi = _load_npy(d / fmt.PLAN_GROUP_PAIR_INDICES_FILE, ndim=1).astype(np.int64)
        self._offsets = np.ascontiguousarray(_load_npy(d / fmt.PLAN_OFFSETS_FILE, ndim=2), dtype=np.uint8)
        if self._offsets.shape != (self.num_examples, 2):
            raise _bad(d / fmt.PLAN_OFFSETS_FILE, f"shape {self._offsets.shape}, expected ({self.num_examples}, 2)")
        if len(self._gpi) != len(self.group_indices):
            raise _bad(d / fmt.PLAN_GROUP_PAIR_INDICES_FILE, "one entry per group (+1) expected")
        if len(self.puzzle_identifiers) and self.puzzle_identifiers.max() >= len(self._dihedral):
            raise _bad(root / fmt.AUGMENTATIONS_FILE, "fewer rows than puzzle identifiers")

    @property
    def num_puzzles(self) -> int:
        return len(self.puzzle_identifiers)

    @property
    def num_groups(self) -> int:
        return len(self.group_indices) - 1

    def examples(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs [n, seq_len], labels [n, seq_len]) (uint8 as built) for example indices `idx`."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_examples):
            raise IndexError(f"example index out of range [0, {self.num_examples}) in {self.path}")
        if self.layout == "materialized":
            x, y = np.asarray(self._inputs[idx]), np.asarray(self._labels[idx])
            if not self._checked_tokens:  # too big to scan at open: check what is read
                for arr, name in ((x, fmt.INPUTS_FILE), (y, fmt.LABELS_FILE)):
                    if arr.size and (arr.max() >= self.meta.vocab_size or arr.min() < 0):
                        row = int(idx[np.flatnonzero(((arr >= self.meta.vocab_size) | (arr < 0)).any(axis=1))[0]])
                        raise _bad(self.path / name, f"example {row} holds a token outside [0, vocab_size = "
                                                     f"{self.meta.vocab_size}) (dataset.json)")
            return x, y
        from arc_data.compact import encode_examples  # lazy: keeps numba off `vote --help`

        pair, pid = resolve_examples(self.puzzle_identifiers, self.puzzle_indices, self.group_indices,
                                     self._group_pairs, self._gpi, idx)
        out_in = np.empty((idx.size, fmt.SEQ_LEN), np.uint8)
        out_lab = np.empty_like(out_in)
        encode_examples(self._cells, self._goff, self._gshape, self._pair_grids, pair, pid,
                        self._dihedral, self._colour_map, np.ascontiguousarray(self._offsets[idx]),
                        out_in, out_lab)
        return out_in, out_lab

    def __repr__(self) -> str:
        return (f"PuzzleSplit({str(self.path)!r}, {self.layout}, seq_len={self.meta.seq_len}, groups={self.num_groups}, "
                f"puzzles={self.num_puzzles}, examples={self.num_examples})")


def open_split(data_dir: str | Path, split: str) -> PuzzleSplit:
    return PuzzleSplit(data_dir, split)
