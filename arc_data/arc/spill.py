"""Grid cells held in a temporary file instead of memory: what lets `build-arc` over a generated
source of any size run in memory that does not grow with the source's grids.

A `Spill` is one unlinked temporary file beside the output (so it goes with the build, killed or
not) behind one shared memory map. The generated readers append each unit's cells as they read it
(`generated.load_generated`), `plan.pack_grids` allocates the packed grid buffer in it, and whoever
walks the grids a chunk at a time (augmentation, encoding, writing the compact grids) calls
`release()` after each chunk: the resident pages of the map are handed back (`MADV_DONTNEED`; the
data stays in the file, through the page cache), so the peak holds a chunk's grids, not all of them.
"""

from __future__ import annotations

import mmap
import tempfile
import zipfile
from pathlib import Path

import numpy as np

SAVE_CHUNK = 1 << 24  # bytes of a spilled array written to an .npz between two releases


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
        """Hand the map's resident pages back (their data stays in the file)."""
        for m in self._maps:
            m.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        self._view = None
        self._maps.clear()  # a map still viewed by an array lives on until that array goes
        self._file.close()


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
