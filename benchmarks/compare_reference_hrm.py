"""HRM side by side with the reference implementation (sapientinc/HRM): same outputs, and speed.

Needs a checkout of the reference code, which this project does not ship:

    git clone https://github.com/sapientinc/HRM benchmarks/out/hrm-reference   # /benchmarks/out is git-ignored
    python benchmarks/compare_reference_hrm.py --reference benchmarks/out/hrm-reference --preset cpu
    python benchmarks/compare_reference_hrm.py --reference ... --preset paper    # GPU: the paper config, batch 96, bf16

Two parts, both at one config (`--preset`, as in bench_hrm.py, but with the reference's fixed
SwiGLU width multiple of 256):

1. Equivalence (fp32, exploration off, attention on SDPA for both): the reference `ACTLossHead(HierarchicalReasoningModel_ACTV1)`
   is built, its weights are loaded into our `HRM` (baseline scaling) through the official-checkpoint
   key map, the puzzle table is filled with random rows, and both run `--check-steps` ACT training
   steps on the same batches with the same optimisers' rules: the reference's sparse SignSGD class
   and the same AdamATan2 implementation for both. After each step it compares the loss, logits,
   Q logits, every dense gradient, the puzzle-row gradients and, after the optimiser step, every
   weight and the puzzle table; then, on our trained weights copied into the reference (so that a
   difference there is the evaluation's own), evaluation as HRM's pretrain runs it (eval mode,
   segments until every slot halts) against our `HRM.predict`, with a floor beside each
   evaluation quantity: the same quantity between our model and a copy whose weights differ by
   1e-7 relative (`benchlib.perturbed`), which says how far the rollout carries rounding. Exit 1
   when a relative difference exceeds `--tol` or a halting decision or predicted token differs
   (an evaluation quantity: beyond the larger of those and its floor). On CUDA the part runs under
   `benchlib.strict_numerics` (deterministic kernels, no TF32, SDPA's math backend on both sides).
2. Throughput: the reference's train step as its `pretrain.train_batch` does it (forward through
   the loss head, backward of loss / batch, sparse SignSGD + AdamATan2 with the scheduled lr,
   zero_grad, metrics to the host), eager and `torch.compile(model, dynamic=False)` as its pretrain
   compiles; against ours, `training.reasoner.Trainer.train_step` (baseline and deeploop scaling), eager and
   compiled. Warm-up steps (compilation) are not timed; ratio = ours / reference examples/s.

What is not the reference's: HRM hard-imports flash-attn. When neither `flash_attn_interface` (FA3)
nor `flash_attn` (FA2) imports, a stand-in module maps `flash_attn_func` to PyTorch's
`scaled_dot_product_attention` (our model's attention), so the two sides then share one attention
kernel and the comparison measures everything around it. The header says which one ran. The
AdamATan2 of both sides is `hrm_deeploop.training.optim.make_adam_atan2` (the adam-atan2 CUDA kernel when
it imports, as HRM's pretrain uses, else the PyTorch port). The reference's modules need pydantic.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import types
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.bench_hrm import PRESETS  # noqa: E402
from benchmarks.benchlib import (  # noqa: E402
    add_common_args,
    describe,
    eval_rows,
    failure_line,
    fmt_diff,
    judge,
    perturbed,
    print_table,
    rel_diff,
    release_compiled,
    setup_device,
    strict_numerics,
    time_steps,
)
from benchmarks.reasoner_setup import random_batches  # noqa: E402
from benchmarks.refcheck import our_step_fn, reference_optimizers, reference_rollout, reference_step_fn  # noqa: E402
from hrm_deeploop import runtime  # noqa: E402
from hrm_deeploop.errors import ConfigError  # noqa: E402
from hrm_deeploop.models.hrm import HRM  # noqa: E402
from hrm_deeploop.models.losses import act_loss  # noqa: E402
from hrm_deeploop.models.model_config import HRMConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.official import official_key_map, official_state_dict  # noqa: E402
from hrm_deeploop.training.optim import SparseSignSGD, lr_at, make_adam_atan2, set_lr  # noqa: E402
from hrm_deeploop.training.train_config import ReasonerOptim as OptimConfig  # noqa: E402
from hrm_deeploop.training.train_config import TrainGPTConfig  # noqa: E402
from hrm_deeploop.typed_config import to_dict, typed  # noqa: E402

REFERENCE_MLP_MULTIPLE = 256  # HRM's SwiGLU rounds its width up to a multiple of 256, fixed


# ---- loading the reference ------------------------------------------------------------------------

def _sdpa_flash_attn_func(q, k, v, causal=False, **_):
    """flash_attn_func's layout, (B, T, H, Dh) in and out, on scaled_dot_product_attention."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2).contiguous()


