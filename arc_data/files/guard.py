""""May I write here": the one owner of that question, asked by every command that writes before
it reads or computes anything.

- `check_output_dir`: an output folder that is, contains or lies inside an input, or whose parent
  is not a writable folder, is refused.
- `checked_output_dir`: the same for a writer that replaces its output folder as a whole, which
  must not exist without overwrite=true and (with it) must hold the writer's marker or be empty;
  records the folder found, the only one `publish.atomic_dir` will replace.
- `check_output_file`: one named output file (`score output=`): refused if it is a folder, a
  device, a FIFO, a socket or a symbolic link, if it is an input of the same command (the same
  file by any name), if it exists and overwrite=true was not given, or if its parent cannot be made.
- Every one of them refuses a path inside the folder of a live training run (`locks.held_by`): a
  trainer's own folder is checked by its `RunLock`, so a trainer asks only about the folders above.
"""

from __future__ import annotations

import glob as globlib
import os
import stat
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from arc_data.errors import DatasetError
from arc_data.files.locks import held_by
from arc_data.files.names import resolved, why_not_a_folder


def _inside(a: Path, b: Path) -> bool:
    """a == b or a lies inside b."""
    return a == b or b in a.parents


def _sources(inputs: Iterable[str | os.PathLike | None]) -> list[tuple[str, Path]]:
    """(as given, resolved) of each input that is a local path (None, '', bundled names skipped); a
    glob stands for the files it matches."""
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        if item is None or not str(item).strip():
            continue
        text = os.path.expanduser(str(item))
        if globlib.has_magic(text):
            sources += [(str(item), resolved(m, "input")) for m in globlib.glob(text)]
        else:
            sources.append((str(item), resolved(text, "input")))
    return [(item, src) for item, src in sources if src.exists()]


