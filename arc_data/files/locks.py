"""One run per folder, and the check every other writer makes against a live run.

`RunLock` holds `<run>/run.lock` with an exclusive `fcntl.flock` for as long as a trainer runs; the
kernel drops it with the file descriptor, so a run that crashed, was Ctrl-C'd or `kill -9`ed leaves
only the file, which no one has to remove: a lock file that no live process holds is no lock
(`held_by` says None, the next trainer takes it over). The holder writes "PID <pid> on <host>"
into the file, for the error a second run gets.

`held_by(path)` asks whether a live run holds `path` or any folder above it: the path guard refuses
writing there (a `score output=RUN/metrics.jsonl` would replace a live run's log).

A run that hands work inside its folder to other processes (`ttt`'s workers train each task in
`<out>/tasks/<id>/`) sets `RUN_TOKEN` in its environment before it locks: its lock line carries the
token, and a process that inherited the same token counts that lock as its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from pathlib import Path

from arc_data.errors import DatasetError

LOCK_FILE = "run.lock"
RUN_TOKEN = "ARC_DATA_RUN_TOKEN"  # environment: a lock whose line carries this token is this process's own


class RunLock:
    """One run per folder: an exclusive `fcntl.flock` on `<run>/run.lock`, held until `release`
    (or until the process ends, however it ends: the kernel drops the lock with the file
    descriptor, so a crashed or killed run never leaves the folder stuck). The holder's PID and
    host are written into the file for the error a second run gets. Creates the folder."""

    def __init__(self, run_dir: str | os.PathLike):
        import fcntl  # lazy: POSIX-only, imported where a lock is taken

        self.path = Path(run_dir) / LOCK_FILE
        try:  # never through a symlink (its target could be anyone's file) nor on a non-file
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise DatasetError(f"cannot lock output_dir '{self.path.parent}': {_os_words(e, self.path)}") from None
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise DatasetError(f"cannot lock output_dir '{self.path.parent}': '{self.path}' is not a regular file")
        try:
            for wait in (0.02, 0.05, 0.1, 0.2, None):  # another writer's probe (`lock_holder`) holds it for microseconds
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if wait is None or e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    time.sleep(wait)
        except OSError as e:
            holder = os.pread(self._fd, 200, 0).decode(errors="replace").strip()
            os.close(self._fd)
            self._fd = None
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise DatasetError(f"cannot lock output_dir '{self.path.parent}': {_os_words(e, self.path)}") from None
            by = f" ({holder})" if holder else ""
            raise DatasetError(f"output_dir '{self.path.parent}' is in use by another run{by}; wait for it to end "
                               "or choose another output_dir") from None
        with contextlib.suppress(OSError):  # who holds it, for the next one's error; the lock is what counts
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{_own_line()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _own_line() -> str:
    """'PID <pid> on <host>', and ' token <t>' when this process runs under a RUN_TOKEN."""
    token = os.environ.get(RUN_TOKEN, "")  # the host as gethostname() gives it, without importing socket (2-3 ms)
    return f"PID {os.getpid()} on {os.uname().nodename}" + (f" token {token}" if token else "")


def _os_words(e: OSError, path: Path) -> str:
    """'<path>': strerror (errno N, NAME), the words of hrm_deeploop.errors.os_error."""
    name = errno.errorcode.get(e.errno, "") if e.errno is not None else ""
    words = e.strerror or str(e)
    return f"'{path}': " + (f"{words} (errno {e.errno}, {name})" if name else words)


def lock_holder(folder: Path) -> str | None:
    """'PID 1234 on host' (or 'a live run') if a live process holds `folder/run.lock`, else None. A
    lock file no process holds (left by a run that was killed) is None: it needs no hand to remove it."""
    import fcntl  # lazy: POSIX-only, imported where a lock is taken

    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None  # no lock file (or none we could open: RunLock itself refuses such a folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                return None
            return os.pread(fd, 200, 0).decode(errors="replace").strip() or "a live run"
        return None
    finally:
        os.close(fd)  # drops our shared lock too


def held_by(path: Path) -> tuple[Path, str] | None:
    """(the run folder, its holder) if a live run of another process holds `path` itself or a
    folder above it; a lock this very process holds (a trainer writing its own folder), or one taken
    under the RUN_TOKEN this process inherited (a ttt worker inside its parent's folder), is no conflict."""
    own, token = _own_line(), os.environ.get(RUN_TOKEN, "")
    for folder in [path, *path.parents]:
        holder = lock_holder(folder)
        if holder is not None and holder != own and not (token and holder.endswith(f" token {token}")):
            return folder, holder
    return None
