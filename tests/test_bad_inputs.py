"""The bad-input corpus (issue 13): every case through the real CLI, each asserting exit code 2 (or 130
for Ctrl-C), one line on stderr naming the file/field/key, nothing written outside `output_dir`,
and every input byte-for-byte unchanged (hashed before and after)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_kaggle, write_layout


def tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (or 'dir') of everything under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = "dir"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "special"
    return out


def run_bad(tmp_path: Path, capsys, args: list[str], expected: str, output_dir: str | None = None,
            code: int = 2) -> str:
    """Run the CLI in tmp_path; check the exit code, the one-line error, that no input changed and
    that nothing appeared outside output_dir (relative to tmp_path). Returns the error line."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        before = tree(tmp_path)
        rc = main(args)
        after = tree(tmp_path)
    finally:
        os.chdir(cwd)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ": note: " not in ln]
    assert rc == code, (rc, err)
    assert len(err) == 1 and expected in err[0], err
    assert "Traceback" not in err[0]
    changed = {k for k in before if before[k] != after.get(k)}
    assert not changed, f"inputs changed or removed: {sorted(changed)}"
    new = {k for k in after if k not in before}
    if output_dir is not None:
        new = {k for k in new if not (k == output_dir or k.startswith(output_dir + "/"))}
    assert not new, f"written outside output_dir: {sorted(new)}"
    return err[0]


@pytest.fixture
def raw(tmp_path) -> Path:
    subsets = synthetic_tasks()
    return write_layout(tmp_path / "raw", {"training": subsets["training"], "evaluation": subsets["evaluation"]})


# ---- security and data loss ------------------------------------------------------------------------

def test_output_dir_that_is_the_source_is_refused(tmp_path, capsys, raw):
    run_bad(tmp_path, capsys, ["build-arc", "sources=[raw]", "output_dir=raw", "overwrite=true", "num_aug=1"],
            "output_dir=raw is the input raw")


def test_output_dir_inside_or_around_the_source_is_refused(tmp_path, capsys, raw):
    run_bad(tmp_path, capsys, ["build-arc", "sources=[raw]", "output_dir=raw/ds", "num_aug=1"],
            "lies inside the input raw")
    run_bad(tmp_path, capsys, ["build-arc", f"sources=[{tmp_path}/raw/training]", f"output_dir={tmp_path}/raw",
                               "overwrite=true", "num_aug=1"], "contains the input")


@pytest.mark.parametrize("name", ["../../evil", "a/b", ".hidden", "..", "x\ny"])
def test_task_names_that_are_paths_are_refused_at_the_builder(tmp_path, capsys, name):
    task = synthetic_tasks()["training"]["tr00"]
    chal = write_kaggle(tmp_path / "k", "x_training", {name: task})
    run_bad(tmp_path, capsys, ["build-arc", f"sources=[{chal}]", "output_dir=ds", "num_aug=1"],
            "is not a plain name")


def test_a_name_field_that_is_a_path_is_refused(tmp_path, capsys, raw):
    bad = json.loads((raw / "training/tr00.json").read_text()) | {"name": "../../evil"}
    (raw / "training/tr00.json").write_text(json.dumps(bad))
    run_bad(tmp_path, capsys, ["build-arc", "sources=[raw]", "output_dir=ds", "num_aug=1"], "tr00.json")


def test_viz_of_a_foreign_dataset_with_path_names_writes_nothing_outside(tmp_path, capsys, raw):
    assert main(["build-arc", f"sources=[{raw}]", f"output_dir={tmp_path / 'ds'}", "num_aug=1", "progress=false"]) == 0
    capsys.readouterr()
    ids = json.loads((tmp_path / "ds/identifiers.json").read_text())
    ids[1] = "../../evil"  # as a dataset built by another tool could name it
    (tmp_path / "ds/identifiers.json").write_text(json.dumps(ids))
    run_bad(tmp_path, capsys, ["viz-arc", "data_dir=ds", "output_dir=out/viz"], "is not a plain name",
            output_dir="out")


def test_hidden_and_non_regular_json_files_are_skipped_and_named(tmp_path, capsys, raw):
    (raw / "training/..json").write_text("{}")
    (raw / "training/..evil.json").write_text("{}")
    os.mkfifo(raw / "training/x.json")  # would block a reader forever
    (raw / "training/folder.json").mkdir()
    assert main(["build-arc", f"sources=[{raw}]", f"output_dir={tmp_path / 'ds'}", "num_aug=1", "progress=false"]) == 0
    err = capsys.readouterr().err
    for name, why in (("..json", "a hidden file"), ("..evil.json", "a hidden file"), ("x.json", "not a regular file"),
                      ("folder.json", "not a regular file")):
        assert f"skipped {raw / 'training' / name}: {why}" in err, name
    manifest = json.loads((tmp_path / "ds/manifest.json").read_text())
    assert len(manifest["sources"][0]["skipped"]) == 4


def test_overwrite_never_replaces_a_folder_the_writer_did_not_write(tmp_path, capsys, raw):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("precious")
    run_bad(tmp_path, capsys, ["build-arc", "sources=[raw]", "output_dir=mine", "overwrite=true", "num_aug=1"],
            "was not written by build-arc")
    run_bad(tmp_path, capsys, ["prepare-text", "demo_docs=5", "output_dir=mine", "overwrite=true"],
            "was not written by prepare-text")
    run_bad(tmp_path, capsys, ["demo", "output_dir=mine", "overwrite=true"], "was not written by hrm-deeploop demo")


