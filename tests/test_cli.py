"""The console script: subcommand dispatch, typed configs, `scales` output."""

import json
import subprocess
import sys

import pytest

from hrm_deeploop.cli import SUBCOMMANDS, config_dir, main


def test_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("scales", "build-arc", "train", "evaluate", "vote", "train-gpt", "demo"):
        assert name in out


def test_unknown_subcommand(capsys):
    assert main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err


def test_every_subcommand_has_a_config():
    for name, sub in SUBCOMMANDS.items():
        assert (config_dir() / f"{sub.config_name}.yaml").exists(), name


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


def test_scales_table(capsys):
    assert main(["scales", "model=hrm", "scaling=baseline"]) == 0
    out = capsys.readouterr().out
    assert "N_g=12" in out and "M_g=24" in out and "1.000000" in out


def test_bad_scheme_is_a_one_line_error(capsys):
    assert main(["scales", "scaling.scheme=bogus"]) == 2
    err = capsys.readouterr().err
    assert "scaling.scheme='bogus'" in err and "Traceback" not in err


def test_misspelled_key_is_an_error_naming_it():
    # Hydra refuses keys that are not in the typed schema (exit code 1, message names the key).
    p = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "scales", "model.num_h_layer=3"],
                       capture_output=True, text=True)
    assert p.returncode != 0
    assert "num_h_layer" in p.stderr
