"""The one size estimator: a request no machine can serve is refused before anything is allocated.

Each writer states what its request costs (bytes of memory it will hold, bytes it will write, or
a count that cannot exist) with the formula next to the code that allocates it; `check_fits`
compares the estimate with what this machine has (MemAvailable from /proc/meminfo, the free space
of the output's filesystem) and refuses in one line that gives the estimate and the fix, before
an allocation traceback, swap, or an hour of work:

    check_fits("build-arc num_aug=1000000000", memory=plan_bytes, disk=dataset_bytes, at=out,
               fix="lower num_aug")

Estimates are of the arrays the code allocates (upper bounds where the exact count is known only
after the work); the docs give the measured figures next to them (docs/robustness.md). A request
that fits but is large (LARGE bytes of memory or of disk, or more) is said first, in one line on
stderr, so an honest request that takes an hour or fills a disk is no surprise. The trainers and
`evaluate` estimate their models with `hrm_deeploop.runtime.estimate_memory` and compare through
`check_fits` too, passing the device's free memory for CUDA.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from arc_data.errors import DatasetError

LARGE = 10**9  # bytes of memory or of disk from which a request that fits is announced before it starts


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def human(n: float) -> str:
    """Bytes as '3.2 GB' (decimal units, as `df -H`)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if abs(n) < 1000 or unit == "EB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} EB"


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


def check_fits(what: str, memory: float = 0, disk: float = 0, at: Path | None = None, fix: str = "",
               available: int | None = None, where: str = "available",
               say: Callable[[str], None] | None = _stderr) -> None:
    """Refuse `what` if it needs more `memory` bytes than are available, or writes more `disk`
    bytes than are free at `at`. `available` / `where`: the memory to compare with and its name
    (default MemAvailable, "available"; the trainers pass a CUDA device's free memory). A request
    that fits and needs LARGE bytes or more is announced through `say` (None: silent)."""
    tail = f"; {fix}" if fix else ""
    avail = (available if available is not None else available_memory()) if memory else None
    if avail is not None and memory > avail:
        raise DatasetError(f"{what}: needs about {human(memory)} of memory, more than the {human(avail)} "
                           f"{where}{tail}")
    free = free_disk(at) if disk and at is not None else None
    if free is not None and disk > free:
        raise DatasetError(f"{what}: would write about {human(disk)}, more than the {human(free)} free at "
                           f"{at}{tail}")
    if say is not None and max(memory, disk) >= LARGE:
        parts = []
        if memory:
            parts.append(f"needs about {human(memory)} of memory" + (f" ({human(avail)} {where})" if avail is not None
                                                                     else ""))
        if disk:
            parts.append(f"will write about {human(disk)}" + (f" ({human(free)} free at {at})" if free is not None
                                                               else ""))
        say(f"note: {what}: a large request: {' and '.join(parts)} (estimated before starting)")


def check_count(what: str, asked: int, most: int, why: str, fix: str = "") -> None:
    """Refuse asking for more distinct things than exist (`most`, and why there are no more)."""
    if asked > most:
        raise DatasetError(f"{what}: asks for {asked:,}, but at most {most:,} exist ({why})"
                           + (f"; {fix}" if fix else ""))
