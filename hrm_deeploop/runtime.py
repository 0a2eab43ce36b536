"""Process group, device and dtype, decided once; rank-0 side effects. Everything else reads
x.device / x.dtype.

Single-process CPU is the default. Under torchrun (RANK / WORLD_SIZE / LOCAL_RANK in the
environment) we join the process group: NCCL on CUDA, gloo on CPU. `print0` and `progress` are
the rank-0 helpers every command uses for output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm.auto import tqdm

from arc_data.budget import check_fits, human
from arc_data.errors import DatasetError
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.typed_config import device_name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


@dataclass(frozen=True)
class Env:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    fused_kernel: bool  # the fused Triton residual-norm kernel on CUDA (models take it as `fused`): fused_kernel_enabled()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


_ENV: Env | None = None


def setup(device: str = "auto") -> Env:
    """Detect torchrun, pick the device ('auto' = CUDA when present), join the process group."""
    global _ENV
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"device='{device}' but CUDA is not available")
        dev = torch.device("cuda", local_rank if world > 1 else (torch.device(device).index or 0))
        torch.cuda.set_device(dev)
    elif device == "cpu":
        dev = torch.device("cpu")
        set_cpu_threads()
    else:
        device_name("device", device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    _ENV = Env(rank=rank, local_rank=local_rank, world_size=world, device=dev, fused_kernel=fused_kernel_enabled())
    return _ENV


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # set by the user: torch's threads are theirs


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a container's cpuset), capped by
    a cgroup v2 CPU quota (/sys/fs/cgroup/cpu.max, rounded up); os.cpu_count() where neither is known."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def set_cpu_threads() -> int:
    """Torch's intra-op threads for a CPU run, returned: at most `available_cpus()` (torch's default
    counts the machine's cores, not the ones this process may use, and surplus threads spin against
    each other), never raised, and left alone when OMP_NUM_THREADS or MKL_NUM_THREADS is set."""
    if not any(os.environ.get(v) for v in THREAD_VARIABLES) and torch.get_num_threads() > available_cpus():
        torch.set_num_threads(available_cpus())
    return torch.get_num_threads()


KEEP_FREED_BYTES = 1 << 30  # allocations below this come from the heap, and freed memory stays there


def keep_freed_memory() -> bool:
    """glibc: allocations up to 1 GiB from the heap (`M_MMAP_THRESHOLD`) and freed memory kept there
    (`M_TRIM_THRESHOLD`), so a CPU training step's large tensors (a stacked copy's activations pass
    glibc's 32 MiB ceiling) reuse pages instead of being mapped, zero-filled and unmapped at every use:
    the same arithmetic, 1.3-1.7x fewer CPU seconds a step at canvas 32 (docs/benchmarks.md). The
    process keeps its peak memory until it ends. False (nothing changed) off glibc, or with
    HRM_DEEPLOOP_KEEP_FREED=0."""
    if os.environ.get("HRM_DEEPLOOP_KEEP_FREED", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    try:
        import ctypes  # lazy: only where a CPU run asks for it

        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl's mallopt takes none of these)
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
    return bool(libc.mallopt(M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def fused_kernel_enabled() -> bool:
    """HRM_DEEPLOOP_FUSED_RESIDUAL_NORM=0|false|no|off turns the fused Triton residual-norm kernel off."""
    return os.environ.get("HRM_DEEPLOOP_FUSED_RESIDUAL_NORM", "1").strip().lower() not in ("0", "false", "no", "off")


def env() -> Env:
    """The process's Env: `setup`'s, or before it a single CPU process (with the kernel choice
    `setup` would make, so that a model built before `setup` is built as it would be after)."""
    return _ENV if _ENV is not None else Env(0, 0, 1, torch.device("cpu"), fused_kernel=fused_kernel_enabled())


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def is_main() -> bool:
    return env().is_main


def print0(*args, **kwargs) -> None:
    """Print on rank 0 only."""
    if is_main():
        print(*args, **kwargs, flush=True)


def progress(total: int | None, desc: str, initial: int = 0, **kw: Any) -> tqdm:
    """A tqdm bar on rank 0 (disabled elsewhere)."""
    return tqdm(total=total, desc=desc, initial=initial, disable=not is_main(), dynamic_ncols=True, **kw)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def compute_dtype(name: str, device: torch.device) -> torch.dtype:
    """The forward compute dtype: the configured one on CUDA; float32 on CPU (bf16 matmuls on CPU
    are slow and the tests compare fp32 numbers)."""
    if name not in DTYPES:
        raise ConfigError(f"dtype '{name}' is not one of {sorted(DTYPES)}")
    return DTYPES[name] if device.type == "cuda" else torch.float32


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """bf16/fp16 autocast on CUDA; a no-op for float32 or on CPU."""
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cuda", dtype=dtype):
            yield
    else:
        yield


def seed_all(seed: int) -> None:
    """Seed torch (and Python's/NumPy's legacy RNGs, which we never use, for third-party code)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def all_reduce_(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t


def max_over_ranks(value: int) -> int:
    """The largest of an int over all ranks (the value itself without a process group): every rank
    sees a signal that reached any of them, so all stop at the same step."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=env().device)  # NCCL reduces device tensors
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def broadcast_object(obj):
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(fn: Callable[[], Any], env: Env) -> Any:
    """`fn()` on rank 0; its result, or its UserError, reaches every rank (none waits on a collective)."""
    result, error = None, None
    if env.is_main:
        try:
            result = fn()
        except UserError as e:
            error = str(e)
    result, error = broadcast_object((result, error))
    if error:
        raise UserError(error)
    return result


def wrap_ddp(model: torch.nn.Module, e: Env, sync_buffers: bool = True, unused_parameters: bool = False
             ) -> torch.nn.Module:
    """DistributedDataParallel when running under torchrun; the bare model otherwise.

    sync_buffers=False skips DDP's per-forward buffer broadcast (buffers are still synced once at
    construction): HRM's puzzle table is a buffer updated identically on every rank by SignSGD,
    and broadcasting it every step would cost its full size (1.8 GB on ARC-1).
    unused_parameters=True: some steps leave parameters without a gradient (the looped GPT's
    truncated back-propagation cuts the embedding norm off the tape), so DDP must look for them."""
    if not e.distributed:
        return model
    # `forward_sync_buffers` replaced `broadcast_buffers` in newer torch; torch 2.6 has only the latter
    sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
            else "broadcast_buffers")
    return DDP(model, device_ids=[e.device.index] if e.device.type == "cuda" else None,
               find_unused_parameters=unused_parameters, **{sync: sync_buffers})


# ---- memory, estimated before a model is allocated -----------------------------------------------

# Values one block keeps per token for its backward: per hidden unit, 6 plus 6 per unit of MLP
# expansion (the norms' inputs, q/k/v, the attention output; SwiGLU's gate, up and product), and
# 1,024 per token whatever the width (RoPE tables, norm statistics, small heads). No seq x seq
# term: PyTorch's fused attention (flash / memory-efficient, CPU and CUDA) keeps no attention
# matrix. Fitted to peaks measured on CPU, and 6-9% above them per row in training
# (docs/robustness.md#memory-before-a-model-is-allocated).
ACT_PER_HIDDEN = 6
ACT_PER_EXPANSION = 6
ACT_PER_TOKEN = 1024


@dataclass(frozen=True)
class MemoryEstimate:
    """What a model will hold: its parameters (counted exactly on the meta device), the bytes of
    weights, gradients and optimiser state, and a rough bound on one step's activations."""

    parameters: int
    weight_bytes: int  # parameters and buffers, once
    state_bytes: int  # weights x copies (gradients, optimiser moments, a weight average) + buffers
    activation_bytes: int
    copies: int = 1  # of the parameters: 1 to predict, 4 or 5 to train

    @property
    def total(self) -> int:
        return self.state_bytes + self.activation_bytes

    def describe(self) -> str:
        held = "weights, gradients and optimiser state" if self.copies > 1 else "weights"
        return (f"{self.parameters:,} parameters: {human(self.state_bytes)} of {held}, about "
                f"{human(self.activation_bytes)} of activations (an estimate)")