def import_reference(ref_dir: Path) -> tuple[types.SimpleNamespace, str]:
    """The reference's model, loss head and sparse optimiser classes, and the attention used."""
    if not (ref_dir / "models" / "hrm" / "hrm_act_v1.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no models/hrm/hrm_act_v1.py there (a checkout of "
                         "https://github.com/sapientinc/HRM is expected)")
    attention = None
    for name in ("flash_attn_interface", "flash_attn"):
        try:
            importlib.import_module(name)
            attention = f"{name} (real)"
            break
        except Exception:  # missing, or a build that fails to load: both mean "not usable"
            continue
    if attention is None:
        shim = types.ModuleType("flash_attn")
        shim.flash_attn_func = _sdpa_flash_attn_func
        sys.modules["flash_attn_interface"] = shim
        sys.modules["flash_attn"] = shim
        attention = "flash-attn not importable: stand-in on torch scaled_dot_product_attention"
    sys.path.insert(0, str(ref_dir))
    try:
        act = importlib.import_module("models.hrm.hrm_act_v1")
        losses = importlib.import_module("models.losses")
        sparse = importlib.import_module("models.sparse_embedding")
    except ImportError as e:
        raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs pydantic)") from None
    ref = types.SimpleNamespace(Model=act.HierarchicalReasoningModel_ACTV1, LossHead=losses.ACTLossHead,
                                SignSGD=sparse.CastedSparseEmbeddingSignSGD_Distributed,
                                layers=importlib.import_module("models.layers"))
    # what benchlib's shared reference step reads: the loss head as pretrain builds it, and the
    # schedule (HRM's pretrain's cosine with warm-up, written as training.optim.lr_at)
    ref.build = lambda cfg, batch, dtype, device: build_reference(ref, cfg, batch, dtype, device)
    ref.lr = lambda current_step, base_lr, num_warmup_steps, num_training_steps, min_ratio: lr_at(
        current_step, base_lr, num_warmup_steps, num_training_steps, min_ratio)
    return ref, attention


def reference_config(cfg: HRMConfig, batch: int, dtype: torch.dtype) -> dict:
    """HRM's arch dict for our config (pretrain.create_model adds the runtime fields)."""
    return dict(batch_size=batch, seq_len=cfg.seq_len, puzzle_emb_ndim=cfg.puzzle_dim,
                num_puzzle_identifiers=cfg.num_puzzle_identifiers, vocab_size=cfg.vocab_size,
                H_cycles=cfg.num_h_cycles, L_cycles=cfg.num_l_cycles, H_layers=cfg.num_h_layers,
                L_layers=cfg.num_l_layers, hidden_size=cfg.hidden_size, expansion=cfg.expansion,
                num_heads=cfg.num_heads, pos_encodings=cfg.pos_encodings, rms_norm_eps=cfg.rms_norm_eps,
                rope_theta=cfg.rope_theta, halt_max_steps=cfg.halt_max_steps,
                halt_exploration_prob=cfg.halt_exploration_prob, forward_dtype=str(dtype).removeprefix("torch."),
                causal=False)


def build_reference(ref, cfg: HRMConfig, batch: int, dtype: torch.dtype, device: torch.device):
    """ACTLossHead(model) built on `device` as HRM's pretrain builds it (inside torch.device)."""
    with torch.device(device):
        return ref.LossHead(ref.Model(reference_config(cfg, batch, dtype)), loss_type=cfg.loss_type)


def key_map(cfg: HRMConfig) -> dict[str, str]:
    return official_key_map(cfg.num_h_layers, cfg.num_l_layers, cfg.pos_encodings, cfg.puzzle_dim > 0)


# ---- 1. equivalence -------------------------------------------------------------------------------

def check_equivalence(ref, cfg: HRMConfig, batch: int, device: torch.device, steps: int, o: OptimConfig,
                      seed: int) -> list[list[str]]:
    """Rows [step, quantity, max relative difference] for `steps` ACT training steps."""
    cfg = replace(cfg, halt_exploration_prob=0.0, forward_dtype="float32")
    # fp32 throughout, so the reference's attention is the SDPA stand-in here even when flash-attn
    # (bf16/fp16 only) is installed: this part compares everything around the attention kernel.
    real_attention, ref.layers.flash_attn_func = ref.layers.flash_attn_func, _sdpa_flash_attn_func
    try:
        with strict_numerics(device):
            return _check(ref, cfg, batch, device, steps, o, seed)
    finally:
        ref.layers.flash_attn_func = real_attention


