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
import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from arc_data.files.guard import check_output_dir
from arc_data.files.jsonio import parse_json, save_json
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask import plan, worker
from hrm_deeploop.pertask.strict import check_protocol
from hrm_deeploop.pertask.ttt_config import RULES, PerTaskConfig
from hrm_deeploop.training.cluster import resolve as resolve_cluster

SUMMARY = "ttt_summary.json"


def run(cfg: PerTaskConfig) -> int:
    if not cfg.checkpoint:
        raise UserError("checkpoint: required (the pretrained run folder or checkpoints/step_N.pt)")
    if not cfg.challenges:
        raise UserError("challenges: required (an ARC challenges JSON file)")
    tasks = plan.load_challenges(cfg.challenges)
    out = check_output_dir(cfg.output_dir, [cfg.challenges, cfg.checkpoint, cfg.solutions or None])
    check_protocol(cfg, list(tasks))
    if cfg.views == "official" and plan.run_model(cfg.checkpoint) != "loopvit":
        raise UserError(f"views=official: the official LoopViT loop needs a LoopViT checkpoint; {cfg.checkpoint} "
                        "is not one (views=build trains HRM, TRM and URM)")
    plan.claim(out, cfg)  # a folder of this very set only: resumed, never mixed with another
    if cfg.launcher == "submitit":
        return launch_submitit(cfg, tasks, out)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1 and "LOCAL_RANK" in os.environ and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]  # this rank's workers see its GPU only
    run_shard(cfg, rank, world, tasks)
    if rank != 0:
        return 0
    if world > 1:
        wait_for_all(cfg, tasks, out)
    return finish(cfg, tasks, out)


def run_shard(cfg: PerTaskConfig, index: int, count: int, tasks: dict[str, dict] | None = None) -> dict:
    """The tasks of shard `index` of `count`, `cfg.workers` at a time, each in its own process."""
    tasks = tasks if tasks is not None else plan.load_challenges(cfg.challenges)
    out = Path(cfg.output_dir)
    mine = plan.shard(list(tasks), index, count)
    pending = deque(t for t in mine if plan.finished(out, t) is None)
    workers = min(cfg.workers, max(len(pending), 1))
    threads = cfg.threads or max(1, (os.cpu_count() or 1) // workers)
    where = f" (shard {index} of {count})" if count > 1 else ""
    print(f"ttt: {len(mine)} tasks{where}: {len(mine) - len(pending)} already finished, {len(pending)} to run on "
          f"{workers} worker(s) x {threads} thread(s)" + (f", budget {cfg.time_budget:g} min" if cfg.time_budget
                                                         is not None else ""), flush=True)
    budget = plan.Budget(cfg.time_budget, workers, time.monotonic())
    counts: dict[str, int] = {}
    if not pending:
        return counts
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=worker.init_worker, initargs=(threads,))
    running: dict = {}
    done_here, total = 0, len(pending)
    try:
        while pending or running:
            while pending and len(running) < workers:
                tid = pending.popleft()
                share = budget.share(len(pending) + len(running) + 1, time.monotonic())
                if share < cfg.min_task_minutes:
                    plan.write_result(out, tid, {"task": tid, "status": "fallback", "reason": "time budget spent",
                                                 "attempts": plan.fallback_attempts(tasks[tid])})
                    counts["fallback"] = counts.get("fallback", 0) + 1
                    done_here += 1
                    print(f"ttt: {tid}: no time left ({share:.2f} min): fallback attempts", flush=True)
                    continue
                running[pool.submit(worker.solve, cfg, tid, tasks[tid], share)] = (tid, time.monotonic(), share)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                tid, t0, share = running.pop(fut)
                done_here += 1
                try:
                    r = fut.result()
                    budget.record(r["seconds"], r["train_seconds"])
                    note = f"{r['steps']} steps, {r['seconds']:.1f} s ({r['train_seconds']:.1f} s training)"
                except Exception as e:  # the task's own failure: its fallback, named, and the set goes on
                    r = {"task": tid, "status": "failed", "reason": str(e)[:300],
                         "attempts": plan.fallback_attempts(tasks[tid])}
                    plan.write_result(out, tid, r)
                    note = f"failed: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
                counts[r["status"]] = counts.get(r["status"], 0) + 1
                left = total - done_here
                eta = (time.monotonic() - budget.start) / done_here * left / 1.0 if done_here else math.nan
                shown = "" if not math.isfinite(share) else f", {share:.2f} min given"
                print(f"ttt: [{done_here}/{total}] {tid}: {note}{shown}; {left} left, about {eta / 60:.1f} min to go",
                      flush=True)
    except BaseException:  # Ctrl-C / SIGTERM: stop the workers now; finished tasks stay finished
        for p in list(getattr(pool, "_processes", {}).values()):
            p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return counts


def wait_for_all(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path, poll_s: float = 2.0) -> None:
    """Rank 0 of a torchrun launch: until every task has a result, or the budget is over (the
    others then fall back in the merge)."""
    start = time.monotonic()
    limit = math.inf if cfg.time_budget is None else cfg.time_budget * 60 + 60
    while any(plan.finished(out, t) is None for t in tasks) and time.monotonic() - start < limit:
        time.sleep(poll_s)


def launch_submitit(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path) -> int:
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
    jobs = ex.map_array(run_shard, [cfg] * s.shards, list(range(s.shards)), [s.shards] * s.shards)
    print(f"ttt: {s.shards} shard(s) submitted ({cluster}): " + ", ".join(j.job_id for j in jobs), flush=True)
    for i, j in enumerate(jobs):
        try:
            j.result()
        except Exception as e:  # a shard that died: its unfinished tasks fall back in the merge
            print(f"ttt: shard {i} (job {j.job_id}) failed: {str(e).splitlines()[-1][:200] if str(e) else e}",
                  flush=True)
    return finish(cfg, tasks, out)


def finish(cfg: PerTaskConfig, tasks: dict[str, dict], out: Path) -> int:
    """submission.json (count-first) and submission_poe.json (product of experts) over every task,
    the summary, and with solutions the scores of both rules on the same predictions."""
    model = plan.run_model(cfg.checkpoint)
    poe = cfg.poe
    rules = {r: sfx for r, sfx in RULES.items() if poe or not sfx}
    for sfx in rules.values():
        sub, ranked, counts = plan.merge(out, tasks, sfx)
        save_json(out / f"submission{sfx}.json", sub, indent=None)
        save_json(out / f"ranked{sfx}.json", ranked, indent=None)
    results = [r for r in (plan.finished(out, t) for t in tasks) if r and r["status"] == "trained"]
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
    save_json(out / SUMMARY, summary)
    return 1 if counts.get("missing") else 0
