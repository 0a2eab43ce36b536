"""Count-first voting (HRM spec 6.2-6.3): predictions of every augmented copy -> ranked candidates
per original test input -> pass@K.

For each prediction row: crop the predicted grid (HRM's top-left max-area rule), map it back to
the original frame with the augmentation table (inverse dihedral and inverse colour map; the two
commute), and hash it. The row's test input is found the same way, from its `inputs` sequence,
among the un-augmented test inputs of the row's base task. Candidates are ranked by
`Candidate.rank_key`: most votes, then highest mean sigmoid(q_halt), then first seen (row order
of predictions.npz).

Entry points: `vote(predictions, data_dir)` (library) and `run(cfg)` (`hrm-deeploop vote`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import MISSING

from arc_data import format as fmt
from eval.predictions import Predictions, check_dataset
from eval.tasks import require_arc
from hrm_deeploop.errors import UserError

DEFAULT_KS = (1, 2, 10, 100, 1000)
ARC_PRIZE = "arc_prize"  # scores key: pass@2 by the ARC Prize rule, computed on submission.json (eval.arcprize)
IDENTITY_COLOURS = np.arange(10, dtype=np.uint8)


@dataclass
class VoteConfig:
    """`hrm-deeploop vote`: count-first voting and pass@K from a predictions.npz."""

    predictions: str = MISSING  # path to predictions.npz
    data_dir: str = MISSING  # built dataset (the folder holding test/ and augmentations.npz)
    output_dir: str = MISSING
    split: str = "test"
    ks: list[int] = field(default_factory=lambda: list(DEFAULT_KS))
    overwrite: bool = False  # replace earlier vote outputs in output_dir
    max_candidates: int = 10  # candidates (with grids) listed per test input in tasks.json
    report: bool = True  # report.html + report/<task>.png
    report_candidates: int = 3  # candidates drawn per test input in the report
    challenges: str | None = None  # a *_challenges.json: submission.json covers each of its tasks and test inputs

    def __post_init__(self) -> None:
        if not self.ks or any(not isinstance(k, int) or k < 1 for k in self.ks):
            raise UserError(f"ks={self.ks}: must be a non-empty list of positive integers")
        if len(set(self.ks)) != len(self.ks):
            raise UserError(f"ks={self.ks}: lists a K twice (each K is one pass@K column)")
        for key in ("max_candidates", "report_candidates"):
            if getattr(self, key) < 1:
                raise UserError(f"{key}={getattr(self, key)}: must be >= 1")
        if self.split not in ("test", "train"):
            raise UserError(f"split={self.split!r}: must be test or train")


# ---------------------------------------------------------------- dataset side


@dataclass(frozen=True)
class AugTable:
    """The augmentation table, indexed by puzzle identifier (arc_data.format docstring)."""

    base_task: np.ndarray  # int32 [m], -1 for the blank row
    dihedral: np.ndarray  # uint8 [m]
    colour_map: np.ndarray  # uint8 [m, 10], original colour k -> colour_map[k]
    task_names: list[str]

    def __len__(self) -> int:
        return int(self.base_task.shape[0])

    @functools.cached_property
    def inv_colour(self) -> np.ndarray:
        """uint8 [m, 10]: augmented colour -> original colour."""
        # eval.decode (numba) is imported where decoding starts, so `vote --help` starts without numba
        from eval.decode import inverse_colour_table

        return inverse_colour_table(self.colour_map)

    def is_identity(self, ids: np.ndarray) -> np.ndarray:
        return (self.dihedral[ids] == 0) & (self.colour_map[ids] == IDENTITY_COLOURS).all(axis=-1)


def table_from_names(names: list[str]) -> AugTable:
    """Parse HRM names (`<task>_t<tid>_<10 digits>`) into a table; for datasets built by HRM's own
    builder, which has no augmentations.npz."""
    m = len(names)
    base = np.full(m, -1, dtype=np.int32)
    dihedral = np.zeros(m, dtype=np.uint8)
    colour_map = np.tile(IDENTITY_COLOURS, (m, 1))
    task_index: dict[str, int] = {}
    for i, name in enumerate(names):
        if i == fmt.BLANK_ID:
            continue
        parts = name.split(fmt.AUG_SEPARATOR)
        if len(parts) >= 3 and parts[-2][:1] == "t" and len(parts[-1]) == 10 and parts[-1].isdigit():
            task = fmt.AUG_SEPARATOR.join(parts[:-2])
            dihedral[i] = int(parts[-2][1:])
            colour_map[i] = [int(c) for c in parts[-1]]
        else:
            task = name
        base[i] = task_index.setdefault(task, len(task_index))
    return AugTable(base, dihedral, colour_map, list(task_index))


def load_table(data_dir: Path) -> AugTable:
    path = data_dir / fmt.AUGMENTATIONS_FILE
    if path.is_file():
        from arc_data.dataset import load_npz
        from arc_data.errors import DatasetError

        try:
            z = load_npz(path, ("base_task", "dihedral", "colour_map", "task_names"))
        except DatasetError as e:
            raise UserError(str(e)) from None
        table = AugTable(
            z["base_task"].astype(np.int32),
            z["dihedral"].astype(np.uint8),
            z["colour_map"].astype(np.uint8),
            [str(s) for s in z["task_names"]],
        )
    else:
        ids = data_dir / fmt.IDENTIFIERS_FILE
        if not ids.is_file():
            raise UserError(f"{data_dir}: neither {fmt.AUGMENTATIONS_FILE} nor {fmt.IDENTIFIERS_FILE} found")
        from arc_data.errors import DatasetError
        from arc_data.fsio import parse_json

        try:
            table = table_from_names(parse_json(ids.read_bytes(), str(ids)))
        except DatasetError as e:
            raise UserError(str(e)) from None
    m = len(table)
    if table.dihedral.shape != (m,) or table.colour_map.shape != (m, 10):
        raise UserError(f"{path}: table fields disagree in length ({m} rows)")
    if (table.dihedral > 7).any():
        raise UserError(f"{path}: dihedral ids outside 0..7")
    rows = np.flatnonzero(table.base_task >= 0)
    if not (np.sort(table.colour_map[rows], axis=1) == IDENTITY_COLOURS).all():
        raise UserError(f"{path}: a colour_map row is not a permutation of 0..9")
    return table


@dataclass(frozen=True)
class TestInput:
    """One original test input of a task, in the original frame."""

    task: str
    index: int  # position among the task's test inputs
    input_grid: np.ndarray
    truth_grid: np.ndarray | None  # None: an unlabelled test input (build-arc test_labels=optional)
    input_key: tuple[int, int]
    truth_key: tuple[int, int] | None

    @property
    def labelled(self) -> bool:
        return self.truth_key is not None


@dataclass(frozen=True)
class GroundTruth:
    tasks: list[str]  # in dataset order
    test_inputs: list[TestInput]  # grouped by task, in dataset order
    task_index: dict[str, int]  # table task index -> position in `tasks` (by name)


def read_rows(path: Path, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Rows [a, b) for each range of a 2-D .npy file, concatenated, by seek + read.

    Not np.load(mmap_mode="r"): with the kernel's read-ahead, touching 400 scattered rows of an
    ARC-1-sized file maps hundreds of MB into the process.
    """
    if not path.is_file():  # a FIFO would block open() forever
        from arc_data.fsio import why_not_a_file

        raise UserError(f"{path}: {why_not_a_file(path)}")
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except (ValueError, EOFError) as e:
            raise UserError(f"{path}: not a readable .npy ({e})") from None
        if len(shape) != 2 or fortran or dtype.hasobject:
            raise UserError(f"{path}: expected a C-order 2-D array, got shape {shape}, dtype {dtype}")
        offset, row_bytes = f.tell(), shape[1] * dtype.itemsize
        size = os.fstat(f.fileno()).st_size
        if size < offset + shape[0] * row_bytes:
            raise UserError(f"{path}: truncated ({size:,} bytes, its header says {shape[0]:,} rows of "
                            f"{row_bytes} bytes after a {offset}-byte header)")
        parts = []
        for a, b in ranges:
            if not 0 <= a <= b <= shape[0]:
                raise UserError(f"{path}: rows [{a}, {b}) outside its {shape[0]} rows")
            f.seek(offset + a * row_bytes)
            parts.append(np.frombuffer(f.read((b - a) * row_bytes), dtype=dtype).reshape(b - a, shape[1]))
    return np.concatenate(parts) if parts else np.empty((0, shape[1]), dtype=dtype)


