"""A reasoner's training step against its reference code, once per speed lever, with kernel profiles.

Needs the reference checkout the model's `compare_reference_<model>.py` takes. For each lever, a
fresh trainer of ours (baseline scaling, compiled) and the reference's compiled step (built once)
take turns step by step (`benchlib.time_interleaved`); the ratio is ours / reference examples per
second. Levers (GPU switches, numerics the compiler's; the CPU equivalence checks do not use them):

- `default`: today's trainer (`train.compile=true`; the fused residual-norm kernel on CUDA tensors);
- `nofused`: the same without the Triton residual-norm kernel (torch.compile fuses the norm itself);
- `optim`: AdamATan2's update as one compiled call over all parameters (`AdamATan2(compiled=True)`)
  instead of ~9 kernels per parameter;
- `cgraphs`: the compiled forward + loss under CUDA graphs (`mode="reduce-overhead"`), the carry
  copied out of the graph's memory after each step;
- `autotune`: `mode="max-autotune-no-cudagraphs"` (GEMM and Triton autotuning; minutes to compile).

With `--profile`, the device time of three steps by kernel for the reference and for our `default`.

    python benchmarks/gpu_levers.py --model hrm --reference .gpucarry/hrm-reference --device cuda \\
        --levers default nofused optim cgraphs --profile
    python benchmarks/gpu_levers.py --model urm --reference ... --preset tiny --device cpu --levers default optim

Run several at once on one GPU with GPU_TURN_LOCK=/tmp/gpu.turn (benchmarks/gpuprof.py): their
compilations overlap, their timed steps take turns.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import (  # noqa: E402
    add_common_args,
    describe,
    failure_line,
    print_table,
    setup_device,
    time_interleaved,
)
from benchmarks.gpuprof import kernel_profile  # noqa: E402
from benchmarks.refcheck import reference_step_fn  # noqa: E402
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.training.optim import AdamATan2  # noqa: E402
from hrm_deeploop.training.train_config import ReasonerOptim, TrainGPTConfig  # noqa: E402
from hrm_deeploop.typed_config import to_dict, typed  # noqa: E402

LEVERS = ("default", "nofused", "optim", "cgraphs", "autotune")
MODELS = {  # model -> (comparison module, its config class, EMA in the reference's setup)
    "hrm": ("benchmarks.compare_reference_hrm", "HRMConfig", False),
    "trm": ("benchmarks.compare_reference_trm", "TRMConfig", True),
    "urm": ("benchmarks.compare_reference_urm", "URMConfig", True),
}


def presets(model: str) -> dict:
    if model == "hrm":
        from benchmarks.bench_hrm import PRESETS
        return PRESETS
    return importlib.import_module(MODELS[model][0]).PRESETS


def _clone_carry(carry):
    """The carry with its tensors copied out of a CUDA graph's memory (the next replay reuses it)."""
    return dataclasses.replace(carry, z_H=carry.z_H.clone(), z_L=carry.z_L.clone(), steps=carry.steps.clone(),
                               halted=carry.halted.clone(), data={k: v.clone() for k, v in carry.data.items()})


