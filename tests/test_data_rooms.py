"""arc_data's rooms: an error names the task it came from (its class), the CLI catches the base,
and every task in the puzzle registry has the hooks the pipeline calls."""

import inspect
from pathlib import Path

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.arc.build import BuildConfig, build
from arc_data.errors import ArcError, DatasetError, MazeError, SudokuError, raised_as
from arc_data.puzzles import registry
from arc_data.puzzles.build import build_puzzles
from arc_data.puzzles.puzzle_config import BuildPuzzlesConfig, GeneratePuzzlesConfig
from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_layout

HEADER = "source,question,answer,rating\n"


def _csvs(folder: Path, train: str, test: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.csv").write_text(HEADER + train)
    (folder / "test.csv").write_text(HEADER + test)
    return folder


@pytest.mark.parametrize(("task", "error", "row"), [
    ("sudoku", SudokuError, "a,1.3.....2...4..1,1234341221434321,5\n"),
    ("maze", MazeError, "x,S G   ###,SoG   ###,2\n"),
])
def test_a_puzzle_build_raises_its_tasks_error(tmp_path, task, error, row):
    bad = _csvs(tmp_path / "bad", row, "c,X" + row.split(",")[1][1:] + "," + row.split(",")[2] + ",1\n")
    with pytest.raises(error, match=r"test\.csv:2: question cell 0 is 'X'"):  # the task's charset check
        build_puzzles(BuildPuzzlesConfig(task=task, source=str(bad), output_dir=str(tmp_path / "o"), progress=False))
    good = _csvs(tmp_path / "good", row, row)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(error, match="overwrite"):  # the shared file rules' error, raised as the task's
        build_puzzles(BuildPuzzlesConfig(task=task, source=str(good), output_dir=str(tmp_path / "taken"),
                                         progress=False))
    with pytest.raises(error, match="count_train"):  # an option of the task's generator
        GeneratePuzzlesConfig(task=task, count_train=0, output_dir=str(tmp_path / "g"))
    other = MazeError if error is SudokuError else SudokuError
    assert not issubclass(error, other) and issubclass(error, DatasetError)


def test_an_arc_build_raises_arc_error_and_the_cli_catches_the_base(tmp_path, capsys):
    raw = write_layout(tmp_path / "raw", {"training": synthetic_tasks()})
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(ArcError, match="overwrite"):
        build(BuildConfig(sources=[str(raw)], output_dir=str(tmp_path / "taken"), num_aug=0, progress=False))
    rc = main(["build-puzzles", "task=maze", f"source={tmp_path / 'nope'}", f"output_dir={tmp_path / 'o'}"])
    err = capsys.readouterr().err
    assert rc == 2 and "neither a folder nor a dataset repository id" in err
    assert err.startswith("hrm-deeploop build-puzzles: error: maze: source: ")  # the line names the task
    rc = main(["build-arc", f"sources=[{tmp_path / 'nope'}]", f"output_dir={tmp_path / 'o'}"])
    assert rc == 2 and capsys.readouterr().err.startswith("hrm-deeploop build-arc: error: arc: ")


def test_raised_as_keeps_the_message_and_a_task_error_as_it_is():
    with pytest.raises(SudokuError, match="^x.csv: bad$") as e:
        with raised_as(SudokuError):
            raise DatasetError("x.csv: bad")
    assert e.value.__cause__ is None
    with pytest.raises(MazeError):
        with raised_as(SudokuError):
            raise MazeError("kept")


def test_every_registered_task_has_the_pipelines_hooks():
    hooks = [n for n, v in vars(registry.GridTask).items() if callable(v) and not n.startswith("_")]
    assert {"size_of", "lut", "augment", "generator", "render"} <= set(hooks)
    for name, task in registry.TASKS.items():
        assert task.name == name and issubclass(task.error, DatasetError)
        for hook in hooks:
            got = inspect.signature(getattr(task, hook)).parameters
            want = [p for p in inspect.signature(getattr(registry.GridTask, hook)).parameters if p != "self"]
            assert list(got) == want, (name, hook)
        lut = task.lut(4)
        assert lut.shape == (256,) and lut.max() == 255 and 0 < lut[lut < 255].max() < task.vocab_size(4)
    with pytest.raises(DatasetError, match="task: expected one of sudoku, maze, got 'go'"):
        registry.task_named("go")


def test_square_side():
    assert [fmt.square_side(k) for k in (0, 1, 9, 10, 900)] == [0, 1, 3, 0, 30]
    assert np.isscalar(fmt.square_side(16))
