"""The ACT reasoners side by side with their reference code: the one protocol of
compare_reference_hrm.py, _trm.py, _urm.py (and gpu_levers.py): reference modules swapped in by
name, stubbed imports, captured draws, the step-by-step check and the timed step functions.
Device, timing and table helpers live in benchlib.py, which this module builds on."""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from benchmarks.benchlib import (
    add_common_args,
    eval_rows,
    failure_line,
    fmt_diff,
    judge,
    perturbed,
    print_table,
    rel_diff,
    release_compiled,
    strict_numerics,
    time_interleaved,
)
from benchmarks.reasoner_setup import make_trainer, random_batches
from benchmarks.refstubs import stub_argdantic

# ---- the ACT reasoners side by side with their reference code (compare_reference_trm.py, _urm.py) ----
# Both scripts follow one protocol; what differs per reference is in its namespace `ref` (built by
# the script's `import_reference`): Model, LossHead, SignSGD, EMAHelper, lr (pretrain's schedule
# function), model_module (where its exploration draws), active() (its modules under their names),
# build(cfg, batch, dtype, device) -> its ACTLossHead, key_map(cfg) -> official key -> ours.

EMA_RATE = 0.999  # every TRM and URM setup averages the weights at this rate


@contextlib.contextmanager
def reference_modules(ref_dir, modules: dict, tops: tuple[str, ...]) -> Iterator[None]:
    """While inside: `ref_dir` on sys.path and its top-level packages `tops` (`modules`, or fresh
    imports, which are added to `modules`) under their names; after: whatever held those names
    before. HRM's, TRM's and URM's checkouts all have a `models` package, so the comparisons can
    run in one process in any order; torch.compile looks the reference's modules up by name while
    tracing."""
    def ours(name: str) -> bool:
        return name.split(".")[0] in tops

    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(modules)
    sys.path.insert(0, str(ref_dir))
    try:
        yield
    finally:
        sys.path.remove(str(ref_dir))
        modules.update({k: v for k, v in sys.modules.items() if ours(k)})
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def reference_rollout(head, batch: dict, device: torch.device) -> tuple[dict, int]:
    """A reference ACT loss head run on `batch` until every sequence halts (inside inference_mode):
    (its last outputs, logits and q_halt_logits; the number of segments)."""
    with torch.device(device):
        carry = head.initial_carry(batch)
    segments = 0
    while True:
        carry, _, _, out, done = head(carry=carry, batch=batch, return_keys=["logits", "q_halt_logits"])
        segments += 1
        if done:
            return out, segments


def stub_pretrain_modules() -> list[str]:
    """Stand-ins for what the references' pretrain.py imports at module level and the comparisons
    never call: `argdantic`, `wandb`, `coolname`, and `adam_atan2`, whose class is our AdamATan2
    (both sides' optimiser is `make_adam_atan2`). Returns the names stubbed here."""
    import types

    from hrm_deeploop.training.optim import AdamATan2

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


