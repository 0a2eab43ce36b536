"""One task's copy of the model trained, predicted and voted in this process through library calls
(`ttt views=build`, every family ttt serves): no `train` / `evaluate` command line per task.

What a process builds once (`Prepared`, at the worker's start, before any task's clock):

- the checkpoint, resolved and read once by the safe loader; its state is held in memory
  (`checkpoint.held`), so each task's trainer starts from it (its own copy of the tensors, copied
  into the trainer's model) without reading the file again;
- the trainer's typed config and `evaluate`'s, composed once from the very arguments the command
  route gives (`commands`, the user's overrides last, `init_from`'s inherited settings
  included); a task's copy of them differs only in its folders, its time share, its epochs per
  iteration and its evaluation batch;
- the trainer's and the evaluator's modules imported, and build-arc's compiled kernels compiled on
  a made-up task (`warm_build`: the dataset machinery warm);
- what its trainers share (`training.reuse.Reuse`, filled by the first task's): the start as the
  family's reader makes it from the held state, the memory checks' parameter counts, and the model
  itself: a task whose trainer has the architecture (its table's rows included) of one that ended
  well gets that model back as a fresh build would leave it (the recorded init values copied in,
  torch's generators set where the build left them), its modules and any graph compiled on them
  reused; a model whose task failed is dropped.

A task then costs its build (its views, `build-arc`'s library call), its trainer (built by its
family's trainer module, `build`, with the process's `Reuse`), its steps (`train_alone`: the
skeleton's step order, time budget and NaN guard, without the run folder's checkpoints), and its
evaluation: `evaluate`'s library function (through the CLI's table: the library never imports
`eval`) on the trained weights handed in memory, with the model it predicts with kept by the same
`Reuse` between tasks (`Reuse.loaded`: built by the family's loader for the first task of an
architecture, the trained weights copied into it for the others). The result equals the command route's for the
same task bit for bit on the CPU (tests/test_pertask_build_inprocess.py), and a trainer on a model
handed back, or an evaluation on a kept model, equals a fresh build's (tests/test_pertask_build_reuse.py). A failure keeps the worker's verdicts: a
refusal (a `UserError`, a diverged loss) is the task's own (`worker.TaskFailed`), with the error
line in its log; a disk or memory error is from outside (`worker.solve` judges it).
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arc_data.files.jsonio import save_json
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask import plan
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

RUN, EVAL = "run", "eval"


def commands(cfg: PerTaskConfig, work: Path, train_minutes: float, tasks: dict[str, dict], chal: Path
             ) -> tuple[str, list[str], list[str]]:
    """The task's train command (its name and arguments) and its evaluate arguments (but the batch),
    the user's overrides last. `run.py` composes them once before the first task (`checks`)."""
    from hrm_deeploop.families import of_checkpoint  # lazy: the registry, read once per task

    fam = of_checkpoint(cfg.checkpoint)  # its trainer, and whether it takes adapt.* (the puzzle table)
    poe = cfg.poe  # evaluate scores canvases too (eval.arc.poe.canvas_table)
    # the trainer's init_from carries the pretraining run's settings (training/inherit.py: optimiser,
    # logger and what the family needs to run, e.g. LoopViT's canvas); the task's own come after
    train = [f"init_from={cfg.checkpoint}", f"data_dir={work / 'data'}", f"output_dir={work / 'run'}",
             f"train.max_steps={cfg.steps}", f"train.global_batch_size={cfg.batch}", "logger=none",
             "train.progress=false", f"seed={cfg.seed}", f"device={cfg.device}"]
    if fam.adapts:  # the reasoners grow their puzzle table; LoopViT fine-tunes everything, as the official TTT
        train.append(f"adapt.trains={cfg.trains}")
    if math.isfinite(train_minutes):
        train.append(f"train.time_budget={max(train_minutes, 0.0):.4f}")
    if cfg.lr is not None:
        train.append(f"optim.lr={cfg.lr}")
    if not any(o.startswith("train.epochs_per_iter=") for o in cfg.train_overrides):
        train.append(f"train.epochs_per_iter={epochs_per_iter(cfg.batch, tasks)}")
    evaluate = [f"checkpoint={work / 'run'}", f"data_dir={work / 'data'}", f"output_dir={work / 'eval'}",
                f"challenges={chal}", "progress=false", "report=false", f"device={cfg.device}",
                f"poe={str(poe).lower()}", f"passes={cfg.passes}", f"tta_seed={cfg.seed}", *cfg.eval_overrides]
    return fam.trainer, train + list(cfg.train_overrides), evaluate


