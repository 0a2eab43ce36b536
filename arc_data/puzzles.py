"""`hrm-deeploop build-puzzles` and `generate-puzzles`: Sudoku and Maze datasets in HRM's layout.

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
    Maze:   dihedral  uint8 [P]  (format.dihedral id; arc_data.maze.invert_dihedral_rows undoes it)

Token ids (HRM): PAD 0; Sudoku blank 1, digit d -> d+1 (vocab n+2; 11 for 9x9); Maze '#' 1, ' ' 2,
'S' 3, 'G' 4, 'o' 5 (vocab 6). One group per CSV puzzle: the original first, then its `num_aug`
augmentations (train split only). Every puzzle has the blank identifier 0 and one example.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from arc_data import format as F
from arc_data import maze, sudoku
from arc_data.budget import check_count, check_fits
from arc_data.dataset import load_npz
from arc_data.errors import ArcDataError
from arc_data.fsio import (
    atomic_dir,
    checked_output_dir,
    dir_size,
    package_version,
    progress_bar,
    save_json,
    save_npy,
)
from arc_data.puzzle_config import AUG_TABLE_FILE, BuildPuzzlesConfig, GeneratePuzzlesConfig
from arc_data.puzzle_csv import PuzzleCsv, read_puzzle_csv, write_puzzle_csv

AUG_CHUNK = 1 << 16  # augmented rows per block
NUMBA_MIN_ROWS = 1 << 18  # Sudoku sets with more rows are encoded and checked by one numba kernel
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SUDOKU_BLANKS = ".0"
SUDOKU_INVALID = "the answer is not a solved sudoku (a row, column or box repeats a digit)"


# ---------------------------------------------------------------------------------------------
# build-puzzles


@dataclass
class Board:
    """What a row of the CSV is: its task, side n and token table."""

    task: str
    n: int

    @property
    def seq_len(self) -> int:
        return self.n * self.n

    @property
    def vocab_size(self) -> int:
        return self.n + 2 if self.task == "sudoku" else len(maze.CHARSET) + 1

    def lut(self) -> np.ndarray:
        """CSV byte -> token (255: not allowed)."""
        lut = np.full(256, 255, np.uint8)
        if self.task == "sudoku":
            for ch in SUDOKU_BLANKS:
                lut[ord(ch)] = 1
            for d in range(1, self.n + 1):
                lut[ord(str(d))] = d + 1
        else:
            for i, ch in enumerate(maze.CHARSET):
                lut[ord(ch)] = i + 1
        return lut

    def charset(self) -> str:
        if self.task == "sudoku":
            return SUDOKU_BLANKS + "".join(str(d) for d in range(1, self.n + 1))
        return maze.CHARSET


def board_of(task: str, csv: PuzzleCsv) -> Board:
    width = csv.row_len
    if task == "sudoku":
        try:
            n = sudoku.size_of(width)
        except ArcDataError as e:
            raise ArcDataError(f"{csv.path}:2: {e}") from None
        return Board(task, n)
    n = int(round(width ** 0.5))
    if n * n != width or n < 2:
        raise ArcDataError(f"{csv.path}:2: a maze row has {width} cells; expected a square board (n*n)")
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
    lut = board.lut()
    if board.task == "sudoku" and inputs.shape[0] > NUMBA_MIN_ROWS:
        _encode_sudoku_numba(csv, rows, board, check_answers, inputs, labels, lut)
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
            i, problem = _first_bad_answer(board, q_bytes, a_bytes, q_tok, a_tok)
            if i >= 0:
                raise _answer_error(csv, int(rows[lo + i]), problem)
        q_bytes[:], a_bytes[:] = q_tok, a_tok
    return inputs, labels


def _charset_error(csv: PuzzleCsv, row: int, board: Board, field: str, cell: int, byte: int) -> ArcDataError:
    return ArcDataError(f"{csv.path}:{csv.line_of(row)}: {field} cell {cell} is {chr(byte)!r}, outside the "
                        f"{board.task} charset {board.charset()!r}")


def _answer_error(csv: PuzzleCsv, row: int, problem: str) -> ArcDataError:
    return ArcDataError(f"{csv.path}:{csv.line_of(row)}: {problem} (check_answers=false skips this check)")


def _encode_sudoku_numba(csv: PuzzleCsv, rows: np.ndarray, board: Board, check: bool, inputs: np.ndarray,
                         labels: np.ndarray, lut: np.ndarray) -> None:
    """The numpy loop above in one pass per row (arc_data.puzzle_kernels.sudoku_encode_check)."""
    from arc_data.puzzle_kernels import sudoku_encode_check

    i, code, cell, byte = sudoku_encode_check(inputs, labels, lut, board.n, sudoku.box_index(board.n), check)
    if i < 0:
        return
    row = int(rows[i])
    if code in (1, 2):
        raise _charset_error(csv, row, board, "question" if code == 1 else "answer", int(cell), int(byte))
    raise _answer_error(csv, row, {3: "the answer has a blank cell", 4: f"the answer changes the given at cell {cell}",
                                   5: SUDOKU_INVALID}[int(code)])


def _first_bad_answer(board: Board, q_bytes, a_bytes, inputs, labels) -> tuple[int, str]:
    if board.task == "maze":
        return maze.first_bad_maze(q_bytes, a_bytes, board.n)
    blank = (labels == 1).any(axis=1)
    clash = ((inputs != 1) & (inputs != labels)).any(axis=1)
    invalid = sudoku.first_invalid_solution(labels - 1, board.n)
    first = [int(np.flatnonzero(blank)[0]) if blank.any() else -1,
             int(np.flatnonzero(clash)[0]) if clash.any() else -1, invalid]
    hits = [i for i in first if i >= 0]
    if not hits:
        return -1, ""
    i = min(hits)
    if blank[i]:
        return i, "the answer has a blank cell"
    if clash[i]:
        c = int(np.flatnonzero((inputs[i] != 1) & (inputs[i] != labels[i]))[0])
        return i, f"the answer changes the given at cell {c}"
    return i, SUDOKU_INVALID


def _meta(board: Board, num_groups: int) -> dict:
    """dataset.json exactly as TRM's builders write it (HRM's fields + total_puzzles = the group count)."""
    return {
        "pad_id": 0,
        "ignore_label_id": 0,
        "blank_identifier_id": F.BLANK_ID,
        "vocab_size": board.vocab_size,
        "seq_len": board.seq_len,
        "num_puzzle_identifiers": 1,
        "total_groups": num_groups,
        "mean_puzzle_examples": 1.0,
        "total_puzzles": num_groups,
        "sets": [F.SET_NAME],
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
        src = moved // k
        if board.task == "sudoku":
            augs = sudoku.random_augs(rng, board.n, moved.size)  # one uniform block per row: chunk-independent
            if total > NUMBA_MIN_ROWS:
                out_in[moved], out_lab[moved] = _augment_numba(inputs, labels, src, augs, board.n)
            else:
                both = sudoku.apply_augs(np.concatenate([inputs[src], labels[src]], axis=1), augs, offset=1)
                out_in[moved], out_lab[moved] = both[:, :board.seq_len], both[:, board.seq_len:]
            for name in ("digit_map", "transpose", "row_perm", "col_perm"):
                table[name][moved] = getattr(augs, name)
        else:
            tids = (moved % k).astype(np.uint8)
            out_in[moved] = maze.apply_dihedral_rows(inputs[src], tids, board.n)
            out_lab[moved] = maze.apply_dihedral_rows(labels[src], tids, board.n)
            table["dihedral"][moved] = tids
        bar.update(r.size)
    return SplitData(out_in, out_lab, k, table)


def _augment_numba(inputs: np.ndarray, labels: np.ndarray, src: np.ndarray, augs: sudoku.SudokuAugs,
                   n: int) -> tuple[np.ndarray, np.ndarray]:
    """sudoku.apply_augs(x[src], augs, offset=1) for inputs and labels in one numba pass."""
    from arc_data.puzzle_kernels import sudoku_augment

    out_q = np.empty((src.size, inputs.shape[1]), np.uint8)
    out_a = np.empty_like(out_q)
    sudoku_augment(np.ascontiguousarray(inputs), np.ascontiguousarray(labels), src.astype(np.int64), augs.digit_map,
                   augs.transpose, augs.row_perm.astype(np.int64), augs.col_perm.astype(np.int64), n, out_q, out_a)
    return out_q, out_a


def _identity_table(board: Board, count: int) -> dict[str, np.ndarray]:
    if board.task == "sudoku":
        ident = sudoku.identity_augs(board.n, count)
        return {"digit_map": ident.digit_map, "transpose": ident.transpose, "row_perm": ident.row_perm,
                "col_perm": ident.col_perm}
    return {"dihedral": np.zeros(count, np.uint8)}


def load_table(split_dir: str | Path) -> dict[str, np.ndarray]:
    """The augmentation table of a built split (`<split>/puzzle_augmentations.npz`)."""
    path = Path(split_dir) / AUG_TABLE_FILE
    if not path.is_file():
        raise ArcDataError(f"{path}: missing (a dataset built by build-puzzles has one per split)")
    return load_npz(path)


def sudoku_augs(table: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> sudoku.SudokuAugs:
    """The SudokuAugs of the given puzzle rows of a loaded table."""
    return sudoku.SudokuAugs(table["digit_map"][rows], table["transpose"][rows], table["row_perm"][rows],
                             table["col_perm"][rows])


def resolve_source(source: str, split: str) -> tuple[Path, str | None]:
    """(local CSV path, repository id or None) of `split` for a folder or a dataset repository id."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        path = folder / f"{split}.csv"
        if not path.is_file():
            raise ArcDataError(f"{path}: missing (source folder must hold train.csv and test.csv)")
        return path, None
    if folder.exists():
        raise ArcDataError(f"source: {source} is a file; give the folder holding train.csv and test.csv")
    if not _REPO_ID.match(source):
        raise ArcDataError(f"source: {source} is neither a folder nor a dataset repository id (owner/name)")
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:
        raise ArcDataError(f"source: {source} is not a folder, and huggingface_hub is not installed to download "
                           f"it (pip install huggingface_hub, or download train.csv/test.csv yourself)") from None
    try:
        return Path(hf_hub_download(source, f"{split}.csv", repo_type="dataset")), source
    except (OSError, ValueError, HfHubHTTPError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ArcDataError(f"source: could not download {split}.csv from the dataset repository {source} "
                           f"(offline? {first})") from None


def build_puzzles(cfg: BuildPuzzlesConfig) -> dict:
    """Build the dataset; returns the manifest (also written to `<output_dir>/manifest.json`)."""
    t0 = time.perf_counter()
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, [cfg.source], marker=F.MANIFEST_FILE,
                                writer="build-puzzles")
    out = target.path
    bars = progress_bar(cfg.progress, "build-puzzles")
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    splits: dict[str, SplitData] = {}
    sources: list[dict] = []
    board: Board | None = None
    for split in F.SPLITS:
        path, repo = resolve_source(cfg.source, split)
        with bars(None, f"read {split}.csv", "row") as bar:
            table = read_puzzle_csv(path, parse_ratings=cfg.min_difficulty is not None, progress=bar.update)
        b = board_of(cfg.task, table)
        if board is not None and b != board:
            raise ArcDataError(f"{path}: {b.n}x{b.n} boards, but train.csv holds {board.n}x{board.n}")
        board = b
        keep = np.arange(len(table))
        if cfg.min_difficulty is not None:
            keep = np.flatnonzero(table.ratings >= cfg.min_difficulty)
            if keep.size == 0:
                raise ArcDataError(f"{path}: min_difficulty={cfg.min_difficulty} leaves no puzzles "
                                   f"(largest rating {int(table.ratings.max())})")
        if split == "train" and cfg.subsample_size is not None and cfg.subsample_size > keep.size:
            raise ArcDataError(f"subsample_size={cfg.subsample_size}: {path} has only {keep.size:,} puzzles"
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
                  "box": list(sudoku.box_shape(board.n)) if cfg.task == "sudoku" else None},
        "sources": sources,
        "counts": counts,
        "augmentation_table": AUG_TABLE_FILE,
    }
    with atomic_dir(target) as tmp:
        write_split_files(tmp, board, splits)
        save_json(tmp / F.MANIFEST_FILE, manifest)  # last: its presence marks a complete build
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
        (sd / F.META_FILE).write_text(json.dumps(_meta(board, d.num_groups)))  # json.dump, no newline: as HRM
        save_npy(sd / F.INPUTS_FILE, d.inputs)
        save_npy(sd / F.LABELS_FILE, d.labels)
        save_npy(sd / F.GROUP_INDICES_FILE, np.arange(0, p + 1, k, dtype=np.int32))
        save_npy(sd / F.PUZZLE_INDICES_FILE, np.arange(p + 1, dtype=np.int32))
        save_npy(sd / F.PUZZLE_IDS_FILE, np.zeros(p, np.int32))
        np.savez(sd / AUG_TABLE_FILE, **d.table)
    (root / F.IDENTIFIERS_FILE).write_text(json.dumps([F.BLANK_NAME]))


