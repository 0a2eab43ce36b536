"""Product-of-experts scoring (eval.arc.poe) beside the count-first vote, on hand-built predictions."""

import json

import numpy as np
import pytest

from arc_data import format as fmt
from eval.arc.poe import candidate_log_likelihood, load_log_probs
from eval.arc.vote import VoteConfig, run, vote
from hrm_deeploop.errors import UserError
from tests.vote_helpers import grid, make_split, predict
from tests.vote_synthetic import encode_augmented

INPUT = grid([[1, 2, 3], [4, 5, 6]])
TRUTH = grid([[7, 7], [0, 9], [1, 1]])
WRONG = grid([[3, 3], [0, 9], [1, 1]])  # same shape: only one cell's colour differs


def label(split, row, g):
    pid = split.example_puzzle_id[row]
    return encode_augmented(g, np.array([split.dihedral[pid]]), split.colour_map[pid][None])[0]


def view_log_probs(split, rows, own, other, p_own, p_other):
    """Per row: probability p_own on its own candidate's label tokens, p_other on the other's
    where they differ, the rest spread evenly; returned as log-probs [R, 900, 12]."""
    out = []
    for r, g_own, g_other, a, b in zip(rows, own, other, p_own, p_other):
        lo, lt = label(split, r, g_own), label(split, r, g_other)
        p = np.zeros((fmt.SEQ_LEN, fmt.VOCAB_SIZE))
        pos = np.arange(fmt.SEQ_LEN)
        p[pos, lo] += a
        differ = lo != lt
        p[pos[differ], lt[differ]] += b
        p[~differ, lo[~differ]] += b
        p += (1 - a - b) / fmt.VOCAB_SIZE
        out.append(np.log(p))
    return np.stack(out).astype(np.float16)


@pytest.fixture
def split(tmp_path):
    return make_split(tmp_path / "data", {"task": [(INPUT, TRUTH)]}, num_aug=4)


@pytest.fixture
def disagree(split):
    """3 views say WRONG but still give TRUTH 0.4; 2 views say TRUTH and give WRONG 0.01:
    count-first puts WRONG first, the product of experts TRUTH."""
    rows = np.arange(5)
    own = [WRONG] * 3 + [TRUTH] * 2
    other = [TRUTH] * 3 + [WRONG] * 2
    preds = predict(split, rows, own, [0.0] * 5)
    lp = view_log_probs(split, rows, own, other, [0.5] * 3 + [0.9] * 2, [0.4] * 3 + [0.01] * 2)
    return preds, lp


def test_poe_and_count_first_disagree(split, disagree):
    preds, lp = disagree
    r = vote(preds, split.root, ks=[1, 2], log_probs=lp)
    count, prod = r.tasks[0].tests[0], r.poe.tasks[0].tests[0]
    assert [c.votes for c in count.candidates] == [3, 2] and count.truth_rank == 1
    assert np.array_equal(prod.candidates[0].grid, TRUTH) and prod.truth_rank == 0
    assert prod.candidates[0].log_lik > prod.candidates[1].log_lik
    assert r.scores["hrm"]["1"] == 0.0 and r.poe.scores["hrm"]["1"] == 100.0
    assert r.scores["hrm"]["2"] == r.poe.scores["hrm"]["2"] == 100.0  # the same two candidates
    assert r.poe.scores["arc_prize"]["2"] == 100.0
    assert r.submission["task"][0]["attempt_1"] == WRONG.tolist()
    assert r.poe.submission["task"][0]["attempt_1"] == TRUTH.tolist()


def test_poe_agrees_when_views_agree(split):
    rows = np.arange(5)
    own = [WRONG] * 3 + [TRUTH] * 2
    preds = predict(split, rows, own, [0.0] * 5)
    lp = view_log_probs(split, rows, own, [TRUTH] * 3 + [WRONG] * 2, [0.9] * 5, [0.01] * 5)
    r = vote(preds, split.root, ks=[1, 2], log_probs=lp)
    assert r.tasks[0].tests[0].truth_rank == r.poe.tasks[0].tests[0].truth_rank == 1


def test_log_likelihood_counts_cells_and_eos_not_pad():
    g = grid([[1, 2, 3], [4, 5, 6]])  # 6 cells, an EOS row of 3 and an EOS column of 2: 11 tokens
    uniform = np.full((2, fmt.SEQ_LEN, fmt.VOCAB_SIZE), -np.log(fmt.VOCAB_SIZE))
    ll = candidate_log_likelihood(uniform, [g], np.array([0, 1]), np.stack([np.arange(10)] * 2).astype(np.uint8))
    assert ll[0] == pytest.approx(-2 * 11 * np.log(fmt.VOCAB_SIZE))


def test_log_likelihood_undoes_each_view():
    """A view rotated by 90 degrees with swapped colours scores the original grid at its rotated,
    recoloured cells: all its mass there gives log-likelihood 0."""
    g = grid([[1, 2, 3], [4, 5, 6]])
    cmap = np.array([0, 2, 1, 3, 4, 5, 6, 7, 8, 9], np.uint8)
    lab = fmt.encode_grid(fmt.augment_grid(g, 1, cmap))
    lp = np.full((1, fmt.SEQ_LEN, fmt.VOCAB_SIZE), -30.0)
    lp[0, np.arange(fmt.SEQ_LEN), lab] = 0.0
    ll = candidate_log_likelihood(lp, [g, fmt.dihedral(g, 1)], np.array([1]), cmap[None])
    assert ll[0] == 0.0 and ll[1] < -30