def test_prepare_text_output_is_not_its_input(tmp_path, capsys):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/a.txt").write_text("hello world\n")
    run_bad(tmp_path, capsys, ["prepare-text", "inputs=[corpus]", "output_dir=corpus", "overwrite=true"],
            "output_dir=corpus is the input corpus")
    run_bad(tmp_path, capsys, ["prepare-text", "inputs=[corpus/a.txt]", "output_dir=corpus/a.txt/x"],
            "lies inside the input corpus/a.txt")


# ---- output folders that cannot be written -----------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["build-arc", "sources=[raw]", "num_aug=1"],
    ["viz-arc", "sources=[raw]"],
    ["prepare-text", "demo_docs=5"],
    ["train", "data_dir=raw"],
    ["train-gpt", "data.train=raw"],
    ["vote", "predictions=p.npz", "data_dir=raw"],
    ["evaluate", "checkpoint=c.pt", "data_dir=raw"],
    ["demo"],
])
def test_an_output_dir_under_a_file_is_refused_before_any_work(tmp_path, capsys, raw, args):
    (tmp_path / "afile").write_text("x")
    run_bad(tmp_path, capsys, [*args, "output_dir=afile/out"], "afile is a file, not a folder")


# ---- corrupt but parseable inputs ----------------------------------------------------------------

def test_zero_byte_predictions_file(tmp_path, capsys, raw):
    assert main(["build-arc", f"sources=[{raw}]", f"output_dir={tmp_path / 'ds'}", "num_aug=1", "progress=false"]) == 0
    capsys.readouterr()
    (tmp_path / "p.npz").write_bytes(b"")
    run_bad(tmp_path, capsys, ["vote", "predictions=p.npz", "data_dir=ds", "output_dir=v"], "p.npz: the file is empty",
            output_dir="v")


def test_a_batch_the_sampler_can_never_fill_is_refused_up_front(tmp_path, capsys, raw):
    """6 tasks x (1 + 1 augmentation) with ~3 train pairs each cannot fill a batch of 64 in one pass:
    refused with the numbers and the fix, not a hang."""
    assert main(["build-arc", f"sources=[{raw}/training]", f"output_dir={tmp_path / 'ds'}", "num_aug=1",
                 "progress=false"]) == 0
    capsys.readouterr()
    err = run_bad(tmp_path, capsys, ["train", "model=hrm_tiny", "data_dir=ds", "output_dir=run", "logger=none",
                                     "device=cpu", "train.global_batch_size=64", "train.max_steps=2"],
                  "train.global_batch_size=64 can never be filled")
    assert "raise train.epochs_per_iter to at least" in err


def test_ctrl_c_exits_130_with_one_line_and_no_temp_folder(tmp_path, capsys, raw, monkeypatch):
    import arc_data.arc.build as B

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(B, "encode_split", interrupted)
    run_bad(tmp_path, capsys, ["build-arc", "sources=[raw]", "output_dir=ds", "num_aug=1", "progress=false"],
            "hrm-deeploop build-arc: interrupted", code=130)




# ---- a dataset whose dataset.json disagrees with its arrays ------------------------------------------

@pytest.fixture(scope="module")
def sudoku_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sudoku")
    assert main(["generate-puzzles", "task=sudoku", "size=4", "count_train=40", "count_test=8",
                 f"output_dir={root / 'csv'}", "progress=false"]) == 0
    assert main(["build-puzzles", "task=sudoku", f"source={root / 'csv'}", f"output_dir={root / 'ds'}",
                 "progress=false"]) == 0
    return root / "ds"


def _corrupt(src: Path, dst: Path, field: str | None = None, value=None, tokens: int | None = None) -> Path:
    import shutil

    shutil.copytree(src, dst)
    if field is not None:
        meta_path = dst / "train" / "dataset.json"
        meta = json.loads(meta_path.read_text())
        meta[field] = value
        meta_path.write_text(json.dumps(meta))
    if tokens is not None:  # one token outside the vocabulary in the labels
        labels = np.load(dst / "train" / "all__labels.npy")
        labels[3, 5] = tokens
        np.save(dst / "train" / "all__labels.npy", labels)
    return dst


@pytest.mark.parametrize("field, value, tokens, expected", [
    ("vocab_size", 3, None, "vocab_size"),
    ("vocab_size", -6, None, "field vocab_size = -6 is negative"),
    ("vocab_size", "six", None, "field vocab_size = 'six' is not an integer"),
    ("seq_len", 25, None, "field seq_len = 25, but"),
    ("num_puzzle_identifiers", 0, None, "num_puzzle_identifiers"),
    (None, None, 9, "all__labels.npy"),
])
def test_a_dataset_json_that_disagrees_with_its_arrays_is_refused_before_a_run_folder(
        tmp_path, capsys, sudoku_set, field, value, tokens, expected):
    _corrupt(sudoku_set, tmp_path / "bad", field, value, tokens)
    run_bad(tmp_path, capsys, ["train", "model=hrm_tiny", "data_dir=bad", "output_dir=run", "logger=none",
                               "device=cpu", "train.max_steps=1", "model.puzzle_emb_ndim=0"], expected)
    assert not (tmp_path / "run").exists()


def test_a_larger_vocab_size_than_the_data_needs_is_fine(tmp_path, capsys, sudoku_set):
    _corrupt(sudoku_set, tmp_path / "big", "vocab_size", 40)
    meta = json.loads((tmp_path / "big/test/dataset.json").read_text()) | {"vocab_size": 40}
    (tmp_path / "big/test/dataset.json").write_text(json.dumps(meta))
    assert main(["train", "model=hrm_tiny", f"data_dir={tmp_path / 'big'}", f"output_dir={tmp_path / 'run'}",
                 "logger=none", "device=cpu", "train.max_steps=2", "train.global_batch_size=8",
                 "model.puzzle_emb_ndim=0", "train.progress=false"]) == 0
