"""Loop transitions (models/transitions.py): the registry, OperLoop's update rule and behaviour,
the Post-LN step core.Block writes out, and per-module exponents for HRM."""

from __future__ import annotations

import math

import pytest
import torch

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.core import BlockConfig, LoopedCore, RMSNorm, init_block_, make_block, rms_norm
from hrm_deeploop.models.gpt import GPT
from hrm_deeploop.models.hrm import HRM
from hrm_deeploop.models.model_config import GPTConfig, HRMConfig, TRMConfig
from hrm_deeploop.models.scaling import Residual, ScalingConfig, residual_for
from hrm_deeploop.models.transitions import TRANSITIONS, OperLoop, PreNorm, Transition
from hrm_deeploop.scales import describe


def make_blocks(n, *args, **kwargs):
    return [make_block(BlockConfig(*args, **kwargs)) for _ in range(n)]


def test_each_scheme_selects_its_transition():
    kinds = {"looped_eps": PreNorm, "operloop": OperLoop}
    for scheme, cls in kinds.items():
        (block,) = make_blocks(1, 16, 2, 2.0, False, residual_for(ScalingConfig(scheme=scheme), 4, 2, 2),
                               mlp_multiple=16)
        assert not block.post and type(block.attn_step) is cls and type(block.mlp_step) is cls
    for scheme in ("baseline", "deeploop"):  # the Post-LN step is the block's own forward
        (block,) = make_blocks(1, 16, 2, 2.0, False, residual_for(ScalingConfig(scheme=scheme), 4, 2, 2),
                               mlp_multiple=16)
        assert block.post and not hasattr(block, "attn_step")
    # post and pre own no parameters: checkpoints and the official key maps are unchanged
    (post,) = make_blocks(1, 16, 2, 2.0, False, Residual(), mlp_multiple=16)
    assert not any("_step" in n for n, _ in post.named_parameters())


def test_a_new_transition_is_one_class(monkeypatch):
    class Halfway(Transition):
        """x <- (x + f(x)) / 2, for this test."""

        def forward(self, x, f, norm):
            return (x + f(x)) / 2

    monkeypatch.setitem(TRANSITIONS, "halfway", lambda r: Halfway())
    (block,) = make_blocks(1, 16, 2, 2.0, False, Residual(norm="halfway"), mlp_multiple=16)
    init_block_(block)
    x = torch.randn(2, 5, 16)
    a = (x + block.self_attn(x)) / 2
    torch.testing.assert_close(block(x), (a + block.mlp(a)) / 2)


def test_operloop_update_by_hand():
    t = OperLoop(step=0.5, decay=0.1)
    norm = RMSNorm(8)
    x = torch.randn(3, 8, dtype=torch.float64) * 4
    target = lambda z: 0.3 * z.flip(-1)  # noqa: E731
    rms = lambda v, eps=1e-5: v.square().mean(-1, keepdim=True).add(eps).sqrt()  # noqa: E731
    r = rms(x)
    z = x / r
    tt = target(z) / rms(target(z))
    e = z - tt
    eta = 0.5 / (1 + rms(e, 0.0))
    u = z - eta * e
    torch.testing.assert_close(t(x, target, norm).double(), (1 - 0.1 * eta) * r * u / rms(u), rtol=1e-5, atol=1e-6)
    # a sublayer that agrees with the state (up to scale) leaves only the weight decay: eta = 1/2
    torch.testing.assert_close(t(x, lambda z: 3 * z, norm).double(), (1 - 0.05) * x, rtol=1e-5, atol=1e-5)


def test_operloop_stays_finite_over_many_rounds_and_learns_its_step():
    torch.manual_seed(0)
    res = residual_for(ScalingConfig(scheme="operloop"), 32, 2, 16)
    core = LoopedCore(BlockConfig(16, 2, 2.0, True, res, mlp_multiple=16), 2, num_rounds=16)
    blocks = list(core.layers)
    for b in blocks:
        init_block_(b)
    assert core.final_norm is not None  # the stream leaves unnormalised
    x = torch.randn(2, 6, 16, requires_grad=True)
    y = core(x)
    assert torch.isfinite(y).all() and abs(float(y.detach().square().mean()) - 1) < 0.1
    h = x.detach()
    with torch.no_grad():
        for block in blocks * 16:  # the stream's scale shrinks only by the decay: >= (1 - 0.05)^64
            h = block(h)
    assert float(h.square().mean().sqrt()) > 0.95 ** 64 * float(x.detach().square().mean().sqrt())
    y.square().sum().backward()
    assert blocks[0].attn_step.step_logit.grad is not None
    assert blocks[0].attn_step.step_logit.item() == pytest.approx(math.log(0.5 / 0.5))


def test_operloop_gpt_trains():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=32, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=3, mlp_multiple=16,
                      seq_len=16), ScalingConfig(scheme="operloop"))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    x = torch.arange(16).repeat(8, 1) % 7  # a learnable periodic stream
    losses = []
    for _ in range(40):
        loss = m(x, torch.roll(x, -1, 1))[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_per_module_exponents_for_hrm():
    cfg = HRMConfig(hidden_size=32, num_heads=2, num_h_layers=1, num_l_layers=1, expansion=2.0, mlp_multiple=16,
                    seq_len=8, vocab_size=12)
    m = HRM(cfg, ScalingConfig(scheme="power", p=0.5, p_h=0.25))
    n_g = 1 + 2 * 1  # K_H + C_L K_L
    assert m.H_level.layers[0].cfg.residual.alpha == pytest.approx((2 * n_g) ** 0.25)
    assert m.L_level.layers[0].cfg.residual.alpha == pytest.approx((2 * n_g) ** 0.5)
    rep = describe(cfg, ScalingConfig(scheme="deeploop", p_l=0.75))
    assert rep["modules"]["L"]["p"] == 0.75 and rep["modules"]["H"]["p"] == 0.5
    with pytest.raises(ConfigError, match="p_h / scaling.p_l are HRM's"):
        describe(TRMConfig(), ScalingConfig(scheme="deeploop", p_h=0.25))
    with pytest.raises(ConfigError, match="scaling.p_l=0.5: must be used with a Post-LN scheme"):
        ScalingConfig(scheme="looped_eps", p_l=0.5)


def test_post_norm_x_first_keeps_the_stream_layout():
    """The Post-LN step sums x + f, so a transposed stream (TRM's token mixing) keeps its layout;
    the reduction then runs in the reference's order."""
    xt = torch.randn(2, 8, 5).transpose(1, 2)
    f = torch.tanh(xt).contiguous()
    a = RMSNorm(8)(xt, f)
    assert a.stride() == xt.stride()
    assert torch.equal(a, rms_norm(xt + f))
    assert torch.equal(RMSNorm(8)(xt, f, 3.0), rms_norm(3.0 * xt + f))
