"""The run record (`training.record`: trained_tasks.json) and `ttt protocol=strict`
(`pertask.strict`) that reads it: written by `train` and `train-vit`, read wherever the run folder
(or its export, or hf://) now lives; generated imitations of an evaluated task refused; an
init_from chain; an old run without a record found as export finds its data; an official file
transductive only."""

import json
import os
import shutil
from pathlib import Path

import pytest

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask.strict import check_protocol, trained_names
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from hrm_deeploop.training import record
from tests.arc_synth import write_kaggle
from tests.hrm_helpers import TINY_OVERRIDES
from tests.test_pertask import TTT, _tasks

PRE = ["c0000000", "c0000001"]  # real tasks the pretraining saw
REARC, BARC, UNSEEN = "e0000000", "e0000001", "f0000000"  # imitated by rearc / by barc; never seen
HRM = [*TINY_OVERRIDES, "train.global_batch_size=4", "optim.warmup_steps=1", "model.halt_max_steps=1",
       "train.max_steps=1", "checkpoint.every=1"]


def _pairs(tasks: dict, n: int) -> list[dict]:
    return [p for t in tasks.values() for p in t["train"] + t["test"]][:n]


def _sources(root: Path) -> list[str]:
    """Two real tasks, a RE-ARC file made for REARC and a BARC problem seeded by BARC."""
    raw = _tasks(0, 2, "x")
    pre = write_kaggle(root / "raw", "arc-agi_training", dict(zip(PRE, raw.values())), solutions=True)
    (root / "rearc" / "tasks").mkdir(parents=True)
    (root / "rearc" / "tasks" / f"{REARC}.json").write_text(json.dumps(_pairs(_tasks(2, 3, "r"), 8)))
    (root / "barc").mkdir()
    line = {"examples": [[p["input"], p["output"]] for p in _pairs(_tasks(3, 3, "b"), 8)], "seeds": [f"{BARC}.py"]}
    (root / "barc" / "gen.jsonl").write_text(json.dumps(line) + "\n")
    return [str(pre), f"rearc:{root / 'rearc'}", f"barc:{root / 'barc'}"]


