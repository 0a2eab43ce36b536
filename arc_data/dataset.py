"""Read a built ARC dataset, materialised (HRM layout) or compact, through one API.

    split = open_split(data_dir, "train")
    inputs, labels = split.examples(np.arange(16))     # uint8 [16, 900] each

Materialised splits memory-map `all__inputs.npy`/`all__labels.npy`; compact splits encode the
requested examples on the fly with the serial numba kernel (no thread pool, so it is safe inside
forked DataLoader workers). Both return the same bytes for the same build options and seed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data import format as F
from arc_data.errors import ArcDataError

META_KEYS = ("pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
             "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "sets")


def _bad(path: Path, problem: str) -> ArcDataError:
    return ArcDataError(f"{path}: {problem}")


def _load_json(path: Path) -> object:
    if not path.is_file():
        raise _bad(path, "missing (not a built ARC dataset, or a half-written one?)")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise _bad(path, f"unreadable JSON ({e})") from None


def _load_npy(path: Path, mmap: bool = False, ndim: int | None = None) -> np.ndarray:
    if not path.is_file():
        raise _bad(path, "missing (not a built ARC dataset, or a half-written one?)")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _bad(path, f"unreadable or truncated .npy ({e})") from None
    if ndim is not None and arr.ndim != ndim:
        raise _bad(path, f"expected a {ndim}-D array, got shape {arr.shape}")
    return arr


def _load_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise _bad(path, "missing (not a built ARC dataset, or a half-written one?)")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise _bad(path, f"missing arrays {missing}")
            return {k: z[k] for k in keys}
    except (OSError, ValueError, EOFError) as e:
        raise _bad(path, f"unreadable .npz ({e})") from None


def layout(data_dir: str | Path) -> str:
    """'materialized' or 'compact' (a dataset from HRM's own builder has no manifest: materialized)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise _bad(root, "no such dataset directory")
    manifest = root / F.MANIFEST_FILE
    if manifest.is_file():
        lay = _load_json(manifest).get("layout", "materialized")  # type: ignore[union-attr]
        if lay not in ("materialized", "compact"):
            raise _bad(manifest, f"unknown layout {lay!r}")
        return lay
    return "materialized"


def load_identifiers(data_dir: str | Path) -> list[str]:
    """id -> puzzle name (`identifiers.json`; 0 = `<blank>`)."""
    path = Path(data_dir) / F.IDENTIFIERS_FILE
    ids = _load_json(path)
    if not isinstance(ids, list) or not ids or ids[0] != F.BLANK_NAME:
        raise _bad(path, f"expected a JSON list starting with {F.BLANK_NAME!r}")
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
    path = Path(data_dir) / F.AUGMENTATIONS_FILE
    z = _load_npz(path, ("base_task", "dihedral", "colour_map", "task_names"))
    n = z["dihedral"].shape[0]
    if z["base_task"].shape != (n,) or z["colour_map"].shape != (n, 10):
        raise _bad(path, "inconsistent shapes: base_task, dihedral and colour_map must have one row per id")
    return Augmentations(z["base_task"], z["dihedral"], z["colour_map"], z["task_names"])


class PuzzleSplit:
    """One split of a built dataset. Index arrays as in HRM; `examples(idx)` gives encoded rows."""

    def __init__(self, data_dir: str | Path, split: str):
        if split not in F.SPLITS:
            raise ArcDataError(f"split {split!r}: expected one of {F.SPLITS}")
        root = Path(data_dir)
        self.layout = layout(root)
        d = root / split
        if not d.is_dir():
            raise _bad(d, "missing split directory (not a built ARC dataset, or a half-written one?)")
        self.path = d
        self.split = split
        meta = _load_json(d / F.META_FILE)
        if not isinstance(meta, dict) or any(k not in meta for k in META_KEYS):
            raise _bad(d / F.META_FILE, f"expected a JSON object with {', '.join(META_KEYS)}")
        self.meta: dict = meta
        self.puzzle_identifiers = _load_npy(d / F.PUZZLE_IDS_FILE, ndim=1).astype(np.int32, copy=False)
        self.puzzle_indices = _load_npy(d / F.PUZZLE_INDICES_FILE, ndim=1).astype(np.int32, copy=False)
        self.group_indices = _load_npy(d / F.GROUP_INDICES_FILE, ndim=1).astype(np.int32, copy=False)
        p = len(self.puzzle_identifiers)
        pi, gi = self.puzzle_indices, self.group_indices
        if len(pi) != p + 1 or pi[0] != 0 or np.any(np.diff(pi) < 0):
            raise _bad(d / F.PUZZLE_INDICES_FILE, f"not a CSR index over {p} puzzles")
        if len(gi) < 1 or gi[0] != 0 or gi[-1] != p or np.any(np.diff(gi) < 0):
            raise _bad(d / F.GROUP_INDICES_FILE, f"not a CSR index over {p} puzzles")
        self.num_examples = int(pi[-1])
        if self.layout == "materialized":
            self._inputs = _load_npy(d / F.INPUTS_FILE, mmap=True, ndim=2)
            self._labels = _load_npy(d / F.LABELS_FILE, mmap=True, ndim=2)
            for arr, name in ((self._inputs, F.INPUTS_FILE), (self._labels, F.LABELS_FILE)):
                if arr.shape != (self.num_examples, F.SEQ_LEN):
                    raise _bad(d / name, f"shape {arr.shape}, expected ({self.num_examples}, {F.SEQ_LEN})")
        else:
            self._open_compact(root, d)

    def _open_compact(self, root: Path, d: Path) -> None:
        g = _load_npz(root / F.GRIDS_FILE, ("cells", "grid_offset", "grid_shape", "pair_grids"))
        self._cells = np.ascontiguousarray(g["cells"], dtype=np.uint8)
        self._goff = np.ascontiguousarray(g["grid_offset"], dtype=np.int64)
        self._gshape = np.ascontiguousarray(g["grid_shape"], dtype=np.int64)
        self._pair_grids = np.ascontiguousarray(g["pair_grids"], dtype=np.int64)
        aug = load_augmentations(root)
        self._dihedral = np.ascontiguousarray(aug.dihedral, dtype=np.uint8)
        self._colour_map = np.ascontiguousarray(aug.colour_map, dtype=np.uint8)
        self._group_pairs = _load_npy(d / F.PLAN_GROUP_PAIRS_FILE, ndim=1).astype(np.int64)
        self._gpi = _load_npy(d / F.PLAN_GROUP_PAIR_INDICES_FILE, ndim=1).astype(np.int64)
        self._offsets = np.ascontiguousarray(_load_npy(d / F.PLAN_OFFSETS_FILE, ndim=2), dtype=np.uint8)
        if self._offsets.shape != (self.num_examples, 2):
            raise _bad(d / F.PLAN_OFFSETS_FILE, f"shape {self._offsets.shape}, expected ({self.num_examples}, 2)")
        if len(self._gpi) != len(self.group_indices):
            raise _bad(d / F.PLAN_GROUP_PAIR_INDICES_FILE, "one entry per group (+1) expected")
        if len(self.puzzle_identifiers) and self.puzzle_identifiers.max() >= len(self._dihedral):
            raise _bad(root / F.AUGMENTATIONS_FILE, "fewer rows than puzzle identifiers")

    @property
    def num_puzzles(self) -> int:
        return len(self.puzzle_identifiers)

    @property
    def num_groups(self) -> int:
        return len(self.group_indices) - 1

    def examples(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs uint8 [n, 900], labels uint8 [n, 900]) for example indices `idx`."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_examples):
            raise IndexError(f"example index out of range [0, {self.num_examples}) in {self.path}")
        if self.layout == "materialized":
            return np.asarray(self._inputs[idx]), np.asarray(self._labels[idx])
        from arc_data.kernels import encode_examples
        from arc_data.plan import resolve_examples

        pair, pid = resolve_examples(self.puzzle_identifiers, self.puzzle_indices, self.group_indices,
                                     self._group_pairs, self._gpi, idx)
        out_in = np.empty((idx.size, F.SEQ_LEN), np.uint8)
        out_lab = np.empty_like(out_in)
        encode_examples(self._cells, self._goff, self._gshape, self._pair_grids, pair, pid,
                        self._dihedral, self._colour_map, np.ascontiguousarray(self._offsets[idx]),
                        out_in, out_lab)
        return out_in, out_lab

    def __repr__(self) -> str:
        return (f"PuzzleSplit({str(self.path)!r}, {self.layout}, groups={self.num_groups}, "
                f"puzzles={self.num_puzzles}, examples={self.num_examples})")


def open_split(data_dir: str | Path, split: str) -> PuzzleSplit:
    return PuzzleSplit(data_dir, split)
