"""Every bad-input case of issue 3: one-line DatasetError naming file and task, no output, CLI exit 2."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from arc_data.arc.sources import load_sources, no_bools, parse_grid, parse_task, quick_grid
from arc_data.arc.taskscan import scan_task
from arc_data.errors import DatasetError
from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_kaggle, write_layout

GOOD = synthetic_tasks()["training"]["tr00"]


def _with(path: str, value) -> dict:
    """GOOD with one field replaced, e.g. _with("train.0.input", [[1, 2], [3]])."""
    task = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = task
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return task


_DELETE = object()

# name -> (task JSON text or object, expected fragment of the problem)
BAD_TASKS = {
    "invalid_json": ('{"train": [', "invalid JSON"),
    "missing_train": (_with("train", _DELETE), "missing 'train'"),
    "missing_test": (_with("test", _DELETE), "missing 'test'"),
    "not_2d": (_with("train.0.input", [1, 2, 3]), "not a 2-D list"),
    "not_2d_nested": (_with("train.0.input", [[1, [2]], [3, 4]]), "2-D list of integers"),
    "ragged": (_with("train.0.input", [[1, 2], [3]]), "unequal length"),
    "empty_grid": (_with("train.0.output", []), "empty grid"),
    "empty_rows": (_with("test.0.input", [[]]), "empty grid"),
    "side_over_30": (_with("train.1.input", [[1]] * 31), "over 30"),
    "wide_over_30": (_with("train.1.input", [[1] * 31]), "over 30"),
    "value_10": (_with("train.0.input", [[1, 10]]), "outside 0..9"),
    "value_negative": (_with("train.0.input", [[-1, 0]]), "outside 0..9"),
    "value_float": (_with("train.0.input", [[1.5, 0]]), "not an integer"),
    "value_string": (_with("train.0.input", [["3", 0]]), "not an integer"),
    "value_bool": (_with("train.0.input", [[True, 0]]), "not an integer"),
    "value_null": (_with("train.0.input", [[None, 0]]), "not an integer"),
    "test_without_output": (_with("test.0.output", _DELETE), "no 'output'"),
}


def _write_task_dir(root: Path, name: str, task) -> Path:
    src = write_layout(root / "data", {"training": {"okay": GOOD}})
    text = task if isinstance(task, str) else json.dumps(task)
    (src / "training" / f"{name}.json").write_text(text)
    return src


def _assert_fails_cleanly(sources: list[str], out: Path, *fragments: str) -> str:
    with pytest.raises(DatasetError) as e:
        build(BuildConfig(sources=sources, output_dir=str(out), num_aug=2, progress=False))
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, (f, msg)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    return msg


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
def test_bad_task_file(case, tmp_path):
    task, problem = BAD_TASKS[case]
    src = _write_task_dir(tmp_path, case, task)
    _assert_fails_cleanly([str(src)], tmp_path / "out", f"{case}.json", f"task {case}", problem)


def test_kaggle_without_solutions(tmp_path):
    chal = write_kaggle(tmp_path / "k", "x_evaluation", {"t1": GOOD}, solutions=False)
    _assert_fails_cleanly([str(chal)], tmp_path / "out", chal.name, "x_evaluation_solutions.json", "not found")
    tasks, _ = load_sources([str(chal)], require_outputs=False)  # viz can show tasks without answers
    assert tasks[0].test[0][1] is None and tasks[0].is_eval


def test_kaggle_mismatched_ids(tmp_path):
    chal = write_kaggle(tmp_path / "k", "x_training", {"t1": GOOD, "t2": GOOD})
    sol_path = tmp_path / "k" / "x_training_solutions.json"
    sol = json.loads(sol_path.read_text())
    sol["t3"] = sol.pop("t2")
    sol_path.write_text(json.dumps(sol))
    _assert_fails_cleanly([str(chal)], tmp_path / "out", "x_training_solutions.json", "task t2", "do not match")


def test_kaggle_wrong_number_of_solutions(tmp_path):
    chal = write_kaggle(tmp_path / "k", "x_training", {"t1": GOOD})
    sol_path = tmp_path / "k" / "x_training_solutions.json"
    sol = json.loads(sol_path.read_text())
    sol["t1"] = sol["t1"] * 2
    sol_path.write_text(json.dumps(sol))
    _assert_fails_cleanly([str(chal)], tmp_path / "out", chal.name, "task t1", "solutions")


def test_kaggle_invalid_json(tmp_path):
    chal = write_kaggle(tmp_path / "k", "x_training", {"t1": GOOD})
    chal.write_text("{oops")
    _assert_fails_cleanly([str(chal)], tmp_path / "out", chal.name, "invalid JSON")


def test_same_task_from_two_sources(tmp_path):
    a = write_layout(tmp_path / "a", {"training": {"dup": GOOD}})
    chal = write_kaggle(tmp_path / "k", "b_training", {"dup": GOOD})
    _assert_fails_cleanly([str(a), str(chal)], tmp_path / "out", "task dup", "dup.json", chal.name, "same task id")


def test_missing_source(tmp_path):
    _assert_fails_cleanly([str(tmp_path / "nowhere")], tmp_path / "out", "no such source")


def test_cli_returns_2_with_one_line(tmp_path, capsys):
    task, _ = BAD_TASKS["ragged"]
    src = _write_task_dir(tmp_path, "ragged", task)
    out = tmp_path / "out"
    rc = main(["build-arc", f"sources=[{src}]", f"output_dir={out}", "num_aug=2", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("hrm-deeploop build-arc: error: ") and "ragged.json" in err[0]
    assert not out.exists()


def test_cli_builds(tmp_path, capsys):
    src = write_layout(tmp_path / "data", {"evaluation": {"okay": GOOD}})
    out = tmp_path / "out"
    rc = main(["build-arc", f"sources=[{src}]", f"output_dir={out}", "num_aug=2", "progress=false",
               "materialize=false"])
    assert rc == 0 and (out / "manifest.json").exists()
    assert "tasks 1 (1 evaluation)" in capsys.readouterr().out


def test_bundled_conceptarc_is_the_shared_kaggle_file():
    """`concept` reads the packaged copy: 160 training tasks, identical to reading the files directly."""
    from arc_data.arc.sources import BUNDLED_DIR, load_source

    tasks, info = load_source("concept")
    assert len(tasks) == 160 and info.num_eval_tasks == 0 and info.kind == "bundled"
    direct, _ = load_source(str(BUNDLED_DIR / "conceptarc/arc-agi_concept_challenges.json"))
    assert [t.name for t in tasks] == [t.name for t in direct]
    assert all(a.subset == b.subset and len(a.test) == len(b.test) for a, b in zip(tasks, direct))
    assert (BUNDLED_DIR / "conceptarc/LICENSE").read_text().startswith("MIT License")


def test_default_sources_are_the_papers_arc1_recipe():
    from arc_data.arc.build import BuildConfig

    assert BuildConfig().sources == ["arc1", "concept"] and BuildConfig().output_dir == "data/arc-aug-1000"


# ---------------------------------------------------------------------------------------------
# the fast readers (taskscan, quick_grid) give what json + parse_task give, or step aside


def _random_task(rng) -> dict:
    def grid():
        h, w = rng.integers(1, 31, size=2)
        return rng.integers(0, 10, size=(h, w)).tolist()

    return {kind: [{"input": grid(), "output": grid()} for _ in range(rng.integers(1, 5))]
            for kind in ("train", "test")}


def _task_texts(task: dict):
    yield json.dumps(task)
    yield json.dumps(task, indent=2)
    yield json.dumps(task, separators=(",", ":"))
    swapped = {k: [{"output": p["output"], "input": p["input"]} for p in task[k]] for k in ("test", "train")}
    yield "\r\n\t" + json.dumps(swapped, indent="\t") + " \n"


def _same_pairs(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype == np.uint8 and x.shape == y.shape and (x == y).all()
        for pa, pb in zip(a, b) for x, y in zip(pa, pb))


def test_task_scanner_equals_json_and_parse_task_on_clean_files():
    rng = np.random.default_rng(0)
    for _ in range(25):
        task = _random_task(rng)
        for text in _task_texts(task):
            fast = scan_task(text.encode())
            assert fast is not None, text[:80]
            slow = parse_task(json.loads(text), "f", "t", require_outputs=True)
            assert _same_pairs(fast[0], slow[0]) and _same_pairs(fast[1], slow[1])


@pytest.mark.parametrize("text", [
    *[t if isinstance(t, str) else json.dumps(t) for t, _ in BAD_TASKS.values()],
    json.dumps({**GOOD, "name": "renamed"}),  # a "name" key renames the task: json's path decides
    json.dumps(_with("train.0.extra", 1)),  # extra keys in a pair: accepted, but only by json's path
    '{"train": [{"input": [[1]], "output": [[1]]}], "train": [], "test": []}',
    '{"train": [{"input": [[1]], "input": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]}',
    '{"train": [{"input": [[01]], "output": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]}',
    '{"train": [{"input": [[1e0]], "output": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]}',
    '{"train": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]} x',
    '\ufeff{"train": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]}',
    '{"tr\\u0061in": [{"input": [[1]], "output": [[1]]}], "test": [{"input": [[1]], "output": [[1]]}]}',
])
def test_task_scanner_steps_aside_on_anything_else(text):
    assert scan_task(text.encode()) is None


def test_quick_grid_is_parse_grid_or_steps_aside():
    rng = np.random.default_rng(1)
    grids = [rng.integers(0, 10, size=rng.integers(1, 31, size=2)).tolist() for _ in range(50)]
    grids += [[[1, 10]], [[-1, 0]], [[1.5, 0]], [["3", 0]], [[None, 0]], [[1, 2], [3]], [[]], [], [[1]] * 31,
              [[1] * 31], [[1, [2]], [3, 4]], [[2 ** 64, 0]]]  # (a bool is for no_bools to rule out)
    for g in grids:
        quick = quick_grid(g)
        if quick is None:
            continue
        slow = parse_grid(g, "f", "t", "here")
        assert quick.dtype == slow.dtype and quick.shape == slow.shape and (quick == slow).all()
    assert quick_grid([[1, 10]]) is None and quick_grid([[-1, 0]]) is None and quick_grid([[1.0]]) is None
    assert no_bools(b'[[1, 2]]') and not no_bools(b'[[true, 2]]') and not no_bools(b'[[false]]')


def test_build_reads_every_task_file_alike_by_scanner_or_json(tmp_path):
    """A folder whose task files are half in the strict form, half not (a "name" equal to the file
    stem): the same dataset bytes as when every file is strict."""
    tasks = synthetic_tasks()
    a = write_layout(tmp_path / "a", tasks)
    b = write_layout(tmp_path / "b", tasks)
    for i, p in enumerate(sorted((b / "training").glob("*.json"))):
        if i % 2:
            p.write_text(json.dumps({"name": p.stem, **json.loads(p.read_text())}, indent=1))
    for src, out in ((a, "out_a"), (b, "out_b")):
        build(BuildConfig(sources=[str(src)], output_dir=str(tmp_path / out), num_aug=3, progress=False))
    for f in sorted((tmp_path / "out_a").rglob("*.npy")):
        assert f.read_bytes() == (tmp_path / "out_b" / f.relative_to(tmp_path / "out_a")).read_bytes(), f
