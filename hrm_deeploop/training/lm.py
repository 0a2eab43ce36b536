"""`hrm-deeploop train-gpt`: train the looped GPT on token shards (DeepLoop paper section 5.1).

Optimiser: AdamW (decoupled weight decay), betas (0.9, 0.95), eps 1e-8, grad-norm clip 1.0,
linear warmup then cosine to `optim.min_lr_ratio * optim.lr`. The paper does not name its LM
optimiser; its global batch (480 x 1024 = 491,520 tokens) and 100K steps match nanoGPT's GPT-2
reproduction, so we take nanoGPT's AdamW settings (lr 6e-4, wd 0.1, min lr 6e-5, warmup 2000).
Weight decay applies to the block matrices (and an untied head) only: not to norm gains, and not
to the token embedding, which is also the tied output head (nanoGPT does decay it; set
`optim.decay_embeddings=true` for that).

Batching: `train.global_batch_tokens` = train.micro_batch_size x seq_len x world_size x
accumulation; the accumulation count is derived and must be a whole number. Every micro-batch
consumes one global batch of windows from `TokenShards` (rank r takes its slice), so 1 process x B
sequences and W processes x B/W sequences see the same windows and produce the same update.

The loop around the step (run folder, resume, cadence, NaN guard, summary.json) is
`training.loop`. Data is opened and validated before the folder is touched, so bad input writes
nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from hrm_deeploop import runtime
from hrm_deeploop.checkpoint import strip_prefixes
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.models.gpt import GPT, flops_per_token
from hrm_deeploop.models.scaling import tape_layers
from hrm_deeploop.text.loader import TokenShards, iter_eval_batches
from hrm_deeploop.text.loss import evaluate_loss
from hrm_deeploop.text.shards import expand_shards, open_shard
from hrm_deeploop.training import fsdp
from hrm_deeploop.training.kappa import adam_preconditioner, measure, summarize
from hrm_deeploop.training.loop import (
    Task,
    fit,
    run_config_dict,
)
from hrm_deeploop.training.optim import lr_at, set_lr
from hrm_deeploop.training.runlog import check_finite
from hrm_deeploop.training.train_config import LMOptim, TrainGPTConfig

# ---- data -----------------------------------------------------------------------------------


class TrainData(Protocol):
    """What the trainer needs from a training stream (`hrm_deeploop.text.loader.TokenShards` is one)."""

    def next_batch(self) -> tuple[Tensor, Tensor]: ...  # this rank's (x, y), int64 (B, T)
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


ValData = Callable[[], Iterable[tuple[Tensor, Tensor]]]  # a fresh pass over the same held-out batches


@dataclass
class Data:
    train: TrainData
    val: ValData | None
    unigram_entropy: float | None  # nats, of the training tokens (None if unknown)


def unigram_entropy(tokens: np.ndarray, vocab_size: int | None = None) -> float:
    """Entropy in nats of the token frequency distribution: the loss of the best context-free
    predictor, i.e. the 'unigram floor' a run that learns nothing beyond frequencies sits at."""
    counts = np.bincount(np.asarray(tokens).ravel().astype(np.int64), minlength=vocab_size or 0)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def shard_unigram_entropy(pattern: str, max_tokens: int) -> float:
    """Unigram entropy of (up to `max_tokens` of) the training shards, read from the start of each
    shard in proportion to its size."""
    maps = [open_shard(p) for p in expand_shards(pattern)]
    total = sum(len(m) for m in maps)
    frac = min(1.0, max_tokens / total)
    counts = np.zeros(65536, dtype=np.int64)
    for m in maps:
        n = max(1, int(len(m) * frac))
        counts += np.bincount(np.asarray(m[:n]), minlength=65536)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def open_data(cfg: TrainGPTConfig, e: runtime.Env) -> Data:
    """Open and validate the shards (every error here is raised before anything is written)."""
    model_cfg = cfg.model
    if not cfg.data.train:
        raise ConfigError("data.train is empty: point it at training shards (hrm-deeploop prepare-text output)")
    train = TokenShards(cfg.data.train, model_cfg.seq_len, cfg.train.micro_batch_size, e.rank, e.world_size,
                        seed=cfg.seed, tokenizer_id=cfg.data.tokenizer_id, vocab_size=model_cfg.vocab_size)
    val = None
    if cfg.data.val:
        def val() -> Iterator[tuple[Tensor, Tensor]]:
            return iter_eval_batches(cfg.data.val, model_cfg.seq_len, cfg.train.micro_batch_size, e.rank,
                                     e.world_size, max_batches=cfg.data.val_batches,
                                     tokenizer_id=cfg.data.tokenizer_id, vocab_size=model_cfg.vocab_size)
        next(iter(val()))  # validate the val shards now (the generator checks lazily)
    h = shard_unigram_entropy(cfg.data.train, cfg.data.unigram_tokens) if cfg.data.unigram_tokens > 0 else None
    return Data(train=train, val=val, unigram_entropy=h)


# ---- pieces -----------------------------------------------------------------------------------


def grad_accum_steps(global_batch_tokens: int, micro_batch_size: int, seq_len: int, world_size: int) -> int:
    per_micro = micro_batch_size * seq_len * world_size
    if global_batch_tokens % per_micro or global_batch_tokens < per_micro:
        raise ConfigError(
            f"train.global_batch_tokens={global_batch_tokens} is not a whole multiple of train.micro_batch_size x "
            f"model.seq_len x world_size = {micro_batch_size} x {seq_len} x {world_size} = {per_micro}")
    return global_batch_tokens // per_micro


def param_groups(model: GPT, weight_decay: float, decay_embeddings: bool = False) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (ndim >= 2) except the token embedding (tied head) unless
    asked; no decay on norm gains (1-D)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_embedding = name == "embed_tokens.weight"
        (decay if p.ndim >= 2 and (decay_embeddings or not is_embedding) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: GPT, o: LMOptim, device: torch.device) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, o.weight_decay, o.decay_embeddings), lr=o.lr,
                             betas=(o.beta1, o.beta2), eps=o.eps, fused=device.type == "cuda")


def left_floor(loss: float | None, floor: float | None, margin: float) -> bool | None:
    """Did a run get clearly below the unigram-entropy floor? None when either number is unknown."""
    if loss is None or floor is None or not math.isfinite(loss):
        return None if floor is None else False
    return loss < floor - margin


def check_training_memory(cfg: TrainGPTConfig, env: runtime.Env, dtype: torch.dtype) -> None:
    """Refuse a looped GPT and micro-batch this machine cannot hold, before allocating them:
    weights, gradients and AdamW's two moments (sharded under FSDP), the activations of the rounds
    on the tape (the most R the depth sampler draws, or its backprop_rounds) and the logits
    (runtime.estimate_memory)."""
    m, d = cfg.model, cfg.depth
    rounds = m.num_rounds if not d.varies else (
        math.ceil(d.mean_rounds) if d.sampler == "lognormal_poisson" and d.max_rounds is None else d.max(m.num_rounds))
    if d.backprop_rounds is not None:
        rounds = min(rounds, d.backprop_rounds)
    rows = cfg.train.micro_batch_size
    est = runtime.estimate_memory(lambda c: GPT(c, cfg.scaling), m, copies=4, batch=rows,
                                layers=tape_layers(m, rounds), dtype=dtype, head_values=3 * m.vocab_size,
                                shards=env.world_size if cfg.train.fsdp and env.distributed else 1)
    runtime.check_memory(f"train-gpt: hidden_size={m.hidden_size}, {m.num_blocks} blocks x {rounds} rounds on the tape "
                       f"({est.parameters:,} parameters) at {rows} x {m.seq_len} tokens per micro-batch", est,
                       env.device, fix="lower model.hidden_size, model.num_blocks or train.micro_batch_size")
    calls = m.num_blocks * (rounds + m.num_rounds if not d.varies else 2 * rounds)  # forward, backward of the tape
    accum = grad_accum_steps(cfg.train.global_batch_tokens, rows, m.seq_len, env.world_size)
    runtime.check_loop_time(f"train-gpt: {m.num_blocks} blocks x {m.num_rounds} rounds", calls * accum,
                            calls * accum * runtime.block_flops(m.hidden_size) * rows * m.seq_len, env.device,
                            "per step", fix="lower model.num_rounds or model.num_blocks")


# ---- the step --------------------------------------------------------------------------------


class LMTrainer(Task):
    """The looped GPT's part of the shared loop: model, AdamW, token stream, one optimiser step."""

    name = "train-gpt"
    work_unit = "tokens"

    def __init__(self, cfg: TrainGPTConfig, env: runtime.Env, data: Data | None = None):
        self.cfg, self.env = cfg, env
        m = cfg.model
        self.device = env.device
        self.dtype = runtime.compute_dtype(cfg.dtype, env.device)
        self.accum = grad_accum_steps(cfg.train.global_batch_tokens, cfg.train.micro_batch_size, m.seq_len,
                                      env.world_size)
        self.total_steps = int(cfg.train.max_steps)
        self.eval_every = cfg.eval.every
        self.work_per_step = cfg.train.global_batch_tokens
        self.flops_per_unit = flops_per_token(m)
        self.peak_tflops = cfg.train.mfu_peak_tflops
        self.config = run_config_dict(cfg)
        check_training_memory(cfg, env, self.dtype)  # before the model exists: refused or announced in one line
        runtime.seed_all(cfg.seed)
        self.model = GPT(m, cfg.scaling, scaling_rounds=cfg.depth.scaling_rounds(m.num_rounds, self.total_steps),
                         fused=env.fused_kernel).to(env.device)
        # The default (fixed R, every round on the tape) calls the model exactly as before.
        self.depth_varies = cfg.depth.varies or cfg.depth.backprop_rounds is not None
        self.sharded = cfg.train.fsdp and env.distributed
        if self.sharded:  # before the optimizer: it must hold the sharded parameters
            fsdp.shard(self.model, self.model.core.layers)
        self.opt = make_optimizer(self.model, cfg.optim, env.device)
        self.data = data if data is not None else open_data(cfg, env)  # validates shards; nothing written yet
        self.fwd_model: torch.nn.Module = torch.compile(self.model) if cfg.train.compile else self.model
        # DDP only for the gradient all-reduce; FSDP2 does its own reduce-scatter
        # truncated back-propagation leaves the embedding norm without a gradient in steps with R > k
        self.train_model = self.fwd_model if self.sharded else runtime.wrap_ddp(
            self.fwd_model, env, unused_parameters=cfg.depth.backprop_rounds is not None)
        self.train_model.train()
        self.last_val: float | None = None
        self.epoch = 0  # passes over the training shards started so far (announced when a new one starts)
        self._probe_batch: tuple[Tensor, Tensor] | None = None  # the fixed batch kappa is measured on

    def describe(self) -> str:
        m, r, d = self.cfg.model, self.model.residual, self.cfg.depth
        rounds = (f"R={m.num_rounds}" if not d.varies else
                  f"R~{d.sampler} (mean {d.mean(m.num_rounds, self.total_steps):.3g}; eval R={m.num_rounds})")
        rounds += f" backprop through the last {d.backprop_rounds}" if d.backprop_rounds is not None else ""
        return (f"looped GPT: {self.model.num_params() / 1e6:.2f}M params (stored once), K={m.num_blocks} "
                f"{rounds} N={m.num_blocks * self.model.scaling_rounds:g} scheme={self.cfg.scaling.scheme} "
                f"alpha={r.alpha:.4g} beta={r.beta:.4g}; {self.accum} micro-batches x "
                f"{self.cfg.train.micro_batch_size} x {m.seq_len} x {self.env.world_size} ranks"
                f"{' (FSDP2)' if self.sharded else ''} = "
                f"{self.work_per_step} tokens/step; {self.flops_per_unit / 1e9:.3f} GFLOP/token")

    def train_step(self, step: int) -> dict[str, float]:
        o, e = self.cfg.optim, self.env
        lr = lr_at(step, o.lr, o.warmup_steps, self.total_steps, o.min_lr_ratio)
        set_lr(self.opt, lr)
        loss_sum = torch.zeros((), device=self.device)
        depth: dict[str, int | None] = {}
        if self.depth_varies:  # one R per step, drawn from (seed, step): the same on every rank
            rounds = self.cfg.depth.rounds_at(step, self.cfg.seed, self.cfg.model.num_rounds)
            depth = {"num_rounds": rounds, "backprop_rounds": self.cfg.depth.backprop_rounds}
        for micro in range(self.accum):
            x, y = self.data.train.next_batch()
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            sync = micro == self.accum - 1 or not e.distributed
            if self.sharded:  # reduce-scatter the accumulated gradient once, after the last micro-batch
                self.model.set_requires_gradient_sync(sync)
            with contextlib.nullcontext() if sync or self.sharded else self.train_model.no_sync():
                with runtime.autocast(self.device, self.dtype):
                    loss = self.train_model(x, y, **depth)[1]  # logits freed before backward
                (loss / self.accum).backward()
            loss_sum += loss.detach()
        epoch = getattr(self.data.train, "epoch", 0)
        if epoch > self.epoch:
            self.epoch = epoch
            runtime.print0(f"train-gpt: step {step} starts pass {epoch + 1} over the training shards: from here on "
                         "the run sees tokens it has seen before (more distinct tokens: a larger corpus)")
        max_norm = o.grad_clip if o.grad_clip > 0 else float("inf")
        grad_norm = fsdp.local_value(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        step_loss = runtime.all_reduce_(loss_sum / self.accum) / e.world_size
        check_finite(step, loss=step_loss, grad_norm=grad_norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        out = {"loss": float(step_loss), "lr": lr, "grad_norm": float(grad_norm), "data_epoch": float(self.epoch)}
        if depth:
            out["rounds"] = float(depth["num_rounds"])
        return out

    def diagnose(self, step: int) -> dict[str, float] | None:
        """Visit alignment kappa_R per physical sublayer on a fixed batch (training/kappa.py)."""
        if self._probe_batch is None:
            if self.data.val is not None:
                self._probe_batch = next(iter(self.data.val()))
            else:  # the next training batch, without consuming it
                saved = self.data.train.state_dict()
                self._probe_batch = self.data.train.next_batch()
                self.data.train.load_state_dict(saved)
        x, y = (t.to(self.device) for t in self._probe_batch)
        blocks = {f"core.layers.{i}": b for i, b in enumerate(self.model.core.layers)}

        def forward():
            with runtime.autocast(self.device, self.dtype):
                logits, loss = self.model(x, y)
            return loss, logits.float()

        results = measure(blocks, forward, adam_preconditioner(self.opt), self.cfg.diagnostics.kappa_probes,
                          torch.Generator().manual_seed(self.cfg.seed * 7919 + step))
        return summarize(results)

    def evaluate(self, step: int) -> dict[str, float] | None:
        if self.data.val is None:
            return None
        self.last_val = evaluate_loss(self.fwd_model, self.data.val(), self.device, self.dtype)
        if runtime.is_main():  # on the console too, above the progress bar (not only in the metrics files)
            runtime.tqdm.write(f"train-gpt: step {step}: val loss {self.last_val:.4f}")
        return {"val/loss": self.last_val}

    def state_dict(self) -> dict[str, Any]:
        o = self.cfg.optim
        if self.sharded:  # gathered into the unsharded layout (collective; rank 0 holds the tensors)
            model, adamw = fsdp.full_model_state(self.model), fsdp.full_optim_state(self.model, self.opt)
        else:
            model, adamw = self.model.state_dict(), self.opt.state_dict()
        return {"model": model, "optimizers": {"adamw": adamw},
                "schedule": {"lr": o.lr, "warmup_steps": o.warmup_steps, "total_steps": self.total_steps,
                             "min_lr_ratio": o.min_lr_ratio},
                "sampler": self.data.train.state_dict(), "val_loss": self.last_val,
                # the R its alpha/beta were computed from, resolved once here (readers need not re-derive it)
                "scaling_rounds": self.model.scaling_rounds}

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        try:
            if self.sharded:
                fsdp.load_full_model_state(self.model, strip_prefixes(state["model"]))
            else:
                self.model.load_state_dict(strip_prefixes(state["model"]))
        except RuntimeError as err:
            raise UserError(f"checkpoint '{path}' does not fit the model: {str(err).splitlines()[0]}") from None
        if self.sharded:
            fsdp.load_full_optim_state(self.model, self.opt, state["optimizers"]["adamw"])
        else:
            self.opt.load_state_dict(state["optimizers"]["adamw"])
        self.data.train.load_state_dict(state["sampler"])
        self.last_val = state.get("val_loss")
        self.epoch = getattr(self.data.train, "epoch", 0)

    def summary(self, status: str, last_eval: dict[str, float] | None, train_loss: float | None) -> dict[str, Any]:
        m = self.cfg.model
        # The paper's surrogate: validation loss where there is one, else the trailing train loss.
        loss_for_floor = self.last_val if self.last_val is not None else train_loss
        return {
            "final_val_loss": self.last_val,
            "unigram_entropy": self.data.unigram_entropy,
            "left_unigram_floor": (False if status == "diverged"
                                   else left_floor(loss_for_floor, self.data.unigram_entropy, self.cfg.eval.floor_margin)),
            "params": self.model.num_params(),
            "flops_per_token": self.flops_per_unit,
            "model": {"hidden_size": m.hidden_size, "num_blocks": m.num_blocks, "num_rounds": m.num_rounds},
            "scaling": {"scheme": self.cfg.scaling.scheme, "p": self.cfg.scaling.p},
        }


# ---- entry points --------------------------------------------------------------------------------


def train(cfg: TrainGPTConfig, data: Data | None = None) -> dict[str, Any]:
    """Train (or resume) one run; returns the summary dict (also written to summary.json, rank 0).

    `data` replaces the shard loaders (tests, custom sources); by default they come from `cfg.data`.
    Summary status: finished (train.max_steps reached), stopped (at train.stop_after; resume to
    continue) or diverged (then TrainingDiverged is raised: a non-finite loss or gradient).
    """
    return fit(cfg, lambda env: LMTrainer(cfg, env, data))


def run(cfg: TrainGPTConfig) -> int:
    train(cfg)
    return 0
