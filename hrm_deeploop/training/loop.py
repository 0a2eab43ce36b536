"""The one training skeleton shared by every model (HRM, TRM, URM, the looped GPT).

A model contributes a `Task`: its model, optimisers and data, one optimiser step, an evaluation,
and its state. The skeleton (`fit`) owns everything around that, the same way for every model:

- the task is built first (data opened and validated, model created), so bad input writes nothing;
- the run folder: rank 0 locks it (`checkpoint.RunLock`: one run per folder, a second trainer is
  refused naming the holder's PID) and creates or reopens it (`checkpoint.prepare_run_dir`); an
  error there is broadcast, so every rank prints it instead of waiting on a collective;
- resume: the latest checkpoint's state goes back into the task; rows a killed run logged after
  that checkpoint are dropped from metrics.jsonl/csv (they are about to be logged again); a run
  whose summary.json says finished is not run again; a run fed a different dataset than it
  trained on (`Task.data_identity`) is refused;
- checkpoints: `training.checkpointer.Checkpointer` writes and reads the train states (every rank
  takes part: side files, pruning to `checkpoint.keep`, the last one named in errors);
- signals: a SIGINT/SIGTERM (`interrupts`) is held back while a step runs; the loop then saves a
  checkpoint and exits with `Interrupted` naming it (SLURM's preemption); a second signal stops
  at once, keeping the previous checkpoint; a failed checkpoint write names the previous one;
- cadence: log every `train.log_every`, evaluate every `eval.every` and at the end, checkpoint
  every `checkpoint.every`, after evaluations (`checkpoint.at_eval`) and at the end, keep the
  newest `checkpoint.keep`; stop early at `train.stop_after` (resume continues the schedule);
- NaN guard: a non-finite loss or gradient stops the run with the step and the last checkpoint named;
- the run record (`training.record`): trained_tasks.json, the tasks it trains on, once at the start;
- summary.json: status (finished / stopped / diverged), steps, wall time, the trailing train loss,
  the last evaluation and the task's own figures.

The shared config sections (`RunConfig`, `LoopConfig`, `OptimConfig`, `CheckpointConfig`,
`EvalConfig`, in the torch-free `training.config` with every trainer's config) carry one set of
names for every trainer; each trainer subclasses them for its own defaults and extra fields.
"""

from __future__ import annotations

import abc
import collections
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arc_data.files.guard import check_output_dir
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import interrupts, runtime
from hrm_deeploop.errors import ConfigError, TrainingDiverged, UserError
from hrm_deeploop.training import record
from hrm_deeploop.training.checkpointer import Checkpointer
from hrm_deeploop.training.inherit import warmup_warning
from hrm_deeploop.training.runlog import RunLogger
from hrm_deeploop.typed_config import (
    to_dict,
)

# ---- what a model contributes --------------------------------------------------------------------


