"""Product-of-experts scoring (the ARChitects' rule, ARC Prize 2024): every candidate of a test input
is scored under every view of that input, and the views' log-likelihoods are summed; candidates rank
by that sum instead of by their votes. The same predictions give both rankings, so the count-first
vote (`eval.arc.vote`) and this one are compared on equal terms.

A candidate's log-likelihood under one view (a prediction row: its dihedral transform and colour
map, `arc_data.originals.AugTable`): the candidate grid is augmented into the row's frame and
encoded as a label (`arc_data.format.encode_grid`: cells, then the EOS row and column that close
it), and the row's per-position log-probabilities (`log_probs.npy`, written by `evaluate poe=true`)
are summed over the label's non-PAD tokens: the tokens the model is trained on (PAD positions are
ignored by the loss, so their probabilities say nothing). The EOS tokens make the grid's shape part
of the likelihood, as the end-of-sequence token does for a language model.

`log_probs.npy`: float16 [n, L, V], row i the log-softmax of the last segment's logits of row i of
predictions.npz (same order, blank rows included): 21.6 KB a row for ARC (900 x 12), so a per-task
run of 100 views is ~2 MB; a whole evaluation set of 1,000 views per task is not its use.

LoopViT's rows are canvases (`eval.arc.canvas_views`): a row's file holds its canvas table instead,
float16 [n, 31 * 31, 13] (`canvas_table`: 24 KB a row), what any candidate's log-likelihood on that
canvas needs: per cell (i, j) of the row's frame at the row's scale s and corner (x0, y0), the
log-probabilities of each colour summed over the cell's s x s pixels (channels 0-9), and of the
border colour 11 over the s pixels of a border column at the cell (10), of a border row (11), and at
the corner pixel (12). A candidate of H x W cells scores the sum of its cells' colour channels, the
column channel down column W (rows < H), the row channel along row H (columns < W) and the corner at
(H, W): exactly the log-probability of the canvas target the loss trains on (the output and its
border), pixel by pixel; a pixel off the canvas counts log(1/12).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from arc_data.format import SEQ_LEN, augment_grid, encode_grid
from eval.arc.results import ARC_PRIZE, Candidate, TaskResult, TestResult, pass_at_k
from hrm_deeploop.errors import UserError

FILE = "log_probs.npy"
CANVAS_SIDE = 31  # a table's cells per side: a 30 x 30 grid and its border
CANVAS_CHANNELS = 13  # colours 0-9, the border column, the border row, the corner
BORDER = 11
UNIFORM = -float(np.log(12))  # a pixel off the canvas: the model said nothing about it
RULE = "sum over views of the candidate's label log-likelihood (non-PAD tokens) desc, then the count-first order"


def load_log_probs(path: str | Path, num_rows: int, vocab_size: int) -> np.ndarray:
    """`log_probs.npy` (memory-mapped), checked against predictions.npz's rows and the vocabulary."""
    p = Path(path)
    try:
        lp = np.load(p, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UserError(f"log_probs={p}: cannot read as .npy ({e})") from None
    canvas = lp.ndim == 3 and lp.shape[1:] == (CANVAS_SIDE ** 2, CANVAS_CHANNELS)
    if lp.ndim != 3 or lp.shape[0] != num_rows or (lp.shape[2] != vocab_size and not canvas) \
            or not np.issubdtype(lp.dtype, np.floating):
        raise UserError(f"log_probs={p}: shape {lp.shape} {lp.dtype}, expected float [{num_rows}, L, {vocab_size}] "
                        f"or LoopViT's canvas tables [{num_rows}, {CANVAS_SIDE ** 2}, {CANVAS_CHANNELS}] (one row "
                        "per row of predictions.npz: evaluate poe=true writes both)")
    return lp


def is_canvas(log_probs: np.ndarray) -> bool:
    return log_probs.shape[1:] == (CANVAS_SIDE ** 2, CANVAS_CHANNELS)


def canvas_table(log_probs: np.ndarray, scale: int, x0: int, y0: int) -> np.ndarray:
    """float32 [31 * 31, 13]: a predicted canvas's log-probabilities (S, S, 12) gathered per cell
    of the row's frame at this scale and corner (module docstring). Only the cells that touch the
    canvas are gathered (at most S x S pixels); the others are `UNIFORM` per pixel."""
    s, n = scale, CANVAS_SIDE
    S = log_probs.shape[0]
    rows, cols = min(n, -(-(S - y0) // s)), min(n, -(-(S - x0) // s))  # cells touching the canvas
    lp = np.full((rows * s, cols * s, log_probs.shape[2]), UNIFORM, dtype=np.float64)
    h, w = min(S - y0, rows * s), min(S - x0, cols * s)
    lp[:h, :w] = log_probs[y0:y0 + h, x0:x0 + w]  # the frame from the corner; past the canvas edge: uniform
    out = np.empty((n, n, CANVAS_CHANNELS), dtype=np.float64)
    out[..., :10], out[..., 10:12], out[..., 12] = s * s * UNIFORM, s * UNIFORM, UNIFORM
    out[:rows, :cols, :10] = lp[..., :10].reshape(rows, s, cols, s, 10).sum(axis=(1, 3))  # colour sums per cell
    border = lp[..., BORDER]
    out[:rows, :cols, 10] = border[:, ::s].reshape(rows, s, cols).sum(axis=1)  # s pixels down the cell's first column
    out[:rows, :cols, 11] = border[::s, :].reshape(rows, cols, s).sum(axis=2)  # s pixels along the cell's first row
    out[:rows, :cols, 12] = border[::s, ::s]
    return out.reshape(n * n, CANVAS_CHANNELS).astype(np.float32)


def canvas_log_likelihood(table: np.ndarray, grid: np.ndarray) -> float:
    """A grid's (the row's frame) log-likelihood from one row's `canvas_table`."""
    t = np.asarray(table, dtype=np.float64).reshape(CANVAS_SIDE, CANVAS_SIDE, CANVAS_CHANNELS)
    H, W = grid.shape
    cells = np.take_along_axis(t[:H, :W, :10], np.asarray(grid, dtype=np.int64)[..., None], -1).sum()
    return float(cells + t[:H, W, 10].sum() + t[H, :W, 11].sum() + t[H, W, 12])


def candidate_log_likelihood(log_probs: np.ndarray, grids: list[np.ndarray], dihedral: np.ndarray,
                             colour_map: np.ndarray) -> np.ndarray:
    """float64 [C]: each grid (original frame) scored under every view, summed. `log_probs`
    [R, L, V] are the views' rows, `dihedral` [R] and `colour_map` [R, 10] their augmentations."""
    total = np.zeros(len(grids), dtype=np.float64)
    if not grids:
        return total
    if is_canvas(log_probs):  # LoopViT: each row's canvas table (module docstring)
        for r in range(log_probs.shape[0]):
            total += [canvas_log_likelihood(log_probs[r], augment_grid(g, int(dihedral[r]), colour_map[r])) for g in grids]
        return total
    pos = np.arange(log_probs.shape[1])
    for r in range(log_probs.shape[0]):
        labels = np.stack([encode_grid(augment_grid(g, int(dihedral[r]), colour_map[r])) for g in grids])  # (C, L)
        lp = np.asarray(log_probs[r], dtype=np.float64)  # (L, V)
        total += np.where(labels != 0, lp[pos, labels], 0.0).sum(axis=1)
    return total


def rerank(test: TestResult, log_probs: np.ndarray, rows: np.ndarray, dihedral: np.ndarray, colour_map: np.ndarray,
           max_candidates: int) -> TestResult:
    """The test input's top `max_candidates` count-first candidates (grids set), ranked by their
    summed log-likelihood over the views `rows`; the rest follow in count-first order."""
    head, tail = test.candidates[:max_candidates], test.candidates[max_candidates:]
    scorable = [c for c in head if c.grid is not None and c.shape != (0, 0)]
    ll = candidate_log_likelihood(log_probs[rows], [np.asarray(c.grid) for c in scorable], dihedral, colour_map)
    scored = [dataclasses.replace(c, log_lik=float(v)) for c, v in zip(scorable, ll)]
    # stable: equal sums keep the count-first order; the empty grid (no cells to score) goes last
    ranked = sorted(scored, key=lambda c: -c.log_lik) + [c for c in head if c not in scorable] + tail
    truth = test.test.truth_key
    truth_rank = next((i for i, c in enumerate(ranked) if c.key == truth), None) if truth is not None else None
    return TestResult(test.test, ranked, truth_rank)


@dataclasses.dataclass
class PoeResult:
    tasks: list[TaskResult]  # candidates ranked by the product of experts
    scores: dict  # pass_at_k() output, with the ARC Prize pass@2 of `submission`
    submission: dict


def poe(tasks: list[TaskResult], log_probs: np.ndarray, test_of_row: np.ndarray, rows: np.ndarray, pid: np.ndarray,
        dihedral: np.ndarray, colour_map: np.ndarray, ks: list[int], max_candidates: int,
        grid_of: callable) -> PoeResult:
    """Re-rank every test input's candidates of a count-first vote (`tasks`, in the vote's test-input
    order) by the product of experts. `test_of_row[j]` is the test input of view `rows[j]` (a row of
    predictions.npz, puzzle id `pid[j]`); `grid_of(candidate)` materialises a candidate's grid."""
    from eval.arc.arcprize import arc_prize_score, solutions_of, submission  # lazy: 113 modules, scoring only

    if log_probs.shape[1] != SEQ_LEN and not is_canvas(log_probs):
        raise UserError(f"log_probs: rows of {log_probs.shape[1]} positions, ARC's are {SEQ_LEN}")
    order = np.argsort(test_of_row, kind="stable")
    bounds = np.searchsorted(test_of_row[order], np.arange(sum(len(t.tests) for t in tasks) + 1))
    out: list[TaskResult] = []
    i = 0
    for task in tasks:
        tests = []
        for t in task.tests:
            views = order[bounds[i]:bounds[i + 1]]
            head = [c if c.grid is not None else dataclasses.replace(c, grid=grid_of(c))
                    for c in t.candidates[:max_candidates]]
            t = TestResult(t.test, head + t.candidates[max_candidates:], t.truth_rank)
            tests.append(rerank(t, log_probs, rows[views], dihedral[pid[views]], colour_map[pid[views]],
                                max_candidates))
            i += 1
        out.append(TaskResult(task.name, tests))
    scored = [t for t in out if t.labelled]
    scores = pass_at_k([[r.truth_rank for r in t.tests] for t in scored], ks)
    sub = submission(out)
    scores[ARC_PRIZE] = {"2": arc_prize_score(sub, solutions_of(scored)).percent if scored else None}
    return PoeResult(out, scores, sub)


def poe_json(result: PoeResult, max_candidates: int) -> dict:
    """`poe.json`: the rule, pass@K, and per test input the candidates in PoE order with their
    summed log-likelihood and their count-first votes."""
    return {
        "ranking": RULE,
        "pass_at_k": result.scores,
        "tasks": {task.name: [{"index": t.test.index, "truth_rank": None if t.truth_rank is None else t.truth_rank + 1,
                               "candidates": [{"rank": i + 1, "log_lik": c.log_lik, "votes": c.votes,
                                               "shape": list(c.shape),
                                               "correct": c.key == t.test.truth_key if t.test.labelled else None,
                                               "grid": None if c.grid is None else np.asarray(c.grid).tolist()}
                                              for i, c in enumerate(t.candidates[:max_candidates])]}
                              for t in task.tests]
                  for task in result.tasks},
    }


__all__ = ["FILE", "RULE", "Candidate", "PoeResult", "canvas_log_likelihood", "canvas_table", "candidate_log_likelihood",
           "load_log_probs", "poe", "poe_json"]
