"""`hrm-deeploop train`: HRM on a built ARC dataset (reference spec 5), baseline or DeepLoop.

Each step is one ACT segment for every carry slot (deep supervision): the carry persists across
batches, halted slots load new rows, and every segment gets its own loss and optimiser step.
Optimisers: SparseSignSGD on the puzzle table (puzzle_emb_lr, puzzle_emb_weight_decay), then
AdamATan2 over every parameter; both on linear warmup + cosine to lr_min_ratio. The loss is
divided by the global batch size.

Single process on CPU or one GPU by default; under torchrun, DistributedDataParallel (gloo on
CPU, NCCL on CUDA) with rank-sharded batches. `train.grad_accum` splits each rank's rows into
micro-batches (each with its own carry) so a global batch of 768 fits any GPU count.

Checkpoints (`<output_dir>/checkpoints/step_N.pt`, atomic) hold the full train state: model
(with the puzzle table), both optimisers, schedule, step, RNG states (torch and the exploration
generator), sampler position, the ACT carry, resolved config and code version. Ranks > 0 write
their own carry and generator to `step_N.rank<r>.pt` first; rank 0 writes the main file last, so a
checkpoint is complete once its main file exists. `resume=true` continues from the latest one;
on CPU the result equals an uninterrupted run bit for bit.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import runtime as D
from hrm_deeploop.config import to_dict, typed
from hrm_deeploop.data.puzzles import TrainSampler, meta_value, sequential_batches, steps_per_epoch
from hrm_deeploop.data import puzzles as hdata
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.models.hrm import HRM, Carry, HRMConfig, carry_from_state, carry_state, carry_to
from hrm_deeploop.models.losses import act_loss
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.optim import SparseSignSGD, lr_at, make_adam_atan2, set_lr
from hrm_deeploop.training.runlog import RunLogger, check_finite, progress

METRIC_KEYS = ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps",
               "lm_loss", "q_halt_loss", "q_continue_loss")


@dataclass
class LoopConfig:
    global_batch_size: int = 768
    max_steps: int | None = None  # None: int(epochs * total_groups * mean_puzzle_examples / global_batch_size)
    epochs: int = 100000
    epochs_per_iter: int | None = None  # sampler iteration length in epochs; None: eval.interval_epochs or 1
    grad_accum: int = 1  # micro-batches per rank per step
    compile: bool = False
    log_every: int = 1
    progress: bool = True


@dataclass
class OptimConfig:
    lr: float = 1e-4
    lr_min_ratio: float = 1.0
    lr_warmup_steps: int = 2000
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    puzzle_emb_lr: float = 1e-2
    puzzle_emb_weight_decay: float = 0.1


@dataclass
class CheckpointConfig:
    every: int = 0  # steps between checkpoints (0: only at evaluations and at the end)
    at_eval: bool = True  # also after each evaluation (HRM's checkpoint_every_eval)


@dataclass
class EvalConfig:
    interval_epochs: int | None = None  # evaluate on the test split every this many epochs (HRM: 10000)
    every_steps: int | None = None  # or every this many steps
    global_batch_size: int | None = None  # None: train.global_batch_size
    max_batches: int | None = None  # cap (tests and quick looks)


@dataclass
class TrainConfig:
    data_dir: str | None = None
    output_dir: str | None = None
    seed: int = 0
    resume: bool = False
    logger: str = "wandb"  # wandb (offline without an API key) | none
    device: str = "auto"  # auto | cpu | cuda
    project: str = "hrm-deeploop"
    run_name: str | None = None
    train: LoopConfig = field(default_factory=LoopConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.logger not in ("wandb", "none"):
            raise ConfigError(f"logger='{self.logger}' must be 'wandb' or 'none'")
        if self.train.global_batch_size < 1:
            raise ConfigError("train.global_batch_size must be >= 1")
        if self.train.grad_accum < 1:
            raise ConfigError("train.grad_accum must be >= 1")


def parse(cfg: Any) -> tuple[TrainConfig, HRMConfig, ScalingConfig]:
    """DictConfig -> (TrainConfig, HRMConfig, ScalingConfig); unknown keys raise naming the key."""
    from omegaconf import OmegaConf

    from hrm_deeploop.models.registry import model_config

    raw = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else dict(cfg)
    model = model_config(raw.get("model"))
    if not isinstance(model, HRMConfig):
        raise ConfigError(f"hrm-deeploop train trains HRM; model.name='{model.name}' (use train-gpt)")
    scaling = typed(raw.get("scaling"), ScalingConfig, "scaling.")
    rest = {k: v for k, v in raw.items() if k not in ("model", "scaling")}
    return typed(rest, TrainConfig), model, scaling


# ---- dataset checks ----------------------------------------------------------------------------

def open_dataset(data_dir: str | None, split: str) -> Any:
    if not data_dir:
        raise ConfigError("data_dir is not set (data_dir=PATH to a dataset built by hrm-deeploop build-arc)")
    path = Path(data_dir)
    if not path.is_dir():
        raise UserError(f"data_dir '{path}' does not exist")
    try:
        return hdata.open_split(path, split)
    except UserError:
        raise
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot read dataset split '{path / split}': {e}") from None


DATASET_KEYS = ("vocab_size", "seq_len", "num_puzzle_identifiers")


def fit_to_dataset(model: HRMConfig, split: Any, where: str) -> HRMConfig:
    """Fill vocab_size / seq_len / num_puzzle_identifiers from the dataset; a value the user set
    explicitly (not the default) that disagrees with the dataset is an error."""
    defaults = HRMConfig()
    values = {}
    for key in DATASET_KEYS:
        want, have = int(meta_value(split, key)), getattr(model, key)
        if have != getattr(defaults, key) and have != want:
            raise UserError(f"model.{key}={have} does not match the dataset '{where}' ({key}={want})")
        values[key] = want
    return replace(model, **values)


def check_matches(model: HRMConfig, split: Any, where: str, what: str = "model") -> None:
    """The dataset must agree with a fixed model (a checkpoint's) on vocab, length and ids."""
    for key in DATASET_KEYS:
        want, have = int(meta_value(split, key)), getattr(model, key)
        if have != want:
            raise UserError(f"dataset '{where}' has {key}={want} but the {what} has {key}={have}")


# ---- the trainer --------------------------------------------------------------------------------

def split_batch(t: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    B = next(iter(t.values())).shape[0]
    if B % parts:
        raise UserError(f"the per-rank batch ({B} rows) is not divisible by train.grad_accum={parts}")
    n = B // parts
    return [{k: v[i * n:(i + 1) * n] for k, v in t.items()} for i in range(parts)]


class Trainer:
    """Model, optimisers, sampler, carry and step: everything a checkpoint holds."""

    def __init__(self, cfg: TrainConfig, model_cfg: HRMConfig, scaling: ScalingConfig, env: D.Env,
                 train_split: Any, total_steps: int):
        self.cfg, self.env, self.total_steps = cfg, env, total_steps
        self.dtype = D.compute_dtype(model_cfg.forward_dtype, env.device)
        torch.manual_seed(cfg.seed)  # the same init on every rank (DDP also syncs at construction)
        self.model = HRM(model_cfg, scaling, self.dtype).to(env.device)
        self.model.train()
        self.ddp = D.wrap_ddp(self.model, env, sync_buffers=False)
        # Forward and ACT loss in one function, compiled together when train.compile is set (as HRM
        # compiles its loss head).
        self.forward_loss = torch.compile(self._forward_loss) if cfg.train.compile else self._forward_loss
        o = cfg.optim
        self.sparse = (SparseSignSGD(self.model.puzzle_emb.weights, o.puzzle_emb_lr, o.puzzle_emb_weight_decay)
                       if self.model.puzzle_emb is not None else None)
        self.adam = make_adam_atan2(self.model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2),
                                    weight_decay=o.weight_decay, device=env.device)
        epi = cfg.train.epochs_per_iter or cfg.eval.interval_epochs or 1
        self.sampler = TrainSampler(train_split, cfg.train.global_batch_size, cfg.seed, env.rank,
                                    env.world_size, epochs_per_iter=epi)
        # Exploration draws: an explicit generator per rank (never the global RNG).
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + env.rank)
        self.carries: list[Carry | None] = [None] * cfg.train.grad_accum
        self.step = 0

    # -- one optimiser step ---------------------------------------------------------------------

    def lrs(self, step: int) -> tuple[float, float]:
        o = self.cfg.optim
        return (lr_at(step, o.lr, o.lr_warmup_steps, self.total_steps, o.lr_min_ratio),
                lr_at(step, o.puzzle_emb_lr, o.lr_warmup_steps, self.total_steps, o.lr_min_ratio))

    def _forward_loss(self, carry: Carry, batch: dict[str, torch.Tensor], generator: torch.Generator
                      ) -> tuple[Carry, torch.Tensor, dict[str, torch.Tensor]]:
        carry, out = self.ddp(carry, batch, generator)
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
            sync = contextlib.nullcontext() if (a == A - 1 or not self.env.distributed) else self.ddp.no_sync()
            with sync:
                carry, loss, m = self.forward_loss(self.carries[a], mb, self.generator)
                # DDP averages over ranks; HRM sums the per-rank loss / global batch: scale by W.
                (loss * (W / G)).backward()
            self.carries[a] = carry
            sums += torch.stack([m[k].to(torch.float64) for k in METRIC_KEYS])
        return sums

    def train_step(self, tensors: dict[str, torch.Tensor]) -> dict[str, float]:
        self.step += 1
        lr, lr_puzzle = self.lrs(self.step)
        set_lr(self.adam, lr)
        sums = self.forward_backward(tensors)
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        grad_sq = torch.stack(torch._foreach_norm(grads)).double().square().sum()  # one fused kernel per dtype
        puzzle = self.model.puzzle_emb.take_grads() if self.sparse is not None else None
        # The puzzle-row grads are local to each rank (SignSGD gathers them): reduce their norm.
        puzzle_sq = puzzle[1].double().square().sum() if puzzle is not None else torch.zeros((), dtype=torch.float64)
        sums = torch.cat([sums, puzzle_sq.to(sums.device).view(1)])
        D.all_reduce_(sums)  # dense grads are already identical on every rank (DDP): not reduced
        *sums, puzzle_sq, grad_sq = torch.cat([sums, grad_sq.to(sums.device).view(1)]).tolist()  # one host sync
        metrics = _normalise(dict(zip(METRIC_KEYS, sums)), self.cfg.train.global_batch_size)
        metrics["grad_norm"] = math.sqrt(grad_sq)
        metrics["puzzle_grad_norm"] = math.sqrt(puzzle_sq)
        check_finite(self.step, loss=metrics["loss"], grad_norm=metrics["grad_norm"],
                     puzzle_grad_norm=metrics["puzzle_grad_norm"])
        if puzzle is not None:
            self.sparse.lr = lr_puzzle
            self.sparse.step(*puzzle)
        self.adam.step()
        self.adam.zero_grad(set_to_none=True)
        metrics["lr"] = lr
        return metrics

    # -- state --------------------------------------------------------------------------------------

    def local_state(self) -> dict[str, Any]:
        """Per-rank state: carries and the exploration generator."""
        return {"world_size": self.env.world_size, "grad_accum": self.cfg.train.grad_accum,
                "carries": [None if c is None else carry_state(carry_to(c, "cpu")) for c in self.carries],
                "generator": self.generator.get_state()}

    def load_local_state(self, state: dict[str, Any] | None) -> None:
        if state is None or state["world_size"] != self.env.world_size or state["grad_accum"] != self.cfg.train.grad_accum:
            D.print0("resume: world size or grad_accum changed; the ACT carry restarts (all slots halted)")
            return
        self.carries = [None if c is None else carry_to(carry_from_state(c), self.env.device) for c in state["carries"]]
        self.generator.set_state(state["generator"])

    def state(self, config: dict[str, Any]) -> dict[str, Any]:
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizers": {"adam": self.adam.state_dict(),
                           "sparse": self.sparse.state_dict() if self.sparse is not None else None},
            "schedule": {"step": self.step, "total_steps": self.total_steps,
                         "warmup_steps": self.cfg.optim.lr_warmup_steps, "lr_min_ratio": self.cfg.optim.lr_min_ratio},
            "rng": ckpt.rng_state(),
            "sampler": self.sampler.state_dict(),
            "local": self.local_state(),
            "config": config,
        }

    def save(self, run_dir: Path, config: dict[str, Any]) -> Path:
        path = ckpt.step_path(run_dir, self.step)
        if self.env.rank > 0:
            ckpt.save(path.with_name(f"step_{self.step}.rank{self.env.rank}.pt"), {"local": self.local_state()})
        D.barrier()
        if self.env.is_main:
            ckpt.save(path, self.state(config))
        D.barrier()
        return path

    def load(self, path: Path) -> None:
        s = ckpt.load(path, map_location="cpu")
        for key in ("step", "model", "optimizers", "sampler", "local"):
            if key not in s:
                raise UserError(f"checkpoint '{path}' has no '{key}' (not a train-state file of hrm-deeploop train)")
        try:
            self.model.load_state_dict(s["model"])
        except RuntimeError as e:
            raise UserError(f"checkpoint '{path}' does not fit the model: {str(e).splitlines()[0]}") from None
        self.adam.load_state_dict(s["optimizers"]["adam"])
        if self.sparse is not None and s["optimizers"]["sparse"] is not None:
            self.sparse.load_state_dict(s["optimizers"]["sparse"])
        self.sampler.load_state_dict(s["sampler"])
        self.step = int(s["step"])
        ckpt.set_rng_state(s["rng"])
        local = s["local"]
        if self.env.rank > 0:
            side = path.with_name(f"step_{self.step}.rank{self.env.rank}.pt")
            local = ckpt.load(side)["local"] if side.is_file() else None
        self.load_local_state(local)


