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
- Publishing never replaces what it did not check: `checked_output_dir` records the folder it
  found (or that there was none), and `atomic_dir` publishes with a no-replace rename
  (renameat2 RENAME_NOREPLACE), replacing only that very folder; `publish_files` does the same for
  outputs a command drops into an existing folder (vote, evaluate).

    target = checked_output_dir(cfg.output_dir, cfg.overwrite, inputs, marker="manifest.json", writer="build-arc")
    with atomic_dir(target) as tmp:                            # write everything under tmp
        ...
    # tmp was fsynced and renamed to target.path; on any exception (Ctrl-C too) it was removed and
    # the output is untouched; an OSError (full disk, ...) became one line naming the path and errno;
    # atomic_dirs([a, b]) publishes several folders all or none

The temporary folder sits beside the output (`.<name>.tmp-<pid>`, a long name cut and hashed so it
fits 255 bytes), so the final rename stays on one filesystem. Temp folders of killed builds (whose
pid is gone) are removed on the next build.
"""

from __future__ import annotations

import ctypes
import errno
import glob as globlib
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from arc_data.errors import DatasetError


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


def parse_json(data: str | bytes, where: str) -> object:
    """json.loads for a user's file: anything it cannot parse (bad syntax, not UTF-8, an integer of
    more than 4300 digits, nesting deeper than the parser's recursion allows) is one DatasetError
    "<where>: invalid JSON (...)"."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        why = f"{e.msg}: line {e.lineno} column {e.colno}"
    except UnicodeDecodeError as e:
        why = f"not UTF-8 text ({e.reason} at byte {e.start})"
    except RecursionError:
        why = "nested too deeply"
    except ValueError as e:  # int() of more than sys.get_int_max_str_digits() digits
        why = "an integer too long to read" if "integer string conversion" in str(e) else str(e)
    raise DatasetError(f"{where}: invalid JSON ({why})")


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


def save_json(path: Path, obj: object, indent: int | None = 2) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


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
        raise DatasetError(f"{where}: task name {name!r} is not a plain name (letters, digits, _ - . + = , @; "
                           "no path separators, no '..', no leading dot); rename the task")
    return name


def file_stem(name: str) -> str:
    """`name` as a file stem, or an error: the one door through which a task name becomes a path."""
    return check_task_name(name, "file name")


def _resolved(p: str | os.PathLike, key: str = "path") -> Path:
    try:
        return Path(os.path.expanduser(str(p))).resolve()
    except (RuntimeError, OSError) as e:  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise DatasetError(f"{key}={p}: {why_not_a_file(Path(os.path.expanduser(str(p))))}"
                           if "loop" in str(e).lower() or getattr(e, "errno", None) == errno.ELOOP
                           else f"{key}={p}: cannot resolve the path ({e})") from None


def _unreachable(path: Path, e: OSError) -> str:
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
        return _unreachable(path, e)
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    return "is a file, not a folder" if stat.S_ISREG(st.st_mode) else "is not a folder (a device, FIFO or socket)"


def why_not_a_file(path: Path) -> str:
    """Why `path` cannot be read as a regular file, in words: 'does not exist', 'is a loop of
    symbolic links', 'is a folder', 'is not a regular file (a device, FIFO or socket)'."""
    try:
        st = os.stat(path)
    except OSError as e:
        return _unreachable(path, e)
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a device, FIFO or socket)"
    return "is a regular file"


def _inside(a: Path, b: Path) -> bool:
    """a == b or a lies inside b."""
    return a == b or b in a.parents


def check_output_dir(output_dir: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
                     key: str = "output_dir") -> Path:
    """Refuse an output folder that is, contains or lies inside an input, or whose parent is not a
    writable folder. Inputs that are not local paths (None, '', bundled names) are skipped."""
    if not str(output_dir).strip():
        raise DatasetError(f"{key} is empty")

    out = _resolved(output_dir, key)
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        if item is None or not str(item).strip():
            continue
        text = os.path.expanduser(str(item))
        if globlib.has_magic(text):  # a glob: the files it matches are the inputs
            sources += [(str(item), _resolved(m, "input")) for m in globlib.glob(text)]
        else:
            sources.append((str(item), _resolved(text, "input")))
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


