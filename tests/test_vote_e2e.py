"""End to end: synthetic split + synthetic predictions -> vote -> files; bad input; the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eval.arc.report import output_names, submission
from eval.arc.vote import vote, write_vote
from eval.outputs import check_outputs
from eval.predictions import Predictions, check_dataset, load_predictions, save_predictions
from hrm_deeploop.errors import UserError
from tests.vote_helpers import make_split, predict, random_grid

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """Tasks a, b (one test input each) and c (two), 8 copies each.

    a: every copy right. b: 5 copies say a wrong grid, 3 the truth (right from pass@2).
    c: test input 0 right everywhere, test input 1 wrong everywhere.
    """
    rng = np.random.default_rng(0)
    tasks = {
        "aaaa": [(random_grid(rng), random_grid(rng))],
        "bbbb": [(random_grid(rng), random_grid(rng))],
        "cccc": [(random_grid(rng), random_grid(rng)), (random_grid(rng), random_grid(rng))],
    }
    root = tmp_path_factory.mktemp("e2e")
    split = make_split(root / "data", tasks, num_aug=7)
    wrong = np.full((2, 3), 4, np.uint8)
    grids, seen_b = [], 0
    for e in range(len(split.example_task)):
        name = list(tasks)[split.example_task[e]]
        j = split.example_test[e]
        truth = tasks[name][j][1]
        if name == "bbbb":
            seen_b += 1
            grids.append(truth if seen_b > 5 else wrong)
        elif name == "cccc" and j == 1:
            grids.append(wrong)
        else:
            grids.append(truth)
    rows = np.arange(len(grids))
    preds = predict(split, rows, grids, rng.normal(size=len(grids)).tolist())
    path = save_predictions(root / "predictions.npz", preds.puzzle_identifiers, preds.inputs, preds.predictions, preds.q_halt)
    return root, split, tasks, path


EXPECTED = {
    "hrm": {"1": 100 / 3, "2": 200 / 3, "10": 200 / 3, "100": 200 / 3, "1000": 200 / 3},
    "fractional": {"1": 100 * 1.5 / 3, "2": 100 * 2.5 / 3, "10": 100 * 2.5 / 3, "100": 100 * 2.5 / 3, "1000": 100 * 2.5 / 3},
}


def test_end_to_end_scores_and_files(scenario):
    root, split, tasks, path = scenario
    result = vote(load_predictions(path), root / "data")
    for proto in EXPECTED:
        assert result.scores[proto] == pytest.approx(EXPECTED[proto])
    assert result.warnings == []
    assert [t.name for t in result.tasks] == list(tasks)
    out = root / "out"
    write_vote(result, out)
    saved = json.loads((out / "pass_at_k.json").read_text())
    for proto in EXPECTED:
        assert saved[proto] == pytest.approx(EXPECTED[proto])
    assert "| hrm" in (out / "pass_at_k.md").read_text()
    assert (out / "pass_at_k.csv").read_text().splitlines()[0] == "protocol,pass@1,pass@2,pass@10,pass@100,pass@1000"
    per_task = json.loads((out / "tasks.json").read_text())["tasks"]
    assert per_task["bbbb"]["test_inputs"][0]["truth_rank"] == 2
    assert per_task["cccc"]["test_inputs"][1]["truth_rank"] is None
    assert per_task["aaaa"]["test_inputs"][0]["candidates"][0]["correct"] is True
    assert sorted(p.name for p in (out / "report").iterdir()) == ["aaaa.png", "bbbb.png", "cccc.png"]
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert html.index("bbbb") < html.index("aaaa") or html.index("cccc") < html.index("aaaa")  # failures first
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # staging folder removed


def test_submission_schema(scenario):
    root, split, tasks, path = scenario
    result = vote(load_predictions(path), root / "data")
    sub = json.loads(json.dumps(submission(result)))
    assert set(sub) == set(tasks)
    for name, entries in sub.items():
        assert len(entries) == len(tasks[name])
        for e in entries:
            assert set(e) == {"attempt_1", "attempt_2"}
            for g in e.values():
                assert isinstance(g, list) and g and all(isinstance(r, list) and len(r) == len(g[0]) for r in g)
                assert all(isinstance(v, int) and 0 <= v <= 9 for r in g for v in r)
    assert sub["aaaa"][0]["attempt_1"] == tasks["aaaa"][0][1].tolist()
    assert sub["aaaa"][0]["attempt_2"] == sub["aaaa"][0]["attempt_1"]  # one candidate: padded with it
    assert sub["bbbb"][0]["attempt_2"] == tasks["bbbb"][0][1].tolist()


def test_outputs_refuse_to_clobber(scenario, tmp_path):
    root, _, _, path = scenario
    result = vote(load_predictions(path), root / "data")
    write_vote(result, tmp_path)
    with pytest.raises(UserError, match="overwrite=true"):
        check_outputs(tmp_path, output_names(True), False, "vote")
    write_vote(result, tmp_path, overwrite=True)
    assert (tmp_path / "report" / "aaaa.png").exists()


def test_missing_test_input_warns_and_counts_wrong(scenario):
    root, split, tasks, path = scenario
    p = load_predictions(path)
    keep = np.flatnonzero(split.example_puzzle_id[np.arange(len(p))] != 0)
    keep = keep[~((split.example_task == 2) & (split.example_test == 1))]  # drop every row of cccc/1
    sub = Predictions(p.puzzle_identifiers[keep], p.inputs[keep], p.predictions[keep], p.q_halt[keep])
    r = vote(sub, root / "data")
    assert any("cccc" in w and "no predictions" in w for w in r.warnings)
    assert r.scores["fractional"]["1"] == pytest.approx(100 * 1.5 / 3)


def test_unmatched_inputs_are_dropped_with_warning(scenario):
    root, split, tasks, path = scenario
    p = load_predictions(path)
    inputs = p.inputs.copy()
    inputs[0, :] = 0
    inputs[0, 0] = 5  # a 1x1 grid no task has as test input
    r = vote(Predictions(p.puzzle_identifiers, inputs, p.predictions, p.q_halt), root / "data")
    assert any("match no test input" in w for w in r.warnings)
    assert r.stats["num_unmatched_rows"] == 1


def test_blank_rows_dropped(scenario):
    root, split, tasks, path = scenario
    p = load_predictions(path)
    ids = p.puzzle_identifiers.copy()
    ids[:3] = 0
    r = vote(Predictions(ids, p.inputs, p.predictions, p.q_halt), root / "data")
    assert r.stats["num_blank_rows"] == 3


def test_ids_outside_table_raise(scenario):
    root, _, _, path = scenario
    p = load_predictions(path)
    with pytest.raises(UserError, match="not in the dataset"):
        vote(Predictions(p.puzzle_identifiers + 10_000, p.inputs, p.predictions, p.q_halt), root / "data")


@pytest.mark.parametrize("field, row, col, token", [
    ("predictions", 0, 899, 12),  # past any crop: the decode kernel reads every token of a row all the same
    ("predictions", 5, 0, 255),
    ("inputs", 3, 450, 13),
    ("blank predictions", 2, 10, 200),  # a blank padding row is not decoded, and is checked
    ("blank inputs", 1, 899, 12),
])
def test_tokens_outside_the_vocabulary_raise(scenario, field, row, col, token):
    root, _, _, path = scenario
    p = load_predictions(path)
    ids, inputs, predictions = p.puzzle_identifiers.copy(), p.inputs.copy(), p.predictions.copy()
    name = field.split()[-1]
    if field.startswith("blank"):
        ids[row] = 0
    (inputs if name == "inputs" else predictions)[row, col] = token
    with pytest.raises(UserError, match=f"field '{name}' has token {token}, expected tokens 0..11"):
        vote(Predictions(ids, inputs, predictions, p.q_halt), root / "data")


def test_ids_of_tasks_outside_split_raise(scenario, tmp_path):
    root, split, tasks, path = scenario
    # the same table, but a test split that holds only task aaaa
    make_split(tmp_path / "data", tasks, num_aug=7)
    only_a = make_split(tmp_path / "only_a", {"aaaa": tasks["aaaa"]}, num_aug=7)
    (tmp_path / "data" / "test").rename(tmp_path / "data" / "full")
    (only_a.root / "test").rename(tmp_path / "data" / "test")
    with pytest.raises(UserError, match="not in the test split"):
        vote(load_predictions(path), tmp_path / "data")


def test_load_predictions_errors(tmp_path):
    n = 3
    good = dict(
        puzzle_identifiers=np.ones(n, np.int32),
        inputs=np.zeros((n, 900), np.uint8),
        predictions=np.zeros((n, 900), np.uint8),
        q_halt=np.zeros(n, np.float32),
    )
    cases = [
        ({**good, "q_halt": np.zeros(n, np.float64)}, "field 'q_halt' has dtype float64"),
        ({k: v for k, v in good.items() if k != "inputs"}, "missing field"),
        ({**good, "predictions": np.zeros((n, 899), np.uint8)}, "field 'predictions' has shape"),
        ({**good, "q_halt": np.array([0, np.nan, 0], np.float32)}, "non-finite"),
    ]
    for i, (arrays, message) in enumerate(cases):
        f = tmp_path / f"bad{i}.npz"
        np.savez(f, **arrays)
        with pytest.raises(UserError, match=message) as e:
            load_predictions(f)
        assert str(f) in str(e.value)
    # token range and row length are the dataset's (dataset.json), checked when voting / scoring
    f = tmp_path / "token12.npz"
    np.savez(f, **{**good, "predictions": np.full((n, 900), 12, np.uint8)})
    with pytest.raises(UserError, match="token 12, expected tokens 0..11"):
        check_dataset(load_predictions(f), seq_len=900, vocab_size=12)
    with pytest.raises(UserError, match="rows hold 900 tokens, but the dataset has seq_len 81"):
        check_dataset(load_predictions(f), seq_len=81, vocab_size=12)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(UserError, match="cannot read"):
        load_predictions(tmp_path / "junk.npz")
    # save_predictions casts range-checked integer arrays (e.g. int64 argmax) and refuses others
    out = save_predictions(tmp_path / "ok.npz", np.ones(n, np.int64), good["inputs"], good["predictions"].astype(np.int64), good["q_halt"])
    assert load_predictions(out).puzzle_identifiers.dtype == np.int32
    with pytest.raises(UserError, match="outside"):
        save_predictions(tmp_path / "x.npz", good["puzzle_identifiers"], good["inputs"], np.full((n, 900), 256), good["q_halt"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "vote", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_runs_and_rejects_bad_input(scenario, tmp_path):
    root, _, _, path = scenario
    ok = _cli(f"predictions={path}", f"data_dir={root / 'data'}", f"output_dir={tmp_path / 'out'}", "report=false")
    assert ok.returncode == 0, ok.stderr
    assert "pass@2" in ok.stdout and "66.67" in ok.stdout
    assert (tmp_path / "out" / "submission.json").exists() and not (tmp_path / "out" / "report.html").exists()
    bad = tmp_path / "bad.npz"
    p = load_predictions(path)
    np.savez(bad, puzzle_identifiers=p.puzzle_identifiers.astype(np.int64), inputs=p.inputs,
             predictions=p.predictions, q_halt=p.q_halt)
    r = _cli(f"predictions={bad}", f"data_dir={root / 'data'}", f"output_dir={tmp_path / 'out2'}")
    assert r.returncode == 2
    assert "error:" in r.stderr and "puzzle_identifiers" in r.stderr and "Traceback" not in r.stderr
    r = _cli(f"predictions={path}", f"data_dir={root / 'data'}", f"output_dir={tmp_path / 'out'}", "report=false")
    assert r.returncode == 2 and "overwrite=true" in r.stderr


def test_hrm_built_dataset_without_table_uses_names(scenario, tmp_path):
    """Datasets from HRM's own builder have no augmentations.npz: the table comes from the names."""
    import shutil

    root, _, _, path = scenario
    shutil.copytree(root / "data", tmp_path / "data")
    (tmp_path / "data" / "augmentations.npz").unlink()
    result = vote(load_predictions(path), tmp_path / "data")
    for proto in EXPECTED:
        assert result.scores[proto] == pytest.approx(EXPECTED[proto])