def _normalise(vals: dict[str, float], global_batch_size: int) -> dict[str, float]:
    """HRM's logging: *loss keys / global batch size, the rest / count (sequences halted now)."""
    count = max(vals["count"], 1.0)
    out = {k: (v / global_batch_size if k.endswith("loss") else v / count) for k, v in vals.items() if k != "count"}
    out["loss"] = (vals["lm_loss"] + 0.5 * (vals["q_halt_loss"] + vals["q_continue_loss"])) / global_batch_size
    out["count"] = vals["count"]
    return out


@torch.no_grad()
def evaluate(model: HRM, split: Any, env: D.Env, global_batch_size: int,
             max_batches: int | None = None) -> dict[str, float]:
    """Per-augmented-example metrics on a split after halt_max_steps segments (spec 4, eval)."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(len(METRIC_KEYS), dtype=torch.float64, device=env.device)
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        t = {k: v.to(env.device) for k, v in b.tensors.items()}
        carry, out = model.predict(t)
        _, m = act_loss(out, carry.data["labels"], carry.halted, carry.steps,
                        model.cfg.loss_type, model.cfg.stablemax_dtype)
        sums += torch.stack([m[k].to(torch.float64) for k in METRIC_KEYS])
    D.all_reduce_(sums)
    model.train(was_training)
    vals = dict(zip(METRIC_KEYS, sums.tolist()))
    count = max(vals["count"], 1.0)
    return {k: v / count for k, v in vals.items() if k != "count"} | {"count": vals["count"]}


# ---- entry point ----------------------------------------------------------------------------------

def run(cfg: Any) -> int:
    tcfg, model_cfg, scaling = parse(cfg)
    if not tcfg.output_dir:
        raise ConfigError("output_dir is not set (output_dir=PATH for checkpoints and logs)")
    env = D.setup(tcfg.device)
    try:
        return _run(tcfg, model_cfg, scaling, env)
    finally:
        D.teardown()


def _run(tcfg: TrainConfig, model_cfg: HRMConfig, scaling: ScalingConfig, env: D.Env) -> int:
    run_dir = Path(tcfg.output_dir)
    train_split = open_dataset(tcfg.data_dir, "train")
    model_cfg = fit_to_dataset(model_cfg, train_split, str(Path(tcfg.data_dir) / "train"))
    eval_on = tcfg.eval.interval_epochs is not None or tcfg.eval.every_steps is not None
    test_split = open_dataset(tcfg.data_dir, "test") if eval_on else None
    if test_split is not None:
        check_matches(model_cfg, test_split, str(Path(tcfg.data_dir) / "test"), what="train split")

    G = tcfg.train.global_batch_size
    spe = steps_per_epoch(train_split, G)
    total = tcfg.train.max_steps if tcfg.train.max_steps is not None else int(tcfg.train.epochs * spe)
    if total < 1:
        raise ConfigError(f"the run has {total} steps (train.max_steps or train.epochs too small for the dataset)")
    eval_every = tcfg.eval.every_steps or (max(1, int(tcfg.eval.interval_epochs * spe)) if tcfg.eval.interval_epochs else 0)

    config = {"model": to_dict(model_cfg), "scaling": to_dict(scaling), **to_dict(tcfg)}
    resume_from = None
    if env.is_main:
        resume_from = ckpt.prepare_run_dir(run_dir, config, tcfg.resume, must_match=("model", "scaling"))
    resume_from = D.broadcast_object(resume_from)

    trainer = Trainer(tcfg, model_cfg, scaling, env, train_split, total)
    if resume_from is not None:
        trainer.load(Path(resume_from))
        D.print0(f"resumed from {resume_from} at step {trainer.step}")
    model = trainer.model
    D.print0(f"HRM {model.num_params():,} parameters (puzzle table excluded), scaling={scaling.scheme}, "
             f"device={env.device}, world={env.world_size}, dtype={trainer.dtype}, steps={total}")

    logger = RunLogger(run_dir, tcfg.logger, tcfg.project, tcfg.run_name, config, resume=resume_from is not None,
                       resume_step=trainer.step)
    if trainer.step == 0:
        logger.log({"num_params": model.num_params()}, step=0)
    bar = progress(total, "train", initial=trainer.step) if tcfg.train.progress else None
    t0, start_step = time.perf_counter(), trainer.step
    saved_at = trainer.step if resume_from is not None else -1
    try:
        while trainer.step < total:
            batch = trainer.sampler.next_batch()
            m = trainer.train_step(batch.tensors)
            step = trainer.step
            rate = G * (step - start_step) / max(time.perf_counter() - t0, 1e-9)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{m['loss']:.4f}", acc=f"{m['accuracy']:.3f}",
                                exact=f"{m['exact_accuracy']:.3f}", steps=f"{m['steps']:.1f}", ex_s=f"{rate:.0f}")
            if step % tcfg.train.log_every == 0 or step == total:
                logger.log({f"train/{k}": v for k, v in m.items()} | {"train/examples_per_s": rate}, step=step)
            evaluated = False
            if eval_every and (step % eval_every == 0 or step == total):
                em = evaluate(model, test_split, env, tcfg.eval.global_batch_size or G, tcfg.eval.max_batches)
                logger.log({f"eval/{k}": v for k, v in em.items()}, step=step)
                D.print0(f"step {step}: eval exact_accuracy={em['exact_accuracy']:.4f} "
                         f"accuracy={em['accuracy']:.4f} over {int(em['count'])} examples")
                evaluated = True
            if (tcfg.checkpoint.every and step % tcfg.checkpoint.every == 0) or step == total \
                    or (evaluated and tcfg.checkpoint.at_eval):
                trainer.save(run_dir, config)
                saved_at = step
    finally:
        if bar is not None:
            bar.close()
        logger.close()
    D.print0(f"done: step {trainer.step}, last checkpoint {ckpt.step_path(run_dir, saved_at)}")
    return 0