def _check_parent(out: Path, given: str, key: str) -> None:
    """The nearest folder that exists above `out` must be a writable folder (the rest is made)."""
    parent = out.parent
    while not os.path.lexists(parent) and parent.parent != parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DatasetError(f"{key}={given}: {parent} {why_not_a_folder(parent)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatasetError(f"{key}={given}: {parent} is not writable")


def check_not_live(out: Path, given: str, key: str, itself: bool = True) -> None:
    """Refuse writing at `out` when a live training run of another process holds it (itself=False:
    only the folders above it, for a trainer, whose RunLock checks its own folder)."""
    live = held_by(out if itself else out.parent)
    if live is None:
        return
    folder, holder = live
    if folder == out:
        raise DatasetError(f"{key} '{given}' is in use by another run ({holder}); wait for it to end or choose "
                           f"another {key}")
    raise DatasetError(f"{key}={given} lies inside '{folder}', the folder of a live run ({holder}): writing there "
                       f"could replace the run's files; wait for it to end or choose another {key}")


def check_output_dir(output_dir: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
                     key: str = "output_dir", locked_by_caller: bool = False) -> Path:
    """Refuse an output folder that is, contains or lies inside an input, that lies in a live run's
    folder, or whose parent is not a writable folder. Inputs that are not local paths (None, '',
    bundled names) are skipped. `locked_by_caller`: a trainer, whose RunLock checks the folder itself."""
    if not str(output_dir).strip():
        raise DatasetError(f"{key} is empty")

    out = resolved(output_dir, key)
    for item, src in _sources(inputs):
        if _inside(out, src) or _inside(src, out):
            relation = "is" if out == src else ("lies inside" if _inside(out, src) else "contains")
            raise DatasetError(f"{key}={output_dir} {relation} the input {item}: writing there could destroy "
                               "the input; choose another folder")
    if os.path.lexists(out) and not out.is_dir():
        raise DatasetError(f"{key}={output_dir}: {out} {why_not_a_folder(out)}")
    check_not_live(out, str(output_dir), key, itself=not locked_by_caller)
    if out.is_dir():
        if not os.access(out, os.W_OK | os.X_OK):
            raise DatasetError(f"{key}={output_dir}: {out} is not writable")
    else:
        _check_parent(out, str(output_dir), key)
    return out


@dataclass(frozen=True)
class OutputFile:
    """One output file as checked before the work: `found` is the (st_dev, st_ino) of the regular
    file that was there and may be replaced (overwrite=true), None if nothing was there."""

    path: Path
    found: tuple[int, int] | None
    writer: str


def check_output_file(output: str | os.PathLike, overwrite: bool, inputs: Iterable[str | os.PathLike | None] = (),
                      key: str = "output", writer: str = "this command") -> OutputFile:
    """May `writer` write the file `output`? Refused (one line naming it) if it is a folder, a device,
    a FIFO, a socket or a symbolic link (a rename would replace the node itself: `output=/dev/full`),
    one of the command's inputs or inside an input folder, an existing file without overwrite=true, a
    file in a live run's folder, or under something that is not a writable folder. Write it with
    `publish.publish_file`, which replaces only the file found here."""
    given = str(output)
    if not given.strip():
        raise DatasetError(f"{key} is empty")
    if os.path.islink(os.path.expanduser(given)):
        raise DatasetError(f"{key}={given} is a symbolic link: writing would replace the link, not the file it "
                           "names; give the file's own path")
    out = resolved(output, key)
    try:
        st: os.stat_result | None = os.lstat(out)
    except (FileNotFoundError, NotADirectoryError):  # nothing there, or under a file (said by _check_parent)
        st = None
    except OSError as e:  # EACCES
        raise DatasetError(f"{key}={given}: cannot look at it ({e.strerror})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise DatasetError(f"{key}={given} is a folder, not a file: name the file to write")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise DatasetError(f"{key}={given} is not a regular file (a device, FIFO or socket): refusing to replace it")
    for item, src in _sources(inputs):
        same = st is not None and src.is_file() and os.path.samefile(src, out)
        if same or _inside(out, src):
            relation = "is" if same or out == src else "lies inside"
            raise DatasetError(f"{key}={given} {relation} the input {item}: writing there would destroy the input; "
                               "choose another file")
    if st is not None and not overwrite:
        raise DatasetError(f"{key}={given} already exists (pass overwrite=true to replace it)")
    check_not_live(out, given, key)
    _check_parent(out, given, key)
    return OutputFile(out, None if st is None else (st.st_dev, st.st_ino), writer)


def check_replaceable(output_dir: Path, marker: str, writer: str, key: str = "output_dir",
                      outputs: Collection[str] | None = None) -> None:
    """With overwrite=true an existing output folder is replaced only if it is empty or holds
    `marker` (a file the writer leaves in every folder it writes): never an arbitrary folder. With
    `outputs` (every name the writer puts in such a folder, or a glob pattern for names that vary:
    `train_[0-9]*.bin`) it must also hold nothing else: a marker with a common name (manifest.json,
    generated.json, config.json) does not make a user's folder ours."""
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (output_dir / marker).is_file():
        raise DatasetError(f"{key}={output_dir} exists and was not written by {writer} (no {marker} in it); "
                           "refusing to replace it with overwrite=true: choose another folder or remove it yourself")
    others = [] if outputs is None or not output_dir.is_dir() else \
        sorted(e.name for e in output_dir.iterdir() if not any(fnmatchcase(e.name, p) for p in outputs))
    if others:
        raise DatasetError(f"{key}={output_dir} holds files {writer} does not write ({', '.join(others[:3])}"
                           f"{', ...' if len(others) > 3 else ''}); refusing to replace it with overwrite=true: "
                           "choose another folder or remove it yourself")


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
                       marker: str | None = None, writer: str = "this command", field: str = "output_dir",
                       outputs: Collection[str] | None = None) -> OutputDir:
    """The output folder of a writer that replaces it as a whole: `check_output_dir`, then refused if
    it exists without overwrite=true, or (with it) if it is a folder `writer` did not write. The
    folder found here is the only one `atomic_dir` will ever replace."""
    out = check_output_dir(output_dir, inputs, field)
    if os.path.lexists(out) and not overwrite:
        raise DatasetError(f"{out}: {field} already exists (pass overwrite=true to replace it)")
    if out.exists() and marker is not None:
        check_replaceable(out, marker, writer, field, outputs)
    return OutputDir(out, identity(out), marker, writer)


