"""Grid cells held in a temporary file instead of memory: what lets `build-arc` over a generated
source of any size run in memory that does not grow with the source's grids.

A `Spill` is one unlinked temporary file beside the output (so it goes with the build, killed or
not) behind one shared memory map. The generated readers append each unit's cells as they read it
(`generated.load_generated`), `plan.pack_grids` allocates the packed grid buffer in it, and whoever
walks the grids a chunk at a time (augmentation, encoding, writing the compact grids) calls
`release()` after each chunk: the resident pages of the map are handed back (`MADV_DONTNEED`; the
data stays in the file, through the page cache), so the peak holds a chunk's grids, not all of them.
The per-task and per-unit columns of a generated source's table (`tasktable.py`) and the plan's
arrays (`plan.py`) are kept there too: `zeros` allocates an array in it, `Appender` grows one.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

SAVE_CHUNK = 1 << 24  # bytes of a spilled array written to an .npz between two releases
APPEND_BLOCK = 1 << 16  # items an `Appender` holds in memory before writing them to the spill


_MALLOC_TRIM: list = []  # [glibc's malloc_trim, or None where there is none], found at the first call


def trim_heap() -> None:
    """Hand malloc's free heap pages back to the system (glibc's `malloc_trim(0)`; nothing elsewhere).
    Why: glibc serves a block above its mmap threshold from a map of its own, returned when freed,
    but raises that threshold to the size of each such block freed (up to 32 MB), so once a source
    file's bytes or a chunk's arrays have been freed, the later chunks' arrays come from the heap,
    whose free pages stay resident, more of them the longer the build (docs/generated-tasks.md,
    "What grows with the source"). Called with each `release`: a chunk's arrays are freed by then,
    and a call costs about 30 us when there is little to hand back."""
    if not _MALLOC_TRIM:
        import ctypes  # lazy: build-arc --help does not load it

        try:
            _MALLOC_TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError, TypeError):  # not glibc
            _MALLOC_TRIM.append(None)
    if _MALLOC_TRIM[0] is not None:
        _MALLOC_TRIM[0](0)


def folder_beside(output: str | Path) -> Path:
    """Where a spill for `output` goes: the nearest existing folder above it (nothing is created for
    the spill)."""
    folder = Path(os.path.abspath(os.path.expanduser(output))).parent
    while not folder.is_dir():
        folder = folder.parent
    return folder


class Spill:
    """Append-only uint8 storage in an unlinked temporary file, read and written through a map."""

    def __init__(self, folder: str | Path) -> None:
        self._file = tempfile.TemporaryFile(dir=folder, prefix=".build-arc-spill-", buffering=0)
        self.size = 0
        self._maps: list[mmap.mmap] = []
        self._view: np.ndarray | None = None

    def append(self, cells: np.ndarray, align: int = 1) -> int:
        """Write `cells` (uint8) at the end, from a multiple of `align`; return where they start."""
        at = -(-self.size // align) * align
        self._file.seek(at)
        self._file.write(memoryview(np.ascontiguousarray(cells, np.uint8)).cast("B"))
        self.size = at + int(cells.size)
        return at

    def allocate(self, n: int) -> np.ndarray:
        """n zeroed bytes at the end (from a 64-byte boundary, so any dtype may view them), as a
        writable array."""
        at = -(-self.size // 64) * 64
        self.size = at + n
        self._file.truncate(self.size)
        return self.cells()[at:at + n]

    def cells(self) -> np.ndarray:
        """The whole file as a writable uint8 array (mapped again when it has grown)."""
        if self._view is None or len(self._view) < self.size:
            if self.size == 0:
                return np.zeros(0, np.uint8)
            m = mmap.mmap(self._file.fileno(), self.size)
            self._maps.append(m)
            self._view = np.frombuffer(m, np.uint8)
        return self._view

    def release(self) -> None:
        """Hand the map's resident pages back (their data stays in the file), and malloc's free ones
        (`trim_heap`)."""
        for m in self._maps:
            m.madvise(mmap.MADV_DONTNEED)
        trim_heap()

    def close(self) -> None:
        self._view = None
        self._maps.clear()  # a map still viewed by an array lives on until that array goes
        self._file.close()


def zeros(spill: Spill | None, shape: tuple[int, ...], dtype) -> np.ndarray:
    """np.zeros, or a zeroed array of that shape in the spill (its pages released as the rest)."""
    if spill is None:
        return np.zeros(shape, dtype)
    n = int(np.prod(shape))
    return spill.allocate(n * np.dtype(dtype).itemsize).view(dtype).reshape(shape)


def converted(arr: np.ndarray, dtype, spill: Spill | None) -> np.ndarray:
    """`arr.astype(dtype)` (1-d), or that array in the spill, converted SAVE_CHUNK bytes at a time."""
    if spill is None:
        return arr.astype(dtype)
    out = zeros(spill, arr.shape, dtype)
    step = max(1, SAVE_CHUNK // out.itemsize)
    for lo in range(0, len(arr), step):
        out[lo:lo + step] = arr[lo:lo + step]
        spill.release()
    return out


class Appender:
    """A 1-d array of unknown length built by appending, in the spill: at most `block` items in
    memory, each full block written to the end of the file; `finish()` copies the blocks, one at a
    time, into one array allocated in the spill (pages released after each), and returns it."""

    def __init__(self, spill: Spill, dtype, block: int | None = None) -> None:
        self.spill, self.dtype = spill, np.dtype(dtype)
        self._buf = np.empty(block or APPEND_BLOCK, self.dtype)
        self._n = 0  # items in _buf
        self._blocks: list[int] = []  # where each full block starts in the spill
        self.length = 0

    def extend(self, values) -> None:
        values = np.asarray(values, self.dtype).reshape(-1)
        while len(values):
            k = min(len(values), len(self._buf) - self._n)
            self._buf[self._n:self._n + k] = values[:k]
            self._n, self.length, values = self._n + k, self.length + k, values[k:]
            if self._n == len(self._buf):
                self._blocks.append(self.spill.append(self._buf.view(np.uint8), align=self.dtype.itemsize))
                self._n = 0

    def append(self, value) -> None:
        if self._n + 1 < len(self._buf):  # the usual case, without numpy's per-call cost of extend
            self._buf[self._n] = value
            self._n += 1
            self.length += 1
        else:
            self.extend([value])

    def finish(self) -> np.ndarray:
        out = zeros(self.spill, (self.length,), self.dtype)
        step = len(self._buf)
        for k, at in enumerate(self._blocks):
            out[k * step:(k + 1) * step] = self.spill.cells()[at:at + self._buf.nbytes].view(self.dtype)
            self.spill.release()
        out[len(self._blocks) * step:] = self._buf[:self._n]
        self._buf = np.empty(0, self.dtype)  # the block buffer freed (a slice of it would keep it)
        self.spill.release()
        return out


class Column:
    """A 1-d array given a chunk at a time (`chunks()`), never whole: what `save_npz` writes as the
    array it stands for."""

    def __init__(self, dtype: np.dtype, length: int, chunks) -> None:
        self.dtype, self.length, self.chunks = np.dtype(dtype), length, chunks


def save_npz(path: Path, arrays: dict, spill: Spill | None) -> None:
    """`np.savez(path, **arrays)` (the same arrays when read back), writing each array in chunks of
    SAVE_CHUNK bytes and releasing the spill's pages between them; a `Column` a chunk at a time."""
    with zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in arrays.items():
            if isinstance(arr, Column):
                with z.open(name + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(arr.dtype),
                                                             "fortran_order": False, "shape": (arr.length,)})
                    for chunk in arr.chunks():
                        f.write(np.ascontiguousarray(chunk, arr.dtype).tobytes())
                continue
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                _write_npy(f, np.asarray(arr), spill)


def save_npy(path: Path, arr: np.ndarray, spill: Spill | None) -> None:
    """`files.atomic.save_npy`'s bytes (np.save's), written SAVE_CHUNK bytes at a time with the spill's
    pages released between them: a spilled array is never resident whole."""
    with open(path, "wb") as f:
        _write_npy(f, np.asarray(arr), spill)


def _write_npy(f, arr: np.ndarray, spill: Spill | None) -> None:
    if arr.ndim == 0 or arr.dtype.hasobject or not arr.flags.c_contiguous:
        np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
        return
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(arr))
    step = max(1, SAVE_CHUNK // max(1, arr[:1].nbytes))  # rows a chunk
    for lo in range(0, len(arr), step):
        f.write(arr[lo:lo + step].reshape(-1).view(np.uint8))  # its bytes, no copy
        if spill is not None:
            spill.release()
