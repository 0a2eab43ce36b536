"""Builder: splits, CSR arrays, metadata, augmentation invariants, determinism, compact == materialised."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.arc.build import BuildConfig, build
from arc_data.arc.plan import TRIAL_FACTOR, make_plan, name_of
from arc_data.arc.sources import load_sources
from arc_data.dataset import load_augmentations, load_identifiers, open_split
from arc_data.errors import DatasetError
from tests.arc_synth import synthetic_tasks, write_kaggle, write_layout

NUM_AUG = 10
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return write_layout(tmp_path_factory.mktemp("src") / "data", synthetic_tasks())


def _build(src: Path, out: Path, **kw) -> Path:
    cfg = BuildConfig(sources=[str(src)], output_dir=str(out), num_aug=NUM_AUG, seed=7, progress=False, **kw)
    build(cfg)
    return out


@pytest.fixture(scope="module")
def built(src, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("out")
    return _build(src, root / "mat"), _build(src, root / "compact", materialize=False)


def _files(root: Path, skip=(fmt.MANIFEST_FILE,)) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in skip}


def test_layout_and_metadata(built):
    mat, _ = built
    assert (mat / fmt.IDENTIFIERS_FILE).is_file() and (mat / fmt.AUGMENTATIONS_FILE).is_file()
    ids = load_identifiers(mat)
    for split in fmt.SPLITS:
        sp = open_split(mat, split)
        m = sp.meta
        assert m.num_puzzle_identifiers == len(ids)
        assert (m.pad_id, m.ignore_label_id, m.blank_identifier_id) == (0, 0, 0)
        assert (m.vocab_size, m.seq_len, m.sets) == (12, 900, ("all",))
        assert m.total_groups == sp.num_groups and m.total_puzzles == sp.num_puzzles
        assert m.mean_puzzle_examples == pytest.approx(sp.num_examples / sp.num_puzzles)
        pi, gi = sp.puzzle_indices, sp.group_indices
        assert pi.dtype == np.int32 and gi.dtype == np.int32 and sp.puzzle_identifiers.dtype == np.int32
        assert pi[0] == 0 and pi[-1] == sp.num_examples and (np.diff(pi) > 0).all()
        assert gi[0] == 0 and gi[-1] == sp.num_puzzles and (np.diff(gi) > 0).all()
        x = np.load(mat / split / fmt.INPUTS_FILE)
        assert x.dtype == np.uint8 and x.shape == (sp.num_examples, 900) and x.max() <= 11
    train, test = open_split(mat, "train"), open_split(mat, "test")
    assert train.num_groups == 7 + 5 + 3 and test.num_groups == 5  # all tasks / evaluation tasks
    assert set(test.puzzle_identifiers) <= set(train.puzzle_identifiers)  # test ids are train ids
    manifest = json.loads((mat / fmt.MANIFEST_FILE).read_text())
    assert manifest["layout"] == "materialized" and manifest["options"]["seed"] == 7
    assert len(manifest["sources"][0]["sha256"]) == 64 and manifest["package"]["version"]


def test_splits_hold_the_right_pairs(built, src):
    """Evaluation test pairs only in test; everything else only in train; test never translated."""
    mat, _ = built
    tasks, _ = load_sources([str(src)])
    by_name = {t.name: t for t in tasks}
    aug = load_augmentations(mat)
    for split in fmt.SPLITS:
        sp = open_split(mat, split)
        inputs, labels = sp.examples(np.arange(sp.num_examples))
        for p, pid in enumerate(sp.puzzle_identifiers):
            task = by_name[str(aug.task_names[aug.base_task[pid]])]
            if split == "test":
                pairs = task.test
            else:
                pairs = task.train if task.is_eval else task.train + task.test
            lo, hi = sp.puzzle_indices[p], sp.puzzle_indices[p + 1]
            assert hi - lo == len(pairs)
            tid, cmap = int(aug.dihedral[pid]), aug.colour_map[pid]
            n_origin = 0
            for k, (a, b) in enumerate(pairs):
                ea, eb = fmt.augment_grid(a, tid, cmap), fmt.augment_grid(b, tid, cmap)
                row_in = inputs[lo + k].reshape(30, 30)
                r, c = np.argwhere(row_in >= 2).min(axis=0)
                n_origin += (r, c) == (0, 0)
                if split == "test":
                    assert (r, c) == (0, 0)
                    assert np.array_equal(fmt.crop(inputs[lo + k]), ea)
                assert np.array_equal(inputs[lo + k], fmt.encode_grid(ea, r, c))
                assert np.array_equal(labels[lo + k], fmt.encode_grid(eb, r, c))
            assert n_origin >= 1  # one example per puzzle stays untranslated


def test_translation_happens_in_train(built):
    mat, _ = built
    sp = open_split(mat, "train")
    inputs, _ = sp.examples(np.arange(sp.num_examples))
    at_origin = (inputs.reshape(-1, 30, 30)[:, 0, 0] >= 2)
    assert 0.05 < at_origin.mean() < 0.9


def test_augmentation_invariants(built, src):
    mat, _ = built
    ids = load_identifiers(mat)
    aug = load_augmentations(mat)
    assert aug.base_task[0] == -1 and ids[0] == fmt.BLANK_NAME
    assert (aug.colour_map[:, 0] == 0).all()
    assert (np.sort(aug.colour_map[:, 1:], axis=1) == np.arange(1, 10)).all()
    tasks, _ = load_sources([str(src)])
    by_name = {t.name: t for t in tasks}
    train = open_split(mat, "train")
    for g in range(train.num_groups):
        pids = train.puzzle_identifiers[train.group_indices[g]: train.group_indices[g + 1]]
        base = str(aug.task_names[aug.base_task[pids[0]]])
        assert ids[pids[0]] == base and aug.dihedral[pids[0]] == 0
        assert (aug.colour_map[pids[0]] == np.arange(10)).all()
        pattern = re.compile(rf"^{re.escape(base)}_t[0-7]_0[1-9]{{9}}$")
        keys = set()
        task = by_name[base]
        for pid in pids:
            if pid != pids[0]:
                assert pattern.match(ids[pid]), ids[pid]
                assert ids[pid] == fmt.aug_name(base, int(aug.dihedral[pid]), aug.colour_map[pid])
            tid, cmap = int(aug.dihedral[pid]), aug.colour_map[pid]
            key = tuple(sorted(tuple((g.shape, g.tobytes()) for g in (fmt.augment_grid(a, tid, cmap),
                                                                      fmt.augment_grid(b, tid, cmap)))
                               for a, b in task.train + task.test))
            keys.add(key)
        assert len(keys) == len(pids), f"duplicate augmentation in group {base}"
        assert len(pids) <= NUM_AUG + 1
    short = json.loads((mat / fmt.MANIFEST_FILE).read_text())["short_groups"]
    assert short["black1"] == 1  # a 1x1 black task has no distinct augmentation
    assert 1 < short["sym"] < NUM_AUG + 1


def test_trial_budget(src):
    tasks, _ = load_sources([str(src)])
    plan = make_plan(tasks, NUM_AUG, seed=7)
    assert (plan.trials_used <= TRIAL_FACTOR * NUM_AUG).all()
    black = [t.name for t in tasks].index("black1")
    assert plan.trials_used[black] == TRIAL_FACTOR * NUM_AUG  # a short group burns the whole budget
    names = [fmt.BLANK_NAME] + [name_of(plan, i) for i in range(1, plan.num_ids)]
    assert plan.identifiers_json() == (json.dumps(names) + "\n").encode()


def test_compact_equals_materialised(built):
    mat, compact = built
    assert not (compact / "train" / fmt.INPUTS_FILE).exists()
    for split in fmt.SPLITS:
        a, b = open_split(mat, split), open_split(compact, split)
        assert b.layout == "compact" and a.layout == "materialized"
        for arr in ("puzzle_identifiers", "puzzle_indices", "group_indices"):
            assert np.array_equal(getattr(a, arr), getattr(b, arr))
        assert a.meta == b.meta
        idx = np.arange(a.num_examples)
        for x, y in zip(a.examples(idx), b.examples(idx)):
            assert np.array_equal(x, y)
        rnd = np.random.default_rng(0).permutation(a.num_examples)[:17]
        for x, y in zip(a.examples(rnd), b.examples(rnd)):
            assert np.array_equal(x, y)


def test_deterministic_under_shuffled_listing(src, built, tmp_path, monkeypatch):
    """Same seed + files written and listed in another order -> identical bytes."""
    mat, _ = built
    other = write_layout(tmp_path / "src2" / "data", synthetic_tasks(), reverse=True)
    real_iterdir = Path.iterdir
    rng = np.random.default_rng(123)

    def shuffled(self):
        items = list(real_iterdir(self))
        return iter([items[i] for i in rng.permutation(len(items))])

    monkeypatch.setattr(Path, "iterdir", shuffled)
    again = _build(other, tmp_path / "again")
    assert _files(again) == _files(mat)
    m1 = json.loads((mat / fmt.MANIFEST_FILE).read_text())
    m2 = json.loads((again / fmt.MANIFEST_FILE).read_text())
    assert m1["sources"][0]["sha256"] == m2["sources"][0]["sha256"]
    assert m1["counts"] == m2["counts"]


def test_seed_changes_output(src, built, tmp_path):
    mat, _ = built
    cfg = BuildConfig(sources=[str(src)], output_dir=str(tmp_path / "s8"), num_aug=NUM_AUG, seed=8,
                      progress=False, materialize=False)
    build(cfg)
    assert (tmp_path / "s8" / fmt.IDENTIFIERS_FILE).read_bytes() != (mat / fmt.IDENTIFIERS_FILE).read_bytes()


def test_independent_of_python_hash_seed(src, built, tmp_path):
    _, compact = built
    code = ("import sys; from arc_data.arc.build import BuildConfig, build; "
            f"build(BuildConfig(sources=[{str(src)!r}], output_dir=sys.argv[1], num_aug={NUM_AUG}, seed=7, "
            "progress=False, materialize=False))")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "h")], env=env, check=True,
                   capture_output=True)
    assert _files(tmp_path / "h") == _files(compact)


def test_kaggle_source_and_eval_name(tmp_path):
    tasks = synthetic_tasks()
    ev = write_kaggle(tmp_path / "k", "arc-agi_evaluation", tasks["evaluation"])
    tr = write_kaggle(tmp_path / "k", "arc-agi_training", tasks["training"])
    out = tmp_path / "out"
    build(BuildConfig(sources=[str(tr), str(ev)], output_dir=str(out), num_aug=2, progress=False,
                      materialize=False))
    assert open_split(out, "test").num_groups == len(tasks["evaluation"])
    build(BuildConfig(sources=[str(tr), str(ev)], output_dir=str(out), num_aug=2, progress=False,
                      materialize=False, overwrite=True, eval_name="nothing-matches"))
    assert open_split(out, "test").num_groups == 0 and open_split(out, "test").num_examples == 0


def test_overwrite_and_atomic(src, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(DatasetError, match="overwrite=true"):
        _build(src, out)
    # overwrite=true replaces only a folder build-arc wrote: never an arbitrary one
    with pytest.raises(DatasetError, match="was not written by build-arc"):
        _build(src, out, overwrite=True)
    assert (out / "keep.txt").exists()
    (out / "keep.txt").unlink()
    _build(src, out, materialize=True, overwrite=True)  # an empty folder may be written
    _build(src, out, overwrite=True, materialize=False)  # an earlier build is replaced, atomically
    assert (out / fmt.GRIDS_FILE).exists() and not (out / "train" / "all__inputs.npy").exists()
    (out / "extra.txt").write_text("x")  # a file build-arc does not write: the folder is no longer only a build
    with pytest.raises(DatasetError, match=r"holds files build-arc does not write \(extra.txt\)"):
        _build(src, out, overwrite=True)
    (out / "extra.txt").unlink()
    _build(src, out, overwrite=True, materialize=True)
    assert not (out / fmt.GRIDS_FILE).exists() and (out / "train" / "all__inputs.npy").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # no temp folders left


def test_atomic_on_failure(src, tmp_path, monkeypatch):
    import arc_data.arc.build as B

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(B, "encode_split", boom)
    with pytest.raises(KeyboardInterrupt):
        _build(src, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_reader_errors(built, tmp_path):
    mat, _ = built
    with pytest.raises(DatasetError, match="no such dataset"):
        open_split(tmp_path / "nope", "train")
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(mat, broken)
    (broken / "train" / fmt.LABELS_FILE).unlink()
    with pytest.raises(DatasetError, match=re.escape(fmt.LABELS_FILE)):
        open_split(broken, "train")
    p = broken / "test" / fmt.INPUTS_FILE
    p.write_bytes(p.read_bytes()[:1000])
    with pytest.raises(DatasetError, match=re.escape(fmt.INPUTS_FILE)):
        open_split(broken, "test")


def test_bundled_arc1_counts():
    tasks, infos = load_sources(["arc1"])
    assert infos[0].num_tasks == 800 and infos[0].num_eval_tasks == 400
    assert sum(len(t.test) for t in tasks if t.is_eval) == 419


def test_stale_temp_of_killed_build_is_removed(src, tmp_path):
    stale = tmp_path / f".ds.tmp-{2**30 + 7}"  # a pid that cannot be alive
    (stale / "train").mkdir(parents=True)
    _build(src, tmp_path / "ds", materialize=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_arc_data_imports_no_torch():
    code = ("import sys, arc_data.arc.build, arc_data.dataset, arc_data.arc.viz, arc_data.arc.sources; "
            "bad = [m for m in ('torch', 'hrm_deeploop', 'eval') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO)), check=True)


def _reference_augment(task, tids, perms, num_aug):
    """Pure-numpy reference of the trial loop (spec 1.3): content keys instead of hashes."""
    def key(tid, cmap):
        return tuple(sorted(
            tuple((g.shape, g.tobytes()) for g in (fmt.augment_grid(a, tid, cmap), fmt.augment_grid(b, tid, cmap)))
            for a, b in task.train + task.test))

    seen = {key(0, np.arange(10, dtype=np.uint8))}
    accepted = []
    for t in range(len(tids)):
        if len(accepted) == num_aug:
            break
        cmap = np.concatenate([[0], perms[t]]).astype(np.uint8)
        k = key(int(tids[t]), cmap)
        if k not in seen:
            seen.add(k)
            accepted.append(t)
    return accepted


def test_augment_kernel_equals_reference(src):
    from arc_data.arc.kernels import permuted_colours
    from arc_data.arc.plan import TRIAL_FACTOR, augment, draw_dihedrals, pack_grids

    tasks, _ = load_sources([str(src)])
    grids, task_pairs, _ = pack_grids(tasks)
    rng = np.random.default_rng(5)
    tids = draw_dihedrals(rng, len(tasks), TRIAL_FACTOR * NUM_AUG, None)
    perms = permuted_colours(rng, (len(tasks), TRIAL_FACTOR * NUM_AUG))
    acc, n_acc, _ = augment(grids, task_pairs, tids, perms, NUM_AUG)
    for t, task in enumerate(tasks):
        ref = _reference_augment(task, tids[t], perms[t], NUM_AUG)
        assert acc[t, : n_acc[t]].tolist() == ref, task.name


def _child_examples(args):
    data_dir, split, idx = args
    return open_split(data_dir, split).examples(np.asarray(idx))


def test_compact_reader_in_forked_workers(built):
    """DataLoader-style: the parent already ran the parallel build kernels, then forks workers."""
    import multiprocessing as mp

    mat, compact = built
    idx = [[0, 3, 5], [1, 2]]
    with mp.get_context("fork").Pool(2) as pool:
        got = pool.map(_child_examples, [(str(compact), "train", i) for i in idx])
    for i, (x, y) in zip(idx, got):
        ref = open_split(mat, "train").examples(np.asarray(i))
        assert np.array_equal(x, ref[0]) and np.array_equal(y, ref[1])


@pytest.mark.parametrize(("seed", "shape", "per_row", "batch"), [
    (0, (3, 5), 5.5, 4), (1, (0, 4), 5.5, 4), (2, (40, 100), 5.5, 1 << 18), (2, (40, 100), 5.5, 333),
    (3, (1,), 5.5, 1), (4, (7, 3), 0.5, 5), (5, (50, 20), 0.01, 64)])
def test_permuted_colours_is_numpys_permuted_from_the_same_stream(seed, shape, per_row, batch):
    """Same rows and the generator left where numpy's call leaves it (also when the first raw
    draws run out: per_row below the ~5.1 used; in batches of rows that end on half a draw),
    after a draw that leaves half a raw draw kept."""
    from arc_data.arc.kernels import permuted_colours

    a, b = np.random.Generator(np.random.PCG64(seed)), np.random.Generator(np.random.PCG64(seed))
    for rng in (a, b):
        rng.integers(0, 8, size=7, dtype=np.uint8)
    want = a.permuted(np.broadcast_to(np.arange(1, 10, dtype=np.uint8), (*shape, 9)), axis=-1)
    got = permuted_colours(b, shape, draws_per_row=per_row, rows_per_batch=batch)
    assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
    assert (got == want).all()
    assert a.bit_generator.state == b.bit_generator.state
    assert (a.integers(0, 1000, 9) == b.integers(0, 1000, 9)).all()


def test_example_sides_is_resolve_examples_then_the_transformed_larger_grid(tmp_path):
    """kernels.example_sides against the numpy it replaced in splitplan.translate, on every split."""
    from arc_data.arc.kernels import example_sides
    from arc_data.arc.sources import load_sources
    from arc_data.arc.splitplan import TRANSPOSING
    from arc_data.dataset import resolve_examples

    tasks, _ = load_sources([str(write_layout(tmp_path / "raw", synthetic_tasks()))])
    plan = make_plan(tasks, 6, 3)
    g = plan.grids
    for sp in plan.splits.values():
        pi = sp.puzzle_indices.astype(np.int64)
        pair, pid = resolve_examples(sp.puzzle_identifiers, pi, sp.group_indices, sp.group_pairs,
                                     sp.group_pair_indices, np.arange(sp.num_examples))
        hw = np.maximum(g.shape[g.pair_grids[pair, 0]], g.shape[g.pair_grids[pair, 1]])
        swap = TRANSPOSING[plan.dihedral[pid]]
        h, w = example_sides(sp.puzzle_identifiers, pi, sp.group_indices, sp.group_pairs, sp.group_pair_indices,
                             g.shape, g.pair_grids, plan.dihedral, TRANSPOSING)
        assert swap.any() and not swap.all()
        assert (h == np.where(swap, hw[:, 1], hw[:, 0])).all() and (w == np.where(swap, hw[:, 0], hw[:, 1])).all()
