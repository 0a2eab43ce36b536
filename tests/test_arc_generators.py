"""`generate-arc` and its families: every family at every difficulty draws valid, reproducible,
non-degenerate tasks whose pairs follow the rule (checked here by properties the rule's own code
does not use); the command writes the same bytes for the same options, held-out families go to
evaluation/, and build-arc / viz-arc read the result."""

import json
from pathlib import Path

import numpy as np
import pytest

from arc_data.errors import ArcError, DatasetError
from arc_data.generators.base import DIFFICULTIES, GenerationError, label_components
from arc_data.generators.generate import GenerateArcConfig, generate
from arc_data.generators.registry import FAMILIES, check_task, make_task, task_rng
from hrm_deeploop.cli import main

TASKS = 4  # per family and difficulty


def draw(name: str, difficulty: int, i: int, demos: int = 3, tests: int = 1):
    return make_task(FAMILIES[name], f"t{i}", task_rng(7, name, i), difficulty, demos, tests)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_draws_valid_reproducible_tasks(name, difficulty):
    for i in range(TASKS):
        t = draw(name, difficulty, i)
        again = draw(name, difficulty, i)
        assert t.params == again.params
        pairs = t.train + t.test
        assert len(t.train) == 3 and len(t.test) == 1
        inputs = set()
        for (a, b), (a2, b2) in zip(pairs, again.train + again.test):
            assert a.tobytes() == a2.tobytes() and b.tobytes() == b2.tobytes() and a.shape == a2.shape
            for g in (a, b):
                assert g.dtype == np.uint8 and g.ndim == 2 and 1 <= min(g.shape) and max(g.shape) <= 30
                assert g.max() <= 9
            assert a.shape != b.shape or (a != b).any(), "output == input"
            inputs.add(a.tobytes() + bytes(a.shape))
        assert len(inputs) == len(pairs), "an input twice"
        json.dumps(t.params)  # parameters are plain JSON
        for a, b in pairs:
            PROPERTIES[name](t.params, a, b)


def _sub(big: np.ndarray, small: np.ndarray) -> bool:
    h, w = small.shape
    return any((big[r:r + h, c:c + w] == small).all() for r in range(big.shape[0] - h + 1)
               for c in range(big.shape[1] - w + 1))


def _dihedral(p, a, b):
    assert any(b.shape == t.shape and (b == t).all() for t in
               (np.rot90(a, 1), np.rot90(a, 2), np.rot90(a, 3), a[::-1], a[:, ::-1], a.T, np.rot90(a, 2).T))


def _colour_map(p, a, b):
    assert a.shape == b.shape
    m = dict(map(tuple, p["map"]))
    assert all(b[i, j] == m.get(int(a[i, j]), a[i, j]) for i, j in np.ndindex(a.shape))


def _tile(p, a, b):
    ry, rx = p["reps"]
    assert b.shape == (ry * a.shape[0], rx * a.shape[1]) and (b[:a.shape[0], :a.shape[1]] == a).all()


def _scale(p, a, b):
    k = p["k"]
    assert b.shape == (k * a.shape[0], k * a.shape[1]) and (b[::k, ::k] == a).all() and (b[k - 1::k, k - 1::k] == a).all()


def _symmetry(p, a, b):
    assert (b == p["hole"]).sum() == 0 and ((a == b) | (a == p["hole"])).all()
    sym = p["symmetry"]
    if sym in ("flip_lr", "both"):
        assert (b == b[:, ::-1]).all()
    if sym in ("flip_ud", "both"):
        assert (b == b[::-1]).all()
    if sym == "rot180":
        assert (b == np.rot90(b, 2)).all()


def _pattern(p, a, b):
    assert a.shape == b.shape and (b != 0).all() and ((a == 0) | (a == b)).all()


def _gravity(p, a, b):
    assert a.shape == b.shape and np.bincount(a.ravel(), minlength=10).tolist() == np.bincount(b.ravel(), minlength=10).tolist()
    axis = 0 if p["direction"] in ("down", "up") else 1
    # every line keeps its cells in order, packed against one edge
    for i in range(a.shape[1 - axis]):
        la, lb = (a[:, i], b[:, i]) if axis == 0 else (a[i], b[i])
        assert la[la != 0].tolist() == lb[lb != 0].tolist()
        nz = np.nonzero(lb)[0]
        if len(nz):
            edge = p["direction"] in ("down", "right")
            assert (nz == (np.arange(len(lb) - len(nz), len(lb)) if edge else np.arange(len(nz)))).all()


