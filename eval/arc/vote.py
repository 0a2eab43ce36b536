"""`hrm-deeploop vote`: count-first voting (HRM spec 6.2-6.3): predictions of every augmented copy
-> ranked candidates per original test input -> pass@K, written by `eval.arc.report`.

For each prediction row: crop the predicted grid (HRM's top-left max-area rule), map it back to
the original frame with the augmentation table (inverse dihedral and inverse colour map; the two
commute), and key it (`arc_data.grid_key`). The row's test input is found the same way, from its
`inputs` sequence, among the un-augmented test inputs of the row's base task (read by
`arc_data.originals`). Candidates are ranked by the one rule of `eval.ranking`: most votes, then
highest mean sigmoid(q_halt), then first seen (row order of predictions.npz).

Entry points: `vote(predictions, data_dir)` (library) and `run(cfg)` (the command).
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.dataset import DatasetMeta, read_meta, task_kind
from arc_data.errors import DatasetError
from arc_data.files.guard import check_output_dir
from arc_data.originals import AugTable, load_aug_table, read_originals
from eval.arc.results import (
    ARC_PRIZE,
    DEFAULT_KS,
    Candidate,
    Columns,
    Ranked,
    TaskResult,
    TestInput,
    TestResult,
    VoteResult,
    pass_at_k,
)
from eval.arc.threads import Workers
from eval.outputs import check_outputs, write_outputs
from eval.predictions import Predictions, check_dataset, load_predictions
from eval.ranking import rank_keys, sigmoid
from hrm_deeploop.errors import UserError

MISSING = "???"  # omegaconf.MISSING (a required field), without importing omegaconf at start-up


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
    log_probs: str | None = None  # log_probs.npy (evaluate poe=true): also rank by the product of experts (eval.arc.poe)
    poe_candidates: int = 10  # count-first top candidates per test input that the product of experts re-ranks

    def __post_init__(self) -> None:
        if not self.ks or any(not isinstance(k, int) or k < 1 for k in self.ks):
            raise UserError(f"ks={self.ks}: must be a non-empty list of positive integers")
        if len(set(self.ks)) != len(self.ks):
            raise UserError(f"ks={self.ks}: lists a K twice (each K is one pass@K column)")
        for key in ("max_candidates", "report_candidates", "poe_candidates"):
            if getattr(self, key) < 1:
                raise UserError(f"{key}={getattr(self, key)}: must be >= 1")
        if self.split not in ("test", "train"):
            raise UserError(f"split={self.split!r}: must be test or train")


# ---------------------------------------------------------------- dataset side


def require_arc(data_dir: str | Path, split: str, what: str = "the vote") -> DatasetMeta:
    """Raise a one-line UserError unless `data_dir` is an ARC dataset in ARC's token format; returns
    the split's dataset.json. Cheap: reads manifest.json and dataset.json only."""
    root = Path(data_dir)
    try:
        meta = read_meta(root / split / fmt.META_FILE)
        kind = task_kind(root) if (root / fmt.MANIFEST_FILE).is_file() else None
    except DatasetError as e:
        raise UserError(str(e)) from None
    arc_tokens = meta.seq_len == fmt.SEQ_LEN and meta.vocab_size == fmt.VOCAB_SIZE
    if kind not in (None, "arc") or not arc_tokens:
        raise UserError(
            f"{what} is ARC's (dihedral + colour augmentations of 30x30 grids), but '{root}' is a "
            f"{kind or 'non-ARC'} dataset (seq_len {meta.seq_len}, vocab_size {meta.vocab_size}): score it with "
            f"`hrm-deeploop evaluate` (exact and token accuracy, tta=N voting; docs/evaluation.md)")
    return meta


def read_table(data_dir: Path) -> AugTable:
    """The dataset's augmentation table (`arc_data.originals.load_aug_table`), errors as one UserError."""
    try:
        return load_aug_table(data_dir)
    except DatasetError as e:
        raise UserError(str(e)) from None


@dataclass(frozen=True)
class GroundTruth:
    tasks: list[str]  # in dataset order
    test_inputs: list[TestInput]  # grouped by task, in dataset order
    task_index: dict[str, int]  # table task index -> position in `tasks` (by name)


