"""The visit-alignment diagnostic (training/kappa.py): the estimator on constructed cases with known
answers, per-visit gradients that sum to the tied gradient, and the trainer option."""

from __future__ import annotations

import json

import pytest
import torch

from hrm_deeploop.models.gpt import GPT
from hrm_deeploop.models.model_config import GPTConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.kappa import kappa, mean_pairwise_cos, measure, summarize, untied_visits
from tests.gpt_helpers import array_data, one_thread, patterned_tokens, tiny_train_cfg  # noqa: F401


def test_identical_visits_give_R_and_orthogonal_visits_give_one():
    g = torch.randn(50, dtype=torch.float64)
    for R in (1, 2, 3, 5, 8):
        assert kappa([g] * R, [2 * g] * R) == pytest.approx(R)
        assert mean_pairwise_cos([g] * R) == (None if R == 1 else pytest.approx(1.0))
    basis = torch.eye(8, dtype=torch.float64)
    for R in (2, 4, 8):
        vecs = [3 * basis[i] for i in range(R)]
        assert kappa(vecs, vecs) == pytest.approx(1.0)
        assert mean_pairwise_cos(vecs) == pytest.approx(0.0)
    # opposite visits cancel
    assert kappa([g, -g], [g, -g]) == pytest.approx(0.0)
    # bounds 0 <= kappa <= R for arbitrary visits
    gen = torch.Generator().manual_seed(0)
    for R in (2, 5):
        u = [torch.randn(30, generator=gen, dtype=torch.float64) for _ in range(R)]
        v = [torch.randn(30, generator=gen, dtype=torch.float64) for _ in range(R)]
        assert 0 <= kappa(u, v) <= R


def _gpt(R, scheme, **kw):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=R, mlp_multiple=16,
                    seq_len=16, **kw)
    return GPT(cfg, ScalingConfig(scheme=scheme))


def test_untied_visits_sum_to_the_tied_gradient():
    m = _gpt(3, "deeploop")
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    m(x, y)[1].backward()
    tied = {n: p.grad.clone() for n, p in m.core.layers[1].named_parameters()}
    with untied_visits({"b": m.core.layers[1]}) as visits:
        loss = m(x, y)[1]
    assert len(visits["b"]) == 3  # one copy set per round
    leaves = [t for copies in visits["b"] for t in copies.values()]
    grads = dict(zip(map(id, leaves), torch.autograd.grad(loss, leaves)))
    for n in tied:
        summed = sum(grads[id(copies[n])] for copies in visits["b"])
        torch.testing.assert_close(summed, tied[n], rtol=1e-5, atol=1e-7)
    assert all(p.grad is not None for p in m.parameters())  # the shared tensors were not swapped for good


def _measure(m, R):
    x, y = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1)), \
        torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(2))
    blocks = {f"core.layers.{i}": b for i, b in enumerate(m.core.layers)}

    def forward():
        logits, loss = m(x, y)
        return loss, logits

    return measure(blocks, forward, generator=torch.Generator().manual_seed(0))


def test_model_measurements_known_cases():
    """R = 1 is 1 by definition; a huge residual scale alpha makes every round see (almost) the same
    stream, so visits align and kappa -> R: the aligned regime, constructed."""
    assert all(r.kappa == pytest.approx(1.0) and r.cos is None for r in _measure(_gpt(1, "baseline"), 1))
    m = GPT(GPTConfig(vocab_size=64, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=4, mlp_multiple=16,
                      seq_len=16), ScalingConfig(scheme="power", p=3.0))  # alpha = 16^3, beta ~ 0
    res = _measure(m, 4)
    assert len(res) == 4 and all(r.visits == 4 for r in res)
    s = summarize(res)
    assert s["kappa/max"] == pytest.approx(4.0, abs=0.01) and s["kappa/mean"] > 0.9 * 4  # aligned: ~R
    assert s["kappa_cos/mean"] > 0.95 and s["kappa/visits"] == 4.0
    # plain Post-LN at R = 4 decorrelates its visits much more (measured at init)
    assert summarize(_measure(_gpt(4, "baseline"), 4))["kappa/mean"] < 0.5 * s["kappa/mean"]


