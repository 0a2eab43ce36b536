"""`make-challenges`: a held-out build, a folder of task files or a Kaggle file as the ARC Prize's
challenges.json / solutions.json pair, exactly the original tasks, and `score` takes it."""

import json

import numpy as np

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import main
from tests.arc_synth import random_task, write_kaggle, write_layout


def _tasks(seed: int, names: list[str]) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    return {n: random_task(rng, n_train=3, n_test=1 + i % 2, max_side=5) for i, n in enumerate(names)}


def _read(out):
    return (json.loads((out / "arc-agi_evaluation_challenges.json").read_text()),
            json.loads((out / "arc-agi_evaluation_solutions.json").read_text()))


def _expected(tasks: dict[str, dict]) -> tuple[dict, dict]:
    return ({n: {"train": t["train"], "test": [{"input": p["input"]} for p in t["test"]]} for n, t in sorted(tasks.items())},
            {n: [p["output"] for p in t["test"]] for n, t in sorted(tasks.items())})


def test_a_held_out_build_gives_its_tasks_and_score_takes_them(tmp_path, capsys):
    tasks = _tasks(0, ["aa000001", "bb000002", "cc000003", "dd000004"])
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", tasks)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "pre"), holdout_tasks=["cc000003", "aa000001"],
                      holdout_dir=str(tmp_path / "unseen"), num_aug=1, seed=0, progress=False))
    assert main(["make-challenges", f"source={tmp_path / 'unseen'}", f"output_dir={tmp_path / 'out'}"]) == 0
    held = {n: tasks[n] for n in ("aa000001", "cc000003")}
    assert _read(tmp_path / "out") == _expected(held)
    assert "2 task(s), 2 test input(s) from the unseen build" in capsys.readouterr().out
    # the pretraining side of the split: its evaluation tasks, none of the held-out ones
    assert main(["make-challenges", f"source={tmp_path / 'pre'}", f"output_dir={tmp_path / 'pre_out'}"]) == 0
    assert set(_read(tmp_path / "pre_out")[0]) == {"bb000002", "dd000004"}
    # score takes the pair: a submission of the solutions scores 100%
    challenges, solutions = _read(tmp_path / "out")
    submission = {n: [{"attempt_1": g, "attempt_2": g} for g in grids] for n, grids in solutions.items()}
    (tmp_path / "submission.json").write_text(json.dumps(submission))
    capsys.readouterr()
    assert main(["score", f"submission={tmp_path / 'submission.json'}", f"solutions={tmp_path / 'out' / 'arc-agi_evaluation_solutions.json'}",
                 "quiet=true"]) == 0
    assert capsys.readouterr().out.startswith("pass@2 (ARC Prize rule): 100.00% (2 of 2 tasks")


