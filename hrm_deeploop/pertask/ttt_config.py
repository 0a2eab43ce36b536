"""`hrm-deeploop ttt`'s typed config (torch-free, so `ttt --help` starts without torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask.presets import PRESETS
from hrm_deeploop.training.cluster import check_settings
from hrm_deeploop.training.train_config import TRAINS
from hrm_deeploop.typed_config import at_least, one_of, optional_at_least

PROTOCOLS = ("strict", "transductive")
MAX_CANDIDATES = 10  # ranked candidates kept per test input (the vote's tasks.json default)
RULES = {"count-first": "", "poe": "_poe"}  # scoring rule -> suffix of its files (submission<suffix>.json, ...)
LAUNCHERS = ("local", "submitit")
VIEWS = ("build", "official")
STOP_FITS = ("exact", "stable")  # official.stop_fit


@dataclass
class PerTaskOfficial:
    """`official.*`, with `views=official` (a LoopViT checkpoint): the official test-time training
    (`test_time_train_ARC.py` and its script's flags; docs/per-task.md#the-official-loopvit-loop)."""

    epochs: int = 100  # epochs 0..epochs (101), the learning rate warmed up and cosine-decayed per epoch
    batch: int = 8
    lr: float = 3e-4
    runs: int = 2  # independent runs from the same start (--ttt-num-each)
    pool: bool = True  # vote over every run's predictions (VARC's analysis.py); false: the first run's only
    perms: int = 9  # colour permutations of each geometric view (9: 51 views)
    dropout: float | None = 0.1  # the TTT script's dropout; None: the checkpoint's
    copies: int = 0  # tasks' copies trained at once in one process (pertask/batched.py); 0: what fits; 1: one task per worker
    stop_after: int = 0  # early stop: a run ends once its fit held E epochs in a row; 0: off (official)
    stop_fit: str = "exact"  # the fit of a row: exact (its own logits) | stable (the grid of the epoch before)
    stop_share: float = 1.0  # of an epoch's training rows that must fit


@dataclass
class PerTaskSubmitit:
    """`submitit.*`: the shards as one submitit job array (SLURM where `sbatch` exists)."""

    cluster: str = "auto"  # auto (SLURM if sbatch exists, else local processes) | slurm | local | debug
    shards: int = 1  # jobs in the array; task i goes to shard i mod shards
    timeout_min: int = 240
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    partition: str | None = None
    array_parallelism: int = 64

    def __post_init__(self) -> None:
        check_settings(self)  # the one check of every submitit setting, shared with `study`


@dataclass
class PerTaskConfig:
    """`hrm-deeploop ttt`: for every task of `challenges`, the pretrained `checkpoint` trained on
    that task alone (a fresh embedding row for each of its views), then predicted and voted; the
    tasks' attempts merged into `output_dir/submission.json`."""

    checkpoint: str | None = None  # required: a run folder, step_N.pt, export or hf:// of a family ttt serves
    challenges: str | None = None  # required: ARC challenges JSON (task id -> {train, test})
    solutions: str = ""  # optional: *_solutions.json, to score the submission at the end
    output_dir: str = "runs/ttt"
    preset: str = "auto"  # auto | cpu | gpu: the sizes left unset below (pertask/presets.py); auto from the device and model
    num_aug: int | None = None  # augmented views of each task (dihedral x colour permutations, build-arc's); None: the preset's
    steps: int | None = None  # training steps per task (train.max_steps); None: the preset's
    batch: int | None = None  # examples per step (train.global_batch_size); None: the preset's
    lr: float | None = None  # optim.lr; None: the trainer's default
    trains: str = "all"  # adapt.trains: all | embeddings | embeddings_then_all
    train_overrides: list[str] = field(default_factory=list)  # more `train` key=value items
    eval_overrides: list[str] = field(default_factory=list)  # more `evaluate` key=value items
    workers: int = 1  # tasks at once on this machine (each its own process, one model each)
    threads: int = 0  # torch threads per worker; 0: CPU count // workers
    time_budget: float | None = None  # minutes for the whole set; each task gets a share of what is left
    min_task_minutes: float = 0.05  # a share below this: the task is not trained (fallback attempts)
    protocol: str = "strict"  # strict: refuse a task the checkpoint was trained on; transductive: allow, label
    launcher: str = "local"  # local (a process pool; under torchrun, rank r takes tasks r, r+W, ...) | submitit
    submitit: PerTaskSubmitit = field(default_factory=PerTaskSubmitit)
    leave_one_out: bool = False  # also train each task's pseudo-tasks: each demonstration once the target of the others
    passes: int | None = None  # LoopViT: random views (scale, corner) of every copy at prediction (official --num-attempts); None: the preset's
    poe: bool = True  # also rank each task's candidates by the product of experts (evaluate poe=true)
    ks: list[int] = field(default_factory=lambda: [1, 2, 10])  # pass@K reported with `solutions` (K <= 10)
    keep_work: bool = False  # keep each task's dataset, run and evaluation folders (checkpoints included)
    views: str = "build"  # build: build-arc's num_aug views and train/evaluate; official: LoopViT's official loop
    copies: int = 1  # views=build: tasks' copies trained at once in one process (pertask/build_lanes.py); 1: one at a time; 0: what fits
    official: PerTaskOfficial = field(default_factory=PerTaskOfficial)
    seed: int = 0
    device: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        optional_at_least("num_aug", self.num_aug, 0)
        optional_at_least("steps", self.steps, 1)
        optional_at_least("batch", self.batch, 1)
        at_least("workers", self.workers, 1)
        optional_at_least("passes", self.passes, 1)
        one_of("preset", self.preset, PRESETS)
        at_least("min_task_minutes", self.min_task_minutes, 0)
        at_least("threads", self.threads, 0)
        optional_at_least("time_budget", self.time_budget, 0)
        one_of("protocol", self.protocol, PROTOCOLS)
        one_of("launcher", self.launcher, LAUNCHERS)
        one_of("trains", self.trains, TRAINS)  # adapt.trains: one owner (training/train_config.py)
        at_least("submitit.shards", self.submitit.shards, 1)
        one_of("views", self.views, VIEWS)
        at_least("copies", self.copies, 0)
        o = self.official
        for key in ("epochs", "perms", "copies", "stop_after"):
            at_least(f"official.{key}", getattr(o, key), 0)
        for key in ("batch", "runs"):
            at_least(f"official.{key}", getattr(o, key), 1)
        at_least("official.lr", o.lr, 0)
        one_of("official.stop_fit", o.stop_fit, STOP_FITS)
        if not 0 <= o.stop_share <= 1:
            raise UserError(f"official.stop_share={o.stop_share}: a share of the training rows, from 0 to 1")
        if o.dropout is not None and not 0 <= o.dropout < 1:
            raise UserError(f"official.dropout={o.dropout}: from 0 to below 1, or null (the checkpoint's)")
        if self.views == "official" and (self.leave_one_out or self.train_overrides or self.eval_overrides):
            raise UserError("views=official runs the official loop: leave_one_out, train_overrides and "
                            "eval_overrides are for views=build (set official.* instead)")
        if not self.ks or any(not isinstance(k, int) or not 1 <= k <= MAX_CANDIDATES for k in self.ks):
            raise UserError(f"ks={self.ks}: each K from 1 to {MAX_CANDIDATES} (the candidates kept per test input)")
