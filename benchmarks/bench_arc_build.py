"""Benchmark `build-arc`: wall time, peak RSS and examples/s, materialised and compact; with
`--reference`, side by side with HRM's own `dataset/build_arc_dataset.py` on the same raw tasks.

    PYTHONPATH=. python benchmarks/bench_arc_build.py                       # ARC-AGI-1, num_aug=1000
    PYTHONPATH=. python benchmarks/bench_arc_build.py --sources arc1 /path/arc-agi_concept_challenges.json
    PYTHONPATH=. python benchmarks/bench_arc_build.py --reference benchmarks/out/hrm-reference --num-aug 200 --repeats 3
    PYTHONPATH=. python benchmarks/bench_arc_build.py --reference benchmarks/out/hrm-reference --num-aug 200 --jit-too

Each build runs in its own subprocess (`python -m hrm_deeploop.cli build-arc ...`, so CLI and
import costs count); its peak RSS is the child's `ru_maxrss` from `os.wait4` (which covers the
child and any processes it waited for). A tiny warm-up build first fills numba's cache, so the
timed builds do not include JIT compilation (a fresh checkout compiles once, ~10-20 s) nor the
ahead-of-time module's (arc_data/native.py, ~4 s once); `--jit-too` times ours without that module too.
Reference (HRM spec 1.8, same 2-core machine): HRM's builder took 462 s / 12.3 GB for ARC-AGI-1 and
526 s / 21 GB with ConceptARC.

With `--reference CHECKOUT` (a checkout of sapientinc/HRM, not shipped) the sources are first written
as one original-layout folder (`<dir>/<subset>/<task>.json`), which both builders then read; HRM's
`convert_dataset` runs in its own subprocess (its `argdantic` command line replaced by a stand-in),
ours as the CLI, materialised. Each repetition runs both, alternating which goes first, so both
see the same machine load; the ratios are given of the medians and of the minima (on a machine
shared with other work the minimum is the run least disturbed), with the 1-minute load average
before each repetition.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# HRM's builder in a child process: its command-line module stubbed, convert_dataset called directly.
REFERENCE_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from benchmarks.benchlib import stub_argdantic
stub_argdantic()
sys.path.insert(0, {dataset!r})
import build_arc_dataset as ref
ref.convert_dataset(ref.DataProcessConfig(dataset_dirs=[{raw!r}], output_dir={out!r}, num_aug={num_aug}, seed={seed}))
"""


