"""`build-arc` over a generated source streams: grids in a temporary file (read back a chunk at a
time, their pages handed back), trials, augmentation and translation drawn a chunk of tasks or
examples at a time from the same RNG stream. The output is byte-identical to the build before
streaming existed (digests recorded from commit 70ff0c2, the in-memory plan, on the fixture below),
whatever the chunk sizes."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc import plan as arc_plan
from arc_data.arc.build import BuildConfig, build
from tests.arc_synth import synthetic_tasks, write_layout
from tests.test_arc_generated_sources import write_barc, write_rearc


def _sources(root: Path) -> list[str]:
    arc = write_layout(root / "arc", synthetic_tasks(3))
    rearc = write_rearc(root / "re_arc", {"0a1b2c3d": 23, "ev01": 9, "11aa22bb": 14}, seed=5)
    barc = write_barc(root / "barc" / "data.jsonl", [(7, ["0a1b2c3d.py"]), (5, ["ev02_x.py"]), (9, [])], seed=6)
    return [str(arc), f"rearc:{rearc}", f"barc:{barc}"]


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file but manifest.json (it names versions and paths); an .npz by its arrays
    (the zip entries carry the time of writing)."""
    out = {}
    for p in sorted(q for q in folder.rglob("*") if q.is_file() and q.name != "manifest.json"):
        rel = str(p.relative_to(folder))
        if p.suffix == ".npz":
            with np.load(p) as z:
                for k in sorted(z.files):
                    a = z[k]
                    out[f"{rel}:{k}"] = hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode()
                                                       + a.tobytes()).hexdigest()[:16]
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def _build(tmp_path: Path, materialize: bool) -> dict[str, dict[str, str]]:
    cfg = BuildConfig(sources=_sources(tmp_path / "src"), output_dir=str(tmp_path / "out"), num_aug=3, seed=7,
                      materialize=materialize, holdout_tasks=["ev01", "tr02"], holdout_dir=str(tmp_path / "held"),
                      progress=False)
    build(cfg)
    return {"out": digests(tmp_path / "out"), "held": digests(tmp_path / "held")}


RECORDED = json.loads((Path(__file__).parent / "generated_stream_digests.json").read_text())


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("chunks", [None, (4, 5, 64)])
def test_streamed_build_is_byte_identical(tmp_path, monkeypatch, materialize, chunks):
    """The generated sources' build equals, file by file, the in-memory build of commit 70ff0c2;
    also with tiny chunks (4 tasks, 5 examples, 64 bytes of compact grids between two releases of
    the spill's pages), so that chunking and releasing pages change nothing."""
    if chunks:
        from arc_data.arc import build as arc_build
        from arc_data.arc import spill

        monkeypatch.setattr(arc_plan, "TASK_CHUNK", chunks[0])
        monkeypatch.setattr(arc_plan, "EXAMPLE_CHUNK", chunks[1])
        monkeypatch.setattr(spill, "SAVE_CHUNK", chunks[2])
        monkeypatch.setattr(arc_build, "ENCODE_CHUNK", 8)
    assert _build(tmp_path, materialize) == RECORDED[str(materialize).lower()]


def test_spilled_units_read_back_the_same_pairs(tmp_path):
    """With a spill, each generated source is a `TaskTable`: its units' cells and a per-grid index go
    to the temporary file as they are read, and in memory a task is a few integers; every task it
    makes on demand reads back the pairs the in-memory load gives, with the same name, file and
    imitated ids, in the same order, and its columns (demonstrations, test pairs) agree."""
    from arc_data.arc.generated import GeneratedSourceConfig, loader
    from arc_data.arc.sources import load_sources
    from arc_data.arc.spill import Spill
    from arc_data.arc.tasklist import TaskList, load_tasks
    from arc_data.arc.tasktable import TaskTable

    specs = _sources(tmp_path)[1:]
    plain = load_sources(specs, load=loader(GeneratedSourceConfig(pairs_per_task=3), 9))[0]
    spill = Spill(tmp_path)
    spilled, _ = load_tasks(specs, "evaluation", True, loader(GeneratedSourceConfig(pairs_per_task=3), 9, spill))
    assert isinstance(spilled, TaskList) and all(isinstance(p.source, TaskTable) for p in spilled.parts)
    assert list(spilled.names()) == [t.name for t in plain] and len(plain) > 10
    assert (spilled.num_train == [len(t.train) for t in plain]).all()
    assert (spilled.num_test == [len(t.test) for t in plain]).all() and not spilled.is_eval.any()
    for a, b in zip(plain, spilled):
        assert (b.name, b.file, b.source, b.subset, b.imitates) == (a.name, a.file, a.source, a.subset, a.imitates)
        assert a.train == b.train and a.test == b.test
    cells = sum(x.size + y.size for t in plain for x, y in t.train + t.test)
    assert spill.size >= cells  # every kept pair's cells are in the file
    spill.close()


