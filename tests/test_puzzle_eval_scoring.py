"""Puzzle evaluation, numpy side: TTA groups round-trip, count-first voting (ARC's rule), exact /
token / to-solve accuracy and per-segment scores on constructed predictions."""

import itertools

import numpy as np
import pytest

from arc_data import sudoku
from arc_data.grid_key import row_keys
from arc_data.puzzles.registry import TASKS
from eval.arc.results import Candidate, rank
from eval.puzzles import tta as T
from eval.puzzles.scoring import (
    RowSteps,
    first_halt,
    row_scores,
    score_examples,
    solve_mask,
    summarize,
    supervised_mask,
    vote_copies,
)
from eval.ranking import sigmoid
from hrm_deeploop.errors import UserError

# ---------------------------------------------------------------- TTA groups


def _all_sudoku4_table() -> T.Table:
    """Every element of the 4x4 group (3,072): digit maps x transpose x row perms x column perms."""
    lines = [list(b0 + b1) for order in ((0, 1), (1, 0))
             for b0 in itertools.permutations((2 * order[0], 2 * order[0] + 1))
             for b1 in itertools.permutations((2 * order[1], 2 * order[1] + 1))]
    digits = [(0, *p) for p in itertools.permutations((1, 2, 3, 4))]
    rows = list(itertools.product(digits, (False, True), lines, lines))
    return {"digit_map": np.array([r[0] for r in rows], np.uint8), "transpose": np.array([r[1] for r in rows]),
            "row_perm": np.array([r[2] for r in rows], np.uint8), "col_perm": np.array([r[3] for r in rows], np.uint8)}


def test_sudoku4_every_transform_round_trips_and_keeps_solutions():
    g = T.group_for("sudoku", 16, 6)
    table = _all_sudoku4_table()
    assert len(table["transpose"]) == g.size == 3072
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(g.size, 16)).astype(np.uint8)  # any tokens, PAD and blank included
    y = g.apply(x, table)
    assert np.array_equal(g.invert(y, table), x)
    assert np.array_equal(g.apply(g.invert(x, table), table), x)
    _, solution, _, _ = sudoku.generate(rng, 4)
    boards = g.apply(np.tile(solution + 1, (g.size, 1)), table) - 1  # tokens -> digits
    assert all(sudoku.is_solution_reference(b, 4) for b in boards)
    assert 1 < len({b.tobytes() for b in boards}) <= 288  # 288 solved 4x4 boards in all
    ident = g.identity(5)
    assert np.array_equal(g.apply(x[:5], ident), x[:5])


@pytest.mark.parametrize("n", [6, 9])
def test_sudoku_drawn_transforms_round_trip(n):
    g = T.group_for("sudoku", n * n, n + 2)
    table = g.draw(np.random.default_rng(1), 50, 4)
    x = np.random.default_rng(2).integers(0, n + 3, size=(200, n * n)).astype(np.uint8)  # one token past vocab too
    assert np.array_equal(g.invert(g.apply(x, table), table), x)
    _, solution, _, _ = sudoku.generate(np.random.default_rng(n), n)
    assert all(sudoku.is_solution_reference(b - 1, n) for b in g.apply(np.tile(solution + 1, (200, 1)), table))


def test_maze_group_round_trip_and_distinct_draws():
    g = T.group_for("maze", 25, 6)
    table = {"dihedral": np.arange(8, dtype=np.uint8)}
    x = np.random.default_rng(0).integers(0, 6, size=(8, 25)).astype(np.uint8)
    same = np.tile(x[:1], (8, 1))
    moved = g.apply(same, table)
    assert len({r.tobytes() for r in moved}) == 8  # a random board: the 8 transforms all differ
    assert np.array_equal(g.invert(moved, table), same)
    assert np.array_equal(g.invert(g.apply(x, table), table), x)
    d = g.draw(np.random.default_rng(3), 10, 7)["dihedral"].reshape(10, 7)
    assert all(sorted(r) == list(range(1, 8)) for r in d)  # all seven non-identity transforms, per example
    assert np.array_equal(d, g.draw(np.random.default_rng(3), 10, 7)["dihedral"].reshape(10, 7))  # seeded
    with pytest.raises(UserError, match="tta <= 7"):
        g.draw(np.random.default_rng(0), 2, 8)


