"""One task's copy of the model, start to end, in a worker process: the task alone as a dataset
(its augmented views, a fresh embedding row each), `train init_from=CHECKPOINT` on it under the
task's deadline, `evaluate` (predict, un-augment, vote), and the task's attempts written last as
`tasks/<id>/result.json`. Nothing of one task's weights or optimiser state reaches another's: each
task is its own `train` and `evaluate`, one model in memory at a time."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from pathlib import Path

from arc_data.files.jsonio import parse_json, save_json
from hrm_deeploop.pertask import plan
from hrm_deeploop.pertask.official_solve import solve_official
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

WORK = "work"
LOG = "log.txt"


# torchrun's variables: a worker of rank r trains its task alone, so it must not see them (its
# `train` would join the other ranks' workers in one process group, training different tasks)
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def init_worker(threads: int) -> None:
    """A pool process: its torch threads, and no torchrun variables (one task, one process)."""
    for var in TORCHRUN_VARS:
        os.environ.pop(var, None)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch  # lazy: after this worker's OMP_NUM_THREADS is set

    torch.set_num_threads(threads)


def solve(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float) -> dict:
    """Train, predict and vote one task; returns its result (also written to result.json). What
    its build, train and evaluate print goes to `tasks/<id>/log.txt`, not the console."""
    root = plan.task_dir(Path(cfg.output_dir), tid)
    work = root / WORK
    shutil.rmtree(work, ignore_errors=True)  # a task killed half-way starts again from nothing
    work.mkdir(parents=True)
    with open(root / LOG, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            return _solve(cfg, tid, task, train_minutes, work)
        except Exception as e:
            print(f"ttt: {tid}: {e}", file=log)
            raise RuntimeError(f"{e} (log: {root / LOG})") from None


def _solve(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float, work: Path) -> dict:
    if cfg.views == "official":

        result = solve_official(cfg, tid, task, train_minutes)
        plan.write_result(Path(cfg.output_dir), tid, result)  # last: its presence means finished
        if not cfg.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return result
    from arc_data.arc.build import BuildConfig, build  # lazy: numba only in the process that builds a task
    from hrm_deeploop.cli import run_subcommand  # lazy: the CLI's command table imports this package

    out = Path(cfg.output_dir)
    t0 = time.monotonic()
    chal = work / "raw" / "arc-agi_task_challenges.json"
    chal.parent.mkdir()
    # no solutions beside it: the build has no test label to leak; a pseudo-task's test output (a
    # demonstration's) is inline, so the vote scores the pseudo-tasks alone
    tasks = {tid: task} | (plan.leave_one_out(tid, task) if cfg.leave_one_out else {})
    save_json(chal, tasks)
    # every task of the file is an evaluation task (eval_name): test pairs go to the test split, never
    # into training (a pseudo-task's would, being labelled)
    build(BuildConfig(sources=[str(chal)], output_dir=str(work / "data"), test_labels="optional", eval_name="task",
                      num_aug=cfg.num_aug, seed=cfg.seed, progress=False))
    build_s = time.monotonic() - t0
    vit = plan.run_model(cfg.checkpoint) == "loopvit"
    poe = cfg.poe  # evaluate scores canvases too (eval.arc.poe.canvas_table)
    start = cfg.checkpoint
    if vit:  # train-vit starts from a file: a run folder's latest checkpoint
        from hrm_deeploop.checkpoint import resolve  # lazy: torch only in the process that trains a task

        start = str(resolve(cfg.checkpoint))
    train = [f"init_from={start}", f"data_dir={work / 'data'}", f"output_dir={work / 'run'}",
             f"train.max_steps={cfg.steps}", f"train.global_batch_size={cfg.batch}", "logger=none",
             "train.progress=false", f"seed={cfg.seed}", f"device={cfg.device}"]
    if not vit:  # LoopViT fine-tunes the whole model, as the official test-time training
        train.append(f"adapt.trains={cfg.trains}")
    if math.isfinite(train_minutes):
        train.append(f"train.time_budget={max(train_minutes, 0.0):.4f}")
    if cfg.lr is not None:
        train.append(f"optim.lr={cfg.lr}")
    if not any(o.startswith("train.epochs_per_iter=") for o in cfg.train_overrides):
        # a task (or pseudo-task) is one group: a sampler epoch yields one view's demonstrations of
        # each, so one iteration must span enough epochs to fill a batch
        per_epoch = sum(len(t["train"]) for t in tasks.values())
        train.append(f"train.epochs_per_iter={max(1, math.ceil(cfg.batch / max(1, per_epoch)))}")
    t_train = time.monotonic()
    rc = run_subcommand("train-vit" if vit else "train", train + list(cfg.train_overrides))
    train_s = time.monotonic() - t_train
    if rc != 0:
        raise RuntimeError(f"task {tid}: train exited {rc}")
    steps = parse_json((work / "run" / "summary.json").read_bytes(), "summary.json").get("steps")
    t_eval = time.monotonic()
    batch = []
    if not any(o.startswith("global_batch_size=") for o in cfg.eval_overrides):
        batch = [f"global_batch_size={eval_batch(work / 'data')}"]
    rc = run_subcommand("evaluate", [*batch, f"checkpoint={work / 'run'}", f"data_dir={work / 'data'}",
                                     f"output_dir={work / 'eval'}", f"challenges={chal}", "progress=false",
                                     "report=false", f"device={cfg.device}", f"poe={str(poe).lower()}",
                                     f"passes={cfg.passes}", f"tta_seed={cfg.seed}", *cfg.eval_overrides])
    if rc != 0:
        raise RuntimeError(f"task {tid}: evaluate exited {rc}")
    result = {"task": tid, "status": "trained", **ranked_attempts(work / "eval", tid, poe), "steps": steps,
              "train_seconds": round(train_s, 3), "build_seconds": round(build_s, 3),
              "evaluate_seconds": round(time.monotonic() - t_eval, 3), "seconds": round(time.monotonic() - t0, 3),
              "train_minutes_given": None if not math.isfinite(train_minutes) else round(train_minutes, 4)}
    if len(tasks) > 1:  # the pseudo-tasks' held-out demonstrations, scored by each rule
        result["leave_one_out"] = loo_scores(work / "eval", poe, len(tasks) - 1)
    plan.write_result(out, tid, result)  # last: its presence means finished
    if not cfg.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return result


def eval_batch(data_dir: Path, cap: int = 256) -> int:
    """The evaluation batch for a task's test split: evaluate pads every batch to its global size, so
    the fewest equal batches of at most `cap` rows that hold the split (one batch of 9 rows, not 16)."""
    from hrm_deeploop.data.batches import open_dataset  # lazy: torch only in the process that trains a task

    rows = max(1, int(open_dataset(str(data_dir), "test").num_examples))
    return math.ceil(rows / math.ceil(rows / cap))


def ranked_attempts(folder: Path, tid: str, poe: bool) -> dict:
    """The task's attempts and ranked candidate grids (best first, per test input) by each scoring
    rule, from evaluate's tasks.json (count-first) and poe.json (product of experts); an empty
    grid (a prediction that decodes to none) is no candidate, as in the submission."""
    sub = parse_json((folder / "submission.json").read_bytes(), "submission.json")
    tests = parse_json((folder / "tasks.json").read_bytes(), "tasks.json")["tasks"][tid]["test_inputs"]
    out = {"attempts": sub[tid], "ranked": [[c["grid"] for c in t["candidates"] if c["grid"]] for t in tests]}
    if poe:
        sub = parse_json((folder / "submission_poe.json").read_bytes(), "submission_poe.json")
        tests = parse_json((folder / "poe.json").read_bytes(), "poe.json")["tasks"][tid]
        out |= {"attempts_poe": sub[tid], "ranked_poe": [[c["grid"] for c in t["candidates"] if c["grid"]] for t in tests]}
    return out


def loo_scores(folder: Path, poe: bool, count: int) -> dict:
    """pass@1 and pass@2 of the pseudo-tasks (the only labelled tasks of the task's build) by each
    rule: how often the task's copy predicts a demonstration from the others."""
    at_k = {"count-first": parse_json((folder / "pass_at_k.json").read_bytes(), "pass_at_k.json")}
    if poe:
        at_k["poe"] = parse_json((folder / "poe.json").read_bytes(), "poe.json")["pass_at_k"]
    return {"pseudo_tasks": count, **{rule: {f"pass@{k}": s["hrm"][str(k)] for k in (1, 2)} for rule, s in at_k.items()}}
