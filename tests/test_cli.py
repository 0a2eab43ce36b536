"""The console script: subcommand dispatch, typed configs, `scales` output."""

import json
import subprocess
import sys

import pytest

from hrm_deeploop.cli import COMMANDS, DEPRECATED, compose, config_dir, main, resolve


def test_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("scales", "build-arc", "train", "evaluate", "vote", "train-gpt", "demo"):
        assert name in out


def test_unknown_subcommand(capsys):
    assert main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err


def test_every_subcommand_has_a_config_a_schema_and_a_target():
    for name, cmd in COMMANDS.items():
        assert (config_dir() / f"{cmd.config}.yaml").exists(), name
        assert callable(resolve(cmd.target)), name
        assert resolve(cmd.schema).__doc__, name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_subcommand_help_shows_its_settings(capsys, name):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"hrm-deeploop {name}: ") and "settings (defaults:" in out


def _scales_json(capsys, *overrides):
    assert main(["scales", "format=json", *overrides]) == 0
    return json.loads(capsys.readouterr().out)


def test_scales_hrm_defaults_json(capsys):
    r = _scales_json(capsys, "model=hrm", "scaling=deeploop")
    assert (r["N"], r["M"], r["N_g"], r["M_g"]) == (24, 48, 12, 24)
    assert set(r["modules"]) == {"H", "L"}
    for m in r["modules"].values():
        assert m["alpha"] == pytest.approx(24**0.5) and m["beta"] == pytest.approx(96**-0.5)


def test_scales_gpt_json(capsys):
    r = _scales_json(capsys, "model=gpt", "model.num_blocks=12", "model.num_rounds=3", "scaling=deepnorm")
    assert (r["N"], r["M"], r["N_g"], r["M_g"]) == (36, 72, None, None)
    assert r["modules"]["core"]["alpha"] == pytest.approx(72**0.25)
    assert r["modules"]["core"]["beta"] == pytest.approx(288**-0.25)


def test_scales_trm_json(capsys):
    r = _scales_json(capsys, "model=trm", "scaling=deeploop")  # the reference's arch default: n = 6
    assert (r["N"], r["M"], r["N_g"], r["M_g"], r["trm_depth"]) == (42, 84, 14, 28, "gradient")
    assert r["modules"]["net"]["alpha"] == pytest.approx(28**0.5) and r["modules"]["net"]["R"] == 7
    r = _scales_json(capsys, "model=trm", "model.num_l_cycles=4", "scaling=deepnorm")  # ARC, Maze
    assert (r["N"], r["N_g"], r["M_g"]) == (30, 10, 20)
    assert r["modules"]["net"]["alpha"] == pytest.approx(20**0.25)
    r = _scales_json(capsys, "model=trm", "scaling=power", "scaling.p=0.5", "scaling.trm_depth=forward")
    assert r["modules"]["net"]["N"] == 42 and r["modules"]["net"]["alpha"] == pytest.approx(84**0.5)
    assert main(["scales", "model=trm"]) == 0
    assert "trm_depth=gradient" in capsys.readouterr().out


def test_scales_table(capsys):
    assert main(["scales", "model=hrm", "scaling=baseline"]) == 0
    out = capsys.readouterr().out
    assert "N_g=12" in out and "M_g=24" in out and "1.000000" in out


def test_bad_scheme_is_a_one_line_error(capsys):
    assert main(["scales", "scaling.scheme=bogus"]) == 2
    err = capsys.readouterr().err
    assert "scaling.scheme='bogus'" in err and "Traceback" not in err


def test_misspelled_key_is_a_one_line_error_naming_it():
    p = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "scales", "model.num_h_layer=3"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "hrm-deeploop scales: error: unknown config key 'model.num_h_layer' (did you mean 'model.num_h_layers'?); "
        "see `hrm-deeploop scales --help`"]


