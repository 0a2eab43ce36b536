"""K for `copies=0` (views=build) and `official.copies=0` (views=official) from a measured footprint
(issue 61; docs/per-task.md#many-copies-at-once-officialcopies).

The probe: the run's own lanes opened at K = 1, then at K = 2, each taking one training step at the
run's real shapes, the memory each added read at its peak; the difference is what one more copy
costs (`Footprint.per_copy`; on the CPU at least half the K = 2 peak, `measure`), the rest what the
lanes cost whatever K (`fixed`); what the worker keeps between tasks and the probe did not hold yet
(`kept`: views=build's evaluation models and fresh records, `training.reuse.Reuse.most_kept`). Then
K = (half the available memory - fixed - kept) // per_copy, at most the caller's cap and the tasks to
run (`choose`, which prints one line saying why).

- CPU (Linux): the process's peak resident memory, VmHWM, reset before each step by writing "5" to
  /proc/self/clear_refs and read from /proc/self/status, over the resident memory before the probe;
  glibc's free pages are handed back first (`malloc_trim`), so the probe's memory shows as new pages
  rather than hiding in what the process had freed. Available: MemAvailable (and a cgroup's limit).
- CUDA: torch's allocator peak (`reset_peak_memory_stats`, `max_memory_allocated`) over what was
  allocated before; available: the device's free memory and the allocator's cached bytes.
- Where neither can be read (no /proc, another OS): None, and the caller falls back to its estimate
  with a one-line note.

The probe's copies are its own (built for it, dropped after): no task's generator, lane or file is
touched, so a run with copies=0 gives the results of copies=K for the K it chose
(tests/test_pertask_copies_sizing.py).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

MIB = 2 ** 20
RESERVE = 0.5  # of the available memory, for the copies: the rest for prediction, the OS and other processes


@dataclass
class Footprint:
    """Bytes one more copy adds at its peak (`per_copy`), the lanes' bytes whatever K (`fixed`), how known."""

    per_copy: int
    fixed: int
    how: str
    peaks: tuple[int, ...] = ()  # measured: the peaks at K = 1 and 2 (bytes, a held trainer's excluded)
    most: int | None = None  # at most this many copies whatever the memory (the probe ran out of it)
    kept: int = 0  # bytes the worker keeps between tasks whatever K, not yet held when measured (Reuse.most_kept)


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {key}")


def _trim() -> None:
    """glibc's free pages handed back (`malloc_trim(0)`); nothing elsewhere."""
    try:
        import ctypes  # lazy: only where K is measured

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Meter:
    """The peak memory a piece of work adds on `device` (module docstring). `ok` False: not readable here."""

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.device = torch.device(device)
        self.base, self.free = 0, 0
        self.ok = True
        if not self.cuda:
            try:
                self._clear()
                _status_kib("VmHWM")
            except OSError:
                self.ok = False

    @staticmethod
    def _clear() -> None:
        with open("/proc/self/clear_refs", "w") as f:  # "5": the peak resident size reset to the current one
            f.write("5")

    def now(self) -> int:
        if self.cuda:
            return torch.cuda.memory_allocated(self.device)
        return 1024 * _status_kib("VmRSS")

    def start(self) -> None:
        """The baseline: what the process holds now (after handing back what it had freed), and the
        memory available then (`free`)."""
        self._release()
        self.base = self.now()
        self.free = self.available()

    def start_again(self) -> None:
        """What was freed since `start` handed back (the baseline and `free` kept)."""
        self._release()

    def _release(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
        else:
            _trim()

    def reset(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._clear()

    def peak(self) -> int:
        """The peak since `reset`, over the baseline (bytes)."""
        if self.cuda:
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return 1024 * _status_kib("VmHWM") - self.base

    def available(self) -> int:
        """Bytes the run may still take: CUDA free plus torch's cached; CPU MemAvailable (or a cgroup's
        limit less its usage, if lower; the physical memory where /proc/meminfo is missing)."""
        if self.cuda:
            free = torch.cuda.mem_get_info(self.device)[0]
            return free + torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return available_cpu()


def available_cpu() -> int:
    try:
        kib = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines()
                   if x.startswith("MemAvailable:"))
        avail = 1024 * kib
    except (OSError, StopIteration, ValueError):
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return avail


def measure(step_k: Callable[[int, object], None], device: torch.device, meter: Meter | None = None,
            build: Callable[[], object] | None = None) -> Footprint | None:
    """The footprint of `step_k(k, held)` (k lanes opened, one step taken, all dropped when it returns)
    from its peaks at k = 1 and 2, after one warm-up step at k = 1 (what it leaves is counted in
    `fixed`). `build()` (optional) makes `held`, what every lane holds besides its slice (a task's
    trainer, views=build): what it keeps is counted once per copy. None: the peak is not readable here."""
    meter = meter or Meter(device)
    if not meter.ok:
        return None
    meter.start()
    held = build() if build is not None else None
    meter.start_again()
    own = max(0, meter.now() - meter.base)  # what the held trainer keeps: each lane has its own
    step_k(1, held)  # a warm-up: what the first step allocates once (kernels, vmap's) is the process's
    meter.start_again()
    once = max(0, meter.now() - meter.base - own)
    peaks = []
    for k in (1, 2):
        meter.reset()
        try:
            step_k(k, held)
        except (torch.OutOfMemoryError, MemoryError):  # two copies do not fit: K = 1
            del held
            meter.start_again()
            return Footprint(max(meter.free, 1), 0, f"K = {k} ran out of memory", most=1)
        peaks.append(meter.peak() - own - once)
    del held
    one, two = peaks
    # CUDA's allocator counts bytes exactly: the line through both peaks. The resident size moves with
    # how glibc reuses freed pages (the two peaks' difference ranged 0.7-1.6x the K 2 -> 8 slope in
    # repeated runs): a copy at least half of K = 2's peak, the line on or above both peaks
    # (docs/notebook/2026-12-06-copies-memory.md: then 0.99-1.55x the slope)
    per = max(two - one, 1) if meter.cuda else max(two - one, two // 2, 1)
    kind = "CUDA allocator peak" if meter.cuda else "peak RSS"
    return Footprint(per + own, max(one - per, 0) + once, f"measured: {kind} at K = 1, 2: {one / MIB:.1f}, {two / MIB:.1f} MiB",
                     (one, two))


def choose(fp: Footprint, available: int, cap: int, pending: int, device: torch.device, what: str) -> int:
    """K: the copies whose footprint fits RESERVE of `available` once what the worker keeps is set
    aside, at least 1, at most `cap` and `pending`; prints one line saying why (`what`: the option,
    e.g. "copies=0")."""
    fit = int((RESERVE * available - fp.fixed - fp.kept) // max(fp.per_copy, 1))
    if fp.most is not None:
        fit = min(fit, fp.most)
    k = max(1, min(fit, cap, pending))
    why = ("the tasks to run" if k == pending and pending <= min(fit, cap) else
           f"the cap for {torch.device(device).type}" if k == cap and cap <= fit else "memory")
    kept = f", {fp.kept / MIB:.1f} MiB kept between tasks" if fp.kept else ""
    print(f"ttt: {what}: K = {k} ({why}): {fp.per_copy / MIB:.1f} MiB a copy and {fp.fixed / MIB:.1f} MiB "
          f"fixed ({fp.how}){kept}; {available / MIB:,.0f} MiB available, {RESERVE:g} of it for the copies: {max(fit, 0)} "
          f"fit; cap {cap}, {pending} tasks", flush=True)
    return k