def _train(*args: str, cwd: Path | None = None, trainer: str = "train") -> int:
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return run_subcommand(trainer, [*(HRM if trainer == "train" else []), *args])
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A build of PRE + imitations of REARC and BARC, and a tiny HRM run `a` trained on it, with a
    relative data_dir (trained from `root`)."""
    root = tmp_path_factory.mktemp("strict")
    build(BuildConfig(sources=_sources(root), output_dir=str(root / "data" / "pre"), num_aug=1, seed=0,
                      progress=False))
    assert _train("data_dir=data/pre", "output_dir=runs/a", cwd=root) == 0
    return root


def _check(checkpoint, ids, *overrides: str, protocol: str = "strict") -> None:
    check_protocol(PerTaskConfig(checkpoint=str(checkpoint), challenges="c.json", protocol=protocol,
                                 train_overrides=list(overrides)), list(ids))


def test_the_build_records_what_its_generated_tasks_imitate(world):
    manifest = json.loads((world / "data" / "pre" / "manifest.json").read_text())
    assert manifest["imitated_tasks"] == {BARC: 2, REARC: 2}  # 8 pairs a unit, 4 a task: 2 tasks each


def test_train_writes_the_record_and_strict_reads_it(world):
    rec = json.loads((world / "runs" / "a" / record.RECORD).read_text())
    assert rec["format"] == record.FORMAT and rec["data_dir"] == "data/pre" and rec["init_from"] is None
    assert rec["tasks"] == PRE and rec["imitates"] == {BARC: 2, REARC: 2} and rec["unknown"] is None
    assert rec["generated"] == {"barc": 2, "rearc": 2}
    assert trained_names(str(world / "runs" / "a")) == sorted([*PRE, BARC, REARC])
    _check(world / "runs" / "a", [UNSEEN])  # nothing seen: passes
    with pytest.raises(UserError, match=f"1 of these tasks.*{PRE[0]}"):
        _check(world / "runs" / "a" / "checkpoints" / "step_1.pt", [PRE[0], UNSEEN])
    for imitated, n in ((REARC, 2), (BARC, 2)):  # an imitation, test answer included, is refused
        with pytest.raises(UserError, match=rf"{imitated} \(imitated by {n} generated task"):
            _check(world / "runs" / "a", [UNSEEN, imitated])
    _check(world / "runs" / "a", [PRE[0], REARC], protocol="transductive")


def test_a_moved_run_folder_alone_is_still_checked(world, tmp_path, monkeypatch):
    """The run folder copied elsewhere without its data, read from another working directory."""
    shutil.copytree(world / "runs" / "a", tmp_path / "upload" / "a")
    monkeypatch.chdir(tmp_path)
    _check("upload/a", [UNSEEN])
    with pytest.raises(UserError, match=f"{PRE[1]}"):
        _check("upload/a", [PRE[1]])
    with pytest.raises(UserError, match=REARC):
        _check("upload/a/checkpoints/step_1.pt", [REARC])


def test_an_init_from_chain_travels_in_the_record(world, tmp_path, monkeypatch):
    """Run b adapts a to another task: b's record holds a's; strict refuses a's tasks and
    imitations for b, wherever b is; an init_from inside ttt's train_overrides is checked too."""
    other = write_kaggle(tmp_path / "raw", "arc-agi_training", {"d0000000": _tasks(5, 1, "d")["d00"]})
    more = ["train.epochs_per_iter=2"]  # one task of three pairs: two epochs fill a batch of 4
    build(BuildConfig(sources=[str(other)], output_dir=str(tmp_path / "other"), num_aug=1, seed=0, progress=False))
    assert _train(f"data_dir={tmp_path / 'other'}", f"output_dir={tmp_path / 'b'}",
                  f"init_from={world / 'runs' / 'a'}", *more) == 0
    assert _train(f"data_dir={tmp_path / 'other'}", f"output_dir={tmp_path / 'c'}", *more) == 0  # from scratch
    rec = json.loads((tmp_path / "b" / record.RECORD).read_text())
    assert rec["tasks"] == ["d0000000"] and rec["init_from"]["source"] == str(world / "runs" / "a")
    assert rec["init_from"]["record"]["tasks"] == PRE
    shutil.move(tmp_path / "b", tmp_path / "moved")
    shutil.rmtree(tmp_path / "other")
    monkeypatch.chdir(tmp_path)
    _check("moved", [UNSEEN])
    for seen in ("d0000000", PRE[0], BARC):
        with pytest.raises(UserError, match=seen):
            _check("moved", [seen])
    _check("c", [PRE[0], BARC])
    with pytest.raises(UserError, match=f"{world / 'runs' / 'a'} was trained on 2 of these tasks"):
        _check("c", [PRE[0], BARC], f"init_from={world / 'runs' / 'a'}")


def test_an_old_run_without_a_record_finds_its_relative_data(world, tmp_path, monkeypatch):
    """A run from before the record: its config.yaml's relative data_dir is looked for as export
    looks (as given, then beside the run folder and above); not found: one line saying so."""
    old = tmp_path / "proj"
    shutil.copytree(world / "data", old / "data")
    shutil.copytree(world / "runs" / "a", old / "runs" / "a")
    (old / "runs" / "a" / record.RECORD).unlink()
    monkeypatch.chdir(tmp_path)  # not the folder the run was trained from
    _check(old / "runs" / "a", [UNSEEN])
    with pytest.raises(UserError, match=rf"{PRE[0]}.*{REARC} \(imitated"):
        _check(old / "runs" / "a", [PRE[0], REARC])
    shutil.rmtree(old / "data")
    with pytest.raises(UserError, match="cannot tell which tasks .*data_dir 'data/pre' is not found") as e:
        _check(old / "runs" / "a", [UNSEEN])
    assert "\n" not in str(e.value)


def test_an_official_checkpoint_is_transductive_only(tmp_path):
    (tmp_path / "loop_vit_base.pt").write_bytes(b"an official file: no run folder around it")
    with pytest.raises(UserError, match="cannot tell.*official checkpoint"):
        _check(tmp_path / "loop_vit_base.pt", [UNSEEN])
    _check(tmp_path / "loop_vit_base.pt", [UNSEEN], protocol="transductive")
    with pytest.raises(UserError, match="does not exist"):
        _check(tmp_path / "nowhere", [UNSEEN])


