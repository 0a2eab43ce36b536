"""What a path is, in words, and which names may become paths: the reading side of the file rules.

`why_not_a_file` / `why_not_a_folder` name what stands where a file or folder is expected (a loop
of symbolic links, a FIFO, a device, a folder); `resolved` turns a user's path into an absolute one
(a loop is one line); `check_task_name` / `file_stem` are the one door from a task name to a file
name; `temp_name` names a writer's temp sibling so that it fits NAME_MAX.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from arc_data.errors import DatasetError


def temp_name(out: Path, kind: str = "tmp", pid: int | None = None) -> str:
    """`.<name>.<kind>-<pid>`, the name of a writer's temp (or set-aside) sibling of `out`. A long
    name is cut and tagged with its hash, so the temp name fits NAME_MAX (255 bytes) whenever `out`'s does."""
    stem = out.name
    if len(os.fsencode(stem)) > 200:
        tag = hashlib.sha256(os.fsencode(stem)).hexdigest()[:12]
        while len(os.fsencode(stem)) > 180:
            stem = stem[:-1]
        stem = f"{stem}~{tag}"
    return f".{stem}.{kind}-{os.getpid() if pid is None else pid}"




# Plain names: letters, digits, '_', '-', '.', '+', '=', ',', '@' (ARC ids, ConceptARC names, HRM's
# augmented names); not starting with '.', at most 200 characters.
_PLAIN = re.compile(r"^[A-Za-z0-9_\-+=,@][A-Za-z0-9_.\-+=,@]{0,199}$")


def check_task_name(name: str, where: str) -> str:
    """A task name from a task file: refused (naming the file) unless plain; returned unchanged."""
    if not isinstance(name, str) or not _PLAIN.match(name) or ".." in name:
        raise DatasetError(f"{where}: task name {name!r} is not a plain name (letters, digits, _ - . + = , @; "
                           "no path separators, no '..', no leading dot); rename the task")
    return name


def file_stem(name: str) -> str:
    """`name` as a file stem, or an error: the one door through which a task name becomes a path."""
    return check_task_name(name, "file name")


def resolved(p: str | os.PathLike, key: str = "path") -> Path:
    try:
        return Path(os.path.expanduser(str(p))).resolve()
    except (RuntimeError, OSError) as e:  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise DatasetError(f"{key}={p}: {why_not_a_file(Path(os.path.expanduser(str(p))))}"
                           if "loop" in str(e).lower() or getattr(e, "errno", None) == errno.ELOOP
                           else f"{key}={p}: cannot resolve the path ({e})") from None


def unreachable(path: Path, e: OSError) -> str:
    """Why os.stat(path) failed, in words."""
    if e.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    if os.path.islink(path):
        return "is a broken symbolic link"
    return "does not exist" if e.errno == errno.ENOENT else f"cannot be read ({os_error_line(e, path)})"


def why_not_a_folder(path: Path) -> str:
    """Why `path` cannot be read as a folder, in the words of `why_not_a_file`: 'does not exist',
    'is a loop of symbolic links', 'is a file, not a folder', 'is not a folder (a device, FIFO or
    socket)'."""
    try:
        st = os.stat(path)
    except OSError as e:
        return unreachable(path, e)
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    return "is a file, not a folder" if stat.S_ISREG(st.st_mode) else "is not a folder (a device, FIFO or socket)"


def why_not_a_file(path: Path) -> str:
    """Why `path` cannot be read as a regular file, in words: 'does not exist', 'is a loop of
    symbolic links', 'is a folder', 'is not a regular file (a device, FIFO or socket)'."""
    try:
        st = os.stat(path)
    except OSError as e:
        return unreachable(path, e)
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a device, FIFO or socket)"
    return "is a regular file"




P = TypeVar("P", Path, os.DirEntry)  # anything with is_file()


def regular_files(paths: Iterable[P]) -> tuple[list[P], list[P]]:
    """(regular files, everything else) among `paths` (Paths, or `os.scandir` entries, which know
    their type without a stat): FIFOs, sockets, devices and folders named like data files are never
    opened (a FIFO would block the reader forever); nor is a link to itself or in a loop (an
    `os.scandir` entry's `is_file` raises ELOOP for it where `Path.is_file` says False)."""
    ok, skipped = [], []
    for p in paths:
        try:
            regular = p.is_file()
        except OSError:  # ELOOP, or a name gone since it was listed: not a file to read
            regular = False
        (ok if regular else skipped).append(p)
    return ok, skipped


def os_error_line(e: OSError, fallback: Path | str) -> str:
    """'PATH: strerror (ENOSPC)': an environment fault (full disk, file-size limit, read-only
    folder, a name too long) as one line naming the path and the errno."""
    code = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else type(e).__name__
    return f"{e.filename or fallback}: {e.strerror or e} ({code})"
