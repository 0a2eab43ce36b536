"""overwrite=true replaces only a folder its writer wrote: one holding the writer's marker (manifest.json,
generated.json) and nothing the writer does not write (arc_data.files.guard.check_replaceable with
`outputs`). A user's folder that happens to hold a file of that common name kept nothing else: its other
files went with the replaced folder (new-user audit)."""

import json

import pytest

from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_layout


def _commands(tmp_path):
    src = write_layout(tmp_path / "raw", {"training": synthetic_tasks()["training"]})
    assert main(["generate-puzzles", "task=sudoku", "size=4", "count_train=4", "count_test=2", "progress=false",
                 f"output_dir={tmp_path / 'csv'}"]) == 0
    return {"build-arc": [f"sources=[{src}]", "num_aug=1", "progress=false"],
            "generate-arc": ["tasks_per_family=1", "families=[tile]", "progress=false"],
            "generate-puzzles": ["task=sudoku", "size=4", "count_train=4", "count_test=2", "progress=false"],
            "build-puzzles": ["task=sudoku", f"source={tmp_path / 'csv'}", "progress=false"]}


@pytest.mark.parametrize("marker", ["manifest.json", "generated.json"])
def test_a_users_folder_with_a_marker_named_file_is_never_replaced(tmp_path, capsys, marker):
    commands = _commands(tmp_path)
    for name, args in commands.items():
        mine = tmp_path / f"mine-{name}"
        mine.mkdir()
        (mine / marker).write_text(json.dumps({"name": "my-webapp"}))
        (mine / "notes.txt").write_text("keep me")
        capsys.readouterr()
        assert main([name, *args, f"output_dir={mine}", "overwrite=true"]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "refusing to replace it" in err, (name, err)
        assert (mine / "notes.txt").read_text() == "keep me" and (mine / marker).is_file(), name


def test_a_folder_the_writer_wrote_is_still_replaced(tmp_path, capsys):
    for name, args in _commands(tmp_path).items():
        out = tmp_path / f"out-{name}"
        assert main([name, *args, f"output_dir={out}"]) == 0, name
        first = sorted(p.name for p in out.iterdir())
        assert main([name, *args, f"output_dir={out}", "overwrite=true"]) == 0, name
        assert sorted(p.name for p in out.iterdir()) == first, name


GPT = ["model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16", "device=cpu",
       "logger=none", "train.progress=false", "train.micro_batch_size=2", "train.global_batch_tokens=64",
       "optim.warmup_steps=1", "data.unigram_tokens=100000", "train.max_steps=1"]


def _refused(capsys, args, folder, marker):
    """`args` with output_dir=folder overwrite=true, where folder holds `marker` and the user's notes.txt."""
    folder.mkdir()
    (folder / marker).write_text("{}")
    (folder / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert main([*args, f"output_dir={folder}", "overwrite=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refusing to replace it" in err and "notes.txt" in err, err
    assert (folder / "notes.txt").read_text() == "keep me" and sorted(p.name for p in folder.iterdir()) == \
        sorted([marker, "notes.txt"])


def test_export_replaces_an_earlier_export_but_not_a_users_folder_with_a_config_json(tmp_path, capsys):
    """config.json is the marker of an export: any Hugging Face model folder or project has one."""
    pytest.importorskip("safetensors")
    from tests.gpt_helpers import write_gpt2_shards

    shards = write_gpt2_shards(tmp_path / "shards")
    run = tmp_path / "gpt"
    assert main(["train-gpt", *GPT, f"data.train={shards}/train_*.bin", f"data.val={shards}/val_000000.bin",
                 f"output_dir={run}"]) == 0
    out = tmp_path / "export"
    assert main(["export", f"checkpoint={run}", f"output_dir={out}"]) == 0
    first = sorted(p.name for p in out.iterdir())
    assert main(["export", f"checkpoint={run}", f"output_dir={out}", "overwrite=true"]) == 0
    assert sorted(p.name for p in out.iterdir()) == first
    _refused(capsys, ["export", f"checkpoint={run}"], tmp_path / "mine", "config.json")


def test_prepare_text_replaces_its_shards_but_not_a_users_folder_with_a_meta_json(tmp_path, capsys):
    """prepare-text's shard names vary (train_000000.bin, val_000001.bin, ...): matched as patterns."""
    doc = tmp_path / "doc.txt"
    doc.write_text("Some words to tokenise, again and again. " * 300)
    args = ["prepare-text", f"inputs=[{doc}]", "val_tokens=100", "progress=false", "num_workers=1"]
    out = tmp_path / "tx"
    assert main([*args, f"output_dir={out}"]) == 0
    first = sorted(p.name for p in out.iterdir())
    assert first == ["meta.json", "train_000000.bin", "val_000000.bin"]
    assert main([*args, f"output_dir={out}", "overwrite=true"]) == 0
    assert sorted(p.name for p in out.iterdir()) == first
    demo = tmp_path / "demo"  # the bundled corpus is written into the folder too
    assert main(["prepare-text", "demo_docs=20", "val_tokens=100", "progress=false", f"output_dir={demo}"]) == 0
    assert main(["prepare-text", "demo_docs=20", "val_tokens=100", "progress=false", f"output_dir={demo}",
                 "overwrite=true"]) == 0
    _refused(capsys, args, tmp_path / "mine", "meta.json")
