"""`predictions.npz`: the interface any model uses to be scored by `hrm-deeploop vote`.

One row per predicted example (every augmented copy of every test input), in any order; the
row order is the "first seen" order that breaks exact vote ties.

    puzzle_identifiers  int32   [n]       global puzzle id of the row (as in the dataset; ARC: 0 =
                                          blank padding row, dropped by the vote)
    inputs              uint8   [n, L]    the example's input sequence, as the model saw it
    predictions         uint8   [n, L]    argmax token per position in that (augmented) frame, same
                                          encoding as labels (ARC: 0 PAD, 1 EOS, colour c -> c + 2)
    q_halt              float32 [n]       halting logit (ranked by sigmoid(q_halt) after votes)

L is the dataset's `seq_len` (900 for ARC, 81 for Sudoku 9x9, ...): this module checks only that the
file is consistent; `check_dataset` checks rows against a dataset's dataset.json (seq_len,
vocab_size), which the vote and the puzzle evaluation do before scoring.

Optional fields (`OPTIONAL`), written by `hrm-deeploop evaluate` on Sudoku / Maze / generic datasets:

    example             int64   [n]       the row's example index in the split
    tta_copy            int32   [n]       0 = the example as stored, 1..N its test-time augmentations

Stored with `np.savez` (uncompressed, no pickle). `save_predictions` writes atomically.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arc_data.files.atomic import atomic_file
from arc_data.files.names import why_not_a_file
from hrm_deeploop.errors import UserError

FIELDS: dict[str, tuple[np.dtype, int]] = {
    "puzzle_identifiers": (np.dtype(np.int32), 1),
    "inputs": (np.dtype(np.uint8), 2),
    "predictions": (np.dtype(np.uint8), 2),
    "q_halt": (np.dtype(np.float32), 1),
}


OPTIONAL: dict[str, np.dtype] = {"example": np.dtype(np.int64), "tta_copy": np.dtype(np.int32)}


@dataclass(frozen=True)
class Predictions:
    puzzle_identifiers: np.ndarray  # int32 [n]
    inputs: np.ndarray  # uint8 [n, L]
    predictions: np.ndarray  # uint8 [n, L]
    q_halt: np.ndarray  # float32 [n]
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # OPTIONAL fields present, each [n]

    def __len__(self) -> int:
        return int(self.puzzle_identifiers.shape[0])


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _cast(name: str, x, dtype: np.dtype, lo: float | None, hi: float | None) -> np.ndarray:
    x = _as_numpy(x)
    if x.dtype == dtype:
        return np.ascontiguousarray(x)
    if np.issubdtype(dtype, np.integer):
        if not np.issubdtype(x.dtype, np.integer):
            raise UserError(f"save_predictions: field '{name}' must be integer, got dtype {x.dtype}")
        if x.size and (x.min() < lo or x.max() > hi):
            raise UserError(f"save_predictions: field '{name}' has values outside [{lo}, {hi}]")
    return np.ascontiguousarray(x.astype(dtype))


def validate(p: Predictions, where: str = "predictions") -> Predictions:
    """Check keys, dtypes, shapes and value ranges; raise UserError naming `where` and the field."""
    for name, (dtype, ndim) in FIELDS.items():
        a = getattr(p, name)
        if not isinstance(a, np.ndarray):
            raise UserError(f"{where}: field '{name}' is not an array")
        if a.dtype != dtype:
            raise UserError(f"{where}: field '{name}' has dtype {a.dtype}, expected {dtype} (convert with .astype)")
        if a.ndim != ndim:
            raise UserError(f"{where}: field '{name}' has shape {a.shape}, expected {ndim} dimensions")
    n = p.puzzle_identifiers.shape[0]
    width = p.inputs.shape[1]
    for name in ("inputs", "predictions"):
        shape = getattr(p, name).shape
        if shape != (n, width) or width < 1:
            raise UserError(f"{where}: field '{name}' has shape {shape}, expected ({n}, {max(width, 1)}) "
                            "(one row of seq_len tokens per prediction, inputs and predictions alike)")
    if p.q_halt.shape != (n,):
        raise UserError(f"{where}: field 'q_halt' has shape {p.q_halt.shape}, expected ({n},)")
    if n == 0:
        raise UserError(f"{where}: no rows")
    for name, a in p.extra.items():
        if name not in OPTIONAL:
            raise UserError(f"{where}: unknown field '{name}' (optional fields: {sorted(OPTIONAL)})")
        if not isinstance(a, np.ndarray) or a.dtype != OPTIONAL[name] or a.shape != (n,):
            raise UserError(f"{where}: field '{name}' must be {OPTIONAL[name]} of shape ({n},), got "
                            f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
        if a.min() < 0:
            raise UserError(f"{where}: field '{name}' has negative values")
    if p.puzzle_identifiers.min() < 0:
        raise UserError(f"{where}: field 'puzzle_identifiers' has negative ids")
    bad = ~np.isfinite(p.q_halt)
    if bad.any():
        raise UserError(f"{where}: field 'q_halt' has {int(bad.sum())} non-finite values (first at row {int(np.argmax(bad))})")
    return p


def check_dataset(p: Predictions, seq_len: int, vocab_size: int, where: str = "predictions") -> Predictions:
    """Rows must hold the dataset's `seq_len` tokens, each below its `vocab_size` (dataset.json)."""
    width = p.inputs.shape[1]
    if width != seq_len:
        raise UserError(f"{where}: rows hold {width} tokens, but the dataset has seq_len {seq_len} (dataset.json): "
                        "predictions made for another dataset?")
    for name in ("inputs", "predictions"):
        top = int(getattr(p, name).max())
        if top >= vocab_size:
            raise UserError(f"{where}: field '{name}' has token {top}, expected tokens 0..{vocab_size - 1} "
                            f"(vocab_size {vocab_size} in dataset.json)")
    return p


