"""build-puzzles and generate-puzzles: the exact layout of a tiny CSV, bad inputs (one-line error,
exit code 2, nothing written), determinism, options, configs."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data import sudoku
from arc_data.dataset import open_split, task_kind
from arc_data.errors import DatasetError
from arc_data.puzzles import csvfile
from arc_data.puzzles.build import build_puzzles, load_table
from arc_data.puzzles.generate import generate_puzzles
from arc_data.puzzles.puzzle_config import BuildPuzzlesConfig, GeneratePuzzlesConfig
from arc_data.sudoku import apply_augs, invert_augs, is_solution_reference
from hrm_deeploop.cli import main

HEADER = "source,question,answer,rating\n"
SOL4 = "1234341221434321"  # a solved 4x4 board (boxes 2x2)
SUDOKU_TRAIN = HEADER + f"a,1.3.....2...4..1,{SOL4},5\nb,0000341200000000,{SOL4},12\n"
SUDOKU_TEST = HEADER + f"c,1234............,{SOL4},7\n"
MAZE_TRAIN = HEADER + "x,S G   ###,SoG   ###,2\ny,S  ## G  ,Soo##oGoo,6\n"
MAZE_TEST = HEADER + "z,  SG #   ,ooSG #   ,3\n"


def write_csvs(folder: Path, train: str, test: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(train)
    (folder / "test.csv").write_text(test)
    return folder


def build(src: Path, out: Path, task: str = "sudoku", **kw) -> dict:
    return build_puzzles(BuildPuzzlesConfig(task=task, source=str(src), output_dir=str(out), progress=False, **kw))


def tokens(s: str, table: dict[str, int]) -> list[int]:
    return [table[c] for c in s]


SUDOKU_TOK = {".": 1, "0": 1, **{str(d): d + 1 for d in range(1, 10)}}
MAZE_TOK = {"#": 1, " ": 2, "S": 3, "G": 4, "o": 5}


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_sudoku_layout_matches_hand_written(tmp_path, monkeypatch, kernel):
    if kernel == "numba":
        monkeypatch.setattr(csvfile, "NUMBA_MIN_BYTES", -1)
        monkeypatch.setattr("arc_data.puzzles.build.NUMBA_MIN_ROWS", -1)
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, SUDOKU_TEST)
    out = tmp_path / "ds"
    build(src, out)
    assert (out / "identifiers.json").read_bytes() == b'["<blank>"]'
    for split, qs, n in (("train", ["1.3.....2...4..1", "0000341200000000"], 2), ("test", ["1234............"], 1)):
        d = out / split
        assert (d / "dataset.json").read_text() == (
            '{"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 6, "seq_len": 16, '
            f'"num_puzzle_identifiers": 1, "total_groups": {n}, "mean_puzzle_examples": 1.0, "total_puzzles": {n}, '
            '"sets": ["all"]}')
        x, y = np.load(d / "all__inputs.npy"), np.load(d / "all__labels.npy")
        assert x.dtype == y.dtype == np.uint8
        assert x.tolist() == [tokens(q, SUDOKU_TOK) for q in qs]
        assert y.tolist() == [tokens(SOL4, SUDOKU_TOK)] * n
        for name, want in (("puzzle_identifiers", [0] * n), ("puzzle_indices", list(range(n + 1))),
                           ("group_indices", list(range(n + 1)))):
            arr = np.load(d / f"all__{name}.npy")
            assert arr.dtype == np.int32 and arr.tolist() == want
    man = json.loads((out / "manifest.json").read_text())
    assert man["task"] == "sudoku" and man["board"]["n"] == 4 and man["counts"]["train"]["puzzles"] == 2
    assert len(man["sources"][0]["sha256"]) == 64 and task_kind(out) == "sudoku"


def test_sudoku_augmented_groups(tmp_path):
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, SUDOKU_TEST)
    out = tmp_path / "ds"
    build(src, out, num_aug=3, seed=1)
    sp = open_split(out, "train")
    assert sp.group_indices.tolist() == [0, 4, 8] and sp.puzzle_indices.tolist() == list(range(9))
    assert sp.meta.total_groups == 2 and sp.num_examples == 8
    x, y = sp.examples(np.arange(8))
    orig = np.array([tokens("1.3.....2...4..1", SUDOKU_TOK), tokens("0000341200000000", SUDOKU_TOK)], np.uint8)
    assert np.array_equal(x[[0, 4]], orig)  # the original first in each group
    table = load_table(out / "train")
    assert table["source_row"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    augs = sudoku.augs_of(table)
    assert np.array_equal(apply_augs(orig[table["source_row"]], augs, offset=1), x)
    assert np.array_equal(invert_augs(y, augs, offset=1), np.tile(tokens(SOL4, SUDOKU_TOK), (8, 1)))
    assert all(is_solution_reference(r - 1, 4) for r in y)
    assert open_split(out, "test").num_examples == 1  # the test split is never augmented


def test_maze_layout_and_dihedral_augmentation(tmp_path):
    src = write_csvs(tmp_path / "csv", MAZE_TRAIN, MAZE_TEST)
    out = tmp_path / "ds"
    build(src, out, task="maze")
    x = np.load(out / "train" / "all__inputs.npy")
    y = np.load(out / "train" / "all__labels.npy")
    assert x.tolist() == [tokens("S G   ###", MAZE_TOK), tokens("S  ## G  ", MAZE_TOK)]
    assert y.tolist() == [tokens("SoG   ###", MAZE_TOK), tokens("Soo##oGoo", MAZE_TOK)]
    meta = json.loads((out / "test" / "dataset.json").read_text())
    assert (meta["vocab_size"], meta["seq_len"], meta["total_groups"]) == (6, 9, 1)

    out7 = tmp_path / "ds7"
    build(src, out7, task="maze", num_aug=7)
    sp = open_split(out7, "train")
    x, _ = sp.examples(np.arange(16))
    assert sp.group_indices.tolist() == [0, 8, 16]
    for t in range(8):
        want = fmt.dihedral(np.array(tokens("S  ## G  ", MAZE_TOK), np.uint8).reshape(3, 3), t).reshape(-1)
        assert np.array_equal(x[8 + t], want)
    assert load_table(out7 / "train")["dihedral"].tolist() == list(range(8)) * 2
    assert task_kind(out7) == "maze" and sp.task == "maze"


def test_min_difficulty_and_subsample(tmp_path):
    rows = "".join(f"r{i},1.3.....2...4..1,{SOL4},{i}\n" for i in range(10))
    src = write_csvs(tmp_path / "csv", HEADER + rows, SUDOKU_TEST)
    build(src, tmp_path / "a", min_difficulty=6)
    assert load_table(tmp_path / "a" / "train")["source_row"].tolist() == [6, 7, 8, 9]
    assert open_split(tmp_path / "a", "test").num_examples == 1  # rating 7 >= 6
    build(src, tmp_path / "b", subsample_size=4, seed=3)
    rows_b = load_table(tmp_path / "b" / "train")["source_row"]
    assert len(set(rows_b.tolist())) == 4 and rows_b.max() < 10
    build(src, tmp_path / "c", subsample_size=10)  # exactly as many as there are: all rows, in order
    assert load_table(tmp_path / "c" / "train")["source_row"].tolist() == list(range(10))
    with pytest.raises(DatasetError, match="subsample_size=50: .* has only 10 puzzles"):  # more: refused
        build(src, tmp_path / "d", subsample_size=50)
    assert not (tmp_path / "d").exists()


def _gen(out: Path, **kw) -> Path:
    cfg = dict(task="sudoku", size=4, count_train=12, count_test=4, output_dir=str(out), seed=0, progress=False)
    cfg.update(kw)
    generate_puzzles(GeneratePuzzlesConfig(**cfg))
    return out


def _arrays(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.suffix == ".npz":
            with np.load(p) as z:
                out.update({f"{p.relative_to(root)}:{k}": z[k].tobytes() for k in z.files})
        elif p.is_file() and p.name != "manifest.json":
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_same_seed_same_bytes_different_seed_different(tmp_path):
    a = _gen(tmp_path / "g1", task="sudoku", size=6, seed=4)
    b = _gen(tmp_path / "g2", task="sudoku", size=6, seed=4)
    c = _gen(tmp_path / "g3", task="sudoku", size=6, seed=5)
    for f in ("train.csv", "test.csv"):
        assert (a / f).read_bytes() == (b / f).read_bytes() != (c / f).read_bytes()
    for seed, name in ((1, "d1"), (1, "d2"), (2, "d3")):
        build(a, tmp_path / name, num_aug=5, subsample_size=8, seed=seed)
    d1, d2, d3 = (_arrays(tmp_path / n) for n in ("d1", "d2", "d3"))
    assert d1 == d2
    assert d1["train/all__inputs.npy"] != d3["train/all__inputs.npy"]
    assert d1["test/all__inputs.npy"] == d3["test/all__inputs.npy"]  # no randomness in the test split


def test_generated_csvs_are_disjoint_unique_and_build(tmp_path):
    src = _gen(tmp_path / "g", task="sudoku", size=4, count_train=30, count_test=10, givens=6)
    qs = [line.split(",")[1] for f in ("train.csv", "test.csv") for line in (src / f).read_text().splitlines()[1:]]
    assert len(qs) == 40 == len(set(qs)) and all(16 - q.count(".") == 6 for q in qs)
    info = json.loads((src / "generated.json").read_text())
    assert info["counts"]["train"]["rows"] == 30 and info["options"]["givens"] == 6
    build(src, tmp_path / "ds", num_aug=2)
    sp = open_split(tmp_path / "ds", "train")
    assert (sp.meta.seq_len, sp.meta.vocab_size, sp.num_groups) == (16, 6, 30)

    msrc = _gen(tmp_path / "m", task="maze", size=11, count_train=8, count_test=3, min_path=12, openings=0.1)
    ratings = [int(line.rsplit(",", 1)[1]) for line in (msrc / "train.csv").read_text().splitlines()[1:]]
    assert len(ratings) == 8 and min(ratings) >= 12
    build(msrc, tmp_path / "mds", task="maze", num_aug=7)
    assert open_split(tmp_path / "mds", "train").num_examples == 64


def test_generator_refuses_impossible_knobs(tmp_path):
    with pytest.raises(DatasetError, match=r"only \d+ of 41 distinct 4x4 sudoku puzzles.*givens=3"):
        _gen(tmp_path / "g", count_train=40, count_test=1, givens=3)  # a 4x4 needs >= 4 givens
    with pytest.raises(DatasetError, match="min_path=31"):  # a 7x7 maze has 31 open cells: paths <= 30 steps
        _gen(tmp_path / "m", task="maze", size=7, count_train=2, count_test=1, min_path=31)
    assert not (tmp_path / "g").exists() and not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------
# bad inputs: one line naming the file (and line), exit code 2 through the CLI, nothing written

BAD_SUDOKU = [
    ("header", "src,q,a,r\n" + SUDOKU_TRAIN.split("\n", 1)[1], r"train\.csv:1: header"),
    ("empty", "", r"train\.csv:1: empty file"),
    ("no rows", HEADER, r"train\.csv:2: no puzzle rows"),
    ("fields", HEADER + f"a,1.3.....2...4..1,{SOL4}\n", r"train\.csv:2: 3 fields, expected 4"),
    ("length", SUDOKU_TRAIN + f"c,1.3.....2...4..,{SOL4},1\n", r"train\.csv:4: question has 15 characters"),
    ("answer length", SUDOKU_TRAIN + f"c,1.3.....2...4..1,{SOL4}1,1\n", r"train\.csv:4: answer has 17 characters"),
    ("charset", SUDOKU_TRAIN + f"c,1.3..x..2...4..1,{SOL4},1\n", r"train\.csv:4: question cell 5 is 'x'"),
    ("digit too big", SUDOKU_TRAIN + f"c,1.3..5..2...4..1,{SOL4},1\n", r"train\.csv:4: question cell 5 is '5'"),
    ("non-ascii", SUDOKU_TRAIN + f"c,1.3..é..2...4..1,{SOL4},1\n", r"train\.csv:4: question holds a non-ASCII"),
    ("quoting", SUDOKU_TRAIN + f'c,"1.3"x,{SOL4},1\n', r"train\.csv:4: malformed CSV"),
    ("size", HEADER + f"a,{'.' * 25},{'1' * 25},1\n", r"train\.csv:2: a sudoku row has 25"),
    ("repeat", SUDOKU_TRAIN + f"c,{'.' * 16},1234341221434312,1\n", r"train\.csv:4: the answer is not a solved sudoku"),
    ("given", SUDOKU_TRAIN + f"c,2...............,{SOL4},1\n", r"train\.csv:4: the answer changes the given at cell 0"),
    ("blank answer", SUDOKU_TRAIN + "c,1.3.....2...4..1,1.34341221434321,1\n", r"train\.csv:4: the answer has a blank"),
]


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
@pytest.mark.parametrize("case,train,pattern", BAD_SUDOKU, ids=[c[0] for c in BAD_SUDOKU])
def test_bad_sudoku_csv(tmp_path, capsys, monkeypatch, case, train, pattern, kernel):
    if kernel == "numba":  # the big-file paths: one-pass CSV split and sudoku encode + check
        monkeypatch.setattr(csvfile, "NUMBA_MIN_BYTES", -1)
        monkeypatch.setattr("arc_data.puzzles.build.NUMBA_MIN_ROWS", -1)
    src = write_csvs(tmp_path / "csv", train, SUDOKU_TEST)
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}"], pattern, cli=kernel == "numpy")


BAD_MAZE = [
    ("charset", MAZE_TRAIN + "w,S G X ###,SoG X ###,1\n", r"train\.csv:4: question cell 4 is 'X'"),
    ("not square", HEADER + "x,S G   ##,SoG   ##,1\n", r"train\.csv:2: a maze row has 8 cells"),
    ("two starts", MAZE_TRAIN + "w,S GS  ###,SoGS  ###,1\n", r"train\.csv:4: the question needs exactly one 'S'"),
    ("unreachable", MAZE_TRAIN + "w,S#G# ####,S#G# ####,1\n", r"train\.csv:4: 'G' cannot be reached"),
    ("broken path", MAZE_TRAIN + "w,S  ## G  ,So ##oGoo,1\n", r"train\.csv:4: the cells marked 'o' do not form"),
    ("path on wall", MAZE_TRAIN + "w,S  ## G  ,Soo#ooGoo,1\n", r"train\.csv:4: the answer differs"),
]


@pytest.mark.parametrize("case,train,pattern", BAD_MAZE, ids=[c[0] for c in BAD_MAZE])
def test_bad_maze_csv(tmp_path, capsys, case, train, pattern):
    src = write_csvs(tmp_path / "csv", train, MAZE_TEST)
    _refused(tmp_path, capsys, ["task=maze", f"source={src}"], pattern)


def test_bad_sources_and_options(tmp_path, capsys):
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, SUDOKU_TEST)
    (src / "test.csv").unlink()
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}"], r"test\.csv: missing")
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, HEADER + f"c,{'.' * 38},{'1' * 38},1\n")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}"], r"test\.csv:2: a sudoku row has 38")
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, MAZE_TEST)  # 9 cells: 3x3, not a sudoku size
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}"], r"test\.csv:2: a sudoku row has 9")
    src = write_csvs(tmp_path / "csv", MAZE_TRAIN, HEADER + "z,S G" + " " * 13 + ",SoG" + " " * 13 + ",1\n")
    _refused(tmp_path, capsys, ["task=maze", f"source={src}"], r"test\.csv: 4x4 boards, but train\.csv holds 3x3")
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN.replace(",5\n", ",five\n"), SUDOKU_TEST)
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}", "min_difficulty=1"],
             r"train\.csv:2: rating 'five' is not an integer")
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, SUDOKU_TEST)
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}", "min_difficulty=100"],
             r"train\.csv: min_difficulty=100 leaves no puzzles")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src / 'train.csv'}"], "is a file")
    # a FIFO as the source, or as its train.csv: named as such (it said 'is a file' / 'missing'; new-user audit)
    os.mkfifo(tmp_path / "fifo")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={tmp_path / 'fifo'}"], r"is not a folder \(a FIFO")
    (src / "train.csv").unlink()
    os.mkfifo(src / "train.csv")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}"], r"train\.csv: not a regular file")
    src = write_csvs(tmp_path / "csv2", SUDOKU_TRAIN, SUDOKU_TEST)
    _refused(tmp_path, capsys, ["task=sudoku", f"source={tmp_path / 'nope' / 'x' / 'y'}"], "neither a folder nor")
    # a dataset repository id with no network (tests run with HF_HUB_OFFLINE=1)
    _refused(tmp_path, capsys, ["task=sudoku", "source=sapientinc/sudoku-extreme-not-cached"],
             "could not download train.csv from the dataset repository sapientinc/sudoku-extreme-not-cached"
             "|sapientinc/sudoku-extreme-not-cached is not a folder, and huggingface_hub is not installed")
    _refused(tmp_path, capsys, ["task=maze", f"source={src}", "num_aug=3"], "num_aug: maze takes 0 or 7")
    _refused(tmp_path, capsys, ["task=chess", f"source={src}"], "task: expected one of sudoku, maze")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}", "subsample_size=0"], "subsample_size: must be >= 1")
    _refused(tmp_path, capsys, ["task=sudoku", f"source={src}", "num_aug=-1"], "num_aug: must be >= 0")
    _refused(tmp_path, capsys, ["task=sudoku", "source="], "source: required")


def test_check_answers_false_keeps_the_reference_behaviour(tmp_path):
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN + "c,1.3.....2...4..1,1234341221434312,1\n", SUDOKU_TEST)
    build(src, tmp_path / "ds", check_answers=False)
    assert open_split(tmp_path / "ds", "train").num_examples == 3


def test_existing_output_needs_overwrite(tmp_path, capsys):
    src = write_csvs(tmp_path / "csv", SUDOKU_TRAIN, SUDOKU_TEST)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    assert main(["build-puzzles", "task=sudoku", f"source={src}", f"output_dir={out}", "progress=false"]) == 2
    assert "exists (pass overwrite=true" in capsys.readouterr().err and (out / "keep").exists()
    # overwrite=true never replaces a folder build-puzzles did not write ...
    assert main(["build-puzzles", "task=sudoku", f"source={src}", f"output_dir={out}", "progress=false",
                 "overwrite=true"]) == 2
    assert "was not written by build-puzzles" in capsys.readouterr().err and (out / "keep").exists()
    (out / "keep").unlink()
    # ... but an empty one, and then its own earlier build
    for _ in range(2):
        assert main(["build-puzzles", "task=sudoku", f"source={src}", f"output_dir={out}", "progress=false",
                     "overwrite=true"]) == 0
    assert open_split(out, "train").num_examples == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_generate_cli_and_config_errors(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["generate-puzzles", "task=maze", "size=9", "count_train=3", "count_test=2", f"output_dir={out}",
                 "progress=false"]) == 0
    assert len((out / "train.csv").read_text().splitlines()) == 4
    for args, msg in ((["size=5"], "size: sudoku sizes are [4, 6, 8, 9]"),
                      (["givens=99"], "givens: must be in 0..81"),
                      (["task=maze", "givens=20"], "givens: a sudoku option (task=maze)"),
                      (["min_path=3"], "min_path: a maze option (task=sudoku)"),
                      (["task=maze", "openings=1.5"], "openings: must be in [0, 1]"),
                      (["task=maze", "size=2"], "maze side must be in 3..255"),
                      (["count_test=0"], "count_train/count_test: must be >= 1"),
                      ([], "output_dir: required")):
        target = [] if any(a.startswith("output_dir") for a in args) or msg.startswith("output_dir") else \
            [f"output_dir={tmp_path / 'x'}"]
        assert main(["generate-puzzles", *args, *target, "progress=false"]) == 2, args
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def _refused(tmp_path: Path, capsys, args: list[str], pattern: str, cli: bool = True) -> None:
    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DatasetError, match=pattern) as e:  # the library call
        cfg = dict(a.split("=", 1) for a in args)
        for k in ("num_aug", "subsample_size", "min_difficulty"):
            if k in cfg:
                cfg[k] = int(cfg[k])
        build_puzzles(BuildPuzzlesConfig(**cfg, output_dir=str(out), progress=False))
    assert "\n" not in str(e.value)
    if cli:
        assert main(["build-puzzles", *args, f"output_dir={out}", "progress=false"]) == 2  # the CLI
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "error:" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not out.exists()


def test_numba_and_numpy_paths_write_the_same_bytes(tmp_path, monkeypatch):
    src = _gen(tmp_path / "g", task="sudoku", size=9, count_train=6, count_test=3, seed=2)
    build(src, tmp_path / "numpy", num_aug=20, subsample_size=5, seed=7)
    monkeypatch.setattr(csvfile, "NUMBA_MIN_BYTES", -1)  # CSV split, encode + check, augment: numba
    monkeypatch.setattr("arc_data.puzzles.build.NUMBA_MIN_ROWS", -1)
    build(src, tmp_path / "numba", num_aug=20, subsample_size=5, seed=7)
    assert _arrays(tmp_path / "numpy") == _arrays(tmp_path / "numba")


def test_repository_id_downloads_with_huggingface_hub(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    src = write_csvs(tmp_path / "cache", SUDOKU_TRAIN, SUDOKU_TEST)
    calls = []

    def fake_download(repo_id, filename, repo_type=None, **kw):
        calls.append((repo_id, filename, repo_type))
        return str(src / filename)

    monkeypatch.setattr(hub, "hf_hub_download", fake_download)
    man = build(Path("owner/some-puzzles"), tmp_path / "ds")
    assert calls == [("owner/some-puzzles", "train.csv", "dataset"), ("owner/some-puzzles", "test.csv", "dataset")]
    assert man["sources"][0]["repo"] == "owner/some-puzzles" and open_split(tmp_path / "ds", "train").num_examples == 2
