"""`ttt time_budget=` against the wall clock, for 1 and 2 workers (issue 59: a budget that holds).

Each cell runs the whole command in a subprocess (its Python start included) on a set of small
synthetic ARC tasks with a tiny pretrained HRM (made here unless --checkpoint is given), the
preset's sizes (`preset=auto`: cpu on this machine) or `--steps`, and prints the budget, the wall
clock, their ratio, the tasks trained / fallen back, and the load average before and after.

    python benchmarks/bench_ttt_budget.py --out /tmp/bench_ttt --budgets 1 2 --workers 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def tasks(seed: int, n: int, prefix: str) -> dict[str, dict]:
    """n colour-map tasks of 3x3 grids: two demonstrations, one test input (answers kept apart)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = [{"input": (g := rng.integers(0, 10, size=(3, 3))).tolist(), "output": perm[g].tolist()}
                 for _ in range(3)]
        out[f"{prefix}{i:02d}"] = {"train": pairs[:2], "test": pairs[2:]}
    return out


def write_set(folder: Path, name: str, ts: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"arc-agi_{name}_challenges.json"
    path.write_text(json.dumps({k: {"train": t["train"], "test": [{"input": p["input"]} for p in t["test"]]}
                                for k, t in ts.items()}))
    (folder / f"arc-agi_{name}_solutions.json").write_text(json.dumps({k: [p["output"] for p in t["test"]]
                                                                        for k, t in ts.items()}))
    return path


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", *args], env=env, capture_output=True, text=True)


TO_GO = re.compile(r"about ([0-9.]+) min to go")


def timed_ttt(args: list[str], env: dict) -> tuple[int, float, list[tuple[float, float]], str]:
    """The command's exit code, its wall clock, and for each task line that printed an estimate
    (seconds since the start, the estimated seconds to go); stderr."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", "ttt", *args], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    said = []
    for line in p.stdout:
        if m := TO_GO.search(line):
            said.append((time.monotonic() - t0, 60 * float(m.group(1))))
    err = p.stderr.read()
    return p.wait(), time.monotonic() - t0, said, err


def pretrain(out: Path, env: dict) -> Path:
    """A tiny HRM pretrained 20 steps on 6 other tasks (hidden 32, one H and one L layer)."""
    raw = write_set(out / "raw", "training", tasks(0, 6, "pre"))
    for args in (["build-arc", f"sources=[{raw}]", f"output_dir={out / 'pre'}", "num_aug=8", "progress=false"],
                 ["train", "experiment=hrm_tiny_cpu", "logger=none", "device=cpu", "train.progress=false",
                  "model.hidden_size=32", "model.num_heads=2", "model.num_h_layers=1", "model.num_l_layers=1",
                  "model.halt_max_steps=2", "train.global_batch_size=8", "optim.warmup_steps=2",
                  f"data_dir={out / 'pre'}", f"output_dir={out / 'run'}", "train.max_steps=20"]):
        r = cli(*args, env=env)
        if r.returncode != 0:
            sys.exit(f"{args[0]} failed: {r.stderr[-2000:]}")
    return out / "run"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_ttt_budget"))
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--budgets", type=float, nargs="+", default=[1.0, 2.0], help="minutes")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=None, help="steps a task (default: the preset's)")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    a.out.mkdir(parents=True, exist_ok=True)
    ckpt = a.checkpoint or pretrain(a.out, env)
    chal = write_set(a.out / "raw", "evaluation", tasks(1, a.tasks, "new"))
    print(f"{a.tasks} tasks, checkpoint {ckpt}, {os.cpu_count()} CPU(s)")
    print("| workers | budget | wall clock | wall / budget | ttt's own count | trained | fallback | time to go: mean, "
          "largest error | load before, after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workers in a.workers:
        for minutes in a.budgets:
            out = a.out / f"w{workers}_b{minutes:g}"
            shutil.rmtree(out, ignore_errors=True)
            load0 = os.getloadavg()[0]
            rc, wall, said, err = timed_ttt([f"checkpoint={ckpt}", f"challenges={chal}", f"output_dir={out}",
                                             "device=cpu", f"workers={workers}", "threads=1", "progress=false",
                                             f"time_budget={minutes}", *([f"steps={a.steps}"] if a.steps else [])], env)
            if rc != 0:
                print(f"ttt failed ({rc}): {err[-1000:]}")
                continue
            errors = [abs(wall - at - to_go) for at, to_go in said]  # estimated against the true time to go
            eta = f"{np.mean(errors):.1f} s, {max(errors):.1f} s" if errors else "-"
            s = json.loads((out / "ttt_summary.json").read_text())
            trained = sum(n for k, n in s["status"].items() if k.startswith("trained"))
            print(f"| {workers} | {60 * minutes:.0f} s | {wall:.1f} s | {wall / (60 * minutes):.3f} | "
                  f"{s.get('wall_seconds', float('nan')):.1f} s | {trained} | {s['status'].get('fallback', 0)} | {eta} | "
                  f"{load0:.1f}, {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
