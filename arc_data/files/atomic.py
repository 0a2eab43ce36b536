"""Single-file atomic writes and the primitives of publishing: a temp file fsynced and renamed
(`atomic_file`), np.save's bytes with an errno on failure (`save_npy`), `fsync_tree`, the no-replace
rename (renameat2 RENAME_NOREPLACE), temp folders of killed writers, and `stop_point` for race tests.
"""

from __future__ import annotations

import ctypes
import errno
import glob as globlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import numpy as np

from arc_data.files.names import temp_name


class _Stream:
    """A file seen only through write(): numpy then writes an array in chunks with write(), whose
    OSError carries the errno (ndarray.tofile's short write says only 'N requested and M written')."""

    def __init__(self, f) -> None:
        self.write = f.write


def save_npy(path: Path, arr: np.ndarray) -> None:
    """np.save's bytes (the same header and data), written so that a full disk or a file-size limit
    is an OSError naming its errno."""
    with open(path, "wb") as f:
        np.lib.format.write_array(_Stream(f), np.asanyarray(arr), allow_pickle=False)



@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Write one file atomically, the one way every single-file writer does (checkpoints, run
    files, predictions.npz): yield `<path>.tmp`; when the block ends it is flushed, fsynced and
    renamed over `path`; on any exception (Ctrl-C too) it is removed and `path` is left as it was.
    The file is created as open() creates one (0666 less the umask, so 0644 usually), like every
    other output: mkstemp's 0600 would make it the odd one out."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):  # a folder that refuses the unlink refused the file too
            tmp.unlink(missing_ok=True)
        raise


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def remove_stale_tmp(out: Path) -> None:
    """Temp folders of killed builds (`.<name>.tmp-<pid>` whose pid is gone)."""
    prefix = temp_name(out, pid=0)[:-1]
    for p in out.parent.glob(globlib.escape(prefix) + "*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file under `root`, then the folders (their entries). The calls run side by side
    (threads): the filesystem commits them together (ext4: one journal commit and one disk cache
    flush for many), where one after another each waits for its own: 18 files took 0.1 s, not 0.025 s."""
    from concurrent.futures import ThreadPoolExecutor  # lazy: only where files are synced

    dirs = [root]
    files = []
    for path in sorted(root.rglob("*")):
        (dirs if path.is_dir() else files).append(path)
    with ThreadPoolExecutor(min(16, len(files) + 1), thread_name_prefix="fsync") as pool:
        list(pool.map(_fsync_path, files))  # the first OSError, if any, is raised here
        list(pool.map(_fsync_path, sorted(dirs, key=lambda p: len(p.parts), reverse=True)))


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2() if sys.platform.startswith("linux") else None


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename `src` to `dst`, raising FileExistsError if `dst` exists: renameat2(RENAME_NOREPLACE)
    on Linux (atomic); elsewhere, or where the filesystem lacks the flag, a check then rename(2)
    (which also refuses a non-empty folder at `dst`)."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def stop_point(name: str) -> None:
    """A deterministic pause for race tests: with HRM_DEEPLOOP_STOP_AT=<name> the process stops
    itself (SIGSTOP) here; the test changes the file system, then sends SIGCONT."""
    if os.environ.get("HRM_DEEPLOOP_STOP_AT") == name and hasattr(signal, "SIGSTOP"):
        os.kill(os.getpid(), signal.SIGSTOP)


