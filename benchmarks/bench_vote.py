"""Benchmark `hrm-deeploop vote` on a synthetic ARC-1-sized prediction set.

400 tasks x 1001 copies (the original + 1000 augmentations), 19 tasks with 2 test inputs:
419 test inputs, 419,419 prediction rows. Grids 3..30 a side. Each task has a skill s ~ U(0, 1);
each row predicts the truth (prob 0.6 s), one of two fixed wrong grids (0.25, 0.1), a one-cell
mutation of the truth in the augmented frame (a near-unique candidate), or nothing (1%).

The vote runs as a separate process (the CLI, exactly as a user runs it) so that its wall time
and peak RSS are its own:

    PYTHONPATH=. python benchmarks/bench_vote.py [--tasks 400 --copies 1001 --workdir DIR --report]
    PYTHONPATH=. python benchmarks/bench_vote.py --copies 301 --reference benchmarks/out/hrm-reference --repeats 3
    PYTHONPATH=. python benchmarks/bench_vote.py --copies 301 --workdir DIR --floor --repeats 5

With `--reference` (a checkout of sapientinc/HRM, not shipped) the same predictions are also scored
by HRM's arc_eval.ipynb: its code cells run in a child process, their `test()` timed on the
benchmark's rows. Its loader (torch.load of `<checkpoint>_all_preds.*` and the logits' argmax) is
replaced by one that hands it the same arrays already in memory, so what is timed is the notebook's
own per-row loop (crop, inverse augmentation, hash, count, rank), twice: as written (its `crop` a
numba function, compiled before the clock starts) and in plain Python (its `crop.py_func`, the
same code without numba, its result cast to the int64 numba returns). Ours is the whole `vote` CLI process with the report (imports, reading,
writing every output). Repetitions rotate which runs first; the ratios are of the medians, and
every side's pass@K must agree.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arc_data import format as fmt  # noqa: E402
from eval.predictions import save_predictions  # noqa: E402
from tests.vote_synthetic import encode_augmented, random_colour_map, write_split  # noqa: E402


def make(workdir: Path, num_tasks: int, copies: int, two_test: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)

    def g() -> np.ndarray:
        h, w = rng.integers(3, 31, size=2) if rng.random() < 0.2 else rng.integers(3, 16, size=2)
        return rng.integers(0, 10, size=(h, w)).astype(np.uint8)

    tasks = {f"{i:08x}": [(g(), g()) for _ in range(2 if i < two_test else 1)] for i in range(num_tasks)}
    augs = {
        name: [(int(rng.integers(0, 8)), random_colour_map(rng)) for _ in range(copies - 1)] for name in tasks
    }
    t0 = time.perf_counter()
    split = write_split(workdir / "data", tasks, augs)
    print(f"dataset: {len(split.example_task)} examples written in {time.perf_counter() - t0:.1f}s")

    preds = np.empty_like(split.labels)
    e_pid = split.example_puzzle_id
    for ti, pairs in enumerate(tasks.values()):
        skill = rng.random()
        for j, (_, out) in enumerate(pairs):
            rows = np.flatnonzero((split.example_task == ti) & (split.example_test == j))
            pid = e_pid[rows]
            tids, maps = split.dihedral[pid], split.colour_map[pid]
            wrong1, wrong2 = out.copy(), out.copy()
            wrong1[0, 0] = (wrong1[0, 0] + 1) % 10
            wrong2 = wrong2[:, :-1] if wrong2.shape[1] > 1 else (wrong2 + 1) % 10
            choice = rng.choice(5, size=len(rows), p=[0.6 * skill, 0.25, 0.1, 0.64 - 0.6 * skill, 0.01])
            truth = encode_augmented(out, tids, maps)
            cands = [truth, encode_augmented(wrong1, tids, maps), encode_augmented(wrong2, tids, maps)]
            block = truth.copy()
            for c in range(3):
                block[choice == c] = cands[c][choice == c]
            noisy = np.flatnonzero(choice == 3)  # mutate one cell inside the (augmented) grid
            h, w = out.shape
            flat = rng.integers(0, h * w, size=len(noisy))
            r, col = flat // w, flat % w
            swap = np.isin(tids[noisy], [1, 3, 6, 7])
            r, col = np.where(swap, col, r), np.where(swap, r, col)
            block[noisy, r * fmt.MAX_SIDE + col] = rng.integers(2, 12, size=len(noisy))
            block[choice == 4] = 0
            preds[rows] = block
    q = rng.normal(0.0, 2.0, size=len(preds)).astype(np.float32)
    path = workdir / "predictions.npz"
    save_predictions(path, split.example_puzzle_id, split.inputs, preds, q)
    print(f"predictions: {len(preds)} rows, {path.stat().st_size / 2**20:.0f} MiB")
    return path


FRESH: list[Path] = []  # output folders of --fresh runs, removed when the benchmark ends


def run_vote(workdir: Path, report: bool, fresh: bool = False) -> tuple[float, float, str, float]:
    """One vote CLI process: (wall s, peak RSS MiB, its output, CPU s: user + sys). Into workdir/out
    with overwrite=true, or with `fresh` into a new folder (kept until the benchmark ends: on ext4
    without a journal, files deleted in the last 30 s make every file created near them slower,
    0.1-0.3 s of kernel time for the report's 400 files when the same folder is rewritten within 30 s)."""
    out_dir = workdir / "out"
    if fresh:
        out_dir = Path(tempfile.mkdtemp(prefix="out_", dir=workdir)) / "out"
        FRESH.append(out_dir.parent)
    cmd = [
        sys.executable, "-m", "hrm_deeploop.cli", "vote",
        f"predictions={workdir / 'predictions.npz'}", f"data_dir={workdir / 'data'}",
        f"output_dir={out_dir}", f"report={str(report).lower()}", "overwrite=true",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"vote failed:\n{out}")
    if fresh:  # where the checks below read the results
        shutil.copyfile(out_dir / "pass_at_k.json", workdir / "pass_at_k.json")
        shutil.copyfile(out_dir / "tasks.json", workdir / "tasks.json")
    return wall, usage.ru_maxrss / 1024, out, usage.ru_utime + usage.ru_stime  # MiB (ru_maxrss is KiB on Linux)


def time_notebook(ref_dir: Path, workdir: Path, plain_python: bool) -> None:
    """Child process: HRM's arc_eval.ipynb `test()` on the benchmark's rows; prints {seconds, scores}."""
    import torch

    from benchmarks.compare_reference_vote import notebook_scope, notebook_scores
    from eval.arc.results import DEFAULT_KS
    from eval.predictions import load_predictions

    class Argmaxed:  # stands for the logits: their argmax(-1) is the predicted tokens
        def __init__(self, tokens: torch.Tensor):
            self.tokens = tokens

        def argmax(self, dim: int) -> torch.Tensor:
            return self.tokens

    p = load_predictions(workdir / "predictions.npz")
    assert (p.puzzle_identifiers != 0).all(), "no blank rows expected (the stand-in loader drops none)"
    identifiers = json.loads((workdir / "data" / fmt.IDENTIFIERS_FILE).read_text())
    arrays = {"puzzle_identifiers": torch.from_numpy(np.array(p.puzzle_identifiers)),
              "inputs": torch.from_numpy(np.array(p.inputs)),
              "labels": torch.from_numpy(np.load(workdir / "data" / "test" / fmt.LABELS_FILE)),
              "logits": Argmaxed(torch.from_numpy(np.array(p.predictions))),
              "q_halt_logits": torch.from_numpy(np.array(p.q_halt))}
    scope = notebook_scope(ref_dir)
    scope["load_identifiers_and_preds"] = lambda dataset_path, checkpoint_path: (identifiers, arrays)
    scope["crop"](np.zeros(fmt.SEQ_LEN, np.uint8))  # numba compiles it here, not on the clock
    if plain_python:  # the same function without numba, returning numba's dtype (uint8 - 2 is int64 there)
        py_crop = scope["crop"].py_func
        scope["crop"] = lambda grid: py_crop(grid).astype(np.int64)
    out = io.StringIO()
    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):
        scope["test"](visualize=False, Ks=list(DEFAULT_KS))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"seconds": seconds, "cpu": cpu, "scores": notebook_scores(out.getvalue(), list(DEFAULT_KS))}))


