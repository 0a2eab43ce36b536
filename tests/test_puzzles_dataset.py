"""The generic dataset reader: every split opens from its dataset.json (Sudoku 16/81, Maze, ARC 900),
corrupt fields and arrays are refused naming the file and field, and task_kind tells tasks apart."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from arc_data import dataset as D
from arc_data import format as fmt
from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import open_split, task_kind
from arc_data.errors import DatasetError
from arc_data.puzzles.build import build_puzzles
from arc_data.puzzles.generate import generate_puzzles
from arc_data.puzzles.puzzle_config import BuildPuzzlesConfig, GeneratePuzzlesConfig
from tests.arc_synth import synthetic_tasks, write_layout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ds")
    out = {}
    for task, size in (("sudoku", 4), ("sudoku", 9), ("maze", 10)):
        csv = root / f"csv-{task}{size}"
        generate_puzzles(GeneratePuzzlesConfig(task=task, size=size, count_train=6, count_test=3, output_dir=str(csv),
                                               progress=False))
        out[f"{task}{size}"] = root / f"{task}{size}"
        build_puzzles(BuildPuzzlesConfig(task=task, source=str(csv), output_dir=str(out[f"{task}{size}"]),
                                         num_aug=7 if task == "maze" else 2, progress=False))
    src = write_layout(root / "arc-src", synthetic_tasks())
    out["arc"] = root / "arc"
    build(BuildConfig(sources=[str(src)], output_dir=str(out["arc"]), num_aug=2, progress=False))
    return out


def test_every_task_opens_through_one_api(built):
    for name, seq_len, vocab, task in (("sudoku4", 16, 6, "sudoku"), ("sudoku9", 81, 11, "sudoku"),
                                       ("maze10", 100, 6, "maze"), ("arc", 900, 12, "arc")):
        for split in fmt.SPLITS:
            sp = open_split(built[name], split)
            x, y = sp.examples(np.arange(min(3, sp.num_examples)))
            assert x.shape == y.shape == (min(3, sp.num_examples), seq_len) and x.max() < vocab
            assert (sp.meta.seq_len, sp.meta.vocab_size, sp.meta.pad_id, sp.meta.ignore_label_id) == (seq_len, vocab, 0, 0)
            assert sp.task == task == task_kind(built[name])


def _copy(built: dict, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(built[name], dst)
    return dst


def _edit_meta(root: Path, split: str = "train", **changes) -> Path:
    path = root / split / fmt.META_FILE
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is _DROP:
            del meta[k]
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))
    return path


_DROP = object()


@pytest.mark.parametrize("field", D.META_KEYS)
def test_missing_field_is_named(built, tmp_path, field):
    root = _copy(built, "sudoku4", tmp_path)
    _edit_meta(root, **{field: _DROP})
    with pytest.raises(DatasetError, match=rf"train/dataset\.json: missing field\(s\) {field}$"):
        open_split(root, "train")


@pytest.mark.parametrize("field", D.META_INT_KEYS + ("ignore_label_id",))
@pytest.mark.parametrize("value,problem", [("3", "is not an integer"), (2.5, "is not an integer"),
                                           (True, "is not an integer"), (-1, "is negative")])
def test_non_integer_or_negative_field_is_named(built, tmp_path, field, value, problem):
    root = _copy(built, "sudoku4", tmp_path)
    _edit_meta(root, **{field: value})
    with pytest.raises(DatasetError, match=rf"dataset\.json: field {field} = .* {problem}"):
        open_split(root, "train")


@pytest.mark.parametrize("changes,pattern", [
    ({"vocab_size": 0}, "field vocab_size = 0 must be >= 1"),
    ({"pad_id": 6}, "field pad_id = 6 is not below vocab_size = 6"),
    ({"blank_identifier_id": 1}, "field blank_identifier_id = 1 is not below num_puzzle_identifiers = 1"),
    ({"mean_puzzle_examples": "1"}, "field mean_puzzle_examples = '1' is not a non-negative number"),
    ({"sets": ["train"]}, "field sets = \\['train'\\]"),
    ({"seq_len": 81}, r"field seq_len = 81, but all__inputs\.npy rows hold 16 tokens"),
    ({"total_groups": 5}, r"field total_groups = 5, but all__group_indices\.npy holds 6 groups"),
    ({"vocab_size": 5}, r"all__(inputs|labels)\.npy: example \d+ holds a token outside \[0, vocab_size = 5\)"),
])
def test_inconsistent_fields_are_named(built, tmp_path, changes, pattern):
    root = _copy(built, "sudoku4", tmp_path)
    _edit_meta(root, **changes)
    with pytest.raises(DatasetError, match=pattern):
        open_split(root, "train")


def test_null_ignore_label_and_larger_vocab_are_fine(built, tmp_path):
    root = _copy(built, "sudoku4", tmp_path)
    _edit_meta(root, ignore_label_id=None, vocab_size=40)
    sp = open_split(root, "train")
    assert sp.meta.ignore_label_id is None and sp.meta.vocab_size == 40


def test_identifier_beyond_num_puzzle_identifiers(built, tmp_path):
    root = _copy(built, "sudoku4", tmp_path)
    ids = np.load(root / "train" / fmt.PUZZLE_IDS_FILE)
    ids[3] = 2
    np.save(root / "train" / fmt.PUZZLE_IDS_FILE, ids)
    with pytest.raises(DatasetError, match=r"field num_puzzle_identifiers = 1, but all__puzzle_identifiers\.npy "
                                           r"uses ids 0\.\.2"):
        open_split(root, "train")
    _edit_meta(root, num_puzzle_identifiers=3)
    assert open_split(root, "train").meta.num_puzzle_identifiers == 3


@pytest.mark.parametrize("name,mutate,pattern", [
    (fmt.PUZZLE_INDICES_FILE, lambda a: a[:-1], "not a CSR index over 18 puzzles"),
    (fmt.PUZZLE_INDICES_FILE, lambda a: np.where(np.arange(a.size) == 5, 9, a), "not a CSR index"),
    (fmt.PUZZLE_INDICES_FILE, lambda a: a + (np.arange(a.size) == a.size - 1), r"19 examples"),
    (fmt.GROUP_INDICES_FILE, lambda a: np.where(np.arange(a.size) == a.size - 1, 17, a), "not a CSR index"),
    (fmt.GROUP_INDICES_FILE, lambda a: a[::-1].copy(), "not a CSR index"),
])
def test_inconsistent_index_arrays(built, tmp_path, name, mutate, pattern):
    root = _copy(built, "sudoku4", tmp_path)
    path = root / "train" / name
    np.save(path, mutate(np.load(path)).astype(np.int32))
    with pytest.raises(DatasetError, match=pattern):
        open_split(root, "train")


def test_token_out_of_range_at_open_and_on_read(built, tmp_path, monkeypatch):
    root = _copy(built, "maze10", tmp_path)
    path = root / "train" / fmt.INPUTS_FILE
    x = np.load(path)
    x[37, 5] = 6  # vocab is 6
    np.save(path, x)
    with pytest.raises(DatasetError, match=r"train/all__inputs\.npy: example 37 holds a token outside"):
        open_split(root, "train")
    # above the full-scan size only the first and last blocks are scanned at open; every read is checked
    monkeypatch.setattr(D, "TOKEN_CHECK_FULL_BYTES", 0)
    monkeypatch.setattr(D, "TOKEN_CHECK_CHUNK", 8)
    sp = open_split(root, "train")
    assert sp.examples(np.arange(30))[0].shape == (30, 100)
    with pytest.raises(DatasetError, match=r"example 37 holds a token outside \[0, vocab_size = 6\)"):
        sp.examples(np.array([2, 37, 40]))
    with pytest.raises(DatasetError, match="example 37"):
        sp.verify_tokens()
    x[37, 5] = 1
    x[0, 0] = 9
    np.save(path, x)
    with pytest.raises(DatasetError, match="example 0 holds"):
        open_split(root, "train")


def test_float_tokens_and_missing_files(built, tmp_path):
    root = _copy(built, "sudoku4", tmp_path)
    np.save(root / "test" / fmt.LABELS_FILE, np.load(root / "test" / fmt.LABELS_FILE).astype(np.float32))
    with pytest.raises(DatasetError, match=r"test/all__labels\.npy: dtype float32: expected integer tokens"):
        open_split(root, "test")
    (root / "train" / fmt.INPUTS_FILE).unlink()
    with pytest.raises(DatasetError, match=r"train/all__inputs\.npy: missing"):
        open_split(root, "train")


def test_task_kind_without_our_manifest(built, tmp_path):
    # HRM's own builders write no manifest.json: ARC is recognised by shape, vocab and names
    arc = _copy(built, "arc", tmp_path)
    (arc / fmt.MANIFEST_FILE).unlink()
    assert task_kind(arc) == "arc" and open_split(arc, "test").task == "arc"
    sud = _copy(built, "sudoku9", tmp_path)
    (sud / fmt.MANIFEST_FILE).unlink()
    assert task_kind(sud) == "generic"
    # 900 tokens and vocab 12, but a single blank identifier (e.g. a 30x30 board task): not ARC
    fake = tmp_path / "fake"
    fake.mkdir()
    shutil.copytree(arc / "test", fake / "test")
    (fake / fmt.IDENTIFIERS_FILE).write_text('["<blank>", "my_puzzle"]')
    assert task_kind(fake) == "generic"
    # an older ARC manifest without "task"
    arc2 = _copy(built, "arc", tmp_path / "b")
    man = json.loads((arc2 / fmt.MANIFEST_FILE).read_text())
    del man["task"]
    (arc2 / fmt.MANIFEST_FILE).write_text(json.dumps(man))
    assert task_kind(arc2) == "arc"
    man["task"] = 5
    (arc2 / fmt.MANIFEST_FILE).write_text(json.dumps(man))
    with pytest.raises(DatasetError, match="field task = 5"):
        task_kind(arc2)
    with pytest.raises(DatasetError, match="no such dataset directory"):
        task_kind(tmp_path / "nope")
