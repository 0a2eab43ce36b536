"""`train init_from=RUN` inherits the pretraining run's optimiser, schedule and logger unless the
command line sets them, says so on one line; a warmup longer than the run is a warning."""

import pytest
import yaml

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.training.inherit import inherit, warmup_warning
from hrm_deeploop.training.train_config import ReasonerOptim
from tests.arc_synth import write_kaggle
from tests.test_adapt import _tasks

TINY = ["model=hrm_tiny", "logger=none", "device=cpu", "train.progress=false", "model.hidden_size=32",
        "model.num_heads=2", "model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=1",
        "train.global_batch_size=4"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny HRM pretrained 2 steps at lr 3e-3, warmup 1, min_lr_ratio 0.5, no logger."""
    root = tmp_path_factory.mktemp("inherit")
    chal = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(0, 2, "pre") | _tasks(1, 2, "new"), solutions=True)
    build(BuildConfig(sources=[str(chal)], output_dir=str(root / "pre"), holdout_tasks=["new00", "new01"],
                      holdout_dir=str(root / "unseen"), num_aug=1, seed=0, progress=False))
    assert run_subcommand("train", [*TINY, f"data_dir={root / 'pre'}", f"output_dir={root / 'run'}",
                                    "train.max_steps=2", "optim.lr=0.003", "optim.warmup_steps=1",
                                    "optim.min_lr_ratio=0.5"]) == 0
    return root


def _config(run_dir):
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def test_adaptation_inherits_optimiser_schedule_and_logger(pretrained, tmp_path, capsys):
    root = pretrained
    rc = run_subcommand("train", ["device=cpu", "train.progress=false", "train.max_steps=2",
                                  "train.global_batch_size=2", f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'a'}", f"init_from={root / 'run'}"])
    assert rc == 0
    cfg = _config(tmp_path / "a")
    assert cfg["optim"]["lr"] == 0.003 and cfg["optim"]["warmup_steps"] == 1 and cfg["optim"]["min_lr_ratio"] == 0.5
    assert cfg["logger"] == "none"  # not the full-size default (wandb)
    said = [ln for ln in capsys.readouterr().err.splitlines() if "inherited from" in ln]
    assert len(said) == 1 and "optim.lr=0.003" in said[0] and "logger='none'" in said[0]
    assert str(root / "run" / "config.yaml") in said[0]


def test_the_command_line_wins_and_a_long_warmup_warns(pretrained, tmp_path, capsys):
    root = pretrained
    rc = run_subcommand("train", ["device=cpu", "train.progress=false", "train.max_steps=2",
                                  "train.global_batch_size=2", f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'b'}", f"init_from={root / 'run' / 'checkpoints' / 'step_2.pt'}",
                                  "optim.lr=0.0005", "optim.warmup_steps=50"])
    assert rc == 0
    cfg = _config(tmp_path / "b")
    assert cfg["optim"]["lr"] == 0.0005 and cfg["optim"]["warmup_steps"] == 50 and cfg["optim"]["min_lr_ratio"] == 0.5
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "inherited from" in ln)
    assert "optim.lr=" not in line and "optim.warmup_steps=" not in line and "optim.min_lr_ratio=0.5" in line
    assert "warning: optim.warmup_steps=50 is longer than the run (2 steps)" in err


def test_nothing_to_inherit_without_a_run_config(tmp_path, capsys):
    overrides = [f"init_from={tmp_path / 'missing'}", "optim.lr=1"]
    assert inherit(overrides) == overrides
    assert inherit(["data_dir=x"]) == ["data_dir=x"]
    assert inherit(["init_from=hf://owner/name"]) == ["init_from=hf://owner/name"]
    assert capsys.readouterr().err == ""
    # keys an experiment= sets are not inherited either
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"optim": {"lr": 0.01, "warmup_steps": 3}, "logger": "none"}))
    assert inherit([f"init_from={run}"], {"optim.lr"}) == ["optim.warmup_steps=3", "logger='none'", f"init_from={run}"]


def test_warmup_warning():
    assert warmup_warning(ReasonerOptim(lr=1e-4, warmup_steps=2000), 23).startswith(
        "warning: optim.warmup_steps=2000 is longer than the run (23 steps)")
    assert warmup_warning(ReasonerOptim(warmup_steps=23), 23) is None
    assert warmup_warning(None, 5) is None


def test_another_model_than_the_checkpoints_is_one_line_and_other_fields_a_warning(pretrained, tmp_path, capsys):
    """The trainer takes the model and its scaling from the checkpoint: `model=trm` (or an experiment of
    another model) beside an HRM init_from was dropped without a word and the run trained the HRM
    (new-user audit): now one line, exit 2. A field or a scheme set otherwise is a warning naming the
    checkpoint's value; settings equal to the checkpoint's pass silently."""
    from hrm_deeploop.cli import prepare
    from hrm_deeploop.errors import UserError

    root = pretrained
    base = ["device=cpu", "train.progress=false", "train.max_steps=1", "train.global_batch_size=2",
            f"data_dir={root / 'unseen'}", f"init_from={root / 'run'}", f"output_dir={tmp_path / 'x'}"]
    for wrong in ("model=trm", "experiment=trm_tiny_cpu", "model.name=urm"):
        with pytest.raises(UserError, match=f"init_from: the model and its scaling are the checkpoint's .*{wrong} "
                                            "would not be used"):
            prepare("train", [*base, wrong])
    capsys.readouterr()
    prepare("train", [*base, "model=hrm_tiny", "model.hidden_size=32", "scaling=baseline", "experiment=hrm_tiny_cpu"])
    assert "warning" not in capsys.readouterr().err
    prepare("train", [*base, "model.hidden_size=64", "scaling=deeploop"])
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning: init_from")]
    assert len(warned) == 1 and "model.hidden_size=64 is not used (the checkpoint's: 32)" in warned[0]
    assert "scaling=deeploop is not used (the checkpoint's: 'baseline')" in warned[0]
    assert run_subcommand("train", [*base[:-1], f"output_dir={tmp_path / 'run'}", "model=trm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model=trm would not be used" in err[0] and not (tmp_path / "run").exists()
