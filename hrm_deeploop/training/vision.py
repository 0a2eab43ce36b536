"""`hrm-deeploop train-vit`: LoopViT (model=loopvit) on canvases of a built ARC dataset (docs/loopvit.md).

The model's part of the one training skeleton (`training.loop.fit`: run folder, resume, cadence,
NaN guard, time budget, summary). Each step:

1. the puzzle sampler (`data.batches.TrainSampler`: the same global batches as `train`) picks the
   examples; each becomes a canvas view (`data.canvas`) with a random upscale and corner drawn, for
   the whole global batch in order, from `numpy.random.default_rng([seed, step, 0])`: a function of
   the step (a resumed run draws what the uninterrupted one drew; the sampler's position is the only
   data state) and not of the rank (each rank renders its slice: every world size sees the views one
   process sees);
2. `vision_loss`: cross-entropy over the target's valid pixels (the output, its border; 10 is
   ignored) averaged over the global batch's pixels (under torchrun each rank's mean is weighted by
   its share of the valid pixels, `pixel_share`, so DDP's / FSDP2's average over ranks is the
   one-process mean), plus the official gate regularisers
   w_e * (-mean binary entropy of the exit gate over samples and loops) + w_p * mean(exit step / T)
   (1 without dynamic exit: a constant, as in the official offline training);
3. gradient-norm clipping (`optim.grad_clip`), AdamW at the schedule's rate (linear warm-up, cosine
   to `optim.min_lr_ratio` x lr; `optim.schedule=official`: the official scheduler's, whose first
   update runs at 0, `optim.loopvit_lr_at`; `hrm`: the reasoners' `lr_at`, one update ahead), the
   weight average when `train.ema`.

Single process by default; under torchrun, DistributedDataParallel with rank-sharded batches, or
with `train.fsdp=true` FSDP2 (`training/fsdp.py`: each of the K blocks its own unit, checkpoints in
the one-process layout). `train.compile=true` compiles each block (`nn.Module.compile`: one graph,
reused by the K blocks and the T loops, not the unrolled K x T loop, whose compile is slow);
`train.compile_scope=model` compiles the whole unrolled model instead (one graph, slower to compile;
on CPU at the tiny size 1.03-1.04x the official compiled model, where per-block is 0.75-0.79x:
docs/loopvit.md).
Evaluation: the test split at a fixed scale (`canvas.eval_scale`) and corner (1, 1), as the
official validation: pixel accuracy over valid pixels and exact match per example.
Checkpoints: model, optimiser, weight average, sampler position, step, RNG (the skeleton's).
`init_from=PATH` starts from an official LoopViT `.pt` (its `model_state` through
`models.loopvit.load_official`, the architecture from its saved arguments; its task tokens in the
official task order, `data.official_tasks`, or a fresh table where that order cannot be established
from the dataset; the gate regularisers' weights from its saved arguments unless the command line
sets them) or a train-vit checkpoint (a run folder's latest, a step file, an exported folder,
`hf://`: `checkpoint.resolve`; its model config and weights; a task table of another row count
starts fresh, as the official test-time training does), read by the one safe loader
(`checkpoint.load`: no code from the file). The run's optimiser starts fresh.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import runtime
from hrm_deeploop.data import official_tasks
from hrm_deeploop.data.batches import TrainSampler, dataset_identity, open_dataset
from hrm_deeploop.data.canvas import IGNORE, canvas_batch, largest_side
from hrm_deeploop.errors import UserError
from hrm_deeploop.families import of_state, require
from hrm_deeploop.families.loopvit import read as read_loopvit
from hrm_deeploop.families.loopvit_scores import canvas_accuracy as evaluate
from hrm_deeploop.families.loopvit_scores import canvas_scores, to_tensors
from hrm_deeploop.families.weights import check_tensors
from hrm_deeploop.models.loopvit import LoopViT, LoopViTOutput, load_official
from hrm_deeploop.models.loopvit_config import NUM_COLORS, LoopViTConfig
from hrm_deeploop.training import fsdp
from hrm_deeploop.training.ema import EMA
from hrm_deeploop.training.loop import Task, fit, run_config_dict
from hrm_deeploop.training.optim import loopvit_lr_at, lr_at, set_lr
from hrm_deeploop.training.reuse import Reuse, built_model, remembered
from hrm_deeploop.training.runlog import check_finite
from hrm_deeploop.training.vision_config import SCRIPT_PENALTIES, TrainViTConfig


def gate_regularisers(gate_probs: torch.Tensor | None, exit_steps: torch.Tensor | None = None,
                      num_loops: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The official offline terms: -mean_{b,t} H(g_bt) (H the binary entropy, eps 1e-6 inside the
    logs) and mean_b(exit_b / T) (exit_steps None: every sample ran T loops, so 1)."""
    if gate_probs is None:
        zero = torch.zeros(())
        return zero, zero
    eps = 1e-6
    g = gate_probs  # (B, T)
    entropy = -(g * torch.log(g + eps) + (1 - g) * torch.log(1 - g + eps))
    steps = (exit_steps.float() / num_loops if exit_steps is not None
             else torch.full((g.shape[0],), float(num_loops), device=g.device) / num_loops)
    return -entropy.mean(), steps.mean()


