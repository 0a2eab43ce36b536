"""`hrm-deeploop ttt`: per-task test-time training over a set of ARC tasks, spread over a local
process pool, torchrun ranks or a submitit job array; resumable, under one time budget, ending in
one `submission.json` (docs/per-task.md).

Where the work goes: under torchrun (WORLD_SIZE > 1) rank r takes tasks r, r + W, ... (each rank
its own pool, its GPU the rank's); with `launcher=submitit`, job i of the array takes shard i of
`submitit.shards`. Every finished task is a `tasks/<id>/result.json`, written last and atomically;
a rerun (the same command) skips them and redoes the rest. Rank 0 (or the submitting process)
merges every task's attempts, a fallback for a task that never trained, into `submission.json`.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from arc_data.files.jsonio import parse_json, save_json
from arc_data.files.locks import RUN_TOKEN, RunLock
from hrm_deeploop import families, interrupts
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask import canvas_fit, checks, plan
from hrm_deeploop.pertask.budget import process_start
from hrm_deeploop.pertask.pool import run_shard
from hrm_deeploop.pertask.ttt_config import RULES, PerTaskConfig
from hrm_deeploop.training.cluster import resolve as resolve_cluster

SUMMARY = "ttt_summary.json"


def run(cfg: PerTaskConfig) -> int:
    start = min(time.time(), process_start())  # the set's clock (time_budget): from this process's start
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    tasks, out, identity, misfits = checks.before_the_first_task(cfg)  # everything that can be refused, nothing written
    if world > 1 and "LOCAL_RANK" in os.environ and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]  # this rank's workers see its GPU only
    # the folder is this run's while it runs (a second ttt into it is refused); its workers, and the
    # ranks of a torchrun launch, inherit the token that makes the lock theirs too
    os.environ.setdefault(RUN_TOKEN, f"ttt-{os.environ['TORCHELASTIC_RUN_ID']}" if world > 1 and
                          "TORCHELASTIC_RUN_ID" in os.environ else f"ttt-{uuid.uuid4().hex}")
    lock = RunLock(out) if rank == 0 else None
    try:
        if rank == 0:
            plan.claim(out, identity)  # a folder of this very set only: resumed, never mixed with another
            canvas_fit.record(out, tasks, misfits)  # the tasks the checkpoint cannot hold: failed, never started
        trained = {t: task for t, task in tasks.items() if t not in misfits}  # the time budget is theirs
        if trained and cfg.launcher == "submitit":
            return launch_submitit(cfg, tasks, out, start)  # its shards find the others finished
        if trained:
            any_shard(cfg, rank, world, trained, start)
        if rank != 0:
            return 0
        if world > 1:
            wait_for_all(cfg, tasks, out)
        return finish(cfg, tasks, out, start)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the line says what is kept and how to go on
        if rank != 0:
            raise
        raise interrupts.Interrupted(getattr(e, "signum", signal.SIGINT), kept(out, tasks)) from None
    finally:
        if lock is not None:
            lock.release()


def kept(out: Path, tasks: dict[str, dict]) -> str:
    """What an interrupted run leaves: its finished tasks, which the same command does not run again."""
    try:
        done = sum(plan.finished(out, tid) is not None for tid in tasks)
    except (OSError, ValueError):
        return "the finished tasks are kept; the same command goes on from them"
    return f"{done} of {len(tasks)} task(s) finished and kept; the same command goes on from there"


def any_shard(cfg: PerTaskConfig, index: int, count: int, tasks: dict[str, dict] | None = None,
              start: float | None = None) -> dict:
    """Shard `index` of `count` by the engine the config names: many copies in one process
    (`official.copies` != 1 with views=official: pertask/batched.py; `copies` != 1 with views=build:
    pertask/build_lanes.py), else one task at a time per worker (pertask/pool.py). What a rank of a
    torchrun launch and a job of a submitit array run alike."""
    lanes = ("official.copies", cfg.official.copies) if cfg.views == "official" else ("copies", cfg.copies)
    if lanes[1] != 1 and cfg.workers > 1 and index == 0:
        print(f"ttt: workers={cfg.workers} is not used with {lanes[0]}={lanes[1]}: one process steps the copies "
              "(the lanes are the parallelism)", flush=True)
    if cfg.views == "official" and cfg.official.copies != 1:
        from hrm_deeploop.pertask.batched import run_shard as run_copies  # lazy: torch where it trains

        return run_copies(cfg, index, count, tasks, start)
    if cfg.views == "build" and cfg.copies != 1:
        from hrm_deeploop.pertask.build_lanes import run_shard as run_lanes  # lazy: torch where it trains

        return run_lanes(cfg, index, count, tasks, start)
    return run_shard(cfg, index, count, tasks, start)


def wait_for_all(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path, poll_s: float = 2.0) -> None:
    """Rank 0 of a torchrun launch: until every task has a result, or the budget is over (the
    others then fall back in the merge)."""
    start = time.monotonic()
    limit = math.inf if cfg.time_budget is None else cfg.time_budget * 60 + 60
    while any(plan.finished(out, t) is None for t in tasks) and time.monotonic() - start < limit:
        time.sleep(poll_s)


def launch_submitit(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path, start: float) -> int:
    """The shards as one submitit job array; waits for it, then merges."""

    try:
        import submitit  # lazy: only a SLURM run needs submitit
    except ImportError:
        raise UserError("launcher=submitit needs submitit: pip install 'hrm-deeploop[cluster]'") from None
    s = cfg.submitit
    cluster = resolve_cluster(s.cluster)  # slurm where there is none: one line, not submitit's traceback
    ex = submitit.AutoExecutor(folder=out / "submitit" / "%j", cluster=cluster)
    params = {"timeout_min": s.timeout_min, "gpus_per_node": s.gpus_per_node, "name": f"ttt-{out.name}"}
    if s.cpus_per_task is not None:
        params["cpus_per_task"] = s.cpus_per_task
    if cluster == "slurm":
        params["slurm_array_parallelism"] = s.array_parallelism
        if s.partition:
            params["slurm_partition"] = s.partition
    ex.update_parameters(**params)
    jobs = ex.map_array(any_shard, [cfg] * s.shards, list(range(s.shards)), [s.shards] * s.shards,
                        [None] * s.shards, [start] * s.shards)
    print(f"ttt: {s.shards} shard(s) submitted ({cluster}): " + ", ".join(j.job_id for j in jobs), flush=True)
    for i, j in enumerate(jobs):
        try:
            j.result()
        except Exception as e:  # a shard that died: its unfinished tasks fall back in the merge
            print(f"ttt: shard {i} (job {j.job_id}) failed: {str(e).splitlines()[-1][:200] if str(e) else e}",
                  flush=True)
    return finish(cfg, tasks, out, start)


def finish(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path, start: float | None = None) -> int:
    """submission.json (count-first) and submission_poe.json (product of experts) over every task,
    the summary, and with solutions the scores of both rules on the same predictions."""
    model = families.of_checkpoint(cfg.checkpoint).name
    poe = cfg.poe
    rules = {r: sfx for r, sfx in RULES.items() if poe or not sfx}
    for sfx in rules.values():
        sub, ranked, counts = plan.merge(out, tasks, sfx)
        save_json(out / f"submission{sfx}.json", sub, indent=None)
        save_json(out / f"ranked{sfx}.json", ranked, indent=None)
    results = [r for r in (plan.finished(out, t) for t in tasks) if r and r["status"].startswith("trained")]
    overhead = (1 - sum(r["train_seconds"] for r in results) / sum(r["seconds"] for r in results)) if results else None
    summary = {"protocol": cfg.protocol, "model": model, "tasks": len(tasks), "status": counts,
               "overhead_fraction": None if overhead is None else round(overhead, 4),
               "checkpoint": cfg.checkpoint, "challenges": cfg.challenges}
    timed = [r for r in results if "build_seconds" in r]
    if timed:  # where a task's time goes: its build, its train command, its evaluate command, the rest
        total = sum(r["seconds"] for r in timed)
        phases = {p: sum(r[f"{p}_seconds"] for r in timed) / total for p in ("build", "train", "evaluate")}
        summary["time_fractions"] = {p: round(v, 4) for p, v in (phases | {"other": 1 - sum(phases.values())}).items()}
    loo = [r["leave_one_out"] for r in results if "leave_one_out" in r]
    if loo:  # the mean over trained tasks of their pseudo-tasks' scores, per rule
        summary["leave_one_out"] = {rule: {k: round(sum(x[rule][k] for x in loo) / len(loo), 4) for k in loo[0][rule]}
                                    for rule in rules if rule in loo[0]}
    line = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"ttt: {len(tasks)} tasks ({line}); {out / 'submission.json'} (protocol: {cfg.protocol})"
          + ("" if overhead is None else f"; outside training: {100 * overhead:.1f}% of the tasks' time"), flush=True)
    if cfg.solutions:  # `score`, through the CLI's table (the library never imports the evaluators)
        from hrm_deeploop.cli import run_subcommand  # lazy: the CLI's command table imports this module

        summary["scores"] = {}
        for rule, sfx in rules.items():
            scored = out / f"score{sfx}.json"
            scored.unlink(missing_ok=True)  # ours, from an earlier run of this command
            print(f"ttt: {rule} ranking, scored under protocol {cfg.protocol}:", flush=True)
            if run_subcommand("score", [f"submission={out / f'submission{sfx}.json'}", f"solutions={cfg.solutions}",
                                        f"ranked={out / f'ranked{sfx}.json'}", f"ks=[{','.join(map(str, cfg.ks))}]",
                                        f"output={scored}", "quiet=true"]) != 0:
                return 2
            s = parse_json(scored.read_bytes(), str(scored))
            summary["scores"][rule] = {"pass@2 (ARC Prize rule)": round(s["percent"], 4),
                                       **{f"pass@{k}": round(v, 4) for k, v in s["pass_at_k"]["hrm"].items()}}
        summary["pass@2 (ARC Prize rule)"] = summary["scores"]["count-first"]["pass@2 (ARC Prize rule)"]
    summary["fallback_attempts"] = sum(r.get("fallback_attempts", 0) for r in results)
    if start is not None:  # the whole command, its start included, against its budget
        summary["wall_seconds"] = round(time.time() - start, 1)
        budget = "" if cfg.time_budget is None else f" of a {60 * cfg.time_budget:.0f}-s budget"
        print(f"ttt: {summary['wall_seconds']:.1f} s{budget}", flush=True)
    save_json(out / SUMMARY, summary)
    if counts.get("error") or counts.get("missing"):
        print(f"ttt: {counts.get('error', 0) + counts.get('missing', 0)} task(s) not finished for a reason outside "
              "them (their results say why); the same command again retries them", file=sys.stderr, flush=True)
        return 1
    return 0
