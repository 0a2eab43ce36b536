"""TRM side by side with the reference implementation (SamsungSAILMontreal/TinyRecursiveModels).

Needs a checkout of the reference code, which this project does not ship:

    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels benchmarks/out/trm-reference
    python benchmarks/compare_reference_trm.py --reference benchmarks/out/trm-reference --preset tiny
    python benchmarks/compare_reference_trm.py --reference ... --preset tiny --set mixer=mlp pos_encodings=none
    python benchmarks/compare_reference_trm.py --reference ... --preset paper   # GPU: ARC config, batch 192, bf16

Three parts, at one config (`--preset`, with the reference's fixed SwiGLU width multiple of 256):

1. Equivalence (fp32, exploration on): the reference's `ACTLossHead(TinyRecursiveReasoningModel_ACTV1)`
   is built, its weights are loaded into our `TRM` (baseline scaling) through the official-
   checkpoint key map, the puzzle table and the Q head get random values (so that slots halt early
   and the reload path runs), and both run `--check-steps` training steps on the same batches:
   the reference as its `pretrain.train_batch` + `EMAHelper.update` do it (its sparse SignSGD class,
   its lr schedule function), ours through `training.reasoner.Trainer.train_step` with the weight
   average on. Exploration draws match: before each reference step the global torch generator
   (which the reference draws from) gets the state of our trainer's exploration generator (on
   CUDA the reference's two device-side draws are taken on the host instead: `benchlib.HostDrawnTorch`). After
   each step it compares the loss, logits, Q logits, halting decisions, every dense gradient, the
   puzzle-row gradients and, after the optimiser step, every weight, the puzzle table and every
   EMA weight; then evaluation as the reference's pretrain runs it (on its `ema_copy`, eval mode,
   segments until every slot halts) against our `predict` inside `EMA.applied`, both on our EMA
   weights and puzzle table (so that a difference there is the evaluation's own), with a floor
   beside each evaluation quantity (ours against a copy whose weights differ by 1e-7 relative).
   Exit 1 when a relative difference exceeds `--tol` (0: bit-identical) or a decision or token
   differs (an evaluation quantity: beyond the larger of those and its floor). On CUDA the part
   runs under `benchlib.strict_numerics` (deterministic kernels, no TF32, SDPA's math backend).
2. Sensitivity: the same first step with DeepLoop scaling on our side (same weights, alpha =
   sqrt(2 N_g)) must differ from the reference, or part 1 would prove nothing.
3. Throughput: the reference's step as its `train_batch` does it (loss head forward, backward of
   loss / batch, sparse SignSGD + AdamATan2 with the scheduled lr, zero_grad, metrics to the host)
   plus its EMA update, eager and `torch.compile` (its pretrain compiles the loss head); against
   ours, `Trainer.train_step` with the weight average (baseline and deeploop scaling). The sides
   take turns step by step (a shared machine's load falls on all alike); on CPU the clock is the
   process's CPU time, which other processes do not inflate; warm-up steps (compilation) are not
   timed; ratio = ours / reference examples/s, from median step times.

What is not the reference's (printed in the header): `pretrain.py` is imported for its lr schedule
function only, with stand-ins for what it imports at module level and never calls here (`wandb`,
`coolname`, `argdantic`, and `adam_atan2`, whose class is `hrm_deeploop.training.optim.AdamATan2`);
the AdamATan2 of both sides is `make_adam_atan2` (the adam-atan2 CUDA kernel when it imports, as
the reference's pretrain uses, else the PyTorch port). TRM's attention is already PyTorch SDPA, so
no attention stand-in is needed. Its modules need pydantic and einops.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import describe, setup_device  # noqa: E402
from benchmarks.gpuprof import sdpa_in_query_layout  # noqa: E402
from benchmarks.refcheck import (  # noqa: E402
    EMA_RATE,
    add_reference_args,
    reference_modules,
    run_reference_comparison,
    stub_pretrain_modules,
)
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.errors import ConfigError  # noqa: E402
from hrm_deeploop.models.model_config import TRMConfig  # noqa: E402
from hrm_deeploop.official import official_trm_key_map  # noqa: E402
from hrm_deeploop.typed_config import to_dict, typed  # noqa: E402

REFERENCE_MLP_MULTIPLE = 256  # TRM's SwiGLU rounds its width up to a multiple of 256, fixed

PRESETS = {
    # The reference's ARC config per GPU: global batch 768 on its README's 4 GPUs = 192, bf16.
    "paper": dict(model=TRMConfig(num_l_cycles=4), batch=192, warmup=3, steps=10),
    # A small width on 2 CPU cores; the ARC structure (2 blocks, T=3 x n=4, 16 prefix positions).
    "cpu": dict(model=TRMConfig(hidden_size=64, num_heads=2, expansion=2.0, num_l_cycles=4, halt_max_steps=4,
                                forward_dtype="float32"), batch=2, warmup=1, steps=2),
    # Smoke-test size (short sequences): seconds on a CPU.
    "tiny": dict(model=TRMConfig(hidden_size=32, num_heads=2, expansion=2.0, num_h_cycles=2, num_l_cycles=2,
                                 halt_max_steps=3, puzzle_emb_len=4, forward_dtype="float32", seq_len=64),
                 batch=4, warmup=1, steps=2),
}

# ---- loading the reference ------------------------------------------------------------------------

REFERENCE_TOP = ("models", "utils", "dataset", "evaluators", "puzzle_dataset", "pretrain")


def import_reference(ref_dir: Path) -> tuple[types.SimpleNamespace, str]:
    """The reference's model, loss head, sparse optimiser, EMA helper and lr schedule function,
    with `build` and `key_map` for the shared protocol (`benchlib.check_reference`)."""
    if not (ref_dir / "models" / "recursive_reasoning" / "trm.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no models/recursive_reasoning/trm.py there (a checkout of "
                         "https://github.com/SamsungSAILMontreal/TinyRecursiveModels is expected)")
    stubbed = stub_pretrain_modules()
    modules: dict[str, types.ModuleType] = {}
    with reference_modules(ref_dir, modules, REFERENCE_TOP):
        try:
            trm = importlib.import_module("models.recursive_reasoning.trm")
            losses = importlib.import_module("models.losses")
            sparse = importlib.import_module("models.sparse_embedding")
            ema = importlib.import_module("models.ema")
            pretrain = importlib.import_module("pretrain")
            layers = importlib.import_module("models.layers")
        except ImportError as e:
            raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs pydantic and einops)") from None
    # its attention `.view`s SDPA's output after a transpose, which only works in the layout the
    # flash kernels return (query's, (B, S, H, D) in memory); under strict_numerics' math backend
    # (GPU) the output is (B, H, S, D) and the view fails (second lease): the same values, relaid
    layers.scaled_dot_product_attention = sdpa_in_query_layout
    note = (f"pretrain.py imported for its lr schedule with stand-in modules {stubbed + ['argdantic']} "
            "(never called); both sides' AdamATan2: make_adam_atan2; its SDPA's output kept in the query's layout")
    ref = types.SimpleNamespace(Model=trm.TinyRecursiveReasoningModel_ACTV1, LossHead=losses.ACTLossHead,
                                model_module=trm,
                                SignSGD=sparse.CastedSparseEmbeddingSignSGD_Distributed, EMAHelper=ema.EMAHelper,
                                lr=pretrain.cosine_schedule_with_warmup_lr_lambda,
                                active=lambda: reference_modules(ref_dir, modules, REFERENCE_TOP), key_map=key_map)
    ref.build = lambda cfg, batch, dtype, device: build_reference(ref, cfg, batch, dtype, device)
    return ref, note


def reference_config(cfg: TRMConfig, batch: int, dtype: torch.dtype) -> dict:
    """TRM's arch dict for our config (pretrain.create_model adds the runtime fields)."""
    return dict(batch_size=batch, seq_len=cfg.seq_len, puzzle_emb_ndim=cfg.puzzle_dim,
                num_puzzle_identifiers=cfg.num_puzzle_identifiers, vocab_size=cfg.vocab_size,
                H_cycles=cfg.num_h_cycles, L_cycles=cfg.num_l_cycles, H_layers=0, L_layers=cfg.num_layers,
                hidden_size=cfg.hidden_size, expansion=cfg.expansion, num_heads=cfg.num_heads,
                pos_encodings=cfg.pos_encodings, rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
                halt_max_steps=cfg.halt_max_steps, halt_exploration_prob=cfg.halt_exploration_prob,
                forward_dtype=str(dtype).removeprefix("torch."), mlp_t=cfg.mixer == "mlp",
                puzzle_emb_len=cfg.puzzle_emb_len, no_ACT_continue=not cfg.act_continue, causal=False)


