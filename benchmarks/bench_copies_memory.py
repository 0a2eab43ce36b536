"""Memory a copy takes in `ttt copies=0` / `official.copies=0`, as the probe measures it
(hrm_deeploop/pertask/sizing.py), the K it chooses on this machine and with 24 GiB, and the probe's
figure checked against the peaks of the same lanes at K = 1, 2, 4, 8 (docs/notebook/2026-12-06-copies-memory.md).

    python benchmarks/bench_copies_memory.py all --out /tmp/copies-mem     # every case, one process each
    python benchmarks/bench_copies_memory.py one --case build-vit-cpu --out /tmp/copies-mem

Cases: official-vit-{tiny,cpu} (the official loop's copies: the tiny LoopViT, batch 8, canvas 16 / 32),
build-vit-{tiny,cpu} (views=build: `loopvit_tiny_cpu` / `loopvit_pretrain_cpu`, trained 2 steps on
made-up tasks), build-hrm-{tiny,cpu} (the tests' tiny HRM / `hrm_pretrain_cpu`); views=build at the
`cpu` preset's sizes (batch 8, 8 views). One torch thread; each case in a fresh process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.arc_synth: the Kaggle files of made-up tasks
GIB = 2 ** 30
MIB = 2 ** 20
CASES = ("official-vit-tiny", "official-vit-cpu", "build-vit-tiny", "build-vit-cpu", "build-hrm-tiny", "build-hrm-cpu")
TRAIN = {  # views=build: the checkpoint's trainer and its arguments (data_dir and output_dir added)
    "build-vit-tiny": ("train-vit", ["experiment=loopvit_tiny_cpu", "model.block=vanilla", "model.dropout=0.1"]),
    "build-vit-cpu": ("train-vit", ["experiment=loopvit_pretrain_cpu", "model.block=vanilla", "model.dropout=0.1"]),
    "build-hrm-tiny": ("train", ["experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_heads=2",
                                 "model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2",
                                 "train.global_batch_size=8"]),
    "build-hrm-cpu": ("train", ["experiment=hrm_pretrain_cpu"]),
}


def _tasks(seed: int, n: int, prefix: str, labelled: bool = False) -> dict[str, dict]:
    """`n` made-up tasks (a colour permutation of 3 x 3 grids, three demonstrations)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = [{"input": (g := rng.integers(0, 10, size=(3, 3))).tolist(), "output": perm[g].tolist()}
                 for _ in range(4)]
        out[f"{prefix}{i:02d}"] = {"train": pairs[:3], "test": pairs[3:] if labelled else [{"input": pairs[3]["input"]}]}
    return out


def peaks_at(step_k, build, device, ks=(1, 2, 4, 8)) -> dict[int, float]:
    """The peak memory (MiB over the baseline) of `step_k(k, held)` at each k, as `sizing.measure` reads it."""
    from hrm_deeploop.pertask import sizing

    meter = sizing.Meter(device)
    meter.start()
    held = build() if build else None
    meter.start_again()
    own = meter.now() - meter.base
    out = {}
    for k in ks:
        meter.reset()
        step_k(k, held)
        out[k] = round((meter.peak() - own) / MIB, 1)
    return out