def test_vote_command_writes_both_rankings(tmp_path, split, disagree):
    preds, lp = disagree
    np.savez(tmp_path / "predictions.npz", puzzle_identifiers=preds.puzzle_identifiers, inputs=preds.inputs,
             predictions=preds.predictions, q_halt=preds.q_halt)
    np.save(tmp_path / "log_probs.npy", lp)
    out = tmp_path / "vote"
    assert run(VoteConfig(predictions=str(tmp_path / "predictions.npz"), data_dir=str(split.root), output_dir=str(out),
                          ks=[1, 2], report=False, log_probs=str(tmp_path / "log_probs.npy"))) == 0
    assert json.loads((out / "submission.json").read_text())["task"][0]["attempt_1"] == WRONG.tolist()
    assert json.loads((out / "submission_poe.json").read_text())["task"][0]["attempt_1"] == TRUTH.tolist()
    poe = json.loads((out / "poe.json").read_text())
    assert poe["pass_at_k"]["hrm"]["1"] == 100.0 and poe["tasks"]["task"][0]["truth_rank"] == 1
    assert "product of experts" in (out / "pass_at_k.md").read_text()


def test_a_revote_without_log_probs_leaves_no_earlier_poe_outputs(tmp_path, split, disagree):
    """`vote overwrite=true` without log_probs into a folder of an earlier poe vote kept that vote's poe.json
    and submission_poe.json beside the new submission.json (a folder mixing two votes; new-user audit). They
    are removed now; without overwrite they count as the vote outputs that refuse it."""
    preds, lp = disagree
    np.savez(tmp_path / "predictions.npz", puzzle_identifiers=preds.puzzle_identifiers, inputs=preds.inputs,
             predictions=preds.predictions, q_halt=preds.q_halt)
    np.save(tmp_path / "log_probs.npy", lp)
    out = tmp_path / "vote"
    common = dict(predictions=str(tmp_path / "predictions.npz"), data_dir=str(split.root), output_dir=str(out))
    assert run(VoteConfig(**common, report=True, log_probs=str(tmp_path / "log_probs.npy"))) == 0
    assert (out / "submission_poe.json").is_file() and (out / "report.html").is_file()
    for name in ("pass_at_k.json", "pass_at_k.md", "pass_at_k.csv", "tasks.json", "submission.json"):
        (out / name).unlink()  # only the poe files and the report of the earlier vote are left
    with pytest.raises(UserError, match="already holds vote outputs"):
        run(VoteConfig(**common, report=False))
    assert run(VoteConfig(**common, report=False, overwrite=True)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["pass_at_k.csv", "pass_at_k.json", "pass_at_k.md",
                                                     "submission.json", "tasks.json"]


def test_log_probs_of_other_rows_refused(tmp_path):
    np.save(tmp_path / "lp.npy", np.zeros((3, fmt.SEQ_LEN, fmt.VOCAB_SIZE), np.float16))
    with pytest.raises(UserError, match="one row per row of predictions.npz"):
        load_log_probs(tmp_path / "lp.npy", 5, fmt.VOCAB_SIZE)


def test_score_ranked_gives_pass_at_k_of_ranked_candidates(tmp_path, capsys):
    """`score ranked=`: a task counts at K when every test input has its solution among its top K;
    a task left out of the ranked file is wrong; a ranked file that is not an object is one line."""
    from hrm_deeploop.cli import run_subcommand

    sol = {"a": [[[1]]], "b": [[[2]], [[3]]], "c": [[[4]]]}
    ranked = {"a": [[[[0]], [[1]]]], "b": [[[[2]]], [[[9]], [[7]], [[3]]]]}  # a at rank 2; b's second input at 3
    sub = {t: [{"attempt_1": [[0]], "attempt_2": [[0]]} for _ in v] for t, v in sol.items()}
    for name, obj in (("sol.json", sol), ("ranked.json", ranked), ("sub.json", sub)):
        (tmp_path / name).write_text(json.dumps(obj))
    args = [f"submission={tmp_path / 'sub.json'}", f"solutions={tmp_path / 'sol.json'}", "quiet=true", "ks=[1,2,3]"]
    assert run_subcommand("score", [*args, f"ranked={tmp_path / 'ranked.json'}", f"output={tmp_path / 's.json'}"]) == 0
    at_k = json.loads((tmp_path / "s.json").read_text())["pass_at_k"]
    assert at_k["hrm"] == {"1": 0.0, "2": pytest.approx(100 / 3), "3": pytest.approx(200 / 3)}
    assert at_k["fractional"]["2"] == pytest.approx(100 * (1 + 0.5 + 0) / 3)
    assert "pass@3 66.67%" in capsys.readouterr().out
    (tmp_path / "ranked.json").write_text("[]")
    assert run_subcommand("score", [*args, f"ranked={tmp_path / 'ranked.json'}"]) == 2
    assert "not a JSON object mapping task ids to ranked candidates" in capsys.readouterr().err
