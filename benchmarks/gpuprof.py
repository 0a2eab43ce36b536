"""Sharing one GPU between benchmark processes, and where a step's GPU time goes.

- `gpu_turn()`: when GPU_TURN_LOCK names a file, hold an exclusive lock on it while timing, so that
  several benchmark processes can compile at once (torch.compile is CPU work) while their timed
  steps take turns on the GPU. Without the variable it does nothing (one process, as before).
- `kernel_profile(step, device)`: the device time of a few steps by kernel (torch.profiler), the
  top kernels and the sums by kind (matmul, attention, Triton, copies, other).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Callable, Iterator

import torch

KINDS = (  # (kind, pattern over the kernel name), first match wins
    ("attention", re.compile(r"flash|fmha|attention|sdpa|cudnn.*(mha|sdpa)", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|sm90_xmma|nvjet|cublas|matmul|wgmma", re.I)),
    ("triton", re.compile(r"^triton|_kernel$", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy|cat|fill", re.I)),
)


@contextlib.contextmanager
def gpu_turn() -> Iterator[None]:
    """Exclusive use of the GPU for timing among processes that share GPU_TURN_LOCK (a no-op without it)."""
    path = os.environ.get("GPU_TURN_LOCK")
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sdpa_in_query_layout(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw) -> torch.Tensor:
    """scaled_dot_product_attention with its output stored in the query's memory layout, as the
    flash kernels return it (the math backend returns a contiguous (B, H, S, D)): the same values,
    so code that `.view`s the output after a transpose runs under either backend."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, **kw)
    if out.stride() == query.stride() or out.transpose(1, 2).is_contiguous():
        return out
    return out.transpose(1, 2).contiguous().transpose(1, 2)


def kind_of(name: str) -> str:
    return next((k for k, pat in KINDS if pat.search(name)), "other")


def kernel_profile(step: Callable[[], object], device: torch.device, steps: int = 3, top: int = 12
                   ) -> tuple[list[list[str]], list[list[str]]]:
    """(top kernels, sums by kind) of `steps` calls of `step` (after one untimed call), device time
    per step in ms. Rows: [kernel, ms/step, share, calls/step] and [kind, ms/step, share]."""
    from torch.profiler import ProfilerActivity, profile

    act = ProfilerActivity.CUDA if device.type == "cuda" else ProfilerActivity.CPU
    with gpu_turn():
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        with profile(activities=[act]) as prof:
            for _ in range(steps):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    # CUDA runtime calls (cudaStreamSynchronize, cudaMemcpyAsync, ...) are host time, not kernels:
    # the second lease's first profiles counted a step's host syncs as device time
    events = [e for e in prof.key_averages() if _device_us(e) > 0 and not e.key.startswith("cuda")]
    total = sum(_device_us(e) for e in events) or 1.0
    events.sort(key=_device_us, reverse=True)
    kernels = [[e.key[:72], f"{_device_us(e) / 1e3 / steps:.3f}", f"{100 * _device_us(e) / total:.1f}%",
                f"{e.count / steps:g}"] for e in events[:top]]
    by_kind: dict[str, float] = {}
    for e in events:
        by_kind[kind_of(e.key)] = by_kind.get(kind_of(e.key), 0.0) + _device_us(e)
    kinds = [[k, f"{us / 1e3 / steps:.3f}", f"{100 * us / total:.1f}%"]
             for k, us in sorted(by_kind.items(), key=lambda kv: -kv[1])]
    kinds.append(["all", f"{total / 1e3 / steps:.3f}", "100%"])
    return kernels, kinds


def _device_us(e) -> float:
    """Self device time of a profiler event in microseconds (CPU time where no device ran)."""
    for attr in ("self_device_time_total", "self_cuda_time_total", "self_cpu_time_total"):
        v = getattr(e, attr, None)
        if v:
            return float(v)
    return 0.0
