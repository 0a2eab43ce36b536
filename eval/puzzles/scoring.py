"""Puzzle scoring (numpy): exact and token accuracy, count-first voting over test-time copies, per
ACT segment. The model side (running segments, augmenting inputs) is `eval.puzzles.evaluate`.

Rows come example-major with their copies contiguous: row = example * C + copy, copy 0 the test
input as stored, copies 1..C-1 its test-time augmentations (`eval.puzzles.tta`). Every prediction is scored
in the original frame (mapped back with the inverse transform) against the example's labels:

- supervised tokens: labels != the dataset's ignore_label_id (all of them if it is null);
- exact: every supervised token right (examples without a supervised token are not counted);
- token accuracy: right supervised tokens / supervised tokens, summed over the examples;
- solve-token accuracy: the same over the cells to solve, as the task defines them
  (`GridTask.solve_mask`: Sudoku, the blank cells of the input; Maze, the cells of the true path,
  'o' in the label). None for a task that is not a grid task of the registry.

Voting (`vote_copies`) is the one ranking rule (`eval.ranking`, ARC's too): the copies' predictions,
mapped back, are grouped into distinct candidates; candidates rank by most votes, then highest mean
sigmoid(q_halt), then first seen (lowest copy index: the un-augmented input first). A candidate's
identity is the one grid key (`arc_data.grid_key.row_keys`: 128 bits over the row's tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arc_data.puzzles.registry import GridTask
from eval.ranking import rank_order, sigmoid


def supervised_mask(labels: np.ndarray, ignore_label_id: int | None) -> np.ndarray:
    return np.ones(labels.shape, bool) if ignore_label_id is None else labels != ignore_label_id


def solve_mask(task: GridTask | None, inputs: np.ndarray, labels: np.ndarray, supervised: np.ndarray
               ) -> np.ndarray | None:
    """bool [E, L]: the supervised cells to solve (the task's `solve_mask`), or None for a task
    without them (a generic dataset: task None)."""
    return None if task is None else supervised & task.solve_mask(inputs, labels)


def row_scores(pred: np.ndarray, labels: np.ndarray, supervised: np.ndarray, solve: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """exact bool [R], right supervised tokens int32 [R], right cells to solve int32 [R] for
    predictions pred [R, L] in the original frame (labels, masks [R, L])."""
    right = (pred == labels) & supervised
    tok = right.sum(axis=1, dtype=np.int32)
    exact = (tok == supervised.sum(axis=1)) & supervised.any(axis=1)
    sol = (right & solve).sum(axis=1, dtype=np.int32) if solve is not None else np.zeros(len(pred), np.int32)
    return exact, tok, sol


# ---------------------------------------------------------------- voting


@dataclass
class VoteOutcome:
    """The ranked candidates of E examples with C copies each."""

    order: np.ndarray  # int64 [E, C]: order[e, r] = first copy of the rank-r candidate (valid for r < num_candidates)
    votes: np.ndarray  # int64 [E, C]: votes of the candidate whose first copy is c (0 if c is not a first copy)
    mean_q: np.ndarray  # float64 [E, C]: its mean sigmoid(q_halt)
    num_candidates: np.ndarray  # int64 [E]

    def top(self, k: int) -> np.ndarray:
        """int64 [E, k]: first copy of the rank-0..k-1 candidates, -1 past the last candidate."""
        k_avail = min(k, self.order.shape[1])
        out = np.full((self.order.shape[0], k), -1, np.int64)
        ranks = np.arange(k_avail)
        out[:, :k_avail] = np.where(ranks[None, :] < self.num_candidates[:, None], self.order[:, :k_avail], -1)
        return out


def vote_copies(keys: np.ndarray, q_halt: np.ndarray) -> VoteOutcome:
    """Count-first vote among the C copies of each of E examples: keys uint64 [E, C, 2] (hash of the
    prediction in the original frame), q_halt [E, C]. Ranks candidates by the one rule
    (`eval.ranking.rank_order`: votes desc, mean sigmoid(q_halt) desc, first seen asc)."""
    E, C = q_halt.shape
    eq = (keys[:, :, None, :] == keys[:, None, :, :]).all(axis=-1)  # (E, C, C): copy i predicts what copy j does
    first = eq.argmax(axis=2)  # (E, C): the first copy with the same prediction (its candidate)
    copies = np.arange(C)
    is_cand = first == copies[None, :]
    votes = np.zeros((E, C), np.int64)
    sum_q = np.zeros((E, C), np.float64)
    sig = sigmoid(q_halt)
    rows = np.arange(E)
    for i in range(C):  # in copy order, as eval.arc.vote sums in row order
        votes[rows, first[:, i]] += 1
        sum_q[rows, first[:, i]] += sig[:, i]
    mean_q = np.where(votes > 0, sum_q / np.maximum(votes, 1), 0.0)
    order = rank_order(votes, mean_q, copies, valid=is_cand)  # non-candidates last
    return VoteOutcome(order=order, votes=votes, mean_q=mean_q, num_candidates=is_cand.sum(axis=1))


# ---------------------------------------------------------------- per segment


@dataclass
class RowSteps:
    """Scores of R = E * C prediction rows (example-major) after each of S segments."""

    exact: np.ndarray  # bool [R, S]
    token_correct: np.ndarray  # int32 [R, S]
    solve_correct: np.ndarray  # int32 [R, S]
    q_halt: np.ndarray  # float32 [R, S]
    halts: np.ndarray  # bool [R, S]: the Q head says halt after this segment (the model's training rule)
    keys: np.ndarray | None  # uint64 [R, S, 2] (needed when C > 1)


def first_halt(halts: np.ndarray) -> np.ndarray:
    """int64 [R]: the 0-based segment where Q first says halt, else the last segment."""
    S = halts.shape[1]
    return np.where(halts.any(axis=1), halts.argmax(axis=1), S - 1)


def _voted(keys: np.ndarray, q: np.ndarray, exact: np.ndarray, tok: np.ndarray, sol: np.ndarray
           ) -> dict[str, np.ndarray]:
    """Per example: top-1 / top-2 correctness and the top-1 candidate's token counts."""
    v = vote_copies(keys, q)
    top = v.top(2)
    rows = np.arange(len(q))
    t0 = top[:, 0]
    second = np.where(top[:, 1] >= 0, exact[rows, np.maximum(top[:, 1], 0)], False)
    return {"exact": exact[rows, t0], "pass2": exact[rows, t0] | second, "token": tok[rows, t0],
            "solve": sol[rows, t0], "any": exact.any(axis=1), "candidates": v.num_candidates, "top_copy": t0,
            "top_votes": v.votes[rows, t0]}


def score_examples(r: RowSteps, copies: int) -> dict[str, np.ndarray]:
    """Per-example results (E = R / copies) from per-row, per-segment scores.

    plain_*: copy 0 alone (no test-time augmentation), [E, S] per segment; plain_halt_*: copy 0 at the
    segment where Q first says halt ([E]); plain_halt_segment [E] (1-based), plain_halted [E].
    With copies > 1, vote_*: the count-first vote over the copies, per segment ([E, S]: exact = top-1
    right, pass2 = right among the top 2, token/solve = the top-1 candidate's counts, any = some
    copy right, candidates = distinct predictions), vote_halt_*: each copy at its own first Q halt.
    """
    R, S = r.exact.shape
    E = R // copies
    assert E * copies == R, (R, copies)
    c0 = np.arange(E) * copies
    h = first_halt(r.halts)  # (R,)
    out: dict[str, np.ndarray] = {
        "plain_exact": r.exact[c0], "plain_token": r.token_correct[c0], "plain_solve": r.solve_correct[c0],
        "plain_halt_segment": h[c0] + 1, "plain_halted": r.halts[c0].any(axis=1),
        "plain_halt_exact": r.exact[c0, h[c0]], "plain_halt_token": r.token_correct[c0, h[c0]],
        "plain_halt_solve": r.solve_correct[c0, h[c0]],
    }
    if copies == 1:
        return out
    assert r.keys is not None, "voting needs the rows' keys"
    per_step = []
    for s in range(S):
        per_step.append(_voted(r.keys[:, s].reshape(E, copies, 2), r.q_halt[:, s].reshape(E, copies),
                               r.exact[:, s].reshape(E, copies), r.token_correct[:, s].reshape(E, copies),
                               r.solve_correct[:, s].reshape(E, copies)))
    for name in ("exact", "pass2", "token", "solve", "any", "candidates"):
        out[f"vote_{name}"] = np.stack([p[name] for p in per_step], axis=1)
    out["vote_top_copy"], out["vote_top_votes"] = per_step[-1]["top_copy"], per_step[-1]["top_votes"]
    rows = np.arange(R)
    at_halt = _voted(r.keys[rows, h].reshape(E, copies, 2), r.q_halt[rows, h].reshape(E, copies),
                     r.exact[rows, h].reshape(E, copies), r.token_correct[rows, h].reshape(E, copies),
                     r.solve_correct[rows, h].reshape(E, copies))
    for name in ("exact", "pass2", "token", "solve"):
        out[f"vote_halt_{name}"] = at_halt[name]
    out["vote_halt_segment"] = (h + 1).reshape(E, copies).mean(axis=1)
    return out


# ---------------------------------------------------------------- summary


def _pct(num: float, den: float) -> float | None:
    return None if den == 0 else round(100.0 * float(num) / float(den), 4)


def summarize(ex: dict[str, np.ndarray], num_supervised: np.ndarray, num_solve: np.ndarray | None) -> dict:
    """Accuracies in percent from `score_examples` output (concatenated over every example) and the
    examples' supervised / to-solve token counts ([E])."""
    counted = num_supervised > 0
    n_ex = int(counted.sum())
    sup = float(num_supervised.sum())
    sol = None if num_solve is None else float(num_solve.sum())

    def block(exact: np.ndarray, token: np.ndarray, solve: np.ndarray, **more: np.ndarray) -> dict:
        d = {"exact_accuracy": _pct(exact[counted].sum(), n_ex), "token_accuracy": _pct(token.sum(), sup)}
        if sol is not None:
            d["solve_token_accuracy"] = _pct(solve.sum(), sol)
        for k, v in more.items():
            d[k] = _pct(v[counted].sum(), n_ex)
        return d

    S = ex["plain_exact"].shape[1]
    last = S - 1
    voting = "vote_exact" in ex
    m: dict = {"num_examples": n_ex, "num_skipped_unsupervised": int((~counted).sum()), "segments": S}
    m["final"] = {"no_tta": block(ex["plain_exact"][:, last], ex["plain_token"][:, last], ex["plain_solve"][:, last])}
    if voting:
        m["final"]["tta"] = block(ex["vote_exact"][:, last], ex["vote_token"][:, last], ex["vote_solve"][:, last],
                                  **{"pass@1": ex["vote_exact"][:, last], "pass@2": ex["vote_pass2"][:, last],
                                     "any_copy_exact": ex["vote_any"][:, last]})
        m["final"]["tta"]["mean_candidates"] = round(float(ex["vote_candidates"][:, last][counted].mean()), 4)
    m["q_halt"] = {"no_tta": block(ex["plain_halt_exact"], ex["plain_halt_token"], ex["plain_halt_solve"])}
    m["q_halt"]["no_tta"]["mean_segments"] = round(float(ex["plain_halt_segment"][counted].mean()), 4)
    m["q_halt"]["no_tta"]["halted_fraction"] = _pct(ex["plain_halted"][counted].sum(), n_ex)
    if voting:
        m["q_halt"]["tta"] = block(ex["vote_halt_exact"], ex["vote_halt_token"], ex["vote_halt_solve"],
                                   **{"pass@2": ex["vote_halt_pass2"]})
        m["q_halt"]["tta"]["mean_segments"] = round(float(ex["vote_halt_segment"][counted].mean()), 4)
    steps = []
    for s in range(S):
        row = {"segment": s + 1, **block(ex["plain_exact"][:, s], ex["plain_token"][:, s], ex["plain_solve"][:, s]),
               "halted_by_here": _pct(((ex["plain_halt_segment"] <= s + 1) & ex["plain_halted"])[counted].sum(), n_ex)}
        if voting:
            row["tta_exact_accuracy"] = _pct(ex["vote_exact"][:, s][counted].sum(), n_ex)
            row["tta_pass@2"] = _pct(ex["vote_pass2"][:, s][counted].sum(), n_ex)
        steps.append(row)
    m["per_segment"] = steps
    return m