def one(a: argparse.Namespace) -> int:
    from hrm_deeploop import runtime
    from hrm_deeploop.pertask import sizing

    torch.set_num_threads(1)
    runtime.keep_freed_memory()  # as every ttt process that trains
    cpu = torch.device("cpu")
    work = Path(a.out) / a.case
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.process_time()
    if a.case.startswith("official"):
        from hrm_deeploop.models.loopvit import LoopViT
        from hrm_deeploop.models.loopvit_config import flavour
        from hrm_deeploop.pertask.copies import probe_step

        size = 16 if a.case.endswith("tiny") else 32
        model = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, image_size=size, dropout=0.1))
        step_k = lambda k, _: probe_step(model, k, cpu, 8, 3e-4)  # noqa: E731
        meter = sizing.Meter(cpu)
        fp = sizing.measure(step_k, cpu, meter)
        probe_cpu = time.process_time() - t0
        k_here = sizing.choose(fp, meter.free, 8, 400, cpu, "official.copies=0")
        slope = peaks_at(step_k, None, cpu)
    else:
        from hrm_deeploop.cli import run_subcommand
        from hrm_deeploop.pertask import build_lanes, checks, inprocess, plan
        from hrm_deeploop.pertask.ttt_config import PerTaskConfig

        name, args = TRAIN[a.case]
        from tests.arc_synth import write_kaggle

        pre = write_kaggle(work / "raw", "arc-agi_training", _tasks(0, 3, "pre", labelled=True), solutions=True)
        from arc_data.arc.build import BuildConfig, build

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            build(BuildConfig(sources=[str(pre)], output_dir=str(work / "pre"), num_aug=1, seed=0, progress=False))
            assert run_subcommand(name, [*args, "device=cpu", "logger=none", "train.progress=false",
                                         "train.max_steps=2", "train.time_budget=null", f"data_dir={work / 'pre'}",
                                         f"output_dir={work / 'run'}"]) == 0
        chal = write_kaggle(work / "raw", "arc-agi_evaluation", _tasks(1, 8, "t"), solutions=False)
        cfg = PerTaskConfig(checkpoint=str(work / "run"), challenges=str(chal), output_dir=str(work / "ttt"),
                            preset="cpu", workers=1, threads=1, device="cpu", progress=False,
                            protocol="transductive", copies=0)
        with contextlib.redirect_stdout(io.StringIO()):
            checks.before_the_first_task(cfg)
        tasks = plan.load_challenges(chal)
        pending = deque(sorted(tasks))
        (work / "ttt").mkdir()
        env = runtime.setup("cpu")
        from hrm_deeploop import families

        cls = build_lanes.lanes_class(families.of_checkpoint(cfg.checkpoint))
        prep = inprocess.prepared(cfg)
        t0 = time.process_time()
        meter = sizing.Meter(cpu)
        fp, why = build_lanes.probe(cfg, tasks, pending, cls, env, meter)
        assert fp is not None, why
        probe_cpu = time.process_time() - t0
        k_here = sizing.choose(fp, meter.free, build_lanes.AUTO_MAX["cpu"], len(pending), cpu, "copies=0")
        tid = pending[0]
        probe_dir = work / "probe"

        def held():
            group, ch = inprocess.build_task(cfg, tid, tasks[tid], probe_dir)
            train_cfg, _ = prep.task_configs(probe_dir, float("inf"), group, ch, inprocess.eval_batch)
            return inprocess.build_trainer(prep, train_cfg, env)

        def step_k(k, trainer):
            lanes = cls(k, cpu)
            for i in range(k):
                lanes.open(i, trainer)
            lanes.step()

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            slope = peaks_at(step_k, held, cpu)
        runtime.teardown()
    in24 = int((24 * GIB - fp.fixed) // fp.per_copy)  # the whole 24 GiB for copies
    slope_per = (slope[8] - slope[2]) / 6
    row = {"case": a.case, "probe_peaks_mib": [round(x / MIB, 1) for x in fp.peaks],
           "per_copy_mib": round(fp.per_copy / MIB, 1), "fixed_mib": round(fp.fixed / MIB, 1),
           "probe_cpu_s": round(probe_cpu, 2), "k_here": k_here, "available_mib": round(meter.free / MIB),
           "kept_mib": round(fp.kept / MIB, 2),  # what the worker keeps between tasks (views=build's Reuse)
           "k_24gib_half": int((sizing.RESERVE * 24 * GIB - fp.fixed - fp.kept) // fp.per_copy), "k_24gib_whole": in24,
           "peaks_mib": slope, "slope_2_8_mib": round(slope_per, 1),
           "k_24gib_whole_by_slope": int((24 * GIB - (slope[2] - 2 * slope_per) * MIB) // (slope_per * MIB)),
           "load": os.getloadavg()}
    print("ROW " + json.dumps(row), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("all", "one"))
    p.add_argument("--case", choices=CASES)
    p.add_argument("--out", default="/tmp/copies-mem")
    a = p.parse_args(argv)
    if a.mode == "one":
        return one(a)
    for case in CASES:
        t0 = os.times()
        r = subprocess.run([sys.executable, __file__, "one", "--case", case, "--out", a.out], capture_output=True,
                           text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        t1 = os.times()
        cpu = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
        rows = [x[4:] for x in r.stdout.splitlines() if x.startswith("ROW ")]
        line = [x for x in r.stdout.splitlines() if "K = " in x]
        print(json.dumps({"case": case, "rc": r.returncode, "process_cpu_s": round(cpu, 1),
                          "row": json.loads(rows[0]) if rows else None, "line": line[:1]}), flush=True)
        if r.returncode:
            print(r.stderr[-2000:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
