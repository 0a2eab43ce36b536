"""`hrm-deeploop train-gpt`: train the looped GPT on token shards (DeepLoop paper section 5.1).

Optimiser: AdamW (decoupled weight decay), betas (0.9, 0.95), eps 1e-8, grad-norm clip 1.0,
linear warmup then cosine to `min_lr_ratio * lr`. The paper does not name its LM optimiser; its
global batch (480 x 1024 = 491,520 tokens) and 100K steps match nanoGPT's GPT-2 reproduction, so
we take nanoGPT's AdamW settings (lr 6e-4, wd 0.1, min lr 6e-5, warmup 2000). Weight decay
applies to the block matrices (and an untied head) only: not to norm gains, and not to the token
embedding, which is also the tied output head (nanoGPT does decay it; set
`optim.decay_embeddings=true` for that).

Batching: `global_batch_tokens` = micro_batch_size x seq_len x world_size x accumulation; the
accumulation count is derived and must be a whole number. Every micro-batch consumes one global
batch of windows from `TokenShards` (rank r takes its slice), so 1 process x B sequences and
W processes x B/W sequences see the same windows and produce the same update.

Run folder: config.yaml, metrics.jsonl/csv, checkpoints/step_N.pt (full state: model, optimiser,
schedule, step, RNG, data position, recent losses, config, code version), summary.json at the end.
Data is opened and validated before the folder is touched, so bad input writes nothing.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import runtime as dist_
from hrm_deeploop.config import to_dict, typed
from hrm_deeploop.errors import ConfigError, TrainingDiverged, UserError
from hrm_deeploop.models.gpt import GPT, GPTConfig, flops_per_token
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.optim import lr_at, set_lr
from hrm_deeploop.training.runlog import RunLogger, check_finite, progress

# ---- config ----------------------------------------------------------------------------------


@dataclass
class DataConfig:
    train: str = ""  # shard glob, folder of .bin shards, or file (prepare-text output)
    val: str = ""  # held-out shards; empty = no validation
    tokenizer_id: str | None = "gpt2"  # checked against the shards' meta.json; null skips the check
    val_batches: int = 20  # max validation batches per rank per evaluation (micro_batch_size each)
    unigram_tokens: int = 20_000_000  # training tokens read to compute the unigram-entropy floor


@dataclass
class OptimConfig:
    lr: float = 6e-4
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    warmup_steps: int = 2000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still logged)
    decay_embeddings: bool = False


@dataclass
class TrainGPTConfig:
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    output_dir: str = "runs/gpt"
    resume: bool = False
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda[:N]
    dtype: str = "bfloat16"  # autocast dtype on CUDA (CPU runs in float32)
    compile: bool = False  # torch.compile the model (CUDA)
    max_steps: int = 100_000  # optimiser steps; also the cosine schedule's length
    stop_after: int | None = None  # stop (with a checkpoint) at this step, e.g. to fit a job's time limit
    global_batch_tokens: int = 480 * 1024
    micro_batch_size: int = 16  # sequences per rank per forward/backward
    eval_every: int = 1000  # steps between validation losses (and always at the end)
    checkpoint_every: int = 5000  # steps between checkpoints (and always at the end / stop_after)
    keep_checkpoints: int = 3  # most recent checkpoints kept; 0 keeps all
    log_every: int = 10
    logger: str = "wandb"  # wandb (offline without a key) | none
    project: str = "hrm-deeploop"
    run_name: str | None = None
    mfu_peak_tflops: float = 989.0  # per device; H200/H100 SXM dense bf16
    floor_margin: float = 0.1  # nats below the unigram entropy a run must reach to count as trained
    trailing_steps: int = 50  # train-loss window for summary.json (the paper's trailing-50 mean)
    progress: bool = True


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
    from hrm_deeploop.text.shards import expand_shards, open_shard

    maps = [open_shard(p) for p in expand_shards(pattern)]
    total = sum(len(m) for m in maps)
    frac = min(1.0, max_tokens / total)
    counts = np.zeros(65536, dtype=np.int64)
    for m in maps:
        n = max(1, int(len(m) * frac))
        counts += np.bincount(np.asarray(m[:n]), minlength=65536)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def open_data(cfg: TrainGPTConfig, model_cfg: GPTConfig, e: dist_.Env) -> Data:
    """Open and validate the shards (every error here is raised before anything is written)."""
    from hrm_deeploop.text.loader import TokenShards, iter_eval_batches

    if not cfg.data.train:
        raise ConfigError("data.train is empty: point it at training shards (hrm-deeploop prepare-text output)")
    train = TokenShards(cfg.data.train, model_cfg.seq_len, cfg.micro_batch_size, e.rank, e.world_size,
                        seed=cfg.seed, tokenizer_id=cfg.data.tokenizer_id, vocab_size=model_cfg.vocab_size)
    val = None
    if cfg.data.val:
        def val() -> Iterator[tuple[Tensor, Tensor]]:
            return iter_eval_batches(cfg.data.val, model_cfg.seq_len, cfg.micro_batch_size, e.rank, e.world_size,
                                     max_batches=cfg.data.val_batches, tokenizer_id=cfg.data.tokenizer_id,
                                     vocab_size=model_cfg.vocab_size)
        next(iter(val()))  # validate the val shards now (the generator checks lazily)
    h = shard_unigram_entropy(cfg.data.train, cfg.data.unigram_tokens) if cfg.data.unigram_tokens > 0 else None
    return Data(train=train, val=val, unigram_entropy=h)


# ---- pieces -----------------------------------------------------------------------------------


def grad_accum_steps(global_batch_tokens: int, micro_batch_size: int, seq_len: int, world_size: int) -> int:
    per_micro = micro_batch_size * seq_len * world_size
    if global_batch_tokens % per_micro or global_batch_tokens < per_micro:
        raise ConfigError(
            f"global_batch_tokens={global_batch_tokens} is not a whole multiple of micro_batch_size x seq_len x "
            f"world_size = {micro_batch_size} x {seq_len} x {world_size} = {per_micro}")
    return global_batch_tokens // per_micro


def param_groups(model: GPT, weight_decay: float, decay_embeddings: bool = False) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (ndim >= 2) except the token embedding (tied head) unless
    asked; no decay on norm gains (1-D)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_embedding = name == "embed_tokens.weight"
        (decay if p.ndim >= 2 and (decay_embeddings or not is_embedding) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: GPT, o: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, o.weight_decay, o.decay_embeddings), lr=o.lr,
                             betas=(o.beta1, o.beta2), eps=o.eps, fused=device.type == "cuda")


def mfu(tokens_per_s: float, flops_token: float, peak_tflops: float, world_size: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of all devices."""
    return tokens_per_s * flops_token / (peak_tflops * 1e12 * world_size)


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, batches: Iterable[tuple[Tensor, Tensor]], device: torch.device,
                  dtype: torch.dtype) -> float:
    """Token-weighted mean cross-entropy over `batches`, summed over all ranks."""
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (sum of losses, tokens)
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with dist_.autocast(device, dtype):
            loss = model(x, y)[1]  # drop the (B, T, V) logits now, not after backward
        n = (y != -1).sum()
        total += torch.stack([loss.double() * n, n.double()])
    model.train(was_training)
    dist_.all_reduce_(total)
    if total[1] == 0:
        raise UserError("validation produced no batches")
    return float(total[0] / total[1])