def precompile() -> None:
    """Our modules' byte code written now, as a wheel's install writes it: where PYTHONDONTWRITEBYTECODE
    is set (this machine's environment), a module edited since its .pyc would otherwise be compiled
    again in every timed process (11 ms for eval/arc/report.py alone)."""
    for pkg in ("eval", "arc_data", "hrm_deeploop"):
        compileall.compile_dir(str(REPO / pkg), quiet=1)


def compare(workdir: Path, ref_dir: Path, repeats: int, fresh: bool = False) -> None:
    """Ours (CLI, report on) against the notebook's test(), with and without numba; interleaved."""
    precompile()
    run_vote(workdir, report=True, fresh=fresh)  # warm-up: numba cache, page cache
    sides = ("ours", "notebook", "notebook, plain Python")
    times: dict[str, list[float]] = {side: [] for side in sides}
    cpus: dict[str, list[float]] = {side: [] for side in sides}
    scores: dict[str, dict] = {}
    loads = [os.getloadavg()[0]]  # 1-minute load average at the start and after each run: the machine is shared
    print(f"  load average at the start {loads[0]:.2f}", flush=True)
    results = workdir / ("pass_at_k.json" if fresh else "out/pass_at_k.json")
    for r in range(repeats):
        for side in sides[r % 3:] + sides[:r % 3]:
            if side == "ours":
                wall, rss, _, cpu = run_vote(workdir, report=True, fresh=fresh)
                times[side].append(wall)
                cpus[side].append(cpu)
                scores[side] = {int(k): v for k, v in json.loads(results.read_text())["hrm"].items()}
            else:
                child = [sys.executable, __file__, "--notebook-child", str(ref_dir), "--workdir", str(workdir)]
                child += ["--plain-python"] if "plain" in side else []
                res = json.loads(subprocess.run(child, check=True, capture_output=True, text=True,
                                                env=dict(os.environ, PYTHONPATH=str(REPO))).stdout.splitlines()[-1])
                times[side].append(res["seconds"])
                cpus[side].append(res["cpu"])
                scores[side] = {int(k): v for k, v in res["scores"].items()}
            loads.append(os.getloadavg()[0])
            print(f"  repetition {r + 1} {side:<22}: {times[side][-1]:.2f} s, CPU {cpus[side][-1]:.2f} s "
                  f"(load average {loads[-1]:.1f})", flush=True)
    same = all(abs(scores["ours"][k] - v) < 0.005 for side in sides[1:] for k, v in scores[side].items())
    n = json.loads((workdir / ("tasks.json" if fresh else "out/tasks.json")).read_text())["stats"]["num_rows"]
    print(f"\n# vote (whole CLI process, report on{', a fresh output folder each run' if fresh else ''}) vs HRM's "
          f"arc_eval.ipynb test(), {n:,} predictions, {repeats} interleaved repetitions: median (min-max); "
          f"pass@K equal on every side: {'yes' if same else 'NO'}; load average {min(loads):.1f}-{max(loads):.1f}")
    ours, ours_cpu = statistics.median(times["ours"]), statistics.median(cpus["ours"])
    for side in sides:
        t, c = times[side], cpus[side]
        ratio = "" if side == "ours" else (f"   ratio {statistics.median(t) / ours:.1f}x wall, "
                                          f"{statistics.median(c) / ours_cpu:.1f}x CPU")
        print(f"{side:<24} {statistics.median(t):6.2f} s ({min(t):.2f}-{max(t):.2f}), CPU {statistics.median(c):.2f} s"
              f"{ratio}")