def test_a_table_out_of_name_order_is_sorted_and_a_repeated_id_refused(tmp_path):
    """Units whose task names do not come in name order (file `ab-c` lists before `ab`, but
    `rearc-ab-0000` sorts before `rearc-ab-c-0000`) give the order `load_sources` gives; the same
    task id from two sources is refused, naming both files, as for plain sources."""
    from arc_data.arc.generated import GeneratedSourceConfig, loader
    from arc_data.arc.sources import load_sources
    from arc_data.arc.spill import Spill
    from arc_data.arc.tasklist import load_tasks
    from arc_data.errors import ArcError

    spec = f"rearc:{write_rearc(tmp_path / 're_arc', {'ab': 9, 'ab-c': 9, 'a': 5}, seed=2)}"
    grouping = GeneratedSourceConfig(pairs_per_task=2)
    plain = load_sources([spec], load=loader(grouping, 1))[0]
    spill = Spill(tmp_path)
    tl, _ = load_tasks([spec], "evaluation", True, loader(grouping, 1, spill))
    assert not tl.parts[0].source._in_order  # the table was sorted
    assert list(tl.names()) == [t.name for t in plain] and plain[0].name == "rearc-a-0000"
    assert [t.train for t in tl] == [t.train for t in plain]
    other = f"rearc:{write_rearc(tmp_path / 'other', {'ab': 3}, seed=3)}"
    with pytest.raises(ArcError, match=r"task rearc-ab-0000: the same task id is also in .*re_arc"):
        load_tasks([spec, other], "evaluation", True, loader(grouping, 1, spill))
    spill.close()


def _cells(pairs) -> list[tuple]:
    return [(x.shape, x.tobytes(), y.shape, y.tobytes()) for x, y in pairs]


def test_split_and_validation_on_a_table_equal_those_on_the_task_list(tmp_path):
    """A hold-out drawn from every task (pool=all, so generated tasks are held out too and become
    evaluation tasks), the imitations left out, and the validation tasks of the held-out set: the
    same names, flags and pairs whether the generated source is a `TaskTable` or a list of Task."""
    from arc_data.arc.generated import GeneratedSourceConfig, loader
    from arc_data.arc.sources import load_sources
    from arc_data.arc.spill import Spill
    from arc_data.arc.tasklist import load_tasks
    from arc_data.arc.tasksplit import imitations, split_tasks, validation_tasks

    specs = _sources(tmp_path)
    grouping = GeneratedSourceConfig(pairs_per_task=4)
    plain = load_sources(specs, load=loader(grouping, 3))[0]
    spill = Spill(tmp_path)
    table = load_tasks(specs, "evaluation", True, loader(grouping, 3, spill))[0]
    for fraction, names in ((0.5, []), (0.2, ["ev01"])):
        got = split_tasks(table, names, fraction, "all", 4)
        want = split_tasks(plain, names, fraction, "all", 4)
        for g, w in zip(got, want):
            assert [(t.name, t.is_eval, t.imitates) for t in g] == [(t.name, t.is_eval, t.imitates) for t in w]
            assert [_cells(t.train + t.test) for t in g] == [_cells(t.train + t.test) for t in w] and len(g)
        held = list(got[1].names())
        assert imitations(table, held) == imitations(plain, held)
        v_got, v_want = validation_tasks(got[1]), validation_tasks(want[1])
        assert v_got[1] == v_want[1] and [(t.name, _cells(t.train), _cells(t.test)) for t in v_got[0]] == \
            [(t.name, _cells(t.train), _cells(t.test)) for t in v_want[0]]
    assert any(t.source.startswith("rearc:") for t in split_tasks(table, [], 0.5, "all", 4)[1])
    spill.close()


