"""submission.json and the ARC Prize rule: labelled and unlabelled builds voted end to end (real
builder, predictions made from the built rows), coverage of a challenges file, and the scorer on
malformed and partial submissions."""

import json

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import open_split
from eval.arc.arcprize import arc_prize_score, load_solutions
from eval.arc.results import ARC_PRIZE
from eval.arc.vote import VoteConfig, vote
from eval.arc.vote import run as vote_run
from eval.predictions import Predictions
from tests.arc_synth import write_kaggle


def _tasks() -> dict[str, dict]:
    rng = np.random.default_rng(3)
    tasks = {}
    for i in range(4):
        pairs = []
        for _ in range(3 + (i == 1)):  # task 1 has two test inputs
            g = rng.integers(0, 5, size=(2, 3))
            pairs.append({"input": g.tolist(), "output": g[::-1].tolist()})
        tasks[f"task{i}"] = {"train": pairs[:2], "test": pairs[2:]}
    return tasks


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("sub")
    tasks = _tasks()
    labelled = write_kaggle(root / "lab", "arc-agi_evaluation", tasks, solutions=True)
    unlabelled = write_kaggle(root / "unl", "arc-agi_test", tasks, solutions=False)
    for name, src, mode in (("L", labelled, "required"), ("U", unlabelled, "optional")):
        build(BuildConfig(sources=[str(src)], output_dir=str(root / name), num_aug=2, seed=0, progress=False,
                          test_labels=mode))
    return root, tasks, labelled


def _predictions(data_dir, wrong_task_ids=()) -> Predictions:
    """Every test row predicts its label (labelled build) or its input (unlabelled); rows of the puzzle
    ids in `wrong_task_ids` predict an all-black 1x1 grid."""
    sp = open_split(data_dir, "test")
    n = sp.num_examples
    inputs, labels = sp.examples(np.arange(n))
    pids = np.repeat(sp.puzzle_identifiers, np.diff(sp.puzzle_indices)).astype(np.int32)
    pred = labels.copy() if labels.any() else inputs.copy()
    black = np.zeros(900, np.uint8)
    black[0], black[1], black[30] = 2, 1, 1
    for i in np.flatnonzero(np.isin(pids, wrong_task_ids)):
        pred[i] = black
    return Predictions(puzzle_identifiers=pids, inputs=inputs.copy(), predictions=pred,
                       q_halt=np.zeros(n, np.float32))


def _ids_of(data_dir, task: str) -> list[int]:
    names = json.loads((data_dir / "identifiers.json").read_text())
    return [i for i, n in enumerate(names) if n == task or n.startswith(task + "_")]


def test_labelled_vote_scores_the_submission_by_the_arc_prize_rule(builds, tmp_path):
    root, tasks, labelled = builds
    data = root / "L"
    # task1 (two test inputs) fully wrong -> ARC Prize: (1 + 0 + 1 + 1) / 4 = 75%
    res = vote(_predictions(data, _ids_of(data, "task1")), data)
    assert res.scores["hrm"]["2"] == 75.0
    assert res.scores[ARC_PRIZE]["2"] == pytest.approx(75.0)
    vote_run(VoteConfig(predictions=_save(_predictions(data, _ids_of(data, "task1")), tmp_path),
                        data_dir=str(data), output_dir=str(tmp_path / "out"), report=False))
    sub = json.loads((tmp_path / "out" / "submission.json").read_text())
    assert {k: len(v) for k, v in sub.items()} == {k: len(t["test"]) for k, t in tasks.items()}
    assert all(set(e) == {"attempt_1", "attempt_2"} for v in sub.values() for e in v)
    sol = load_solutions(str(labelled).replace("_challenges", "_solutions"))
    score = arc_prize_score(sub, sol)
    assert score.tasks == {"task0": 1.0, "task1": 0.0, "task2": 1.0, "task3": 1.0} and score.percent == 75.0
    assert "pass@2 (ARC Prize rule)" in (tmp_path / "out" / "pass_at_k.md").read_text()


