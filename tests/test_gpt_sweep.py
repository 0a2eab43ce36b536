"""Micro sweep: {baseline, deeploop} x R and a p-sweep, tables, plots, skip-on-resume, floor marking."""

from __future__ import annotations

import csv
import json

from hrm_deeploop.training import sweep as sweep_mod
from hrm_deeploop.training.sweep import SweepConfig, overrides, sweep
from hrm_deeploop.typed_config import to_dict, typed
from tests.gpt_helpers import array_data, one_thread, patterned_tokens, tiny_model, tiny_train_cfg  # noqa: F401  (autouse)

_STREAM = patterned_tokens(12_000, seed=0)
TRAIN, VAL = _STREAM[:10_000], _STREAM[10_000:]


def _opts(out, **kw):
    train = to_dict(tiny_train_cfg("unused", max_steps=6, eval_every=6, checkpoint_every=6))
    base = dict(train, output_dir=str(out), kind="both", rounds=[1, 2], seeds=[0], p_values=[0.3, 0.5],
                p_rounds=2, p_seeds=[0, 1])
    base.update(kw)
    return typed(base, SweepConfig)


def test_micro_sweep_tables_plots_and_skip(tmp_path, monkeypatch):
    opts = _opts(tmp_path / "sw")
    data_for = lambda spec: array_data(TRAIN, VAL, 32, 4, seed=spec.seed)
    results = sweep(opts, data_for)
    assert len(results) == 2 * 2 + 2 * 2
    assert {r["name"] for r in results} >= {"baseline_R1_s0", "deeploop_R2_s0", "p0.30_s1", "p0.50_s0"}
    for r in results:
        assert r["status"] == "finished" and r["val_loss"] is not None and r["unigram_entropy"] > 0
    for name in ("table.md", "table.csv", "rounds.png", "p_sweep.png"):
        assert (tmp_path / "sw" / name).stat().st_size > 0, name
    md = (tmp_path / "sw/table.md").read_text()
    assert "| Method | R=1 | R=2 |" in md and "Δ (deeploop − baseline)" in md and "| 0.30 | 2 |" in md
    rows = list(csv.DictReader((tmp_path / "sw/table.csv").read_text().splitlines()))
    assert len(rows) == 8
    s = json.loads((tmp_path / "sw/p/p0.30_s1/summary.json").read_text())
    assert s["scaling"] == {"scheme": "power", "p": 0.3} and s["model"]["num_rounds"] == 2 and s["seed"] == 1

    # re-running skips every finished run (no training happens)
    def boom(*a, **k):
        raise AssertionError("a finished run was launched again")

    monkeypatch.setattr(sweep_mod, "_launch", boom)
    again = sweep(opts, data_for)
    assert [r["val_loss"] for r in again] == [r["val_loss"] for r in results]


def test_floor_marking_in_tables(tmp_path):
    """A run whose loss stays above unigram entropy - margin is marked failed (red cross / 'floor')."""
    opts = _opts(tmp_path / "sw", kind="p", p_values=[0.5], p_seeds=[0])
    opts.eval.floor_margin = 100.0  # nothing can get 100 nats under the floor
    results = sweep(opts, lambda spec: array_data(TRAIN, VAL, 32, 4))
    assert results[0]["failed"] and results[0]["left_unigram_floor"] is False
    assert "0/1" in (tmp_path / "sw/table.md").read_text()


def test_overrides_round_trip():
    assert overrides("", {"a": {"b": None, "c": [1, 2], "d": "x y", "e": True, "f": 0.1}}) == [
        "a.b=null", "a.c=[1,2]", "a.d='x y'", "a.e=true", "a.f=0.1"]


def test_power_runs_take_scaling_p_and_every_scaling_setting_reaches_the_runs(tmp_path):
    from hrm_deeploop.training.sweep import plan, run_config

    opts = _opts(tmp_path / "sw", kind="rounds", methods=["power", "looped_eps"], rounds=[2],
                 scaling={"scheme": "baseline", "p": 0.4, "eps_lambda": 0.5, "beta_targets": ["v", "o"]})
    specs = plan(opts)
    assert [s.name for s in specs] == ["power0.40_R2_s0", "looped_eps_R2_s0"]
    cfgs = [run_config(opts, s, tmp_path / s.name) for s in specs]
    assert cfgs[0].scaling.scheme == "power" and cfgs[0].scaling.p == 0.4
    assert cfgs[1].scaling.scheme == "looped_eps" and cfgs[1].scaling.eps_lambda == 0.5
    assert all(c.scaling.beta_targets == ["v", "o"] and c.model.num_rounds == 2 for c in cfgs)