def epochs_per_iter(batch: int, tasks: dict[str, dict]) -> int:
    """A task (or pseudo-task) is one group: a sampler epoch yields one view's demonstrations of
    each, so one iteration must span enough epochs to fill a batch."""
    per_epoch = sum(len(t["train"]) for t in tasks.values())
    return max(1, math.ceil(batch / max(1, per_epoch)))


def build_task(cfg: PerTaskConfig, tid: str, task: dict, work: Path) -> tuple[dict[str, dict], Path]:
    """The task's views as a dataset under `work/data` (build-arc's library call): (the task and its
    pseudo-tasks, the challenges file they were built from)."""
    from arc_data.arc.build import BuildConfig, build  # lazy: numba only in the process that builds a task

    chal = work / "raw" / "arc-agi_task_challenges.json"
    chal.parent.mkdir(parents=True)
    # no solutions beside it: the build has no test label to leak; a pseudo-task's test output (a
    # demonstration's) is inline, so the vote scores the pseudo-tasks alone
    tasks = {tid: task} | (plan.leave_one_out(tid, task) if cfg.leave_one_out else {})
    save_json(chal, tasks)
    # every task of the file is an evaluation task (eval_name): test pairs go to the test split, never
    # into training (a pseudo-task's would, being labelled)
    build(BuildConfig(sources=[str(chal)], output_dir=str(work / "data"), test_labels="optional", eval_name="task",
                      num_aug=cfg.num_aug, seed=cfg.seed, progress=False))
    return tasks, chal


def eval_batch(data_dir: Path, cap: int = 256) -> int:
    """The evaluation batch for a task's test split: evaluate pads every batch to its global size, so
    the fewest equal batches of at most `cap` rows that hold the split (one batch of 9 rows, not 16)."""
    from hrm_deeploop.data.batches import open_dataset  # lazy: torch only in the process that trains a task

    rows = max(1, int(open_dataset(str(data_dir), "test").num_examples))
    return math.ceil(rows / math.ceil(rows / cap))


def _reasoner_build() -> Callable:
    from hrm_deeploop.training.reasoner import build  # lazy: torch, in the process that trains

    return build


def _vision_build() -> Callable:
    from hrm_deeploop.training.vision import build  # lazy: torch, in the process that trains

    return build


# a family's trainer command -> its trainer module's `build(cfg, env)` (the same function the command runs)
BUILDERS: dict[str, Callable[[], Callable]] = {"train": _reasoner_build, "train-vit": _vision_build}


def _reuse() -> Any:
    from hrm_deeploop.training.reuse import Reuse  # lazy: torch, in the process that trains

    return Reuse()


class Refused(UserError):
    """A task's command refused it (`command`: train or evaluate), as the command line would say."""

    def __init__(self, command: str, e: BaseException) -> None:
        super().__init__(f"hrm-deeploop {command}: error: {e}")
        self.command = command


@dataclass
class Prepared:
    """What this process built once for every task of `ttt views=build` (module docstring)."""

    key: str  # the PerTaskConfig it was built for (repr)
    trainer: str  # the family's trainer command
    build: Callable  # its trainer module's build(cfg, env)
    evaluate: Callable  # `evaluate`'s run(cfg), from the CLI's table
    train_cfg: Any  # the trainer's typed config for the placeholder task (copied per task)
    eval_cfg: Any  # evaluate's typed config (copied per task)
    checkpoint: Path  # the resolved weights file
    state: dict  # its state, read once
    own_epochs: bool  # the user set train.epochs_per_iter
    own_eval_batch: bool  # the user set evaluate's global_batch_size
    reuse: Any = field(default_factory=_reuse)  # training.reuse.Reuse: kept between this process's trainers
    evaluations: bool = True  # evaluate's model kept between tasks too (`Reuse.loaded`); False: built per task

    def task_configs(self, work: Path, train_minutes: float, group: dict[str, dict], chal: Path,
                     eval_batch: Callable[[Path], int]) -> tuple[Any, Any]:
        """The task's train and evaluate configs: the composed ones with its own folders and values."""
        train = copy.deepcopy(self.train_cfg)
        train.data_dir, train.output_dir = str(work / "data"), str(work / RUN)
        train.train.time_budget = round(max(train_minutes, 0.0), 4) if math.isfinite(train_minutes) else None
        if not self.own_epochs:
            train.train.epochs_per_iter = epochs_per_iter(train.train.global_batch_size, group)
        ev = copy.deepcopy(self.eval_cfg)
        ev.data_dir, ev.output_dir, ev.challenges = str(work / "data"), str(work / EVAL), str(chal)
        if not self.own_eval_batch:
            ev.global_batch_size = eval_batch(work / "data")
        return train, ev


