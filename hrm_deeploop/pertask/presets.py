"""`ttt preset=auto|cpu|gpu`: the per-task sizes that fit the checkpoint and the device.

A preset fills every size the user left unset (steps, batch, num_aug, passes) and the copy's
schedule: its warm-up is a fraction of its own steps (`WARMUP_FRACTION`; the pretraining run's
warm-up, which `train init_from=` would inherit, can be most of a copy's steps) and it writes no
checkpoint before its last step (`checkpoint.every=0`: a copy is predicted from its final weights
and thrown away). What the user set, on the command line or in `train_overrides`, always wins.

`auto` picks `gpu` when the tasks train on CUDA, else `cpu`; on the CPU a checkpoint above
`CPU_LARGE` parameters gets the smaller `cpu` row.

On the CPU a checkpoint under `ONE_THREAD` parameters trains with one torch thread a worker unless
`threads` is set: its ops are too small for intra-op threads to pay (measured on 2 cores, 3 tasks of
`ttt`'s defaults: two threads took 1.6-2.4x the wall time and 2-3x the CPU of one, for the tiny HRM
and LoopViT at canvas 16 and 32; docs/per-task.md#options); `workers` runs tasks side by side instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRESETS = ("auto", "cpu", "gpu")
# the sizes of each preset: steps, batch, num_aug (views), passes (LoopViT's canvas views at prediction)
SIZES = {
    "gpu": {"steps": 200, "batch": 32, "num_aug": 100, "passes": 10},
    "cpu": {"steps": 25, "batch": 8, "num_aug": 8, "passes": 3},
    "cpu-large": {"steps": 10, "batch": 4, "num_aug": 4, "passes": 2},
}
CPU_LARGE = 2_000_000  # parameters (puzzle tables included) above which a CPU copy gets the smaller row
ONE_THREAD = 1_000_000  # parameters under which a CPU worker gets one torch thread (threads=0)
WARMUP_FRACTION = 0.1  # of the copy's own steps


@dataclass(frozen=True)
class Chosen:
    name: str  # the row used: gpu | cpu | cpu-large
    sizes: dict[str, int]  # every size, the user's where given
    given: tuple[str, ...]  # the sizes the user set
    warmup: int | None  # optim.warmup_steps for the copy; None when train_overrides set it
    checkpoint_every: int | None  # checkpoint.every for the copy; None when train_overrides set it
    why: str
    threads: int | None = None  # torch threads a worker where the preset sets them (threads=0, a small CPU model)


def choose(preset: str, device: str, parameters: int, given: dict[str, int | None],
           train_overrides: list[str], threads: int = 0) -> Chosen:
    """The preset's row for this device and checkpoint, the user's sizes kept (`given`: None = unset)."""
    on_gpu = _cuda(device)
    name = preset if preset != "auto" else ("gpu" if on_gpu else "cpu")
    if name == "cpu" and parameters > CPU_LARGE:
        name = "cpu-large"
    sizes = {k: (given[k] if given.get(k) is not None else v) for k, v in SIZES[name].items()}
    keys = {str(o).partition("=")[0].lstrip("+~") for o in train_overrides}
    warmup = None if "optim.warmup_steps" in keys else max(1, math.ceil(WARMUP_FRACTION * sizes["steps"]))
    every = None if "checkpoint.every" in keys else 0
    why = (f"{'auto: ' if preset == 'auto' else ''}device {'cuda' if on_gpu else 'cpu'}, "
           f"checkpoint {parameters / 1e6:.2f}M parameters")
    one = 1 if not on_gpu and not threads and parameters < ONE_THREAD else None
    return Chosen(name, sizes, tuple(k for k in SIZES[name] if given.get(k) is not None), warmup, every, why, one)


def line(c: Chosen, views: str = "build") -> str:
    """The one line that says what the preset chose (views=official: only what its loop uses, `passes`
    and the threads; its epochs, views and batch are `official.*`'s)."""
    official = views == "official"
    sizes = " ".join(f"{k}={v}" for k, v in c.sizes.items() if not official or k == "passes")
    sched = ", ".join(p for p in (f"warm-up {c.warmup} step(s)" if c.warmup is not None and not official else "",
                                  "no checkpoint before the last step" if c.checkpoint_every == 0 and not official
                                  else "",
                                  ("1 torch thread (a small model)" if official else
                                   "1 torch thread a worker (a small model; workers=N runs N tasks at once)")
                                  if c.threads == 1 else "") if p)
    kept = f"; yours: {', '.join(c.given)}" if c.given else ""
    return f"ttt: preset {c.name} ({c.why}): {sizes}" + (f", {sched}" if sched else "") + kept


def _cuda(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch  # lazy: only `device=auto` asks what is there

    return torch.cuda.is_available()