# ---- training ----------------------------------------------------------------------------------


def run(cfg: Any) -> int:
    """CLI entry: compose -> typed configs -> train."""
    from hrm_deeploop.models.registry import model_config

    model_cfg = model_config(cfg.get("model"))
    if not isinstance(model_cfg, GPTConfig):
        raise ConfigError("train-gpt needs model.name=gpt")
    scaling = typed(cfg.get("scaling"), ScalingConfig, "scaling.")
    rest = {k: v for k, v in cfg.items() if k not in ("model", "scaling")}
    train_cfg = typed(rest, TrainGPTConfig)
    train(train_cfg, model_cfg, scaling)
    return 0


def train(cfg: TrainGPTConfig, model_cfg: GPTConfig, scaling: ScalingConfig,
          data: Data | None = None) -> dict[str, Any]:
    """Train (or resume) one run; returns the summary dict (also written to summary.json, rank 0).

    `data` replaces the shard loaders (tests, custom sources); by default they come from `cfg.data`.
    Summary status: finished (max_steps reached), stopped (at stop_after; resume to continue) or
    diverged (then TrainingDiverged is raised: a non-finite loss or gradient).
    """
    e = dist_.setup(cfg.device)
    try:
        return _train(cfg, model_cfg, scaling, data, e)
    finally:
        dist_.teardown()