def test_a_record_in_an_export_and_on_the_hub(world, tmp_path, monkeypatch):
    """An exported folder carries the record (`record.export_files`, as export writes it); it is
    read from the folder, its weights file, and hf:// (a local Hub folder). A hand-made record that
    is not one: one line."""
    from hrm_deeploop import checkpoint as ckpt

    out = tmp_path / "hub" / "me" / "tiny"
    assert run_subcommand("export", [f"checkpoint={world / 'runs' / 'a'}", f"output_dir={out}",
                                     f"data_dir={world / 'data' / 'pre'}"]) == 0
    step = ckpt.resolve(world / "runs" / "a")
    files = record.export_files(step, {"data_dir": "data/pre"})
    assert files == {record.RECORD: (world / "runs" / "a" / record.RECORD).read_bytes()}
    (out / record.RECORD).unlink(missing_ok=True)
    # an export without the record (made before it existed): its identifiers.json tells the tasks
    with pytest.raises(UserError, match=PRE[0]):
        _check(out, [PRE[0]])
    for name, data in files.items():
        (out / name).write_bytes(data)
    monkeypatch.setenv("HRM_DEEPLOOP_HUB_DIR", str(tmp_path / "hub"))
    for where in (out, out / "model.safetensors", "hf://me/tiny"):
        _check(where, [UNSEEN])
        with pytest.raises(UserError, match=BARC):
            _check(where, [BARC])
    (out / record.RECORD).write_text(json.dumps({"format": record.FORMAT, "tasks": 3}))
    with pytest.raises(UserError, match="cannot tell.*not a run record"):
        _check(out, [UNSEEN])


def test_an_old_run_exported_gets_a_record_made_from_its_config(world, tmp_path):
    run = tmp_path / "a"
    shutil.copytree(world / "runs" / "a", run)
    (run / record.RECORD).unlink()
    shutil.copytree(world / "data", tmp_path / "data")  # beside the run folder, as its data_dir names it
    from hrm_deeploop import checkpoint as ckpt

    files = record.export_files(ckpt.resolve(run), {"data_dir": "data/pre", "init_from": None})
    made = json.loads(files[record.RECORD])
    assert made["tasks"] == PRE and made["imitates"] == {BARC: 2, REARC: 2} and made["data_dir"] == "data/pre"
    assert record.export_files(ckpt.resolve(run), {"data": {}}) == {}  # no data_dir (the looped GPT): none


def test_an_init_from_loop_of_old_runs_is_one_line(world, tmp_path):
    """Two old runs (no record) whose config.yaml name each other as init_from: followed a bounded
    number of links, then refused in one line."""
    for a, b in (("x", "y"), ("y", "x")):
        (tmp_path / a).mkdir()
        (tmp_path / a / "config.yaml").write_text(json.dumps({"data_dir": str(world / "data" / "pre"),
                                                              "init_from": str(tmp_path / b)}))
    with pytest.raises(UserError, match=f"more than {record.MAX_CHAIN} init_from links") as e:
        _check(tmp_path / "x", [UNSEEN])
    assert "\n" not in str(e.value)


def test_train_vit_writes_the_record(world, tmp_path):
    assert _train("experiment=loopvit_tiny_cpu", "train.progress=false", "train.global_batch_size=4",
                  "optim.warmup_steps=1", "train.max_steps=1", f"data_dir={world / 'data' / 'pre'}",
                  f"output_dir={tmp_path / 'vit'}", trainer="train-vit") == 0
    rec = json.loads((tmp_path / "vit" / record.RECORD).read_text())
    assert rec["tasks"] == PRE and rec["imitates"] == {BARC: 2, REARC: 2}
    with pytest.raises(UserError, match=REARC):
        _check(tmp_path / "vit", [REARC])


def test_ttt_refuses_in_one_line_before_writing(world, tmp_path, capsys):
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {REARC: _tasks(1, 1, "n")["n00"]}, solutions=False)
    rc = run_subcommand("ttt", [f"checkpoint={world / 'runs' / 'a'}", f"challenges={chal}",
                                f"output_dir={tmp_path / 'o'}", *TTT])
    err = capsys.readouterr().err
    assert rc == 2 and f"{REARC} (imitated by 2 generated task(s))" in err and not (tmp_path / "o").exists()