def floor(workdir: Path, repeats: int) -> None:
    """What any process doing the vote's job pays, each side its own process, interleaved: the
    interpreter's start without `site` (-S: no .pth file runs) and with it, + numpy's import,
    + reading the predictions (memory-mapped, every page once), + writing a vote's 406 output files
    (their bytes read beforehand), + deflating the report's 400 pictures, two threads, with
    zlib's level 1 (Pillow's bytes, what the report wrote before) and with the report's own encoder
    (`eval.arc.deflate.deflate_rows`; the report itself paints and deflates in one call, skipping the
    scanlines equal to the one above); the pictures drawn beforehand by `report.task_scanlines` from
    this workdir's vote and stored uncompressed, their loading not on the clock."""
    pictures = workdir / "floor_pictures.npz"
    if not pictures.exists():
        code = ("import numpy as np; from pathlib import Path; from eval.arc.vote import vote; "
                "from eval.arc import report; from eval.predictions import load_predictions; "
                f"r = vote(load_predictions(Path({str(workdir / 'predictions.npz')!r})), {str(workdir / 'data')!r}); "
                "tasks = sorted(r.tasks, key=lambda t: (t.correct_at(2), t.name)); "
                f"np.savez({str(pictures)!r}, *[report.task_scanlines(t, 3) for t in tasks])")
        subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                       stderr=subprocess.DEVNULL)
    deflate = ("import sys, time, zlib; import numpy as np; from concurrent.futures import ThreadPoolExecutor; "
               f"d = np.load({str(pictures)!r}); pictures = [d[k] for k in d.files]; "
               "t0, c0 = time.perf_counter(), time.process_time(); "
               "z = lambda a: (lambda c: len(c.compress(a) + c.flush()))(zlib.compressobj(1, zlib.DEFLATED, 15, 9)); "
               "pool = ThreadPoolExecutor(2); sum(pool.map(z, pictures)); "
               "print(time.perf_counter() - t0, time.process_time() - c0, file=sys.stderr)")
    ours = ("import sys, time\nimport numpy as np\nfrom concurrent.futures import ThreadPoolExecutor\n"
            "from eval.arc import deflate as D\n"
            f"d = np.load({str(pictures)!r})\npictures = [d[k] for k in d.files]\n"
            "[a.setflags(write=False) for a in pictures]\nt0, c0 = time.perf_counter(), time.process_time()\n"
            "def z(a):\n"
            "    same = np.zeros(a.shape[0], bool)\n    same[1:] = (a[1:] == a[:-1]).all(axis=1)\n"
            "    same.setflags(write=False)\n"
            "    out, end = np.empty(D.bound(a.size), np.uint8), np.zeros(1, np.int64)\n"
            "    D.deflate_rows(a, same, D.LENGTHS, D.distances(a.shape[1]), D.CL_ORDER, np.empty(a.size + 1, np.int32), "
            "out, end)\n"
            "    return int(end[0])\n"
            "pool = ThreadPoolExecutor(2)\nsum(pool.map(z, pictures))\n"
            "print(time.perf_counter() - t0, time.process_time() - c0, file=sys.stderr)")
    # reading the input: the predictions' two token arrays memory-mapped (as `eval.predictions` maps
    # them) and every page read once (their largest token); writing the output: a vote's 406 files,
    # read beforehand, written into a fresh folder (its report/ folder too), the bytes on the clock
    read = ("import sys, time\nimport numpy as np\nfrom eval.predictions import load_predictions\n"
            "from pathlib import Path\nt0, c0 = time.perf_counter(), time.process_time()\n"
            f"p = load_predictions(Path({str(workdir / 'predictions.npz')!r}))\n"
            "int(p.inputs.max()), int(p.predictions.max())\n"
            "print(time.perf_counter() - t0, time.process_time() - c0, file=sys.stderr)")
    sample = workdir / "floor_outputs"
    if not (sample / "tasks.json").exists():
        shutil.rmtree(sample, ignore_errors=True)
        run_vote(workdir, report=True)
        shutil.copytree(workdir / "out", sample)
    write = ("import os, sys, tempfile, time\nfrom pathlib import Path\n"
             f"src = Path({str(sample)!r})\n"
             "files = {p.relative_to(src): p.read_bytes() for p in src.rglob('*') if p.is_file()}\n"
             f"dst = Path(tempfile.mkdtemp(prefix='floorw_', dir={str(workdir)!r}))\n"
             "t0, c0 = time.perf_counter(), time.process_time()\n(dst / 'report').mkdir()\n"
             "[(dst / rel).write_bytes(data) for rel, data in files.items()]\n"
             "print(time.perf_counter() - t0, time.process_time() - c0, file=sys.stderr)")
    sides = {"python -S -c pass": None, "python -c pass": "pass", "+ import numpy": "import numpy",
             "+ read the predictions": read, "+ write the 406 outputs": write,
             "+ zlib's deflate (level 1)": deflate, "+ the report's deflate": ours}
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    inner: dict[str, list[list[float]]] = {k: [] for k in sides}
    print(f"load average at the start {os.getloadavg()[0]:.2f}")
    for _ in range(repeats):
        for side, code in sides.items():
            t0 = time.perf_counter()
            argv = [sys.executable, "-S", "-c", "pass"] if code is None else [sys.executable, "-c", code]
            proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(REPO)))
            err = proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
            res[side].append((time.perf_counter() - t0, usage.ru_utime + usage.ru_stime))
            if err.strip():
                inner[side].append([float(x) for x in err.strip().splitlines()[-1].split()])
    for side, v in res.items():
        print(f"{side:<24} wall {statistics.median(w for w, _ in v):.3f} s (min {min(w for w, _ in v):.3f}), "
              f"CPU {statistics.median(c for _, c in v):.3f} s (medians of {repeats})")
    for side in ("+ read the predictions", "+ write the 406 outputs", "+ zlib's deflate (level 1)",
                 "+ the report's deflate"):
        threads = "; two threads" if "deflate" in side else ""
        print(f"{side.removeprefix('+ ') + ' alone':<32} wall {statistics.median(w for w, _ in inner[side]):.3f} s, "
              f"CPU {statistics.median(c for _, c in inner[side]):.3f} s (timed in its process{threads})")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    for written in workdir.glob("floorw_*"):  # the written outputs' folders, once the clock is off
        shutil.rmtree(written, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--copies", type=int, default=1001)
    ap.add_argument("--two-test", type=int, default=19, help="tasks with 2 test inputs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep data here (default: a temp dir, removed)")
    ap.add_argument("--report", action="store_true", help="also time a run that draws report.html + PNGs")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a checkout of github.com/sapientinc/HRM: time its arc_eval.ipynb scorer against ours")
    ap.add_argument("--repeats", type=int, default=3,
                    help="interleaved repetitions with --reference; runs of the vote with its report with --report")
    ap.add_argument("--fresh", action="store_true",
                    help="each vote into a new output folder (kept to the end), not workdir/out with overwrite=true")
    ap.add_argument("--floor", action="store_true",
                    help="time what any process doing the vote's job pays: Python's start, numpy's import, the "
                         "report's deflate")
    ap.add_argument("--make-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--notebook-child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plain-python", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make_only:
        make(args.workdir, args.tasks, args.copies, args.two_test, args.seed)
        return
    if args.notebook_child:
        time_notebook(args.notebook_child.resolve(), args.workdir, args.plain_python)
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_vote_"))
    try:
        if not (workdir / "predictions.npz").exists():
            # In a child process: Linux counts the parent's RSS at fork in a child's ru_maxrss, so
            # the benchmark parent must stay small for the vote's peak RSS to be its own.
            gen = [sys.executable, __file__, "--make-only", "--workdir", str(workdir), "--tasks", str(args.tasks),
                   "--copies", str(args.copies), "--two-test", str(args.two_test), "--seed", str(args.seed)]
            subprocess.run(gen, check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
        if args.floor:
            floor(workdir, args.repeats)
            return
        if args.reference is not None:
            compare(workdir, args.reference.resolve(), args.repeats, args.fresh)
            return
        run_vote(workdir, report=False)  # warm-up: numba compiles once into its cache
        wall, rss, out, cpu = run_vote(workdir, report=False)
        stats = json.loads((workdir / "out" / "tasks.json").read_text())["stats"]
        print(out.rstrip())
        n = stats["num_rows"]
        print(f"\nvote (CLI process, numba cache warm): wall {wall:.2f}s, CPU {cpu:.2f}s, peak RSS {rss / 1024:.2f} GiB, "
              f"{n / wall:,.0f} predictions/s; in-process: read {stats['seconds_read_predictions']}s, "
              f"dataset {stats['seconds_load_dataset']}s, decode {stats['seconds_decode']}s, "
              f"count {stats['seconds_count']}s, vote total {stats['seconds_total']}s")
        if args.report:
            for _ in range(args.repeats if args.repeats > 1 else 1):
                wall_r, rss_r, _, cpu_r = run_vote(workdir, report=True, fresh=args.fresh)
                print(f"vote + report: wall {wall_r:.2f}s, CPU {cpu_r:.2f}s, peak RSS {rss_r / 1024:.2f} GiB "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for folder in FRESH:
            shutil.rmtree(folder, ignore_errors=True)
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