def _train(cfg: TrainGPTConfig, model_cfg: GPTConfig, scaling: ScalingConfig, data: Data | None,
           e: dist_.Env) -> dict[str, Any]:
    device, run_dir = e.device, Path(cfg.output_dir)
    dtype = dist_.compute_dtype(cfg.dtype, device)
    accum = grad_accum_steps(cfg.global_batch_tokens, cfg.micro_batch_size, model_cfg.seq_len, e.world_size)
    if cfg.max_steps < 1:
        raise ConfigError(f"max_steps must be >= 1, got {cfg.max_steps}")
    stop = min(cfg.max_steps, cfg.stop_after or cfg.max_steps)

    dist_.seed_all(cfg.seed)
    model = GPT(model_cfg, scaling).to(device)
    opt = make_optimizer(model, cfg.optim, device)
    if data is None:
        data = open_data(cfg, model_cfg, e)  # validates shards; nothing written yet

    full_cfg = {"model": to_dict(model_cfg), "scaling": to_dict(scaling), **to_dict(cfg)}
    resume_from, error = None, None
    if e.is_main:
        try:
            resume_from = ckpt.prepare_run_dir(run_dir, full_cfg, cfg.resume, must_match=("model", "scaling"))
        except UserError as err:  # tell the other ranks instead of leaving them waiting
            error = str(err)
    resume_from, error = dist_.broadcast_object((str(resume_from) if resume_from else None, error))
    if error:
        raise UserError(error)
    summary_path = run_dir / "summary.json"
    if resume_from and summary_path.exists():
        done = json.loads(summary_path.read_text())
        if done.get("status") == "finished" and done.get("steps") == cfg.max_steps:
            dist_.print0(f"{run_dir} already finished ({cfg.max_steps} steps); nothing to do")
            return done

    step, recent = 0, collections.deque(maxlen=cfg.trailing_steps)
    last_val: float | None = None
    wall_before = 0.0  # wall time of earlier segments of a resumed run
    if resume_from:
        state = ckpt.load(resume_from, map_location=device)
        model.load_state_dict(ckpt.strip_prefixes(state["model"]))
        opt.load_state_dict(state["optimizers"]["adamw"])
        data.train.load_state_dict(state["sampler"])
        ckpt.set_rng_state(state["rng"])
        step = int(state["step"])
        recent.extend(state.get("recent_losses", []))
        last_val = state.get("val_loss")
        wall_before = float(state.get("wall_time_s", 0.0))
        dist_.print0(f"resumed {run_dir} at step {step} from {Path(resume_from).name}")

    fwd_model: torch.nn.Module = torch.compile(model) if cfg.compile else model
    train_model = dist_.wrap_ddp(fwd_model, e)  # DDP only for the gradient all-reduce

    n_params = model.num_params()
    flops_token = flops_per_token(model_cfg)
    tokens_per_step = cfg.global_batch_tokens
    logger = RunLogger(run_dir, cfg.logger, cfg.project,
                       cfg.run_name or run_dir.name, full_cfg, resume=resume_from is not None)
    dist_.print0(f"looped GPT: {n_params / 1e6:.2f}M params (stored once), K={model_cfg.num_blocks} "
                 f"R={model_cfg.num_rounds} N={model_cfg.num_blocks * model_cfg.num_rounds} "
                 f"scheme={scaling.scheme} alpha={model.residual.alpha:.4g} beta={model.residual.beta:.4g}; "
                 f"{accum} micro-batches x {cfg.micro_batch_size} x {model_cfg.seq_len} x {e.world_size} ranks "
                 f"= {tokens_per_step} tokens/step; {flops_token / 1e9:.3f} GFLOP/token")

    def save(at: int) -> None:
        if not e.is_main:
            return
        ckpt.save(ckpt.step_path(run_dir, at), {
            "step": at, "model": model.state_dict(), "optimizers": {"adamw": opt.state_dict()},
            "schedule": {"lr": cfg.optim.lr, "warmup_steps": cfg.optim.warmup_steps, "total_steps": cfg.max_steps,
                         "min_lr_ratio": cfg.optim.min_lr_ratio},
            "rng": ckpt.rng_state(), "sampler": data.train.state_dict(), "recent_losses": list(recent),
            "val_loss": last_val, "wall_time_s": wall_before + time.perf_counter() - started, "config": full_cfg,
        })
        if cfg.keep_checkpoints > 0:
            for _, old in ckpt.list_checkpoints(run_dir)[:-cfg.keep_checkpoints]:
                old.unlink(missing_ok=True)

    def validate(at: int) -> float | None:
        if data.val is None:
            return None
        v = evaluate_loss(fwd_model, data.val(), device, dtype)
        logger.log({"val/loss": v}, step=at)
        return v

    started, status = time.perf_counter(), "running"
    bar = progress(total=stop, desc="train-gpt", initial=step) if cfg.progress else None
    busy, tokens_since = 0.0, 0  # training seconds and tokens since the last log (eval/saving excluded)
    train_model.train()
    try:
        while step < stop:
            t_step = time.perf_counter()
            lr = lr_at(step + 1, cfg.optim.lr, cfg.optim.warmup_steps, cfg.max_steps, cfg.optim.min_lr_ratio)
            set_lr(opt, lr)
            loss_sum = torch.zeros((), device=device)
            for micro in range(accum):
                x, y = data.train.next_batch()
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                sync = micro == accum - 1 or not e.distributed
                with contextlib.nullcontext() if sync else train_model.no_sync():
                    with dist_.autocast(device, dtype):
                        loss = train_model(x, y)[1]  # logits freed before backward
                    (loss / accum).backward()
                loss_sum += loss.detach()
            max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            step_loss = dist_.all_reduce_(loss_sum / accum) / e.world_size
            check_finite(step + 1, loss=step_loss, grad_norm=grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            recent.append(float(step_loss))  # float() syncs, so the step time below is real
            tokens_since += tokens_per_step
            busy += time.perf_counter() - t_step
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(step_loss):.4f}", refresh=False)
            if step % cfg.log_every == 0 or step == stop:
                tps = tokens_since / max(busy, 1e-9)
                logger.log({"train/loss": float(step_loss), "train/lr": lr, "train/grad_norm": float(grad_norm),
                            "perf/tokens_per_s": tps, "perf/mfu": mfu(tps, flops_token, cfg.mfu_peak_tflops,
                                                                      e.world_size),
                            "tokens": step * tokens_per_step}, step=step)
                busy, tokens_since = 0.0, 0
            if step % cfg.eval_every == 0 or step == stop:
                last_val = validate(step)
            if step % cfg.checkpoint_every == 0 or step == stop:
                save(step)
        status = "finished" if step >= cfg.max_steps else "stopped"
    except TrainingDiverged:
        status = "diverged"
        raise
    finally:
        if bar is not None:
            bar.close()
        logger.close()
        if status in ("finished", "diverged", "stopped"):
            summary = _summary(cfg, model_cfg, scaling, data, step, recent, last_val, status,
                               wall_before + time.perf_counter() - started, n_params, flops_token)
            if e.is_main:
                ckpt.atomic_write_bytes(summary_path, (json.dumps(summary, indent=2) + "\n").encode())
    if status == "stopped":
        dist_.print0(f"stopped at step {step} (stop_after); resume with resume=true")
    dist_.print0(f"done: {json.dumps(summary)}")
    return summary


