"""Benchmark `build-arc`: wall time, peak RSS and examples/s, materialised and compact.

    PYTHONPATH=. python benchmarks/bench_arc_build.py                       # ARC-AGI-1, num_aug=1000
    PYTHONPATH=. python benchmarks/bench_arc_build.py --sources arc1 /path/arc-agi_concept_challenges.json

Each build runs in its own subprocess (`python -m hrm_deeploop.cli build-arc ...`, so CLI and
import costs count); its peak RSS is the child's `ru_maxrss` from `os.wait4` (which covers the
child and any processes it waited for). A tiny warm-up build first fills numba's cache, so the
timed builds do not include JIT compilation (a fresh checkout compiles once, ~10-20 s).
Reference (HRM spec 1.8, same 2-core machine): HRM's builder took 462 s / 12.3 GB for ARC-AGI-1 and
526 s / 21 GB with ConceptARC.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_build(sources: list[str], out: Path, num_aug: int, materialize: bool, seed: int) -> dict:
    cmd = [
        sys.executable, "-m", "hrm_deeploop.cli", "build-arc",
        f"sources=[{','.join(sources)}]", f"output_dir={out}", f"num_aug={num_aug}", f"seed={seed}",
        f"materialize={str(materialize).lower()}", "overwrite=true", "progress=false",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (peak RSS)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out_text, err_text = fo.read(), fe.read()
    if proc.returncode != 0:
        sys.exit(f"build failed ({proc.returncode}):\n{err_text}")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", nargs="+", default=["arc1"])
    ap.add_argument("--num-aug", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workdir", default=None, help="where to build (default: a temp dir, removed after)")
    ap.add_argument("--only", choices=["materialized", "compact"], default=None)
    args = ap.parse_args()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-arc-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
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