def test_trainer_logs_kappa_without_changing_the_run(tmp_path):
    from hrm_deeploop.training import lm as train_gpt

    stream = patterned_tokens(22_000, seed=0)
    runs = {}
    for every in (0, 3):
        cfg = tiny_train_cfg(str(tmp_path / f"k{every}"), max_steps=6, eval_every=100)
        cfg.diagnostics.kappa_every = every
        cfg.model.num_rounds = 3
        train_gpt.train(cfg, data=array_data(stream[:20_000], stream[20_000:], 32, 4))
        runs[every] = [json.loads(x) for x in (tmp_path / f"k{every}/metrics.jsonl").read_text().splitlines()]
    losses = {k: [r["train/loss"] for r in rows if "train/loss" in r] for k, rows in runs.items()}
    assert losses[0] == losses[3]  # the diagnostic draws no training randomness and consumes no data
    logged = [r for r in runs[3] if "kappa/max" in r]
    assert [r["step"] for r in logged] == [1, 3, 6]
    assert all(0 <= r["kappa/max"] <= 3 and "kappa/core.layers.0.attn" in r for r in logged)
    assert not any("kappa/max" in r for r in runs[0])


def test_alignment_report_fits_gamma_from_logged_runs(tmp_path):
    """Runs whose logged kappa grows as R^0.5 give gamma = 0.5 and the threshold p >= 0.375."""
    from hrm_deeploop.training.alignment_report import alignment_table, fit_gamma, plot_alignment

    assert fit_gamma([(1, 1.0), (2, 2.0), (4, 4.0)]) == pytest.approx(1.0)
    assert fit_gamma([(1, 1.0)]) is None
    results = []
    for R in (1, 2, 4, 8):
        name = f"deeploop_R{R}_s0"
        d = tmp_path / "rounds" / name
        d.mkdir(parents=True)
        rows = [{"step": s, "kappa/max": R ** 0.5, "kappa/mean": R ** 0.5, "kappa_cos/mean": 0.5} for s in (1, 2, 3, 4)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        results.append({"kind": "rounds", "name": name, "scheme": "deeploop", "num_rounds": R, "seed": 0})
    table = alignment_table(results, tmp_path)
    assert "| deeploop | 1.00 -> 1.00 | 1.41 -> 1.41 | 2.00 -> 2.00 | 2.83 -> 2.83 | 0.50 | 0.50 | 0.38 |" in table
    assert plot_alignment(results, tmp_path, tmp_path / "k.png").stat().st_size > 0


@pytest.mark.parametrize("model", ["hrm", "trm"])
def test_reasoners_log_kappa_per_module_over_the_gradient_visible_visits(monkeypatch, tmp_path, model):
    """HRM: the last H-cycle's visits (C_L = 3 per L block, 1 per H block, so H's kappa is 1);
    TRM: the last recursion (n + 1 = 3 visits of each block). The trajectory is unchanged."""
    from tests.hrm_helpers import TINY_OVERRIDES, TRM_TINY_OVERRIDES, make_dataset, read_metrics, train_cli

    data = make_dataset(tmp_path / "data", num_tasks=4, num_aug=1, train_per_puzzle=3, test_per_puzzle=1, canvas=4)
    extra = ["model.num_l_cycles=3"] if model == "hrm" else ["model.num_l_cycles=2", "model.num_h_cycles=2"]
    base = TINY_OVERRIDES if model == "hrm" else TRM_TINY_OVERRIDES
    runs = {}
    for every in (0, 2):
        out = tmp_path / f"run{every}"
        assert train_cli(monkeypatch, data, out, "train.max_steps=4", f"diagnostics.kappa_every={every}", *extra,
                         base=base) == 0
        runs[every] = read_metrics(out)
    loss = {k: [r["train/loss"] for r in rows if "train/loss" in r] for k, rows in runs.items()}
    assert loss[0] == loss[2]
    logged = [r for r in runs[2] if "kappa/max" in r]
    assert [r["step"] for r in logged] == [1, 2, 4]
    r = logged[-1]
    assert r["kappa/visits"] == 3.0 and 0 <= r["kappa/max"] <= 3
    if model == "hrm":
        assert r["kappa/H/max"] == pytest.approx(1.0) and 0 <= r["kappa/L/max"] <= 3
        assert r["kappa/H.layers.0.attn"] == pytest.approx(1.0) and "kappa_cos/L.layers.0.mlp" in r
    else:
        assert "kappa/net.layers.0.attn" in r and "kappa/net.layers.1.mlp" in r
