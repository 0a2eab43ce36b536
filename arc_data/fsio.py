"""Atomic dataset writes shared by the builders (build-arc, build-puzzles, generate-puzzles).

    out = checked_output_dir(cfg.output_dir, cfg.overwrite)     # validate before any work
    with atomic_dir(out) as tmp:                               # write everything under tmp
        ...
    # tmp was fsynced and renamed to out; on any exception it was removed and out is untouched

The temporary folder sits beside the output (`.<name>.tmp-<pid>`), so the final rename stays on
one filesystem. Temp folders of killed builds (whose pid is gone) are removed on the next build.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
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


def checked_output_dir(output_dir: str, overwrite: bool, field: str = "output_dir") -> Path:
    """The resolved output folder, refused (one line, naming `field`) if it exists and may not be replaced."""
    if not str(output_dir):
        raise ArcDataError(f"{field}: empty")
    out = Path(os.path.expanduser(str(output_dir))).resolve()
    if out.exists() and not overwrite:
        raise ArcDataError(f"{out}: {field} exists (pass overwrite=true to replace it)")
    if out.exists() and not out.is_dir():
        raise ArcDataError(f"{out}: {field} exists and is not a directory")
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