@pytest.mark.parametrize("args, expected", [
    (["train", "optim.lr=-1"], "optim.lr=-1.0: must be > 0"),
    (["train", "model.halt_exploration_prob=2"], "model.halt_exploration_prob=2.0: must be in [0.0, 1.0]"),
    (["train", "model.num_heads=0"], "model.num_heads=0: must be >= 1"),
    (["train", "checkpoint.every=-1"], "checkpoint.every=-1: must be >= 0"),
    (["train", "model=gpt"], "model.name='gpt': must be a reasoner"),
    (["train", "model=trm", "model.mixer=conv"], "model.mixer='conv': must be one of attention, mlp"),
    (["train", "model=trm", "scaling.trm_depth=paper"], "scaling.trm_depth='paper': must be one of gradient"),
    (["train", "model=trm", "train.ema_rate=1.5"], "train.ema_rate=1.5: must be in (0, 1)"),
    (["train", "model=trm", "scaling.per_module=true"], "scaling.per_module=true applies to HRM"),
    (["train", "model=trm", "model.num_h_layers=2"], "unknown config key 'model.num_h_layers'"),
    (["train-gpt", "logger=foo"], "logger='foo': must be one of wandb, none"),
    (["train-gpt", "model.hidden_size=10", "model.num_heads=4"], "model.hidden_size=10: must be divisible"),
    (["train-gpt", "train.micro_batch_size=3", "train.global_batch_tokens=1000"], "train.global_batch_tokens=1000"),
    (["sweep", "methods=[power]"], "must be given with scaling.p"),
    (["train", "+foo=1"], "'+' is not needed"),
    (["train", "model=nope"], "Could not find 'model/nope' (choose one of: gpt"),
    (["train", "train.max_steps=abc"], "could not be converted to Integer"),
    (["evaluate", "device=tpu"], "device='tpu': must be auto, cpu, cuda or cuda:N"),
    (["vote", "predictions=x", "data_dir=y", "output_dir=z", "ks=[0]"], "ks=[0]: must be"),
    (["build-arc", "num_aug=-1"], "num_aug=-1: must be >= 0"),
    (["build-arc", "eval_name="], "eval_name is empty"),  # no Kaggle file evaluation: an empty test split, silently
])
def test_config_mistakes_are_one_line_errors_before_anything_runs(capsys, tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_deprecated_spellings_work_with_a_notice(capsys):
    for name, table in DEPRECATED.items():
        for old, new in table.items():
            assert old != new, (name, old)
    assert main(["train", "optim.lr_warmup_steps=7", "--help"]) == 0
    cap = capsys.readouterr()
    assert "'optim.lr_warmup_steps' is deprecated, use 'optim.warmup_steps'" in cap.err
    assert "warmup_steps: 7" in cap.out
    assert main(["train-gpt", "max_steps=9", "eval_every=3", "--help"]) == 0
    out = capsys.readouterr().out
    assert "max_steps: 9" in out and "every: 3" in out


def test_torch_free_subcommands_do_not_import_torch():
    code = ("import sys; from hrm_deeploop.cli import main; "
            "main(['scales', 'format=json']); main(['build-arc', '--help']); main(['vote', '--help']); "
            "main(['viz-arc', '--help']); assert 'torch' not in sys.modules, 'torch imported'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_yaml_files_hold_only_what_differs_from_the_dataclass():
    """Each subcommand's YAML (and each experiment/preset file) restates no dataclass default."""
    import yaml
    from omegaconf import OmegaConf

    from hrm_deeploop.typed_config import to_dict

    def restated(values, defaults, prefix=""):
        out = []
        for k, v in values.items():
            if k == "defaults" or not isinstance(defaults, dict) or k not in defaults:
                continue
            if isinstance(v, dict):
                out += restated(v, defaults[k], f"{prefix}{k}.")
            elif v == defaults[k]:
                out.append(prefix + k)
        return out

    for name, cmd in COMMANDS.items():
        schema = resolve(cmd.schema)
        defaults = to_dict(OmegaConf.to_container(OmegaConf.structured(schema)))
        values = yaml.safe_load((config_dir() / f"{cmd.config}.yaml").read_text()) or {}
        assert restated(values, defaults) == [], name
    from hrm_deeploop.demo import DemoPreset
    from hrm_deeploop.models.model_config import MODEL_CONFIGS
    from hrm_deeploop.training.train_config import TrainConfig, TrainGPTConfig
    from hrm_deeploop.training.vision_config import TrainViTConfig

    for f in (config_dir() / "experiment").glob("*.yaml"):
        values = yaml.safe_load(f.read_text())
        lm = "override /model: gpt" in f.read_text()
        vit = "override /model: loopvit" in f.read_text() or f.stem.startswith("loopvit_")  # twins inherit it
        command, schema = ("train-gpt", TrainGPTConfig) if lm else ("train-vit", TrainViTConfig) if vit \
            else ("train", TrainConfig)
        defaults = to_dict(OmegaConf.to_container(OmegaConf.structured(schema)))
        assert restated(values, defaults) == [], f.name
        # it composes, and its model section restates nothing of the model it composes
        model = compose(command, [f"experiment={f.stem}"]).model
        model_defaults = to_dict(MODEL_CONFIGS[model.name]())
        assert restated(values.get("model") or {}, model_defaults) == [], f.name
    preset_defaults = to_dict(OmegaConf.to_container(OmegaConf.structured(DemoPreset)))
    gpu = yaml.safe_load((config_dir() / "preset/gpu.yaml").read_text())
    assert restated({k: v for k, v in gpu.items() if k != "name"}, preset_defaults) == []
    assert yaml.safe_load((config_dir() / "preset/full.yaml").read_text()) == {"name": preset_defaults["name"]}
    cpu = yaml.safe_load((config_dir() / "preset/cpu.yaml").read_text())
    assert restated({k: v for k, v in cpu.items() if k != "name"}, preset_defaults) == []


def test_build_arc_as_the_process_entry_ends_it_itself_with_every_line_out(tmp_path):
    """`python -m hrm_deeploop.cli build-arc` leaves by `cli_fast.exit_now` (no interpreter teardown): its
    stdout (redirected to a file, so block-buffered) still holds the whole summary, the dataset is
    published, and an error still exits 2 with its one line; in-process `main([...])` returns."""
    from tests.arc_synth import synthetic_tasks, write_layout

    src = write_layout(tmp_path / "raw", synthetic_tasks())
    out = tmp_path / "ds"
    with open(tmp_path / "stdout.txt", "w") as fo:
        p = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "build-arc", f"sources=[{src}]",
                            f"output_dir={out}", "num_aug=2", "progress=false"], stdout=fo, stderr=subprocess.PIPE,
                           text=True)
    text = (tmp_path / "stdout.txt").read_text()
    assert p.returncode == 0, p.stderr
    assert f"build-arc: wrote {out}" in text and text.rstrip().endswith("black1(1)"), text  # the last line
    assert (out / "manifest.json").is_file()
    p = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "build-arc", f"sources=[{tmp_path / 'none'}]",
                        f"output_dir={tmp_path / 'ds2'}", "progress=false"], capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "no such source" in p.stderr, p.stderr
    assert COMMANDS["build-arc"].exit_fast and not COMMANDS["train"].exit_fast


def test_a_plain_setting_named_as_a_config_group_is_taken():
    """`configs/preset/` is the demo's group: Hydra read `ttt preset=gpu` (a documented ttt setting) as
    that group and refused it as an unknown key (new-user audit). A command that picks no group now sets
    such a key once composed, typed as Hydra types it; the demo still picks its group, and elsewhere an
    unknown key is still one line."""
    from hrm_deeploop.cli import compose
    from hrm_deeploop.errors import ConfigError

    base = ["checkpoint=x", "challenges=y"]
    assert compose("ttt", [*base, "preset=gpu"]).preset == "gpu"
    with pytest.raises(ConfigError, match="preset='bogus': must be one of auto, cpu, gpu"):
        compose("ttt", [*base, "preset=bogus"])
    with pytest.raises(ConfigError, match="unknown config key 'model'"):
        compose("vote", ["model=hrm"])
    assert compose("demo", ["preset=gpu"]).preset.name == "gpu"
    with pytest.raises(ConfigError, match="choose one of: cpu, full, gpu"):
        compose("demo", ["preset=nope"])