_PREPARED: list[Prepared] = []  # this process's, at most one


def prepared(cfg: PerTaskConfig) -> Prepared:
    """This process's `Prepared` for `cfg`, built on the first call (the worker's start)."""
    key = repr(cfg)
    if _PREPARED and _PREPARED[0].key == key:
        return _PREPARED[0]
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch, in the process that trains
    from hrm_deeploop.cli import (  # lazy: the CLI's command table imports this package
        COMMANDS,
        compose,
        resolve,
    )
    from hrm_deeploop.cli import prepare as with_inherited  # lazy: as above

    work = Path(cfg.output_dir) / "tasks" / "_prepare" / "work"  # a placeholder: each task sets its own
    tid = "task"
    group = {tid: {"train": [{"input": [[0]], "output": [[0]]}], "test": [{"input": [[0]]}]}}
    name, train_args, eval_args = commands(cfg, work, math.inf, group, work / "raw" / "challenges.json")
    with contextlib.redirect_stderr(io.StringIO()):  # init_from's note on what it inherits (each task's log says it)
        train_cfg = compose(name, with_inherited(name, train_args))
        eval_cfg = compose("evaluate", eval_args)
    file = ckpt.resolve(cfg.checkpoint)
    state = ckpt.load(file)
    warm_build(cfg)
    _PREPARED[:] = [Prepared(
        key=key, trainer=name, build=BUILDERS[name](), evaluate=resolve(COMMANDS["evaluate"].target),
        train_cfg=train_cfg, eval_cfg=eval_cfg, checkpoint=file, state=state,
        own_epochs=any(o.startswith("train.epochs_per_iter=") for o in cfg.train_overrides),
        own_eval_batch=any(o.startswith("global_batch_size=") for o in cfg.eval_overrides))]
    return _PREPARED[0]


