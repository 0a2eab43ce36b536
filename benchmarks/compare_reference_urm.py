"""URM side by side with the reference implementation (zitian-gao/URM, now UbiquantAI/URM).

Needs a checkout of the reference code, which this project does not ship:

    git clone https://github.com/zitian-gao/URM benchmarks/out/urm-reference
    python benchmarks/compare_reference_urm.py --reference benchmarks/out/urm-reference --preset tiny
    python benchmarks/compare_reference_urm.py --reference ... --preset cpu     # the published structure, small width
    python benchmarks/compare_reference_urm.py --reference ... --preset paper   # GPU: the published setup, batch 96, bf16
    python benchmarks/compare_reference_urm.py --reference ... --optimizer muon  # ARC-AGI-2's optimiser on both sides

The protocol is TRM's (`benchlib.check_reference`, `benchlib.run_reference_comparison`), at one
config (`--preset`, with the reference's fixed SwiGLU width multiple of 256):

1. Equivalence (fp32, the reference's exploration probability 0.1): its `ACTLossHead(URM)` is
   built, its weights are loaded into our `URM` (baseline scaling) through `key_map`, the puzzle
   table and the Q head get random values (so that slots halt early and the reload path runs),
   and both run `--check-steps` training steps on the same batches: the reference as its
   `pretrain.train_batch` + `EMAHelper.update` (defined in its pretrain.py) do it, ours through
   `Trainer.train_step` with the weight average. Exploration draws match (the global generator
   gets our trainer's generator state before each reference step). After each step: loss, logits,
   Q logits, halting decisions, ACT step counts, every dense gradient, the puzzle-row gradients,
   every weight and the puzzle table after the optimiser step, every EMA weight; then evaluation
   as its pretrain runs it (its `ema_copy`, eval mode, segments until every slot halts: `loops`)
   against our `predict`, both on our EMA weights, with a floor beside each evaluation quantity.
   Exit 1 when a relative difference exceeds `--tol` (0: bit-identical) or a decision differs.
2. Sensitivity: the same first step with DeepLoop on our side must differ.
3. Throughput: the reference's step as its `train_batch` does it plus its EMA update, eager and
   `torch.compile`, against ours (baseline and deeploop); interleaved, median step times.

Stand-ins (printed in the header): `flash_attn` (CUDA only; `models/layers.py` imports it) is
`flash_attn_func` on PyTorch SDPA, the attention our core runs; in fp32 runs the reference's
ConvSwiGLU convolution, which its layers.py holds in bf16 whatever the forward dtype, is cast to
fp32 (ours keeps fp32 master weights and casts at use); `pretrain.py` is imported for its lr
schedule function and EMAHelper with stand-ins for what it imports and never calls here (`wandb`,
`coolname`, `adam_atan2`: both sides' AdamATan2 is `make_adam_atan2`). Its modules need pydantic,
einops, hydra and tqdm.

`--optimizer muon` (its ARC-AGI-2 script's `use_muon=True`): the reference's own `models/muon.py`
Muon, with the two parameter groups its `create_model` builds, against ours (`training/muon.py`,
`optim.name=muon`). Its `msign` is wrapped in `torch.compile`; by default it runs uncompiled (its
undecorated function, `--reference-msign eager`), the eager torch ours is; `--reference-msign
compiled` keeps the compiled one (inductor on CPU: the result differs in the last bits).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import describe, setup_device  # noqa: E402
from benchmarks.refcheck import (  # noqa: E402
    EMA_RATE,
    add_reference_args,
    reference_modules,
    run_reference_comparison,
    stub_pretrain_modules,
)
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.errors import ConfigError  # noqa: E402
from hrm_deeploop.models.model_config import URMConfig  # noqa: E402
from hrm_deeploop.official import OFFICIAL_PREFIX  # noqa: E402
from hrm_deeploop.typed_config import to_dict, typed  # noqa: E402

REFERENCE_MLP_MULTIPLE = 256  # URM's ConvSwiGLU rounds its width up to a multiple of 256, fixed
REFERENCE_EXPLORATION = 0.1  # hard-coded in its ACT wrapper

PRESETS = {
    # The published setup per GPU: global batch 768 on the scripts' 8 GPUs = 96, bf16.
    "paper": dict(model=URMConfig(), batch=96, warmup=3, steps=10),
    # The published structure (4 blocks, H=2 x C_L=6, loops 16) at a small width, on 2 CPU cores.
    "cpu": dict(model=URMConfig(hidden_size=64, num_heads=2, expansion=2.0, halt_max_steps=4,
                                forward_dtype="float32"), batch=2, warmup=1, steps=2),
    # Smoke-test size (short sequences): seconds on a CPU.
    "tiny": dict(model=URMConfig(hidden_size=32, num_heads=2, expansion=2.0, num_layers=2, num_h_cycles=2,
                                 num_l_cycles=2, halt_max_steps=3, forward_dtype="float32", seq_len=64),
                 batch=4, warmup=1, steps=2),
}

# ---- loading the reference ------------------------------------------------------------------------

REFERENCE_TOP = ("models", "utils", "data", "evaluators", "puzzle_dataset", "pretrain")


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """The stand-in for flash-attn's `flash_attn_func`: (B, T, H, D) in and out, on SDPA."""
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return y.transpose(1, 2).contiguous()  # (B, T, H, D), as flash-attn returns it


