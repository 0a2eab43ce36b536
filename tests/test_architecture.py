"""The house rules as import-linter contracts (pyproject.toml): layers, no cycles, torch-free arc_data."""

from pathlib import Path

import importlinter.cli as importlinter  # in the dev extra, which CI installs

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    code = importlinter.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 4
