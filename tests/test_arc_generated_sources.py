"""`build-arc` on the generators' dumps: `rearc:`, `arcgen:` and `barc:` sources, read from
fixtures the tests write in each project's released layout (RE-ARC's re_arc/tasks/<id>.json lists,
ARC-GEN's <id>.json lists, BARC's JSONL of problems), grouped into tasks by a seeded option, the
imitated task kept for a strict split; the numba scanner agrees with json + parse_grid; malformed
files are one-line errors naming file and entry, with nothing written."""

import json
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from arc_data.arc.generated import GeneratedSourceConfig, Packed, PackedPairs, _pairs_slow, loader
from arc_data.arc.pairscan import scan_file
from arc_data.arc.sources import load_sources
from arc_data.errors import ArcError, DatasetError
from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_layout


def _grid(rng, hi=6):
    h, w = (int(v) for v in rng.integers(1, hi + 1, size=2))
    return rng.integers(0, 10, size=(h, w)).tolist()


def _pairs(rng, n):
    return [{"input": _grid(rng), "output": _grid(rng)} for _ in range(n)]


def write_rearc(root: Path, counts: dict[str, int], seed: int = 0) -> Path:
    """RE-ARC's re_arc.zip layout: tasks/<ARC-1 id>.json (json.dump defaults), metadata.json beside."""
    rng = np.random.default_rng(seed)
    (root / "tasks").mkdir(parents=True)
    for key, n in counts.items():
        (root / "tasks" / f"{key}.json").write_text(json.dumps(_pairs(rng, n)))
    (root / "metadata.json").write_text(json.dumps({k: {"n_generations": n} for k, n in counts.items()}))
    return root


def barc_stored(grid: list[list[int]]) -> list[list[int]]:
    """A grid as BARC writes it: its arrays are indexed grid[x][y] (x across), and `Problem.to_dict`
    stores `.tolist()` of them, so its first index runs along ARC's columns."""
    return np.array(grid).T.tolist()