def _stub_flash_attn() -> list[str]:
    try:
        import flash_attn_interface  # noqa: F401  (the real kernel, where installed)
        return []
    except ImportError:
        pass
    try:
        import flash_attn  # noqa: F401
        return []
    except ImportError:
        stub = types.ModuleType("flash_attn_interface")
        stub.flash_attn_func = flash_attn_func
        sys.modules["flash_attn_interface"] = stub
        return ["flash_attn_interface (SDPA)"]


def import_reference(ref_dir: Path) -> tuple[types.SimpleNamespace, str]:
    """The reference's model, loss head, sparse optimiser, EMA helper and lr schedule function,
    with `build` and `key_map` for the shared protocol."""
    if not (ref_dir / "models" / "urm" / "urm.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no models/urm/urm.py there (a checkout of "
                         "https://github.com/zitian-gao/URM is expected)")
    stubbed = stub_pretrain_modules() + _stub_flash_attn()
    modules: dict[str, types.ModuleType] = {}
    with reference_modules(ref_dir, modules, REFERENCE_TOP):
        try:
            urm = importlib.import_module("models.urm.urm")
            losses = importlib.import_module("models.losses")
            sparse = importlib.import_module("models.sparse_embedding")
            muon = importlib.import_module("models.muon")
            pretrain = importlib.import_module("pretrain")
        except ImportError as e:
            raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs pydantic, einops, hydra "
                             "and tqdm)") from None
    note = (f"stand-in modules {stubbed + ['argdantic']} (pretrain.py imported for its lr schedule and "
            "EMAHelper; the others never called)")
    ref = types.SimpleNamespace(Model=urm.URM, LossHead=losses.ACTLossHead, model_module=urm, muon_module=muon,
                                muon=lambda head: reference_muon(muon, head),
                                SignSGD=sparse.CastedSparseEmbeddingSignSGD_Distributed,
                                EMAHelper=pretrain.EMAHelper, lr=pretrain.cosine_schedule_with_warmup_lr_lambda,
                                active=lambda: reference_modules(ref_dir, modules, REFERENCE_TOP), key_map=key_map)
    ref.build = lambda cfg, batch, dtype, device: build_reference(ref, cfg, batch, dtype, device)
    return ref, note


def reference_muon(muon: types.ModuleType, head) -> torch.optim.Optimizer:
    """The reference's Muon as its pretrain.create_model builds it with use_muon (lr set by the
    schedule each step; Muon's own defaults: weight decay 0.1, momentum 0.95, Nesterov, 5 steps)."""
    params = list(head.parameters())
    return muon.Muon([
        {"params": [p for p in params if p.ndim == 2], "use_muon": True, "lr": 1e-4},
        {"params": [p for p in params if p.ndim != 2], "use_muon": False, "lr": 1e-4, "weight_decay": 0.1,
         "adamw_betas": (0.9, 0.95), "adamw_eps": 1e-8},
    ])


def reference_config(cfg: URMConfig, batch: int, dtype: torch.dtype) -> dict:
    """URM's arch dict for our config (pretrain.create_model adds the runtime fields)."""
    return dict(batch_size=batch, seq_len=cfg.seq_len, puzzle_emb_ndim=cfg.puzzle_dim,
                num_puzzle_identifiers=cfg.num_puzzle_identifiers, vocab_size=cfg.vocab_size,
                num_layers=cfg.num_layers, hidden_size=cfg.hidden_size, expansion=cfg.expansion,
                num_heads=cfg.num_heads, pos_encodings=cfg.pos_encodings, rms_norm_eps=cfg.rms_norm_eps,
                rope_theta=cfg.rope_theta, loops=cfg.halt_max_steps, H_cycles=cfg.num_h_cycles,
                L_cycles=cfg.num_l_cycles, forward_dtype=str(dtype).removeprefix("torch."), causal=False)


