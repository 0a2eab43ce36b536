"""`hrm-deeploop generate-puzzles`: distinct grid puzzles (Sudoku, Maze, ...) into train.csv /
test.csv in the official CSV format (arc_data.puzzles.csvfile), offline and seeded.

    hrm-deeploop generate-puzzles task=sudoku size=9 count_train=1000 count_test=1000 output_dir=data/raw/sudoku9

Each draw comes from the task's registry entry (`generator(cfg, rng).draw()`); this module keeps
them distinct (by question), stops when the space runs dry, and writes the files atomically.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from arc_data.budget import check_count, check_fits
from arc_data.errors import DatasetError, raised_as
from arc_data.files.guard import checked_output_dir
from arc_data.files.jsonio import save_json
from arc_data.files.publish import atomic_dir
from arc_data.progress import package_version, progress_bar
from arc_data.puzzles.csvfile import write_puzzle_csv
from arc_data.puzzles.puzzle_config import GeneratePuzzlesConfig
from arc_data.puzzles.registry import task_named

STALL_ATTEMPTS = 20_000  # attempts in a row without a new distinct puzzle before generate-puzzles gives up


def check_generate_request(cfg: GeneratePuzzlesConfig, out: Path) -> None:
    """Refuse, before generating, more distinct puzzles than exist (the task's `most_distinct`, e.g.
    4x4 Sudoku) or than this machine holds: the boards and the set of seen ones in memory (about
    3 n^2 + 100 bytes a puzzle), the CSVs on disk (2 n^2 + 30)."""
    total, n = cfg.count_train + cfg.count_test, cfg.size
    most = task_named(cfg.task).most_distinct(cfg)
    if most is not None:
        check_count("count_train + count_test", total, most[0], most[1], "ask for fewer or a larger size")
    check_fits(f"{total:,} {n}x{n} puzzles", memory=total * (3 * n * n + 100), disk=total * (2 * n * n + 30),
               at=out.parent, fix="lower count_train/count_test")


def generate_boards(cfg: GeneratePuzzlesConfig, total: int, bar=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`total` distinct puzzles: (questions uint8 CSV bytes [total, n*n], answers, ratings int64)."""
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    n = cfg.size
    qs = np.empty((total, n * n), np.uint8)
    ans = np.empty_like(qs)
    ratings = np.empty(total, np.int64)
    seen: set[bytes] = set()
    count, attempts, last_new = 0, 0, 0
    max_attempts = 50 * total + 1000
    draws = task_named(cfg.task).generator(cfg, rng)
    while count < total and attempts < max_attempts:
        attempts += 1
        made = draws.draw()
        if made is None:
            continue
        q, a, rating = made
        key = q.tobytes()
        if key in seen:
            if attempts - last_new > STALL_ATTEMPTS:  # the space is (nearly) exhausted: say so, do not spin on
                raise DatasetError(f"generate-puzzles: only {count:,} of {total:,} distinct {n}x{n} {cfg.task} puzzles: "
                                   f"the last {STALL_ATTEMPTS:,} attempts found no new one; ask for fewer")
            continue
        seen.add(key)
        last_new = attempts
        qs[count], ans[count], ratings[count] = q, a, rating
        count += 1
        if bar is not None:
            bar.update(1)
    if count < total:
        raise DatasetError(f"generate-puzzles: only {count} of {total} distinct {n}x{n} {cfg.task} puzzles in "
                           f"{attempts} attempts with {draws.knobs()}; ease the knobs or ask for fewer")
    return qs, ans, ratings


def generate_puzzles(cfg: GeneratePuzzlesConfig) -> dict:
    """Write `<output_dir>/train.csv`, `test.csv` (disjoint) and `generated.json` (options, counts).
    Every error is the task's class (SudokuError, MazeError)."""
    with raised_as(task_named(cfg.task).error):
        return _generate(cfg)


def _generate(cfg: GeneratePuzzlesConfig) -> dict:
    t0 = time.perf_counter()
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, marker="generated.json", writer="generate-puzzles",
                                outputs=("generated.json", "train.csv", "test.csv"))
    out = target.path
    check_generate_request(cfg, out)
    total = cfg.count_train + cfg.count_test
    with progress_bar(cfg.progress, "generate-puzzles")(total, cfg.task, "puzzle") as bar:
        qs, ans, ratings = generate_boards(cfg, total, bar)
    source = f"generated-{cfg.task}-{cfg.size}x{cfg.size}"
    info = {"format": "hrm-puzzles-csv", "task": cfg.task, "options": asdict(cfg),
            "package": {"name": "hrm-deeploop", "version": package_version()},
            "rng": f"numpy.random.Generator(PCG64({cfg.seed}))", "counts": {}}
    with atomic_dir(target) as tmp:
        for split, sl in (("train", slice(0, cfg.count_train)), ("test", slice(cfg.count_train, total))):
            write_puzzle_csv(tmp / f"{split}.csv", qs[sl], ans[sl], ratings[sl], source)
            r = ratings[sl]
            info["counts"][split] = {"rows": int(r.size), "rating_min": int(r.min()), "rating_median": float(np.median(r)),
                                     "rating_max": int(r.max())}
        save_json(tmp / "generated.json", info)
    c = info["counts"]
    print(f"generate-puzzles: wrote {out} ({cfg.task} {cfg.size}x{cfg.size}: {c['train']['rows']:,} train, "
          f"{c['test']['rows']:,} test; rating median {c['train']['rating_median']:g}) in "
          f"{time.perf_counter() - t0:.1f} s")
    return info


def run_generate(cfg: GeneratePuzzlesConfig) -> int:
    generate_puzzles(cfg)
    return 0