@pytest.mark.parametrize("task,seq_len,vocab,message", [
    ("generic", 16, 6, "no invertible augmentation group"),
    ("arc", 900, 12, "no invertible augmentation group"),
    ("sudoku", 20, 6, "16, 36, 64 or 81"),
    ("sudoku", 16, 11, "vocab_size 6"),
    ("maze", 20, 6, "square board"),
    ("maze", 25, 7, "vocab_size 6"),
])
def test_group_for_refuses_what_it_cannot_invert(task, seq_len, vocab, message):
    with pytest.raises(UserError, match=message) as e:
        T.group_for(task, seq_len, vocab)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- voting


def _keys(labels: list[list[int]]) -> np.ndarray:
    """[E, C, 2] keys from small integer labels (equal labels = equal predictions)."""
    a = np.asarray(labels, np.uint64)
    return np.stack([a, a * np.uint64(7)], axis=-1)


def test_vote_majority_wins():
    v = vote_copies(_keys([[1, 2, 2, 1, 2]]), np.zeros((1, 5), np.float32))
    assert v.top(3).tolist() == [[1, 0, -1]]  # candidate of copies 1,2,4 (3 votes) before copies 0,3
    assert v.votes[0].tolist() == [2, 3, 0, 0, 0] and v.num_candidates.tolist() == [2]


def test_vote_q_breaks_vote_ties_then_first_seen():
    # 2-2 tie: the later candidate (copies 1, 3) has the higher halting logits
    v = vote_copies(_keys([[1, 2, 1, 2]]), np.array([[-1.0, 3.0, -1.0, 3.0]], np.float32))
    assert v.top(2).tolist() == [[1, 0]]
    # votes and q tie: first seen wins
    v = vote_copies(_keys([[5, 6, 6, 5], [9, 8, 7, 9]]), np.zeros((2, 4), np.float32))
    assert v.top(3).tolist() == [[0, 1, -1], [0, 1, 2]]


def test_vote_matches_eval_vote_rank_on_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(200):
        E, C = 3, int(rng.integers(1, 9))
        labels = rng.integers(0, 3, size=(E, C))
        q = rng.choice(np.array([-2.0, 0.0, 0.5], np.float32), size=(E, C))
        v = vote_copies(_keys(labels.tolist()), q)
        for e in range(E):
            cands = []
            for c in range(C):
                members = np.flatnonzero(labels[e] == labels[e, c])
                if members[0] != c:
                    continue
                s = 0.0
                for i in members:
                    s += float(sigmoid(q[e, i]))
                cands.append(Candidate(key=(int(labels[e, c]), 0), votes=len(members), mean_q=s / len(members),
                                       first_seen=c, shape=(1, 1)))
            want = [c.first_seen for c in rank(cands)]
            assert v.top(C)[e, :len(want)].tolist() == want


def test_row_keys_equal_rows_equal_keys():
    x = np.random.default_rng(0).integers(0, 12, size=(500, 81)).astype(np.uint8)
    x[10] = x[3]
    k = row_keys(x)
    assert (k[10] == k[3]).all()
    assert len({tuple(r) for r in k}) == len({r.tobytes() for r in x}) == 499


# ---------------------------------------------------------------- accuracy


def test_exact_token_and_solve_accuracy_on_constructed_predictions():
    # two 4-cell "sudoku" rows: inputs blank (1) where there is something to solve; labels 0 is ignored
    inputs = np.array([[2, 1, 1, 3], [1, 1, 4, 5]], np.uint8)
    labels = np.array([[2, 4, 5, 3], [3, 0, 4, 5]], np.uint8)
    sup = supervised_mask(labels, 0)
    assert sup.tolist() == [[True] * 4, [True, False, True, True]]
    solve = solve_mask(TASKS["sudoku"], inputs, labels, sup)
    assert solve.tolist() == [[False, True, True, False], [True, False, False, False]]
    pred = np.array([[2, 4, 5, 3], [3, 2, 4, 1]], np.uint8)  # row 0 exact; row 1 wrong at cell 3 (cell 1 ignored)
    exact, tok, sol = row_scores(pred, labels, sup, solve)
    assert exact.tolist() == [True, False] and tok.tolist() == [4, 2] and sol.tolist() == [2, 1]
    exact, tok, _ = row_scores(pred, labels, supervised_mask(labels, None), None)  # nothing ignored
    assert exact.tolist() == [True, False] and tok.tolist() == [4, 2]
    assert solve_mask(TASKS["maze"], inputs, np.array([[5, 2, 5, 0]]), np.ones((1, 4), bool)).tolist() == [[True, False, True, False]]
    assert solve_mask(None, inputs, labels, sup) is None  # generic