def test_a_table_holds_nothing_a_task(tmp_path):
    """What a generated source costs in memory once read with a spill: its cells, its grid index, its
    columns (per task, per unit) and the task list's rows and flags are in the file (the task list of
    Python objects it replaced held about 0.5 kB a task, the table with its columns in memory 21
    bytes). Measured by tracemalloc (numpy reports its buffers to it) on 2,000 and 6,000 tasks of 2
    pairs, 40 units each."""
    import tracemalloc

    from arc_data.arc.generated import GeneratedSourceConfig, loader
    from arc_data.arc.spill import Spill
    from arc_data.arc.tasklist import load_tasks

    kept = {}
    for n in (2000, 6000):
        src = write_rearc(tmp_path / f"r{n}", {f"{u:08x}": 2 * n // 40 for u in range(40)}, seed=n)
        spill = Spill(tmp_path)
        tracemalloc.start()
        tl, _ = load_tasks([f"rearc:{src}"], "evaluation", True, loader(GeneratedSourceConfig(pairs_per_task=2), 0, spill))
        kept[n] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(tl) == n
        spill.close()
    per_task = (kept[6000] - kept[2000]) / 4000
    assert per_task < 2, per_task



def _table_tasks(spill, num_pairs: int):
    """A generated source of `num_pairs` 3x3 pairs as a `TaskList` of one `TaskTable` (tasks of 4
    pairs, 1,000 pairs a unit), made without files."""
    from arc_data.arc.tasklist import TaskList
    from arc_data.arc.tasktable import TaskTable

    table = TaskTable("rearc:synthetic", "rearc", spill, pairs_per_task=4, test_pairs=1)
    rng = np.random.default_rng(num_pairs)
    for u in range(num_pairs // 1000):
        cells = rng.integers(0, 10, 2 * 1000 * 9, dtype=np.uint8)
        hw = np.full((2 * 1000, 2), 3, np.int64)
        table.add_unit(f"{u:08x}", (f"{u:08x}",), f"{u:08x}.json", 0, cells, 9 * np.arange(2000), hw,
                       rng.permutation(1000))
    table.finish()
    return TaskList.of_table(table)


def test_a_spilled_source_holds_memory_flat_from_its_table_to_its_tables(tmp_path, monkeypatch):
    """Nothing a task or a pair of a generated source is held in memory from reading it to writing its
    compact dataset: the table's columns, the task list's rows and flags (`split_tasks` with nothing
    held out, `mode_line`), the trial dihedral ids (num_aug=2) and the plan (per-task, per-identifier,
    per-puzzle and per-example arrays) live in the spill, computed and written a chunk at a time. The
    tracemalloc peak from the first unit to the last table, and what is held at the end, barely move
    from 8,000 to 32,000 pairs (chunks made small so both sizes span many). In memory before: the plan
    about 40 bytes a pair, the table and task list 21 bytes a task (5 a pair), the trial ids 10 bytes a
    task at num_aug=2 (2.5 a pair)."""
    import tracemalloc

    from arc_data.arc import spill as arc_spill
    from arc_data.arc import tasklist
    from arc_data.arc.build import write_tables
    from arc_data.arc.spill import Spill
    from arc_data.arc.tasksplit import mode_line, split_tasks

    monkeypatch.setattr(arc_plan, "TASK_CHUNK", 64)
    monkeypatch.setattr(tasklist, "NAME_CHUNK", 64)
    monkeypatch.setattr(tasklist, "ROW_CHUNK", 64)
    monkeypatch.setattr(arc_plan, "EXAMPLE_CHUNK", 256)
    monkeypatch.setattr(arc_spill, "SAVE_CHUNK", 4096)
    monkeypatch.setattr(arc_spill, "APPEND_BLOCK", 64)
    peak, held = {}, {}
    for n in (2000, 8000, 32000):  # the first loads the kernels
        spill = Spill(tmp_path)
        out = tmp_path / f"out{n}"
        for split in ("train", "test"):
            (out / split).mkdir(parents=True)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept, _ = split_tasks(_table_tasks(spill, n), [], 0.0, "all", 1)
        assert "labelled build" in mode_line(kept, str(out))
        plan = arc_plan.make_plan(kept, 2, 1, spill)
        write_tables(plan, out, materialize=False)
        held[n], peak[n] = (m - before for m in tracemalloc.get_traced_memory())
        tracemalloc.stop()
        assert plan.splits["train"].num_examples == 3 * n and plan.num_ids == 3 * (n // 4) + 1
        del plan, kept
        spill.close()
    per_pair = {k: (v[32000] - v[8000]) / 24000 for k, v in (("peak", peak), ("held", held))}
    assert per_pair["peak"] < 2 and per_pair["held"] < 1, (per_pair, peak, held)


@pytest.mark.parametrize("block", [1, 3, 64])
def test_an_appender_gives_back_what_was_appended(tmp_path, block):
    """`spill.Appender` (the table's columns): appends and extends of any length across blocks of
    `block` items, interleaved with other writes to the spill, read back as one array in the spill."""
    from arc_data.arc.spill import Appender, Spill

    spill = Spill(tmp_path)
    rng = np.random.default_rng(block)
    cols = {np.dtype(np.int32): Appender(spill, np.int32, block), np.dtype(np.int64): Appender(spill, np.int64, block),
            np.dtype(np.uint8): Appender(spill, np.uint8, block)}
    want = {k: [] for k in cols}
    for step in range(40):
        for dt, col in cols.items():
            values = rng.integers(0, 100, size=int(rng.integers(0, 7)), dtype=dt)
            if len(values) == 1 and step % 2:
                col.append(values[0])
            else:
                col.extend(values)
            want[dt] += values.tolist()
        spill.append(rng.integers(0, 9, size=5, dtype=np.uint8))  # the cells between the blocks
    for dt, col in cols.items():
        got = col.finish()
        assert got.dtype == dt and got.tolist() == want[dt] and col.length == len(want[dt])
    spill.close()


@pytest.mark.parametrize("task_chunk", [1, 3, 4, 5, 4096])
def test_trial_dihedral_ids_drawn_in_chunks_are_one_calls(tmp_path, monkeypatch, task_chunk):
    """`plan.draw_dihedrals` draws RNG step 1 a multiple of 4 rows at a time, into the spill: one
    `integers` call's values, and the stream left where that call leaves it (what the colour
    permutations draw next), whatever TASK_CHUNK is. Calls of other sizes would not give them (numpy
    drops the rest of a 32-bit word at the end of a call): the reason for the rounding."""
    from arc_data.arc.spill import Spill

    monkeypatch.setattr(arc_plan, "TASK_CHUNK", task_chunk)
    spill = Spill(tmp_path)
    for num_tasks, num_trials in ((1, 5), (13, 5), (9, 15), (4097, 1), (6, 0)):
        one = np.random.Generator(np.random.PCG64(3))
        want = one.integers(0, 8, size=(num_tasks, num_trials), dtype=np.uint8)
        rng = np.random.Generator(np.random.PCG64(3))
        got = arc_plan.draw_dihedrals(rng, num_tasks, num_trials, spill)
        assert got.shape == want.shape and (got == want).all()
        assert (rng.integers(0, 2**62, size=3) == one.integers(0, 2**62, size=3)).all()
    spill.close()
    rng = np.random.Generator(np.random.PCG64(3))
    thirds = np.concatenate([rng.integers(0, 8, size=(3, 5), dtype=np.uint8) for _ in range(3)])
    assert not (thirds == np.random.Generator(np.random.PCG64(3)).integers(0, 8, size=(9, 5), dtype=np.uint8)).all()

if __name__ == "__main__":  # `python -m tests.test_generated_stream`: the digests RECORDED holds (run on 70ff0c2)
    import contextlib
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        got = {m: _build(Path(tmp) / str(m), m) for m in (True, False)}
    print(json.dumps(got, indent=1, sort_keys=True))