# A model config's `layer_fields` (models/model_config.py) count identical blocks: the parameters are
# affine in each, so a model of thousands of blocks is counted from a few small builds (building
# each block on the meta device costs milliseconds: 100,000 of them would take minutes before the refusal).
EXACT_LAYERS = 64  # up to this many blocks per field, the model itself is built on the meta device


def _sizes(build: Callable[[Any], torch.nn.Module], model_cfg: Any) -> list[int]:
    """[parameters, bytes of parameters, bytes of buffers] of `build(model_cfg)`, built on meta."""
    with torch.device("meta"):
        model = build(model_cfg)
    return [sum(p.numel() for p in model.parameters()),
            sum(p.numel() * p.element_size() for p in model.parameters()),
            sum(b.numel() * b.element_size() for b in model.buffers())]


def count_model(build: Callable[[Any], torch.nn.Module], model_cfg: Any) -> list[int]:
    """[parameters, bytes of parameters, bytes of buffers] of the model `build(model_cfg)` makes,
    without allocating it: built on the meta device, or, past EXACT_LAYERS blocks in a
    count of the config's `layer_fields`, from builds with 1 and 2 blocks per count (exact: the blocks are alike)."""
    counts = {f: getattr(model_cfg, f) for f in getattr(model_cfg, "layer_fields", ())}
    if all(v <= EXACT_LAYERS for v in counts.values()):
        return _sizes(build, model_cfg)
    ones = {f: 1 for f in counts}
    base = _sizes(build, dataclasses.replace(model_cfg, **ones))
    total = list(base)
    for f, v in counts.items():
        two = _sizes(build, dataclasses.replace(model_cfg, **(ones | {f: 2})))
        total = [t + (v - 1) * (b2 - b1) for t, b1, b2 in zip(total, base, two)]
    return total