def build_reference(ref, cfg: URMConfig, batch: int, dtype: torch.dtype, device: torch.device):
    """ACTLossHead(URM) built on `device` as the reference's pretrain builds it (inside
    torch.device); in fp32 its bf16 convolutions cast to fp32 (the stated stand-in)."""
    with torch.device(device):
        head = ref.LossHead(ref.Model(reference_config(cfg, batch, dtype)), loss_type=cfg.loss_type)
    if dtype == torch.float32:
        for layer in head.model.inner.layers:
            layer.mlp.dwconv.float()
    return head


def key_map(cfg: URMConfig) -> dict[str, str]:
    """URM state-dict key (its loss head's, without `_orig_mod.`) -> our `URM` key: its blocks are
    `layers.N` on the inner model, ours `net.layers.N`; the other names are the reference's."""
    keys = {k: k for k in ("embed_tokens.embedding_weight", "lm_head.weight", "q_head.weight", "q_head.bias",
                           "init_hidden")}
    if cfg.puzzle_dim > 0:
        keys["puzzle_emb.weights"] = "puzzle_emb.weights"
    mlp = ("gate_up_proj.weight", "dwconv.weight", "dwconv.bias", "down_proj.weight") if cfg.mlp == "convswiglu" \
        else ("gate_up_proj.weight", "down_proj.weight")
    for i in range(cfg.num_layers):
        for w in ("self_attn.qkv_proj.weight", "self_attn.o_proj.weight", *(f"mlp.{m}" for m in mlp)):
            keys[f"layers.{i}.{w}"] = f"net.layers.{i}.{w}"
    return {OFFICIAL_PREFIX + k: v for k, v in keys.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    add_reference_args(parser, "github.com/zitian-gao/URM", "URMConfig (e.g. num_l_cycles=3 num_layers=8)",
                       optimizers=("adam_atan2", "muon"))
    parser.add_argument("--reference-msign", choices=["eager", "compiled"], default="eager",
                        help="with --optimizer muon: the reference's msign uncompiled (default) or torch.compile'd")
    parser.set_defaults(explore=REFERENCE_EXPLORATION)
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    device = setup_device(args.device, args.threads)
    if args.explore != REFERENCE_EXPLORATION:
        raise SystemExit(f"--explore {args.explore}: URM hard-codes its exploration probability "
                         f"{REFERENCE_EXPLORATION}, so the equivalence part runs at that value")
    ref, note = import_reference(args.reference.resolve())
    if args.optimizer == "muon":
        if args.reference_msign == "eager":  # its undecorated function (Muon.step looks msign up in its module)
            ref.muon_module.msign = ref.muon_module.msign._torchdynamo_orig_callable
        note += (f"; Muon: the reference's models/muon.py (msign {args.reference_msign}) against ours "
                 "(training/muon.py)")
    else:
        note += "; both sides' AdamATan2: make_adam_atan2"
    try:
        cfg = typed({**to_dict(preset["model"]), "num_puzzle_identifiers": args.num_puzzle_ids,
                     "mlp_multiple": REFERENCE_MLP_MULTIPLE, **OmegaConf.from_dotlist(args.set)}, URMConfig, "--set ")
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    if cfg.mlp != "convswiglu" or cfg.conv_kernel != 2 or cfg.puzzle_dim != cfg.hidden_size:
        raise SystemExit("--set mlp / conv_kernel / puzzle_emb_ndim: the reference's URM always has a width-2 "
                         "ConvSwiGLU, and its optimiser set-up needs a puzzle embedding of hidden_size (urm.yaml)")
    batch = args.batch or preset["batch"]
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    steps = args.steps or preset["steps"]
    dtype = runtime.compute_dtype(cfg.forward_dtype, device)
    with torch.device("meta"):
        ref_params = sum(p.numel() for p in build_reference(ref, cfg, batch, torch.float32, "meta").parameters())
    print(f"# URM vs reference ({args.reference}), preset {args.preset}: {describe(device)}")
    print(f"# hidden {cfg.hidden_size}, {cfg.num_heads} heads, {cfg.num_layers} blocks (ConvSwiGLU), "
          f"H={cfg.num_h_cycles} x C_L={cfg.num_l_cycles}, loops {cfg.halt_max_steps}, "
          f"{cfg.puzzle_len + cfg.seq_len} tokens/example, {cfg.loss_type} ({cfg.stablemax_dtype}), EMA {EMA_RATE}, "
          f"reference parameters {ref_params:,}")
    print(f"# stand-ins: {note}; in fp32 the reference's bf16 convolutions cast to fp32")
    failed = run_reference_comparison(ref, cfg, args, batch, warmup, steps, device, dtype)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