def test_a_folder_of_task_files_and_a_task_list(tmp_path, capsys):
    tasks = _tasks(1, ["ee000005", "ff000006", "ab000007"])
    folder = write_layout(tmp_path / "mine", {"mytasks": tasks}) / "mytasks"
    assert main(["make-challenges", f"source={folder}", f"output_dir={tmp_path / 'out'}"]) == 0
    assert _read(tmp_path / "out") == _expected(tasks)  # no evaluation subset: every task
    assert main(["make-challenges", f"source={folder}", f"output_dir={tmp_path / 'two'}",
                 "tasks=[ff000006,ee000005]"]) == 0
    assert set(_read(tmp_path / "two")[0]) == {"ee000005", "ff000006"}
    capsys.readouterr()
    assert main(["make-challenges", f"source={folder}", f"output_dir={tmp_path / 'bad'}", "tasks=[zz999999]"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "zz999999" in err and not (tmp_path / "bad").exists()
    assert main(["make-challenges", f"source={folder}", f"output_dir={tmp_path / 'out'}"]) == 2  # exists
    assert main(["make-challenges", f"source={folder}", f"output_dir={tmp_path / 'out'}", "overwrite=true"]) == 0
    # the pair is a build-arc source again: build it, and make-challenges of that build gives the same pair
    build(BuildConfig(sources=[str(tmp_path / "out" / "arc-agi_evaluation_challenges.json")],
                      output_dir=str(tmp_path / "built"), num_aug=1, seed=0, progress=False))
    assert main(["make-challenges", f"source={tmp_path / 'built'}", f"output_dir={tmp_path / 'again'}"]) == 0
    assert _read(tmp_path / "again") == _read(tmp_path / "out")


def test_unlabelled_tasks_give_challenges_only_and_a_changed_source_is_refused(tmp_path, capsys):
    tasks = _tasks(2, ["ac000008", "ad000009"])
    chal = write_kaggle(tmp_path / "raw", "arc-agi_test", tasks, solutions=False)
    assert main(["make-challenges", f"source={chal}", f"output_dir={tmp_path / 'out'}"]) == 0
    assert main(["make-challenges", f"source={chal}", f"output_dir={tmp_path / 'o1'}", "prefix=arc-agi_test"]) == 0
    assert sorted(p.name for p in (tmp_path / "o1").iterdir()) == ["arc-agi_test_challenges.json"]
    assert "no arc-agi_test_solutions.json" in capsys.readouterr().out
    labelled = write_kaggle(tmp_path / "lab", "arc-agi_evaluation", tasks)
    build(BuildConfig(sources=[str(labelled)], output_dir=str(tmp_path / "pre"), holdout_tasks=["ac000008"],
                      holdout_dir=str(tmp_path / "unseen"), num_aug=1, seed=0, progress=False))
    write_kaggle(tmp_path / "lab", "arc-agi_evaluation", _tasks(3, ["ac000008", "ad000009"]))  # changed since
    capsys.readouterr()
    assert main(["make-challenges", f"source={tmp_path / 'unseen'}", f"output_dir={tmp_path / 'o2'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has changed since the build" in err


def test_a_strict_split_with_a_generated_source_gives_its_held_out_tasks(tmp_path, capsys):
    """Issue 60: the strict-split workflow of docs/generated-tasks.md (ARC tasks + a `rearc:` dump,
    held-out tasks and their imitations out of pretraining) ended in 'rearc:...: no such source'
    at make-challenges of either side. A generated task held out by name comes back as the build
    grouped it (its grouping and seed read from the manifest, not the defaults)."""
    from arc_data.arc.generated import GeneratedSourceConfig, loader
    from arc_data.arc.sources import load_sources
    from tests.test_arc_generated_sources import write_rearc

    tasks = _tasks(4, ["aaaaaaaa", "bbbbbbbb", "cccccccc"])
    raw = write_layout(tmp_path / "raw", {"training": {"dddddddd": _tasks(5, ["dddddddd"])["dddddddd"]},
                                          "evaluation": tasks})
    rearc = write_rearc(tmp_path / "gs" / "good", {"aaaaaaaa": 7, "eeeeeeee": 9})
    spec = f"rearc:{rearc}"
    build(BuildConfig(sources=[str(raw), spec], output_dir=str(tmp_path / "pre"), holdout_dir=str(tmp_path / "unseen"),
                      holdout_tasks=["aaaaaaaa", "rearc-eeeeeeee-0001"], num_aug=1, seed=7, progress=False,
                      generated=GeneratedSourceConfig(pairs_per_task=3)))
    capsys.readouterr()
    assert main(["make-challenges", f"source={tmp_path / 'unseen'}", f"output_dir={tmp_path / 'out'}"]) == 0
    challenges, solutions = _read(tmp_path / "out")
    assert sorted(challenges) == ["aaaaaaaa", "rearc-eeeeeeee-0001"]
    assert {"aaaaaaaa": challenges["aaaaaaaa"]} == _expected({"aaaaaaaa": tasks["aaaaaaaa"]})[0]
    regrouped = {t.name: t for t in load_sources([spec], load=loader(GeneratedSourceConfig(pairs_per_task=3), 7))[0]}
    want = regrouped["rearc-eeeeeeee-0001"]
    assert challenges["rearc-eeeeeeee-0001"]["train"] == [{"input": a.tolist(), "output": b.tolist()} for a, b in want.train]
    assert solutions["rearc-eeeeeeee-0001"] == [b.tolist() for _, b in want.test]
    default = load_sources([spec], load=loader(GeneratedSourceConfig(), 42))[0]  # what the defaults would give
    assert all(t.train != want.train for t in default if t.name == "rearc-eeeeeeee-0001")
    # the pretraining side: its evaluation tasks, none held out; nothing of the spill left beside the output
    assert main(["make-challenges", f"source={tmp_path / 'pre'}", f"output_dir={tmp_path / 'pre_out'}"]) == 0
    assert set(_read(tmp_path / "pre_out")[0]) == {"bbbbbbbb", "cccccccc"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gs", "out", "pre", "pre_out", "raw", "unseen"]
    # a dump changed since the build is refused in one line, as an ARC source is
    (rearc / "tasks" / "eeeeeeee.json").write_text(json.dumps([{"input": [[1]], "output": [[2]]}] * 9))
    capsys.readouterr()
    assert main(["make-challenges", f"source={tmp_path / 'unseen'}", f"output_dir={tmp_path / 'o2'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"source {spec}" in err and "has changed since the build" in err
    assert not (tmp_path / "o2").exists()


def test_a_training_task_of_a_build_is_refused_saying_which_tasks_a_build_offers(tmp_path, capsys):
    """A build of training tasks only (no test inputs in its test split) offers no task: asking it for one of
    its own training tasks said `not among the 0 task(s) of the pretraining build`, and no more (issue 61's
    new-user audit); the line now says what a build offers and where else the task can come from."""
    tasks = _tasks(0, ["aa000001", "bb000002"])
    chal = write_kaggle(tmp_path / "raw", "arc-agi_training", tasks)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "pre"), num_aug=1, seed=0, progress=False))
    capsys.readouterr()
    assert main(["make-challenges", f"source={tmp_path / 'pre'}", f"output_dir={tmp_path / 'out'}",
                 "tasks=[aa000001]"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "aa000001" in err[0] and "trained on" in err[0] and "a folder of task files" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_build_without_evaluation_tasks_says_what_a_build_offers(tmp_path, capsys):
    """make-challenges of a build of training tasks alone, without tasks=: the line said `the build ... has
    none` of a build holding two tasks (new-user audit); it now says it has no evaluation task and where
    its training tasks can be taken from."""
    chal = write_kaggle(tmp_path / "raw", "arc-agi_training", _tasks(1, ["aa000001", "bb000002"]))
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "pre"), num_aug=1, seed=0, progress=False))
    capsys.readouterr()
    assert main(["make-challenges", f"source={tmp_path / 'pre'}", f"output_dir={tmp_path / 'out'}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "no evaluation task" in err[0] and "a folder of task files" in err[0], err
    assert not (tmp_path / "out").exists()
    assert main(["make-challenges", f"source={chal}", f"output_dir={tmp_path / 'out'}"]) == 0  # as the line says
    assert sorted(_read(tmp_path / "out")[0]) == ["aa000001", "bb000002"]


def test_overwrite_never_replaces_a_kaggle_data_folder_and_takes_back_any_prefix(tmp_path, capsys):
    """overwrite=true replaces the whole folder: one holding Kaggle's download (its arc-agi_evaluation_challenges.json
    was taken as make-challenges' marker) lost its training and test files (new-user audit). Now only a folder
    of one pair make-challenges writes is replaced, whatever its prefix (prefix=first, then the default, said
    'not written by make-challenges')."""
    tasks = _tasks(2, ["aa000001", "bb000002"])
    src = write_layout(tmp_path / "raw", {"evaluation": tasks})
    kaggle = tmp_path / "kaggle"
    write_kaggle(kaggle, "arc-agi_evaluation", tasks)
    write_kaggle(kaggle, "arc-agi_training", tasks)
    (kaggle / "sample_submission.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in kaggle.iterdir()}
    capsys.readouterr()
    assert main(["make-challenges", f"source={src}", f"output_dir={kaggle}", "overwrite=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "arc-agi_training_challenges.json" in err and "sample_submission" in err, err
    assert {p.name: p.read_bytes() for p in kaggle.iterdir()} == before
    out = tmp_path / "out"
    assert main(["make-challenges", f"source={src}", f"output_dir={out}", "prefix=first"]) == 0
    assert main(["make-challenges", f"source={src}", f"output_dir={out}", "overwrite=true"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["arc-agi_evaluation_challenges.json",
                                                     "arc-agi_evaluation_solutions.json"]
    assert _read(out) == _expected(tasks)
