"""`hrm-deeploop train`: a recurrent reasoner (HRM, TRM or URM) on a built puzzle dataset (reference spec 5).

Each step is one ACT segment for every carry slot (deep supervision): the carry persists across
batches, halted slots load new rows, and every segment gets its own loss and optimiser step.
Optimisers: SparseSignSGD on the puzzle table (optim.puzzle_emb_lr, optim.puzzle_emb_weight_decay),
then the dense one, `optim.name`: AdamATan2 over every parameter, or Muon on the matrices with AdamW
on the rest (`training/muon.py`); both on linear warmup + cosine to optim.min_lr_ratio. The loss
is divided by the global batch size. With `train.ema=true` (TRM's setups) an exponential moving
average of the weights (`training.ema`, rate `train.ema_rate`) is updated after every step and
used for evaluation.

Single process on CPU or one GPU by default; under torchrun, DistributedDataParallel (gloo on
CPU, NCCL on CUDA) with rank-sharded batches, or with `train.fsdp=true` FSDP2 (`training/fsdp.py`:
parameters, gradients, AdamATan2's moments and the weight average sharded; checkpoints in the same
full layout). `train.grad_accum` splits each rank's rows into micro-batches (each with its own
carry) so a global batch of 768 fits any GPU count.

The loop around the step (run folder, resume, cadence, NaN guard, summary) is `training.loop`.
Checkpoints hold the full train state: model (with the puzzle table), the weight average (`ema`,
when on), both optimisers, schedule, step, RNG states (torch and the exploration generator),
sampler position, the ACT carry, resolved config and code version; ranks > 0 keep their own carry
and generator in `step_N.rank<r>.pt`.
`resume=true` continues from the latest one; on CPU the result equals an uninterrupted run bit
for bit.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from hrm_deeploop import runtime
from hrm_deeploop.data.batches import (
    TrainSampler,
    check_matches,
    dataset_identity,
    fit_to_dataset,
    open_dataset,
    sequential_batches,
    steps_per_epoch,
)
from hrm_deeploop.data.rows import map_rows
from hrm_deeploop.errors import UserError
from hrm_deeploop.loading import load_model
from hrm_deeploop.models.act import ACTReasoner, Carry, carry_from_state, carry_state, carry_to
from hrm_deeploop.models.losses import IGNORE_LABEL, LOSSES, act_loss
from hrm_deeploop.models.reasoners import build_reasoner
from hrm_deeploop.models.scaling import model_depth, tape_layers
from hrm_deeploop.training import fsdp
from hrm_deeploop.training.adapt import Start, dense_trainable, prepare
from hrm_deeploop.training.ema import EMA
from hrm_deeploop.training.kappa import adam_preconditioner, measure, summarize
from hrm_deeploop.training.loop import (
    Task,
    fit,
    run_config_dict,
)
from hrm_deeploop.training.optim import (
    DENSE_STATE_KEYS,
    SparseSignSGD,
    dense_state,
    lr_at,
    make_dense,
    set_lr,
)
from hrm_deeploop.training.reuse import Reuse, built_model, remembered
from hrm_deeploop.training.runlog import check_finite
from hrm_deeploop.training.train_config import TrainConfig

METRIC_KEYS = ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps",
               "lm_loss", "q_halt_loss", "q_continue_loss")


# ---- the step -------------------------------------------------------------------------------------

def check_grad_accum(rows: int, parts: int) -> None:
    if rows % parts:
        raise UserError(f"the per-rank batch ({rows} rows) is not divisible by train.grad_accum={parts}")


def split_batch(t: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    B = next(iter(t.values())).shape[0]
    check_grad_accum(B, parts)
    n = B // parts
    return [{k: v[i * n:(i + 1) * n] for k, v in t.items()} for i in range(parts)]


def check_training_memory(cfg: TrainConfig, env: runtime.Env, dtype: torch.dtype, reuse: Reuse | None = None) -> None:
    """Refuse a model and batch this machine cannot hold, before allocating them: weights,
    gradients, AdamATan2's two moments (and TRM's weight average), and the activations of one
    micro-batch's segment on the tape, or of one evaluation batch (no tape) where that is more
    (runtime.estimate_memory; with `reuse`, each estimate computed once per process)."""
    m = cfg.model
    copies = 4 + int(cfg.train.ema)
    rows = max(1, cfg.train.global_batch_size // env.world_size // cfg.train.grad_accum)

    def build(c: Any) -> ACTReasoner:
        return build_reasoner(c, cfg.scaling, dtype)

    shards = env.world_size if cfg.train.fsdp and env.distributed else 1

    def estimate(batch: int, layers: int) -> runtime.MemoryEstimate:
        return remembered(reuse, ("estimate_memory", m, cfg.scaling, copies, batch, layers, dtype, shards),
                          lambda: runtime.estimate_memory(build, m, copies=copies, batch=batch, layers=layers,
                                                          dtype=dtype, shards=shards))

    est = estimate(rows, tape_layers(m))
    tokens = m.seq_len + m.puzzle_len  # the puzzle prefix is part of every row's state
    what = f"{rows} rows x {tokens:,} tokens per micro-batch"
    if cfg.evaluates:
        eval_rows = max(1, (cfg.eval.global_batch_size or cfg.train.global_batch_size) // env.world_size)
        at_eval = estimate(eval_rows, 1)
        if at_eval.total > est.total:
            est, what = at_eval, f"{eval_rows} rows x {tokens:,} tokens per evaluation batch"
    runtime.check_memory(f"train: model={m.name} hidden_size={m.hidden_size} ({est.parameters:,} parameters) at {what}",
                         est, env.device, fix="lower model.hidden_size or the layer counts, or train.global_batch_size / "
                                              "eval.global_batch_size (or raise train.grad_accum)")
    calls = (model_depth(m).N + tape_layers(m)) * cfg.train.grad_accum  # forwards, and the backwards of the tape
    runtime.check_loop_time(f"train: model={m.name} ({', '.join(f'{k}={getattr(m, k)}' for k in m.depth_keys)})",
                            calls, calls * runtime.block_flops(m.hidden_size) * rows * tokens,
                            env.device, "per step", fix="lower the cycle or layer counts")


class Trainer(Task):
    """Model, optimisers, sampler, carry and step: everything a checkpoint holds."""

    work_unit = "examples"

    def __init__(self, cfg: TrainConfig, env: runtime.Env, train_split: Any, test_split: Any = None,
                 total_steps: int | None = None, start: Start | None = None, reuse: Reuse | None = None):
        self.cfg, self.env = cfg, env
        self.train_split, self.test_split = train_split, test_split
        G = cfg.train.global_batch_size
        spe = steps_per_epoch(train_split, G)
        self.total_steps = total_steps or cfg.train.max_steps or int(cfg.train.epochs * spe)
        if self.total_steps < 1:
            raise UserError(f"the run has {self.total_steps} steps (train.max_steps or train.epochs too small "
                            "for the dataset)")
        self.eval_every = cfg.eval.every or (max(1, int(cfg.eval.interval_epochs * spe))
                                             if cfg.eval.interval_epochs else 0)
        self.work_per_step = G
        self.name = cfg.model.name
        self.config = run_config_dict(cfg)
        self.dtype = runtime.compute_dtype(cfg.model.forward_dtype, env.device)
        # the batch's own checks first (numpy only: the sampler draws from its own generators), then the memory
        epi = cfg.train.epochs_per_iter or cfg.eval.interval_epochs or 1
        self.sampler = TrainSampler(train_split, G, cfg.seed, env.rank, env.world_size, epochs_per_iter=epi)
        check_grad_accum(G // env.world_size, cfg.train.grad_accum)  # before the run folder, not at the first step
        check_training_memory(cfg, env, self.dtype, reuse)  # before the model exists: refused or announced in one line
        # under torch.manual_seed(cfg.seed): the same init on every rank (DDP also syncs at construction);
        # `reuse` (ttt's tasks in one process) hands back a model built so before, as it was built (training/reuse.py)
        self.model = built_model(reuse, (cfg.model, cfg.scaling, self.dtype, env.fused_kernel), cfg.seed,
                                 lambda: build_reasoner(cfg.model, cfg.scaling, self.dtype, env.fused_kernel).to(env.device),
                                 env.device)
        self.start = start
        self.rows = start.row_map if start is not None else None  # dataset id -> table row (adapt old_rows=keep)
        if start is not None:
            self.model.load_state_dict(start.weights)
        self.model.train()
        self.sharded = cfg.train.fsdp and env.distributed
        if self.sharded:  # after the start weights, before the optimisers: they must hold the sharded parameters
            fsdp.shard(self.model, [b for core in self.model.reasoning_cores() for b in core.layers])
        self._dense: bool | None = None  # whether the network's parameters train (adapt.trains)
        self._set_dense(1)
        # Forward and ACT loss in one function, compiled together when train.compile is set (as HRM
        # compiles its loss head).
        self.forward_loss = torch.compile(self._forward_loss) if cfg.train.compile else self._forward_loss
        o = cfg.optim
        self.sparse = (SparseSignSGD(self.model.puzzle_emb.weights, o.puzzle_emb_lr, o.puzzle_emb_weight_decay)
                       if self.model.puzzle_emb is not None else None)
        self.dense = make_dense(o.name, self.model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2),
                                weight_decay=o.weight_decay, device=env.device)
        if start is not None and start.optimizer is not None:
            self.dense.load_state_dict(start.optimizer)
        self.ema = EMA(self.model, cfg.train.ema_rate) if cfg.train.ema else None
        # Exploration draws: an explicit generator per rank (never the global RNG).
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + env.rank)
        self.carries: list[Carry | None] = [None] * cfg.train.grad_accum
        self.step = 0
        self._shown: dict[str, float] = {}  # last metrics of a step where some sequence halted
        self._probe_batch: dict[str, torch.Tensor] | None = None  # the fixed batch kappa is measured on

    def _set_dense(self, step: int) -> None:
        """Freeze or unfreeze the network's parameters for `step` (adapt.trains; always trained without
        init_from). A frozen network gets no DDP wrapper (DDP refuses a module with nothing to train);
        a sharded one none either (FSDP2 reduce-scatters the gradients itself)."""
        a = self.cfg.adapt
        want = dense_trainable(a.trains, a.embedding_steps, step) if self.start is not None else True
        if want == self._dense:
            return
        for p in self.model.parameters():
            p.requires_grad_(want)
        self.ddp = (runtime.wrap_ddp(self.model, self.env, sync_buffers=False) if want and not self.sharded
                    else self.model)
        self._dense = want

    def describe(self) -> str:
        return (f"{self.name.upper()} {self.model.num_params():,} parameters (puzzle table excluded), "
                f"scaling={self.cfg.scaling.scheme}, device={self.env.device}, world={self.env.world_size}, "
                f"dtype={self.dtype}, steps={self.total_steps}" + (f", ema={self.ema.rate}" if self.ema else ""))

    # -- one optimiser step ---------------------------------------------------------------------

    def lrs(self, step: int) -> tuple[float, float]:
        o = self.cfg.optim
        return (lr_at(step, o.lr, o.warmup_steps, self.total_steps, o.min_lr_ratio),
                lr_at(step, o.puzzle_emb_lr, o.warmup_steps, self.total_steps, o.min_lr_ratio))

    def _forward_loss(self, carry: Carry, batch: dict[str, torch.Tensor], min_halt: torch.Tensor | None
                      ) -> tuple[Carry, torch.Tensor, dict[str, torch.Tensor]]:
        carry, out = self.ddp(carry, batch, None, min_halt)
        loss, m = act_loss(out, carry.data["labels"], carry.halted, carry.steps,
                           self.model.cfg.loss_type, self.model.cfg.stablemax_dtype)
        return carry, loss, m

    def forward_backward(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Forward + backward over this rank's rows (all micro-batches). Returns metric sums
        (METRIC_KEYS order, local to this rank) as a float64 tensor."""
        cfg, model = self.cfg, self.model
        G, W, A = cfg.train.global_batch_size, self.env.world_size, cfg.train.grad_accum
        sums = torch.zeros(len(METRIC_KEYS), dtype=torch.float64, device=self.env.device)
        for a, mb in enumerate(split_batch(tensors, A)):
            mb = {k: v.to(self.env.device, non_blocking=True) for k, v in mb.items()}
            if self.carries[a] is None:
                self.carries[a] = model.initial_carry(mb)
            if self.sharded:  # reduce-scatter once, after the last micro-batch
                model.set_requires_gradient_sync(a == A - 1)
                sync = contextlib.nullcontext()
            else:
                sync = contextlib.nullcontext() if (a == A - 1 or not self.env.distributed) else self.ddp.no_sync()
            with sync:
                # Made outside the (compiled) forward, which they would split: the exploration
                # draws and the puzzle rows' gradient leaf.
                rows = mb["inputs"].shape[0]
                min_halt = model.exploration(rows, self.generator)
                if model.puzzle_emb is not None:
                    model.puzzle_emb.prepare(rows)
                carry, loss, m = self.forward_loss(self.carries[a], mb, min_halt)
                # DDP (and FSDP2) average over ranks; HRM sums the per-rank loss / global batch: scale by W.
                (loss * (W / G)).backward()
            self.carries[a] = carry
            sums += torch.stack([m[k].to(torch.float64) for k in METRIC_KEYS])
        return sums

    def train_step(self, step: int | None = None, tensors: dict[str, torch.Tensor] | None = None
                   ) -> dict[str, float]:
        """One optimiser step on the sampler's next batch (or on `tensors`)."""
        self.step = self.step + 1 if step is None else step
        if tensors is None:
            tensors = self.sampler.next_batch().tensors
        self._set_dense(self.step)
        tensors = map_rows(tensors, self.rows)
        lr, lr_puzzle = self.lrs(self.step)
        set_lr(self.dense, lr)
        sums = self.forward_backward(tensors)
        grads = [fsdp.local_shard(p.grad) for p in self.model.parameters() if p.grad is not None]
        grad_sq = (torch.stack(torch._foreach_norm(grads)).double().square().sum() if grads  # one fused kernel per dtype
                   else torch.zeros((), dtype=torch.float64))  # adapt.trains=embeddings: no dense gradient
        puzzle = self.model.puzzle_emb.take_grads() if self.sparse is not None else None
        # The puzzle-row grads are local to each rank (SignSGD gathers them): reduce their norm.
        puzzle_sq = puzzle[1].double().square().sum() if puzzle is not None else torch.zeros((), dtype=torch.float64)
        sums = torch.cat([sums, puzzle_sq.to(sums.device).view(1)])
        if self.sharded:  # each rank holds a shard of the dense grads: their squares add up over ranks
            sums = torch.cat([sums, grad_sq.to(sums.device).view(1)])
            runtime.all_reduce_(sums)
        else:
            runtime.all_reduce_(sums)  # dense grads are already identical on every rank (DDP): not reduced
            sums = torch.cat([sums, grad_sq.to(sums.device).view(1)])
        *sums, puzzle_sq, grad_sq = sums.tolist()  # one host sync
        metrics = _normalise(dict(zip(METRIC_KEYS, sums)), self.cfg.train.global_batch_size)
        metrics["grad_norm"] = math.sqrt(grad_sq)
        metrics["puzzle_grad_norm"] = math.sqrt(puzzle_sq)
        check_finite(self.step, loss=metrics["loss"], grad_norm=metrics["grad_norm"],
                     puzzle_grad_norm=metrics["puzzle_grad_norm"])
        if puzzle is not None:
            self.sparse.lr = lr_puzzle
            self.sparse.step(*puzzle)
        self.dense.step()
        self.dense.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        metrics["lr"] = lr
        return metrics

    def progress(self, m: dict[str, float]) -> dict[str, str]:
        """Loss every step; accuracy and ACT steps from the last step where some sequence halted
        (a step where none did has no accuracy to show)."""
        if m["count"] > 0:
            self._shown = {k: m[k] for k in ("accuracy", "exact_accuracy", "steps")}
        shown = self._shown
        bar = {"loss": f"{m['loss']:.4f}"}
        if shown:
            bar |= {"acc": f"{shown['accuracy']:.3f}", "exact": f"{shown['exact_accuracy']:.3f}",
                    "steps": f"{shown['steps']:.1f}"}
        return bar

    def diagnose(self, step: int) -> dict[str, float] | None:
        """Visit alignment kappa per physical sublayer and module (training/kappa.py), on a fixed
        batch from fresh states, over the gradient-visible visits: HRM's last H-cycle (C_L visits
        of each L block, one of each H block: eq. 17-19); TRM's last recursion (n+1 visits)."""
        m = self.model
        if self._probe_batch is None:
            saved = self.sampler.state_dict()
            self._probe_batch = self.sampler.next_batch().tensors  # peeked: the sampler is restored
            self.sampler.load_state_dict(saved)
        batch = map_rows({k: v.to(self.env.device) for k, v in self._probe_batch.items()}, self.rows)
        levels = ("H_level", "L_level") if hasattr(m, "H_level") else ("net",)
        blocks = {f"{lvl.removesuffix('_level')}.layers.{i}": b for lvl in levels
                  for i, b in enumerate(getattr(m, lvl).layers)}
        window = {"grad_window": "last_cycle"} if hasattr(m, "H_level") else {}
        h0, l0 = m.initial_states()
        z_H = h0.to(m.dtype).expand(batch["inputs"].shape[0], m.total_len, -1)
        z_L = l0.to(m.dtype).expand_as(z_H)

        def forward():
            _, _, logits, _ = m.segment(z_H, z_L, batch, **window)
            labels = batch["labels"]
            per_token = LOSSES[m.cfg.loss_type](logits, labels, m.cfg.stablemax_dtype)
            return per_token.sum() / (labels != IGNORE_LABEL).sum().clamp_min(1), logits.float()

        was = m.training
        m.eval()  # no exploration, no puzzle-row tracking
        try:
            results = measure(blocks, forward, adam_preconditioner(self.dense), self.cfg.diagnostics.kappa_probes,
                              torch.Generator().manual_seed(self.cfg.seed * 7919 + step))
        finally:
            m.train(was)
        return summarize(results)

    def evaluate(self, step: int) -> dict[str, float] | None:
        if self.test_split is None:
            return None
        with self.ema.applied(self.model) if self.ema is not None else contextlib.nullcontext():
            em = evaluate(self.model, self.test_split, self.env, self.cfg.eval.global_batch_size or
                          self.cfg.train.global_batch_size, self.cfg.eval.max_batches, self.rows)
        if em["count"] == 0:  # an unlabelled build (test_labels=optional): every label is PAD
            runtime.print0(f"step {step}: eval: the test split has no labelled examples; nothing to score")
            return None
        runtime.print0(f"step {step}: eval exact_accuracy={em['exact_accuracy']:.4f} "
                 f"accuracy={em['accuracy']:.4f} over {int(em['count'])} examples")
        return {f"eval/{k}": v for k, v in em.items()}

    def summary(self, status: str, last_eval: dict[str, float] | None, train_loss: float | None) -> dict[str, Any]:
        return {"params": self.model.num_params(), "model": self.name, "ema": self.ema is not None, "scaling": {
            "scheme": self.cfg.scaling.scheme, "p": self.cfg.scaling.p}}

    # -- state --------------------------------------------------------------------------------------

    def data_identity(self) -> dict[str, Any]:
        """The dataset's files (sizes and hashes), recorded in the run folder: resuming on another is refused."""
        return dataset_identity(self.cfg.data_dir)

    def local_state(self) -> dict[str, Any]:
        """Per-rank state: carries and the exploration generator."""
        return {"world_size": self.env.world_size, "grad_accum": self.cfg.train.grad_accum,
                "carries": [None if c is None else carry_state(carry_to(c, "cpu")) for c in self.carries],
                "generator": self.generator.get_state()}

    def load_local_state(self, state: dict[str, Any] | None) -> None:
        if state is None or state["world_size"] != self.env.world_size or state["grad_accum"] != self.cfg.train.grad_accum:
            runtime.print0("resume: world size or grad_accum changed; the ACT carry restarts (all slots halted)")
            return
        self.carries = [None if c is None else carry_to(carry_from_state(c), self.env.device) for c in state["carries"]]
        self.generator.set_state(state["generator"])

    def state_dict(self) -> dict[str, Any]:
        o = self.cfg.optim
        ema = self.ema.state_dict() if self.ema is not None else None
        if self.sharded:  # gathered into the unsharded layout (collective; rank 0 holds the model and optimiser)
            model, dense = fsdp.full_model_state(self.model), fsdp.full_optim_state(self.model, self.dense)
            if ema is not None:
                ema["shadow"] = fsdp.full_tensors(ema["shadow"])
        else:
            model, dense = self.model.state_dict(), self.dense.state_dict()
        return {
            "model": model,
            "ema": ema,
            "optimizers": {DENSE_STATE_KEYS[o.name]: dense,
                           "sparse": self.sparse.state_dict() if self.sparse is not None else None},
            "schedule": {"step": self.step, "total_steps": self.total_steps,
                         "warmup_steps": o.warmup_steps, "lr_min_ratio": o.min_lr_ratio},
            "sampler": self.sampler.state_dict(),
            "puzzle_names": self.start.puzzle_names if self.start is not None else None,  # data/rows.py
        }

    def load_state_dict(self, s: dict[str, Any], path: Path) -> None:
        for key in ("model", "optimizers", "sampler"):
            if key not in s:
                raise UserError(f"checkpoint '{path}' has no '{key}' (not a train-state file of hrm-deeploop train)")
        try:
            if self.sharded:
                fsdp.load_full_model_state(self.model, s["model"])
            else:
                self.model.load_state_dict(s["model"])
        except RuntimeError as e:
            raise UserError(f"checkpoint '{path}' does not fit the model: {str(e).splitlines()[0]}") from None
        if self.ema is not None:
            if s.get("ema") is not None:
                self.ema.load_state_dict(s["ema"])
            else:  # a run resumed with train.ema=true that was trained without it
                self.ema = EMA(self.model, self.cfg.train.ema_rate)
                runtime.print0(f"resume: '{path}' has no weight average; train.ema starts it from the loaded weights")
        dense = dense_state(s["optimizers"], self.cfg.optim.name, f"checkpoint '{path}'")
        if self.sharded:
            fsdp.load_full_optim_state(self.model, self.dense, dense)
        else:
            self.dense.load_state_dict(dense)
        if self.sparse is not None and s["optimizers"]["sparse"] is not None:
            self.sparse.load_state_dict(s["optimizers"]["sparse"])
        self.sampler.load_state_dict(s["sampler"])
        self.step = int(s["step"])


