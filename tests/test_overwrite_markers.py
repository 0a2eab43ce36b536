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
