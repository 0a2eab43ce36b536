"""The one size estimator: a request no machine can serve is refused before anything is allocated.

Each writer states what its request costs (bytes of memory it will hold, bytes it will write, or
a count that cannot exist) with the formula next to the code that allocates it; `check_fits`
compares the estimate with what this machine has (MemAvailable from /proc/meminfo, the free space
of the output's filesystem) and refuses in one line that gives the estimate and the fix, before
an allocation traceback, swap, or an hour of work:

    check_fits("build-arc num_aug=1000000000", memory=plan_bytes, disk=dataset_bytes, at=out,
               fix="lower num_aug")

Estimates are of the arrays the code allocates (upper bounds where the exact count is known only
after the work); the docs give the measured figures next to them (docs/robustness.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from arc_data.errors import ArcDataError


def human(n: float) -> str:
    """Bytes as '3.2 GB' (decimal units, as `df -H`)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def available_memory() -> int | None:
    """Bytes of memory a new allocation can get without swapping (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def free_disk(path: Path) -> int | None:
    """Free bytes on the filesystem that holds `path` (or its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def check_fits(what: str, memory: float = 0, disk: float = 0, at: Path | None = None, fix: str = "") -> None:
    """Refuse `what` if it needs more `memory` bytes than are available, or writes more `disk`
    bytes than are free at `at`."""
    tail = f"; {fix}" if fix else ""
    avail = available_memory() if memory else None
    if avail is not None and memory > avail:
        raise ArcDataError(f"{what}: needs about {human(memory)} of memory, more than the {human(avail)} "
                           f"available{tail}")
    free = free_disk(at) if disk and at is not None else None
    if free is not None and disk > free:
        raise ArcDataError(f"{what}: would write about {human(disk)}, more than the {human(free)} free at "
                           f"{at}{tail}")


def check_count(what: str, asked: int, most: int, why: str, fix: str = "") -> None:
    """Refuse asking for more distinct things than exist (`most`, and why there are no more)."""
    if asked > most:
        raise ArcDataError(f"{what}: asks for {asked:,}, but at most {most:,} exist ({why})"
                           + (f"; {fix}" if fix else ""))