def mfu(units_per_s: float, flops_per_unit: float, peak_tflops: float, world_size: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s (units of work per second x model FLOPs per unit)
    over the peak of all `world_size` devices, `peak_tflops` each."""
    return units_per_s * flops_per_unit / (peak_tflops * 1e12 * world_size)


class Task(abc.ABC):
    """One model's part of training. Subclasses set the attributes and implement the abstract methods."""

    name: str = "model"
    total_steps: int  # the schedule's length
    eval_every: int = 0  # 0: evaluate only at the end (if `evaluate` returns anything: `train`'s does not at 0)
    work_unit: str = "examples"  # what `work_per_step` counts (examples, tokens)
    work_per_step: int = 0
    flops_per_unit: float | None = None  # model FLOPs per unit of work (fwd+bwd), for MFU
    peak_tflops: float | None = None  # per device, for MFU
    config: dict[str, Any]  # the resolved run config (config.yaml, saved in every checkpoint)

    def describe(self) -> str:
        """One line printed when training starts."""
        return self.name

    @abc.abstractmethod
    def train_step(self, step: int) -> dict[str, float]:
        """One optimiser step (`step` counts from 1). Returns host-side metrics with at least `loss`;
        raises TrainingDiverged (`runlog.check_finite`) on a non-finite loss or gradient."""

    def evaluate(self, step: int) -> dict[str, float] | None:
        """Metrics to log at this step, keys with their prefix (e.g. `val/loss`); None: nothing to evaluate."""
        return None

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Top-level entries of the checkpoint file: model, optimizers, schedule, sampler, ..."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        """Restore `state_dict()` from the checkpoint at `path` (named in errors)."""

    def local_state(self) -> dict[str, Any] | None:
        """Per-rank state (ranks > 0 write it to step_N.rank<r>.pt); None: nothing per rank."""
        return None

    def data_identity(self) -> dict[str, Any] | None:
        """What identifies the dataset (recorded in the run folder; a resume on another one is
        refused); None: the task checks its data itself (the GPT's shards, in its sampler state)."""
        return None

    def load_local_state(self, state: dict[str, Any] | None) -> None:  # noqa: B027 - optional hook
        """Restore `local_state()`; None when the checkpoint has none for this rank. Tasks without
        per-rank state have nothing to restore."""

    def diagnose(self, step: int) -> dict[str, float] | None:
        """Extra measurements (visit alignment) to log at this step; None: none for this model.
        Must not change the training trajectory (no RNG draws, no data consumed)."""
        return None

    def progress(self, metrics: dict[str, float]) -> dict[str, str]:
        """The progress bar's postfix for this step's metrics."""
        return {"loss": f"{metrics['loss']:.4f}"}

    def summary(self, status: str, last_eval: dict[str, float] | None, train_loss: float | None) -> dict[str, Any]:
        """The task's own fields of summary.json (`train_loss`: the trailing-window mean)."""
        return {}


# ---- the loop -----------------------------------------------------------------------------------


def fit(cfg: Any, build: Callable[[runtime.Env], Task]) -> dict[str, Any]:
    """Train (or resume) one run: set up the process group, build the task, run the loop, tear down.

    `cfg` is a RunConfig subclass with `train` (LoopConfig), `checkpoint`, `eval` sections. Returns
    the summary (also written to summary.json by rank 0). Raises TrainingDiverged on a non-finite
    loss after writing summary.json with status diverged.
    """
    if not cfg.output_dir:
        raise ConfigError("output_dir is not set (output_dir=PATH for checkpoints and logs)")
    check_output_dir(cfg.output_dir, cfg.inputs(), locked_by_caller=True)  # its RunLock checks the folder itself
    env = runtime.setup(cfg.device)
    try:
        return _fit(cfg, build(env), env)
    finally:
        runtime.teardown()


def _prepare_run_dir(run_dir: Path, task: Task, resume: bool, env: runtime.Env
                     ) -> tuple[Path | None, dict[str, Any] | None, ckpt.RunLock | None]:
    """Rank 0 locks and checks the folder; its result or its error reaches every rank. Returns the
    checkpoint to resume from, the dataset's identity (rank 0) and the lock (rank 0)."""
    lock, identity = None, None

    def prepare() -> str | None:
        nonlocal lock, identity
        lock = ckpt.RunLock(run_dir)
        identity = task.data_identity()
        found = ckpt.prepare_run_dir(run_dir, task.config, resume, must_match=("model", "scaling"), identity=identity)
        return str(found) if found else None

    try:
        resume_from = runtime.on_main(prepare, env)
    except UserError:
        if lock is not None:
            lock.release()
        raise
    return (Path(resume_from) if resume_from else None), identity, lock


def _finished(summary_path: Path, total_steps: int) -> dict[str, Any] | None:
    try:
        done = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return None
    return done if done.get("status") == "finished" and done.get("steps") == total_steps else None


def _fit(cfg: Any, task: Task, env: runtime.Env) -> dict[str, Any]:
    resume_from, identity, lock = _prepare_run_dir(Path(cfg.output_dir), task, cfg.resume, env)
    try:
        return _run(cfg, task, env, resume_from, identity)
    finally:
        if lock is not None:
            lock.release()


def _run(cfg: Any, task: Task, env: runtime.Env, resume_from: Path | None, identity: dict[str, Any] | None
         ) -> dict[str, Any]:
    begun = time.perf_counter()  # train.time_budget counts from here (resume loading included)
    run_dir = Path(cfg.output_dir)
    loop, ck = cfg.train, cfg.checkpoint
    total = task.total_steps
    stop = min(total, loop.stop_after or total)
    summary_path = run_dir / "summary.json"
    if resume_from is not None and (done := _finished(summary_path, total)) is not None:
        runtime.print0(f"{run_dir} already finished ({total} steps); nothing to do")
        return done

    step, wall_before = 0, 0.0
    recent: collections.deque[float] = collections.deque(maxlen=loop.trailing_steps)
    last_eval: dict[str, float] | None = None
    checkpoints = Checkpointer(run_dir, task, env, ck.keep, lambda: {
        "recent_losses": list(recent), "last_eval": last_eval,
        "wall_time_s": wall_before + time.perf_counter() - started})
    if resume_from is not None:
        resumed = checkpoints.load(resume_from)
        step, last_eval, wall_before = resumed.step, resumed.last_eval, resumed.wall_time_s
        recent.extend(resumed.recent_losses)
        runtime.print0(f"resumed {run_dir} at step {step} from {resume_from.name}")
    runtime.print0(task.describe())
    if (warning := warmup_warning(getattr(cfg, "optim", None), total)) is not None:
        runtime.print0(warning, file=sys.stderr)

    logger = RunLogger(run_dir, cfg.logger, cfg.project, cfg.run_name or run_dir.name, task.config,
                       resume=resume_from is not None, resume_step=step)
    try:  # the resume state and the metrics log are in order: now the run folder records this run
        runtime.on_main(lambda: ckpt.record_run(run_dir, task.config, identity), env)
        runtime.on_main(lambda: record.write_once(run_dir, task.config), env)  # what it trains on (strict checks)
    except UserError:
        logger.close()
        raise
    started = time.perf_counter()  # this session's wall time counts from here (`wall_time_s` above)

    status, out_of_time = "running", False
    bar = runtime.progress(stop, task.name, initial=step) if loop.progress else None
    busy, work_since = 0.0, 0  # training seconds and work since the last log (eval and saving excluded)
    try:
        polled, longest = time.perf_counter(), 0.0  # a held signal waits 10 s or twice the longest step, not more

        def grace() -> float:
            return max(10.0, 2 * longest)

        with interrupts.deferred(grace) as pending:
            while step < stop:
                longest, polled = max(longest, time.perf_counter() - polled), time.perf_counter()
                signum = runtime.max_over_ranks(pending() or 0)
                if signum:  # held back until the step and its evaluation were done: save, then exit
                    if step > 0 and checkpoints.saved_at != step:
                        checkpoints.save(step)
                    saved = f"saved {ckpt.step_path(run_dir, step)}" if step > 0 else "no step was done, nothing saved"
                    status = "interrupted"
                    raise interrupts.Interrupted(signum, f"{saved}; resume with resume=true")
                over = loop.time_budget is not None and time.perf_counter() - begun >= 60.0 * loop.time_budget
                if runtime.max_over_ranks(int(over)):  # every rank stops at the same step
                    out_of_time = True
                    break
                t0 = time.perf_counter()
                try:
                    m = task.train_step(step + 1)
                except TrainingDiverged as e:
                    raise TrainingDiverged(f"{e}; {checkpoints.last_saved()}") from None
                step += 1
                recent.append(float(m["loss"]))
                busy += time.perf_counter() - t0
                work_since += task.work_per_step
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(task.progress(m), refresh=False)
                if step % loop.log_every == 0 or step == stop:
                    rate = work_since / max(busy, 1e-9)
                    perf = {f"perf/{task.work_unit}_per_s": rate, task.work_unit: step * task.work_per_step}
                    if task.flops_per_unit and task.peak_tflops:
                        perf["perf/mfu"] = mfu(rate, task.flops_per_unit, task.peak_tflops, env.world_size)
                    logger.log({f"train/{k}": v for k, v in m.items()} | perf, step=step)
                    busy, work_since = 0.0, 0
                kappa_every = cfg.diagnostics.kappa_every
                if kappa_every and (step % kappa_every == 0 or step == 1):
                    dm = task.diagnose(step)
                    if dm:
                        logger.log(dm, step=step)
                evaluated = False
                if (task.eval_every and step % task.eval_every == 0) or step == stop:
                    em = task.evaluate(step)
                    if em is not None:
                        last_eval, evaluated = em, True
                        logger.log(em, step=step)
                if (ck.every and step % ck.every == 0) or step == stop or (evaluated and ck.at_eval):
                    checkpoints.save(step)
            if out_of_time and checkpoints.saved_at != step:
                checkpoints.save(step)
            status = "finished" if step >= total else "stopped"
    except TrainingDiverged:
        status = "diverged"
        raise
    except KeyboardInterrupt as e:  # a second signal, or one where none was held back: stop now
        if status == "interrupted":
            raise
        raise interrupts.Interrupted(getattr(e, "signum", signal.SIGINT),
                                     f"stopped at step {step} without saving it; {checkpoints.last_saved()}") from None
    finally:
        if bar is not None:
            bar.close()
        logger.close()
        if status in ("finished", "stopped", "diverged"):
            summary = _summary(cfg, task, status, step, recent, last_eval, wall_before + time.perf_counter() - started)
            if env.is_main:
                ckpt.atomic_write_bytes(summary_path, (json.dumps(summary, indent=2) + "\n").encode())
    if status == "stopped":
        why = f"train.time_budget={loop.time_budget} minutes" if out_of_time else "train.stop_after"
        runtime.print0(f"stopped at step {step} ({why}); resume with resume=true")
    runtime.print0(f"done: step {step}, {status}, last checkpoint {checkpoints.last_path}")
    return summary


def _summary(cfg: Any, task: Task, status: str, step: int, recent: collections.deque, last_eval: dict | None,
             wall: float) -> dict[str, Any]:
    train_loss = float(sum(recent) / len(recent)) if recent else None
    out = {
        "status": status,
        "steps": step,
        task.work_unit: step * task.work_per_step,
        "final_train_loss": train_loss if train_loss is None or math.isfinite(train_loss) else None,
        "train_loss_window": len(recent),
        "last_eval": last_eval,
        "wall_time_s": wall,
        "seed": cfg.seed,
        "code_version": ckpt.code_version(),
    }
    out.update(task.summary(status, last_eval, out["final_train_loss"]))
    return out


def run_config_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as a plain dict (model and scaling first), for config.yaml and checkpoints."""
    d = to_dict(cfg)
    return {"model": d.pop("model"), "scaling": d.pop("scaling"), **d}
