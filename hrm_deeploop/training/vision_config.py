"""`hrm-deeploop train-vit`'s typed config: LoopViT on canvases of a built ARC dataset
(`training/vision.py`). Torch-free, like every trainer's config (`training.config`), so
`train-vit --help` starts without torch. Defaults: the official offline script's (AdamW lr 3e-4,
betas (0.9, 0.999), no weight decay, clip 1.0, linear warm-up then cosine to 0 stepped as its scheduler is,
batch 32 per GPU, gate regularisers 5e-4 / 1e-3, canvas 64, evaluation at scale 2 without translation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hrm_deeploop.models.loopvit_config import LoopViTConfig
from hrm_deeploop.models.model_config import model_config
from hrm_deeploop.training.train_config import (
    CheckpointConfig,
    EvalConfig,
    LoopConfig,
    OptimConfig,
    RunConfig,
)
from hrm_deeploop.typed_config import at_least, check, one_of, optional_at_least, positive

COMPILE_SCOPES = ("block", "model")
SCHEDULES = ("official", "hrm")  # optim.schedule (VisionOptim)
# the gate regularisers' weights of the shipped script/offline_train_loop_VARC_ViT.sh (and of the Large run's
# wandb config); the official parser's defaults are the other way round (1e-3 / 5e-4)
SCRIPT_PENALTIES = {"gate_entropy_weight": 5e-4, "loop_penalty_weight": 1e-3}
TRAIN_DTYPES = ("bfloat16", "float32")


@dataclass
class VisionLoop(LoopConfig):
    global_batch_size: int = 32
    max_steps: int | None = 1000
    ema: bool = False  # an exponential moving average of the weights for evaluation
    ema_rate: float = 0.999
    epochs_per_iter: int = 1  # sampler iteration length in epochs (one task's views fill a batch: ttt)
    compile_scope: str = "block"  # with train.compile: block (one graph for every block and loop) | model (the unrolled K x T)

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("train.global_batch_size", self.global_batch_size, 1)
        one_of("train.compile_scope", self.compile_scope, COMPILE_SCOPES)
        at_least("train.epochs_per_iter", self.epochs_per_iter, 1)
        check(self.max_steps is not None, "train.max_steps", self.max_steps, "set (the schedule's length)")
        check(isinstance(self.ema_rate, float) and 0.0 < self.ema_rate < 1.0, "train.ema_rate", self.ema_rate,
              "in (0, 1)")


@dataclass
class VisionOptim(OptimConfig):
    lr: float = 3e-4
    warmup_steps: int = 100
    min_lr_ratio: float = 0.0  # cosine to 0, as the official get_cosine_schedule_with_warmup
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0  # max gradient norm (0: no clipping)
    # the gate regularisers' weights; null: the shipped script's (SCRIPT_PENALTIES), or with init_from= an
    # official file the values saved in it (its --gate-entropy-weight / --loop-penalty-weight)
    gate_entropy_weight: float | None = None  # null: the script's 5e-4, or an official init_from file's saved one
    loop_penalty_weight: float | None = None  # null: the script's 1e-3, or an official init_from file's saved one
    # official: LoopViT's get_cosine_schedule_with_warmup stepped after each update (update k at lambda(k - 1):
    # the first at lr 0); hrm: the reasoners' training.optim.lr_at (update k at lambda(k): one update ahead)
    schedule: str = "official"  # official: update k at lambda(k - 1), the first at lr 0; hrm: lr_at, one ahead

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("optim.grad_clip", self.grad_clip, 0.0)
        for key in SCRIPT_PENALTIES:
            optional_at_least(f"optim.{key}", getattr(self, key), 0.0)
        one_of("optim.schedule", self.schedule, SCHEDULES)


@dataclass
class CanvasConfig:
    """`canvas.*`: how grids become canvases (data/canvas.py); the side is model.image_size."""

    resolution: bool = True  # random integer upscale in training
    translation: bool = True  # random shared corner in training
    eval_scale: int = 2  # evaluation: this fixed scale at corner (1, 1), as the official validation

    def __post_init__(self) -> None:
        at_least("canvas.eval_scale", self.eval_scale, 1)


@dataclass
class VisionEval(EvalConfig):
    global_batch_size: int | None = None  # None: train.global_batch_size
    max_batches: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        optional_at_least("eval.global_batch_size", self.global_batch_size, 1)
        optional_at_least("eval.max_batches", self.max_batches, 1)


@dataclass
class TrainViTConfig(RunConfig):
    """`hrm-deeploop train-vit`: LoopViT (model=loopvit) on a dataset built by build-arc, each
    example drawn as a canvas view (data/canvas.py), one task token per puzzle identifier."""

    data_dir: str | None = None  # a dataset built by `hrm-deeploop build-arc` (train/ and test/ inside)
    # start from these weights: an official LoopViT .pt, or a train-vit run folder (its latest checkpoint), step
    # file, exported folder or hf://OWNER/NAME
    init_from: str | None = None  # an official LoopViT .pt, a train-vit run folder, step file, export or hf://
    dtype: str = "bfloat16"  # the training step's autocast dtype on CUDA (CPU runs, and evaluation, in float32)
    train: VisionLoop = field(default_factory=VisionLoop)
    optim: VisionOptim = field(default_factory=VisionOptim)
    canvas: CanvasConfig = field(default_factory=CanvasConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: VisionEval = field(default_factory=VisionEval)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model = LoopViTConfig() if self.model is None else model_config(self.model)
        check(isinstance(self.model, LoopViTConfig), "model.name", self.model.name,
              "loopvit (the reasoners train with train, the looped GPT with train-gpt)")
        self.model.depth(self.scaling)  # the scheme fits the block
        positive("optim.lr", self.optim.lr)
        check(self.dtype in TRAIN_DTYPES, "dtype", self.dtype,
              "bfloat16 or float32 (float16 needs a loss scaler, which train-vit does not have)")
        check(self.diagnostics.kappa_every == 0, "diagnostics.kappa_every", self.diagnostics.kappa_every,
              "0 for train-vit (visit alignment is measured for the reasoners)")
        self.check_fsdp(self.train)

    def inputs(self) -> list[str | None]:
        return [self.data_dir, self.init_from]

    @property
    def evaluates(self) -> bool:
        return True
