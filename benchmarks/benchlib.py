"""Shared helpers of the model benchmarks (bench_hrm.py, bench_gpt.py): device, timing, memory.

Memory is measured two ways:
- `peak_memory_mb`: CUDA `max_memory_allocated` since the last `reset_peak`, or on CPU the
  process's peak resident set size (ru_maxrss: it only grows, so on CPU it is the peak of the whole
  process up to that point, not of one variant).
- `SavedActivations`: saved-tensor hooks that add up the bytes autograd keeps for the backward
  pass (unique storages, parameters excluded). Device-independent, so the CPU figures mean the
  same as the GPU ones. With per-round activation checkpointing only each round's input is saved
  (the round is recomputed in the backward pass, inside checkpoint's own hooks).
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from benchmarks.gpuprof import gpu_turn
from benchmarks.refstubs import stub_argdantic  # noqa: F401  (re-exported: the comparison scripts use it)
from hrm_deeploop import runtime
from hrm_deeploop.errors import ConfigError

# cuBLAS reads this when it starts; deterministic matmuls need it (strict_numerics). Set on import,
# before any CUDA work, as every benchmark imports this module first.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def add_common_args(parser, peak_tflops: float) -> None:
    """Flags every benchmark takes: --device, --threads, --peak-tflops."""
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    parser.add_argument("--peak-tflops", type=float, default=peak_tflops,
                        help="device bf16 dense peak for MFU (default: the GPT trainer's mfu_peak_tflops)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU intra-op threads (1: on a loaded shared CPU, OpenMP spinning made 2 threads 100x slower)")


def setup_device(name: str, threads: int = 1) -> torch.device:
    """The trainers' device choice (`runtime.setup`: 'auto' = CUDA when present, 'cuda' = cuda:0,
    the fused-kernel switch from the environment, TF32 left at torch's default); limits CPU
    threads (the CPU machine is shared)."""
    torch.set_num_threads(threads)
    try:
        return runtime.setup(name).device
    except ConfigError as e:
        raise SystemExit(f"--device {name}: {e}") from None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"{p.name} ({p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}"
    return f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA max allocated since `reset_peak`, or the CPU process's peak RSS (MB = 1e6 bytes)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e6
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB


def memory_label(device: torch.device) -> str:
    return "peak alloc MB" if device.type == "cuda" else "peak RSS MB"


@dataclass
class Timing:
    ms_per_step: float  # median over the timed steps
    steps: int
    seconds: float  # wall time of the timed steps


def time_steps(step: Callable[[], object], device: torch.device, warmup: int, steps: int) -> Timing:
    """Run `step` warmup times untimed, then `steps` times, synchronising around each step. The
    first warm-up step (compilation) runs outside `gpu_turn`, the rest inside it."""
    if warmup:
        step()
    with gpu_turn():
        for _ in range(warmup - 1):
            step()
        sync(device)
        times = []
        t_all = time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            sync(device)
            times.append(time.perf_counter() - t0)
    return Timing(1e3 * statistics.median(times), steps, time.perf_counter() - t_all)


class SavedActivations:
    """Bytes of the tensors autograd saves for backward while the context is active.

    Unique storages are counted once; `exclude` (parameters, buffers) are not counted.
    """

    def __init__(self, exclude: list[torch.Tensor] = ()):
        self._exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self._seen: set[tuple[str, int]] = set()
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        key = (str(t.device), ptr)
        if ptr not in self._exclude and key not in self._seen and storage.nbytes() > 0:
            self._seen.add(key)
            self.bytes += storage.nbytes()
        return t

    def __enter__(self) -> SavedActivations:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def fmt_mb(mb: float) -> str:
    """Megabytes with enough digits for tiny CPU models and huge GPU ones."""
    return f"{mb:.3f}" if mb < 10 else f"{mb:.1f}" if mb < 1000 else f"{mb:,.0f}"


def failure_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:90]
    return f"FAILED: {type(exc).__name__}: {first}"


def release_compiled(device: torch.device) -> None:
    """After a timed variant: forget dynamo's compiled graphs and give the memory back, so that the
    next variant starts as the first did."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def print_table(header: list[str], rows: list[list[str]], file=None) -> None:
    file = file or sys.stdout  # looked up at call time (pytest's capsys swaps it)
    widths = [max(len(h), *(len(r[i]) for r in rows if i < len(r))) if rows else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    print(line, file=file)
    print("-" * len(line), file=file)
    for r in rows:
        if len(r) < len(header):  # a failure row: variant + message
            print("  ".join([r[0].ljust(widths[0]), *r[1:]]), file=file)
        else:
            print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))),
                  file=file)
    file.flush()


