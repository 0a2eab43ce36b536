"""Count-first ranking (votes, then mean q, then first seen) and pass@K arithmetic."""

import numpy as np
import pytest

from eval.arc.results import Candidate, pass_at_k, rank
from eval.arc.vote import vote
from tests.vote_helpers import grid, make_split, predict

INPUT = grid([[1, 2, 3], [4, 5, 6]])
TRUTH = grid([[7, 7], [0, 9], [1, 1]])
WRONG = grid([[3]])


def cand(votes: int, mean_q: float, first: int) -> Candidate:
    return Candidate(key=(first, 0), votes=votes, mean_q=mean_q, first_seen=first, shape=(1, 1))


def test_rank_key_is_votes_then_q_then_first_seen():
    a, b, c, d = cand(5, 0.1, 9), cand(3, 0.9, 0), cand(3, 0.9, 4), cand(3, 0.95, 7)
    assert rank([c, b, a, d]) == [a, d, b, c]


@pytest.fixture
def one_task(tmp_path):
    """One task, one test input, the original + 5 augmented copies (6 example rows)."""
    return make_split(tmp_path / "data", {"task": [(INPUT, TRUTH)]}, num_aug=5)


def top(result):
    t = result.tasks[0].tests[0]
    return t.candidates, t.truth_rank


def test_votes_beat_q(one_task):
    # 3 copies say WRONG with low q, 2 say TRUTH with high q: votes win.
    p = predict(one_task, np.arange(5), [WRONG] * 3 + [TRUTH] * 2, [-5, -5, -5, 5, 5])
    r = vote(p, one_task.root)
    cands, truth_rank = top(r)
    assert [c.votes for c in cands] == [3, 2]
    assert truth_rank == 1
    assert r.scores["hrm"]["1"] == 0.0 and r.scores["hrm"]["2"] == 100.0


def test_q_breaks_vote_ties(one_task):
    p = predict(one_task, np.arange(4), [WRONG, WRONG, TRUTH, TRUTH], [-1, -1, 1, 1])
    cands, truth_rank = top(vote(p, one_task.root))
    assert truth_rank == 0
    assert cands[0].mean_q == pytest.approx(1 / (1 + np.exp(-1)))
    assert np.array_equal(cands[0].grid, TRUTH)


def test_mean_q_not_sum(one_task):
    # equal votes; TRUTH has the higher mean, WRONG the higher single value
    p = predict(one_task, np.arange(4), [WRONG, TRUTH, WRONG, TRUTH], [4, 1, -3, 1])
    assert top(vote(p, one_task.root))[1] == 0


@pytest.mark.parametrize("truth_first", [True, False])
def test_first_seen_breaks_exact_ties(one_task, truth_first):
    order = [TRUTH, WRONG, WRONG, TRUTH] if truth_first else [WRONG, TRUTH, TRUTH, WRONG]
    p = predict(one_task, np.arange(4), order, [0.5] * 4)
    cands, truth_rank = top(vote(p, one_task.root))
    assert truth_rank == (0 if truth_first else 1)
    assert [c.first_seen for c in cands] == [0, 1]


def test_no_grid_votes_for_empty_candidate_with_warning(one_task):
    p = predict(one_task, np.arange(4), [None, None, None, TRUTH], [0, 0, 0, 0])
    r = vote(p, one_task.root)
    cands, truth_rank = top(r)
    assert cands[0].shape == (0, 0) and cands[0].votes == 3
    assert truth_rank == 1
    assert any("no grid" in w for w in r.warnings)


def test_pass_at_k_both_protocols():
    ranks = [
        [0],  # right at every K
        [1],  # right from K=2
        [None],  # never
        [0, 4],  # two test inputs: the second only from K=10
        [0, None],  # two test inputs: the second never
    ]
    s = pass_at_k(ranks, [1, 2, 10])
    assert s["hrm"] == pytest.approx({"1": 100 * 1 / 5, "2": 100 * 2 / 5, "10": 100 * 3 / 5})
    assert s["fractional"] == pytest.approx(
        {"1": 100 * (1 + 0 + 0 + 0.5 + 0.5) / 5, "2": 100 * (1 + 1 + 0 + 0.5 + 0.5) / 5, "10": 100 * (1 + 1 + 0 + 1 + 0.5) / 5}
    )


def test_pass_at_k_rank_equal_to_k_is_outside_top_k():
    s = pass_at_k([[2]], [1, 2, 3])
    assert s["hrm"] == {"1": 0.0, "2": 0.0, "3": 100.0}
