"""Time the Post-LN residual step y = RMSNorm(alpha * x + f), forward + backward, on one CUDA GPU.

Compares the plain-PyTorch reference (eager), torch.compile of that reference, and the fused Triton
kernel, for (rows = B*T, hidden D) shapes of the models in this repo, in bf16 and fp32:

    python benchmarks/bench_kernels.py                 # all shapes, bf16 and fp32, no weight
    python benchmarks/bench_kernels.py --weight        # with a learnable RMSNorm gain
    python benchmarks/bench_kernels.py --dtypes bf16 --no-compile

GB/s is the effective bandwidth of the minimum traffic of a fused forward + backward (read x, f;
write y; read grad y and one saved activation; write dx, df: 7 tensors of rows x D), the same
byte count for every implementation, so it compares like with like. The L2 cache is flushed
before each timed iteration. A failing implementation (e.g. torch.compile) becomes a table row.
Runs in well under a minute on an H200 (most of it is torch.compile's first compilations).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hrm_deeploop.models.kernels.residual_norm import (  # noqa: E402
    residual_rms_norm,
    residual_rms_norm_reference,
    triton_available,
)

SHAPES = [  # (name, rows = B*T, D)
    ("HRM (4x901, 512)", 4 * 901, 512),
    ("GPT-2 small (8x1024, 768)", 8 * 1024, 768),
    ("(8x1024, 1024)", 8 * 1024, 1024),
]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
ALPHA = (2 * 24) ** 0.5  # DeepLoop alpha = (2N)^(1/2) at unrolled depth N = 24
EPS = 1e-5


def time_ms(fn: Callable[[], object], iters: int, flush: torch.Tensor | None) -> float:
    """Median milliseconds of fn() over `iters` timed runs (CUDA events), after a warm-up."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()  # evict x, f, ... from L2 so every run reads them from HBM
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def make_step(norm: Callable, x, f, w, g) -> Callable[[], object]:
    inputs = [x, f] + ([w] if w is not None else [])

    def step():
        y = norm(x, f, ALPHA, w, EPS)
        return torch.autograd.grad(y, inputs, g)

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["bf16", "fp32"])
    parser.add_argument("--weight", action="store_true", help="benchmark with a learnable gain")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--iters", type=int, default=50, help="timed iterations per measurement")
    parser.add_argument("--no-flush", action="store_true", help="do not flush L2 between iterations")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA GPU (torch.cuda.is_available() is False); nothing timed.",
              file=sys.stderr)
        return 1
    if not triton_available():
        print("bench_kernels: triton is not importable; the fused kernel cannot run.", file=sys.stderr)
        return 1

    t_start = time.perf_counter()
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    device = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(device)}, torch {torch.__version__}, alpha {ALPHA:.3f}, "
          f"weight {'yes' if args.weight else 'no'}, L2 flush {'off' if args.no_flush else 'on'}")
    flush = None if args.no_flush else torch.empty(256 * 2**20, dtype=torch.int8, device=device)

    impls: list[tuple[str, Callable]] = [("eager", residual_rms_norm_reference)]
    if not args.no_compile:
        impls.append(("compile", torch.compile(residual_rms_norm_reference)))
    impls.append(("triton", lambda x, f, a, w, e: residual_rms_norm(x, f, a, w, e, force_triton=True)))

    header = f"{'shape':<28} {'dtype':<5} {'impl':<8} {'fwd+bwd ms':>10} {'GB/s':>7} {'speedup':>8} {'max|y-eager|':>12}"
    print(header)
    print("-" * len(header))
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype_name in args.dtypes:
        dtype = DTYPES[dtype_name]
        for name, rows, D in SHAPES:
            x = torch.randn(rows, D, device=device, generator=gen).to(dtype).requires_grad_()
            f = (0.1 * torch.randn(rows, D, device=device, generator=gen)).to(dtype).requires_grad_()
            g = torch.randn(rows, D, device=device, generator=gen).to(dtype)
            w = (1 + 0.1 * torch.randn(D, device=device, generator=gen)).requires_grad_() if args.weight else None
            nbytes = 7 * rows * D * x.element_size()
            with torch.no_grad():
                y_eager = residual_rms_norm_reference(x, f, ALPHA, w, EPS).float()
            eager_ms = None
            for impl_name, norm in impls:
                row = f"{name:<28} {dtype_name:<5} {impl_name:<8}"
                try:
                    # With grad enabled, as timed: torch.compile then compiles each shape once.
                    err = (norm(x, f, ALPHA, w, EPS).detach().float() - y_eager).abs().max().item()
                    ms = time_ms(make_step(norm, x, f, w, g), args.iters, flush)
                except Exception as exc:  # report (e.g. a compile failure) and go on to the next row
                    first_line = (str(exc).strip().splitlines() or [""])[0][:70]
                    print(f"{row} FAILED: {type(exc).__name__}: {first_line}")
                    traceback.print_exc(limit=2, file=sys.stderr)
                    continue
                if impl_name == "eager":
                    eager_ms = ms
                speedup = f"{eager_ms / ms:.2f}x" if eager_ms else "n/a"
                print(f"{row} {ms:>10.4f} {nbytes / ms / 1e6:>7.0f} {speedup:>8} {err:>12.2e}", flush=True)
    print(f"# total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
