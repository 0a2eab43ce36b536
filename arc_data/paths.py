"""Rules for every writer in the toolkit: where outputs may go, and which names may become file names.

arc_data owns the on-disk formats, so the rules for writing them live here too (numpy-free, torch-free);
every subcommand that writes calls `check_output_dir` before it reads or computes anything.

- An output folder must not be, contain, or lie inside any of the command's inputs (a build with
  `output_dir` equal to its source folder would replace the raw tasks), and its parent must be a
  writable folder (found before an hour of work, not after).
- A task name becomes a file name (viz PNGs, the vote report's pictures) only through `file_stem`,
  which refuses names that are not plain: path separators, `..`, a leading dot, control characters.
  The builders refuse such names at the source (`check_task_name`), so a dataset we built never
  holds one; a dataset built elsewhere is refused at the point where a name would become a path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from arc_data.errors import ArcDataError

# Plain names: letters, digits, '_', '-', '.', '+', '=', ',', '@' (ARC ids, ConceptARC names, HRM's
# augmented names); not starting with '.', at most 200 characters.
_PLAIN = re.compile(r"^[A-Za-z0-9_\-+=,@][A-Za-z0-9_.\-+=,@]{0,199}$")


def check_task_name(name: str, where: str) -> str:
    """A task name from a task file: refused (naming the file) unless plain; returned unchanged."""
    if not isinstance(name, str) or not _PLAIN.match(name) or ".." in name:
        raise ArcDataError(f"{where}: task name {name!r} is not a plain name (letters, digits, _ - . + = , @; "
                           "no path separators, no '..', no leading dot); rename the task")
    return name


def file_stem(name: str) -> str:
    """`name` as a file stem, or an error: the one door through which a task name becomes a path."""
    return check_task_name(name, "file name")


def _resolved(p: str | os.PathLike) -> Path:
    return Path(os.path.expanduser(str(p))).resolve()


def _inside(a: Path, b: Path) -> bool:
    """a == b or a lies inside b."""
    return a == b or b in a.parents


def check_output_dir(output_dir: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
                     key: str = "output_dir") -> Path:
    """Refuse an output folder that is, contains or lies inside an input, or whose parent is not a
    writable folder. Inputs that are not local paths (None, '', bundled names) are skipped."""
    if not str(output_dir).strip():
        raise ArcDataError(f"{key} is empty")
    import glob as globlib

    out = _resolved(output_dir)
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        if item is None or not str(item).strip():
            continue
        text = os.path.expanduser(str(item))
        if globlib.has_magic(text):  # a glob: the files it matches are the inputs
            sources += [(str(item), Path(m).resolve()) for m in globlib.glob(text)]
        else:
            sources.append((str(item), _resolved(text)))
    for item, src in sources:
        if not src.exists():
            continue
        if _inside(out, src) or _inside(src, out):
            relation = "is" if out == src else ("lies inside" if _inside(out, src) else "contains")
            raise ArcDataError(f"{key}={output_dir} {relation} the input {item}: writing there could destroy "
                               "the input; choose another folder")
    parent = out
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent != out and not parent.is_dir() or parent == out and not out.is_dir():
        bad = parent if not parent.is_dir() else out
        raise ArcDataError(f"{key}={output_dir}: {bad} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ArcDataError(f"{key}={output_dir}: {parent} is not writable")
    return out


def regular_files(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(regular files, everything else) among `paths`: FIFOs, sockets, devices and folders named
    like data files are never opened (a FIFO would block the reader forever)."""
    ok, skipped = [], []
    for p in paths:
        (ok if p.is_file() else skipped).append(p)
    return ok, skipped


def check_replaceable(output_dir: Path, marker: str, writer: str, key: str = "output_dir") -> None:
    """With overwrite=true an existing output folder is replaced only if it is empty or holds
    `marker` (a file the writer leaves in every folder it writes): never an arbitrary folder."""
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (output_dir / marker).is_file():
        raise ArcDataError(f"{key}={output_dir} exists and was not written by {writer} (no {marker} in it); "
                           "refusing to replace it with overwrite=true: choose another folder or remove it yourself")


def remove_stale_tmp(out: Path) -> None:
    """Remove temp folders of killed runs beside `out` (`.<name>.tmp-<pid>` whose process is gone)."""
    import shutil

    for p in out.parent.glob(f".{out.name}.tmp-*"):
        try:
            os.kill(int(p.name.rsplit("-", 1)[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue
