"""The looped GPT at R = 1 against nanoGPT's model at the same size: training tokens/s side by side.

Needs a checkout of nanoGPT, which this project does not ship:

    git clone https://github.com/karpathy/nanoGPT benchmarks/out/nanogpt-reference   # /benchmarks/out is git-ignored
    python benchmarks/compare_nanogpt.py --reference benchmarks/out/nanogpt-reference              # CPU preset
    python benchmarks/compare_nanogpt.py --reference ... --preset gpt2 --device cuda                # GPT-2 small

With `--loops R ...`, ours also runs with K = n_layer / R blocks looped R rounds: the same unrolled
depth and FLOPs with R times fewer block parameters, so its row against ours at R = 1 is what the
loop itself costs.

Both models get the same width, heads, depth (our K blocks at R = 1 = nanoGPT's n_layer),
vocabulary, context and batch, and are timed on the same step: forward with the loss, backward,
grad-norm clip 1.0 (nanoGPT's train.py default, ours too), AdamW (each project's own parameter
groups: ours `training.lm.make_optimizer`, nanoGPT's `configure_optimizers`), zero_grad; float32
on CPU, bf16 autocast on CUDA (both). Repetitions alternate which model runs first; the figure is
the median step time of each.

What differs, by design of the two architectures (printed with the parameter counts):
- ours: Post-LN RMSNorm (with gains, in fp32) around each sublayer, an RMSNorm on the input
  embedding, RoPE (no position parameters), SwiGLU MLP, no biases;
- nanoGPT: Pre-LN LayerNorm (`bias=False`, so gains only) and a final LayerNorm, learned
  position embeddings (context x width parameters), GELU MLP of width 4 x hidden.
The MLPs are matched in parameters and FLOPs: SwiGLU's inner width is 8/3 x hidden (its three
matrices then hold 8 hidden^2, as nanoGPT's two 4 x hidden ones), with our `mlp_multiple=1`.
Attention (fused QKV, causal SDPA) and the tied embedding/head are the same in both.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import add_common_args, describe, print_table, setup_device, sync  # noqa: E402
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.models.gpt import GPT, flops_per_token  # noqa: E402
from hrm_deeploop.models.model_config import GPTConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.training.lm import make_optimizer  # noqa: E402
from hrm_deeploop.training.train_config import LMOptim, TrainGPTConfig  # noqa: E402


@dataclass(frozen=True)
class Size:
    hidden: int
    heads: int
    layers: int
    vocab: int
    context: int
    batch: int


PRESETS = {
    "cpu": Size(hidden=256, heads=4, layers=4, vocab=8192, context=256, batch=8),  # ~1 s per step pair on a core
    "gpt2": Size(hidden=768, heads=12, layers=12, vocab=50304, context=1024, batch=12),  # GPT-2 small
    "tiny": Size(hidden=32, heads=2, layers=2, vocab=256, context=32, batch=2),  # smoke test
}


@contextlib.contextmanager
def what_if(parts: list[str]):
    """Our model with parts made as cheap as they could get (an upper bound, not our model): 'norm'
    swaps the fp32 RMSNorm for ATen's fused LayerNorm kernel (the cost of a perfectly fused norm),
    'rope' makes RoPE free (the identity)."""
    from hrm_deeploop.models import core

    saved = core.rms_norm, core.apply_rope
    if "norm" in parts:
        core.rms_norm = lambda x, weight=None, eps=1e-5: F.layer_norm(x, x.shape[-1:], weight, None, eps)
    if "rope" in parts:
        core.apply_rope = lambda q, k, cos, sin: (q, k)
    try:
        yield
    finally:
        core.rms_norm, core.apply_rope = saved


def load_nanogpt(ref_dir: Path):
    """nanoGPT's model.py as a module (it imports only torch)."""
    path = ref_dir / "model.py"
    if not path.is_file():
        raise SystemExit(f"--reference {ref_dir}: no model.py there (a checkout of github.com/karpathy/nanoGPT)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours_config(s: Size, mlp: str = "swiglu", rounds: int = 1) -> GPTConfig:
    """Ours at nanoGPT's size: K = layers / rounds blocks looped `rounds` times (same unrolled depth)."""
    return GPTConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_heads=s.heads, num_blocks=s.layers // rounds,
                     num_rounds=rounds, expansion=4.0, mlp_multiple=64, seq_len=s.context, mlp=mlp)


class Side:
    """One model with its optimiser and one training step on fixed random tokens."""

    def __init__(self, name: str, model: torch.nn.Module, opt: torch.optim.Optimizer, s: Size,
                 device: torch.device, dtype: torch.dtype, compile_: bool):
        self.name, self.model, self.opt, self.device, self.dtype = name, model, opt, device, dtype
        self.fwd = torch.compile(model) if compile_ else model
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, s.vocab, (s.batch, s.context + 1), generator=g)
        self.x, self.y = tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)
        self.params = sum(p.numel() for p in model.parameters())

    def step(self) -> None:
        with runtime.autocast(self.device, self.dtype):
            loss = self.fwd(self.x, self.y)[1]  # both return (logits, loss)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def make_sides(nano, s: Size, device: torch.device, dtype: torch.dtype, compile_: bool = False,
               mlp: str = "swiglu", loops: tuple[int, ...] = ()) -> list[Side]:
    """[ours at R = 1, nanoGPT, ours at each R of `loops`]."""
    sides = []
    for r in (1, *loops):
        torch.manual_seed(0)
        ours = GPT(ours_config(s, mlp, r), ScalingConfig(scheme="baseline")).to(device).train()
        name = f"ours (looped GPT, R = 1, {mlp})" if r == 1 else f"ours (K = {s.layers // r}, R = {r}, {mlp})"
        sides.append(Side(name, ours, make_optimizer(ours, LMOptim(), device), s, device, dtype, compile_))
    torch.manual_seed(0)
    o = LMOptim()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
        ref = nano.GPT(nano.GPTConfig(block_size=s.context, vocab_size=s.vocab, n_layer=s.layers, n_head=s.heads,
                                      n_embd=s.hidden, dropout=0.0, bias=False)).to(device).train()
        opt = ref.configure_optimizers(o.weight_decay, o.lr, (o.beta1, o.beta2), device.type)
    sides.insert(1, Side("nanoGPT", ref, opt, s, device, dtype, compile_))
    return sides


def compare(sides: list[Side], device: torch.device, warmup: int, steps: int, block: int) -> dict[str, list[float]]:
    """Per-step seconds of each side, in alternating blocks of `block` steps."""
    for side in sides:
        for _ in range(warmup):
            side.step()
    times: dict[str, list[float]] = {side.name: [] for side in sides}
    for r in range(-(-steps // block)):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            for _ in range(block):
                sync(device)
                t0 = time.perf_counter()
                side.step()
                sync(device)
                times[side.name].append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/karpathy/nanoGPT")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--batch", type=int, help="sequences per step (default: the preset's)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--block", type=int, default=2, help="steps per model before switching to the other")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (nanoGPT's train.py default)")
    parser.add_argument("--mlp", choices=["swiglu", "gelu"], default="swiglu",
                        help="our MLP: SwiGLU (the default, HRM's) or GPT-2's GELU MLP (nanoGPT's)")
    parser.add_argument("--loops", nargs="+", type=int, default=[], metavar="R",
                        help="also ours looped: K = layers / R blocks x R rounds, the same unrolled depth and FLOPs "
                             "with R times fewer block parameters (R must divide the preset's layers)")
    parser.add_argument("--what-if", nargs="+", choices=["norm", "rope"], default=[],
                        help="an upper bound, not our model: our RMSNorm at fused LayerNorm's cost (norm), RoPE free "
                             "(rope)")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    s = PRESETS[args.preset]
    if args.batch:
        s = Size(**{**s.__dict__, "batch": args.batch})
    bad = [r for r in args.loops if r < 2 or s.layers % r]
    if bad:
        parser.error(f"--loops {bad}: each R must be >= 2 and divide the preset's {s.layers} layers")
    device = setup_device(args.device, args.threads)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    nano = load_nanogpt(args.reference.resolve())
    sides = make_sides(nano, s, device, dtype, args.compile, args.mlp, tuple(args.loops))
    with what_if(args.what_if):
        times = compare(sides, device, args.warmup, args.steps, args.block)

    tokens = s.batch * s.context
    fpt = flops_per_token(ours_config(s, args.mlp))  # matmul + attention FLOPs, the same count for both (see the docstring)
    med = {name: statistics.median(t) for name, t in times.items()}
    ref_name, r1_name = sides[1].name, sides[0].name
    print(f"# looped GPT (R = 1) vs nanoGPT, preset {args.preset}, {'compiled' if args.compile else 'eager'}: "
          f"{describe(device)}, {dtype}")
    print(f"# hidden {s.hidden}, {s.heads} heads, {s.layers} layers, vocab {s.vocab}, context {s.context}, "
          f"batch {s.batch} ({tokens:,} tokens/step); {args.steps} timed steps each in alternating blocks of "
          f"{args.block} after {args.warmup} warm-up; {fpt / 1e9:.4f} GFLOP/token (fwd+bwd matmuls + attention)")
    if args.what_if:
        print(f"# WHAT-IF, not our model: an upper bound with these parts at their cheapest (norm: ATen's fused "
              f"LayerNorm in place of the fp32 RMSNorm; rope: RoPE free) -- here: {' '.join(args.what_if)}")
    rows = []
    for side in sides:
        t = times[side.name]
        ms = 1e3 * med[side.name]
        rows.append([side.name, f"{side.params:,}", f"{ms:.2f}", f"{1e3 * min(t):.2f}-{1e3 * max(t):.2f}",
                     f"{tokens / med[side.name]:,.0f}", f"{med[ref_name] / med[side.name]:.2f}x",
                     f"{med[r1_name] / med[side.name]:.2f}x"])
    print_table(["model", "parameters", "ms/step (median)", "min-max", "tokens/s", "vs nanoGPT", "vs ours R = 1"],
                rows)
    print("# parameters differ by nanoGPT's position table (context x hidden) and SwiGLU's rounding of 8/3 x hidden")
    return 0


if __name__ == "__main__":
    sys.exit(main())