def _normalise(vals: dict[str, float], global_batch_size: int) -> dict[str, float]:
    """HRM's logging: *loss keys / global batch size, the rest / count (sequences halted now)."""
    count = max(vals["count"], 1.0)
    out = {k: (v / global_batch_size if k.endswith("loss") else v / count) for k, v in vals.items() if k != "count"}
    out["loss"] = (vals["lm_loss"] + 0.5 * (vals["q_halt_loss"] + vals["q_continue_loss"])) / global_batch_size
    out["count"] = vals["count"]
    return out


@torch.no_grad()
def evaluate(model: ACTReasoner, split: Any, env: runtime.Env, global_batch_size: int,
             max_batches: int | None = None, rows: torch.Tensor | None = None) -> dict[str, float]:
    """Per-augmented-example metrics on a split after halt_max_steps segments (spec 4, eval)."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(len(METRIC_KEYS), dtype=torch.float64, device=env.device)
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        t = map_rows({k: v.to(env.device) for k, v in b.tensors.items()}, rows)
        carry, out = model.predict(t)
        _, m = act_loss(out, carry.data["labels"], carry.halted, carry.steps,
                        model.cfg.loss_type, model.cfg.stablemax_dtype)
        sums += torch.stack([m[k].to(torch.float64) for k in METRIC_KEYS])
    runtime.all_reduce_(sums)
    model.train(was_training)
    vals = dict(zip(METRIC_KEYS, sums.tolist()))
    count = max(vals["count"], 1.0)
    return {k: v / count for k, v in vals.items() if k != "count"} | {"count": vals["count"]}


# ---- entry point ----------------------------------------------------------------------------------

def build(cfg: TrainConfig, env: runtime.Env, reuse: Reuse | None = None) -> Trainer:
    """Open and check the data, fit the model config to it, build the trainer (nothing written).
    `reuse`: what one process keeps between the trainers it builds (training/reuse.py: the start
    checkpoint's model as read, the memory estimates, the model itself); the same trainer."""
    train_split = open_dataset(cfg.data_dir, "train")
    where = str(Path(cfg.data_dir) / "train")
    start = None
    if cfg.init_from:  # the architecture is the checkpoint's; the table is grown to the dataset (adapt.py)
        start = prepare(cfg.init_from, cfg, cfg.data_dir, train_split,
                        load=lambda *a, **k: remembered(reuse, ("load_model", a, k), lambda: load_model(*a, **k)))
        cfg.model, cfg.scaling = start.model_config, start.scaling
        runtime.print0(f"init_from: {start.source}; puzzle table {start.kept_rows:,} rows from the checkpoint, "
                 f"{cfg.model.num_puzzle_identifiers:,} in all (adapt.new_rows={cfg.adapt.new_rows}, "
                 f"old_rows={cfg.adapt.old_rows}), trains={cfg.adapt.trains}")
    else:
        cfg.model = fit_to_dataset(cfg.model, train_split, where)
    test_split = open_dataset(cfg.data_dir, "test") if cfg.evaluates else None
    if test_split is not None:
        ids = int(train_split.meta.num_puzzle_identifiers)
        check_matches(replace(cfg.model, num_puzzle_identifiers=ids), test_split, str(Path(cfg.data_dir) / "test"),
                      what="train split")
    return Trainer(cfg, env, train_split, test_split, start=start, reuse=reuse)


def run(cfg: TrainConfig) -> int:
    fit(cfg, lambda env: build(cfg, env))
    return 0
