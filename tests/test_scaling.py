"""Depth accounting and alpha/beta schemes (paper sections 2-4)."""

import math

import pytest

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.model_config import GPTConfig, HRMConfig, TRMConfig
from hrm_deeploop.models.scaling import (
    ScalingConfig,
    alpha_beta,
    model_depth,
    module_residuals,
    residual_for,
    tape_layers,
)


def hrm_depth(k_h, k_l, c, c_l, convention="paper", per_module=False):
    cfg = HRMConfig(num_h_layers=k_h, num_l_layers=k_l, num_h_cycles=c, num_l_cycles=c_l)
    return model_depth(cfg, ScalingConfig(hrm_depth=convention, per_module=per_module))


def trm_depth(k, t, n, convention="gradient"):
    return model_depth(TRMConfig(num_layers=k, num_h_cycles=t, num_l_cycles=n), ScalingConfig(trm_depth=convention))


@pytest.mark.parametrize("n", [1, 3, 12, 36, 100])
def test_scheme_table(n):
    assert alpha_beta("baseline", n) == (1.0, 1.0)
    a, b = alpha_beta("deepnorm", n)
    assert a == pytest.approx((2 * n) ** 0.25) and b == pytest.approx((8 * n) ** -0.25)
    assert 2 * n * (b / a) ** 2 == pytest.approx(0.5)  # DeepNorm's M (beta/alpha)^2 = 1/2
    a, b = alpha_beta("deeploop", n)
    assert a == pytest.approx(math.sqrt(2 * n)) and b == pytest.approx(1 / math.sqrt(8 * n))
    assert b / a == pytest.approx(1 / (4 * n))  # paper eq. 6
    a, b = alpha_beta("power", n, p=0.37)
    assert a == pytest.approx((2 * n) ** 0.37) and b == pytest.approx((8 * n) ** -0.37)


def test_power_p_half_equals_deeploop_and_quarter_equals_deepnorm():
    assert alpha_beta("power", 7, 0.5) == pytest.approx(alpha_beta("deeploop", 7))
    assert alpha_beta("power", 7, 0.25) == pytest.approx(alpha_beta("deepnorm", 7))


def test_hrm_defaults_paper_convention():
    d = hrm_depth(4, 4, 2, 2)
    assert (d.M, d.N, d.M_g, d.N_g) == (48, 24, 24, 12)
    res = module_residuals(ScalingConfig(scheme="deeploop"), d)
    for name in ("H", "L"):
        assert res[name].alpha == pytest.approx(4.898979, abs=1e-6)
        assert res[name].beta == pytest.approx(0.102062, abs=1e-6)


def test_hrm_autograd_convention_counts_one_L_and_one_H_call():
    d = hrm_depth(4, 4, 2, 2, convention="autograd")
    assert (d.M_g, d.N_g) == (16, 8)


def test_hrm_formulas_general():
    k_h, k_l, c, c_l = 3, 5, 4, 6
    d = hrm_depth(k_h, k_l, c, c_l)
    assert d.M == 2 * c * (k_h + c_l * k_l)
    assert d.M_g == 2 * (k_h + c_l * k_l) and d.N_g == d.M_g // 2
    assert d.M == c * d.M_g  # paper: M = C * M_g


def test_per_module_assignment():
    d = hrm_depth(4, 4, 2, 2, per_module=True)
    assert d.modules["H"]["N"] == 4 and d.modules["L"]["N"] == 8
    res = module_residuals(ScalingConfig(scheme="deeploop", per_module=True), d)
    assert res["H"].alpha == pytest.approx(math.sqrt(8)) and res["L"].alpha == pytest.approx(math.sqrt(16))


def test_loop_depth_and_looped_eps():
    d = model_depth(GPTConfig(num_blocks=12, num_rounds=3))
    assert (d.N, d.M, d.N_g, d.M_g) == (36, 72, None, None)
    r = residual_for(ScalingConfig(scheme="looped_eps", eps_lambda=2.0), 36, 12, 3)
    assert r.norm == "pre" and r.eps == pytest.approx(2.0 / (3 * math.sqrt(12)))


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="scaling.scheme"):
        ScalingConfig(scheme="deepnet")
    with pytest.raises(ConfigError, match="scaling.p"):
        ScalingConfig(scheme="power")
    with pytest.raises(ConfigError, match="beta_targets"):
        ScalingConfig(beta_targets=["q"])
    with pytest.raises(ConfigError, match="num_rounds"):
        GPTConfig(num_blocks=2, num_rounds=0)


@pytest.mark.parametrize("n, N, M, N_g, M_g", [(4, 30, 60, 10, 20),  # TRM on ARC and Maze: T=3, n=4, K=2
                                               (6, 42, 84, 14, 28)])  # TRM on Sudoku (and its default)
def test_trm_depth_at_the_paper_configs(n, N, M, N_g, M_g):
    d = trm_depth(2, 3, n)
    assert (d.N, d.M, d.N_g, d.M_g) == (N, M, N_g, M_g)
    assert d.modules == {"net": {"K": 2, "R": n + 1, "N": N_g}}  # each block revisited n+1 times with grad
    r = module_residuals(ScalingConfig(scheme="deeploop"), d)["net"]
    assert r.alpha == pytest.approx(math.sqrt(2 * N_g)) and r.beta == pytest.approx((8 * N_g) ** -0.5)


def test_trm_depth_conventions():
    k, t, n = 3, 4, 5
    assert trm_depth(k, t, n, "forward").modules["net"] == {"K": k, "R": t * (n + 1), "N": t * (n + 1) * k}
    assert trm_depth(k, t, n, "physical").modules["net"] == {"K": k, "R": 1, "N": k}
    d = trm_depth(k, t, n)
    assert d.M == t * d.M_g and d.N_g == (n + 1) * k  # forward = T x the gradient window
    with pytest.raises(ConfigError, match="trm_depth"):
        ScalingConfig(trm_depth="paper")
    with pytest.raises(ConfigError, match="per_module"):
        model_depth(TRMConfig(), ScalingConfig(per_module=True))


def test_tape_layers_are_the_gradient_windows():
    assert tape_layers(HRMConfig(num_h_layers=3, num_l_layers=5, num_l_cycles=4)) == 3 + 5  # one-step gradient
    assert tape_layers(TRMConfig(num_layers=2, num_l_cycles=6)) == 14  # the last recursion, (n+1) K
    assert tape_layers(GPTConfig(num_blocks=4, num_rounds=3)) == 12 and tape_layers(GPTConfig(num_blocks=4), 2) == 8