def load_ground_truth(data_dir: Path, split: str, table: AugTable) -> GroundTruth:
    """Test inputs and true outputs from each task's un-augmented copy (dihedral 0, identity colours)."""
    from eval.arc.decode import decode_grids, decode_keys  # lazy: keeps numba off `vote --help`

    d = data_dir / split
    try:
        orig = read_originals(data_dir, split, table)
    except DatasetError as e:
        raise UserError(str(e)) from None
    ids = np.repeat(orig.puzzle_ids, orig.counts)
    rows = np.arange(len(ids), dtype=np.int64)
    in_keys, in_shapes = decode_keys(orig.inputs, ids, table.dihedral, table.inv_colour)
    out_keys, out_shapes = decode_keys(orig.labels, ids, table.dihedral, table.inv_colour)
    # the originals' copies are un-augmented: these are their crops (`arc_data.format.crop`)
    inputs = decode_grids(orig.inputs, rows, ids, table.dihedral, table.inv_colour, in_shapes)
    outputs = decode_grids(orig.labels, rows, ids, table.dihedral, table.inv_colour, out_shapes)
    test_inputs: list[TestInput] = []
    labelled = (orig.labels != fmt.PAD).any(axis=1).tolist()  # False: every label cell PAD, no solution known
    row = 0
    for name, count in zip(orig.names, orig.counts.tolist()):
        seen: set[tuple[int, int]] = set()
        for j in range(count):
            ik = (int(in_keys[row, 0]), int(in_keys[row, 1]))
            if ik in seen:
                raise UserError(f"{d}: task '{name}' has two identical test inputs")
            seen.add(ik)
            grid_in, grid_out = inputs[row], outputs[row]
            unlabelled = not labelled[row]
            if grid_in.size == 0 or (grid_out.size == 0 and not unlabelled):
                raise UserError(f"{d}: task '{name}' test input {j} decodes to an empty grid")
            truth_key = None if unlabelled else (int(out_keys[row, 0]), int(out_keys[row, 1]))
            test_inputs.append(TestInput(name, j, grid_in, None if unlabelled else grid_out, ik, truth_key))
            row += 1
    return GroundTruth(list(orig.names), test_inputs, {n: i for i, n in enumerate(orig.names)})


# ---------------------------------------------------------------- counting


def _stand_in(preds: Predictions, top_in: int, top_pred: int) -> Predictions:
    """One row of `preds`' width whose tokens are `top_in` / `top_pred`: what `check_dataset` (the one
    owner of the rule and its message) reads of the whole file, its width and its largest tokens, which
    the decode kernel finds as it reads every row anyway (one pass over the 227 MB at 126k rows, not two)."""
    width = preds.inputs.shape[1]
    return Predictions(preds.puzzle_identifiers[:1], np.full((1, width), top_in, np.uint8),
                       np.full((1, width), top_pred, np.uint8), preds.q_halt[:1])


def _truth_ranks(tests: list[TestInput], k1: np.ndarray, k2: np.ndarray, cand_test: np.ndarray,
                 bounds: np.ndarray) -> list[int | None]:
    """Per test input, the 0-based rank of the candidate whose key is its truth's (None: no such
    candidate, or no truth given), from the ranked candidates' keys (grouped by test input)."""
    labelled = np.array([t.truth_key is not None for t in tests], dtype=bool)
    t1 = np.array([t.truth_key[0] if t.truth_key else 0 for t in tests], dtype=np.uint64)
    t2 = np.array([t.truth_key[1] if t.truth_key else 0 for t in tests], dtype=np.uint64)
    hit = np.flatnonzero((k1 == t1[cand_test]) & (k2 == t2[cand_test]) & labelled[cand_test])
    ranks: list[int | None] = [None] * len(tests)
    for j, i in zip(hit.tolist(), cand_test[hit].tolist()):  # keys are distinct within a test input
        ranks[i] = j - int(bounds[i])
    return ranks