def run_child(cmd: list[str], extra_env: dict | None = None) -> tuple[float, object, str]:
    """Run `cmd`; (wall seconds, its own rusage, stdout). Exits with its stderr if it fails."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(extra_env or {}))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (peak RSS)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out_text, err_text = fo.read(), fe.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{cmd[:4]} failed ({os.waitstatus_to_exitcode(status)}):\n{err_text[-3000:]}")
    return wall, usage, out_text


def run_build(sources: list[str], out: Path, num_aug: int, materialize: bool, seed: int, jit: bool = False) -> dict:
    """One build in its own process; `jit`: with the builder's kernels through numba's JIT
    (HRM_DEEPLOOP_NATIVE=0) instead of their ahead-of-time module (arc_data/native.py)."""
    cmd = [
        sys.executable, "-m", "hrm_deeploop.cli", "build-arc",
        f"sources=[{','.join(sources)}]", f"output_dir={out}", f"num_aug={num_aug}", f"seed={seed}",
        f"materialize={str(materialize).lower()}", "overwrite=true", "progress=false",
    ]
    wall, usage, out_text = run_child(cmd, {"HRM_DEEPLOOP_NATIVE": "0"} if jit else None)
    manifest = json.loads((out / "manifest.json").read_text())
    examples = sum(c["examples"] for c in manifest["counts"].values())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "layout": manifest["layout"],
        "wall_s": wall,
        "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9,  # ru_maxrss is KiB on Linux
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "examples": examples,
        "examples_per_s": examples / wall,
        "puzzle_identifiers": manifest["num_puzzle_identifiers"],
        "short_groups": len(manifest["short_groups"]),
        "disk_gb": size / 1e9,
        "summary": out_text.strip(),
    }


def run_reference(ref_dir: Path, raw: Path, out: Path, num_aug: int, seed: int) -> dict:
    code = REFERENCE_CHILD.format(repo=str(REPO), dataset=str(ref_dir / "dataset"), raw=str(raw), out=str(out),
                                  num_aug=num_aug, seed=seed)
    wall, usage, _ = run_child([sys.executable, "-c", code])
    return {"wall_s": wall, "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9, "cpu_s": usage.ru_utime + usage.ru_stime}


def spread(xs: list[float]) -> str:
    """median (min-max) of a list of seconds or gigabytes."""
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def compare(args, work: Path) -> None:
    """Ours against HRM's builder, interleaved repetitions on the same raw folder."""
    ref_dir = args.reference.resolve()
    if not (ref_dir / "dataset" / "build_arc_dataset.py").is_file():
        sys.exit(f"--reference {ref_dir}: no dataset/build_arc_dataset.py there")
    raw = work / "raw"
    # In a child: Linux counts the parent's RSS at fork in a child's ru_maxrss, so this process stays small.
    _, _, n = run_child([sys.executable, "-c", "from benchmarks.compare_reference_arc_build import write_raw; "
                         f"print(write_raw(__import__('pathlib').Path({str(raw)!r}), {list(args.sources)!r}))"])
    run_build([str(raw)], work / "warmup", 1, True, args.seed)  # numba cache, page cache of the raw files
    shutil.rmtree(work / "warmup")
    if args.jit_too:
        run_build([str(raw)], work / "warmup", 1, True, args.seed, jit=True)
        shutil.rmtree(work / "warmup")
    sides = ["ours", "JIT", "HRM"] if args.jit_too else ["ours", "HRM"]
    runs: dict[str, list[dict]] = {who: [] for who in sides}
    loads = []
    for r in range(args.repeats):
        loads.append(os.getloadavg()[0])
        order = sides if r % 2 == 0 else sides[::-1]
        for who in order:
            out = work / who
            os.sync()  # the other builder's writes on disk first: each build starts with no write-back pending
            if who != "HRM":
                res = run_build([str(raw)], out, args.num_aug, True, args.seed, jit=who == "JIT")
            else:
                res = run_reference(ref_dir, raw, out, args.num_aug, args.seed)
            runs[who].append(res)
            print(f"  repetition {r + 1} {who:<4}: wall {res['wall_s']:.2f} s, cpu {res['cpu_s']:.2f} s, "
                  f"peak RSS {res['peak_rss_gb']:.2f} GB (load average {loads[-1]:.2f})", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    print(f"\n# build-arc vs HRM's build_arc_dataset.py: {' + '.join(args.sources)} ({n.strip()} tasks) written as one "
          f"folder, num_aug={args.num_aug}, seed={args.seed}, {args.repeats} interleaved repetitions "
          f"(1-min load average {min(loads):.2f}-{max(loads):.2f}); median (min-max)")
    for key, label in (("wall_s", "wall s"), ("cpu_s", "cpu s"), ("peak_rss_gb", "peak RSS GB")):
        ref = [x[key] for x in runs["HRM"]]
        for who in sides[:-1]:
            ours = [x[key] for x in runs[who]]
            print(f"{label:<12} {who:<4} {spread(ours):<24} HRM {spread(ref):<26} "
                  f"ratio HRM/{who} {statistics.median(ref) / statistics.median(ours):.1f}x (of medians), "
                  f"{min(ref) / min(ours):.1f}x (of minima)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="+", default=["arc1"])
    ap.add_argument("--num-aug", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workdir", default=None, help="where to build (default: a temp dir, removed after)")
    ap.add_argument("--only", choices=["materialized", "compact"], default=None)
    ap.add_argument("--reference", type=Path, default=None,
                    help="a checkout of github.com/sapientinc/HRM: time its builder against ours instead")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions with --reference")
    ap.add_argument("--jit-too", action="store_true",
                    help="with --reference: also time ours with the kernels through numba's JIT (HRM_DEEPLOOP_NATIVE=0)")
    args = ap.parse_args()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-arc-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.reference is not None:
            compare(args, work)
            return
        t0 = time.perf_counter()
        run_build(args.sources, work / "warmup", 1, True, args.seed)
        print(f"warm-up (imports, source loading, numba cache check): {time.perf_counter() - t0:.1f} s")
        layouts = [args.only] if args.only else ["materialized", "compact"]
        for layout in layouts:
            r = run_build(args.sources, work / layout, args.num_aug, layout == "materialized", args.seed)
            print(f"\n[{layout}] sources={args.sources} num_aug={args.num_aug} seed={args.seed}")
            print(f"  wall {r['wall_s']:.1f} s   cpu {r['cpu_s']:.1f} s   peak RSS {r['peak_rss_gb']:.2f} GB")
            print(f"  {r['examples']:,} examples, {r['examples_per_s']:,.0f} examples/s, "
                  f"{r['puzzle_identifiers']:,} puzzle ids, {r['short_groups']} short groups, "
                  f"{r['disk_gb']:.3f} GB on disk")
            shutil.rmtree(work / layout, ignore_errors=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