def _identity(path: Path) -> tuple[int, int] | None:
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
    return OutputDir(out, _identity(out), marker, writer)


# ---- publishing: a rename that never replaces what was not checked --------------------------------

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


def os_error_line(e: OSError, fallback: Path | str) -> str:
    """'PATH: strerror (ENOSPC)': an environment fault (full disk, file-size limit, read-only
    folder, a name too long) as one line naming the path and the errno."""
    code = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else type(e).__name__
    return f"{e.filename or fallback}: {e.strerror or e} ({code})"


def stop_point(name: str) -> None:
    """A deterministic pause for race tests: with HRM_DEEPLOOP_STOP_AT=<name> the process stops
    itself (SIGSTOP) here; the test changes the file system, then sends SIGCONT."""
    if os.environ.get("HRM_DEEPLOOP_STOP_AT") == name and hasattr(signal, "SIGSTOP"):
        os.kill(os.getpid(), signal.SIGSTOP)


def _is_replaceable(path: Path, marker: str | None) -> bool:
    return path.is_dir() and not path.is_symlink() and (
        marker is None or not any(path.iterdir()) or (path / marker).is_file())


def _publish_dir(tmp: Path, target: OutputDir) -> Path | None:
    """Rename `tmp` to the output without replacing anything unchecked; returns where the checked
    earlier folder was set aside (the caller removes it once everything is published), or None."""
    out = target.path
    if target.found is not None and _identity(out) is not None:
        old = out.parent / temp_name(out, "old")
        rename_noreplace(out, old)  # set the checked folder aside, then make sure it is the one checked
        if _identity(old) != target.found or not _is_replaceable(old, target.marker):
            rename_noreplace(old, out)
            raise DatasetError(f"{out}: replaced by another folder while {target.writer} ran; left it untouched "
                               "and discarded this output (run again to replace it)")
        try:
            rename_noreplace(tmp, out)
        except FileExistsError:
            raise DatasetError(f"{out}: a folder appeared there while {target.writer} was publishing; left it "
                               f"untouched, the earlier output is kept as {old}") from None
        return old
    try:
        rename_noreplace(tmp, out)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
        raise DatasetError(f"{out}: appeared while {target.writer} ran (it was not there at the start); left it "
                           "untouched and discarded this output: remove it or choose another output_dir") from None
    return None


@contextmanager
def atomic_dirs(targets: list[OutputDir]) -> Iterator[list[Path]]:
    """Yield a fresh temp folder beside each output; when the block ends, fsync them and publish
    them all or none (a no-replace rename each; if one fails, those already published are taken
    back and their earlier folders put back). Only the folder `checked_output_dir` found may be
    replaced; a folder that appeared meanwhile is an error and stays untouched. On any exception,
    Ctrl-C included, the temp folders are removed; an environment fault (full disk, file-size
    limit, read-only folder) becomes one line naming the path and the errno."""
    tmps: list[Path] = []
    writer = targets[0].writer if targets else "this command"
    shown = ", ".join(str(t.path) for t in targets)
    try:
        for target in targets:
            out = target.path
            tmp = out.parent / temp_name(out)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                remove_stale_tmp(out)
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
            except OSError as e:
                raise DatasetError(f"{writer}: cannot create a temp folder beside {out}: "
                                   f"{os_error_line(e, tmp)}") from None
            tmps.append(tmp)
        yield tmps
        for tmp in tmps:
            fsync_tree(tmp)  # durable before the rename publishes it (a power cut cannot leave it half-written)
        stop_point("publish")
        done: list[tuple[Path, OutputDir, Path | None]] = []
        try:
            for tmp, target in zip(tmps, targets):
                done.append((tmp, target, _publish_dir(tmp, target)))
        except BaseException:
            for tmp, target, old in reversed(done):  # all or none
                rename_noreplace(target.path, tmp)
                if old is not None:
                    rename_noreplace(old, target.path)
            raise
        for _, _, old in done:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        raise DatasetError(f"{writer}: {os_error_line(e, tmps[-1] if tmps else shown)}; nothing was published, "
                           f"{shown} {'is' if len(targets) == 1 else 'are'} as it was") from None
    except BaseException:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_dir(target: OutputDir) -> Iterator[Path]:
    """`atomic_dirs` for one output folder: yields its temp folder."""
    with atomic_dirs([target]) as (tmp,):
        yield tmp