def build_reference(ref, cfg: TRMConfig, batch: int, dtype: torch.dtype, device: torch.device):
    """ACTLossHead(model) built on `device` as the reference's pretrain builds it (inside torch.device)."""
    with torch.device(device):
        return ref.LossHead(ref.Model(reference_config(cfg, batch, dtype)), loss_type=cfg.loss_type)


def key_map(cfg: TRMConfig) -> dict[str, str]:
    return official_trm_key_map(cfg.num_layers, cfg.pos_encodings, cfg.puzzle_dim > 0, cfg.mixer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    add_reference_args(parser, "github.com/SamsungSAILMontreal/TinyRecursiveModels",
                       "TRMConfig (e.g. mixer=mlp pos_encodings=none num_l_cycles=6)")
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    device = setup_device(args.device, args.threads)
    ref, note = import_reference(args.reference.resolve())
    try:
        cfg = typed({**to_dict(preset["model"]), "num_puzzle_identifiers": args.num_puzzle_ids,
                     "mlp_multiple": REFERENCE_MLP_MULTIPLE, **OmegaConf.from_dotlist(args.set)}, TRMConfig, "--set ")
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    if cfg.act_continue:
        raise SystemExit("--set act_continue=true: the reference cannot run it (its ACT wrapper unpacks five values "
                         "from its inner model's three and fails); docs/trm.md")
    batch = args.batch or preset["batch"]
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    steps = args.steps or preset["steps"]
    dtype = runtime.compute_dtype(cfg.forward_dtype, device)
    print(f"# TRM vs reference ({args.reference}), preset {args.preset}: {describe(device)}")
    print(f"# hidden {cfg.hidden_size}, {cfg.num_heads} heads, {cfg.num_layers} blocks, mixer {cfg.mixer}, "
          f"pos {cfg.pos_encodings}, T={cfg.num_h_cycles} x n={cfg.num_l_cycles}, halt_max_steps {cfg.halt_max_steps}, "
          f"{cfg.puzzle_len + cfg.seq_len} tokens/example, {cfg.loss_type} ({cfg.stablemax_dtype}), EMA {EMA_RATE}")
    print(f"# stand-ins: {note}")
    # TRM's ACTLossHead passes valid_mask= to its loss, which its softmax_cross_entropy does not take.
    skip = ("TRM's softmax_cross_entropy fails (TypeError: unexpected keyword argument 'valid_mask' from its "
            "ACTLossHead)") if cfg.loss_type == "softmax_cross_entropy" else None
    failed = run_reference_comparison(ref, cfg, args, batch, warmup, steps, device, dtype, skip_check=skip)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