def _read_examples(data_dir: Path, split: str, ranges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of the example ranges: seek+read in the materialised layout; the compact
    layout encodes them on the fly through arc_data's reader."""
    d = data_dir / split
    try:
        if (d / fmt.INPUTS_FILE).exists():
            return read_rows(d / fmt.INPUTS_FILE, ranges), read_rows(d / fmt.LABELS_FILE, ranges)
        from arc_data.dataset import open_split
        from arc_data.errors import DatasetError

        idx = np.concatenate([np.arange(a, b) for a, b in ranges]) if ranges else np.empty(0, np.int64)
        try:
            return open_split(data_dir, split).examples(idx)
        except DatasetError as e:
            raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"{d}: cannot read the {split} split ({e})") from None


def load_ground_truth(data_dir: Path, split: str, table: AugTable) -> GroundTruth:
    """Test inputs and true outputs from each task's un-augmented copy (dihedral 0, identity colours)."""
    from eval.decode import decode_keys

    d = data_dir / split
    try:
        pids = np.load(d / fmt.PUZZLE_IDS_FILE)
        pidx = np.load(d / fmt.PUZZLE_INDICES_FILE)
    except (OSError, ValueError) as e:
        raise UserError(f"{d}: cannot read the {split} split ({e})") from None
    if pidx.shape != (len(pids) + 1,):
        raise UserError(f"{d}: {fmt.PUZZLE_INDICES_FILE} has {len(pidx)} entries for {len(pids)} puzzles")
    if pids.size and (int(pids.max()) >= len(table) or int(pids.min()) < 0):
        raise UserError(f"{d}: puzzle ids outside the augmentation table ({len(table)} rows)")
    originals = np.flatnonzero(table.is_identity(pids) & (table.base_task[pids] >= 0))
    all_tasks = np.unique(table.base_task[pids])
    missing = np.setdiff1d(all_tasks[all_tasks >= 0], table.base_task[pids[originals]])
    if missing.size:
        names = sorted(table.task_names[t] for t in missing)
        raise UserError(f"{d}: {len(names)} task(s) have no un-augmented copy, e.g. {names[:3]}")
    if originals.size == 0:
        raise UserError(f"{d}: no tasks found in the {split} split")
    ranges = [(int(pidx[p]), int(pidx[p + 1])) for p in originals]
    tok_in, tok_out = _read_examples(data_dir, split, ranges)
    ids = np.concatenate([np.full(b - a, pids[p], dtype=np.int64) for p, (a, b) in zip(originals, ranges)])
    in_keys, _ = decode_keys(tok_in, ids, table.dihedral, table.inv_colour)
    out_keys, _ = decode_keys(tok_out, ids, table.dihedral, table.inv_colour)
    tasks: list[str] = []
    test_inputs: list[TestInput] = []
    row = 0
    for p, (a, b) in zip(originals, ranges):
        name = table.task_names[table.base_task[pids[p]]]
        if name in tasks:
            raise UserError(f"{d}: task '{name}' has two un-augmented copies")
        tasks.append(name)
        seen: set[tuple[int, int]] = set()
        for j in range(b - a):
            ik = (int(in_keys[row, 0]), int(in_keys[row, 1]))
            if ik in seen:
                raise UserError(f"{d}: task '{name}' has two identical test inputs")
            seen.add(ik)
            grid_in, grid_out = fmt.crop(tok_in[row]), fmt.crop(tok_out[row])
            unlabelled = not (tok_out[row] != fmt.PAD).any()  # every label cell PAD: no solution known
            if grid_in.size == 0 or (grid_out.size == 0 and not unlabelled):
                raise UserError(f"{d}: task '{name}' test input {j} decodes to an empty grid")
            truth_key = None if unlabelled else (int(out_keys[row, 0]), int(out_keys[row, 1]))
            test_inputs.append(TestInput(name, j, grid_in, None if unlabelled else grid_out, ik, truth_key))
            row += 1
    return GroundTruth(tasks, test_inputs, {n: i for i, n in enumerate(tasks)})


