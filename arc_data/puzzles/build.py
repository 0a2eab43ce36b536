"""`hrm-deeploop build-puzzles`: grid-puzzle datasets (Sudoku, Maze, ...) in HRM's layout, from CSVs
in the official format (arc_data.puzzles.csvfile; generate-puzzles writes them offline).

    hrm-deeploop generate-puzzles task=sudoku size=9 count_train=1000 count_test=1000 output_dir=data/raw/sudoku9
    hrm-deeploop build-puzzles task=sudoku source=data/raw/sudoku9 num_aug=1000 output_dir=data/sudoku9-aug-1000
    hrm-deeploop build-puzzles task=sudoku source=sapientinc/sudoku-extreme subsample_size=1000 num_aug=1000 \
        output_dir=data/sudoku-extreme-1k-aug-1000        # downloads with huggingface_hub
    hrm-deeploop build-puzzles task=maze source=<folder> output_dir=data/maze-30x30-hard-1k   # HRM/TRM: no augmentation

build-puzzles writes exactly what HRM/TRM's `dataset/build_sudoku_dataset.py` and
`build_maze_dataset.py` write (same arrays, dtypes and `dataset.json` bytes as TRM's, whose only
addition to HRM's is `total_puzzles`; see docs/puzzles.md), plus our `manifest.json` and a
per-puzzle augmentation table `<split>/puzzle_augmentations.npz`:

    source_row   int64 [P]       CSV data row (0-based, after the header) of the puzzle's original
    Sudoku: digit_map uint8 [P, n+1], transpose bool [P], row_perm uint8 [P, n], col_perm uint8 [P, n]
            (arc_data.sudoku.SudokuAugs: puzzle p = apply_augs(original, augs[p]); invert_augs undoes it)
    Maze:   dihedral  uint8 [P]  (fmt.dihedral id; arc_data.maze.invert_dihedral_rows undoes it)

Token ids: PAD 0, the rest each task's (`<task>/task.py`: Sudoku blank 1, digit d -> d+1; Maze '#' 1,
' ' 2, 'S' 3, 'G' 4, 'o' 5). One group per CSV puzzle: the original first, then its `num_aug`
augmentations (train split only). Every puzzle has the blank identifier 0 and one example. What
differs by task (tokens, answer check, augmentation, manifest fields) comes from its registry
entry (arc_data.puzzles.registry). Errors here are raised as DatasetError and leave build_puzzles
as the task's class (errors.raised_as), like those of the shared code it calls.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.budget import check_fits
from arc_data.dataset import load_npz
from arc_data.errors import DatasetError, raised_as
from arc_data.files.atomic import dir_size, save_npy
from arc_data.files.guard import checked_output_dir
from arc_data.files.jsonio import save_json
from arc_data.files.publish import atomic_dir
from arc_data.progress import package_version, progress_bar
from arc_data.puzzles.csvfile import PuzzleCsv, read_puzzle_csv
from arc_data.puzzles.puzzle_config import BuildPuzzlesConfig
from arc_data.puzzles.registry import GridTask, task_named

AUG_CHUNK = 1 << 16  # augmented rows per block
NUMBA_MIN_ROWS = 1 << 18  # Sudoku sets with more rows are encoded and checked by one numba kernel
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# ---------------------------------------------------------------------------------------------
# build-puzzles


@dataclass
class Board:
    """What a row of the CSV is: its task and side n (tokens and checks come from the task)."""

    task: str
    n: int

    @property
    def spec(self) -> GridTask:
        return task_named(self.task)

    @property
    def seq_len(self) -> int:
        return self.n * self.n

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size(self.n)


def board_of(task: str, csv: PuzzleCsv) -> Board:
    spec = task_named(task)
    try:
        n = spec.size_of(csv.row_len)
    except DatasetError as e:
        raise DatasetError(f"{csv.path}:2: {e}") from None
    return Board(task, n)


def encode(csv: PuzzleCsv, rows: np.ndarray, board: Board, check_answers: bool) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (uint8 [len(rows), n*n]) of the selected CSV rows, after the charset and answer checks.

    When every row is selected the CSV's own arrays are converted in place (no copy of a 3.8M-row
    file), so `csv` holds tokens afterwards; error messages re-read the file for line numbers.
    """
    if rows.size == len(csv):  # rows is arange(len(csv)) (selections are sorted, or a smaller subsample)
        inputs, labels = csv.questions, csv.answers
    else:
        inputs, labels = csv.questions[rows], csv.answers[rows]
    spec = board.spec
    lut = spec.lut(board.n)
    if spec.encode_large is not None and inputs.shape[0] > NUMBA_MIN_ROWS:
        i, problem, cell, byte = spec.encode_large(board.n, inputs, labels, lut, check_answers)
        if i >= 0:
            if problem in ("question", "answer"):
                raise _charset_error(csv, int(rows[i]), board, problem, cell, byte)
            raise _answer_error(csv, int(rows[i]), problem)
        return inputs, labels
    for lo in range(0, inputs.shape[0], AUG_CHUNK):
        q_bytes, a_bytes = inputs[lo:lo + AUG_CHUNK], labels[lo:lo + AUG_CHUNK]
        q_tok, a_tok = lut[q_bytes], lut[a_bytes]
        bad_q, bad_a = (q_tok == 255).any(axis=1), (a_tok == 255).any(axis=1)
        if bad_q.any() or bad_a.any():
            i = int(np.flatnonzero(bad_q | bad_a)[0])
            field, tok, raw = ("question", q_tok, q_bytes) if bad_q[i] else ("answer", a_tok, a_bytes)
            c = int(np.flatnonzero(tok[i] == 255)[0])
            raise _charset_error(csv, int(rows[lo + i]), board, field, c, int(raw[i, c]))
        if check_answers:
            i, problem = spec.first_bad_answer(board.n, q_bytes, a_bytes, q_tok, a_tok)
            if i >= 0:
                raise _answer_error(csv, int(rows[lo + i]), problem)
        q_bytes[:], a_bytes[:] = q_tok, a_tok
    return inputs, labels


