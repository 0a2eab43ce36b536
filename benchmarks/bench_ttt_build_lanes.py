"""`ttt views=build`: K lanes (`copies=K`, pertask/build_lanes.py) against one task at a time in-process
(K = 1, what a pool worker runs), in one process, CPU seconds (`time.process_time`, every thread of
this process) and wall seconds per task, the same tasks and settings; the results compared for
identity (docs/notebook/2026-12-06-build-lanes.md).

    python benchmarks/bench_ttt_build_lanes.py --checkpoint RUN --challenges C.json --out /tmp/bl \
        --steps 20 --batch 4 --num-aug 3 --ks 1 2 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import torch

from hrm_deeploop.pertask import build_lanes, checks, plan, worker
from hrm_deeploop.pertask.ttt_config import PerTaskConfig

TIMES = ("train_seconds", "loop_seconds", "build_seconds", "evaluate_seconds", "seconds")


def config(a: argparse.Namespace, out: Path, k: int) -> PerTaskConfig:
    cfg = PerTaskConfig(checkpoint=a.checkpoint, challenges=a.challenges, output_dir=str(out), steps=a.steps,
                        batch=a.batch, num_aug=a.num_aug, threads=1, device="cpu", progress=False, passes=2,
                        protocol="transductive", copies=k, train_overrides=["optim.warmup_steps=1"])
    checks.before_the_first_task(cfg)
    return cfg


def one_at_a_time(cfg: PerTaskConfig) -> None:
    from hrm_deeploop.pertask.inprocess import prepared

    prepared(cfg)  # what a worker builds at its start, before any task's clock
    tasks = plan.load_challenges(cfg.challenges)
    for tid in sorted(tasks):
        work = plan.task_dir(Path(cfg.output_dir), tid) / worker.WORK
        work.mkdir(parents=True)
        worker._solve(cfg, tid, tasks[tid], math.inf, work)


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--checkpoint", "--challenges", "--out"):
        p.add_argument(flag, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--num-aug", type=int, default=3)
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4])
    a = p.parse_args()
    torch.set_num_threads(1)
    rows, results = [], {}
    for k in a.ks:
        out = Path(a.out) / f"k{k}"
        shutil.rmtree(out, ignore_errors=True)
        cfg = config(a, out, k)
        load = os.getloadavg()[0]
        c0, w0 = time.process_time(), time.perf_counter()
        if k == 1:
            one_at_a_time(cfg)
        else:
            build_lanes.run_shard(cfg, 0, 1)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        tasks = sorted(plan.load_challenges(a.challenges))
        results[k] = {t: {x: v for x, v in plan.finished(out, t).items() if x not in TIMES} for t in tasks}
        rows.append({"K": k, "tasks": len(tasks), "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                     "cpu_s_per_task": round(cpu / len(tasks), 3), "load_at_start": round(load, 2),
                     "same_as_K1": results[k] == results[a.ks[0]]})
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["cpu_s"]
    for r in rows:
        print(f"K={r['K']}: {r['cpu_s']:.1f} CPU s ({base / r['cpu_s']:.2f}x K={rows[0]['K']}), wall {r['wall_s']:.1f} s, "
              f"load {r['load_at_start']}, results identical to K={rows[0]['K']}: {r['same_as_K1']}")


if __name__ == "__main__":
    main()
