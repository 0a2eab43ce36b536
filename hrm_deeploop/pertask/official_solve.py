"""One task under `ttt views=official` in a worker process: its 51 official views, the official
loop's runs (`official_ttt.run_task`) under the task's deadline, and its result (both scoring
rules), which the worker writes last as `tasks/<id>/result.json`."""

from __future__ import annotations

import math
import time

from hrm_deeploop.pertask import plan
from hrm_deeploop.pertask.official_views import build_views
from hrm_deeploop.pertask.ttt_config import PerTaskConfig


def file_index(cfg: PerTaskConfig, tid: str) -> int:
    """The task's position among the sorted task ids of the challenges (the official builder's
    position in the sorted evaluation directory, which seeds its colour permutations)."""
    return sorted(plan.load_challenges(cfg.challenges)).index(tid)


def solve_official(cfg: PerTaskConfig, tid: str, task: dict, train_minutes: float) -> dict:
    from hrm_deeploop import runtime  # lazy: torch only in the process that trains the task
    from hrm_deeploop.pertask.official_ttt import run_task, start_model  # lazy: torch only where it trains

    t0 = time.monotonic()
    o = cfg.official
    task = {"train": task["train"], "test": [{"input": t["input"]} for t in task["test"]]}  # no answer read
    views = build_views(tid, task, file_index(cfg, tid), o.perms)
    build_s = time.monotonic() - t0
    env = runtime.setup(cfg.device)
    try:
        model = start_model(cfg.checkpoint, len(views), cfg.seed, o.dropout)
        print(f"ttt: {tid}: {len(views)} official views, {sum(len(v.train) for v in views)} demonstrations an "
              f"epoch, epochs 0..{o.epochs}, {o.runs} run(s), {cfg.passes} passes, device={env.device}", flush=True)
        deadline = time.monotonic() + train_minutes * 60 if math.isfinite(train_minutes) else math.inf
        t1 = time.monotonic()
        r = run_task(model, views, task, epochs=o.epochs, batch=o.batch, lr=o.lr, runs=o.runs, passes=cfg.passes,
                     pool=o.pool, poe=cfg.poe, seed=cfg.seed, device=env.device, deadline=deadline,
                     stop_after=o.stop_after, stop_share=o.stop_share, stop_fit=o.stop_fit)
        loop_s = time.monotonic() - t1
    finally:
        runtime.teardown()
    train_s = r.pop("train_seconds_inner")
    for run in r["runs"]:
        why = {"deadline": ", stopped at the deadline", "fit": ", stopped: fit"}.get(run["stop"], "")
        print(f"ttt: {tid}: run of {run['steps']} steps ({run['epochs']} epochs{why}), "
              f"loss {run['first_loss']} -> {run['last_loss']}", flush=True)
    return {"task": tid, "status": "trained", "views": "official", **r,
            "steps": sum(run["steps"] for run in r["runs"]), "train_seconds": round(train_s, 3),
            "build_seconds": round(build_s, 3), "evaluate_seconds": round(loop_s - train_s, 3),
            "seconds": round(time.monotonic() - t0, 3),
            "train_minutes_given": None if not math.isfinite(train_minutes) else round(train_minutes, 4)}
