"""Looped GPT training throughput, MFU and memory vs rounds R (with/without per-round checkpointing).

Three tables:
1. throughput: tokens/s, ms/step and MFU of a training step (forward, loss, backward, grad-norm
   clip, AdamW step, as `hrm-deeploop train-gpt` runs it: bf16 autocast and fused AdamW on CUDA,
   float32 on CPU) at each R in --rounds, eager and `torch.compile`. MFU uses the trainer's own
   counters (`gpt.flops_per_token`: unrolled FLOPs, K x R layer visits; `training.loop.mfu`) against
   --peak-tflops (the trainer's default `mfu_peak_tflops`, 989 = H100/H200 SXM dense bf16).
2. memory: at each R in --mem-rounds, with and without per-round activation checkpointing
   (`GPTConfig.activation_checkpointing`), eager: the bytes autograd saves for backward
   (saved-tensor hooks, device-independent) and the peak memory of a step. On CUDA the peak is
   measured (max allocated, optimiser state included). On CPU it is an estimate: 16 bytes per
   parameter (fp32 weights, grads, AdamW's two moments) + the saved activations (+ one round's
   activations, recomputed in the backward pass, with checkpointing).
3. the largest R that fits --mem-budget-gb, with and without checkpointing: a least-squares line
   through the memory table's points, extrapolated, then verified by measuring at the predicted R
   (stepping down while it does not fit, up while R+1 fits). Predictions above --max-r are
   reported but not verified (a step at R in the hundreds takes long).

    python benchmarks/bench_gpt.py                     # GPU: GPT-2 small looped (768, 12 heads, K=12), 24 x 1024 tokens
    python benchmarks/bench_gpt.py --preset cpu        # a small GPT that runs on 2 CPU cores in about a minute
    python benchmarks/bench_gpt.py --skip-throughput --mem-budget-gb 100    # memory tables only
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import (  # noqa: E402
    SavedActivations,
    add_common_args,
    describe,
    failure_line,
    fmt_mb,
    print_table,
    reset_peak,
    setup_device,
    time_steps,
)
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.models.gpt import GPT, flops_per_token  # noqa: E402
from hrm_deeploop.models.model_config import GPTConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.training.lm import make_optimizer  # noqa: E402
from hrm_deeploop.training.loop import mfu  # noqa: E402
from hrm_deeploop.training.train_config import LMOptim, TrainGPTConfig  # noqa: E402

PRESETS = {
    # GPT-2 small looped (the paper's LM setup): micro-batch 24 x 1024 as in the README (Looped GPT section).
    "paper": dict(model=GPTConfig(), batch=24, rounds=[1, 3], mem_rounds=[1, 3, 5, 7], warmup=3, steps=10,
                  budget_gb=100.0, max_r=48),
    # Small enough for 2 shared CPU cores; the loop still dominates (vocab 8192 keeps the head small).
    "cpu": dict(model=GPTConfig(vocab_size=8192, hidden_size=128, num_heads=4, num_blocks=2, seq_len=128,
                                mlp_multiple=64), batch=8, rounds=[1, 3], mem_rounds=[1, 3, 5, 7], warmup=2,
                steps=4, budget_gb=0.3, max_r=48),
    # Smoke test size.
    "tiny": dict(model=GPTConfig(vocab_size=256, hidden_size=32, num_heads=2, num_blocks=2, seq_len=32,
                                 mlp_multiple=16), batch=2, rounds=[1, 2], mem_rounds=[1, 2], warmup=0, steps=1,
                 budget_gb=0.002, max_r=6),
}
THROUGHPUT_HEADER = ["variant", "tokens/s", "ms/step", "GFLOP/token", "TFLOP/s", "MFU", "speedup"]
SEARCH_STEPS = 8  # measurements the largest-R search may take in each direction
BYTES_PER_PARAM_CPU = 16  # fp32 weight + grad + AdamW exp_avg + exp_avg_sq


@dataclass
class Setup:
    device: torch.device
    dtype: torch.dtype
    batch: int
    scaling: ScalingConfig
    seed: int = 0


class Bench:
    """A model, its optimiser (the trainer's `make_optimizer`) and one training step on fixed
    random tokens."""

    def __init__(self, cfg: GPTConfig, s: Setup, compile: bool = False):
        torch.manual_seed(s.seed)
        self.cfg, self.s = cfg, s
        self.model = GPT(cfg, s.scaling).to(s.device)
        self.model.train()
        self.opt = make_optimizer(self.model, LMOptim(), s.device)
        self.fwd = torch.compile(self.model) if compile else self.model
        g = torch.Generator().manual_seed(s.seed)
        tokens = torch.randint(0, cfg.vocab_size, (s.batch, cfg.seq_len + 1), generator=g)
        self.x, self.y = tokens[:, :-1].to(s.device), tokens[:, 1:].to(s.device)

    def step(self) -> None:
        with runtime.autocast(self.s.device, self.s.dtype):
            loss = self.fwd(self.x, self.y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), TrainGPTConfig().optim.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def saved_mb(self) -> float:
        """Saved-activation MB of one step (parameters excluded)."""
        with SavedActivations(exclude=[*self.model.parameters(), *self.model.buffers()]) as saved:
            self.step()
        return saved.bytes / 1e6


def cleanup(device: torch.device) -> None:
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- throughput ---------------------------------------------------------------------------------

def throughput(base: GPTConfig, s: Setup, rounds: list[int], compile_modes: list[bool], warmup: int, steps: int,
               peak_tflops: float) -> tuple[list[list[str]], bool, dict]:
    rows, failed, mfus = [], False, {}
    tokens = s.batch * base.seq_len
    for R in rounds:
        cfg = replace(base, num_rounds=R)
        fpt = flops_per_token(cfg)
        eager_ms = None
        for comp in compile_modes:
            name = f"R={R} {'compile' if comp else 'eager'}"
            try:
                b = Bench(cfg, s, compile=comp)
                t = time_steps(b.step, s.device, warmup + (2 if comp else 0), steps)
            except Exception as exc:
                rows.append([name, failure_line(exc)])
                failed = True
                continue
            finally:
                b = None
                cleanup(s.device)
            ms = t.ms_per_step
            eager_ms = ms if not comp else eager_ms
            tps = tokens / (ms / 1e3)
            u = mfu(tps, fpt, peak_tflops)
            mfus[(R, comp)] = u
            rows.append([name, f"{tps:,.0f}", f"{ms:.1f}", f"{fpt / 1e9:.3g}", f"{tps * fpt / 1e12:.3g}",
                         f"{100 * u:.1f}%" if s.device.type == "cuda" else "n/a",
                         f"{eager_ms / ms:.2f}x" if eager_ms else "n/a"])
            print("# done: " + " | ".join(f"{h} {c}" for h, c in zip(THROUGHPUT_HEADER, rows[-1])), flush=True)
    return rows, failed, mfus


# ---- memory -------------------------------------------------------------------------------------

class OutOfMemory(Exception):
    """A measured configuration did not fit the device."""


def measure_memory(base: GPTConfig, s: Setup, R: int, ckpt: bool) -> dict:
    """One warm-up step (creates the optimiser state), then one timed step for the peak, then one
    under saved-tensor hooks. On CUDA the peak is measured; on CPU `est_peak_mb` is filled in by
    the caller (it needs the per-round slope)."""
    cfg = replace(base, num_rounds=R, activation_checkpointing=ckpt)
    b = None
    try:
        b = Bench(cfg, s)
        b.step()
        reset_peak(s.device)
        t = time_steps(b.step, s.device, 0, 1)
        peak = torch.cuda.max_memory_allocated(s.device) / 1e6 if s.device.type == "cuda" else None
        saved = b.saved_mb()
        n_params = b.model.num_params()
    except torch.cuda.OutOfMemoryError as exc:
        raise OutOfMemory(str(exc).splitlines()[0]) from None
    finally:
        b = None
        cleanup(s.device)
    return {"R": R, "ckpt": ckpt, "peak_mb": peak, "saved_mb": saved, "ms": t.ms_per_step,
            "state_mb": BYTES_PER_PARAM_CPU * n_params / 1e6}


def cpu_estimate(m: dict, round_mb: float) -> float:
    return m["state_mb"] + m["saved_mb"] + (round_mb if m["ckpt"] else 0.0)


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of memory vs R."""
    rs = np.array([p[0] for p in points], dtype=float)
    ms = np.array([p[1] for p in points], dtype=float)
    if len(set(rs)) < 2:
        return float(ms.mean()), 0.0
    slope, intercept = np.polyfit(rs, ms, 1)
    return float(intercept), float(slope)


class MemoryModel:
    """Memory (MB) of a step at R: measured on CUDA, estimated on CPU."""

    def __init__(self, base: GPTConfig, s: Setup):
        self.base, self.s = base, s
        self.round_mb = 0.0  # per-round saved activations without checkpointing (CPU estimate)
        self.cache: dict[tuple[int, bool], dict] = {}

    def measure(self, R: int, ckpt: bool) -> dict:
        key = (R, ckpt)
        if key not in self.cache:
            m = measure_memory(self.base, self.s, R, ckpt)
            self.cache[key] = m
        m = self.cache[key]
        m["mem_mb"] = m["peak_mb"] if m["peak_mb"] is not None else cpu_estimate(m, self.round_mb)
        return m


def largest_r(mm: MemoryModel, ckpt: bool, points: list[tuple[int, float]], budget_mb: float,
              max_r: int) -> str:
    a, b = fit_line(points)
    mode = "with checkpointing" if ckpt else "without checkpointing"
    fit = f"fit {fmt_mb(a)} + {fmt_mb(b)} x R MB"
    if b <= 0:
        return f"{mode}: {fit}: memory does not grow with R; no bound from the fit"
    pred = math.floor((budget_mb - a) / b)
    if pred < 1:
        return f"{mode}: {fit}: predicts no R >= 1 fits"
    if pred > max_r:
        return f"{mode}: {fit}: predicts R = {pred} (above --max-r {max_r}: not verified)"

    def fits(r: int) -> tuple[bool, str]:
        try:
            m = mm.measure(r, ckpt)
        except OutOfMemory:
            return False, f"R={r}: out of memory"
        fit_ok = m["mem_mb"] <= budget_mb
        return fit_ok, f"R={r}: {fmt_mb(m['mem_mb'])} MB {'fits' if fit_ok else 'over'}"

    notes, r = [], pred
    ok, note = fits(r)
    notes.append(note)
    for _ in range(SEARCH_STEPS):  # step down until one fits
        if ok or r == 1:
            break
        r -= 1
        ok, note = fits(r)
        notes.append(note)
    if not ok:
        return f"{mode}: {fit}: predicted R = {pred}; none of R = {r}..{pred} fits ({'; '.join(notes)})"
    bounded = r + 1 > max_r
    for _ in range(SEARCH_STEPS):  # step up while R + 1 fits
        if r + 1 > max_r:
            bounded = True
            break
        up, note = fits(r + 1)
        notes.append(note)
        if not up:
            bounded = True
            break
        r += 1
    result = (f"largest verified R = {r}" if bounded and r < max_r else
              f"R = {r} fits (--max-r {max_r}: larger R not tried)" if bounded else
              f"R = {r} fits (search stopped after {SEARCH_STEPS} steps up; larger R may fit)")
    return f"{mode}: {fit}: predicted R = {pred}, {result} ({'; '.join(notes)})"


def memory_tables(base: GPTConfig, s: Setup, mem_rounds: list[int], budget_gb: float | None,
                  max_r: int) -> tuple[list[list[str]], list[str], bool]:
    mm = MemoryModel(base, s)
    rows, failed, ok = [], False, {False: [], True: []}
    for ckpt in (False, True):  # without first: its slope is the CPU estimate's recomputed round
        for R in mem_rounds:
            try:
                mm.measure(R, ckpt)
                ok[ckpt].append(R)
            except Exception as exc:
                rows.append([f"R={R} {'ckpt' if ckpt else 'no ckpt'}", failure_line(exc)])
                failed = True
            m = mm.cache.get((R, ckpt))
            if m is not None:
                peak = "estimated below (CPU)" if m["peak_mb"] is None else f"{fmt_mb(m['peak_mb'])} MB"
                print(f"# done: memory R={R} ckpt={ckpt}: saved {fmt_mb(m['saved_mb'])} MB, peak {peak}", flush=True)
        if not ckpt and len(ok[False]) >= 2:
            _, mm.round_mb = fit_line([(R, mm.cache[(R, False)]["saved_mb"]) for R in ok[False]])
    for R in mem_rounds:
        for ckpt in (False, True):
            if R not in ok[ckpt]:
                continue
            m = mm.measure(R, ckpt)
            off = mm.cache.get((R, False))
            ratio = f"{m['mem_mb'] / mm.measure(R, False)['mem_mb']:.2f}" if ckpt and off else ""
            rows.append([f"R={R} {'ckpt' if ckpt else 'no ckpt'}", fmt_mb(m['saved_mb']), fmt_mb(m['mem_mb']),
                         ratio, f"{m['ms']:.1f}"])
    lines = []
    if budget_gb is not None:
        budget_mb = budget_gb * 1e3
        for ckpt in (False, True):
            pts = [(R, mm.measure(R, ckpt)["mem_mb"]) for R in ok[ckpt]]
            if len(pts) < 2:
                lines.append(f"{'with' if ckpt else 'without'} checkpointing: fewer than 2 memory points")
                failed = True
                continue
            try:
                lines.append(largest_r(mm, ckpt, pts, budget_mb, max_r))
            except Exception as exc:  # e.g. an error other than out-of-memory while verifying
                lines.append(f"{'with' if ckpt else 'without'} checkpointing: {failure_line(exc)}")
                failed = True
    return rows, lines, failed


# ---- main ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--batch", type=int, help="sequences per step (default: the preset's)")
    parser.add_argument("--rounds", type=int, nargs="+", help="R values for the throughput table")
    parser.add_argument("--mem-rounds", type=int, nargs="+", help="R values for the memory table")
    parser.add_argument("--mem-budget-gb", type=float, help="memory budget for the largest-R search (GB = 1e9 B)")
    parser.add_argument("--max-r", type=int, help="do not verify predicted R above this")
    parser.add_argument("--warmup", type=int, help="untimed steps (compiled variants get 2 more)")
    parser.add_argument("--steps", type=int, help="timed steps")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--scaling", default="deeploop", choices=["baseline", "deeploop"])
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    p = PRESETS[args.preset]
    device = setup_device(args.device, args.threads)
    s = Setup(device=device, dtype=runtime.compute_dtype(TrainGPTConfig().dtype, device), batch=args.batch or p["batch"],
              scaling=ScalingConfig(scheme=args.scaling))
    base = p["model"]
    warmup = p["warmup"] if args.warmup is None else args.warmup
    steps = args.steps or p["steps"]
    budget = p["budget_gb"] if args.mem_budget_gb is None else args.mem_budget_gb
    n_params = sum(t.numel() for t in GPT(base, s.scaling).parameters())
    print(f"# looped GPT, preset {args.preset}: {describe(device)}, compute {s.dtype}")
    print(f"# hidden {base.hidden_size}, {base.num_heads} heads, K={base.num_blocks}, vocab {base.vocab_size}, "
          f"{n_params / 1e6:.2f}M parameters, batch {s.batch} x {base.seq_len} tokens, scaling {args.scaling}")
    failed = False

    if not args.skip_throughput:
        modes = [False] if args.no_compile else [False, True]
        rows, f, mfus = throughput(base, s, args.rounds or p["rounds"], modes, warmup, steps, args.peak_tflops)
        failed |= f
        print(f"\n## throughput (warm-up {warmup} (+2 compiled) + timed {steps} steps; MFU vs "
              f"{args.peak_tflops:g} TFLOP/s{'' if device.type == 'cuda' else ': n/a on CPU'})")
        print_table(THROUGHPUT_HEADER, rows)
        if device.type == "cuda" and 3 in (args.rounds or p["rounds"]):
            best = max((u for (r, _), u in mfus.items() if r == 3), default=None)
            if best is not None:
                print(f"# target (issue 6): >= 40% MFU at R=3: best {100 * best:.1f}% -> "
                      f"{'met' if best >= 0.40 else 'NOT met'}")

    if not args.skip_memory:
        rows, lines, f = memory_tables(base, s, args.mem_rounds or p["mem_rounds"], budget, args.max_r or p["max_r"])
        failed |= f
        what = ("peak MB = measured max allocated (step incl. optimiser state)" if device.type == "cuda" else
                f"peak MB = estimate: {BYTES_PER_PARAM_CPU} B/param + saved activations (+ one recomputed round "
                "with checkpointing)")
        print(f"\n## memory per training step, eager ({what})")
        print_table(["R / checkpointing", "saved act MB", "peak MB", "ckpt/no", "ms/step"], rows)
        print(f"\n## largest R within {budget:g} GB (batch {s.batch} x {base.seq_len})")
        for line in lines:
            print(f"- {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