def estimate_memory(build: Callable[[Any], torch.nn.Module], model_cfg: Any, *, copies: int, batch: int,
                    layers: int, dtype: torch.dtype, head_values: int = 0, shards: int = 1) -> MemoryEstimate:
    """The memory the model `build(model_cfg)` will need, without allocating it: its parameters
    counted on the meta device (`count_model`); `copies` of them are held (1 to predict; 4 to
    train with Adam: weights, gradients, two moments; 5 with a weight average), split over
    `shards` ranks (FSDP); activations: batch x seq_len tokens x (`layers` blocks on the tape x
    ((ACT_PER_HIDDEN + ACT_PER_EXPANSION x expansion) x hidden + ACT_PER_TOKEN) + `head_values`, the output
    head's per token: 3 x vocab for a language model's logits, their softmax and gradient) values
    of `dtype`; hidden, heads and seq_len are the config's, seq_len with the reasoners' puzzle
    prefix (`puzzle_len` positions)."""
    params, param_bytes, buffer_bytes = count_model(build, model_cfg)
    seq_len = model_cfg.seq_len + getattr(model_cfg, "puzzle_len", 0)
    per_hidden = ACT_PER_HIDDEN + ACT_PER_EXPANSION * float(getattr(model_cfg, "expansion", 4.0))
    per_token = layers * (int(per_hidden * model_cfg.hidden_size) + ACT_PER_TOKEN) + head_values
    activations = batch * seq_len * per_token * torch.empty((), dtype=dtype).element_size()
    return MemoryEstimate(parameters=params, weight_bytes=param_bytes + buffer_bytes,
                          state_bytes=(copies * param_bytes + buffer_bytes) // shards, activation_bytes=activations,
                          copies=copies)


def check_memory(what: str, est: MemoryEstimate, device: torch.device, fix: str) -> None:
    """Refuse in one line when `est` cannot fit: on CUDA the device's free memory (the weights are
    built in host memory first, so that is checked too), on CPU the available RAM shared by this
    node's ranks (LOCAL_WORLD_SIZE under torchrun); a large request that fits is announced on
    stderr (rank 0) before anything is allocated. Under torchrun every rank refuses if one does
    (none waits on a collective the others never reach)."""
    def say(line: str) -> None:
        print0(f"{line} ({est.describe()})", file=sys.stderr)

    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if env().distributed else 1
    each = f" each, x {ranks_here} ranks on this node" if ranks_here > 1 else ""
    error: DatasetError | None = None
    try:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            check_fits(what + each, memory=est.weight_bytes * ranks_here, fix=fix, say=None)
            check_fits(what, memory=est.total, available=free, where=f"free on {device}", fix=fix, say=say)
        else:
            check_fits(what + each, memory=est.total * ranks_here, fix=fix, say=say)
    except DatasetError as e:
        error = e
    if max_over_ranks(int(error is not None)):
        raise error or DatasetError(f"{what}: another rank cannot hold it (its error says how much it needs)")


# ---- loop counts: time before a loop is run ------------------------------------------------------

BLOCK_CALL_S = 5e-6  # the least one block call costs on any device (its norms, projections, attention, MLP)
PEAK_FLOPS = {"cuda": 2e15, "cpu": 2e11}  # per device, per CPU thread: above what any device here reaches
ANNOUNCE_S, REFUSE_S = 10.0, 3600.0


def _duration(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:,.1f} {unit}"
    return f"{s:.0f} s"


def check_loop_time(what: str, block_calls: int, flops: float, device: torch.device, unit: str, fix: str) -> None:
    """Loop counts decide time as layer widths decide memory: refuse in one line a configuration one
    `unit` of which (a training step, a generation) cannot take less than an hour, and announce on
    stderr one that cannot take less than 10 s, before anything runs. The bound is optimistic, so a
    refusal is never wrong: `block_calls` x 5 us, or `flops` at a peak above any device's (CUDA 2
    PFLOP/s; CPU 200 GFLOP/s per thread), whichever is more. Every rank decides alike (no collective)."""
    peak = PEAK_FLOPS["cuda"] if device.type == "cuda" else PEAK_FLOPS["cpu"] * max(1, torch.get_num_threads())
    least = max(block_calls * BLOCK_CALL_S, flops / peak)
    said = f"{what}: {block_calls:,} block calls {unit}: at least {_duration(least)} {unit} (a lower bound)"
    if least >= REFUSE_S:
        raise ConfigError(f"{said}, refused; {fix}")
    if least >= ANNOUNCE_S:
        print0(f"note: {said}; Ctrl-C or SIGTERM stops it within seconds", file=sys.stderr)


def block_flops(hidden_size: int) -> float:
    """The least FLOPs one block call spends per token: 2 x (4 h^2 attention projections + 4 h^2 of MLP)."""
    return 16.0 * hidden_size * hidden_size