class Capture:
    """What our trainer's step computes, caught with hooks: model outputs and carry, the loss, the
    dense gradients just before the dense optimiser steps, the puzzle-row gradients SignSGD receives."""

    def __init__(self, trainer):
        self.values: dict = {}
        model = trainer.model
        model.register_forward_hook(self._forward)
        names = {id(p): n for n, p in model.named_parameters()}
        trainer.dense.register_step_pre_hook(lambda opt, args, kwargs: self.values.__setitem__(
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


class HostDrawnTorch:
    """The `torch` a reference's model module sees during the check on CUDA. Its exploration
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
def host_draws(model_module, device: torch.device) -> Iterator[None]:
    """`model_module.torch` is `HostDrawnTorch` inside the block on CUDA (nothing changes on CPU)."""
    if device.type != "cuda":
        yield
        return
    model_module.torch = HostDrawnTorch()
    try:
        yield
    finally:
        model_module.torch = torch


def reference_optimizers(ref, head, o, device: torch.device) -> tuple[list, tuple[float, float]]:
    """[sparse SignSGD on the puzzle buffers, the dense optimiser] and their base lrs, as the
    references' pretrain.create_model builds them (world size 1): AdamATan2 on the parameters, or
    with o.name=muon the reference's own Muon (`ref.muon(head)`, URM's only)."""
    from hrm_deeploop.training.optim import make_adam_atan2

    dense = (ref.muon(head) if o.name == "muon" else
             make_adam_atan2(head.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay,
                             device=device))
    return ([ref.SignSGD(head.model.puzzle_emb.buffers(), lr=0, weight_decay=o.puzzle_emb_weight_decay, world_size=1),
             dense], (o.puzzle_emb_lr, o.lr))


def reference_lr(ref, base: float, step: int, o, total: int) -> float:
    """pretrain.compute_lr: the reference's own schedule function."""
    return ref.lr(current_step=step, base_lr=base, num_warmup_steps=round(o.warmup_steps), num_training_steps=total,
                  min_ratio=o.min_lr_ratio)


def _ref_name(kmap: dict[str, str], ours: str) -> str:
    inverse = {v: k for k, v in kmap.items()}
    return inverse[ours].removeprefix("model.inner.")


def check_reference(ref, cfg, batch: int, device: torch.device, steps: int, o, seed: int,
                    explore: float) -> tuple[list[list[str]], list[list[str]]]:
    """Part 1 (equivalence) and 2 (sensitivity) of a reference comparison: rows [step, quantity,
    max relative difference] for `steps` training steps of the reference's ACTLossHead (as its
    pretrain.train_batch + EMAHelper.update run them) against our Trainer.train_step with the
    weight average, then its evaluation against our `predict` on our EMA weights, with floors; and
    the first step again with DeepLoop on our side. On CUDA under strict numerics, with host-drawn
    exploration on the reference's side."""
    with strict_numerics(device), host_draws(ref.model_module, device):
        return _check_reference(ref, cfg, batch, device, steps, o, seed, explore)


def _check_reference(ref, cfg, batch: int, device: torch.device, steps: int, o, seed: int,
                     explore: float) -> tuple[list[list[str]], list[list[str]]]:
    from dataclasses import replace

    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.official import official_state_dict
    from hrm_deeploop.training.ema import EMA
    from hrm_deeploop.training.optim import set_lr

    cfg = replace(cfg, halt_exploration_prob=explore, forward_dtype="float32")
    total = 10**6  # the schedule's length on both sides (make_trainer's)
    torch.manual_seed(seed)
    head = ref.build(cfg, batch, torch.float32, device)
    kmap = ref.key_map(cfg)
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
        ref_out, segments = reference_rollout(ema_head, b, device)
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
    alpha = deep.model.reasoning_cores()[0].layers[0].cfg.residual.alpha
    sens = [["1", f"loss, ours deeploop (alpha {alpha:.3f})", f"{rel_diff(cap.values['loss'], first[1]):.2e}"],
            ["1", "logits, ours deeploop", f"{rel_diff(cap.values['out']['logits'], first[2]):.2e}"]]
    return rows, sens


def reference_step_fn(ref, cfg, batch: int, dtype: torch.dtype, device: torch.device, compile_: bool, o,
                      ema: bool = True):
    """A closure running one step as the reference's pretrain.train_batch does (world size 1),
    followed by its EMA update with `ema` (ema=True in every TRM and URM setup; HRM has none).
    `ref` is the reference's namespace: `build(cfg, batch, dtype, device)` -> its ACTLossHead,
    `SignSGD`, `lr(...)` (its schedule), and with `ema` its `EMAHelper`."""
    from hrm_deeploop.training.optim import set_lr

    torch.manual_seed(0)
    head = ref.build(cfg, batch, dtype, device)
    model = torch.compile(head, dynamic=False) if compile_ else head
    opts, base_lrs = reference_optimizers(ref, head, o, device)
    average = ref.EMAHelper(mu=EMA_RATE) if ema else None
    if average is not None:
        average.register(model)
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
        if average is not None:
            average.update(model)

    return step


def our_step_fn(cfg, scheme: str, batch: int, device: torch.device, compile_: bool, o, ema: bool = True):
    """A closure running one step of our Trainer (with the weight average with `ema`)."""
    from hrm_deeploop.models.scaling import ScalingConfig

    trainer = make_trainer(cfg, ScalingConfig(scheme=scheme), device, batch, compile_, o, ema=ema)
    batches = random_batches(cfg, batch, 4, device)
    return lambda: trainer.train_step(tensors=batches[trainer.step % len(batches)])


def add_reference_args(parser, reference: str, model_fields: str, optimizers: tuple[str, ...] = ("adam_atan2",)
                       ) -> None:
    """The flags the ACT-reasoner comparisons take (their presets are their own); `optimizers`: the
    optim.name values the reference has (URM's also has Muon)."""
    from hrm_deeploop.training.train_config import TrainGPTConfig

    parser.add_argument("--reference", required=True, type=Path,
                        help=f"a checkout of {reference}")
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
    parser.add_argument("--optimizer", choices=optimizers, default=optimizers[0],
                        help="the dense optimiser on both sides (optim.name)")
    parser.add_argument("--num-puzzle-ids", type=int, default=1024)
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help=f"{model_fields} fields over the preset")
    add_common_args(parser, TrainGPTConfig().train.mfu_peak_tflops)


def run_reference_comparison(ref, cfg, args, batch: int, warmup: int, steps: int, device: torch.device,
                             dtype: torch.dtype, skip_check: str | None = None) -> bool:
    """Parts 1-3 with their tables; True when something failed. `skip_check`: why the
    equivalence part cannot run at this config (printed instead)."""
    import gc

    from hrm_deeploop.training.train_config import ReasonerOptim

    # a short warm-up, so that the compared steps see changing learning rates
    o = ReasonerOptim(warmup_steps=2, name=args.optimizer)
    failed = False
    if not args.skip_check and skip_check:
        print(f"# equivalence: skipped: {skip_check}")
    elif not args.skip_check:
        rows, sens = check_reference(ref, cfg, args.check_batch, device, args.check_steps, o, seed=0,
                                     explore=args.explore)
        bad = judge(rows, args.tol)
        print(f"\n## equivalence: fp32, optimiser {args.optimizer}, batch {args.check_batch}, exploration "
              f"{args.explore}, {args.check_steps} training steps (max relative difference, tolerance {args.tol:g})")
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
            ex: dict[str, tuple[float, float]] = {}
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
                row = [name, failure_line(exc)]
            finally:
                release_compiled(device)
            print(f"# {name} done", flush=True)
            table.append(row)
        print()
        print_table(header, table)
        print("# ratio = ours / reference examples per second, both from the same interleaved run "
              "(> 1: ours is faster); compiled, each scheme had its own run with the reference")
    return failed
