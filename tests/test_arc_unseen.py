"""build-arc for tasks the model has never seen: unlabelled test inputs (test_labels=optional) and
the task-level hold-out (holdout_tasks / holdout_fraction -> holdout_dir), checked on the built files."""

import json

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import load_augmentations, load_identifiers, open_split
from arc_data.errors import DatasetError
from arc_data.format import encode_grid
from tests.arc_synth import synthetic_tasks, write_kaggle, write_layout


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("unseen")
    tasks = synthetic_tasks(0)
    write_layout(root / "raw", tasks)
    kaggle = write_kaggle(root / "kaggle", "arc-agi_test", tasks["evaluation"], solutions=False)
    return root, tasks, kaggle


def _build(**kw):
    return build(BuildConfig(**({"num_aug": 3, "seed": 0, "progress": False} | kw)))


def test_challenges_alone_is_an_error_unless_labels_are_optional(raw, tmp_path, capsys):
    _, tasks, kaggle = raw
    with pytest.raises(DatasetError, match="solutions file .* not found .*test_labels=optional"):
        _build(sources=[str(kaggle)], output_dir=str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()
    s = _build(sources=[str(kaggle)], output_dir=str(tmp_path / "b"), test_labels="optional")
    assert "UNLABELLED build" in capsys.readouterr().out
    assert sorted(s.unlabelled_tasks) == sorted(tasks["evaluation"])
    man = json.loads((tmp_path / "b" / fmt.MANIFEST_FILE).read_text())
    assert man["test_labels"]["mode"] == "unlabelled"
    test = open_split(tmp_path / "b", "test")
    n_tests = sum(len(t["test"]) for t in tasks["evaluation"].values())
    assert test.num_examples == n_tests * 4  # every augmented copy of every test input
    inputs, labels = test.examples(np.arange(test.num_examples))
    assert (labels == fmt.PAD).all() and (inputs != fmt.PAD).any()
    train = open_split(tmp_path / "b", "train")
    _, train_labels = train.examples(np.arange(train.num_examples))
    assert (train_labels != fmt.PAD).any(axis=1).all()  # demonstrations keep their outputs


def test_json_task_without_test_output(tmp_path, capsys):
    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "abcd1234.json").write_text(json.dumps(task))
    with pytest.raises(DatasetError, match=r"test\[0\] has no 'output'.*test_labels=optional"):
        _build(sources=[str(tmp_path / "raw" / "abcd1234.json")], output_dir=str(tmp_path / "a"))
    s = _build(sources=[str(tmp_path / "raw" / "abcd1234.json")], output_dir=str(tmp_path / "b"),
               test_labels="optional")
    assert s.num_eval_tasks == 1 and s.splits["test"]["examples"] == 4  # forced to be an evaluation task
    assert "UNLABELLED" in capsys.readouterr().out


def test_labelled_build_says_so(raw, tmp_path, capsys):
    root, _, _ = raw
    _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "a"), test_labels="optional")
    assert "labelled build (every test input has its solution" in capsys.readouterr().out


def _demo_rows(task: dict) -> set[bytes]:
    return {encode_grid(np.array(p["input"], np.uint8)).tobytes() for p in task["train"] + task["test"]}


def test_holdout_leaves_nothing_of_a_held_out_task(raw, tmp_path):
    root, tasks, _ = raw
    held = ["ev01", "tr02"]
    s = _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "pre"), holdout_tasks=held,
               holdout_dir=str(tmp_path / "unseen"))
    assert s.holdout is not None and s.holdout.num_tasks == 2 and s.holdout.num_eval_tasks == 2
    pre, unseen = tmp_path / "pre", tmp_path / "unseen"
    # no identifier, no augmentation of a held-out task in the pretraining set
    names = load_identifiers(pre)
    assert not [n for n in names if any(n == h or n.startswith(h + fmt.AUG_SEPARATOR) for h in held)]
    assert not set(held) & set(load_augmentations(pre).task_names.tolist())
    # no demonstration (or test input) of a held-out task among the pretraining examples' untranslated rows
    rows = set()
    for split in fmt.SPLITS:
        sp = open_split(pre, split)
        x, _ = sp.examples(np.arange(sp.num_examples))
        rows |= {r.tobytes() for r in x}
    everything = {n: t for sub in tasks.values() for n, t in sub.items()}
    for h in held:
        assert not _demo_rows(everything[h]) & rows, h
    assert _demo_rows(everything["ev00"]) & rows  # the check can see a task that is there
    # the unseen set holds exactly the held-out tasks, all as evaluation tasks
    assert sorted(load_augmentations(unseen).task_names.tolist()) == sorted(held)
    man = json.loads((unseen / fmt.MANIFEST_FILE).read_text())
    assert man["task_split"]["role"] == "unseen" and sorted(man["task_split"]["held_out_tasks"]) == sorted(held)
    assert open_split(unseen, "test").num_examples > 0


