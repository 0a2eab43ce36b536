"""`evaluate` of a checkpoint whose puzzle-table rows are its training dataset's ids, on a dataset that
names its puzzles otherwise: two builds can hold as many identifiers and other tasks (ARC-1's 400
training and 400 evaluation tasks at one num_aug, the first-ten-minutes split), and each id then read
another puzzle's row without a word (new-user audit). Now one line, from the run folder
(data_identity.json) and from an export (its identifiers.json); the dataset it trained on still runs."""

import pytest

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import run_subcommand
from tests.arc_synth import write_kaggle
from tests.hrm_helpers import TINY_OVERRIDES
from tests.test_adapt import _tasks


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """Builds `a` and `b`: two tasks each, as many identifiers, other names; a 1-step HRM on `a`, exported."""
    root = tmp_path_factory.mktemp("same_puzzles")
    for name in ("a", "b"):
        chal = write_kaggle(root / f"raw_{name}", "arc-agi_evaluation", _tasks(0, 2, name))
        build(BuildConfig(sources=[str(chal)], output_dir=str(root / name), num_aug=1, seed=0, progress=False))
    assert run_subcommand("train", [*TINY_OVERRIDES, f"data_dir={root / 'a'}", f"output_dir={root / 'run'}",
                                    "train.max_steps=1", "train.global_batch_size=4", "train.epochs_per_iter=4"]) == 0
    assert run_subcommand("export", [f"checkpoint={root / 'run'}", f"output_dir={root / 'exp'}"]) == 0
    return root


@pytest.mark.parametrize("checkpoint, expected", [
    ("run", "data_identity.json records another identifiers.json"),
    ("exp", "row 1: 'a00' there, 'b00' here"),
])
def test_another_dataset_with_as_many_puzzles_is_refused(two_builds, capsys, checkpoint, expected):
    root = two_builds
    out = root / f"eval_{checkpoint}"
    capsys.readouterr()
    assert run_subcommand("evaluate", [f"checkpoint={root / checkpoint}", f"data_dir={root / 'b'}",
                                       f"output_dir={out}", "progress=false", "device=cpu"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "was trained on another dataset than" in err[0] and expected in err[0], err
    assert not out.exists()


def test_the_dataset_it_trained_on_is_evaluated(two_builds):
    root = two_builds
    for checkpoint in ("run", "exp"):
        assert run_subcommand("evaluate", [f"checkpoint={root / checkpoint}", f"data_dir={root / 'a'}",
                                           f"output_dir={root / f'same_{checkpoint}'}", "progress=false",
                                           "device=cpu", "report=false"]) == 0