def vision_loss(out: LoopViTOutput, target: torch.Tensor, gate_entropy_weight: float, loop_penalty_weight: float,
                num_loops: int, ce_scale: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Cross-entropy (ignore 10) over the batch's valid pixels (times `ce_scale`: `pixel_share`
    under torchrun) + the weighted gate regularisers."""
    ce = F.cross_entropy(out.logits.reshape(-1, NUM_COLORS), target.reshape(-1).long(), ignore_index=IGNORE)
    if ce_scale != 1.0:
        ce = ce * ce_scale
    neg_entropy, penalty = gate_regularisers(out.gate_probs, None, num_loops)
    loss = ce
    if gate_entropy_weight > 0:
        loss = loss + gate_entropy_weight * neg_entropy
    if loop_penalty_weight > 0:
        loss = loss + loop_penalty_weight * penalty
    return loss, {"ce": ce.detach(), "gate_entropy": -neg_entropy.detach()}


def pixel_share(target: torch.Tensor, world_size: int) -> float:
    """W n_r / N: this rank's valid pixels n_r over the global batch's N, times the world size W.
    DDP and FSDP2 average gradients over ranks, so sum_r (W n_r / N) mean_r / W = the mean over the
    global batch's pixels: what one process computes. 1 on one process (no collective)."""
    if world_size == 1:
        return 1.0
    counts = (target != IGNORE).sum().double().view(1)
    local = float(counts)
    runtime.all_reduce_(counts)
    return world_size * local / max(float(counts), 1.0)


