"""Would fusing more pay? Eager vs torch.compile of each fusion candidate, in ms per training step.

Issue 6 asks to fuse RoPE, the loss and SwiGLU only where a benchmark shows it pays. This script
times each candidate on its own, at the shapes one training step of the model runs, eager and
compiled (torch.compile is the cheap way to fuse them; a hand-written kernel would at best reach
the memory-bound time of a single pass):

- rope:      `core.apply_rope` on q and k (B, T, H, Dh), fp32 rotation
- swiglu:    silu(gate) * up on (B, T, inner) (the elementwise part; the matmuls are not fusable)
- residual:  `RMSNorm(alpha * x + f)` (the part the Triton kernel fuses; see bench_kernels.py)
- loss:      HRM: fp64 stablemax cross-entropy on (B, S, V); GPT: fp32 softmax cross-entropy
- matmul:    the QKV projection, for scale (not a fusion candidate)

and multiplies by how often a step calls it: HRM's paper config runs 48 layer visits forward per
step (2 segments x (2x2 L + 2 H calls) x 4 layers), of which the 8 of the one-step gradient also
run backward; the looped GPT runs K x R visits, all with backward; the loss runs once (forward
and backward). "saved by compile" per step is the most a fused kernel for that candidate could
save over eager (compile already gets most of it); compare it with the step time of
bench_hrm.py / bench_gpt.py: under a few percent of the step, a kernel does not pay.

    python benchmarks/bench_fusion.py                       # GPU: paper shapes, bf16
    python benchmarks/bench_fusion.py --device cpu --batch-hrm 2 --batch-gpt 1 --models hrm
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import add_common_args, describe, failure_line, print_table, setup_device, time_steps  # noqa: E402
from hrm_deeploop.models.core import Rotary, apply_rope, swiglu_width  # noqa: E402
from hrm_deeploop.models.kernels.residual_norm import residual_rms_norm_reference  # noqa: E402
from hrm_deeploop.models.losses import stablemax_cross_entropy  # noqa: E402
from hrm_deeploop.models.model_config import (
    GPTConfig,  # noqa: E402
    HRMConfig,  # noqa: E402
)
from hrm_deeploop.training.train_config import TrainGPTConfig  # noqa: E402


def hrm_setup(batch: int) -> dict:
    c = HRMConfig()
    T = c.seq_len + c.puzzle_len
    visits = 2 * (c.num_h_cycles * c.num_l_cycles * c.num_l_layers + c.num_h_cycles * c.num_h_layers)
    grad_visits = c.num_l_layers + c.num_h_layers
    return dict(name="HRM paper", B=batch, T=T, D=c.hidden_size, H=c.num_heads,
                inner=swiglu_width(c.hidden_size, c.expansion, c.mlp_multiple), V=c.vocab_size, S=c.seq_len,
                fwd_only=visits - grad_visits, fwd_bwd=grad_visits, alpha=24 ** 0.5, loss="stablemax fp64")


def gpt_setup(batch: int, rounds: int) -> dict:
    c = GPTConfig()
    visits = c.num_blocks * rounds
    return dict(name=f"GPT-2 small R={rounds}", B=batch, T=c.seq_len, D=c.hidden_size, H=c.num_heads,
                inner=swiglu_width(c.hidden_size, c.expansion, c.mlp_multiple), V=c.vocab_size, S=c.seq_len,
                fwd_only=0, fwd_bwd=visits, alpha=(2 * visits) ** 0.5, loss="softmax fp32")


def candidates(s: dict, dtype: torch.dtype, device: torch.device) -> dict[str, tuple[Callable, list, bool]]:
    """name -> (fn(*inputs) -> tensor or tuple, inputs, per_visit). Inputs that need grad are marked."""
    B, T, D, H = s["B"], s["T"], s["D"], s["H"]
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, dt=dtype, grad=True):
        return torch.randn(*shape, device=device, generator=g).to(dt).requires_grad_(grad)

    cos, sin = (t.to(device) for t in Rotary(D // H, T)(T))
    labels = torch.randint(0, s["V"], (B, s["S"]), device=device, generator=g)
    w_qkv = rnd(3 * D, D, grad=True)
    out = {
        "rope": (lambda q, k: apply_rope(q, k, cos, sin), [rnd(B, T, H, D // H), rnd(B, T, H, D // H)], True),
        "swiglu": (lambda a, b: F.silu(a) * b, [rnd(B, T, s["inner"]), rnd(B, T, s["inner"])], True),
        "residual": (lambda x, f: residual_rms_norm_reference(x, f, s["alpha"], None, 1e-5),
                     [rnd(B, T, D), rnd(B, T, D)], True),
        "matmul": (lambda x: F.linear(x, w_qkv), [rnd(B, T, D)], True),
    }
    if s["loss"].startswith("stablemax"):
        out["loss"] = (lambda z: stablemax_cross_entropy(z, labels, "float64").sum(), [rnd(B, s["S"], s["V"])], False)
    else:
        out["loss"] = (lambda z: F.cross_entropy(z.float().view(-1, s["V"]), labels.view(-1)),
                       [rnd(B, s["S"], s["V"])], False)
    return out


def timed(fn: Callable, inputs: list, device: torch.device, warmup: int, steps: int) -> tuple[float, float]:
    """(forward-only ms, forward+backward ms), medians."""
    def fwd():
        with torch.no_grad():
            fn(*inputs)

    def fwd_bwd():
        y = fn(*inputs)
        ys = y if isinstance(y, tuple) else (y,)
        torch.autograd.backward(ys, [torch.ones_like(t) for t in ys])
        for t in inputs:
            t.grad = None

    return (time_steps(fwd, device, warmup, steps).ms_per_step, time_steps(fwd_bwd, device, warmup, steps).ms_per_step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["hrm", "gpt"], default=["hrm", "gpt"])
    parser.add_argument("--batch-hrm", type=int, default=96, help="HRM examples per GPU (paper: 96)")
    parser.add_argument("--batch-gpt", type=int, default=24, help="GPT sequences per micro-batch (bench_gpt: 24)")
    parser.add_argument("--rounds", type=int, default=3, help="GPT loop rounds R")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    device = setup_device(args.device, args.threads)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    setups = ([hrm_setup(args.batch_hrm)] if "hrm" in args.models else []) + \
             ([gpt_setup(args.batch_gpt, args.rounds)] if "gpt" in args.models else [])
    print(f"# fusion candidates: {describe(device)}, {dtype}, warm-up {args.warmup} + timed {args.steps}")
    header = ["model", "op", "calls/step (fwd / fwd+bwd)", "eager ms/step", "compiled ms/step", "saved by compile"]
    rows, failed = [], False
    for s in setups:
        print(f"# {s['name']}: batch {s['B']}, T {s['T']}, D {s['D']}, heads {s['H']}, SwiGLU inner {s['inner']}, "
              f"V {s['V']}, loss {s['loss']}", flush=True)
        for op, (fn, inputs, per_visit) in candidates(s, dtype, device).items():
            n_fwd, n_fb = (s["fwd_only"], s["fwd_bwd"]) if per_visit else (0, 1)
            per_step = {}
            impls = [("eager", fn)] + ([] if args.no_compile else [("compiled", torch.compile(fn))])
            for name, f in impls:
                try:
                    ms_f, ms_fb = timed(f, inputs, device, args.warmup, args.steps)
                    per_step[name] = n_fwd * ms_f + n_fb * ms_fb
                except Exception as exc:  # a compile failure becomes a cell, the rest still runs
                    failed = True
                    per_step[name] = None
                    print(f"# {s['name']} {op} {name}: {failure_line(exc)}", file=sys.stderr)
            torch._dynamo.reset()
            e, c = per_step.get("eager"), per_step.get("compiled")
            rows.append([s["name"], op, f"{n_fwd} / {n_fb}", f"{e:.2f}" if e is not None else "failed",
                         f"{c:.2f}" if c is not None else ("n/a" if args.no_compile else "failed"),
                         f"{e - c:.2f} ms ({e / c:.2f}x)" if e is not None and c else "n/a"])
            print("# " + " | ".join(rows[-1]), flush=True)
    print()
    print_table(header, rows)
    print("# matmul is there for scale (not a candidate); compare 'saved by compile' with the step time of "
          "bench_hrm.py / bench_gpt.py")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
