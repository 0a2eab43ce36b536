"""Every trainer's typed config: the sections shared by `train` and `train-gpt` (`RunConfig`,
`LoopConfig`, `OptimConfig`, `CheckpointConfig`, `EvalConfig`, `DiagnosticsConfig`: one set of names
for every trainer), `train`'s (`TrainConfig`, with `init_from`'s `AdaptConfig`) and `train-gpt`'s
(`TrainGPTConfig`); the sweep extends the last (`training.sweep.SweepConfig`).

Torch-free on purpose: the CLI resolves these as the subcommands' schemas, so `train --help` (and
every other `--help`) starts without importing torch. The trainers that run them are
`training.loop`, `training.reasoner`, `training.lm` and `training.adapt`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from hrm_deeploop.models.model_config import GPTConfig, HRMConfig, TRMConfig, URMConfig, model_config
from hrm_deeploop.models.rounds import DepthConfig
from hrm_deeploop.models.scaling import ScalingConfig, model_depth
from hrm_deeploop.typed_config import (
    at_least,
    check,
    device_name,
    in_range,
    one_of,
    optional_at_least,
    positive,
    typed,
)

# ---- the shared config sections ------------------------------------------------------------------


@dataclass
class LoopConfig:
    """`train.*`: length and cadence of the loop."""

    max_steps: int | None = None  # optimiser steps, also the schedule's length
    stop_after: int | None = None  # stop (with a checkpoint) at this step; resume=true continues
    log_every: int = 1  # steps between metrics-log rows
    compile: bool = False  # torch.compile the model
    progress: bool = True  # a progress bar on the console
    trailing_steps: int = 50  # train-loss window for summary.json (the paper's trailing-50 mean)
    time_budget: float | None = None  # minutes of wall clock (from the run's start): checkpoint and stop then
    fsdp: bool = False  # under torchrun: shard parameters, gradients and optimiser state with FSDP2 instead of DDP

    def __post_init__(self) -> None:
        if self.time_budget is not None:
            check(isinstance(self.time_budget, (int, float)) and self.time_budget >= 0, "train.time_budget",
                  self.time_budget, ">= 0 (minutes)")
        optional_at_least("train.max_steps", self.max_steps, 1)
        optional_at_least("train.stop_after", self.stop_after, 1)
        at_least("train.log_every", self.log_every, 1)
        at_least("train.trailing_steps", self.trailing_steps, 1)


@dataclass
class OptimConfig:
    """`optim.*`: the dense optimiser and its schedule (linear warmup, then cosine to min_lr_ratio * lr)."""

    lr: float = 1e-4  # peak learning rate, reached after warmup_steps
    warmup_steps: int = 2000  # linear warmup from 0 to lr
    min_lr_ratio: float = 1.0  # the cosine decay's floor as a fraction of lr (1.0: constant after warmup)
    weight_decay: float = 0.1
    beta1: float = 0.9  # Adam's first-moment decay
    beta2: float = 0.95  # Adam's second-moment decay

    def __post_init__(self) -> None:
        positive("optim.lr", self.lr)
        at_least("optim.warmup_steps", self.warmup_steps, 0)
        in_range("optim.min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        at_least("optim.weight_decay", self.weight_decay, 0.0)
        for key in ("beta1", "beta2"):
            v = getattr(self, key)
            check(isinstance(v, (int, float)) and 0.0 <= v < 1.0, f"optim.{key}", v, "in [0, 1)")


@dataclass
class CheckpointConfig:
    """`checkpoint.*`: when full train-state files are written and how many are kept."""

    every: int = 0  # steps between checkpoints; 0: only at the end (and after evaluations with at_eval)
    at_eval: bool = False  # also after each evaluation
    keep: int = 0  # newest checkpoints kept; 0 keeps all

    def __post_init__(self) -> None:
        at_least("checkpoint.every", self.every, 0)
        at_least("checkpoint.keep", self.keep, 0)


@dataclass
class EvalConfig:
    """`eval.*`: evaluation during training."""

    every: int = 0  # steps between evaluations; 0: only at the end (when the task has evaluation data)

    def __post_init__(self) -> None:
        at_least("eval.every", self.every, 0)


@dataclass
class DiagnosticsConfig:
    """`diagnostics.*`: measurements that cost extra passes, off by default."""

    kappa_every: int = 0  # steps between visit-alignment measurements (training/kappa.py); 0: never
    kappa_probes: int = 2  # random output directions per measurement (the sensitivity estimate)

    def __post_init__(self) -> None:
        at_least("diagnostics.kappa_every", self.kappa_every, 0)
        at_least("diagnostics.kappa_probes", self.kappa_probes, 1)


LOGGERS = ("wandb", "none")


@dataclass
class RunConfig:
    """Settings every trainer has: model, scaling, run folder, seed, device, logging."""

    model: Any = None  # a model config (models.config), chosen by `model=NAME`
    scaling: ScalingConfig = field(default_factory=ScalingConfig)  # the residual scaling, chosen by `scaling=NAME`
    output_dir: str | None = None  # run folder: config.yaml, checkpoints/, metrics.jsonl/csv, summary.json
    seed: int = 0  # seeds the weights' initialisation and the data order
    resume: bool = False  # continue from the latest checkpoint in output_dir
    device: str = "auto"  # auto | cpu | cuda[:N]
    logger: str = "wandb"  # wandb (offline without an API key) | none
    project: str = "hrm-deeploop"  # the wandb project
    run_name: str | None = None  # the wandb run name (default: the output folder's name)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)

    def inputs(self) -> list[str | None]:
        """The files and folders this run reads (an output_dir there, or around them, is refused)."""
        return []

    def __post_init__(self) -> None:
        one_of("logger", self.logger, LOGGERS)
        at_least("seed", self.seed, 0)
        device_name("device", self.device)
        if isinstance(self.scaling, dict):
            self.scaling = typed(self.scaling, ScalingConfig, "scaling.")

    def check_fsdp(self, train: LoopConfig) -> None:
        """train.fsdp=true: refuse the combinations not built or tested with FSDP2 (training/fsdp.py)."""
        if train.fsdp:
            check(not train.compile, "train.compile", train.compile, "false with train.fsdp=true")
            check(self.diagnostics.kappa_every == 0, "diagnostics.kappa_every", self.diagnostics.kappa_every,
                  "0 with train.fsdp=true")


# ---- train: init_from (training/adapt.py) -------------------------------------------------------

NEW_ROWS = ("mean", "zeros")
OLD_ROWS = ("drop", "keep")
TRAINS = ("all", "embeddings", "embeddings_then_all")


@dataclass
class AdaptConfig:
    """`adapt.*`: how `init_from=CKPT` starts the run (hrm_deeploop/training/adapt.py)."""

    new_rows: str = "mean"  # mean (of the trained rows) | zeros: identifiers the checkpoint has no row for
    old_rows: str = "drop"  # drop | keep: the checkpoint's rows of identifiers not in the new dataset
    trains: str = "all"  # all | embeddings | embeddings_then_all
    embedding_steps: int = 0  # embeddings_then_all: steps that train the table only
    optimizer_state: bool = False  # carry the checkpoint's Adam state into the run
    identifiers: str | None = None  # the checkpoint's identifiers.json (default: its own record)

    def __post_init__(self) -> None:
        one_of("adapt.new_rows", self.new_rows, NEW_ROWS)
        one_of("adapt.old_rows", self.old_rows, OLD_ROWS)
        one_of("adapt.trains", self.trains, TRAINS)
        at_least("adapt.embedding_steps", self.embedding_steps, 0)
        check(self.trains != "embeddings_then_all" or self.embedding_steps > 0, "adapt.embedding_steps",
              self.embedding_steps, "> 0 with adapt.trains=embeddings_then_all")


# ---- train: HRM, TRM, URM (training/reasoner.py) -------------------------------------------------

REASONERS = (HRMConfig, TRMConfig, URMConfig)


@dataclass
class ReasonerLoop(LoopConfig):
    global_batch_size: int = 768  # examples per optimiser step, over every rank
    max_steps: int | None = None  # None: int(epochs * total_groups * mean_puzzle_examples / global_batch_size)
    epochs: int = 100000  # the run's length in epochs when max_steps is None
    epochs_per_iter: int | None = None  # sampler iteration length in epochs; None: eval.interval_epochs or 1
    grad_accum: int = 1  # micro-batches per rank per step
    ema: bool = False  # keep an exponential moving average of the weights for evaluation (TRM's setups)
    ema_rate: float = 0.999  # the weight average's decay per step

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("train.global_batch_size", self.global_batch_size, 1)
        check(isinstance(self.ema_rate, float) and 0.0 < self.ema_rate < 1.0, "train.ema_rate", self.ema_rate,
              "in (0, 1)")
        at_least("train.epochs", self.epochs, 1)
        optional_at_least("train.epochs_per_iter", self.epochs_per_iter, 1)
        at_least("train.grad_accum", self.grad_accum, 1)


DENSE_OPTIMIZERS = ("adam_atan2", "muon")  # training/optim.py make_dense


@dataclass
class ReasonerOptim(OptimConfig):
    lr: float = 1e-4  # peak learning rate of the network, reached after warmup_steps
    min_lr_ratio: float = 1.0  # 1.0 = constant after warmup (HRM's ARC default)
    puzzle_emb_lr: float = 1e-2  # the puzzle-embedding table's rate (sign SGD)
    puzzle_emb_weight_decay: float = 0.1  # the puzzle-embedding table's weight decay
    name: str = "adam_atan2"  # adam_atan2 (every parameter) | muon (Muon on the matrices, AdamW on the rest: URM ARC-AGI-2)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("optim.puzzle_emb_lr", self.puzzle_emb_lr)
        at_least("optim.puzzle_emb_weight_decay", self.puzzle_emb_weight_decay, 0.0)
        one_of("optim.name", self.name, DENSE_OPTIMIZERS)


@dataclass
class ReasonerCheckpoint(CheckpointConfig):
    at_eval: bool = True  # HRM's checkpoint_every_eval


@dataclass
class ReasonerEval(EvalConfig):
    every: int = 0  # steps between evaluations; 0: never (`train` evaluates only with every > 0 or interval_epochs)
    interval_epochs: int | None = None  # or evaluate every this many epochs (HRM: 10000); sets `every`
    global_batch_size: int | None = None  # None: train.global_batch_size
    max_batches: int | None = None  # cap (tests and quick looks)

    def __post_init__(self) -> None:
        super().__post_init__()
        optional_at_least("eval.interval_epochs", self.interval_epochs, 1)
        optional_at_least("eval.global_batch_size", self.global_batch_size, 1)
        optional_at_least("eval.max_batches", self.max_batches, 1)


@dataclass
class TrainConfig(RunConfig):
    """`hrm-deeploop train`: HRM, TRM (model=trm) or URM (model=urm) on a dataset built by build-arc (or any puzzle builder).

    Every key is typed; a misspelled key or an out-of-range value is a one-line error. Pick a paper
    setup with experiment=NAME (configs/experiment/)."""

    MODELS: ClassVar[tuple[type, ...]] = REASONERS  # the model configs it trains (`--help` lists only these)

    data_dir: str | None = None  # a dataset built by `hrm-deeploop build-arc` (train/ and test/ inside)
    train: ReasonerLoop = field(default_factory=ReasonerLoop)
    optim: ReasonerOptim = field(default_factory=ReasonerOptim)
    checkpoint: ReasonerCheckpoint = field(default_factory=ReasonerCheckpoint)
    eval: ReasonerEval = field(default_factory=ReasonerEval)
    init_from: str | None = None  # start from this checkpoint (ours, or an official HRM/TRM one): training/adapt.py
    adapt: AdaptConfig = field(default_factory=AdaptConfig)  # how init_from starts: table rows, what trains

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model = HRMConfig() if self.model is None else model_config(self.model)
        check(isinstance(self.model, self.MODELS), "model.name", self.model.name,
              "a reasoner (hrm, trm, urm); the looped GPT trains with train-gpt, LoopViT with train-vit")
        model_depth(self.model, self.scaling)  # the depth convention fits the model (e.g. no per_module for TRM)
        self.check_fsdp(self.train)
        if self.train.fsdp:  # freezing the network would toggle requires_grad on sharded parameters
            check(self.adapt.trains == "all", "adapt.trains", self.adapt.trains, "all with train.fsdp=true")
        if self.optim.name == "muon":  # Newton-Schulz needs whole matrices; kappa needs Adam's diagonal preconditioner
            check(not self.train.fsdp, "train.fsdp", self.train.fsdp, "false with optim.name=muon")
            check(self.diagnostics.kappa_every == 0, "diagnostics.kappa_every", self.diagnostics.kappa_every,
                  "0 with optim.name=muon")

    def inputs(self) -> list[str | None]:
        return [self.data_dir, self.init_from]

    @property
    def evaluates(self) -> bool:
        return self.eval.interval_epochs is not None or self.eval.every > 0


# ---- train-gpt: the looped GPT (training/lm.py) --------------------------------------------------


@dataclass
class DataConfig:
    """`data.*`: the token shards (prepare-text output) and how much of them each evaluation reads."""

    train: str = ""  # shard glob, folder of .bin shards, or file (prepare-text output)
    val: str = ""  # held-out shards; empty = no validation
    tokenizer_id: str | None = "gpt2"  # checked against the shards' meta.json; null skips that check
    val_batches: int = 20  # max validation batches per rank per evaluation (micro_batch_size each)
    unigram_tokens: int = 20_000_000  # training tokens read to compute the unigram-entropy floor

    def __post_init__(self) -> None:
        at_least("data.val_batches", self.val_batches, 1)
        at_least("data.unigram_tokens", self.unigram_tokens, 0)


@dataclass
class LMLoop(LoopConfig):
    max_steps: int | None = 100_000
    global_batch_tokens: int = 480 * 1024  # tokens per optimiser step, over every rank (gradient accumulation fills it)
    micro_batch_size: int = 12  # sequences per rank per forward/backward; 480 = 12 x 40 divides on 1, 2, 4, 8 GPUs
    log_every: int = 10  # steps between metrics-log rows
    mfu_peak_tflops: float = 989.0  # per device; H200/H100 SXM dense bf16

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.max_steps is not None, "train.max_steps", self.max_steps, "set (the schedule's length)")
        at_least("train.global_batch_tokens", self.global_batch_tokens, 1)
        at_least("train.micro_batch_size", self.micro_batch_size, 1)
        positive("train.mfu_peak_tflops", self.mfu_peak_tflops)


@dataclass
class LMOptim(OptimConfig):
    lr: float = 6e-4  # peak learning rate, reached after warmup_steps
    min_lr_ratio: float = 0.1  # cosine floor as a fraction of lr
    eps: float = 1e-8  # AdamW's epsilon
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still logged)
    decay_embeddings: bool = False  # apply weight decay to the embeddings too

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("optim.eps", self.eps)
        at_least("optim.grad_clip", self.grad_clip, 0.0)


@dataclass
class LMCheckpoint(CheckpointConfig):
    every: int = 5000
    keep: int = 3


@dataclass
class LMEval(EvalConfig):
    every: int = 1000  # steps between validation losses (and always at the end)
    floor_margin: float = 0.1  # nats below the unigram entropy a run must reach to count as trained

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("eval.floor_margin", self.floor_margin, 0.0)


@dataclass
class TrainGPTConfig(RunConfig):
    """`hrm-deeploop train-gpt`: the looped GPT on token shards (prepare-text output).

    Paper setup (GPT-2 small, section 5.1): model=gpt2_small_looped model.num_rounds={1,3,5,7}
    scaling={baseline,deeploop}, 100K steps x 480 x 1024 tokens, context 1024."""

    MODELS: ClassVar[tuple[type, ...]] = (GPTConfig,)  # the model configs it trains (`--help` lists only these)

    output_dir: str | None = "runs/gpt"
    data: DataConfig = field(default_factory=DataConfig)
    train: LMLoop = field(default_factory=LMLoop)
    optim: LMOptim = field(default_factory=LMOptim)
    checkpoint: LMCheckpoint = field(default_factory=LMCheckpoint)
    eval: LMEval = field(default_factory=LMEval)
    depth: DepthConfig = field(default_factory=DepthConfig)  # R per step, truncated backprop (models/rounds.py)
    dtype: str = "bfloat16"  # autocast dtype on CUDA (CPU runs in float32)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model = GPTConfig() if self.model is None else model_config(self.model)
        check(isinstance(self.model, self.MODELS), "model.name", self.model.name,
              "gpt (train-gpt trains the looped GPT; reasoners train with `train`)")
        one_of("dtype", self.dtype, ("bfloat16", "float16", "float32"))
        self.check_fsdp(self.train)
        per_micro = self.train.micro_batch_size * self.model.seq_len
        check(self.train.global_batch_tokens % per_micro == 0, "train.global_batch_tokens",
              self.train.global_batch_tokens,
              f"a multiple of train.micro_batch_size x model.seq_len = {per_micro} (x the number of ranks)")


    def inputs(self) -> list[str | None]:
        return [self.data.train, self.data.val]