def _check(ref, cfg: HRMConfig, batch: int, device: torch.device, steps: int, o: OptimConfig,
           seed: int) -> list[list[str]]:
    torch.manual_seed(seed)
    head = build_reference(ref, cfg, batch, torch.float32, device)
    kmap = key_map(cfg)
    with torch.no_grad():  # random puzzle rows (HRM starts them at 0) so that their path is compared
        head.model.inner.puzzle_emb.weights.normal_(0, 1)
    ours = HRM(cfg, ScalingConfig(scheme="baseline"), torch.float32).to(device)
    ours.load_state_dict(official_state_dict(head.state_dict(), kmap, "reference"))
    ours.train()
    head.train()
    names = {kmap["model.inner." + n]: p for n, p in head.model.inner.named_parameters()}
    ref_opts, _ = reference_optimizers(ref, head, o, device)
    sparse = SparseSignSGD(ours.puzzle_emb.weights, o.puzzle_emb_lr, o.puzzle_emb_weight_decay)
    adam = make_adam_atan2(ours.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay,
                           device=device)
    batches = random_batches(cfg, batch, steps, device, seed=seed + 1)
    with torch.device(device):
        ref_carry = head.initial_carry(batches[0])
    our_carry = ours.initial_carry(batches[0])
    rows = []
    for t, b in enumerate(batches, start=1):
        ref_carry, ref_loss, _, ref_out, _ = head(carry=ref_carry, batch=b,
                                                  return_keys=["logits", "q_halt_logits", "q_continue_logits"])
        ((1 / batch) * ref_loss).backward()
        our_carry, out = ours(our_carry, b)
        our_loss, _ = act_loss(out, our_carry.data["labels"], our_carry.halted, our_carry.steps, cfg.loss_type,
                               cfg.stablemax_dtype)
        ((1 / batch) * our_loss).backward()
        diffs = {"loss": rel_diff(our_loss, ref_loss), "logits": rel_diff(out["logits"], ref_out["logits"]),
                 "q_halt_logits": rel_diff(out["q_halt_logits"], ref_out["q_halt_logits"]),
                 "q_continue_logits": rel_diff(out["q_continue_logits"], ref_out["q_continue_logits"]),
                 "halted (mismatches)": float((our_carry.halted != ref_carry.halted).sum())}
        grads = [(n, p.grad, names[n].grad) for n, p in ours.named_parameters()]
        missing = [n for n, a, b_ in grads if (a is None) != (b_ is None)]
        if missing:
            raise AssertionError(f"step {t}: gradient present on one side only: {missing}")
        diffs["dense grads (worst)"] = max(rel_diff(a, b_) for _, a, b_ in grads if a is not None)
        ids, pgrad = ours.puzzle_emb.take_grads()
        diffs["puzzle-row grads"] = rel_diff(pgrad, head.model.inner.puzzle_emb.local_weights.grad)
        # optimiser step, same lr schedule on both sides
        lr = lr_at(t, o.lr, o.warmup_steps, 10**6, o.min_lr_ratio)
        lr_p = lr_at(t, o.puzzle_emb_lr, o.warmup_steps, 10**6, o.min_lr_ratio)
        for opt, value in zip(ref_opts, (lr_p, lr)):
            set_lr(opt, value)
            opt.step()
            opt.zero_grad()
        sparse.lr = lr_p
        sparse.step(ids, pgrad)
        set_lr(adam, lr)
        adam.step()
        adam.zero_grad(set_to_none=True)
        diffs["weights after step (worst)"] = max(rel_diff(p, names[n]) for n, p in ours.named_parameters())
        diffs["puzzle table after step"] = rel_diff(ours.puzzle_emb.weights, head.model.inner.puzzle_emb.weights)
        rows += [[str(t), k, fmt_diff(k, v)] for k, v in diffs.items()]
    # Evaluation as HRM's pretrain.evaluate runs it: eval mode, a fresh carry, segments until every
    # slot halts (halt_max_steps of them), against our `predict`, both on our trained weights (the
    # rows above judged the training; copying makes these rows judge the evaluation alone).
    with torch.no_grad():
        for n, p in ours.named_parameters():
            names[n].copy_(p)
        head.model.inner.puzzle_emb.weights.copy_(ours.puzzle_emb.weights)
    head.eval()
    ours.eval()
    b = batches[0]
    with torch.inference_mode():
        ref_out, segments = reference_rollout(head, b, device)
        _, out = ours.predict(b)
        with perturbed(ours):  # the rollout's own sensitivity: ours against ours
            _, twin = ours.predict(b)
    return rows + eval_rows(f" ({segments} segments)", out, ref_out, twin)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/sapientinc/HRM")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--batch", type=int, help="examples per step (default: the preset's)")
    parser.add_argument("--warmup", type=int, help="untimed steps per variant (include compilation)")
    parser.add_argument("--steps", type=int, help="timed steps per variant")
    parser.add_argument("--check-steps", type=int, default=3, help="ACT steps compared in the equivalence part")
    parser.add_argument("--check-batch", type=int, default=4, help="batch of the equivalence part")
    parser.add_argument("--tol", type=float, default=1e-3, help="largest relative difference accepted")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--variants", nargs="+", choices=["eager", "compile"], default=["eager", "compile"])
    parser.add_argument("--schemes", nargs="+", choices=["baseline", "deeploop"], default=["baseline", "deeploop"],
                        help="our residual schemes to time (the reference is the baseline)")
    parser.add_argument("--num-puzzle-ids", type=int, default=1024)
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="HRMConfig fields over the preset, e.g. pos_encodings=learned puzzle_emb_ndim=48 (null: None)")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    device = setup_device(args.device, args.threads)
    ref, attention = import_reference(args.reference.resolve())
    # --set FIELD=VALUE items are Hydra-style overrides of HRMConfig, typed and checked like the CLI's.
    try:
        cfg = typed({**to_dict(preset["model"]), "num_puzzle_identifiers": args.num_puzzle_ids,
                     "mlp_multiple": REFERENCE_MLP_MULTIPLE, **OmegaConf.from_dotlist(args.set)}, HRMConfig, "--set ")
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    batch = args.batch or preset["batch"]
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    steps = args.steps or preset["steps"]
    dtype = runtime.compute_dtype(cfg.forward_dtype, device)
    o = OptimConfig()
    tokens = cfg.puzzle_len + cfg.seq_len
    print(f"# HRM vs reference ({args.reference}), preset {args.preset}: {describe(device)}")
    print(f"# hidden {cfg.hidden_size}, {cfg.num_heads} heads, H/L layers {cfg.num_h_layers}/{cfg.num_l_layers}, "
          f"H/L cycles {cfg.num_h_cycles}/{cfg.num_l_cycles}, halt_max_steps {cfg.halt_max_steps}, {tokens} tokens/"
          f"example, {cfg.loss_type} ({cfg.stablemax_dtype})")
    print(f"# reference attention: {attention}")
    failed = False

    if not args.skip_check and cfg.loss_type == "softmax_cross_entropy":
        # HRM's softmax_cross_entropy calls .view on the logits sliced past the puzzle prefix; in
        # bf16 its .to(float32) makes a contiguous copy first, in fp32 it is a no-op and .view fails.
        print("# equivalence: skipped: HRM's softmax_cross_entropy fails in fp32 (.view on non-contiguous "
              "logits), and this check runs in fp32")
    elif not args.skip_check:
        rows = check_equivalence(ref, cfg, args.check_batch, device, args.check_steps, o, seed=0)
        bad = judge(rows, args.tol)
        print(f"\n## equivalence: fp32, batch {args.check_batch}, exploration off, {args.check_steps} ACT steps "
              f"(max relative difference, tolerance {args.tol:g})")
        print_table(["step", "quantity", "max rel diff"], rows)
        print(f"# equivalence: {'FAILED on ' + str(len(bad)) + ' quantities' if bad else 'ok'}")
        failed |= bool(bad)
        gc.collect()

    if not args.skip_speed:
        variants = [(v, v == "compile") for v in args.variants]
        header = ["variant", "reference ex/s"] + [h for s in args.schemes for h in (f"ours {s} ex/s", "ratio")]
        table = []
        print(f"\n## throughput: batch {batch}, compute {dtype}, warm-up {warmup} + timed {steps} steps", flush=True)
        for name, comp in variants:
            row = [name]
            ref_ex = None
            sides = [("reference", lambda c=comp: reference_step_fn(ref, cfg, batch, dtype, device, c, o, ema=False))]
            sides += [(s, lambda s=s, c=comp: our_step_fn(cfg, s, batch, device, c, o, ema=False))
                      for s in args.schemes]
            for label, make in sides:
                try:
                    ms = time_steps(make(), device, warmup, steps).ms_per_step
                    ex = batch / (ms / 1e3)
                    row.append(f"{ex:,.2f}")
                    if label == "reference":
                        ref_ex = ex
                    else:
                        row.append(f"{ex / ref_ex:.2f}x" if ref_ex else "n/a")
                except Exception as exc:  # a compile failure on one side: report it, keep the others
                    failed = True
                    row += [failure_line(exc)]
                    row += [] if label == "reference" else ["n/a"]
                finally:
                    release_compiled(device)
                print(f"# {name} {label} done", flush=True)
            table.append(row)
        print()
        print_table(header, table)
        print("# ratio = ours / reference examples per second (> 1: ours is faster)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