def _save(preds: Predictions, folder) -> str:
    from eval.predictions import save_predictions

    path = folder / "predictions.npz"
    save_predictions(path, preds.puzzle_identifiers, preds.inputs, preds.predictions, preds.q_halt)
    return str(path)


def test_unlabelled_vote_writes_votes_and_submission_without_accuracy(builds, tmp_path):
    root, tasks, _ = builds
    data = root / "U"
    challenges = tmp_path / "x_test_challenges.json"
    extra = dict(tasks, extra9={"train": tasks["task0"]["train"], "test": [{"input": [[1]]}, {"input": [[2]]}]})
    challenges.write_text(json.dumps(extra))
    rc = vote_run(VoteConfig(predictions=_save(_predictions(data), tmp_path), data_dir=str(data),
                             output_dir=str(tmp_path / "out"), challenges=str(challenges)))
    assert rc == 0
    scores = json.loads((tmp_path / "out" / "pass_at_k.json").read_text())
    assert all(v is None for p in scores.values() for v in p.values())
    assert "n/a" in (tmp_path / "out" / "pass_at_k.md").read_text()
    sub = json.loads((tmp_path / "out" / "submission.json").read_text())
    assert list(sub) == list(extra) and sub["extra9"] == [{"attempt_1": [[0]], "attempt_2": [[0]]}] * 2
    for name, task in tasks.items():  # every row predicted its own input: both attempts are the input
        assert [e["attempt_1"] for e in sub[name]] == [p["input"] for p in task["test"]]
    tj = json.loads((tmp_path / "out" / "tasks.json").read_text())
    assert tj["tasks"]["task0"]["correct"]["2"] is None and tj["stats"]["num_scored_tasks"] == 0
    assert (tmp_path / "out" / "report.html").is_file()


def test_scorer_on_malformed_and_partial_submissions():
    sol = {"a": [[[1]], [[2]]], "b": [[[3, 3]]], "c": [[[4]]]}
    good = {"a": [{"attempt_1": [[0]], "attempt_2": [[1]]}, {"attempt_1": [[2]], "attempt_2": [[2]]}],
            "b": [{"attempt_1": [[3, 3]], "attempt_2": [[0]]}], "c": [{"attempt_1": [[4]], "attempt_2": [[4]]}]}
    assert arc_prize_score(good, sol).percent == 100.0
    partial = {"a": [good["a"][0]], "b": good["b"]}  # a: one of two entries, c missing
    s = arc_prize_score(partial, sol)
    assert s.tasks == {"a": 0.5, "b": 1.0, "c": 0.0} and s.total == pytest.approx(0.5)
    assert any("c: not in the submission" in w for w in s.warnings)
    bad = {"a": "nope", "b": [{"attempt_1": "[[3, 3]]", "attempt_2": [[True, 3]]}], "c": [[[4]]], "zz": []}
    s = arc_prize_score(bad, sol)
    assert s.tasks == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert len(s.warnings) == 4  # a not a list, b's attempts not grids, c's entry not an object, zz unknown
    assert arc_prize_score([1, 2], sol).total == 0.0