def warm_build(cfg: PerTaskConfig) -> None:
    """build-arc's compiled kernels (numba) compiled now, on a made-up task built into a folder of
    output_dir removed after: the first task's build then costs what every other's does."""
    work = Path(cfg.output_dir) / f".warm-{os.getpid()}"
    grid = [[1, 2], [3, 4]]
    try:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # no task's
            build_task(cfg, "warm", {"train": [{"input": grid, "output": grid}] * 2, "test": [{"input": grid}]}, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_trainer(prep: Prepared, train_cfg: Any, env: Any) -> Any:
    """The task's trainer, built by its family's trainer module from the held checkpoint (not yet
    stepped); a refusal is `Refused` (the task's own)."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch

    with ckpt.held(prep.checkpoint, prep.state):
        try:
            trainer = prep.build(train_cfg, env, reuse=prep.reuse)
        except UserError as e:
            raise Refused(prep.trainer, e) from None
    trainer.start_rng = rng_state(env.device)
    print(trainer.describe(), file=sys.stderr)
    return trainer


def rng_state(device: Any) -> dict:
    """torch's global generators as a trainer leaves them when built: the stream its first step
    draws from (dropout). A trainer stepped later, after others drew, starts from it again
    (`train_alone`; a lane's own generator, `vision_lanes.py`)."""
    import torch  # lazy: torch

    cuda = torch.device(device).type == "cuda"
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if cuda else None}


def set_rng_state(state: dict, device: Any) -> None:
    import torch  # lazy: torch

    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def train_alone(trainer: Any, train_cfg: Any, command: str = "train") -> dict:
    """The trainer's steps in the skeleton's order (`training.loop`): up to its total (or
    `train.stop_after`), stopping before a step once `train.time_budget` minutes have passed since
    the first; a non-finite loss or gradient is the task's own failure. Returns {steps, wall_time_s,
    status, final_train_loss}."""
    from hrm_deeploop.errors import TrainingDiverged  # lazy: beside the trainer's imports

    loop = train_cfg.train
    total = trainer.total_steps
    stop = min(total, loop.stop_after or total)
    budget = loop.time_budget
    step, losses = 0, []
    if getattr(trainer, "start_rng", None) is not None:  # others may have drawn since it was built
        set_rng_state(trainer.start_rng, trainer.env.device)
    begun = time.perf_counter()
    while step < stop:
        if budget is not None and time.perf_counter() - begun >= 60.0 * budget:
            break
        try:
            m = trainer.train_step(step + 1)
        except TrainingDiverged as e:
            raise Refused(command, e) from None
        step += 1
        losses.append(float(m["loss"]))
    status = "finished" if step >= total else "stopped"
    print(f"done: step {step}, {status}", file=sys.stderr)
    recent = losses[-loop.trailing_steps:]
    train_loss = sum(recent) / len(recent) if recent else None
    return {"status": status, "steps": step, "final_train_loss": train_loss, "wall_time_s": time.perf_counter() - begun,
            "losses": losses, **trainer.summary(status, None, train_loss)}


def trained_state(trainer: Any, steps: int) -> dict:
    """The trainer's state as its checkpoint file would hold it (what `evaluate` reads)."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch

    return {"format": ckpt.FORMAT, "step": steps, **trainer.state_dict(), "config": trainer.config}


def evaluate_trained(prep: Prepared, trainer: Any, steps: int, eval_cfg: Any, work: Path, keep: bool) -> None:
    """`evaluate`'s library function on the trainer's weights, handed in memory (`checkpoint.held`),
    with the process's `Reuse` as the state's loader: the model evaluate predicts with is kept between
    tasks, the task's trained weights (the average where the trainer keeps one) copied in, never built
    again for a key it has served (`Reuse.loaded`); the trainer's model is not touched. With `keep`
    (ttt's keep_work) the state is also written where the command route leaves it."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch

    state = trained_state(trainer, steps)
    path = ckpt.step_path(work / RUN, steps)
    if keep:  # the trained copy and its summary, where the command route leaves them
        ckpt.save(path, state)
    ev = copy.copy(eval_cfg)
    ev.checkpoint = str(path)
    keep_model = prep.reuse is not None and prep.evaluations  # evaluate's model, kept between tasks
    with ckpt.held(path, state, load=prep.reuse.loaded if keep_model else None):
        try:
            rc = prep.evaluate(ev)
        except UserError as e:
            raise Refused("evaluate", e) from None
    if rc:
        raise Refused("evaluate", RuntimeError(f"exited {rc}"))


def solve_build(cfg: PerTaskConfig, tid: str, group: dict[str, dict], chal: Path, train_minutes: float,
                work: Path, eval_batch: Callable[[Path], int]) -> tuple[dict, float, float]:
    """Train and evaluate one task whose views are built under `work/data`: (the training summary,
    its seconds, the evaluation's seconds)."""
    from hrm_deeploop import runtime  # lazy: torch

    prep = prepared(cfg)
    train_cfg, eval_cfg = prep.task_configs(work, train_minutes, group, chal, eval_batch)
    t0 = time.monotonic()
    env = runtime.setup(train_cfg.device)
    try:
        trainer = build_trainer(prep, train_cfg, env)
        summary = train_alone(trainer, train_cfg, prep.trainer)
        summary["minutes"] = train_minutes
    finally:
        runtime.teardown()
    train_s = time.monotonic() - t0
    t1 = time.monotonic()
    if cfg.keep_work:
        (work / RUN).mkdir(parents=True, exist_ok=True)
        save_json(work / RUN / "summary.json", {k: v for k, v in summary.items() if k != "minutes"})
    evaluate_trained(prep, trainer, summary["steps"], eval_cfg, work, cfg.keep_work)
    if prep.reuse is not None:  # its task ended well: the model serves the next task's trainer
        prep.reuse.release(trainer.model)
    return summary, train_s, time.monotonic() - t1