def publish_files(stage: Path, out: Path, names: Iterable[str], overwrite: bool, writer: str) -> list[str]:
    """Move the staged outputs among `names` (files or folders in `stage`, a temp folder inside `out`)
    into `out`, all or none. Without overwrite no existing entry is ever replaced (a no-replace
    rename: one that appeared since the start check is an error); with it every existing entry of
    `names` is set aside in `stage` first (so the folder never mixes two runs) and put back if a
    later move fails. Returns the names published."""
    names = list(names)
    produced = [n for n in names if os.path.lexists(stage / n)]
    old = stage / ".old"
    old.mkdir(exist_ok=True)
    moved: list[str] = []
    aside: list[str] = []
    stop_point("publish")
    try:
        for n in names:
            if os.path.lexists(out / n):
                if not overwrite:
                    if n not in produced:
                        continue
                    raise DatasetError(f"{out / n}: appeared while {writer} ran (it was not there at the start); "
                                       "left it untouched and published nothing: remove it or pass overwrite=true")
                os.rename(out / n, old / n)
                aside.append(n)
            if n in produced:
                rename_noreplace(stage / n, out / n)
                moved.append(n)
    except BaseException as e:
        for n in reversed(moved):
            os.rename(out / n, stage / n)
        for n in reversed(aside):
            rename_noreplace(old / n, out / n)
        if isinstance(e, FileExistsError):
            raise DatasetError(f"{e.filename}: appeared while {writer} ran; left it untouched and published "
                               "nothing") from None
        if isinstance(e, OSError):
            raise DatasetError(f"{writer}: {os_error_line(e, out)}; published nothing") from None
        raise
    return moved


@contextmanager
def staged_outputs(out: Path, names: Iterable[str], overwrite: bool, writer: str) -> Iterator[Path]:
    """Yield a hidden stage folder inside `out` (created if missing); when the block ends, publish
    the `names` written there together (`publish_files`). The stage is removed however the block
    ends (Ctrl-C included); an OSError while writing becomes one line naming the path and errno,
    and nothing is published; folders it created for `out` are removed again when nothing was."""
    made = []  # the folders this call creates, deepest first: taken back if nothing is published
    p = out
    while not os.path.lexists(p) and p.parent != p:
        made.append(p)
        p = p.parent
    published = False
    try:
        out.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(out / writer)  # the stage of a killed run
        stage = out / temp_name(out / writer)
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
    except OSError as e:
        raise DatasetError(f"{writer}: cannot write into {out}: {os_error_line(e, out)}") from None
    try:
        yield stage
        publish_files(stage, out, names, overwrite, writer)
        published = True
    except OSError as e:
        raise DatasetError(f"{writer}: {os_error_line(e, stage)}; published nothing, {out} is as it was") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        for d in made if not published else ():
            try:
                os.rmdir(d)  # only while empty: never anything another process put there meanwhile
            except OSError:
                break


def progress_bar(enabled: bool, prefix: str):
    """A tqdm bar factory on stderr: `bar(total, desc, unit)`; disabled bars are no-ops."""
    from tqdm import tqdm

    return lambda total, desc, unit="it": tqdm(total=total, desc=f"{prefix} {desc}", unit=unit, unit_scale=True,
                                               file=sys.stderr, dynamic_ncols=True, disable=not enabled)