def left_floor(loss: float | None, floor: float | None, margin: float) -> bool | None:
    """Did a run get clearly below the unigram-entropy floor? None when either number is unknown."""
    if loss is None or floor is None or not math.isfinite(loss):
        return None if floor is None else False
    return loss < floor - margin


def _summary(cfg: TrainGPTConfig, model_cfg: GPTConfig, scaling: ScalingConfig, data: Data, step: int,
             recent: collections.deque, val_loss: float | None, status: str, wall: float, n_params: int,
             flops_token: float) -> dict[str, Any]:
    train_loss = float(np.mean(recent)) if recent else None
    # The paper's surrogate: validation loss where there is one, else the trailing train loss.
    loss_for_floor = val_loss if val_loss is not None else train_loss
    return {
        "status": status,
        "steps": step,
        "tokens": step * cfg.global_batch_tokens,
        "final_train_loss": train_loss,
        "train_loss_window": len(recent),
        "final_val_loss": val_loss,
        "unigram_entropy": data.unigram_entropy,
        "left_unigram_floor": (False if status == "diverged"
                               else left_floor(loss_for_floor, data.unigram_entropy, cfg.floor_margin)),
        "wall_time_s": wall,
        "params": n_params,
        "flops_per_token": flops_token,
        "model": {"hidden_size": model_cfg.hidden_size, "num_blocks": model_cfg.num_blocks,
                  "num_rounds": model_cfg.num_rounds},
        "scaling": {"scheme": scaling.scheme, "p": scaling.p},
        "seed": cfg.seed,
        "code_version": ckpt.code_version(),
    }
