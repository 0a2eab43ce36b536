"""HRM train-step throughput: examples/s and tokens/s of the real trainer step on random batches.

Each timed step is `training.reasoner.Trainer.train_step` as `hrm-deeploop train` runs it: one ACT segment for
every carry slot (plus the no-grad segment for the Q target), the stablemax/softmax ACT loss,
backward, the grad-norm and finite checks, SparseSignSGD on the puzzle rows and AdamATan2 on
every parameter (the adam-atan2 CUDA kernel when it imports, else the PyTorch port). Batches are
random tokens of the right shapes (no dataset needed); tokens = examples x (seq_len + puzzle
slots) = examples x 901 for ARC.

    python benchmarks/bench_hrm.py --preset paper      # GPU: hidden 512, 8 heads, 4+4 layers, 2/2 cycles, batch 96, bf16
    python benchmarks/bench_hrm.py --preset cpu        # a small width that runs on a CPU in about a minute
    python benchmarks/bench_hrm.py --preset tiny --device cpu --steps 1 --warmup 0   # smoke test

Variants: eager and torch.compile, each with the fused Triton residual-norm kernel on and off
(the models' `fused` choice, `runtime.Env.fused_kernel`; on CUDA only: on CPU the kernel path is never taken, so only
eager and compile are run). Speedup is against eager without the kernel. Warm-up steps (which
include compilation) are not timed. Memory: CUDA max allocated during the variant's steps (CPU:
the process's peak RSS, which only grows), and the bytes of the activations autograd saves in one
step (saved-tensor hooks; device-independent).

Model FLOPs (for the TFLOP/s and MFU columns; matmuls and attention only, as in PaLM's MFU): per
token, every layer visit costs 2 P_layer + 4 T D forward; a training step runs
`segments x (C_H C_L K_L + C_H K_H)` layer visits forward (segments = 2 in training with ACT: the
step's segment and the no-grad one for the Q target) and back-propagates only through the last L
and H calls (K_L + K_H layer visits at twice the forward cost: the one-step gradient).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import (  # noqa: E402
    SavedActivations,
    add_common_args,
    describe,
    failure_line,
    fmt_mb,
    memory_label,
    peak_memory_mb,
    print_table,
    release_compiled,
    reset_peak,
    setup_device,
    time_steps,
)
from benchmarks.reasoner_setup import make_trainer, random_batches  # noqa: E402
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.models.core import swiglu_width  # noqa: E402
from hrm_deeploop.models.model_config import HRMConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.training.loop import mfu  # noqa: E402
from hrm_deeploop.training.train_config import (  # noqa: E402
    TrainGPTConfig,
)

PRESETS = {
    # The reference's ARC config per GPU: global batch 768 on 8 GPUs = 96 per GPU, bf16.
    "paper": dict(model=HRMConfig(), batch=96, warmup=3, steps=10),
    # A small width that runs on 2 CPU cores; same structure (2 H x 2 L cycles, 2 + 2 layers).
    "cpu": dict(model=HRMConfig(hidden_size=64, num_heads=2, expansion=2.0, num_h_layers=2, num_l_layers=2,
                                halt_max_steps=4, mlp_multiple=16, forward_dtype="float32"),
                batch=2, warmup=1, steps=2),
    # Smoke test size (short sequences): seconds on a CPU.
    "tiny": dict(model=HRMConfig(hidden_size=32, num_heads=2, expansion=2.0, num_h_layers=1, num_l_layers=1,
                                 halt_max_steps=2, mlp_multiple=16, forward_dtype="float32", seq_len=64),
                 batch=2, warmup=1, steps=1),
}

# Derived from the reference README (sapientinc/HRM): ARC-1 on 8 GPUs, "Runtime: ~24 hours",
# with its pretrain.py defaults = 518,225 steps of 768 examples (our train.max_steps on ARC-1).
# GPU model not stated; the time includes evaluation and checkpoints. A rough figure only.
REFERENCE_NOTE = ("reference, derived (sapientinc/HRM README: ARC-1 on 8 GPUs, 'Runtime: ~24 hours' for 518,225 steps "
                  "x 768 examples): ~{:.0f} examples/s per GPU averaged over the run, evaluation included (so its "
                  "training steps run at least this fast), GPU model not stated. Not a same-GPU comparison: that "
                  "needs the reference run on this GPU at batch 96.")
REFERENCE_EX_PER_S_PER_GPU = 518_225 * 768 / (24 * 3600) / 8


@dataclass
class Variant:
    name: str
    compile: bool
    fused: bool


def model_flops_per_example(cfg: HRMConfig, training: bool = True) -> float:
    """Matmul + attention FLOPs of one training step per example (see the module docstring)."""
    D, T = cfg.hidden_size, cfg.puzzle_len + cfg.seq_len
    inner = swiglu_width(D, cfg.expansion, cfg.mlp_multiple)
    p_layer = 3 * D * D + D * D + D * 2 * inner + inner * D  # qkv, o, gate_up, down
    visit = 2 * p_layer + 4 * T * D  # forward FLOPs per token per layer visit
    segments = 2 if training and cfg.halt_max_steps > 1 else 1
    fwd_visits = segments * (cfg.num_h_cycles * cfg.num_l_cycles * cfg.num_l_layers + cfg.num_h_cycles * cfg.num_h_layers)
    bwd_visits = cfg.num_l_layers + cfg.num_h_layers
    head = 2 * D * cfg.vocab_size * (segments + 2)  # lm_head forward each segment, backward once (2x)
    return T * (fwd_visits * visit + 2 * bwd_visits * visit + head)


def run_variant(v: Variant, model_cfg: HRMConfig, scaling: ScalingConfig, device: torch.device, batch: int,
                warmup: int, steps: int) -> dict:
    trainer = make_trainer(model_cfg, scaling, device, batch, v.compile, fused=v.fused)
    batches = random_batches(model_cfg, batch, 4, device)
    i = 0

    def step() -> None:
        nonlocal i
        trainer.train_step(tensors=batches[i % len(batches)])
        i += 1

    reset_peak(device)
    timing = time_steps(step, device, warmup, steps)
    peak = peak_memory_mb(device)
    m = trainer.model
    saved_mb = None
    try:
        with SavedActivations(exclude=[*m.parameters(), *m.buffers()]) as saved:
            step()
        saved_mb = saved.bytes / 1e6
    except Exception as exc:  # the hooks inside a compiled graph: report n/a rather than lose the row
        print(f"# {v.name}: saved-activation count failed: {failure_line(exc)}", file=sys.stderr)
    return {"timing": timing, "peak_mb": peak, "saved_mb": saved_mb,
            "params": m.num_params(), "optimizer": type(trainer.dense).__module__ + "." + type(trainer.dense).__name__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--batch", type=int, help="examples per step (default: the preset's)")
    parser.add_argument("--warmup", type=int, help="untimed steps per variant (include compilation)")
    parser.add_argument("--steps", type=int, help="timed steps per variant")
    parser.add_argument("--scaling", default="deeploop", choices=["baseline", "deeploop"])
    parser.add_argument("--variants", nargs="+", help="subset of: eager eager+fused compile compile+fused")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    parser.add_argument("--num-puzzle-ids", type=int, default=1024,
                        help="puzzle-table rows (ARC-1 has ~880K: a 1.8 GB fp32 buffer, not included by default)")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    device = setup_device(args.device, args.threads)
    batch = args.batch or preset["batch"]
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    steps = args.steps or preset["steps"]
    model_cfg = replace(preset["model"], num_puzzle_identifiers=args.num_puzzle_ids)
    scaling = ScalingConfig(scheme=args.scaling)
    dtype = runtime.compute_dtype(model_cfg.forward_dtype, device)
    tokens_per_example = model_cfg.puzzle_len + model_cfg.seq_len

    variants = [Variant("eager", False, False)]
    if device.type == "cuda":
        variants.append(Variant("eager+fused", False, True))
    if not args.no_compile:
        variants.append(Variant("compile", True, False))
        if device.type == "cuda":
            variants.append(Variant("compile+fused", True, True))
    if args.variants:
        variants = [v for v in variants if v.name in args.variants]

    c = model_cfg
    print(f"# HRM train step, preset {args.preset}: {describe(device)}, compute {dtype}")
    print(f"# hidden {c.hidden_size}, {c.num_heads} heads, expansion {c.expansion}, H/L layers {c.num_h_layers}/"
          f"{c.num_l_layers}, H/L cycles {c.num_h_cycles}/{c.num_l_cycles}, halt_max_steps {c.halt_max_steps}, "
          f"{tokens_per_example} tokens/example, batch {batch}, scaling {args.scaling}, {c.loss_type} "
          f"({c.stablemax_dtype}), warm-up {warmup} + timed {steps} steps")
    if device.type != "cuda":
        print("# fused residual-norm kernel: not used on CPU (the Triton kernel runs for CUDA tensors only)")
    flops_ex = model_flops_per_example(model_cfg)
    print(f"# model FLOPs per example per step: {flops_ex / 1e9:.2f} GFLOP (matmuls + attention)")

    header = ["variant", "examples/s", "tokens/s", "ms/step", "TFLOP/s", "MFU", memory_label(device),
              "saved act MB", "speedup"]
    rows, failed, base_ms, info = [], False, None, None
    for v in variants:
        try:
            r = run_variant(v, model_cfg, scaling, device, batch, warmup, steps)
        except Exception as exc:  # report (e.g. a compile failure) and go on with the next variant
            rows.append([v.name, failure_line(exc)])
            failed = True
            import traceback

            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        finally:
            release_compiled(device)
        info = r
        ms = r["timing"].ms_per_step
        base_ms = base_ms or (ms if v.name == "eager" else None)
        ex_s = batch / (ms / 1e3)
        tflops = ex_s * flops_ex / 1e12
        util = f"{100 * mfu(ex_s, flops_ex, args.peak_tflops):.1f}%" if device.type == "cuda" else "n/a"
        rows.append([v.name, f"{ex_s:,.1f}", f"{ex_s * tokens_per_example:,.0f}", f"{ms:.1f}", f"{tflops:.3g}", util,
                     fmt_mb(r['peak_mb']), fmt_mb(r['saved_mb']) if r["saved_mb"] is not None else "n/a",
                     f"{base_ms / ms:.2f}x" if base_ms else "n/a"])
        print(f"# done ({r['timing'].seconds:.1f} s timed): " + " | ".join(f"{h} {c}" for h, c in zip(header, rows[-1])),
              flush=True)
    print()
    print_table(header, rows)
    if info is not None:
        print(f"# {info['params']:,} parameters (puzzle table excluded), optimiser {info['optimizer']}")
    if device.type == "cuda":
        print(f"# MFU against {args.peak_tflops:g} TFLOP/s")
        print("# " + REFERENCE_NOTE.format(REFERENCE_EX_PER_S_PER_GPU))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