def lever_step(lever: str, cfg, batch: int, device: torch.device, o: ReasonerOptim, ema: bool):
    """One step of our trainer with `lever` applied (module docstring)."""
    from benchmarks.reasoner_setup import make_trainer, random_batches
    from hrm_deeploop.models.scaling import ScalingConfig

    trainer = make_trainer(cfg, ScalingConfig(scheme="baseline"), device, batch, True, o, ema=ema,
                           fused=lever != "nofused")
    # each lever compiles its own copy of the function (a distinct code object, so that no cache
    # entry of an earlier lever's mode is reused)
    fn = trainer._forward_loss.__func__
    fresh = type(fn)(fn.__code__.replace(co_name=f"_forward_loss_{lever}"), fn.__globals__, fn.__name__,
                     fn.__defaults__, fn.__closure__).__get__(trainer)
    if lever == "cgraphs":
        compiled = torch.compile(fresh, mode="reduce-overhead")

        def forward_loss(carry, b, min_halt):
            torch.compiler.cudagraph_mark_step_begin()
            carry, loss, m = compiled(carry, b, min_halt)
            return _clone_carry(carry), loss, {k: v.clone() for k, v in m.items()}

        trainer.forward_loss = forward_loss
    elif lever == "autotune":
        trainer.forward_loss = torch.compile(fresh, mode="max-autotune-no-cudagraphs")
    else:
        trainer.forward_loss = torch.compile(fresh)
    if lever == "optim":
        trainer.dense = AdamATan2(trainer.model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2),
                                  weight_decay=o.weight_decay, compiled=True)
    batches = random_batches(cfg, batch, 4, device)
    return lambda: trainer.train_step(tensors=batches[trainer.step % len(batches)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--reference", required=True, type=Path, help="the reference checkout (see the module)")
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per side (the first compiles)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side")
    parser.add_argument("--levers", nargs="+", choices=LEVERS, default=["default", "optim"])
    parser.add_argument("--profile", action="store_true", help="kernel profile of the reference and our default")
    parser.add_argument("--num-puzzle-ids", type=int, default=1024)
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    module_name, config_name, ema = MODELS[args.model]
    cmp = importlib.import_module(module_name)
    preset = presets(args.model)[args.preset]
    device = setup_device(args.device, args.threads)
    ref, note = cmp.import_reference(args.reference.resolve())
    config_cls = getattr(importlib.import_module("hrm_deeploop.models.model_config"), config_name)
    cfg = typed({**to_dict(preset["model"]), "num_puzzle_identifiers": args.num_puzzle_ids,
                 "mlp_multiple": cmp.REFERENCE_MLP_MULTIPLE}, config_cls, "--set ")
    batch = args.batch or preset["batch"]
    dtype = runtime.compute_dtype(cfg.forward_dtype, device)
    o = ReasonerOptim(warmup_steps=2)
    active = getattr(ref, "active", None) or (lambda: _nothing())
    print(f"# {args.model.upper()} levers vs reference ({args.reference}), preset {args.preset}, batch {batch}, "
          f"{dtype}: {describe(device)}")
    print(f"# reference: {note}; warm-up {args.warmup} + timed {args.steps} steps per side, interleaved, "
          "median wall time", flush=True)
    t0 = time.perf_counter()
    with active():
        ref_step = reference_step_fn(ref, cfg, batch, dtype, device, True, o, ema=ema)
        ref_step()  # compiles
    print(f"# reference compiled in {time.perf_counter() - t0:.0f} s", flush=True)
    rows, failed = [], False
    for lever in args.levers:
        t0 = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            ours = lever_step(lever, cfg, batch, device, o, ema)
            with active():
                ms = time_interleaved({"reference": ref_step, "ours": ours}, device, args.warmup, args.steps)
            r, u = batch / (ms["reference"] / 1e3), batch / (ms["ours"] / 1e3)
            peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
            rows.append([lever, f"{r:,.1f}", f"{u:,.1f}", f"{u / r:.3f}x", f"{time.perf_counter() - t0:.0f}",
                         f"{peak:,.0f}"])
            if args.profile and lever == "default":
                for side, fn in (("reference", ref_step), ("ours default", ours)):
                    with active():
                        kernels, kinds = kernel_profile(fn, device)
                    print(f"\n## kernel profile, {side}: device ms per step")
                    print_table(["kernel", "ms/step", "share", "calls/step"], kernels)
                    print_table(["kind", "ms/step", "share"], kinds)
            del ours
        except Exception as exc:  # one lever failing (a compile error, say) must not lose the others
            failed = True
            rows.append([lever, "failed", failure_line(exc)[:90], "", f"{time.perf_counter() - t0:.0f}", ""])
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"# {lever} done: {rows[-1]}", flush=True)
    print()
    print_table(["lever", "reference ex/s", "ours ex/s", "ratio", "seconds (incl. compile)", "peak MiB (process)"],
                rows)
    print("# ratio = ours / reference examples per second in the same interleaved run (> 1: ours is faster); "
          "target >= 1.15x")
    return 1 if failed else 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
