""""May I write here": the one owner of that question, asked by every command that writes before
it reads or computes anything.

- `check_output_dir`: an output folder that is, contains or lies inside an input, or whose parent
  is not a writable folder, is refused.
- `checked_output_dir`: the same for a writer that replaces its output folder as a whole, which
  must not exist without overwrite=true and (with it) must hold the writer's marker or be empty;
  records the folder found, the only one `publish.atomic_dir` will replace.
"""

from __future__ import annotations

import glob as globlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from arc_data.errors import DatasetError
from arc_data.files.names import resolved


def _inside(a: Path, b: Path) -> bool:
    """a == b or a lies inside b."""
    return a == b or b in a.parents


def check_output_dir(output_dir: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
                     key: str = "output_dir") -> Path:
    """Refuse an output folder that is, contains or lies inside an input, or whose parent is not a
    writable folder. Inputs that are not local paths (None, '', bundled names) are skipped."""
    if not str(output_dir).strip():
        raise DatasetError(f"{key} is empty")

    out = resolved(output_dir, key)
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        if item is None or not str(item).strip():
            continue
        text = os.path.expanduser(str(item))
        if globlib.has_magic(text):  # a glob: the files it matches are the inputs
            sources += [(str(item), resolved(m, "input")) for m in globlib.glob(text)]
        else:
            sources.append((str(item), resolved(text, "input")))
    for item, src in sources:
        if not src.exists():
            continue
        if _inside(out, src) or _inside(src, out):
            relation = "is" if out == src else ("lies inside" if _inside(out, src) else "contains")
            raise DatasetError(f"{key}={output_dir} {relation} the input {item}: writing there could destroy "
                               "the input; choose another folder")
    parent = out
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent != out and not parent.is_dir() or parent == out and not out.is_dir():
        bad = parent if not parent.is_dir() else out
        raise DatasetError(f"{key}={output_dir}: {bad} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatasetError(f"{key}={output_dir}: {parent} is not writable")
    return out



def check_replaceable(output_dir: Path, marker: str, writer: str, key: str = "output_dir") -> None:
    """With overwrite=true an existing output folder is replaced only if it is empty or holds
    `marker` (a file the writer leaves in every folder it writes): never an arbitrary folder."""
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (output_dir / marker).is_file():
        raise DatasetError(f"{key}={output_dir} exists and was not written by {writer} (no {marker} in it); "
                           "refusing to replace it with overwrite=true: choose another folder or remove it yourself")


@dataclass(frozen=True)
class OutputDir:
    """An output folder as checked before the work: `found` is the (st_dev, st_ino) of the folder that
    was there and may be replaced (overwrite=true, our marker or empty), None if nothing was there."""

    path: Path
    found: tuple[int, int] | None
    marker: str | None
    writer: str


def identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def checked_output_dir(output_dir: str, overwrite: bool, inputs: Iterable[str | os.PathLike | None] = (),
                       marker: str | None = None, writer: str = "this command", field: str = "output_dir") -> OutputDir:
    """The output folder of a writer that replaces it as a whole: `check_output_dir`, then refused if
    it exists without overwrite=true, or (with it) if it is a folder `writer` did not write. The
    folder found here is the only one `atomic_dir` will ever replace."""
    out = check_output_dir(output_dir, inputs, field)
    if os.path.lexists(out) and not overwrite:
        raise DatasetError(f"{out}: {field} already exists (pass overwrite=true to replace it)")
    if out.exists() and marker is not None:
        check_replaceable(out, marker, writer, field)
    return OutputDir(out, identity(out), marker, writer)