def run_build(cfg: BuildPuzzlesConfig) -> int:
    build_puzzles(cfg)
    return 0


# ---------------------------------------------------------------------------------------------
# generate-puzzles


STALL_ATTEMPTS = 20_000  # attempts in a row without a new distinct puzzle before generate-puzzles gives up


def check_generate_request(cfg: GeneratePuzzlesConfig, out: Path) -> None:
    """Refuse, before generating, more distinct puzzles than exist (4x4 Sudoku: 288 full boards, each
    with at most C(16, givens) or 2**16 sets of givens) or than this machine holds: the boards and the
    set of seen ones in memory (about 3 n^2 + 100 bytes a puzzle), the CSVs on disk (2 n^2 + 30)."""
    total, n = cfg.count_train + cfg.count_test, cfg.size
    if cfg.task == "sudoku" and n == 4:
        most = 288 * (math.comb(16, cfg.givens) if cfg.givens else 2**16)
        check_count("count_train + count_test", total, most,
                    "288 full 4x4 boards x " + (f"C(16, {cfg.givens})" if cfg.givens else "2**16") + " sets of givens",
                    "ask for fewer or a larger size")
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
    count, attempts, fewest, last_new = 0, 0, n * n + 1, 0
    max_attempts = 50 * total + 1000
    digits = np.frombuffer(b"." + b"".join(str(d).encode() for d in range(1, 10)), np.uint8)
    while count < total and attempts < max_attempts:
        attempts += 1
        if cfg.task == "sudoku":
            puzzle, solution, k, rating = sudoku.generate(rng, n, cfg.givens)
            fewest = min(fewest, k)
            if (cfg.givens and k != cfg.givens) or rating < cfg.min_rating:
                continue
            q, a = digits[puzzle], digits[solution]
        else:
            made = maze.generate(rng, n, max(cfg.min_path, 1), cfg.openings)
            if made is None:
                continue
            q, a, rating = made
        key = q.tobytes()
        if key in seen:
            if attempts - last_new > STALL_ATTEMPTS:  # the space is (nearly) exhausted: say so, do not spin on
                raise ArcDataError(f"generate-puzzles: only {count:,} of {total:,} distinct {n}x{n} {cfg.task} puzzles: "
                                   f"the last {STALL_ATTEMPTS:,} attempts found no new one; ask for fewer")
            continue
        seen.add(key)
        last_new = attempts
        qs[count], ans[count], ratings[count] = q, a, rating
        count += 1
        if bar is not None:
            bar.update(1)
    if count < total:
        knobs = (f"givens={cfg.givens} (fewest reached {fewest}), min_rating={cfg.min_rating}"
                 if cfg.task == "sudoku" else f"min_path={cfg.min_path}, openings={cfg.openings}")
        raise ArcDataError(f"generate-puzzles: only {count} of {total} distinct {n}x{n} {cfg.task} puzzles in "
                           f"{attempts} attempts with {knobs}; ease the knobs or ask for fewer")
    return qs, ans, ratings


def generate_puzzles(cfg: GeneratePuzzlesConfig) -> dict:
    """Write `<output_dir>/train.csv`, `test.csv` (disjoint) and `generated.json` (options, counts)."""
    t0 = time.perf_counter()
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, marker="generated.json", writer="generate-puzzles")
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
