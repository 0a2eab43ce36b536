"""docs/figures/same_budget.py's committed run records (section 4.9): the file is the table's one source once the
run folders are gone, so merging, the file's error messages and the sweep's best-rate rule are tested here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "figures" / "same_budget.py"


@pytest.fixture(scope="module")
def sb():  # noqa: ANN201 - the script as a module, read with `--task arc`
    argv, sys.argv = sys.argv, [str(SCRIPT), "--task", "arc"]
    try:
        spec = importlib.util.spec_from_file_location("same_budget", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.argv = argv
    return mod


def record(model: str = "hrm", lr: str = "1e-3", seed: int = 0, steps: int = 1500, exact: int = 9,
           scheme: str = "baseline", p2: float = 25.0) -> dict:
    return {"model": model, "scheme": scheme, "lr": lr, "seed": seed, "steps": steps, "exact_copies": exact,
            "copies": 81, "pass_at_k": {"1": 25.0, "2": p2}, "solved": ["b1948b0a"], "train_fit": 30.0,
            "params": 71298, "ms_per_step": None, "wall_s": None}


def test_merge_replaces_the_same_run_and_sorts(sb):
    old = [record(lr="2e-3"), record(seed=1, exact=5)]
    merged = sb.merge_records(old, [record(seed=1, exact=7), record(lr="5e-4")])
    assert [(r["lr"], r["seed"], r["exact_copies"]) for r in merged] == [("5e-4", 0, 9), ("1e-3", 1, 7), ("2e-3", 0, 9)]
    assert len(sb.merge_records(merged, [record(seed=1, exact=7, steps=977)])) == 4  # another budget, another run


def test_round_trip_and_errors_name_the_line(sb, tmp_path):
    path = tmp_path / "records.jsonl"
    sb.write_records([record(), record(seed=1)], path)
    assert sb.read_records(path) == [record(), record(seed=1)]
    path.write_text(json.dumps(record()) + "\n{not json\n")
    with pytest.raises(SystemExit, match=r"records.jsonl:2: not a JSON object"):
        sb.read_records(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(SystemExit, match=r"records.jsonl:1: not a JSON object \(a list\)"):
        sb.read_records(path)
    bad = record()
    del bad["train_fit"]
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(SystemExit, match=r"records.jsonl:1: a record without train_fit"):
        sb.read_records(path)


def cells_of(sb, records: list[dict], tmp_path: Path, monkeypatch) -> list:
    path = tmp_path / "r.jsonl"
    sb.write_records(sb.merge_records([], records), path)
    monkeypatch.setattr(sb, "RECORDS", path)
    return [(m, sc, lr, steps, done) for m in sb.MODELS for sc in ("baseline", "deeploop")
            for lr, steps, done in sb.arc_runs(m, sc)]


def test_best_rate_rule(sb, tmp_path, monkeypatch):
    runs = [record(lr=lr, seed=s, exact=e, p2=p2) for lr, e, p2 in (("5e-4", 10, 25.0), ("1e-3", 10, 37.5),
                                                                    ("2e-3", 9, 50.0)) for s in (0, 1, 2)]
    runs += [record(lr="3e-3", seed=s, exact=40) for s in (0, 1)]  # best single copies, but seeds 0-2 incomplete
    runs += [record(lr="5e-4", seed=s, exact=50, steps=3000) for s in (0, 1, 2)]  # another budget: not the sweep
    runs += [record(lr=lr, seed=s, exact=e, scheme="deeploop") for lr, e in (("1e-3", 11), ("2e-3", 60))
             for s in (0, 1, 2)]
    best = sb.best_arc_rates(cells_of(sb, runs, tmp_path, monkeypatch))
    assert best[("hrm", "baseline")][0] == "1e-3"  # tie on single copies, broken by pass@2
    assert best[("hrm", "deeploop")][0] == "1e-3"  # at the baseline's best rate, not its own


def test_a_full_tie_is_named(sb, tmp_path, monkeypatch):
    runs = [record(model="trm_mlp", lr=lr, seed=s, exact=0, p2=0.0) for lr in ("5e-4", "2e-3", "3e-3") for s in (0, 1, 2)]
    runs[-1]["exact_copies"] = 1  # 3e-3 a copy ahead: not a tie
    cells = cells_of(sb, runs, tmp_path, monkeypatch)
    best = sb.best_arc_rates(cells)
    assert best[("trm_mlp", "baseline")][0] == "3e-3"
    assert sb.rate_ties(cells, best) == {}
    runs[-1]["exact_copies"] = 0
    cells = cells_of(sb, runs, tmp_path, monkeypatch)
    best = sb.best_arc_rates(cells)
    assert best[("trm_mlp", "baseline")][0] == "5e-4"  # all tied: the lowest rate is kept
    assert sb.rate_ties(cells, best) == {"trm_mlp": ["2e-3", "3e-3"]}


def test_a_tie_over_three_seeds_is_broken_over_five(sb, tmp_path, monkeypatch):
    runs = [record(model="trm", lr=lr, seed=s, exact=10) for lr in ("2.5e-4", "5e-4") for s in (0, 1, 2)]
    runs += [record(model="trm", lr="5e-4", seed=s, exact=12) for s in (3, 4)]
    cells = cells_of(sb, runs, tmp_path, monkeypatch)
    best = sb.best_arc_rates(cells)
    assert best[("trm", "baseline")][0] == "2.5e-4"  # 2.5e-4 lacks seeds 3-4: the tie stands, the lowest kept
    assert "cannot choose until seeds 3-4" in sb.tie_note(cells, "trm", best[("trm", "baseline")], ["5e-4"])
    runs += [record(model="trm", lr="2.5e-4", seed=s, exact=11) for s in (3, 4)]
    cells = cells_of(sb, runs, tmp_path, monkeypatch)
    best = sb.best_arc_rates(cells)
    assert best[("trm", "baseline")][0] == "5e-4"  # seeds 0-4: 13.3 against 12.8
    assert sb.rate_ties(cells, best) == {"trm": ["2.5e-4"]}
    assert sb.tie_note(cells, "trm", best[("trm", "baseline")], ["2.5e-4"]).endswith(
        "chosen over seeds 0-4 (2.5e-4 12.8 / 25.0, 5e-4 13.3 / 25.0)")
    runs[-2:] = [record(model="trm", lr="2.5e-4", seed=s, exact=12) for s in (3, 4)]
    best = sb.best_arc_rates(cells_of(sb, runs, tmp_path, monkeypatch))
    assert best[("trm", "baseline")][0] == "2.5e-4"  # tied over five seeds too: the lowest rate