def vote(
    preds: Predictions,
    data_dir: str | Path,
    split: str = "test",
    ks: list[int] | tuple[int, ...] = DEFAULT_KS,
    keep_grids: int = 10,
    table: AugTable | None = None,
    truth: GroundTruth | None = None,
    challenges: str | Path | None = None,
    log_probs: np.ndarray | None = None,
    poe_candidates: int = 10,
) -> VoteResult:
    """Vote `preds` (validated, e.g. from load_predictions) against the dataset in `data_dir`.

    Rows with puzzle id 0 (blank padding) are dropped. Ids outside the table, or of tasks not in
    `split`, raise UserError. Rows whose input matches no test input of their task are dropped
    with a warning (UserError if none match). Rows that decode to no grid vote for the empty
    candidate (never correct) with a warning. Grids are materialised for the top `keep_grids`
    candidates of each test input. With `log_probs` (float [n, L, V], rows as `preds`), the top
    `poe_candidates` are also ranked by the product of experts (`eval.arc.poe`): `result.poe`.
    """
    t0 = time.perf_counter()
    data_dir = Path(data_dir)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise UserError(f"ks must be positive integers, got {ks}")
    meta = require_arc(data_dir, split, "hrm-deeploop vote")
    check_dataset(_stand_in(preds, 0, 0), meta.seq_len, meta.vocab_size)  # the rows' width; tokens: after decoding
    table = table if table is not None else read_table(data_dir)
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

    from eval.arc.decode import (  # lazy: keeps numba off `vote --help`
        decode_grids,
        decode_keys,
        grid_of_shape,
    )
    from eval.arc.grouping import group_rows  # lazy: as decode

    t1 = time.perf_counter()
    inv = table.inv_colour
    top_in, top_pred = np.zeros(1, np.uint8), np.zeros(1, np.uint8)  # the largest token of each (kept) row
    with Workers(1, "decode") as side:  # the kernel runs without the GIL
        inputs = side.submit(decode_keys, preds.inputs, pid, table.dihedral, inv, rows=keep, top=top_in)
        keys, shapes = decode_keys(preds.predictions, pid, table.dihedral, inv, rows=keep, top=top_pred)
        in_keys, _ = inputs.result()
    blank = np.flatnonzero(preds.puzzle_identifiers == fmt.BLANK_ID)
    if len(blank):  # blank rows are not decoded: their tokens are checked too
        top_in[0] = max(top_in[0], preds.inputs[blank].max())
        top_pred[0] = max(top_pred[0], preds.predictions[blank].max())
    check_dataset(_stand_in(preds, int(top_in[0]), int(top_pred[0])), meta.seq_len, meta.vocab_size)
    t_decode = time.perf_counter() - t1

    # Which original test input each row predicts.
    lookup = {(truth.task_index[t.task], t.input_key): i for i, t in enumerate(truth.test_inputs)}
    test_of_row = np.full(len(keep), -1, dtype=np.int64)
    order, starts = group_rows(task, in_keys)
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

    # Votes per (test input, candidate key), ranked per test input by the one rule (`eval.ranking`):
    # one sort of every candidate, test input first (first_seen is unique: the order is total).
    t2 = time.perf_counter()
    m = np.flatnonzero(~unmatched)
    q = sigmoid(preds.q_halt[keep[m]])
    order, starts = group_rows(test_of_row[m], keys[m])
    votes = np.diff(np.append(starts, len(order)))
    mean_q = np.add.reduceat(q[order], starts) / votes
    first = m[order[starts]]  # index into keep; the stable sort puts the earliest row first
    cand_test = test_of_row[first]
    ranked = np.lexsort(rank_keys(votes, mean_q, keep[first]) + [cand_test])
    first, cand_test = first[ranked], cand_test[ranked]
    bounds = np.searchsorted(cand_test, np.arange(len(truth.test_inputs) + 1))
    top = np.flatnonzero(np.arange(len(first)) - bounds[cand_test] < keep_grids)  # grids for these
    grids: list = [None] * len(first)
    for j, g in zip(top.tolist(), decode_grids(preds.predictions, keep[first[top]], pid[first[top]], table.dihedral,
                                              inv, shapes[first[top]])):
        grids[j] = g
    k1, k2 = keys[first, 0], keys[first, 1]
    columns = Columns(k1, k2, votes[ranked], mean_q[ranked], keep[first], shapes[first, 0], shapes[first, 1], grids)
    truth_rank = _truth_ranks(truth.test_inputs, k1, k2, cand_test, bounds)
    t_count = time.perf_counter() - t2

    tasks: dict[str, TaskResult] = {name: TaskResult(name, []) for name in truth.tasks}
    for i, t in enumerate(truth.test_inputs):
        if bounds[i] == bounds[i + 1]:
            warnings.append(f"task '{t.task}' test input {t.index} has no predictions; counted as wrong")
        tasks[t.task].tests.append(TestResult(t, Ranked(columns, int(bounds[i]), int(bounds[i + 1])), truth_rank[i]))
    task_list = [tasks[name] for name in truth.tasks]
    scored = [task for task in task_list if task.labelled]
    scores = pass_at_k([[t.truth_rank for t in task.tests] for task in scored], ks)
    if len(scored) < len(task_list):
        warnings.append(f"{len(task_list) - len(scored)} of {len(task_list)} tasks have test inputs without "
                        "solutions: voted and submitted, not scored")
    from eval.arc.arcprize import (  # lazy: `vote --help` skips it
        arc_prize_score,
        cover,
        read_json,
        solutions_of,
        submission,
    )

    sub = submission(task_list)
    prize = arc_prize_score(sub, solutions_of(scored)) if scored else None
    scores[ARC_PRIZE] = {"2": None if prize is None else prize.percent}
    poe_result = None
    if log_probs is not None:
        from eval.arc.poe import poe  # lazy: `vote --help` skips it

        def grid_of(c: Candidate) -> np.ndarray:
            r = int(preds.puzzle_identifiers[c.first_seen])
            return grid_of_shape(preds.predictions[c.first_seen], table.dihedral[r], inv[r], c.shape)

        rows = keep[m]
        poe_result = poe(task_list, log_probs, test_of_row[m], rows, preds.puzzle_identifiers[rows].astype(np.int64),
                         table.dihedral, table.colour_map, ks, poe_candidates, grid_of)
    chal = read_json(challenges, "challenges") if challenges is not None else None
    if chal is not None:
        sub, notes = cover(sub, chal, str(challenges))
        warnings += notes
        if poe_result is not None:
            poe_result.submission = cover(poe_result.submission, chal, str(challenges))[0]
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
    # a model without a halting head (LoopViT's canvases) writes q_halt 0 on every row: its ties go to
    # the first seen, and the report says so instead of ranking by a constant
    halting = bool(len(m) and np.ptp(preds.q_halt[keep[m]]) > 0)
    return VoteResult(task_list, ks, scores, warnings, stats, submission=sub, poe=poe_result, halting=halting)


