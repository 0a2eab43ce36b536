"""Our Sudoku/Maze builder (`build-puzzles`) against HRM's and TRM's own dataset builders, on the same CSVs.

Needs a checkout of the reference code, which this project does not ship:

    git clone https://github.com/sapientinc/HRM benchmarks/out/hrm-reference   # /benchmarks/out is git-ignored
    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels benchmarks/out/trm-reference  # optional
    python benchmarks/compare_reference_puzzles.py --reference benchmarks/out/hrm-reference [--quick]

The CSVs come from our generators (`generate-puzzles`), in the official layout. Three parts:

1. Equivalence. Where the reference is deterministic, every file must be byte-identical:
   Sudoku 9x9 at num_aug=0 (all rows, and with min_difficulty), Maze 30x30 and 15x15 with and
   without its `aug` (all eight dihedral transforms, our num_aug=7). Compared: every `.npy` and
   identifiers.json byte for byte; dataset.json byte for byte with TRM's builder, and with HRM's
   after dropping `total_puzzles` (TRM's one addition, which we write so that TRM can read our sets).
2. Validity of every augmented puzzle we write (the references draw from the unseeded global RNG,
   so their augmentations cannot be compared): each augmented Sudoku solution is a solved board that
   agrees with its givens; each augmented maze's marked path is a shortest S->G path (BFS); and the
   augmentation table maps each original CSV row onto its puzzle row (so an evaluator can invert it).
3. Timing at the published sizes (the dataset cards: Sudoku-Extreme train 3.8M / test 423k rows;
   Maze-Hard 1000 / 1000), on generated CSVs of those row counts (a few thousand generated puzzles,
   repeated under random Sudoku symmetries): each builder runs in its own child process, started by
   a small stdlib-only process; wall time and that child's peak RSS (`os.wait4` rusage, i.e.
   RUSAGE_CHILDREN of the one child) are printed. Our numba kernels are compiled (cached) first.

`--quick` shrinks every size (the smoke test); `--no-timing` skips part 3.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

REF_MODULES = ("common", "build_sudoku_dataset", "build_maze_dataset")
ARRAYS = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")

# (name, task, train rows, test rows, subsample_size, num_aug): the published setups (HRM/TRM READMEs)
SETUPS = [
    ("sudoku-extreme-full", "sudoku", 3_800_000, 423_000, None, 0),
    ("sudoku-extreme-1k-aug-1000", "sudoku", 3_800_000, 423_000, 1000, 1000),
    ("maze-30x30-hard-1k (aug)", "maze", 1000, 1000, None, 7),
]
QUICK_SETUPS = [
    ("sudoku-full (quick)", "sudoku", 20_000, 4000, None, 0),
    ("sudoku-1k-aug (quick)", "sudoku", 20_000, 4000, 100, 100),
    ("maze-30x30 (quick)", "maze", 100, 100, None, 7),
]


# ---------------------------------------------------------------------------------------------
# running the reference builders


def load_reference(ref_dir: Path, module: str):
    """Import `<ref>/dataset/<module>.py` fresh (HRM and TRM both name theirs `common`, `build_*`)."""
    from benchmarks.refstubs import stub_argdantic, stub_huggingface_hub, stub_pydantic

    stub_argdantic()
    stub_pydantic()
    stub_huggingface_hub()
    for name in REF_MODULES:
        sys.modules.pop(name, None)
    sys.path.insert(0, str(ref_dir / "dataset"))
    try:
        mod = importlib.import_module(module)
    finally:
        sys.path.remove(str(ref_dir / "dataset"))
    # the builders call hf_hub_download(repo, "<split>.csv", repo_type="dataset"): repo = our folder
    mod.hf_hub_download = lambda repo_id, filename, repo_type=None, **kw: os.path.join(repo_id, filename)
    return mod


def run_reference(ref_dir: Path, task: str, csv_dir: Path, out: Path, num_aug: int = 0,
                  subsample_size: int | None = None, min_difficulty: int | None = None) -> None:
    mod = load_reference(ref_dir, f"build_{task}_dataset")
    kw = {"source_repo": str(csv_dir), "output_dir": str(out), "subsample_size": subsample_size}
    if task == "sudoku":
        cfg = mod.DataProcessConfig(**kw, min_difficulty=min_difficulty, num_aug=num_aug)
    else:
        if min_difficulty is not None:
            raise ValueError("the reference maze builder has no min_difficulty")
        cfg = mod.DataProcessConfig(**kw, aug=num_aug > 0)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for split in ("train", "test"):
            mod.convert_subset(split, cfg)


def run_ours(task: str, csv_dir: Path, out: Path, num_aug: int = 0, subsample_size: int | None = None,
             min_difficulty: int | None = None, seed: int = 0) -> None:
    from arc_data.puzzles.build import build_puzzles
    from arc_data.puzzles.puzzle_config import BuildPuzzlesConfig

    with contextlib.redirect_stdout(io.StringIO()):
        build_puzzles(BuildPuzzlesConfig(task=task, source=str(csv_dir), output_dir=str(out), num_aug=num_aug,
                                         subsample_size=subsample_size, min_difficulty=min_difficulty, seed=seed,
                                         progress=False))


# ---------------------------------------------------------------------------------------------
# CSVs


def generate_csvs(out: Path, task: str, size: int, train: int, test: int, seed: int, **knobs) -> None:
    from arc_data.puzzles.generate import generate_puzzles
    from arc_data.puzzles.puzzle_config import GeneratePuzzlesConfig

    with contextlib.redirect_stdout(io.StringIO()):
        generate_puzzles(GeneratePuzzlesConfig(task=task, size=size, count_train=train, count_test=test,
                                               output_dir=str(out), seed=seed, progress=False, **knobs))


def zero_blanks(csv_dir: Path, every: int = 3) -> None:
    """Write '0' instead of '.' for the blanks of every `every`-th row (the format allows both)."""
    for split in ("train", "test"):
        p = csv_dir / f"{split}.csv"
        lines = p.read_text().split("\n")
        for i in range(1, len(lines), every):
            if lines[i]:
                src, q, rest = lines[i].split(",", 2)
                lines[i] = f"{src},{q.replace('.', '0')},{rest}"
        p.write_text("\n".join(lines))


def expand_sudoku_csv(base_dir: Path, out: Path, rows: dict[str, int], seed: int) -> None:
    """CSVs of the given row counts: the generated puzzles of `base_dir`, repeated under random
    Sudoku symmetries (still valid, unique puzzles of the same difficulty)."""
    from arc_data import sudoku
    from arc_data.puzzles.csvfile import read_puzzle_csv

    rng = np.random.Generator(np.random.PCG64(seed))
    out.mkdir(parents=True, exist_ok=True)
    digits = np.frombuffer(b".123456789", np.uint8)
    lut = np.zeros(256, np.uint8)
    lut[digits] = np.arange(10)
    for split, count in rows.items():
        base = read_puzzle_csv(base_dir / f"{split}.csv", parse_ratings=True)
        q0, a0 = lut[base.questions], lut[base.answers]
        n = sudoku.size_of(q0.shape[1])
        with open(out / f"{split}.csv", "w") as f:
            f.write("source,question,answer,rating\n")
            for lo in range(0, count, 1 << 16):
                m = min(1 << 16, count - lo)
                pick = rng.integers(0, len(base), m)
                augs = sudoku.random_augs(rng, n, m)
                q = digits[sudoku.apply_augs(q0[pick], augs)].tobytes().decode()
                a = digits[sudoku.apply_augs(a0[pick], augs)].tobytes().decode()
                w = n * n
                f.write("".join(f"bench,{q[i * w:(i + 1) * w]},{a[i * w:(i + 1) * w]},{base.ratings[pick[i]]}\n"
                                for i in range(m)))


def expand_maze_csv(base_dir: Path, out: Path, rows: dict[str, int]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split, count in rows.items():
        lines = (base_dir / f"{split}.csv").read_text().splitlines()
        body = lines[1:]
        (out / f"{split}.csv").write_text("\n".join([lines[0]] + [body[i % len(body)] for i in range(count)]) + "\n")


# ---------------------------------------------------------------------------------------------
# part 1: equivalence


def compare_trees(ref: Path, ours: Path, drop_total_puzzles: bool) -> tuple[bool, str]:
    """Every reference file against ours, byte for byte (dataset.json: optionally without total_puzzles)."""
    diffs = []
    files = [Path("identifiers.json")] + [Path(s) / f"all__{k}.npy" for s in ("train", "test") for k in ARRAYS]
    files += [Path(s) / "dataset.json" for s in ("train", "test")]
    for rel in files:
        a = (ref / rel).read_bytes()
        b = (ours / rel).read_bytes()
        if rel.name == "dataset.json" and drop_total_puzzles:
            mine = json.loads(b)
            mine.pop("total_puzzles", None)
            b = json.dumps(mine).encode()
        if a != b:
            diffs.append(str(rel))
    n = sum(len(np.load(ours / s / "all__inputs.npy", mmap_mode="r")) for s in ("train", "test"))
    return not diffs, f"differ: {diffs}" if diffs else f"{len(files)} files, {n:,} puzzles"


def equivalence(refs: dict[str, Path], work: Path, quick: bool) -> list[tuple[str, bool, str]]:
    k = 1 if quick else 4
    sud, maze30, maze15 = work / "csv-sudoku9", work / "csv-maze30", work / "csv-maze15"
    generate_csvs(sud, "sudoku", 9, 60 * k, 20 * k, seed=1)
    zero_blanks(sud)
    generate_csvs(maze30, "maze", 30, 20 * k, 10 * k, seed=2, min_path=40, openings=0.05)
    generate_csvs(maze15, "maze", 15, 20 * k, 10 * k, seed=3)
    ratings = np.array([int(r.rsplit(",", 1)[1]) for r in (sud / "train.csv").read_text().splitlines()[1:]])
    cases = [
        ("sudoku 9x9, num_aug=0", "sudoku", sud, 0, None),
        (f"sudoku 9x9, min_difficulty={int(np.median(ratings))}", "sudoku", sud, 0, int(np.median(ratings))),
        ("maze 30x30, no aug", "maze", maze30, 0, None),
        ("maze 30x30, aug (num_aug=7)", "maze", maze30, 7, None),
        ("maze 15x15, aug (num_aug=7)", "maze", maze15, 7, None),
    ]
    checks = []
    for i, (name, task, csv_dir, num_aug, min_diff) in enumerate(cases):
        ours = work / f"eq-ours-{i}"
        run_ours(task, csv_dir, ours, num_aug=num_aug, min_difficulty=min_diff)
        for who, ref_dir in refs.items():
            ref_out = work / f"eq-{who}-{i}"
            run_reference(ref_dir, task, csv_dir, ref_out, num_aug=num_aug, min_difficulty=min_diff)
            ok, detail = compare_trees(ref_out, ours, drop_total_puzzles=who == "HRM")
            how = "byte-identical" + (" (dataset.json without total_puzzles)" if who == "HRM" else "")
            checks.append((f"{name}: {who} {how}", ok, detail))
    return checks


# ---------------------------------------------------------------------------------------------
# part 2: validity of our augmented puzzles


def check_augmented(task: str, csv_dir: Path, out: Path) -> list[tuple[str, bool, str]]:
    """Every puzzle of `out`'s train split: valid, and equal to its CSV original under its table entry."""
    from arc_data import maze, sudoku
    from arc_data.dataset import open_split
    from arc_data.puzzles.build import load_table
    from arc_data.puzzles.csvfile import read_puzzle_csv

    split = open_split(out, "train")
    table = load_table(out / "train")
    src = read_puzzle_csv(csv_dir / "train.csv")
    rows = table["source_row"]
    n = int(round(split.meta.seq_len ** 0.5))
    k = int(np.diff(split.group_indices)[0])
    groups = rows.reshape(-1, k)
    checks = [(f"{task} {n}x{n}: groups of 1 + {k - 1} augmentations of one distinct CSV puzzle each",
               bool((np.diff(split.group_indices) == k).all() and (groups == groups[:, :1]).all()
                    and len(np.unique(groups[:, 0])) == len(groups)), f"{split.num_groups:,} groups")]
    ok = {"valid": True, "agree": True, "forward": True, "back": True}
    bad_row, bad_problem = -1, ""
    digit = np.zeros(256, np.uint8)
    digit[np.frombuffer(b".0123456789", np.uint8)] = [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    chars = np.frombuffer(b"\0" + maze.CHARSET.encode(), np.uint8)
    for lo in range(0, split.num_examples, 1 << 16):  # chunks: a published-size build has 1M puzzles
        idx = np.arange(lo, min(lo + (1 << 16), split.num_examples))
        x, y = split.examples(idx)
        r = rows[idx]
        if task == "sudoku":
            q0, a0 = digit[src.questions[r]], digit[src.answers[r]]
            qd, ad = x.astype(np.int64) - 1, y.astype(np.int64) - 1  # tokens -> digits (blank 0)
            augs = sudoku.augs_of(table, idx)
            ok["valid"] &= sudoku.first_invalid_solution(ad, n) == -1
            ok["agree"] &= bool(((qd == 0) | (qd == ad)).all())
            ok["forward"] &= (np.array_equal(sudoku.apply_augs(q0, augs), qd)
                              and np.array_equal(sudoku.apply_augs(a0, augs), ad))
            ok["back"] &= (np.array_equal(sudoku.invert_augs(qd, augs), q0)
                           and np.array_equal(sudoku.invert_augs(ad, augs), a0))
        else:
            qb, ab = chars[x], chars[y]
            i, problem = maze.first_bad_maze(qb, ab, n)
            if i >= 0 and bad_row < 0:
                bad_row, bad_problem = lo + i, problem
            tids = table["dihedral"][idx]
            ok["forward"] &= np.array_equal(maze.apply_dihedral_rows(src.questions[r], tids, n), qb)
            ok["back"] &= np.array_equal(maze.invert_dihedral_rows(ab, tids, n), src.answers[r])
    total = f"{split.num_examples:,} puzzles"
    if task == "sudoku":
        checks += [
            (f"sudoku {n}x{n}: every solution is a solved board", ok["valid"], total),
            (f"sudoku {n}x{n}: every solution agrees with its givens", ok["agree"], total),
            (f"sudoku {n}x{n}: table maps each CSV original onto its row", ok["forward"], "apply_augs"),
            (f"sudoku {n}x{n}: inverse maps each row back to its CSV original", ok["back"], "invert_augs"),
        ]
    else:
        checks += [
            (f"maze {n}x{n}: every marked path is a shortest S->G path (BFS)", bad_row < 0,
             total + (f"; row {bad_row}: {bad_problem}" if bad_row >= 0 else "")),
            (f"maze {n}x{n}: table maps each CSV original onto its row", ok["forward"], "apply_dihedral_rows"),
            (f"maze {n}x{n}: inverse maps each row back to its CSV original", ok["back"], "invert_dihedral_rows"),
        ]
    return checks


def validity(work: Path, quick: bool) -> list[tuple[str, bool, str]]:
    sud6 = work / "csv-sudoku6"
    generate_csvs(sud6, "sudoku", 6, 40, 10, seed=4)
    checks = []
    for task, csv_dir, num_aug, sub in (("sudoku", work / "csv-sudoku9", 16 if quick else 64, None),
                                        ("sudoku", sud6, 16, 30), ("maze", work / "csv-maze30", 7, None)):
        out = work / f"val-{csv_dir.name}"
        run_ours(task, csv_dir, out, num_aug=num_aug, subsample_size=sub, seed=5)
        checks += check_augmented(task, csv_dir, out)
    return checks


# ---------------------------------------------------------------------------------------------
# part 3: timing in child processes


def child_main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    sub = None if args.subsample < 0 else args.subsample
    if args.child == "ours":
        run_ours(args.task, Path(args.csv), Path(args.out), num_aug=args.num_aug, subsample_size=sub)
    else:
        run_reference(Path(args.child_ref), args.task, Path(args.csv), Path(args.out), num_aug=args.num_aug,
                      subsample_size=sub)
    print(json.dumps({"seconds": time.perf_counter() - t0}))
    return 0


# A small stdlib-only process starts the timed builders: a child's ru_maxrss counts the pages of
# the process it was forked from (Linux keeps the pre-exec high-water mark), so they must not be
# forked from this script once it holds numpy/numba and the data (about 240 MB).
_DRIVER = """
import json, os, subprocess, sys, tempfile, time
out = []
for cmd in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        fo.seek(0); fe.seek(0)
        out.append({"code": os.waitstatus_to_exitcode(status), "wall": wall, "maxrss_kib": usage.ru_maxrss,
                    "stdout": fo.read().decode()[-2000:], "stderr": fe.read().decode()[-2000:]})
print(json.dumps(out))
"""


def timed_children(cmds: list[list[str]]) -> list[dict]:
    """Run each command in its own process (sequentially); wall s, build s and peak RSS MB of each."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-S", "-c", _DRIVER, json.dumps(cmds)], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, check=True)
    results = []
    for cmd, r in zip(cmds, json.loads(done.stdout)):
        if r["code"] != 0:
            raise RuntimeError(f"{' '.join(cmd[2:5])} failed (exit {r['code']}): {r['stderr'].strip()[-500:]}")
        inner = json.loads(r["stdout"].strip().splitlines()[-1])["seconds"]
        results.append({"wall": r["wall"], "build": inner, "peak_mb": r["maxrss_kib"] * 1024 / 1e6})
    return results


def child_cmd(who: str, ref_dir: Path, task: str, csv_dir: Path, out: Path, num_aug: int,
              subsample: int | None) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", who, "--child-ref", str(ref_dir),
            "--task", task, "--csv", str(csv_dir), "--out", str(out), "--num-aug", str(num_aug),
            "--subsample", str(-1 if subsample is None else subsample)]


def warm_numba_cache(csv_dir: Path, out: Path) -> None:
    """Compile (or load) the big-file kernels once here, so the timed children find them cached."""
    import arc_data.puzzles.build
    from arc_data.puzzles import csvfile

    pipeline = arc_data.puzzles.build
    saved = csvfile.NUMBA_MIN_BYTES, pipeline.NUMBA_MIN_ROWS
    csvfile.NUMBA_MIN_BYTES, pipeline.NUMBA_MIN_ROWS = -1, -1
    try:
        run_ours("sudoku", csv_dir, out)
    finally:
        csvfile.NUMBA_MIN_BYTES, pipeline.NUMBA_MIN_ROWS = saved
    shutil.rmtree(out)


def timing(ref_dir: Path, work: Path, quick: bool) -> tuple[list[list[str]], list[tuple[str, bool, str]]]:
    """The timing table, and the validity checks of our augmented outputs at these sizes."""
    rows, checks = [], []
    warm_numba_cache(work / "csv-sudoku9", work / "warm")
    base_s, base_m = work / "time-base-sudoku", work / "time-base-maze"
    generate_csvs(base_s, "sudoku", 9, 200 if quick else 2000, 50 if quick else 500, seed=6)
    generate_csvs(base_m, "maze", 30, 100 if quick else 1000, 100 if quick else 1000, seed=7, min_path=60,
                  openings=0.05)
    for name, task, n_train, n_test, sub, num_aug in (QUICK_SETUPS if quick else SETUPS):
        csv_dir = work / f"time-csv-{task}-{n_train}"
        if not csv_dir.exists():
            if task == "sudoku":
                expand_sudoku_csv(base_s, csv_dir, {"train": n_train, "test": n_test}, seed=8)
            else:
                expand_maze_csv(base_m, csv_dir, {"train": n_train, "test": n_test})
        outs = {who: work / f"time-{who}-{len(rows)}" for who in ("HRM", "ours")}
        cmds = [child_cmd("ref" if who == "HRM" else "ours", ref_dir, task, csv_dir, out, num_aug, sub)
                for who, out in outs.items()]
        res = dict(zip(outs, timed_children(cmds)))
        puzzles = {who: sum(len(np.load(out / s / "all__inputs.npy", mmap_mode="r")) for s in ("train", "test"))
                   for who, out in outs.items()}
        if puzzles["HRM"] != puzzles["ours"]:
            raise RuntimeError(f"{name}: HRM wrote {puzzles['HRM']} puzzles, we wrote {puzzles['ours']}")
        if num_aug:
            checks += [(f"{name}: {c}", ok, d) for c, ok, d in check_augmented(task, csv_dir, outs["ours"])]
        for out in outs.values():
            shutil.rmtree(out)
        rows.append([name, f"{n_train:,}/{n_test:,}", f"{puzzles['ours']:,}",
                     f"{res['HRM']['wall']:.1f} ({res['HRM']['build']:.1f})",
                     f"{res['ours']['wall']:.1f} ({res['ours']['build']:.1f})",
                     f"{res['HRM']['wall'] / res['ours']['wall']:.1f}x",
                     f"{res['HRM']['peak_mb']:,.0f}", f"{res['ours']['peak_mb']:,.0f}"])
    return rows, checks


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    print(line + "\n" + "-" * len(line))
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a checkout of github.com/sapientinc/HRM")
    parser.add_argument("--trm-reference", type=Path, default=None,
                        help="a checkout of TRM (default: trm-reference beside --reference, when present)")
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere (the smoke test)")
    parser.add_argument("--no-timing", action="store_true", help="skip the timing at the published sizes")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    # child mode (one timed build): internal
    parser.add_argument("--child", choices=("ours", "ref"), help=argparse.SUPPRESS)
    parser.add_argument("--child-ref", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--num-aug", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--subsample", type=int, default=-1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    if args.reference is None:
        parser.error("--reference is required")
    ref_dir = args.reference.resolve()
    if not (ref_dir / "dataset" / "build_sudoku_dataset.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no dataset/build_sudoku_dataset.py there")
    refs = {"HRM": ref_dir}
    trm = args.trm_reference or ref_dir.parent / "trm-reference"
    if (trm / "dataset" / "build_sudoku_dataset.py").is_file():
        refs["TRM"] = trm.resolve()
    elif args.trm_reference is not None:
        raise SystemExit(f"--trm-reference {trm}: no dataset/build_sudoku_dataset.py there")

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        checks = equivalence(refs, work, args.quick)
        checks += validity(work, args.quick)
        print(f"# build-puzzles vs {' and '.join(f'{k} ({v})' for k, v in refs.items())}")
        width = max(len(c[0]) for c in checks)
        for name, ok, detail in checks:
            print(f"{name:<{width}}  {'ok  ' if ok else 'DIFF'}  {detail}")
        if not args.no_timing:
            rows, big_checks = timing(ref_dir, work, args.quick)
            checks += big_checks
            print("\n# validity of every augmented puzzle of our builds at these sizes")
            w2 = max(len(c[0]) for c in big_checks)
            for name, ok, detail in big_checks:
                print(f"{name:<{w2}}  {'ok  ' if ok else 'DIFF'}  {detail}")
            print(f"\n# timing: HRM's builder vs ours, each in its own process; s = wall incl. interpreter start "
                  f"and imports (build call alone); speed-up of wall; peak RSS MB; {os.cpu_count()} CPUs")
            print_table(["setup", "CSV rows train/test", "puzzles written", "HRM s", "ours s", "speed-up",
                         "HRM MB", "ours MB"], rows)
    ok = all(c[1] for c in checks)
    print(f"# equivalence and validity: {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
