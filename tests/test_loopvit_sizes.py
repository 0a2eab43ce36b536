"""LoopViT sizes refused in one line before anything is made: a canvas that cannot hold the data, an
evaluation scale off the canvas (before the run folder exists), a model or a step this machine
cannot hold or finish (`train-vit model.num_loops=1e6`, `model.image_size=1e5`), and `evaluate
passes=1e9` (their rows cannot be held)."""

from __future__ import annotations

import pytest

from hrm_deeploop.cli import run_subcommand
from tests.arc_synth import write_kaggle
from tests.test_families import SIZES, _tasks

VIT = ["experiment=loopvit_tiny_cpu", *SIZES["train-vit"]]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from arc_data.arc.build import BuildConfig, build

    root = tmp_path_factory.mktemp("sizes")
    pre = write_kaggle(root / "raw", "arc-agi_training", _tasks(0, 2, "pre", 5), solutions=True)
    held = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(2, 1, "val", 8), solutions=True)
    build(BuildConfig(sources=[str(pre), str(held)], output_dir=str(root / "arc"), num_aug=0, seed=0, progress=False))
    return root


def _cli(capsys, name: str, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = run_subcommand(name, list(args))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("extra, said", [
    (["model.image_size=6"], "model.image_size=6: the training split has a 8-cell side"),
    (["canvas.eval_scale=2"], "canvas.eval_scale=2 puts the test split's 8-cell side at 16 cells"),
    (["model.num_loops=1000000"], "train-vit: LoopViT hidden_size=32"),
    (["model.image_size=100000"], "train-vit: LoopViT hidden_size=32 on 100000 x 100000 canvases"),
])
def test_train_vit_refuses_sizes_before_its_run_folder(data, tmp_path, capsys, extra, said):
    out = tmp_path / "run"
    rc, err = _cli(capsys, "train-vit", *VIT, f"data_dir={data / 'arc'}", f"output_dir={out}", *extra)
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in err, err
    assert not out.exists()


def test_evaluate_refuses_passes_it_cannot_hold(data, tmp_path, capsys):
    run = tmp_path / "run"
    rc, err = _cli(capsys, "train-vit", *VIT, f"data_dir={data / 'arc'}", f"output_dir={run}", "train.max_steps=1")
    assert rc == 0, err
    rc, err = _cli(capsys, "evaluate", f"checkpoint={run}", f"data_dir={data / 'arc'}", f"output_dir={tmp_path / 'e'}",
                   "passes=1000000000", "progress=false")
    assert rc == 2 and "evaluate passes=1,000,000,000" in err and "lower passes" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "e" / "predictions.npz").exists()