# ---------------------------------------------------------------- the command


def run(c: VoteConfig) -> int:
    """`hrm-deeploop vote predictions=FILE data_dir=DIR output_dir=OUT [ks=[1,2]] [overwrite=true]`."""
    from eval.arc.report import every_output  # lazy: keeps PIL off `vote --help`

    out = check_output_dir(c.output_dir, [c.data_dir])
    keep_freed_memory()
    check_outputs(out, every_output(), c.overwrite, "vote")
    with without_cycle_collector():
        result = vote_file(c, Path(c.predictions))
        write_vote(result, out, c.overwrite, c.max_candidates, c.report, c.report_candidates)
    print_summary(result, out)
    return 0


def keep_freed_memory() -> None:
    """glibc's malloc told to keep what the process frees for its next allocations: a vote makes and
    frees hundreds of arrays of 0.1-3 MB (sort orders, masks, the pictures' tokens and streams), which
    malloc would otherwise map afresh and hand back each time, every page of each a new page fault
    and a page zeroed by the kernel (about 4,000 faults and 0.05 s of CPU at 126k predictions,
    docs/notebook/2026-12-06-vote.md, fourth pass). For the command's process only (`run`); the
    memory is the process's until it ends. Nothing where the C library is not glibc's."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their allocators as they are
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MiB (glibc's most) from the heap, not fresh maps
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: the heap's free top is not handed back below 1 GiB


@contextmanager
def without_cycle_collector() -> Iterator[None]:
    """The cyclic garbage collector off for the block: a vote makes about 10^5 objects that live to its
    end (candidates, grids as lists for the JSON) and no garbage cycles, so the collections their
    allocations set off only walk them again and again (0.1-0.2 s of CPU at 126k rows). Back on after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def write_vote(result: VoteResult, output_dir: str | Path, overwrite: bool = False, max_candidates: int = 10,
               report: bool = True, report_candidates: int = 3) -> list[Path]:
    """Every vote output of `result` (`eval.arc.report`) in output_dir, published together (`eval.outputs`);
    with overwrite, an earlier vote's outputs this one does not write (poe.json, the report) are removed."""
    from eval.arc.report import every_output, write_vote_files  # lazy: keeps PIL off `vote --help`

    return write_outputs(output_dir, every_output(), overwrite, "vote", "vote",
                         lambda stage: write_vote_files(result, stage, max_candidates, report, report_candidates))


def vote_file(c: VoteConfig, path: Path) -> VoteResult:
    """Vote over the predictions in `path` (c.predictions, or evaluate's staged copy); warnings on stderr."""
    t0 = time.perf_counter()
    preds = load_predictions(path)
    log_probs = None
    if c.log_probs:
        from eval.arc.poe import load_log_probs  # lazy: `vote --help` skips it

        log_probs = load_log_probs(c.log_probs, len(preds), fmt.VOCAB_SIZE)
    t_read = time.perf_counter() - t0
    result = vote(preds, c.data_dir, split=c.split, ks=c.ks, keep_grids=max(c.max_candidates, c.report_candidates, 2),
                  challenges=c.challenges, log_probs=log_probs, poe_candidates=c.poe_candidates)
    result.stats["seconds_read_predictions"] = round(t_read, 3)
    result.config = dataclasses.asdict(c)
    for w in result.warnings[:20]:
        print(f"warning: {w}", file=sys.stderr)
    if len(result.warnings) > 20:
        print(f"warning: ... and {len(result.warnings) - 20} more (see tasks.json)", file=sys.stderr)
    return result


def print_summary(result: VoteResult, out: Path) -> None:
    from eval.arc.report import format_table, ranking  # lazy: keeps PIL off `vote --help`

    print(format_table(result.scores, result.poe and result.poe.scores, ranking(result)))
    s = result.stats
    print(
        f"{s['num_votes']} votes, {s['num_candidates']} candidates, {s['num_tasks']} tasks, "
        f"{s['num_test_inputs']} test inputs; read {s['seconds_read_predictions']:.1f}s, "
        f"vote {s['seconds_total']:.1f}s -> {out}"
    )