# ---- side-by-side equivalence checks (compare_reference_hrm.py, compare_reference_trm.py) -----------

FLOOR = "floor: "  # prefix of a row holding the same quantity between two runs of our own model


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max(max |b|, 1e-12), in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@contextlib.contextmanager
def strict_numerics(device: torch.device) -> Iterator[None]:
    """For comparing two implementations of the same arithmetic on a GPU: deterministic kernels
    (warn-only: ops without one say so), no TF32, and SDPA's math backend on both sides. On the
    first lease (H200, torch 2.11) the checks ran without it and a training step already differed
    from the reference by ~1e-4 relative. Nothing changes on CPU, where the steps are bit-identical."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[2], saved[3]


@contextlib.contextmanager
def perturbed(model: torch.nn.Module, rel: float = 1e-7, seed: int = 0) -> Iterator[torch.nn.Module]:
    """`model` with every parameter multiplied by (1 + rel * N(0, 1)) inside the block, restored
    bit for bit after. Run beside the model, it measures how far a long rollout carries a
    rounding-sized difference (an untrained HRM's 16-segment evaluation takes 1e-7 to O(1)
    relative on CPU: docs/benchmarks.md)."""
    g = torch.Generator().manual_seed(seed)
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + rel * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.device, p.dtype))
    try:
        yield model
    finally:
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved):
                p.copy_(s)


def fmt_diff(quantity: str, x: float) -> str:
    """A row's value: a count for '(mismatches)', else a relative difference."""
    return f"{x:.0f}" if "mismatches" in quantity else f"{x:.2e}"


def eval_rows(label: str, ours: dict, ref: dict, twin: dict) -> list[list[str]]:
    """Rows [step, quantity, value] comparing an evaluation's 'logits' and 'q_halt_logits' (and the
    argmax tokens) with the reference's, each followed by its FLOOR row: ours against `twin`, the
    same evaluation of ours run under `perturbed`. `label` completes the logits row's name."""
    def mismatches(a: dict, b: dict) -> float:
        return float((a["logits"].argmax(-1) != b["logits"].argmax(-1)).sum())

    rows = []
    for q, diff in ((f"eval logits{label}", lambda a, b: rel_diff(a["logits"], b["logits"])),
                    ("eval q_halt_logits", lambda a, b: rel_diff(a["q_halt_logits"], b["q_halt_logits"])),
                    ("eval argmax (mismatches)", mismatches)):
        rows += [["eval", q, fmt_diff(q, diff(ours, ref))], ["floor", FLOOR + q, fmt_diff(q, diff(twin, ours))]]
    return rows


def judge(rows: list[list[str]], tol: float) -> list[list[str]]:
    """The rows [step, quantity, value] over their limit: `tol` for a relative difference, 0 for a
    count of '(mismatches)'. A quantity with a FLOOR row (the same quantity between our model and
    its `perturbed` copy) is judged against the larger of that limit and its floor: a chaotic
    rollout cannot tell two implementations apart more finely than rounding moves it. Rows whose
    quantity is in parentheses are information, not judged."""
    floors = {q[len(FLOOR):]: float(v) for _, q, v in rows if q.startswith(FLOOR)}
    bad = []
    for row in rows:
        _, q, v = row
        if q.startswith((FLOOR, "(")):
            continue
        limit = 0.0 if "mismatches" in q else tol
        if float(v) > max(limit, floors.get(q, 0.0)):
            bad.append(row)
    return bad


def time_interleaved(steps_by_side: dict, device: torch.device, warmup: int, steps: int) -> dict[str, float]:
    """Median ms per step of each side, the sides taking turns (in rotating order) so that a
    shared machine's load falls on all of them alike. Warm-up steps (compilation) are not timed.
    On CUDA wall time; on CPU this process's CPU time (`time.process_time`), which other
    processes' load on a shared machine does not inflate (run with --threads 1)."""
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    if warmup:  # the first call of each side (compilation) outside gpu_turn, the rest inside
        for fn in steps_by_side.values():
            fn()
    with gpu_turn():
        for fn in steps_by_side.values():
            for _ in range(warmup - 1):
                fn()
        sync(device)
        times: dict[str, list[float]] = {k: [] for k in steps_by_side}
        names = list(steps_by_side)
        for i in range(steps):
            for k in names[i % len(names):] + names[:i % len(names)]:
                t0 = clock()
                steps_by_side[k]()
                sync(device)
                times[k].append(clock() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}