def test_score_command_prints_and_writes_the_arc_prize_score(tmp_path, capsys):
    """`hrm-deeploop score`: ours on a partial, half-malformed submission; a bad path is a one-line error."""
    from hrm_deeploop.cli import main

    sol = {"a": [[[1]], [[2]]], "b": [[[3, 3]]], "c": [[[4]]]}
    sub = {"a": [{"attempt_1": [[0]], "attempt_2": [[1]]}, {"attempt_1": "[[2]]", "attempt_2": [[0]]}],
           "b": [{"attempt_1": [[3, 3]], "attempt_2": [[0]]}]}  # a: 1 of 2, b: 1 of 1, c: not submitted
    (tmp_path / "sub.json").write_text(json.dumps(sub))
    (tmp_path / "sol.json").write_text(json.dumps(sol))
    out = tmp_path / "score.json"
    assert main(["score", f"submission={tmp_path / 'sub.json'}", f"solutions={tmp_path / 'sol.json'}",
                 f"output={out}"]) == 0
    printed = capsys.readouterr()
    assert "pass@2 (ARC Prize rule): 50.00%" in printed.out and "75.00% over the 2 tasks submitted" in printed.out
    assert "c: 0.000  (not submitted)" in printed.out and "attempt_1 missing or not a grid" in printed.err
    record = json.loads(out.read_text())
    assert record["tasks"] == {"a": 0.5, "b": 1.0, "c": 0.0} and record["percent"] == 50.0
    assert record["num_submitted"] == 2 and not list(tmp_path.glob("*.tmp"))
    assert main(["score", f"submission={tmp_path / 'missing.json'}", f"solutions={tmp_path / 'sol.json'}"]) == 2
    assert "submission" in capsys.readouterr().err
    (tmp_path / "bad_sol.json").write_text(json.dumps({"a": [[1]]}))  # a grid where a list of grids belongs
    assert main(["score", f"submission={tmp_path / 'sub.json'}", f"solutions={tmp_path / 'bad_sol.json'}"]) == 2
    assert "task a: not a list of grids" in capsys.readouterr().err


def test_score_reads_every_input_before_printing(tmp_path, capsys):
    """`score ranked=<missing or not an object>`: one line on stderr, exit 2, and nothing on stdout (the
    pass@2 line was printed before the ranked file was read; new-user audit)."""
    from hrm_deeploop.cli import main

    (tmp_path / "sol.json").write_text(json.dumps({"a": [[[1]]]}))
    (tmp_path / "sub.json").write_text(json.dumps({"a": [{"attempt_1": [[1]], "attempt_2": [[0]]}]}))
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "bad_task.json").write_text(json.dumps({"a": "nope"}))
    args = ["score", f"submission={tmp_path / 'sub.json'}", f"solutions={tmp_path / 'sol.json'}",
            f"output={tmp_path / 'score.json'}"]
    for ranked, text in (("nope.json", "does not exist"), ("list.json", "not a JSON object"),
                         ("bad_task.json", "task a: not a list of candidate lists")):
        assert main([*args, f"ranked={tmp_path / ranked}"]) == 2, ranked
        cap = capsys.readouterr()
        assert cap.out == "" and len(cap.err.strip().splitlines()) == 1 and text in cap.err, (ranked, cap)
        assert not (tmp_path / "score.json").exists()


def test_integral_floats_in_a_grid_are_compared_as_the_official_scorer_compares(tmp_path, capsys):
    """The official scorer (arc-agi-benchmarking: pydantic's List[List[int]], lax) reads 1.0 as 1 and raises
    on 1.5; ours scored 1.0 wrong ('attempt_1 missing or not a grid'). Now 1.0 equals 1, as there and
    as Python's ==; 1.5 is a wrong attempt with a warning naming the task (the official raises)."""
    from hrm_deeploop.cli import main

    sol = {"a": [[[1, 2]], [[3]]], "b": [[[4, 0]]]}
    floats = {"a": [{"attempt_1": [[1.0, 2.0]], "attempt_2": [[0]]}, {"attempt_1": [[0]], "attempt_2": [[3.0]]}],
              "b": [{"attempt_1": [[4.5, 0]], "attempt_2": [[0.0, 4]]}]}
    s = arc_prize_score(floats, sol)
    assert s.tasks == {"a": 1.0, "b": 0.0}
    assert s.warnings == ["task b test input 0: attempt_1 missing or not a grid (wrong)"]
    assert load_solutions_of(tmp_path, {"a": [[[1.0]]]}) == {"a": [[[1.0]]]}
    (tmp_path / "sol.json").write_text(json.dumps(sol))
    (tmp_path / "sub.json").write_text(json.dumps(floats))
    assert main(["score", f"submission={tmp_path / 'sub.json'}", f"solutions={tmp_path / 'sol.json'}"]) == 0
    assert "pass@2 (ARC Prize rule): 50.00%" in capsys.readouterr().out


def load_solutions_of(tmp_path, sol):
    (tmp_path / "s.json").write_text(json.dumps(sol))
    return load_solutions(tmp_path / "s.json")
