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
   CUDA the reference's two device-side draws are taken on the host instead: `_HostDrawnTorch`). After
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
import contextlib
import gc
import importlib
import statistics
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.bench_hrm import make_trainer, random_batches  # noqa: E402
from benchmarks.benchlib import (  # noqa: E402
    add_common_args,
    describe,
    eval_rows,
    fmt_diff,
    judge,
    perturbed,
    print_table,
    rel_diff,
    setup_device,
    strict_numerics,
    stub_argdantic,
    sync,
)
from hrm_deeploop import runtime as D  # noqa: E402
from hrm_deeploop.checkpoint import official_state_dict, official_trm_key_map  # noqa: E402
from hrm_deeploop.config import to_dict, typed  # noqa: E402
from hrm_deeploop.errors import ConfigError  # noqa: E402
from hrm_deeploop.models.config import TRMConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.training.ema import EMA  # noqa: E402
from hrm_deeploop.training.lm import TrainGPTConfig  # noqa: E402
from hrm_deeploop.training.optim import AdamATan2, make_adam_atan2, set_lr  # noqa: E402
from hrm_deeploop.training.reasoner import ReasonerOptim as OptimConfig  # noqa: E402

REFERENCE_MLP_MULTIPLE = 256  # TRM's SwiGLU rounds its width up to a multiple of 256, fixed
EMA_RATE = 0.999

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

_REFERENCE_TOP = ("models", "utils", "dataset", "evaluators", "puzzle_dataset", "pretrain")


def _reference_name(name: str) -> bool:
    return name.split(".")[0] in _REFERENCE_TOP