def write_barc(path: Path, problems: list[tuple[int, list[str]]], seed: int = 0) -> Path:
    """BARC's generated-problems JSONL: {"source", "examples": [[in, out], ...], "seeds", "source_uid"},
    each grid stored as BARC stores it (`barc_stored`): the reader gives back the grids drawn here."""
    rng = np.random.default_rng(seed)
    lines = []
    for n, seeds in problems:
        lines.append(json.dumps({"source": "def main(input_grid):\n    return input_grid\n",
                                 "examples": [[barc_stored(_grid(rng)), barc_stored(_grid(rng))] for _ in range(n)],
                                 "seeds": seeds, "source_uid": "x"}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _load(specs, **kw):
    return load_sources(specs, load=loader(GeneratedSourceConfig(**kw), 42))[0]


def _key(a, b):
    return a.tobytes() + bytes(a.shape) + b"|" + b.tobytes() + bytes(b.shape)


def test_rearc_files_become_tasks_of_the_asked_size_keeping_every_pair(tmp_path):
    root = write_rearc(tmp_path / "re_arc", {"007bbfb7": 10, "00d62c1b": 7})
    tasks = _load([f"rearc:{root}"], pairs_per_task=4, test_pairs=1)
    # 10 -> 4 + 4 + 2 ; 7 -> 4 + 3
    assert sorted(t.name for t in tasks) == ["rearc-007bbfb7-0000", "rearc-007bbfb7-0001", "rearc-007bbfb7-0002",
                                             "rearc-00d62c1b-0000", "rearc-00d62c1b-0001"]
    assert all(len(t.test) == 1 and t.imitates == (t.name.split("-")[1],) and not t.is_eval for t in tasks)
    got = sorted(_key(a, b) for t in tasks for a, b in t.train + t.test)
    want = []
    for key in ("007bbfb7", "00d62c1b"):
        for p in json.loads((root / "tasks" / f"{key}.json").read_text()):
            want.append(_key(np.array(p["input"], np.uint8), np.array(p["output"], np.uint8)))
    assert got == sorted(want)
    # the tasks folder itself works too; examples caps the pairs used; another seed regroups
    capped = _load([f"rearc:{root / 'tasks'}"], pairs_per_task=3, test_pairs=1, examples=6)
    assert sum(len(t.train) + len(t.test) for t in capped) == 12
    other = load_sources([f"rearc:{root}"], load=loader(GeneratedSourceConfig(), 43))[0]
    assert [_key(*t.test[0]) for t in other] != [_key(*t.test[0]) for t in tasks]


def test_arcgen_lists_and_task_dicts_and_barc_jsonl(tmp_path):
    rng = np.random.default_rng(1)
    gen = tmp_path / "arcgen"
    gen.mkdir()
    (gen / "1e0a9b12.json").write_text(json.dumps(_pairs(rng, 6)))  # 4 + 2
    (gen / "task002.json").write_text(json.dumps({"train": _pairs(rng, 3), "test": _pairs(rng, 1)}))
    golf = {"train": _pairs(rng, 2), "test": _pairs(rng, 1), "arc-gen": _pairs(rng, 4)}  # NeuroGolf's packing
    (gen / "task003.json").write_text(json.dumps(golf))
    printed = _pairs(rng, 3)  # `python3 arc_gen.py generate 0d3d703e 3 > 0d3d703e.json`: print(list) -> repr
    (gen / "0d3d703e.json").write_text(str(printed) + "\n")
    barc = write_barc(tmp_path / "barc" / "data_100k.jsonl",
                      [(6, ["6e82a1ae.py", "a5f85a15_variant.py", "make a pattern"]), (1, []), (2, ["d4a91cb9.py"])])
    tasks = _load([f"arcgen:{gen}", f"barc:{barc}"], pairs_per_task=4, test_pairs=1)
    names = sorted(t.name for t in tasks)
    assert names == ["arcgen-0d3d703e-0000", "arcgen-1e0a9b12-0000", "arcgen-1e0a9b12-0001", "arcgen-task002-0000",
                     "arcgen-task003-0000",
                     "barc-data_100k-000001-0000", "barc-data_100k-000001-0001", "barc-data_100k-000003-0000"]
    by = {t.name: t for t in tasks}
    assert by["barc-data_100k-000001-0000"].imitates == ("6e82a1ae", "a5f85a15")
    assert by["barc-data_100k-000003-0000"].imitates == ("d4a91cb9",)
    assert len(by["arcgen-1e0a9b12-0001"].train) == 1 and len(by["arcgen-task002-0000"].train) == 3
    want = sorted(_key(np.array(p["input"], np.uint8), np.array(p["output"], np.uint8)) for p in golf["arc-gen"])
    assert sorted(_key(a, b) for a, b in by["arcgen-task003-0000"].train + by["arcgen-task003-0000"].test) == want
    want = sorted(_key(np.array(p["input"], np.uint8), np.array(p["output"], np.uint8)) for p in printed)
    assert sorted(_key(a, b) for a, b in by["arcgen-0d3d703e-0000"].train + by["arcgen-0d3d703e-0000"].test) == want
    assert by["arcgen-0d3d703e-0000"].imitates == ("0d3d703e",)
    assert all(t.train and t.test for t in tasks)


def test_a_held_out_task_takes_its_imitations_out_of_pretraining(tmp_path, capsys):
    subsets = synthetic_tasks()
    subsets["evaluation"] = {"aaaaaaaa": subsets["evaluation"]["ev00"], "bbbbbbbb": subsets["evaluation"]["ev01"]}
    raw = write_layout(tmp_path / "raw", {"training": {"tr00": subsets["training"]["tr00"]},
                                          "evaluation": subsets["evaluation"]})
    rearc = write_rearc(tmp_path / "re_arc", {"aaaaaaaa": 8, "cccccccc": 8})
    build(BuildConfig(sources=[str(raw), f"rearc:{rearc}"], num_aug=1, progress=False, output_dir=str(tmp_path / "pre"),
                      holdout_tasks=["aaaaaaaa"], holdout_dir=str(tmp_path / "unseen")))
    assert "2 generated task(s) imitating a held-out task left out" in capsys.readouterr().out
    kept = {n.split("_t")[0] for n in json.loads((tmp_path / "pre" / "identifiers.json").read_text())[1:]}
    assert kept == {"tr00", "bbbbbbbb", "rearc-cccccccc-0000", "rearc-cccccccc-0001"}
    held = {n.split("_t")[0] for n in json.loads((tmp_path / "unseen" / "identifiers.json").read_text())[1:]}
    assert held == {"aaaaaaaa"}
    manifest = json.loads((tmp_path / "pre" / "manifest.json").read_text())
    assert manifest["task_split"]["imitations_left_out"] == 2
    assert manifest["sources"][1]["kind"] == "rearc" and manifest["options"]["generated"]["pairs_per_task"] == 4


def test_cli_build_is_reproducible_and_groups_by_option(tmp_path):
    root = write_rearc(tmp_path / "re_arc", {"007bbfb7": 9, "00d62c1b": 9})
    barc = write_barc(tmp_path / "b.jsonl", [(6, ["007bbfb7.py"])])
    args = [f"sources=[rearc:{root},barc:{barc}]", "num_aug=2", "progress=false", "generated.pairs_per_task=3"]
    assert main(["build-arc", *args, f"output_dir={tmp_path / 'a'}"]) == 0
    assert main(["build-arc", *args, f"output_dir={tmp_path / 'b'}"]) == 0
    for rel in ("train/all__inputs.npy", "train/all__labels.npy", "identifiers.json"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    names = json.loads((tmp_path / "a" / "identifiers.json").read_text())
    assert sum("_t" not in n for n in names[1:]) == 3 + 3 + 2  # 9 pairs / 3 per task twice, 6 / 3
    assert main(["viz-arc", f"sources=[rearc:{root},barc:{barc}]", "max_tasks=3", f"output_dir={tmp_path / 'viz'}"]) == 0
    assert len(list((tmp_path / "viz").glob("rearc-*.png"))) == 3


def _variants(rng):
    pairs = _pairs(rng, 4)
    yield json.dumps(pairs)
    yield json.dumps(pairs, indent=2)
    yield json.dumps(pairs, separators=(",", ":"))
    yield "\n [ " + ",\t".join(json.dumps({"output": p["output"], "input": p["input"]}) for p in pairs) + " ]\r\n"


def test_the_scanner_equals_json_and_parse_grid_on_clean_files():
    rng = np.random.default_rng(3)
    for _ in range(20):
        for text in _variants(rng):
            fast = scan_file(text.encode())
            assert fast is not None, text[:80]
            slow = _pairs_slow(json.loads(text), "f", "t", "error", [])
            unit = Packed(*fast)
            got = PackedPairs(unit, tuple(range(unit.num_pairs)))
            assert [_key(a, b) for a, b in got] == [_key(a, b) for a, b in slow] and got == slow


BAD = [
    ('[{"input": [[1, 2], [3]], "output": [[1]]}]', r"entry 0\.input: rows of unequal length"),
    ('[{"input": [[1]], "output": [[10]]}]', r"entry 0\.output: value 10 at \(0,0\) is outside 0\.\.9"),
    ('[{"input": [[1.0]], "output": [[1]]}]', r"entry 0\.input: value 1\.0 at \(0,0\) is not an integer"),
    ('[{"input": [[true]], "output": [[1]]}]', r"entry 0\.input: value True at \(0,0\) is not an integer"),
    ('[{"input": [[1]], "output": [[1]]}, {"input": [[1]]}]', r"entry 1: not an \{\"input\", \"output\"\} pair"),
    ('[{"input": [], "output": [[1]]}]', r"entry 0\.input: empty grid"),
    ('[{"input": [[1]], "output": [[1' + ', 1' * 30 + ']]}]', r"entry 0\.output: grid is 1x31, a side is over 30"),
    ('{"a": 1}', r"not a non-empty JSON list"),
    ('[{"input": [[1]], "output": [[1]]}', r"invalid JSON"),
]


@pytest.mark.parametrize(("text", "match"), BAD)
def test_malformed_files_are_one_line_errors_naming_file_and_entry(tmp_path, capsys, text, match):
    assert scan_file(text.encode()) is None
    root = write_rearc(tmp_path / "re_arc", {"007bbfb7": 3})
    (root / "tasks" / "0a1b2c3d.json").write_text(text)
    with pytest.raises(DatasetError, match=rf"re_arc/tasks/0a1b2c3d\.json: task 0a1b2c3d: .*{match}"):
        _load([f"rearc:{root}"], oversize="error")
    rc = main(["build-arc", f"sources=[rearc:{root}]", "progress=false", "generated.oversize=error",
               f"output_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "0a1b2c3d.json" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_barc_errors_name_the_line_and_oversize_can_be_skipped(tmp_path):
    barc = write_barc(tmp_path / "b.jsonl", [(3, [])])
    with open(barc, "a") as f:
        f.write("{not json\n")
    with pytest.raises(DatasetError, match=r"b\.jsonl: line 2: invalid JSON"):
        _load([f"barc:{barc}"])
    big = [[1] * 31]
    barc.write_text(json.dumps({"examples": [[[[1]], [[2]]], [big, [[1]]], [[[3]], [[4]]]], "seeds": []}) + "\n")
    with pytest.raises(ArcError, match=r"b\.jsonl: task b-000001: entry 1\.input: grid is 1x31"):
        _load([f"barc:{barc}"], oversize="error")
    tasks = _load([f"barc:{barc}"], pairs_per_task=2)  # the default skips it
    assert len(tasks) == 1 and len(tasks[0].train) == 1


def test_a_source_whose_every_pair_is_oversize_says_so(tmp_path, capsys):
    """Every pair over 30: `no task made` blamed the units' sizes alone (new-user audit); the line now names
    the pairs generated.oversize=skip dropped, for BARC and RE-ARC, and nothing is written."""
    big = [[1] * 31]
    barc = tmp_path / "b.jsonl"
    barc.write_text(json.dumps({"examples": [[big, [[1]]]] * 6, "seeds": []}) + "\n")
    root = write_rearc(tmp_path / "re_arc", {"007bbfb7": 1})
    (root / "tasks" / "007bbfb7.json").write_text(json.dumps([{"input": [[2]], "output": big}] * 6))
    for spec, where in ((f"barc:{barc}", "b.jsonl: task b-000001: 6 pair(s)"),
                        (f"rearc:{root}", "007bbfb7.json: task 007bbfb7: 6 pair(s)")):
        rc = main(["build-arc", f"sources=[{spec}]", "progress=false", f"output_dir={tmp_path / 'out'}"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert "no task made" in err and "generated.oversize=skip" in err and where in err, err
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize(("kw", "match"), [({"pairs_per_task": 1}, "need 1 <= test_pairs < pairs_per_task"),
                                           ({"examples": -1}, "examples=-1"), ({"oversize": "drop"}, "oversize='drop'")])
def test_bad_grouping_options(kw, match):
    with pytest.raises(ArcError, match=match):
        GeneratedSourceConfig(**kw)


def test_missing_paths_are_one_line_errors(tmp_path):
    for spec, match in ((f"rearc:{tmp_path / 'none'}", "not a folder"), (f"barc:{tmp_path / 'x.jsonl'}", "no such file"),
                        ("rearc:", "give a path after 'rearc:'")):
        with pytest.raises(ArcError, match=match):
            _load([spec])


def test_barc_grids_are_read_back_in_arcs_rows(tmp_path):
    """BARC's arrays are indexed grid[x][y] (its viewer, `seeds/common.py` `show_colored_grid`, prints
    screen row y as grid[x][y] for each x) and written with `.tolist()`; its seed for ARC task
    017c7c7b makes 3x6 inputs (`np.zeros((3, 6))`) where the task's are 6 rows of 3. A line holding
    that task's pairs as BARC stores them reads back as the task itself, and as BARC's viewer shows it."""
    from arc_data.arc.sources import load_source

    real = {t.name: t for t in load_source("arc1")[0]}["017c7c7b"]
    pairs = list(real.train) + list(real.test)
    line = {"source": "...", "seeds": ["017c7c7b.py"],
            "examples": [[barc_stored(a.tolist()), barc_stored(b.tolist())] for a, b in pairs]}
    assert np.array(line["examples"][0][0]).shape == (3, 6)  # as BARC's seed draws it
    (tmp_path / "b.jsonl").write_text(json.dumps(line) + "\n")
    tasks = _load([f"barc:{tmp_path / 'b.jsonl'}"], pairs_per_task=len(pairs), examples=0)
    assert len(tasks) == 1 and tasks[0].imitates == ("017c7c7b",)
    got = sorted(_key(a, b) for a, b in tasks[0].train + tasks[0].test)
    assert got == sorted(_key(a, b) for a, b in pairs)  # ARC's own grids: 6x3 inputs, 9x3 outputs

    def as_barc_shows_it(stored):  # common.py: for y in range(shape[1]): for x in range(shape[0]): grid[x, y]
        return [[stored[x][y] for x in range(len(stored))] for y in range(len(stored[0]))]

    shown = sorted(_key(np.array(as_barc_shows_it(a), np.uint8), np.array(as_barc_shows_it(b), np.uint8))
                   for a, b in line["examples"])
    assert got == shown


def _hostile_entries(folder: Path, suffix: str) -> dict[str, str]:
    """A FIFO, a link to /dev/zero, a link to itself, a folder and a hidden file named like data
    files: name -> why the listing skips it (as ARC task folders say it)."""
    import os

    os.mkfifo(folder / f"fifo{suffix}")  # would block a reader forever
    (folder / f"zero{suffix}").symlink_to("/dev/zero")  # would never end
    (folder / f"loop{suffix}").symlink_to(folder / f"loop{suffix}")
    (folder / f"dir{suffix}").mkdir()
    (folder / f".hidden{suffix}").write_text("[]")
    return {f"fifo{suffix}": "not a regular file", f"zero{suffix}": "not a regular file",
            f"loop{suffix}": "not a regular file", f"dir{suffix}": "not a regular file",
            f".hidden{suffix}": "a hidden file"}


def test_generated_folders_name_what_they_skip_as_task_folders_do(tmp_path, capsys):
    """Issue 60: a FIFO, a /dev/zero link or a self-referencing link inside a rearc:/arcgen:/barc:
    folder was skipped silently; now each is named on stderr and in the manifest's `skipped`."""
    rearc = write_rearc(tmp_path / "re_arc", {"007bbfb7": 5})
    arcgen = tmp_path / "arcgen"
    arcgen.mkdir()
    (arcgen / "1e0a9b12.json").write_text(json.dumps(_pairs(np.random.default_rng(2), 5)))
    barc = write_barc(tmp_path / "barc" / "a.jsonl", [(5, ["007bbfb7.py"])]).parent
    raw = write_layout(tmp_path / "raw", {"training": {"tr00": synthetic_tasks()["training"]["tr00"]}})
    want = {}
    for folder, suffix in ((rearc / "tasks", ".json"), (arcgen, ".json"), (barc, ".jsonl"), (raw / "training", ".json")):
        want.update({str(folder / name): why for name, why in _hostile_entries(folder, suffix).items()})
    specs = [f"rearc:{rearc}", f"arcgen:{arcgen}", f"barc:{barc}", str(raw)]  # an ARC task folder too (a link
    # to itself was a traceback there)
    out = tmp_path / "ds"
    assert main(["build-arc", f"sources=[{','.join(specs)}]", f"output_dir={out}", "num_aug=1", "progress=false"]) == 0
    err = capsys.readouterr().err
    for path, why in want.items():
        assert f"build-arc: skipped {path}: {why}" in err, path
    manifest = json.loads((out / "manifest.json").read_text())
    named = [n for s in manifest["sources"] for n in s["skipped"] if "left over" not in n]
    assert sorted(named) == sorted(f"{path}: {why}" for path, why in want.items())
    names = {n.split("_t")[0] for n in json.loads((out / "identifiers.json").read_text())[1:]}
    assert names == {"rearc-007bbfb7-0000", "arcgen-1e0a9b12-0000", "barc-a-000001-0000", "tr00"}
    # a barc: file that is not a regular file is refused in one line, never opened
    for bad in ("fifo.jsonl", "zero.jsonl", "loop.jsonl"):
        with pytest.raises(ArcError, match="not a regular file or a folder"):
            _load([f"barc:{barc / bad}"])


def test_packed_pairs_pack_and_slice_like_lists(tmp_path):
    """Generated tasks hold PackedPairs (views made on reading); the plan packs them through their
    bulk methods: the same arrays as from plain lists of pairs, and slicing works as for lists."""
    import dataclasses

    from arc_data.arc.plan import pack_grids
    from arc_data.arc.tasksplit import as_evaluation, validation_tasks

    tasks = _load([f"rearc:{write_rearc(tmp_path / 're_arc', {'007bbfb7': 11, '00d62c1b': 6})}"], pairs_per_task=5)
    lists = [dataclasses.replace(t, train=list(t.train), test=list(t.test)) for t in tasks]
    (ga, pa, da), (gb, pb, db) = pack_grids(tasks), pack_grids(lists)
    for x, y in ((ga.cells, gb.cells), (ga.offset, gb.offset), (ga.shape, gb.shape), (pa, pb), (da, db)):
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()
    val, _ = validation_tasks(as_evaluation(tasks))
    t = tasks[0]
    assert val[0].train == t.train[:-1] and _key(*val[0].test[0]) == _key(*t.train[-1]) and len(val[0].train) == 3


@pytest.mark.parametrize("grid", [[[1, 2], [3, 4]], [[0] * 30] * 30, [[1, 2], [3]], [], [[]], [[1.0]], [[10]], [[-1]],
                                  [["1"]], [[None]], [[1, [2]]], [[2**70]], [[1]] * 31, [[1] * 31], "x", [[1], "ab"],
                                  [[True]], [[True, 2]]])
def test_the_quick_grid_path_takes_only_what_parse_grid_accepts_identically(grid):
    """On JSON without true/false, clean grids skip parse_grid's per-cell scan; anything else goes
    to parse_grid (its message). [[True, 2]] would pass numpy, which is why bools are ruled out first."""
    from arc_data.arc.sources import parse_grid, quick_grid

    quick = quick_grid(grid)
    try:
        ref = parse_grid(grid, "f", "t", "w")
    except ArcError:
        ref = None
    if quick is not None and grid != [[True, 2]]:
        assert ref is not None and quick.dtype == ref.dtype and quick.shape == ref.shape and (quick == ref).all()
    assert (quick is not None) == (grid in ([[1, 2], [3, 4]], [[0] * 30] * 30, [[True, 2]]))