class VisionTrainer(Task):
    work_unit = "examples"

    def __init__(self, cfg: TrainViTConfig, env: runtime.Env, train_split: Any, test_split: Any = None,
                 start: dict[str, Any] | None = None, reuse: Reuse | None = None):
        self.cfg, self.env = cfg, env
        self.train_split, self.test_split = train_split, test_split
        self.total_steps = int(cfg.train.max_steps)
        self.eval_every = cfg.eval.every
        self.work_per_step = cfg.train.global_batch_size
        self.name = "loopvit"
        self.config = run_config_dict(cfg)
        self.sampler = TrainSampler(train_split, cfg.train.global_batch_size, cfg.seed, env.rank, env.world_size,
                                    epochs_per_iter=cfg.train.epochs_per_iter)
        # under torch.manual_seed(cfg.seed): the same init on every rank; `reuse` (ttt's tasks in one
        # process) hands back a model built so before, as it was built (training/reuse.py)
        self.model = built_model(reuse, ("loopvit", cfg.model, cfg.scaling, cfg.train.compile, cfg.train.compile_scope),
                                 cfg.seed, lambda: LoopViT(cfg.model, cfg.scaling), env.device)
        if start is not None:
            start_weights(self.model, start, cfg.init_from)
        self.model.to(env.device).train()
        self.sharded = cfg.train.fsdp and env.distributed
        if cfg.train.compile and cfg.train.compile_scope == "model":  # the unrolled K x T loop: one graph
            self.model.compile()
        elif cfg.train.compile:  # each block: one graph for every block and loop (the module docstring)
            for block in self.model.layers:
                block.compile()
        if self.sharded:  # after the start weights, before the optimiser: it must hold the sharded parameters
            fsdp.shard(self.model, self.model.layers)
            self.ddp = self.model
        else:
            # without the entropy term nothing reaches the gate's weights: DDP must be told
            gate_unused = cfg.model.exit_gate and cfg.optim.gate_entropy_weight == 0
            self.ddp = runtime.wrap_ddp(self.model, env, unused_parameters=gate_unused)
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2),
                                           weight_decay=o.weight_decay)
        self.ema = EMA(self.model, cfg.train.ema_rate) if cfg.train.ema else None
        self.dtype = runtime.compute_dtype(cfg.dtype, env.device)  # float32 on CPU
        self.step = 0

    def describe(self) -> str:
        m = self.cfg.model
        return (f"LoopViT ({m.block}, d {m.hidden_size}, K {m.num_blocks} x T {m.num_loops}) "
                f"{self.model.num_params():,} parameters (task table excluded), scaling={self.cfg.scaling.scheme}, "
                f"device={self.env.device}, world={self.env.world_size}, steps={self.total_steps}")

    def next_batch(self, step: int) -> dict[str, torch.Tensor]:
        """This rank's canvases for `step` (its slice of the global batch's views: module docstring)."""
        idx, pids = self.sampler.next_global()
        B, r = self.sampler.local_batch_size, self.env.rank
        rng = np.random.default_rng([self.cfg.seed, step, 0])  # 0: the rank these streams were keyed by before
        c = self.cfg.canvas
        batch = canvas_batch(self.train_split, idx, pids, self.cfg.model.image_size, rng, c.resolution,
                             c.translation, keep=slice(r * B, (r + 1) * B))
        return to_tensors(batch, self.env.device)

    def train_step(self, step: int | None = None, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        """One optimiser step on the sampler's next batch (or on `tensors`: canvas, mask, target, task_ids)."""
        self.step = self.step + 1 if step is None else step
        t = self.next_batch(self.step) if tensors is None else tensors
        o, m = self.cfg.optim, self.cfg.model
        lr = (loopvit_lr_at if o.schedule == "official" else lr_at)(self.step, o.lr, o.warmup_steps, self.total_steps,
                                                                     o.min_lr_ratio)
        set_lr(self.optimizer, lr)
        with runtime.autocast(self.env.device, self.dtype):  # a no-op on CPU and for float32
            out = self.ddp(t["canvas"], t["task_ids"], t["mask"])
            loss, parts = vision_loss(out, t["target"], o.gate_entropy_weight, o.loop_penalty_weight, m.num_loops,
                                      pixel_share(t["target"], self.env.world_size))
        loss.backward()
        params = [p for p in self.model.parameters() if p.grad is not None]
        # the norm over every parameter (DTensors under FSDP2: over every shard, replicated); clip 0: none
        max_norm = o.grad_clip if o.grad_clip > 0 else float("inf")
        grad_norm = fsdp.local_value(torch.nn.utils.clip_grad_norm_(params, max_norm))
        right, valid, exact = canvas_scores(out.logits.detach(), t["target"])
        sums = torch.stack([loss.detach().double(), parts["ce"].double(), parts["gate_entropy"].double(),
                            right.double(), valid.double(), exact.double()])
        runtime.all_reduce_(sums)
        loss_v, ce, ent, right_v, valid_v, exact_v = sums.tolist()
        W, rows = self.env.world_size, t["canvas"].shape[0] * self.env.world_size
        metrics = {"loss": loss_v / W, "ce": ce / W, "gate_entropy": ent / W, "grad_norm": float(grad_norm),
                   "accuracy": right_v / max(valid_v, 1.0), "exact_accuracy": exact_v / rows, "lr": lr}
        check_finite(self.step, loss=metrics["loss"], grad_norm=metrics["grad_norm"])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        return metrics

    def progress(self, m: dict[str, float]) -> dict[str, str]:
        return {"loss": f"{m['loss']:.4f}", "acc": f"{m['accuracy']:.3f}"}

    def evaluate(self, step: int) -> dict[str, float] | None:
        if self.test_split is None:
            return None
        with self.ema.applied(self.model) if self.ema is not None else contextlib.nullcontext():
            em = evaluate(self.model, self.test_split, self.env, self.cfg.eval.global_batch_size or
                          self.cfg.train.global_batch_size, self.cfg.canvas.eval_scale, self.cfg.eval.max_batches)
        if em is None:
            runtime.print0(f"step {step}: eval: the test split has no labelled examples; nothing to score")
            return None
        runtime.print0(f"step {step}: eval exact_accuracy={em['exact_accuracy']:.4f} accuracy={em['accuracy']:.4f} "
                       f"over {int(em['count'])} examples")
        return {f"eval/{k}": v for k, v in em.items()}

    def summary(self, status: str, last_eval: dict[str, float] | None, train_loss: float | None) -> dict[str, Any]:
        return {"params": self.model.num_params(), "model": "loopvit", "block": self.cfg.model.block,
                "scaling": {"scheme": self.cfg.scaling.scheme, "p": self.cfg.scaling.p}}

    def data_identity(self) -> dict[str, Any]:
        return dataset_identity(self.cfg.data_dir)

    def state_dict(self) -> dict[str, Any]:
        ema = self.ema.state_dict() if self.ema is not None else None
        if self.sharded:  # gathered into the one-process layout (collective; rank 0 holds the tensors)
            model, adamw = fsdp.full_model_state(self.model), fsdp.full_optim_state(self.model, self.optimizer)
            if ema is not None:
                ema["shadow"] = fsdp.full_tensors(ema["shadow"])
        else:
            model, adamw = self.model.state_dict(), self.optimizer.state_dict()
        return {"model": model, "ema": ema, "optimizers": {"adamw": adamw}, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, s: dict[str, Any], path: Path) -> None:
        for key in ("model", "optimizers", "sampler"):
            if key not in s:
                raise UserError(f"checkpoint '{path}' has no '{key}' (not a train-vit train-state file)")
        try:
            if self.sharded:
                fsdp.load_full_model_state(self.model, s["model"])
                fsdp.load_full_optim_state(self.model, self.optimizer, s["optimizers"]["adamw"])
            else:
                self.model.load_state_dict(s["model"])
                self.optimizer.load_state_dict(s["optimizers"]["adamw"])
        except (RuntimeError, KeyError, ValueError) as e:
            raise UserError(f"checkpoint '{path}' does not fit this LoopViT run: {str(e).splitlines()[0]}") from None
        if self.ema is not None and s.get("ema") is not None:
            self.ema.load_state_dict(s["ema"])
        self.sampler.load_state_dict(s["sampler"])
        self.step = int(s["step"])


def read_start(path: str) -> tuple[LoopViTConfig, dict[str, Any]]:
    """The model config and raw weights of `init_from`: an official LoopViT file, or a train-vit
    checkpoint as a step file, a run folder (its latest), an exported folder or `hf://OWNER/NAME`
    (`checkpoint.resolve`), read by the one safe loader and the family's reader (`families.loopvit.read`). Returns
    {"official": bool, "weights": state, "args": an official file's saved arguments (else None),
    "path": the file read, "scaling": the checkpoint's scaling (an official file's: baseline)}."""
    p = ckpt.resolve(path)
    state = ckpt.load(p)
    require(of_state(p, state), "train-vit", f"checkpoint '{p}'")  # another family: the commands that serve it
    cfg, scaling, weights, which = read_loopvit(p, state, ema=False)
    official = which == "official"
    return cfg, {"official": official, "weights": weights, "args": state["config"] if official else None,
                 "path": str(p), "scaling": scaling}


def start_weights(model: LoopViT, start: dict[str, Any], path: str | None) -> None:
    """Load `read_start`'s weights into `model`. An official file's task tokens go to the dataset's
    identifiers in the official task order (`data.official_tasks`, the dataset `start["data_dir"]`)
    or, where that order cannot be established, the table stays fresh (never row i for identifier
    i); a train-vit checkpoint's table of another row count stays fresh. Every tensor is checked
    first (`loading.check_tensors`, as `checkpoint.load_weights` checks the reasoners'): a value
    that is not a tensor, an integer weight, NaN or infinity: one line naming it."""
    w = start["weights"]
    check_tensors(w, f"init_from '{path}'")
    try:
        if start["official"]:
            w, tokens = official_start_table(model, w, start.get("data_dir"))
            load_official(model, w)
        else:
            table = w.get("task_embed.weight")
            skipped = ["task_embed.weight"] if table is not None and table.shape != model.task_embed.weight.shape else []
            model.load_state_dict({k: v for k, v in w.items() if k not in skipped}, strict=not skipped)
            tokens = "a fresh task table (its rows do not match the dataset's)" if skipped else ""
    except (ValueError, RuntimeError) as e:
        raise UserError(f"init_from '{path}' does not fit the model: {str(e).splitlines()[0]}") from None
    runtime.print0(f"init_from: {path}" + (f"; {tokens}" if tokens else ""))


def official_start_table(model: LoopViT, weights: dict[str, Any], data_dir: str | None
                         ) -> tuple[dict[str, Any], str]:
    """An official file's weights with the task table `model` starts from, and what it is: the file's
    rows in the dataset's identifier order (`official_tasks.map_weights`; the blank row the model's
    own), or the model's fresh table where the order cannot be established (no dataset: `ttt
    views=official` draws its own table)."""
    fresh = model.task_embed.weight.detach().clone()
    if data_dir is not None:
        mapped, order = official_tasks.map_weights(weights, data_dir, blank=fresh[0])
        if order.rows is not None:
            rows = int(weights[official_tasks.TABLE_KEY].shape[0])
            return mapped, (f"task tokens: the file's {rows} rows in the official task order (sorted task names), "
                            f"for the dataset's {order.num_ids - 1} puzzle identifiers")
        why = order.why
    else:
        why = "no dataset to establish the official task order"
    return {**weights, official_tasks.TABLE_KEY: fresh}, f"a fresh task table ({why})"


def penalty_weights(optim: Any, start: dict[str, Any] | None) -> str | None:
    """Fill the gate regularisers' weights left unset (null): from an official `init_from` file's
    saved arguments (its `config`), else the shipped script's (`SCRIPT_PENALTIES`). Returns the
    line saying where each came from, for an official file (None otherwise)."""
    args = start["args"] if start is not None and start["official"] else None
    said = []
    for key, script in SCRIPT_PENALTIES.items():
        flag = "--" + key.replace("_", "-")
        if getattr(optim, key) is not None:
            source = "set by this run's config"
        elif args is not None and key in args:
            value = args[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise UserError(f"init_from '{start['path']}': its saved {flag} is {value!r}, not a weight >= 0")
            setattr(optim, key, float(value))
            source = f"the file's saved {flag}"
        else:
            setattr(optim, key, script)
            source = "the shipped script's" + (f"; the file saves no {flag}" if args is not None else "")
        said.append(f"optim.{key}={getattr(optim, key):g} ({source})")
    return "init_from: gate regularisers " + ", ".join(said) if args is not None else None


def build(cfg: TrainViTConfig, env: runtime.Env, reuse: Reuse | None = None) -> VisionTrainer:
    """Open and check the data, size the task table to it, build the trainer (nothing written).
    `reuse`: what one process keeps between the trainers it builds (training/reuse.py: the start as
    read, the parameter count of the memory check, the model itself); the same trainer."""
    train_split = open_dataset(cfg.data_dir, "train")
    meta = train_split.meta
    if int(meta.seq_len) != 900 or int(meta.vocab_size) != 12:
        raise UserError(f"data_dir '{cfg.data_dir}' is not an ARC grid dataset (seq_len {meta.seq_len}, vocab "
                        f"{meta.vocab_size}; train-vit reads 30 x 30 grids built by build-arc)")
    start = None
    if cfg.init_from:  # the architecture is the checkpoint's
        cfg.model, start = remembered(reuse, ("read_start", cfg.init_from), lambda: read_start(cfg.init_from))
        start = dict(start)  # its own: data_dir is the task's
        cfg.scaling = start["scaling"]  # its alpha and beta too (a DeepLoop run trained on as baseline is another model)
        cfg.model.depth(cfg.scaling)
        start["data_dir"] = cfg.data_dir  # an official file's task order is established from it
    said = penalty_weights(cfg.optim, start)
    if said:
        runtime.print0(said)
    cfg.model = replace(cfg.model, num_tasks=int(meta.num_puzzle_identifiers))
    test_split = None
    if (Path(cfg.data_dir) / "test").is_dir():
        test_split = open_dataset(cfg.data_dir, "test")
    check_sizes(cfg, env, train_split, test_split, reuse)
    return VisionTrainer(cfg, env, train_split, test_split, start, reuse)


def check_sizes(cfg: TrainViTConfig, env: runtime.Env, train_split: Any, test_split: Any,
                reuse: Reuse | None = None) -> None:
    """What is refused before the run folder is made, in one line each: a canvas that cannot hold
    the data's largest grid (training draws scales from 1 up), an evaluation scale that puts a test
    grid off the canvas, a model this machine cannot hold at the batch (`runtime.estimate_memory`'s
    rule: Adam's four copies of the weights, activations of every block visit on the tape), and a
    step that cannot take less than an hour (`runtime.check_loop_time`). With `reuse`, the model is
    counted on the meta device once per process for each config."""
    m = cfg.model
    room = m.image_size - 2
    longest = largest_side(train_split)
    if longest > room:
        raise UserError(f"model.image_size={m.image_size}: the training split has a {longest}-cell side, more than "
                        f"the {room} a canvas of {m.image_size} holds (64 holds 30 x 30 grids)")
    tested = largest_side(test_split) if test_split is not None else 0
    if tested * cfg.canvas.eval_scale > room:
        raise UserError(f"canvas.eval_scale={cfg.canvas.eval_scale} puts the test split's {tested}-cell side at "
                        f"{tested * cfg.canvas.eval_scale} cells, off a {m.image_size} x {m.image_size} canvas "
                        f"(sides up to {room}): lower canvas.eval_scale or raise model.image_size")
    tokens = 1 + (m.image_size // m.patch_size) ** 2
    visits = m.num_blocks * m.num_loops
    batch = max(1, cfg.train.global_batch_size // env.world_size)
    copies = 5 if cfg.train.ema else 4  # weights, gradients, Adam's two moments (+ the weight average)
    params, param_bytes, buffer_bytes = remembered(reuse, ("count_model", m, cfg.scaling),  # on meta
                                                   lambda: runtime.count_model(lambda c: LoopViT(c, cfg.scaling), m))
    per_hidden = runtime.ACT_PER_HIDDEN + runtime.ACT_PER_EXPANSION * m.mlp_dim / max(m.hidden_size, 1)
    per_token = visits * (int(per_hidden * m.hidden_size) + runtime.ACT_PER_TOKEN) + 3 * NUM_COLORS * m.patch_size ** 2
    est = runtime.MemoryEstimate(parameters=params, weight_bytes=param_bytes + buffer_bytes,
                                 state_bytes=copies * param_bytes + buffer_bytes,
                                 activation_bytes=batch * tokens * per_token * 4, copies=copies)
    runtime.check_memory(f"train-vit: LoopViT hidden_size={m.hidden_size} on {m.image_size} x {m.image_size} "
                         f"canvases ({tokens:,} tokens) x {visits:,} block visits at {batch} rows per step", est,
                         env.device, fix="lower model.image_size, model.num_loops or train.global_batch_size")
    runtime.check_loop_time("train-vit", visits * 2, 3.0 * batch * tokens * visits * runtime.block_flops(m.hidden_size),
                            env.device, "per step", "lower model.num_loops, model.num_blocks or model.image_size")


def run(cfg: TrainViTConfig) -> int:
    fit(cfg, lambda env: build(cfg, env))
    return 0