def _move(p, a, b):
    dy, dx = p["offset"]
    ys, xs = np.nonzero(a == p["colour"])
    assert (b[ys + dy, xs + dx] == p["colour"]).all() and (b == p["colour"]).sum() == len(ys)
    keep = (a != 0) & (a != p["colour"])
    assert (b[keep] == a[keep]).all()


def _copy(p, a, b):
    dy, dx = p["offset"]
    ys, xs = np.nonzero(a == p["colour"])
    assert ((a == 0) | (b == a)).all() and (b[ys + dy, xs + dx] == p["colour"]).all()


def _recolour(p, a, b):
    assert ((a == 0) == (b == 0)).all() and set(np.unique(b[b != p["colour"]])) <= {0, p["largest"], p["smallest"]}
    assert (b == p["largest"]).sum() > (b == p["smallest"]).sum()


def _crop(p, a, b):
    assert _sub(a, b) and label_components(a).max() >= 2


def _hollow(p, a, b):
    assert ((b == a) | (b == 0)).all() and (b != 0).sum() < (a != 0).sum()


def _fill(p, a, b):
    assert ((b == a) | ((a == 0) & (b == p["fill"]))).all()
    assert (b[0] != p["fill"]).all() and (b[-1] != p["fill"]).all()  # the border is never enclosed


def _count(p, a, b):
    assert b.shape in ((1, b.size), (b.size, 1)) and (b == p["paint"]).all()


def _majority(p, a, b):
    c = int(b[0, 0])
    counts = np.bincount(a.ravel(), minlength=10)
    assert (b == c).all() and b.shape == (p["size"],) * 2 and counts[c] == counts[1:].max()


def _lines(p, a, b):
    assert ((a == 0) | (b == a)).all() and (b != 0).sum() > (a != 0).sum()


PROPERTIES = {"dihedral": _dihedral, "colour_map": _colour_map, "tile": _tile, "scale_up": _scale,
              "symmetry_complete": _symmetry, "pattern_extend": _pattern, "gravity": _gravity,
              "move_objects": _move, "copy_objects": _copy, "recolour_by_size": _recolour, "crop_largest": _crop,
              "hollow": _hollow, "flood_fill": _fill, "count_objects": _count, "majority_colour": _majority,
              "draw_lines": _lines}


def test_every_family_has_properties_and_there_are_at_least_twelve():
    assert set(PROPERTIES) == set(FAMILIES) and len(FAMILIES) >= 12


def test_check_task_refuses_a_pair_off_the_rule_or_degenerate():
    t = draw("gravity", 1, 0)
    check_task(t)
    a, b = t.train[0]
    bad = b.copy()
    bad[0, 0] = (bad[0, 0] + 1) % 10
    t.train[0] = (a, bad)
    with pytest.raises(GenerationError, match=r"gravity: task t0: pair 0: the output is not the rule's output"):
        check_task(t)
    t.train[0] = (a, b)
    t.test[0] = t.train[1]
    with pytest.raises(GenerationError, match="the same input twice"):
        check_task(t)


def _cfg(tmp_path: Path, name: str, **kw) -> GenerateArcConfig:
    return GenerateArcConfig(output_dir=str(tmp_path / name), **({"tasks_per_family": 2, "progress": False} | kw))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_generate_arc_same_options_same_bytes_and_held_out_families(tmp_path, capsys):
    held = ["gravity", "tile"]
    generate(_cfg(tmp_path, "a", holdout_families=held))
    assert main(["generate-arc", f"output_dir={tmp_path / 'b'}", "tasks_per_family=2", "progress=false",
                 "holdout_families=[gravity,tile]"]) == 0
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b
    generate(_cfg(tmp_path, "c", holdout_families=held, seed=1))
    assert {k: v for k, v in _tree(tmp_path / "c").items() if k != "generated.json"}.values() != \
        {k: v for k, v in a.items() if k != "generated.json"}.values()
    ev = sorted(p.name for p in (tmp_path / "a" / "evaluation").iterdir())
    assert ev == [f"g0-{f}-{i:05d}.json" for f in held for i in range(2)]
    manifest = json.loads(a["generated.json"])
    assert {t["family"] for t in manifest["tasks"] if t["split"] == "evaluation"} == set(held)
    task = json.loads(a["training/g0-dihedral-00000.json"])
    assert task["family"] == "dihedral" and len(task["test"]) == 1 and 2 <= len(task["train"]) <= 4