def _charset_error(csv: PuzzleCsv, row: int, board: Board, field: str, cell: int, byte: int) -> DatasetError:
    return DatasetError(f"{csv.path}:{csv.line_of(row)}: {field} cell {cell} is {chr(byte)!r}, outside the "
                        f"{board.task} charset {board.spec.charset(board.n)!r}")


def _answer_error(csv: PuzzleCsv, row: int, problem: str) -> DatasetError:
    return DatasetError(f"{csv.path}:{csv.line_of(row)}: {problem} (check_answers=false skips this check)")


def _meta(board: Board, num_groups: int) -> dict:
    """dataset.json exactly as TRM's builders write it (HRM's fields + total_puzzles = the group count)."""
    return {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": fmt.BLANK_ID,
        "vocab_size": board.vocab_size,
        "seq_len": board.seq_len,
        "num_puzzle_identifiers": 1,
        "total_groups": num_groups,
        "mean_puzzle_examples": 1.0,
        "total_puzzles": num_groups,
        "sets": [fmt.SET_NAME],
    }


@dataclass
class SplitData:
    inputs: np.ndarray  # uint8 [P, L]
    labels: np.ndarray
    group_size: int  # puzzles per group (1 + augmentations)
    table: dict[str, np.ndarray]  # the augmentation table

    @property
    def num_puzzles(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_groups(self) -> int:
        return self.num_puzzles // self.group_size


def augment(board: Board, inputs: np.ndarray, labels: np.ndarray, source_rows: np.ndarray, num_aug: int,
            rng: np.random.Generator, bar) -> SplitData:
    """Groups in CSV order (or subsample order), each the original then `num_aug` augmentations."""
    g, k = inputs.shape[0], num_aug + 1
    if num_aug == 0:
        table = _identity_table(board, g)
        table["source_row"] = source_rows.astype(np.int64)
        bar.update(g)
        return SplitData(inputs, labels, 1, table)
    total = g * k
    out_in = np.empty((total, board.seq_len), np.uint8)
    out_lab = np.empty_like(out_in)
    table = _identity_table(board, total)
    table["source_row"] = np.repeat(source_rows.astype(np.int64), k)
    for lo in range(0, total, AUG_CHUNK):
        r = np.arange(lo, min(lo + AUG_CHUNK, total))
        grp, a = r // k, r % k
        out_in[r], out_lab[r] = inputs[grp], labels[grp]
        moved = r[a > 0]
        out_in[moved], out_lab[moved], columns = board.spec.augment(board.n, inputs, labels, moved // k, moved % k,
                                                                    rng, large=total > NUMBA_MIN_ROWS)
        for name, column in columns.items():
            table[name][moved] = column
        bar.update(r.size)
    return SplitData(out_in, out_lab, k, table)


def _identity_table(board: Board, count: int) -> dict[str, np.ndarray]:
    return board.spec.identity_table(board.n, count)


def load_table(split_dir: str | Path) -> dict[str, np.ndarray]:
    """The augmentation table of a built split (`<split>/puzzle_augmentations.npz`)."""
    path = Path(split_dir) / fmt.PUZZLE_AUGMENTATIONS_FILE
    if not path.is_file():
        raise DatasetError(f"{path}: missing (a dataset built by build-puzzles has one per split)")
    return load_npz(path)


def resolve_source(source: str, split: str) -> tuple[Path, str | None]:
    """(local CSV path, repository id or None) of `split` for a folder or a dataset repository id."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        path = folder / f"{split}.csv"
        if not path.is_file():
            what = "not a regular file (a folder, FIFO or device)" if path.exists() else "missing"
            raise DatasetError(f"{path}: {what} (source folder must hold train.csv and test.csv)")
        return path, None
    if folder.exists():
        what = "a file" if folder.is_file() else "not a folder (a FIFO, device or socket)"
        raise DatasetError(f"source: {source} is {what}; give the folder holding train.csv and test.csv")
    if not _REPO_ID.match(source):
        raise DatasetError(f"source: {source} is neither a folder nor a dataset repository id (owner/name)")
    try:
        from huggingface_hub import hf_hub_download  # lazy: huggingface_hub only for downloads
        from huggingface_hub.errors import HfHubHTTPError  # lazy: huggingface_hub only for downloads
    except ImportError:
        raise DatasetError(f"source: {source} is not a folder, and huggingface_hub is not installed to download "
                           f"it (pip install huggingface_hub, or download train.csv/test.csv yourself)") from None
    try:
        return Path(hf_hub_download(source, f"{split}.csv", repo_type="dataset")), source
    except (OSError, ValueError, HfHubHTTPError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"source: could not download {split}.csv from the dataset repository {source} "
                           f"(offline? {first})") from None


def build_puzzles(cfg: BuildPuzzlesConfig) -> dict:
    """Build the dataset; returns the manifest (also written to `<output_dir>/manifest.json`).
    Every error is the task's class (SudokuError, MazeError)."""
    with raised_as(task_named(cfg.task).error):
        return _build(cfg)


def _build(cfg: BuildPuzzlesConfig) -> dict:
    t0 = time.perf_counter()
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, [cfg.source], marker=fmt.MANIFEST_FILE,
                                writer="build-puzzles", outputs=fmt.BUILD_OUTPUTS)
    out = target.path
    bars = progress_bar(cfg.progress, "build-puzzles")
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    splits: dict[str, SplitData] = {}
    sources: list[dict] = []
    board: Board | None = None
    for split in fmt.SPLITS:
        path, repo = resolve_source(cfg.source, split)
        with bars(None, f"read {split}.csv", "row") as bar:
            table = read_puzzle_csv(path, parse_ratings=cfg.min_difficulty is not None, progress=bar.update)
        b = board_of(cfg.task, table)
        if board is not None and b != board:
            raise DatasetError(f"{path}: {b.n}x{b.n} boards, but train.csv holds {board.n}x{board.n}")
        board = b
        keep = np.arange(len(table))
        if cfg.min_difficulty is not None:
            keep = np.flatnonzero(table.ratings >= cfg.min_difficulty)
            if keep.size == 0:
                raise DatasetError(f"{path}: min_difficulty={cfg.min_difficulty} leaves no puzzles "
                                   f"(largest rating {int(table.ratings.max())})")
        if split == "train" and cfg.subsample_size is not None and cfg.subsample_size > keep.size:
            raise DatasetError(f"subsample_size={cfg.subsample_size}: {path} has only {keep.size:,} puzzles"
                               + (f" with min_difficulty={cfg.min_difficulty}" if cfg.min_difficulty is not None else "")
                               + "; ask for fewer (or subsample_size=null for all)")
        if split == "train" and cfg.subsample_size is not None and cfg.subsample_size < keep.size:
            keep = keep[rng.choice(keep.size, size=cfg.subsample_size, replace=False)]
        inputs, labels = encode(table, keep, board, cfg.check_answers)
        sources.append({"split": split, "path": str(path), "repo": repo, "sha256": table.sha256,
                        "rows": len(table), "kept": int(keep.size)})
        del table  # the byte arrays of a subsampled file are not needed any more
        num_aug = cfg.num_aug if split == "train" else 0
        rows, per_row = keep.size * (num_aug + 1), 2 * board.seq_len + 3 * board.n + 10  # inputs, labels, table
        check_fits(f"num_aug={num_aug} over {keep.size:,} {split} puzzles ({rows:,} rows)", memory=rows * per_row,
                   disk=rows * per_row, at=out.parent, fix="lower num_aug or subsample_size")
        with bars(keep.size * (num_aug + 1), f"augment {split}", "puzzle") as bar:
            splits[split] = augment(board, inputs, labels, keep, num_aug, rng, bar)
    assert board is not None
    counts = {s: {"groups": d.num_groups, "puzzles": d.num_puzzles, "examples": d.num_puzzles}
              for s, d in splits.items()}
    manifest = {
        "format": "hrm-puzzles",
        "format_version": 1,
        "task": cfg.task,
        "layout": "materialized",
        "package": {"name": "hrm-deeploop", "version": package_version()},
        "versions": {"numpy": np.__version__, "python": sys.version.split()[0]},
        "options": asdict(cfg),
        "rng": f"numpy.random.Generator(PCG64({cfg.seed})): train subsample, then augmentations in row order",
        "board": {"n": board.n, "seq_len": board.seq_len, "vocab_size": board.vocab_size,
                  **board.spec.board_info(board.n)},
        "sources": sources,
        "counts": counts,
        "augmentation_table": fmt.PUZZLE_AUGMENTATIONS_FILE,
    }
    with atomic_dir(target) as tmp:
        write_split_files(tmp, board, splits)
        save_json(tmp / fmt.MANIFEST_FILE, manifest)  # last: its presence marks a complete build
    secs = time.perf_counter() - t0
    lines = [f"build-puzzles: wrote {out} ({cfg.task} {board.n}x{board.n}, {dir_size(out) / 1e6:.1f} MB) "
             f"in {secs:.1f} s"]
    lines += [f"  {s:<5}: {c['groups']:,} groups, {c['puzzles']:,} puzzles" for s, c in counts.items()]
    print("\n".join(lines))
    return manifest


def write_split_files(root: Path, board: Board, splits: dict[str, SplitData]) -> None:
    """The HRM layout (byte-identical to the reference builders) plus the augmentation tables."""
    for split, d in splits.items():
        sd = root / split
        sd.mkdir()
        p, k = d.num_puzzles, d.group_size
        (sd / fmt.META_FILE).write_text(json.dumps(_meta(board, d.num_groups)))  # json.dump, no newline: as HRM
        save_npy(sd / fmt.INPUTS_FILE, d.inputs)
        save_npy(sd / fmt.LABELS_FILE, d.labels)
        save_npy(sd / fmt.GROUP_INDICES_FILE, np.arange(0, p + 1, k, dtype=np.int32))
        save_npy(sd / fmt.PUZZLE_INDICES_FILE, np.arange(p + 1, dtype=np.int32))
        save_npy(sd / fmt.PUZZLE_IDS_FILE, np.zeros(p, np.int32))
        np.savez(sd / fmt.PUZZLE_AUGMENTATIONS_FILE, **d.table)
    (root / fmt.IDENTIFIERS_FILE).write_text(json.dumps([fmt.BLANK_NAME]))


def run_build(cfg: BuildPuzzlesConfig) -> int:
    build_puzzles(cfg)
    return 0