def test_holdout_fraction_is_seeded_and_drawn_from_its_pool(raw, tmp_path):
    root, tasks, _ = raw
    a = _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "a"), holdout_fraction=0.4,
               holdout_pool="evaluation", holdout_dir=str(tmp_path / "ah"))
    b = _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "b"), holdout_fraction=0.4,
               holdout_pool="evaluation", holdout_dir=str(tmp_path / "bh"), num_aug=1)
    ha = load_augmentations(tmp_path / "ah").task_names.tolist()
    assert ha == load_augmentations(tmp_path / "bh").task_names.tolist()  # seed, not num_aug, decides
    assert len(ha) == round(0.4 * len(tasks["evaluation"])) and set(ha) <= set(tasks["evaluation"])
    assert a.num_tasks + a.holdout.num_tasks == sum(len(v) for v in tasks.values())
    assert b.holdout.num_tasks == len(ha)


@pytest.mark.parametrize("kw, match", [
    ({"holdout_tasks": ["ev01"]}, "need holdout_dir"),
    ({"holdout_dir": "X"}, "give holdout_tasks"),
    ({"holdout_fraction": 1.5, "holdout_dir": "X"}, r"holdout_fraction=1.5: must be in \[0, 1\]"),
    ({"holdout_pool": "test", "holdout_fraction": 0.5, "holdout_dir": "X"}, "holdout_pool='test'"),
    ({"test_labels": "maybe"}, "test_labels='maybe'"),
    ({"holdout_tasks": ["ev01"], "holdout_dir": "a"}, "holdout_dir=.*must be a folder apart from output_dir"),
    ({"holdout_tasks": ["ev01"], "holdout_dir": "a/in"}, "holdout_dir=.*must be a folder apart from output_dir"),
    ({"holdout_tasks": ["ev01"], "holdout_dir": "h", "validation_dir": "h"}, "validation_dir=.*apart from holdout_dir"),
])
def test_bad_options(raw, tmp_path, kw, match):
    root, _, _ = raw
    kw = {k: (str(tmp_path / v) if k.endswith("_dir") else v) for k, v in kw.items()}
    with pytest.raises(DatasetError, match=match):
        _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "a"), **kw)
    assert not (tmp_path / "a").exists()


def test_holdout_unknown_task_or_everything_writes_nothing(raw, tmp_path):
    root, _, _ = raw
    with pytest.raises(DatasetError, match="task nope is in none of the sources"):
        _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "a"), holdout_tasks=["nope"],
               holdout_dir=str(tmp_path / "h"))
    with pytest.raises(DatasetError, match="every task is held out"):
        _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "a"), holdout_fraction=1.0,
               holdout_dir=str(tmp_path / "h"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "h").exists()


def test_validation_dir_holds_out_the_last_demonstration(raw, tmp_path):
    root, tasks, _ = raw
    s = _build(sources=[str(root / "raw")], output_dir=str(tmp_path / "pre"), holdout_tasks=["ev00", "black1"],
               holdout_dir=str(tmp_path / "unseen"), validation_dir=str(tmp_path / "val"), num_aug=0)
    assert s.validation is not None and s.validation.num_tasks == 1  # black1 has one demonstration: left out
    val = tmp_path / "val"
    assert load_augmentations(val).task_names.tolist() == ["ev00"]
    task = tasks["evaluation"]["ev00"]
    x, y = open_split(val, "test").examples(np.arange(1))
    assert x[0].tobytes() == encode_grid(np.array(task["train"][-1]["input"], np.uint8)).tobytes()
    assert y[0].tobytes() == encode_grid(np.array(task["train"][-1]["output"], np.uint8)).tobytes()
    tx, _ = open_split(val, "train").examples(np.arange(open_split(val, "train").num_examples))
    shown = {r.tobytes() for r in tx}
    assert not _demo_rows({"train": task["train"][-1:], "test": task["test"]}) & shown  # neither is trained on
    assert len(shown) == len(task["train"]) - 1
