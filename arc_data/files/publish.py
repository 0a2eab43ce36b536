"""Publishing a checked output without ever replacing what was not checked.

`atomic_dirs` / `atomic_dir`: whole output folders written in a temp folder beside them, fsynced,
published with a no-replace rename, all or none. `staged_outputs` / `publish_files`: outputs a
command drops into an existing folder (vote, evaluate, viz-arc), staged in a hidden folder inside
it and moved in together. `publish_file`: one named output file (`score output=`), checked by
`guard.check_output_file`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from arc_data.errors import DatasetError
from arc_data.files.atomic import fsync_tree, remove_stale_tmp, rename_noreplace, stop_point
from arc_data.files.guard import OutputDir, OutputFile, identity
from arc_data.files.names import os_error_line, temp_name


def _is_replaceable(path: Path, marker: str | None) -> bool:
    return path.is_dir() and not path.is_symlink() and (
        marker is None or not any(path.iterdir()) or (path / marker).is_file())


def _publish_dir(tmp: Path, target: OutputDir) -> Path | None:
    """Rename `tmp` to the output without replacing anything unchecked; returns where the checked
    earlier folder was set aside (the caller removes it once everything is published), or None."""
    out = target.path
    if target.found is not None and identity(out) is not None:
        old = out.parent / temp_name(out, "old")
        rename_noreplace(out, old)  # set the checked folder aside, then make sure it is the one checked
        if identity(old) != target.found or not _is_replaceable(old, target.marker):
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


def remove_tree(root: Path) -> None:
    """`shutil.rmtree(root, ignore_errors=True)`, its files unlinked side by side (threads) first: on
    ext4 mounted with `discard`, unlinks of files already written back wait one after another (the
    400 pictures of a vote report set aside by overwrite=true: 1.2-1.4 s), side by side they share
    the wait (0.05-0.07 s). Links are unlinked, never followed."""
    files = [os.path.join(d, n) for d, _, names in os.walk(root) for n in names]
    if len(files) > 16:
        from concurrent.futures import ThreadPoolExecutor  # lazy: only where many files go

        with ThreadPoolExecutor(16, thread_name_prefix="unlink") as pool:
            list(pool.map(_unlink_quietly, files))
    shutil.rmtree(root, ignore_errors=True)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


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
        remove_tree(stage)
        for d in made if not published else ():
            try:
                os.rmdir(d)  # only while empty: never anything another process put there meanwhile
            except OSError:
                break




def publish_file(target: OutputFile, data: bytes) -> None:
    """Write `data` to the checked output file: a temp file beside it (`.<name>.tmp-<pid>`, created
    exclusively, never through a link), fsynced, then renamed over the file found by the check and
    only that one (a no-replace rename when there was none). A file that appeared, or was swapped
    for another, meanwhile is left untouched; any OSError (a full disk, a file-size limit, a
    read-only folder) is one line naming the path and errno; the temp file and the folders made
    for it are removed whenever nothing was published, Ctrl-C included."""
    out = target.path
    tmp = out.parent / temp_name(out)
    made = []  # the folders made for the output, deepest first
    p = out.parent
    while not os.path.lexists(p) and p.parent != p:
        made.append(p)
        p = p.parent
    published = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(tmp) and not os.path.isdir(tmp):
            os.unlink(tmp)  # this pid's name: a temp file of an earlier process that had our pid
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        stop_point("publish")
        if target.found is None:
            rename_noreplace(tmp, out)
        else:
            st = os.lstat(out)
            if (st.st_dev, st.st_ino) != target.found or not stat.S_ISREG(st.st_mode):
                raise DatasetError(f"{out}: replaced by something else while {target.writer} ran; left it untouched "
                                   "and wrote nothing (run again to replace it)")
            os.replace(tmp, out)
        published = True
    except FileExistsError:
        raise DatasetError(f"{out}: appeared while {target.writer} ran (it was not there at the start); left it "
                           "untouched and wrote nothing: remove it or pass overwrite=true") from None
    except FileNotFoundError as e:
        if e.filename is not None and Path(e.filename) == out:  # removed meanwhile
            raise DatasetError(f"{out}: removed while {target.writer} ran; wrote nothing") from None
        raise DatasetError(f"{target.writer}: {os_error_line(e, out)}; wrote nothing, {out} is as it was") from None
    except OSError as e:
        raise DatasetError(f"{target.writer}: {os_error_line(e, out)}; wrote nothing, {out} is as it was") from None
    finally:
        if not published:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            for d in made:
                try:
                    os.rmdir(d)  # only while empty
                except OSError:
                    break