@contextlib.contextmanager
def _reference_modules(ref_dir: Path, modules: dict[str, types.ModuleType]):
    """While inside: `ref_dir` on sys.path and its `models`, `utils`, ... packages (`modules`, or
    fresh imports, which are added to `modules`) under their names; after: whatever held those
    names before. HRM's checkout has a `models` package too, so the two comparisons can run in one
    process in either order; torch.compile looks the reference's modules up by name while tracing."""
    saved = {k: v for k, v in sys.modules.items() if _reference_name(k)}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(modules)
    sys.path.insert(0, str(ref_dir))
    try:
        yield
    finally:
        sys.path.remove(str(ref_dir))
        modules.update({k: v for k, v in sys.modules.items() if _reference_name(k)})
        for k in [k for k in sys.modules if _reference_name(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def _stub_modules() -> list[str]:
    """Stand-ins for what pretrain.py imports at module level and this script never calls."""
    stub_argdantic()
    added = []
    for name, attrs in (("wandb", {}), ("coolname", {"generate_slug": lambda n: "stub"}),
                        ("adam_atan2", {"AdamATan2": AdamATan2})):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
            for k, v in attrs.items():
                setattr(sys.modules[name], k, v)
            added.append(name)
    return added


def import_reference(ref_dir: Path) -> tuple[types.SimpleNamespace, str]:
    """The reference's model, loss head, sparse optimiser, EMA helper and lr schedule function."""
    if not (ref_dir / "models" / "recursive_reasoning" / "trm.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no models/recursive_reasoning/trm.py there (a checkout of "
                         "https://github.com/SamsungSAILMontreal/TinyRecursiveModels is expected)")
    stubbed = _stub_modules()
    modules: dict[str, types.ModuleType] = {}
    with _reference_modules(ref_dir, modules):
        try:
            trm = importlib.import_module("models.recursive_reasoning.trm")
            losses = importlib.import_module("models.losses")
            sparse = importlib.import_module("models.sparse_embedding")
            ema = importlib.import_module("models.ema")
            pretrain = importlib.import_module("pretrain")
        except ImportError as e:
            raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs pydantic and einops)") from None
    note = (f"pretrain.py imported for its lr schedule with stand-in modules {stubbed + ['argdantic']} "
            "(never called); both sides' AdamATan2: make_adam_atan2")
    return types.SimpleNamespace(Model=trm.TinyRecursiveReasoningModel_ACTV1, LossHead=losses.ACTLossHead,
                                 model_module=trm,
                                 SignSGD=sparse.CastedSparseEmbeddingSignSGD_Distributed, EMAHelper=ema.EMAHelper,
                                 lr=pretrain.cosine_schedule_with_warmup_lr_lambda,
                                 active=lambda: _reference_modules(ref_dir, modules)), note


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


def reference_optimizers(ref, head, o: OptimConfig, device: torch.device) -> tuple[list, tuple[float, float]]:
    """[sparse SignSGD on the puzzle buffers, AdamATan2 on the parameters] and their base lrs."""
    return ([ref.SignSGD(head.model.puzzle_emb.buffers(), lr=0, weight_decay=o.puzzle_emb_weight_decay, world_size=1),
             make_adam_atan2(head.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay,
                             device=device)],
            (o.puzzle_emb_lr, o.lr))


def reference_lr(ref, base: float, step: int, o: OptimConfig, total: int) -> float:
    """pretrain.compute_lr: the reference's own schedule function."""
    return ref.lr(current_step=step, base_lr=base, num_warmup_steps=round(o.warmup_steps), num_training_steps=total,
                  min_ratio=o.min_lr_ratio)


def key_map(cfg: TRMConfig) -> dict[str, str]:
    return official_trm_key_map(cfg.num_layers, cfg.pos_encodings, cfg.puzzle_dim > 0, cfg.mixer)


# ---- 1. equivalence and 2. sensitivity --------------------------------------------------------------

class Capture:
    """What our trainer's step computes, caught with hooks: model outputs and carry, the loss, the
    dense gradients just before AdamATan2 steps, the puzzle-row gradients SignSGD receives."""

    def __init__(self, trainer):
        self.values: dict = {}
        model = trainer.model
        model.register_forward_hook(self._forward)
        names = {id(p): n for n, p in model.named_parameters()}
        trainer.adam.register_step_pre_hook(lambda opt, args, kwargs: self.values.__setitem__(
            "grads", {names[id(p)]: p.grad.clone() for g in opt.param_groups for p in g["params"]
                      if p.grad is not None}))
        forward_loss = trainer.forward_loss
        trainer.forward_loss = lambda *a: self._keep("loss", forward_loss(*a))
        sparse_step = trainer.sparse.step
        trainer.sparse.step = lambda ids, g: (self.values.__setitem__("puzzle", (ids.clone(), g.clone())),
                                              sparse_step(ids, g))[1]

    def _forward(self, module, inputs, output) -> None:
        if module.training and "carry" not in self.values:  # the step's segment (not a target-Q one)
            self.values["carry"], self.values["out"] = output

    def _keep(self, key: str, result):
        self.values[key] = result[1]
        return result


class _HostDrawnTorch:
    """The `torch` the reference's model module sees during the check on CUDA. Its exploration
    calls torch.rand_like / torch.randint_like on the device, which draw from the CUDA generator;
    our trainer draws on the host (a CPU generator), whose state `torch.set_rng_state` hands to the
    reference before each step. Here those two draw on the host's global generator and move the
    result to the device, so that the draws match on CUDA as they do on CPU (on the first GPU lease,
    without this, one halting decision differed at step 1). Everything else is torch itself."""

    def __getattr__(self, name: str):
        return getattr(torch, name)

    @staticmethod
    def rand_like(t: torch.Tensor) -> torch.Tensor:
        return torch.rand(t.shape, dtype=t.dtype).to(t.device)

    @staticmethod
    def randint_like(t: torch.Tensor, low: int, high: int) -> torch.Tensor:
        return torch.randint(low, high, t.shape, dtype=t.dtype).to(t.device)


@contextlib.contextmanager
def _host_draws(ref, device: torch.device):
    if device.type != "cuda":
        yield
        return
    module = ref.model_module
    module.torch = _HostDrawnTorch()
    try:
        yield
    finally:
        module.torch = torch


def check_equivalence(ref, cfg: TRMConfig, batch: int, device: torch.device, steps: int, o: OptimConfig,
                      seed: int, explore: float) -> tuple[list[list[str]], list[list[str]]]:
    """Rows [step, quantity, max relative difference] for `steps` training steps, and the
    sensitivity rows (DeepLoop on our side). On CUDA under strict numerics, with host-drawn
    exploration on the reference's side."""
    with strict_numerics(device), _host_draws(ref, device):
        return _check(ref, cfg, batch, device, steps, o, seed, explore)


def _check(ref, cfg: TRMConfig, batch: int, device: torch.device, steps: int, o: OptimConfig,
           seed: int, explore: float) -> tuple[list[list[str]], list[list[str]]]:
    cfg = replace(cfg, halt_exploration_prob=explore, forward_dtype="float32")
    total = 10**6  # the schedule's length on both sides (make_trainer's)
    torch.manual_seed(seed)
    head = build_reference(ref, cfg, batch, torch.float32, device)
    kmap = key_map(cfg)
    with torch.no_grad():  # random puzzle rows and Q head, so that their paths and early halting are compared
        head.model.inner.puzzle_emb.weights.normal_(0, 1)
        head.model.inner.q_head.weight.normal_(0, cfg.hidden_size ** -0.5)
        head.model.inner.q_head.bias.zero_()
    initial = official_state_dict({k: v.clone() for k, v in head.state_dict().items()}, kmap, "reference")
    trainer = make_trainer(cfg, ScalingConfig(scheme="baseline"), device, batch, optim=o, ema=True)
    trainer.model.load_state_dict(initial)
    trainer.ema = EMA(trainer.model, EMA_RATE)  # registered after loading, as the reference registers its own
    capture = Capture(trainer)
    ref_ema = ref.EMAHelper(mu=EMA_RATE)
    ref_ema.register(head)
    head.train()
    names = {kmap["model.inner." + n]: p for n, p in head.model.inner.named_parameters()}
    ref_opts, base_lrs = reference_optimizers(ref, head, o, device)
    batches = random_batches(cfg, batch, steps, device, seed=seed + 1)
    with torch.device(device):
        ref_carry = head.initial_carry(batches[0])
    rows, first = [], None
    for t, b in enumerate(batches, start=1):
        torch.set_rng_state(trainer.generator.get_state())  # the reference explores with the global generator
        ref_carry, ref_loss, _, ref_out, _ = head(carry=ref_carry, batch=b,
                                                  return_keys=["logits", "q_halt_logits", "q_continue_logits"])
        ((1 / batch) * ref_loss).backward()
        ref_grads = {n: p.grad.clone() for n, p in names.items() if p.grad is not None}
        ref_pgrad = head.model.inner.puzzle_emb.local_weights.grad.clone()
        for opt, base in zip(ref_opts, base_lrs):  # pretrain.train_batch's optimiser loop
            set_lr(opt, reference_lr(ref, base, t, o, total))
            opt.step()
            opt.zero_grad()
        ref_ema.update(head)

        capture.values.clear()
        trainer.train_step(tensors=b)
        v = capture.values
        carry, out = v["carry"], v["out"]
        if first is None:
            first = (b, ref_loss.detach(), ref_out["logits"])
        diffs = {"loss": rel_diff(v["loss"], ref_loss), "logits": rel_diff(out["logits"], ref_out["logits"]),
                 "q_halt_logits": rel_diff(out["q_halt_logits"], ref_out["q_halt_logits"]),
                 "q_continue_logits": rel_diff(out["q_continue_logits"], ref_out["q_continue_logits"]),
                 "halted (mismatches)": float((carry.halted != ref_carry.halted).sum()),
                 "ACT steps (mismatches)": float((carry.steps != ref_carry.steps).sum())}
        one_side = sorted(set(v["grads"]) ^ set(ref_grads))
        if one_side:
            raise AssertionError(f"step {t}: gradient present on one side only: {one_side}")
        diffs["dense grads (worst)"] = max(rel_diff(g, ref_grads[n]) for n, g in v["grads"].items())
        ids, pgrad = v["puzzle"]
        diffs["puzzle-row grads"] = rel_diff(pgrad, ref_pgrad)
        diffs["weights after step (worst)"] = max(rel_diff(p, names[n]) for n, p in trainer.model.named_parameters())
        diffs["puzzle table after step"] = rel_diff(trainer.model.puzzle_emb.weights,
                                                    head.model.inner.puzzle_emb.weights)
        diffs["EMA weights (worst)"] = max(rel_diff(s, ref_ema.shadow["model.inner." + _ref_name(kmap, n)])
                                           for n, s in trainer.ema.shadow.items())
        rows += [[str(t), k, fmt_diff(k, x)] for k, x in diffs.items()]
        rows.append([str(t), f"(slots halted, of {batch})", f"{int(ref_carry.halted.sum())}"])

    # Evaluation as the reference's pretrain runs it: on its EMA copy, eval mode, a fresh carry,
    # segments until every slot halts (halt_max_steps of them). Both on our EMA weights and puzzle
    # table (the rows above judged the training; copying makes these rows judge the evaluation alone).
    ema_head = ref_ema.ema_copy(head)
    ema_head.eval()
    model = trainer.model
    b = batches[0]
    with torch.no_grad(), trainer.ema.applied(model):
        ema_names = {kmap["model.inner." + n]: p for n, p in ema_head.model.inner.named_parameters()}
        for n, p in model.named_parameters():
            ema_names[n].copy_(p)
        ema_head.model.inner.puzzle_emb.weights.copy_(model.puzzle_emb.weights)
    with torch.inference_mode():
        with torch.device(device):
            ref_c = ema_head.initial_carry(b)
        segments = 0
        while True:
            ref_c, _, _, ref_out, done = ema_head(carry=ref_c, batch=b, return_keys=["logits", "q_halt_logits"])
            segments += 1
            if done:
                break
        model.eval()
        with trainer.ema.applied(model):
            _, out = model.predict(b)
            with perturbed(model):  # the rollout's own sensitivity: ours against ours
                _, twin = model.predict(b)
        model.train()
    rows += eval_rows(f", EMA weights ({segments} segments)", out, ref_out, twin)

    # 2. Sensitivity: DeepLoop alpha on our side, same weights, same first batch.
    deep = make_trainer(cfg, ScalingConfig(scheme="deeploop"), device, batch, optim=o, ema=True)
    deep.model.load_state_dict(initial)
    cap = Capture(deep)
    deep.train_step(tensors=first[0])
    alpha = deep.model.net.layers[0].residual.alpha
    sens = [["1", f"loss, ours deeploop (alpha {alpha:.3f})", f"{rel_diff(cap.values['loss'], first[1]):.2e}"],
            ["1", "logits, ours deeploop", f"{rel_diff(cap.values['out']['logits'], first[2]):.2e}"]]
    return rows, sens


def _ref_name(kmap: dict[str, str], ours: str) -> str:
    inverse = {v: k for k, v in kmap.items()}
    return inverse[ours].removeprefix("model.inner.")


# ---- 3. throughput ----------------------------------------------------------------------------------

def reference_step_fn(ref, cfg: TRMConfig, batch: int, dtype: torch.dtype, device: torch.device, compile_: bool,
                      o: OptimConfig):
    """A closure running one step as the reference's pretrain.train_batch does (world size 1),
    followed by its EMA update (ema=True in every TRM setup)."""
    torch.manual_seed(0)
    head = build_reference(ref, cfg, batch, dtype, device)
    model = torch.compile(head, dynamic=False) if compile_ else head
    opts, base_lrs = reference_optimizers(ref, head, o, device)
    ema = ref.EMAHelper(mu=EMA_RATE)
    ema.register(model)
    batches = random_batches(cfg, batch, 4, device)
    state = {"step": 0, "carry": None}

    def step() -> None:
        state["step"] += 1
        b = batches[state["step"] % len(batches)]
        if state["carry"] is None:
            with torch.device(device):
                state["carry"] = head.initial_carry(b)
        state["carry"], loss, metrics, _, _ = model(carry=state["carry"], batch=b, return_keys=[])
        ((1 / batch) * loss).backward()
        for opt, base in zip(opts, base_lrs):
            set_lr(opt, reference_lr(ref, base, state["step"], o, 10**6))
            opt.step()
            opt.zero_grad()
        torch.stack([metrics[k] for k in sorted(metrics)]).cpu()  # the host copy its logging makes
        ema.update(model)

    return step


def our_step_fn(cfg: TRMConfig, scheme: str, batch: int, device: torch.device, compile_: bool, o: OptimConfig):
    trainer = make_trainer(cfg, ScalingConfig(scheme=scheme), device, batch, compile_, o, ema=True)
    batches = random_batches(cfg, batch, 4, device)
    return lambda: trainer.train_step(tensors=batches[trainer.step % len(batches)])


def time_interleaved(steps_by_side: dict, device: torch.device, warmup: int, steps: int) -> dict[str, float]:
    """Median ms per step of each side, the sides taking turns (in rotating order) so that a
    shared machine's load falls on all of them alike. Warm-up steps (compilation) are not timed.
    On CUDA wall time; on CPU this process's CPU time (`time.process_time`), which other
    processes' load on a shared machine does not inflate (run with --threads 1)."""
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    for fn in steps_by_side.values():
        for _ in range(warmup):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path,
                        help="a checkout of github.com/SamsungSAILMontreal/TinyRecursiveModels")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--batch", type=int, help="examples per step (default: the preset's)")
    parser.add_argument("--warmup", type=int, help="untimed steps per variant (include compilation)")
    parser.add_argument("--steps", type=int, help="timed steps per variant")
    parser.add_argument("--check-steps", type=int, default=4, help="training steps compared in the equivalence part")
    parser.add_argument("--check-batch", type=int, default=8, help="batch of the equivalence part")
    parser.add_argument("--explore", type=float, default=0.5, help="halt_exploration_prob of the equivalence part")
    parser.add_argument("--tol", type=float, default=0.0, help="largest relative difference accepted (0: bit-identical)")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--variants", nargs="+", choices=["eager", "compile"], default=["eager", "compile"])
    parser.add_argument("--schemes", nargs="+", choices=["baseline", "deeploop"], default=["baseline", "deeploop"],
                        help="our residual schemes to time (the reference is the baseline)")
    parser.add_argument("--num-puzzle-ids", type=int, default=1024)
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="TRMConfig fields over the preset, e.g. mixer=mlp pos_encodings=none num_l_cycles=6")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)
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
    dtype = D.compute_dtype(cfg.forward_dtype, device)
    o = OptimConfig(warmup_steps=2)  # a short warm-up, so that the compared steps see changing learning rates
    print(f"# TRM vs reference ({args.reference}), preset {args.preset}: {describe(device)}")
    print(f"# hidden {cfg.hidden_size}, {cfg.num_heads} heads, {cfg.num_layers} blocks, mixer {cfg.mixer}, "
          f"pos {cfg.pos_encodings}, T={cfg.num_h_cycles} x n={cfg.num_l_cycles}, halt_max_steps {cfg.halt_max_steps}, "
          f"{cfg.puzzle_len + cfg.seq_len} tokens/example, {cfg.loss_type} ({cfg.stablemax_dtype}), EMA {EMA_RATE}")
    print(f"# stand-ins: {note}")
    failed = False

    if not args.skip_check and cfg.loss_type == "softmax_cross_entropy":
        # TRM's ACTLossHead passes valid_mask= to its loss, which its softmax_cross_entropy does not take.
        print("# equivalence: skipped: TRM's softmax_cross_entropy fails (TypeError: unexpected keyword "
              "argument 'valid_mask' from its ACTLossHead)")
    elif not args.skip_check:
        rows, sens = check_equivalence(ref, cfg, args.check_batch, device, args.check_steps, o, seed=0,
                                       explore=args.explore)
        bad = judge(rows, args.tol)
        print(f"\n## equivalence: fp32, batch {args.check_batch}, exploration {args.explore}, {args.check_steps} "
              f"training steps (max relative difference, tolerance {args.tol:g})")
        print_table(["step", "quantity", "max rel diff"], rows)
        print(f"# equivalence: {'FAILED on ' + str(len(bad)) + ' quantities' if bad else 'ok'}")
        insensitive = [r for r in sens if float(r[2]) <= max(args.tol, 1e-6)]
        print("\n## sensitivity: the first step with DeepLoop scaling on our side (must differ)")
        print_table(["step", "quantity", "max rel diff"], sens)
        print(f"# sensitivity: {'FAILED: no difference' if insensitive else 'ok (differs)'}")
        failed |= bool(bad) or bool(insensitive)
        gc.collect()

    if not args.skip_speed:
        header = ["variant", "reference ex/s"] + [h for s in args.schemes for h in (f"ours {s} ex/s", "ratio")]
        table = []
        clock = "wall time" if device.type == "cuda" else "CPU time of this process"
        print(f"\n## throughput: batch {batch}, compute {dtype}, EMA on, warm-up {warmup} + timed {steps} steps "
              f"per side, the sides interleaved (median {clock} per step)", flush=True)
        for name in args.variants:
            comp = name == "compile"
            # Compiled, our schemes share one compiled function (Trainer._forward_loss), whose cache
            # entries would all be guard-checked on every call: each is timed in its own pair with
            # the reference, dynamo reset in between. Eager, all sides take turns together.
            groups = [[s] for s in args.schemes] if comp else [list(args.schemes)]
            ex: dict[str, float] = {}
            ref_ex: list[float] = []
            try:
                for group in groups:
                    makers = {"reference": lambda c=comp: reference_step_fn(ref, cfg, batch, dtype, device, c, o)}
                    makers |= {s: lambda s=s, c=comp: our_step_fn(cfg, s, batch, device, c, o) for s in group}
                    with ref.active():  # torch.compile looks the reference's modules up while tracing
                        ms = time_interleaved({k: make() for k, make in makers.items()}, device, warmup, steps)
                    torch._dynamo.reset()
                    ref_ex.append(batch / (ms["reference"] / 1e3))
                    ex |= {s: (batch / (ms[s] / 1e3), ref_ex[-1]) for s in group}
                row = [name, f"{statistics.median(ref_ex):,.2f}"]
                for sch in args.schemes:
                    row += [f"{ex[sch][0]:,.2f}", f"{ex[sch][0] / ex[sch][1]:.2f}x"]
            except Exception as exc:  # a compile failure: report it, keep the other variant
                failed = True
                row = [name, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"]
            finally:
                torch._dynamo.reset()
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            print(f"# {name} done", flush=True)
            table.append(row)
        print()
        print_table(header, table)
        print("# ratio = ours / reference examples per second, both from the same interleaved run "
              "(> 1: ours is faster); compiled, each scheme had its own run with the reference")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