def _rows(exact, halts, keys=None, q=None, tok=None):
    exact = np.asarray(exact, bool)
    R, S = exact.shape
    return RowSteps(exact=exact, token_correct=np.asarray(tok if tok is not None else exact * 4, np.int32),
                    solve_correct=np.asarray(exact * 2, np.int32), q_halt=np.asarray(q if q is not None else np.zeros((R, S)), np.float32),
                    halts=np.asarray(halts, bool), keys=keys)


def test_per_segment_and_first_halt_scores():
    # 2 examples, 1 copy, 3 segments
    r = _rows(exact=[[0, 1, 1], [0, 0, 1]], halts=[[0, 1, 0], [0, 0, 0]])
    assert first_halt(r.halts).tolist() == [1, 2]
    ex = score_examples(r, 1)
    assert ex["plain_exact"].tolist() == [[False, True, True], [False, False, True]]
    assert ex["plain_halt_segment"].tolist() == [2, 3] and ex["plain_halted"].tolist() == [True, False]
    assert ex["plain_halt_exact"].tolist() == [True, True]
    m = summarize(ex, np.array([4, 4]), np.array([2, 2]))
    assert [s["exact_accuracy"] for s in m["per_segment"]] == [0.0, 50.0, 100.0]
    assert [s["halted_by_here"] for s in m["per_segment"]] == [0.0, 50.0, 50.0]
    assert m["final"]["no_tta"] == {"exact_accuracy": 100.0, "token_accuracy": 100.0, "solve_token_accuracy": 100.0}
    assert m["q_halt"]["no_tta"]["mean_segments"] == 2.5 and "tta" not in m["final"]


def test_tta_vote_scores_on_constructed_rows():
    # 1 example x 4 copies x 2 segments. Segment 1: copies 1,2 agree on a wrong answer (2 votes) against
    # copy 0 (right, 1 vote) and copy 3 (1 vote, seen later): top-1 wrong, pass@2 right. Segment 2:
    # copies 1-3 right.
    right, wrong, other = 1, 2, 3
    labels = [[right, wrong], [wrong, right], [wrong, right], [other, right]]
    keys = _keys(labels)  # [R=4, S=2, 2]
    exact = [[lab == right for lab in row] for row in labels]
    tok = [[4 if lab == right else 1 for lab in row] for row in labels]
    halts = [[1, 0], [0, 1], [0, 0], [1, 0]]  # copies 0, 3 halt after segment 1; 1, 2 after 2 (2 by the cap)
    ex = score_examples(_rows(exact, halts, keys=keys, tok=tok), 4)
    assert ex["plain_exact"].tolist() == [[True, False]]
    assert ex["vote_exact"].tolist() == [[False, True]] and ex["vote_pass2"].tolist() == [[True, True]]
    assert ex["vote_token"].tolist() == [[1, 4]] and ex["vote_any"].tolist() == [[True, True]]
    assert ex["vote_candidates"].tolist() == [[3, 2]]
    assert ex["vote_top_copy"].tolist() == [1] and ex["vote_top_votes"].tolist() == [3]
    # at each copy's first halt: copy 0 right (seg 1), copies 1, 2 right (seg 2), copy 3 other (seg 1)
    assert ex["vote_halt_exact"].tolist() == [True] and ex["vote_halt_segment"].tolist() == [1.5]
    m = summarize(ex, np.array([4]), None)
    assert m["final"]["tta"]["pass@1"] == 100.0 and m["per_segment"][0]["tta_exact_accuracy"] == 0.0
    assert m["per_segment"][0]["tta_pass@2"] == 100.0 and "solve_token_accuracy" not in m["final"]["no_tta"]
    assert m["final"]["tta"]["token_accuracy"] == 100.0


def test_examples_without_supervised_tokens_are_not_counted():
    ex = score_examples(_rows(exact=[[1], [0]], halts=[[0], [0]]), 1)
    m = summarize(ex, np.array([4, 0]), None)
    assert m["num_examples"] == 1 and m["num_skipped_unsupervised"] == 1
    assert m["final"]["no_tta"]["exact_accuracy"] == 100.0
