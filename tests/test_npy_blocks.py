"""arc_data.files.blocks.NpyBlocks: the bytes np.save writes, by direct I/O or buffered."""

import errno
import os

import numpy as np
import pytest

from arc_data.files import blocks
from arc_data.files.blocks import NpyBlocks


def _write(path, arr: np.ndarray, per_block: int) -> None:
    """arr's rows through NpyBlocks, two buffers taking turns as encode_split drives them."""
    f = NpyBlocks(path, arr.shape, per_block)
    slot, n = 0, 0
    for k, lo in enumerate(range(0, len(arr), per_block)):
        slot = k % 2
        if k:
            f.carry(1 - slot, n, slot)
        n = min(per_block, len(arr) - lo)
        f.rows_view(slot, n)[:] = arr[lo:lo + n]
        f.write(slot, n, f.reserve(slot, n))
    if len(arr):
        f.carry(slot, n, 1 - slot)
        f.close(1 - slot)
    else:
        f.close(0)


@pytest.mark.parametrize(("rows", "width", "per_block"), [(0, 900, 8), (1, 900, 8), (37, 900, 5), (64, 128, 64),
                                                          (1000, 900, 91), (9, 4096, 2), (10, 7, 3)])
def test_the_bytes_of_np_save(tmp_path, rows, width, per_block):
    arr = np.random.default_rng(rows).integers(0, 256, size=(rows, width), dtype=np.uint8)
    _write(tmp_path / "a.npy", arr, per_block)
    np.save(tmp_path / "b.npy", arr)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_a_filesystem_refusing_direct_io_gets_buffered_writes(tmp_path, monkeypatch):
    """EINVAL at the first direct write (a filesystem without O_DIRECT): the rest goes buffered."""
    if not getattr(os, "O_DIRECT", 0):
        pytest.skip("no O_DIRECT on this platform")
    real, refused = os.pwrite, []

    def pwrite(fd, data, offset):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, data, offset)

    monkeypatch.setattr(blocks.os, "pwrite", pwrite)
    arr = np.random.default_rng(0).integers(0, 256, size=(100, 900), dtype=np.uint8)
    _write(tmp_path / "a.npy", arr, 7)
    assert refused == [0]
    np.save(tmp_path / "b.npy", arr)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_other_write_errors_are_raised(tmp_path, monkeypatch):
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(blocks.os, "pwrite", pwrite)
    with pytest.raises(OSError, match="No space"):
        _write(tmp_path / "a.npy", np.zeros((10, 900), np.uint8), 4)


def test_a_filesystem_refusing_direct_io_at_open_gets_buffered_writes(tmp_path, monkeypatch):
    """EINVAL from open(O_DIRECT) (older tmpfs): the file is opened and written buffered."""
    if not getattr(os, "O_DIRECT", 0):
        pytest.skip("no O_DIRECT on this platform")
    real = os.open

    def open_(path, flags, mode=0o777):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))
        return real(path, flags, mode)

    monkeypatch.setattr(blocks.os, "open", open_)
    arr = np.random.default_rng(1).integers(0, 256, size=(33, 900), dtype=np.uint8)
    _write(tmp_path / "a.npy", arr, 4)
    np.save(tmp_path / "b.npy", arr)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
