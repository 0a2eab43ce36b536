"""K tasks' reasoner copies at once (`pertask.reasoner_copies.ReasonerCopies`) against one lone
`Trainer` step at a time (docs/notebook/2026-12-06-reasoner-copies.md).

    python benchmarks/bench_reasoner_copies.py --sizes tiny,cpu --ks 1,4,8 --steps 4

For each size a checkpoint is pretrained for one step on synthetic ARC tasks and each of 8 new
tasks is built alone (`build-arc`, 2 views, as `ttt` builds a task); then one process per (size, K)
(K = 0: the lone trainer) builds its trainers, takes one warm-up step, and times `--steps` steps:
CPU seconds (user + sys of the process, one thread) and wall seconds per copy-step, and the
process's peak RSS (the slope over K is the memory per copy). Sizes: `tiny` (the tests' HRM:
hidden 32, 1 + 1 layers, halt_max_steps 2), `cpu` (experiment=hrm_tiny_cpu: hidden 64, 2 + 2
layers, halt_max_steps 4); batch 8 (ttt's `cpu` preset), sequence 900 + the puzzle prefix.
The load average is printed at the start of each measurement (the machine may be shared).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # arc_data and hrm_deeploop from this checkout

SIZES = {
    "tiny": ["experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_heads=2", "model.num_h_layers=1",
             "model.num_l_layers=1", "model.halt_max_steps=2"],
    "cpu": ["experiment=hrm_tiny_cpu"],
}
COMMON = ["logger=none", "device=cpu", "train.progress=false"]
TASKS = 8
BATCH = 8


def _tasks(seed: int, n: int, prefix: str) -> dict[str, dict]:
    """Tasks of 3 pairs of 3x3 grids, each a fixed colour permutation."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = [{"input": (g := rng.integers(0, 10, size=(3, 3))).tolist(), "output": perm[g].tolist()}
                 for _ in range(4)]
        out[f"{prefix}{i:02d}"] = {"train": pairs[:3], "test": [{"input": p["input"]} for p in pairs[3:]]}
    return out


def setup(root: Path, size: str) -> None:
    """The pretrained checkpoint (one step) and TASKS one-task datasets under `root`."""
    from arc_data.arc.build import BuildConfig, build
    from arc_data.files.jsonio import save_json
    from hrm_deeploop.cli import run_subcommand

    pre = _tasks(0, 3, "pre")
    for t in pre.values():  # labelled: the pretraining build trains on its test pairs too
        t["test"] = [{"input": t["train"][0]["input"]}]
    (root / "pre").mkdir()
    save_json(root / "pre" / "arc-agi_task_challenges.json", pre)
    build(BuildConfig(sources=[str(root / "pre" / "arc-agi_task_challenges.json")], output_dir=str(root / "pre_data"), test_labels="optional",
                      num_aug=1, seed=0, progress=False))
    rc = run_subcommand("train", [*SIZES[size], *COMMON, f"data_dir={root / 'pre_data'}", f"output_dir={root / 'run'}",
                                  "train.max_steps=1", "train.global_batch_size=4", "optim.warmup_steps=1"])
    assert rc == 0, "pretraining failed"
    for tid, task in _tasks(1, TASKS, "new").items():
        chal = root / tid / "arc-agi_task_challenges.json"
        chal.parent.mkdir()
        save_json(chal, {tid: task})
        build(BuildConfig(sources=[str(chal)], output_dir=str(root / f"data_{tid}"),
                          test_labels="optional", eval_name="task", num_aug=2, seed=0, progress=False))


def trainers(root: Path, size: str, k: int) -> list:
    import torch

    from hrm_deeploop import runtime
    from hrm_deeploop.cli import compose, prepare
    from hrm_deeploop.training import reasoner

    env = runtime.Env(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), fused_kernel=False)
    out = []
    for i in range(k):
        tid = f"new{i % TASKS:02d}"
        ov = [*SIZES[size], *COMMON, f"init_from={root / 'run'}", f"data_dir={root / f'data_{tid}'}",
              f"output_dir={root / 'unused'}", "train.max_steps=100", f"train.global_batch_size={BATCH}",
              "adapt.trains=all", f"seed={i}", "train.epochs_per_iter=4"]
        out.append(reasoner.build(compose("train", prepare("train", ov)), env))
    return out


def measure(root: Path, size: str, k: int, steps: int) -> dict:
    """One process's measurement (K = 0: the lone trainer)."""
    import torch

    from hrm_deeploop.pertask.reasoner_copies import ReasonerCopies

    torch.set_num_threads(1)
    ts = trainers(root, size, max(k, 1))
    if k == 0:
        step = ts[0].train_step
    else:
        lanes = ReasonerCopies(k, torch.device("cpu"))
        for i, t in enumerate(ts):
            lanes.open(i, t)
        step = lanes.step
    step()  # warm-up
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(steps):
        step()
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    copies = max(k, 1) * steps
    return {"size": size, "k": k, "cpu_s_per_copy_step": (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / copies,
            "wall_s_per_copy_step": (w1 - w0) / copies, "peak_rss_mib": r1.ru_maxrss / 1024,
            "load": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,cpu")
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--one", nargs=3, metavar=("ROOT", "SIZE", "K"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(Path(a.one[0]), a.one[1], int(a.one[2]), a.steps)))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes.split(","):
            root = Path(tmp) / size
            root.mkdir()
            with contextlib.redirect_stdout(sys.stderr):  # the builds' and the pretraining's lines
                setup(root, size)
            for k in [0, *map(int, a.ks.split(","))]:
                load = os.getloadavg()
                out = subprocess.run([sys.executable, __file__, "--one", str(root), size, str(k), "--steps",
                                      str(a.steps)], env=env, capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1]) | {"load_at_start": load}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| size | K | CPU s / copy-step | wall s / copy-step | x lone (CPU) | peak RSS MiB | load at start |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        lone = next(x for x in rows if x["size"] == r["size"] and x["k"] == 0)
        print(f"| {r['size']} | {r['k'] or 'lone'} | {r['cpu_s_per_copy_step']:.3f} | {r['wall_s_per_copy_step']:.3f} | "
              f"{lone['cpu_s_per_copy_step'] / r['cpu_s_per_copy_step']:.2f} | {r['peak_rss_mib']:.0f} | "
              f"{' '.join(f'{x:.1f}' for x in r['load_at_start'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