def test_build_arc_and_viz_arc_read_generated_tasks(tmp_path):
    generate(_cfg(tmp_path, "gen", families=["flood_fill", "hollow", "gravity"], holdout_families=["gravity"]))
    generate(_cfg(tmp_path, "kag", families=["scale_up"], layout="kaggle", seed=3))
    rc = main(["build-arc", f"sources=[{tmp_path / 'gen'},{tmp_path / 'kag' / 'generated_training_challenges.json'}]",
               "num_aug=1", "progress=false", f"output_dir={tmp_path / 'ds'}", "holdout_pool=evaluation",
               "holdout_fraction=1.0", f"holdout_dir={tmp_path / 'unseen'}"])
    assert rc == 0
    names = json.loads((tmp_path / "unseen" / "identifiers.json").read_text())
    assert {n.split("_t")[0] for n in names[1:]} == {"g0-gravity-00000", "g0-gravity-00001"}
    kept = json.loads((tmp_path / "ds" / "identifiers.json").read_text())
    assert not any("gravity" in n for n in kept) and any(n.startswith("g3-scale_up-") for n in kept)
    assert main(["viz-arc", f"sources=[{tmp_path / 'gen'}]", "max_tasks=2", f"output_dir={tmp_path / 'viz'}"]) == 0
    assert len(list((tmp_path / "viz").glob("*.png"))) == 2


@pytest.mark.parametrize(("kw", "match"), [
    ({"families": ["nope"]}, "family 'nope': unknown"),
    ({"families": ["tile"], "holdout_families": ["gravity"]}, "holdout_families: gravity is not among"),
    ({"min_demos": 3, "max_demos": 2}, "min_demos=3, max_demos=2"),
    ({"difficulty": 4}, "difficulty=4"),
    ({"layout": "zip"}, "layout='zip'"),
    ({"tasks_per_family": 0}, "tasks_per_family=0"),
    ({"max_side": 31}, "max_side=31: must be in 1..30"),
])
def test_bad_options_are_one_line_errors(tmp_path, kw, match):
    with pytest.raises(ArcError, match=match):
        _cfg(tmp_path, "x", **kw)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_max_side_bounds_every_grid_and_leaves_the_default_unchanged(name):
    """max_side=10 (difficulty 2 draws sides up to 14; tile and scale_up outputs are larger): every grid
    of every task within 10; the default draws exactly what it drew before (no pair is over 30)."""
    for i in range(3):
        t = make_task(FAMILIES[name], f"t{i}", task_rng(3, name, i), 2, 3, 1, max_side=10)
        check_task(t)
        assert all(max(g.shape) <= 10 for pair in t.train + t.test for g in pair)
        a, b = draw(name, 2, i), make_task(FAMILIES[name], f"t{i}", task_rng(7, name, i), 2, 3, 1, max_side=30)
        assert [(x.tobytes(), y.tobytes()) for x, y in a.train + a.test] == \
            [(x.tobytes(), y.tobytes()) for x, y in b.train + b.test]


def test_max_side_too_small_for_a_family_is_one_line(tmp_path):
    with pytest.raises(GenerationError, match=r"family scale_up: no valid task .*sides <= 1\).*raise max_side"):
        make_task(FAMILIES["scale_up"], "t", task_rng(0, "scale_up", 0), 1, 2, 1, max_side=1)


def test_a_request_too_large_is_refused_before_drawing(tmp_path, capsys):
    with pytest.raises(DatasetError, match=r"tasks \(.* pairs at most\): needs about .* of memory.*lower tasks_per_family"):
        generate(_cfg(tmp_path, "big", tasks_per_family=10**9))
    assert not (tmp_path / "big").exists() and not list(tmp_path.iterdir())


def test_same_bytes_across_processes_and_hash_seeds(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(root))
        subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "generate-arc", f"output_dir={tmp_path / seed}",
                        "families=[colour_map,recolour_by_size,flood_fill]", "tasks_per_family=3", "progress=false",
                        "holdout_families=[flood_fill]"], env=env, check=True, capture_output=True)
    assert _tree(tmp_path / "1") == _tree(tmp_path / "2")


def test_a_family_that_cannot_fit_names_only_settings_generate_arc_has(tmp_path, capsys):
    """The hint of `no valid task` named `num_demos`, a key generate-arc does not take (new-user audit):
    every setting the line tells the user to change is a field of GenerateArcConfig."""
    import dataclasses
    import re

    from hrm_deeploop.cli import main

    assert main(["generate-arc", "families=[tile]", "max_side=2", f"output_dir={tmp_path / 'g'}"]) == 2
    err = capsys.readouterr().err.strip()
    hint = err.split("); ", 1)[1]
    named = set(re.findall(r"[a-z]+_[a-z_]+|difficulty", hint))
    assert named and named <= {f.name for f in dataclasses.fields(GenerateArcConfig)}, err
    assert not (tmp_path / "g").exists()
