"""The rules for every writer in the toolkit, and the atomic writes of the builders.

arc_data owns the on-disk formats, so the rules for writing them live here too (torch-free); every
subcommand that writes calls `check_output_dir` (or `checked_output_dir`) before it reads or
computes anything.

- An output folder must not be, contain, or lie inside any of the command's inputs (a build with
  `output_dir` equal to its source folder would replace the raw tasks), and its parent must be a
  writable folder (found before an hour of work, not after).
- `overwrite=true` replaces only a folder the writer wrote itself (it holds the writer's marker
  file, e.g. manifest.json) or an empty one: never an arbitrary folder.
- A task name becomes a file name (viz PNGs, the vote report's pictures) only through `file_stem`,
  which refuses names that are not plain: path separators, `..`, a leading dot, control characters.
  The builders refuse such names at the source (`check_task_name`), so a dataset we built never
  holds one; a dataset built elsewhere is refused where a name would become a path.
- Only regular files are read as task files (`regular_files`): a FIFO named x.json would block.

    out = checked_output_dir(cfg.output_dir, cfg.overwrite, inputs, marker="manifest.json", writer="build-arc")
    with atomic_dir(out) as tmp:                               # write everything under tmp
        ...
    # tmp was fsynced and renamed to out; on any exception it was removed and out is untouched

The temporary folder sits beside the output (`.<name>.tmp-<pid>`), so the final rename stays on
one filesystem. Temp folders of killed builds (whose pid is gone) are removed on the next build.
"""

from __future__ import annotations

import glob as globlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from arc_data.errors import ArcDataError


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("hrm-deeploop")
    except Exception:  # not installed (a source checkout): read pyproject.toml
        try:
            import tomllib

            pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
            return tomllib.loads(pyproject.read_text())["project"]["version"] + "+src"
        except (OSError, KeyError, ImportError, ValueError):
            return "unknown"


def save_json(path: Path, obj: object, indent: int | None = 2) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def remove_stale_tmp(out: Path) -> None:
    """Temp folders of killed builds (`.<name>.tmp-<pid>` whose pid is gone)."""
    for p in out.parent.glob(f".{out.name}.tmp-*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def fsync_tree(root: Path) -> None:
    """fsync every file under `root`, then the folders (their entries), deepest first."""
    dirs = [root]
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            dirs.append(path)
        else:
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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


def checked_output_dir(output_dir: str, overwrite: bool, inputs: Iterable[str | os.PathLike | None] = (),
                       marker: str | None = None, writer: str = "this command", field: str = "output_dir") -> Path:
    """The resolved output folder of a writer that replaces it as a whole: `check_output_dir`, then
    refused if it exists without overwrite=true, or (with it) if it is a folder `writer` did not write."""
    out = check_output_dir(output_dir, inputs, field)
    if out.exists() and not overwrite:
        raise ArcDataError(f"{out}: {field} exists (pass overwrite=true to replace it)")
    if out.exists() and marker is not None:
        check_replaceable(out, marker, writer, field)
    return out


@contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """Yield a fresh temp folder beside `out`; publish it as `out` (fsync, rename) when the block ends."""
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)  # durable before the rename publishes it (a power cut cannot leave it half-written)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def progress_bar(enabled: bool, prefix: str):
    """A tqdm bar factory on stderr: `bar(total, desc, unit)`; disabled bars are no-ops."""
    from tqdm import tqdm

    return lambda total, desc, unit="it": tqdm(total=total, desc=f"{prefix} {desc}", unit=unit, unit_scale=True,
                                               file=sys.stderr, dynamic_ncols=True, disable=not enabled)