def save_predictions(path: str | Path, puzzle_identifiers, inputs, predictions, q_halt,
                     extra: dict | None = None) -> Path:
    """Validate and write `predictions.npz` atomically (temp file in the same folder, then rename).

    Accepts numpy arrays or torch tensors; integer arrays of another dtype are range-checked and
    cast (e.g. int64 ids, int64 argmax tokens; tokens must fit uint8), floats are cast to float32.
    `extra`: OPTIONAL fields (name -> array), cast to their dtype.
    """
    p = Predictions(
        puzzle_identifiers=_cast("puzzle_identifiers", puzzle_identifiers, FIELDS["puzzle_identifiers"][0], 0, 2**31 - 1),
        inputs=_cast("inputs", inputs, FIELDS["inputs"][0], 0, 255),
        predictions=_cast("predictions", predictions, FIELDS["predictions"][0], 0, 255),
        q_halt=np.ascontiguousarray(_as_numpy(q_halt).astype(np.float32)),
        extra={k: _cast(k, v, OPTIONAL[k], 0, np.iinfo(OPTIONAL[k]).max) if k in OPTIONAL else _as_numpy(v)
               for k, v in (extra or {}).items()},
    )
    path = Path(path)
    validate(p, where=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        np.savez(f, **{name: getattr(p, name) for name in FIELDS}, **p.extra)
    return path


def _stored_member(path: Path, zf: zipfile.ZipFile, name: str) -> np.ndarray | None:
    """A member `name` of the .npz written without compression (np.savez), memory-mapped read-only:
    no copy and no checksum pass over hundreds of MB; the OS pages rows in as the vote reads them.
    None for compressed members or object arrays (np.load reads those)."""
    info = zf.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0(f))
        npy_header = f.tell()
    if dtype.hasobject:
        return None
    with open(path, "rb") as raw:  # the member's local header: 30 bytes, then its name and extra field
        raw.seek(info.header_offset)
        local = raw.read(30)
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    offset = info.header_offset + 30 + name_len + extra_len + npy_header
    if 0 in shape:
        return np.empty(shape, dtype)
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    return np.asarray(mapped)  # a plain ndarray view (it keeps the map open), without memmap's per-slice cost


def load_predictions(path: str | Path) -> Predictions:
    """Read and validate `predictions.npz`; every problem raises UserError naming the file and field."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: predictions file {why_not_a_file(path)}")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: the file is empty (not a predictions.npz)")
    try:
        with zipfile.ZipFile(path) as zf:
            found = sorted(n.removesuffix(".npy") for n in zf.namelist())
            missing = [k for k in FIELDS if k not in found]
            if missing:
                raise UserError(f"{path}: missing field(s) {missing}; found {found}")
            wanted = [*FIELDS, *(k for k in OPTIONAL if k in found)]
            arrays = {k: _stored_member(path, zf, k + ".npy") for k in wanted}
        if any(a is None for a in arrays.values()):
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] if a is None else a for k, a in arrays.items()}
        extra = {k: arrays.pop(k) for k in OPTIONAL if k in arrays}
    except UserError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # not a zip / npy, or a pickled object array
        raise UserError(f"{path}: cannot read as .npz ({e})") from None
    return validate(Predictions(**arrays, extra=extra), where=str(path))