# ---------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Candidate:
    """A distinct de-augmented grid predicted for one test input, with its votes."""

    key: tuple[int, int]  # 128-bit grid hash in the original frame
    votes: int  # prediction rows (augmented copies) that decode to this grid
    mean_q: float  # mean of sigmoid(q_halt) over those rows
    first_seen: int  # index in predictions.npz of its first vote
    shape: tuple[int, int]  # (rows, cols) in the original frame; (0, 0) = no grid
    grid: np.ndarray | None = field(default=None, compare=False, repr=False)  # set for the top ones

    def rank_key(self) -> tuple[int, float, int]:
        """Ascending sort key: most votes, then highest mean sigmoid(q_halt), then first seen."""
        return (-self.votes, -self.mean_q, self.first_seen)


def rank(candidates: list[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=Candidate.rank_key)


@dataclass
class TestResult:
    test: TestInput
    candidates: list[Candidate]  # ranked, all of them
    truth_rank: int | None  # 0-based position of the true output, None if never predicted

    @property
    def num_votes(self) -> int:
        return sum(c.votes for c in self.candidates)

    def correct_at(self, k: int) -> bool:
        return self.truth_rank is not None and self.truth_rank < k


@dataclass
class TaskResult:
    name: str
    tests: list[TestResult]

    @property
    def labelled(self) -> bool:
        """Scored: every test input has its solution (a task with any unlabelled one is not scored)."""
        return all(t.test.labelled for t in self.tests)

    def correct_at(self, k: int) -> bool:
        return all(t.correct_at(k) for t in self.tests)


def pass_at_k(truth_ranks: list[list[int | None]], ks: list[int] | tuple[int, ...]) -> dict[str, dict[str, float | None]]:
    """Percentages per K. `truth_ranks[task][test input]` = 0-based rank of the true output or None.

    hrm: a task counts when every test input has its truth in the top K (HRM, the headline).
    fractional: a task earns (test inputs right) / (test inputs) (TRM).
    No tasks (an unlabelled build: nothing to score): every value is None.
    """
    out: dict[str, dict[str, float | None]] = {"hrm": {}, "fractional": {}}
    if not truth_ranks:
        return {p: {str(k): None for k in ks} for p in out}
    for k in ks:
        hits = [[r is not None and r < k for r in task] for task in truth_ranks]
        out["hrm"][str(k)] = 100.0 * float(np.mean([all(h) for h in hits]))
        out["fractional"][str(k)] = 100.0 * float(np.mean([np.mean(h) for h in hits]))
    return out


@dataclass
class VoteResult:
    tasks: list[TaskResult]
    ks: list[int]
    scores: dict[str, dict[str, float]]  # pass_at_k() output
    warnings: list[str]
    stats: dict[str, float | int]
    config: dict | None = None  # the resolved VoteConfig when run from the CLI (kept in tasks.json)
    submission: dict = field(default_factory=dict)  # submission.json (eval.arcprize)


def _segments(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort rows by cols (first col = primary key); return (order, start of each run)."""
    order = np.lexsort(cols[::-1])
    change = np.zeros(len(order), dtype=bool)
    change[:1] = True
    for c in cols:
        s = c[order]
        change[1:] |= s[1:] != s[:-1]
    return order, np.flatnonzero(change)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def vote(
    preds: Predictions,
    data_dir: str | Path,
    split: str = "test",
    ks: list[int] | tuple[int, ...] = DEFAULT_KS,
    keep_grids: int = 10,
    table: AugTable | None = None,
    truth: GroundTruth | None = None,
    challenges: str | Path | None = None,
) -> VoteResult:
    """Vote `preds` (validated, e.g. from load_predictions) against the dataset in `data_dir`.

    Rows with puzzle id 0 (blank padding) are dropped. Ids outside the table, or of tasks not in
    `split`, raise UserError. Rows whose input matches no test input of their task are dropped
    with a warning (UserError if none match). Rows that decode to no grid vote for the empty
    candidate (never correct) with a warning. Grids are materialised for the top `keep_grids`
    candidates of each test input.
    """
    t0 = time.perf_counter()
    data_dir = Path(data_dir)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise UserError(f"ks must be positive integers, got {ks}")
    meta = require_arc(data_dir, split, "hrm-deeploop vote")
    check_dataset(preds, meta.seq_len, meta.vocab_size)
    table = table if table is not None else load_table(data_dir)
    truth = truth if truth is not None else load_ground_truth(data_dir, split, table)
    warnings: list[str] = []
    t_load = time.perf_counter() - t0

    pid = preds.puzzle_identifiers.astype(np.int64)
    outside = pid >= len(table)
    if outside.any():
        raise UserError(
            f"predictions: {int(outside.sum())} rows have puzzle ids not in the dataset's table "
            f"({len(table)} ids), e.g. {np.unique(pid[outside])[:5].tolist()}"
        )
    keep = np.flatnonzero(pid != fmt.BLANK_ID)
    if len(keep) == 0:
        raise UserError("predictions: every row is a blank padding row (puzzle id 0)")
    pid = pid[keep]
    task_of_table = np.full(len(table.task_names) + 1, -1, dtype=np.int64)  # table task -> truth task
    for i, name in enumerate(table.task_names):
        task_of_table[i] = truth.task_index.get(name, -1)
    task = task_of_table[table.base_task[pid]]  # base_task -1 (blank) maps to the extra -1 slot
    if (task < 0).any():
        bad = np.unique(pid[task < 0])[:5].tolist()
        raise UserError(
            f"predictions: {int((task < 0).sum())} rows belong to tasks not in the {split} split, "
            f"e.g. puzzle ids {bad}"
        )

    from eval.decode import decode_keys, grid_of_shape

    t1 = time.perf_counter()
    inv = table.inv_colour
    in_keys, _ = decode_keys(preds.inputs, pid, table.dihedral, inv, rows=keep)
    keys, shapes = decode_keys(preds.predictions, pid, table.dihedral, inv, rows=keep)
    t_decode = time.perf_counter() - t1

    # Which original test input each row predicts.
    lookup = {(truth.task_index[t.task], t.input_key): i for i, t in enumerate(truth.test_inputs)}
    test_of_row = np.full(len(keep), -1, dtype=np.int64)
    order, starts = _segments(task, in_keys[:, 0], in_keys[:, 1])
    ends = np.append(starts[1:], len(order))
    for s, e in zip(starts, ends):
        r = order[s]
        test_of_row[order[s:e]] = lookup.get((int(task[r]), (int(in_keys[r, 0]), int(in_keys[r, 1]))), -1)
    unmatched = test_of_row < 0
    if unmatched.all():
        raise UserError(
            f"predictions: no row's input matches a test input of its task in {data_dir / split} "
            "(predictions made on another dataset build?)"
        )
    if unmatched.any():
        warnings.append(
            f"{int(unmatched.sum())} prediction rows have inputs that match no test input of their task; "
            f"dropped (first at row {int(keep[np.argmax(unmatched)])})"
        )
    empty = (shapes[:, 0] == 0) & ~unmatched
    if empty.any():
        warnings.append(f"{int(empty.sum())} predictions decode to no grid (0x0); they vote for the empty candidate")

    # Votes per (test input, candidate key).
    t2 = time.perf_counter()
    m = np.flatnonzero(~unmatched)
    q = sigmoid(preds.q_halt[keep[m]])
    order, starts = _segments(test_of_row[m], keys[m, 0], keys[m, 1])
    votes = np.diff(np.append(starts, len(order)))
    sum_q = np.add.reduceat(q[order], starts)
    first = m[order[starts]]  # index into keep; the stable sort puts the earliest row first
    cand_test = test_of_row[first]
    per_test: list[list[Candidate]] = [[] for _ in truth.test_inputs]
    columns = zip(cand_test.tolist(), keys[first, 0].tolist(), keys[first, 1].tolist(), votes.tolist(),
                  (sum_q / votes).tolist(), keep[first].tolist(), shapes[first, 0].tolist(), shapes[first, 1].tolist())
    for test, k1, k2, n, mean_q, seen, rows, cols in columns:
        per_test[test].append(Candidate(key=(k1, k2), votes=n, mean_q=mean_q, first_seen=seen, shape=(rows, cols)))
    t_count = time.perf_counter() - t2

    tasks: dict[str, TaskResult] = {name: TaskResult(name, []) for name in truth.tasks}
    for t, cands in zip(truth.test_inputs, per_test):
        ranked = rank(cands)
        for i in range(min(keep_grids, len(ranked))):
            c = ranked[i]
            pid_row = int(preds.puzzle_identifiers[c.first_seen])
            grid = grid_of_shape(preds.predictions[c.first_seen], table.dihedral[pid_row], inv[pid_row], c.shape)
            ranked[i] = dataclasses.replace(c, grid=grid)
        truth_rank = next((i for i, c in enumerate(ranked) if c.key == t.truth_key), None)
        if not ranked:
            warnings.append(f"task '{t.task}' test input {t.index} has no predictions; counted as wrong")
        tasks[t.task].tests.append(TestResult(t, ranked, truth_rank))
    task_list = [tasks[name] for name in truth.tasks]
    scored = [task for task in task_list if task.labelled]
    scores = pass_at_k([[t.truth_rank for t in task.tests] for task in scored], ks)
    if len(scored) < len(task_list):
        warnings.append(f"{len(task_list) - len(scored)} of {len(task_list)} tasks have test inputs without "
                        "solutions: voted and submitted, not scored")
    from eval.arcprize import arc_prize_score, cover, read_json, solutions_of, submission

    sub = submission(task_list)
    prize = arc_prize_score(sub, solutions_of(scored)) if scored else None
    scores[ARC_PRIZE] = {"2": None if prize is None else prize.percent}
    if challenges is not None:
        sub, notes = cover(sub, read_json(challenges, "challenges"), str(challenges))
        warnings += notes
    stats = {
        "num_rows": len(preds),
        "num_blank_rows": int(len(preds) - len(keep)),
        "num_unmatched_rows": int(unmatched.sum()),
        "num_empty_predictions": int(empty.sum()),
        "num_votes": int(len(m)),
        "num_candidates": int(len(starts)),
        "num_tasks": len(task_list),
        "num_scored_tasks": len(scored),
        "num_test_inputs": len(truth.test_inputs),
        "seconds_load_dataset": round(t_load, 3),
        "seconds_decode": round(t_decode, 3),
        "seconds_count": round(t_count, 3),
        "seconds_total": round(time.perf_counter() - t0, 3),
    }
    return VoteResult(task_list, ks, scores, warnings, stats, submission=sub)
