"""Looped GPT architecture: causality, parameter reuse across rounds, residual scaling, FLOPs."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.gpt import GPT, flops_per_token
from hrm_deeploop.models.model_config import GPTConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.lm import param_groups
from hrm_deeploop.training.loop import mfu
from tests.gpt_helpers import VOCAB, one_thread, tiny_model  # noqa: F401  (autouse)


@pytest.mark.parametrize("scheme", ["baseline", "deeploop", "looped_eps"])
def test_causal(scheme):
    torch.manual_seed(0)
    model = GPT(tiny_model(num_rounds=2), ScalingConfig(scheme=scheme)).eval()
    x = torch.randint(0, VOCAB, (2, 24))
    y = x.clone()
    y[:, 12:] = torch.randint(0, VOCAB, (2, 12))  # change the future only
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (2, 24, VOCAB)
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-5)
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-3


def test_param_count_independent_of_rounds():
    counts = {r: GPT(tiny_model(num_rounds=r), ScalingConfig(scheme="deeploop")).num_params() for r in (1, 3, 7)}
    assert len(set(counts.values())) == 1, counts


def test_gradient_from_all_rounds_accumulates_into_one_tensor():
    """The looped model's gradient equals the sum over rounds of an untied unrolled copy's gradients."""
    torch.manual_seed(0)
    R = 3
    model = GPT(tiny_model(num_rounds=R), ScalingConfig(scheme="deeploop"))
    x = torch.randint(0, VOCAB, (2, 16))
    y = torch.randint(0, VOCAB, (2, 16))
    _, loss = model(x, y)
    loss.backward()

    copies = [copy.deepcopy(model.core.layers) for _ in range(R)]  # untied unrolled stack
    h = model.embed_norm(model.embed_tokens(x))
    rope = model.rotary(16)
    for layers in copies:
        for block in layers:
            h = block(h, rope)
    loss2 = F.cross_entropy(F.linear(h, model.embed_tokens.weight).view(-1, VOCAB), y.view(-1))
    torch.testing.assert_close(loss2, loss)
    model.zero_grad()
    loss2.backward()
    looped = {n: p for n, p in model.core.layers.named_parameters()}
    model.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    for name, p in looped.items():
        summed = sum(dict(c.named_parameters())[name].grad for c in copies)
        torch.testing.assert_close(p.grad, summed, rtol=1e-4, atol=1e-6)
        assert p.grad.abs().sum() > 0


def test_deeploop_alpha_beta_in_every_block():
    K, R = 2, 3
    N = K * R
    torch.manual_seed(0)
    base = GPT(tiny_model(num_blocks=K, num_rounds=R), ScalingConfig(scheme="baseline"))
    torch.manual_seed(0)
    deep = GPT(tiny_model(num_blocks=K, num_rounds=R), ScalingConfig(scheme="deeploop"))
    alpha, beta = (2 * N) ** 0.5, (8 * N) ** -0.5
    # beta is an init gain on the residual-branch matrices; the tied embedding is untouched
    torch.testing.assert_close(deep.embed_tokens.weight, base.embed_tokens.weight)
    for bb, bd in zip(base.core.layers, deep.core.layers):
        assert bd.cfg.residual.alpha == pytest.approx(alpha) and bd.cfg.residual.beta == pytest.approx(beta)
        hd = 32
        qkv_b, qkv_d = bb.self_attn.qkv_proj.weight, bd.self_attn.qkv_proj.weight
        torch.testing.assert_close(qkv_d[: 2 * hd], qkv_b[: 2 * hd])  # q, k rows: never scaled
        torch.testing.assert_close(qkv_d[2 * hd:], beta * qkv_b[2 * hd:])  # v rows
        torch.testing.assert_close(bd.self_attn.o_proj.weight, beta * bb.self_attn.o_proj.weight)
        inner = bd.mlp.inner
        gu_b, gu_d = bb.mlp.gate_up_proj.weight, bd.mlp.gate_up_proj.weight
        torch.testing.assert_close(gu_d[:inner], gu_b[:inner])  # gate: not in the default targets
        torch.testing.assert_close(gu_d[inner:], beta * gu_b[inner:])  # up
        torch.testing.assert_close(bd.mlp.down_proj.weight, beta * bb.mlp.down_proj.weight)


def test_alpha_used_in_forward():
    """Post-LN step x <- RMSNorm(alpha*x + f(x)) with DeepLoop's alpha, checked on block 0 by hand."""
    torch.manual_seed(0)
    m = GPT(tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop"))
    b = m.core.layers[0]
    x = torch.randn(1, 8, 32)
    rope = m.rotary(8)
    a = b.cfg.residual.alpha
    assert a == pytest.approx(math.sqrt(2 * 4))
    h = F.rms_norm(a * x + b.self_attn(x, rope), (32,), b.attn_norm.weight, eps=1e-5)
    h = F.rms_norm(a * h + b.mlp(h), (32,), b.mlp_norm.weight, eps=1e-5)
    torch.testing.assert_close(b(x, rope), h, rtol=1e-5, atol=1e-5)


def test_tiny_model_overfits_a_batch():
    torch.manual_seed(0)
    model = GPT(tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop"))
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, VOCAB, (4, 32), generator=gen)
    y = torch.randint(0, VOCAB, (4, 32), generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    first = None
    for _ in range(80):
        _, loss = model(x, y)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.8  # ~ln(64) = 4.16 at init
    assert loss.item() < 0.5, (first, loss.item())


def test_activation_checkpointing_same_gradients():
    torch.manual_seed(0)
    a = GPT(tiny_model(num_rounds=3), ScalingConfig(scheme="deeploop"))
    b = GPT(tiny_model(num_rounds=3, activation_checkpointing=True), ScalingConfig(scheme="deeploop"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, VOCAB, (2, 16))
    for m in (a, b):
        m(x, x)[1].backward()
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=n)


def test_weight_decay_groups():
    m = GPT(tiny_model(), ScalingConfig())
    decay, no_decay = param_groups(m, 0.1)
    names = {id(p): n for n, p in m.named_parameters()}
    assert all(p.ndim == 2 for p in decay["params"])
    assert "embed_tokens.weight" in {names[id(p)] for p in no_decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))


def test_flop_counter_hand_computed():
    cfg = tiny_model(num_blocks=2, num_rounds=3)  # D=32, V=64, T=32, expansion 4, multiple 16
    # SwiGLU width: round(4*32*2/3) = 85 -> 96 (multiple of 16)
    block = 3 * 32 * 32 + 32 * 32 + 32 * 2 * 96 + 96 * 32  # qkv + o + gate_up + down = 13312
    matmuls = 6 * (2 * 3) * block  # K*R block visits, 6 FLOPs per weight per token (fwd+bwd)
    attention = 12 * (2 * 3) * 32 * 32  # 12 * L * T * D with L = K*R = 6
    head = 6 * 64 * 32
    assert block == 13312 and matmuls + attention + head == 565248
    assert flops_per_token(cfg) == 565248
    assert flops_per_token(cfg, training=False) == pytest.approx(565248 / 3)
    # R multiplies the block and attention terms only
    assert flops_per_token(tiny_model(num_blocks=2, num_rounds=1)) == 6 * 2 * block + 12 * 2 * 32 * 32 + head
    # 1000 tok/s x 565248 FLOP/token on 1 device of 1 GFLOP/s peak -> 56.5 %
    assert mfu(1000.0, 565248, 1e-3) == pytest.approx(0.565248)
    assert mfu(1000.0, 565248, 1e-3, world_size=2) == pytest.approx(0.282624)


def test_gpt2_small_param_count():
    """GPT-2 small looped: 12 blocks of 768 stored once (SwiGLU 2048 wide) + the tied 50304 x 768 table."""
    from hrm_deeploop.models.model_config import GPTConfig

    with torch.device("meta"):
        m = GPT(GPTConfig(num_rounds=3), ScalingConfig(scheme="deeploop"))
    per_block = 4 * 768 * 768 + 3 * 768 * 2048 + 2 * 768  # attn, SwiGLU, two norm gains
    assert m.num_params() == 12 * per_block + 50304 * 768 + 768  # + embedding norm gain


def test_gpt2_style_options_mlp_init_and_gains():
    """The paper leaves these open; each is configurable (docs/looped-gpt.md): GPT-2's GELU MLP,
    GPT-2's N(0, 0.02) init with projections / sqrt(2K), RMSNorm gains on or off."""
    import math

    from hrm_deeploop.models.core import GeluMLP
    from hrm_deeploop.models.gpt import flops_per_token

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=96, hidden_size=64, num_heads=4, num_blocks=3, num_rounds=2, seq_len=16,
                    mlp="gelu", init="gpt2", norm_weight=False)
    m = GPT(cfg, ScalingConfig(scheme="deeploop"))
    blk = m.core.layers[0]
    assert isinstance(blk.mlp, GeluMLP) and blk.mlp.inner == 256
    assert not any("norm" in n for n, _ in m.named_parameters())  # no gains
    beta = (8 * 6) ** -0.5
    q_std = float(blk.self_attn.qkv_proj.weight[:64].detach().std())
    o_std = float(blk.self_attn.o_proj.weight.detach().std())
    assert q_std == pytest.approx(0.02, rel=0.1)  # q, k: plain GPT-2 init, no beta
    assert o_std == pytest.approx(0.02 / math.sqrt(6) * beta, rel=0.1)  # projection / sqrt(2K), then beta
    assert float(blk.mlp.up_proj.weight.detach().std()) == pytest.approx(0.02 * beta, rel=0.1)
    # flops: GELU MLP 2 x 4D^2 per block instead of SwiGLU's 3 x D x inner
    per = flops_per_token(cfg)
    assert per == 6 * 2 * 3 * (4 * 64 * 64 + 2 * 64 * 256) + 12 * 3 * 2 * 16 * 64 + 6 * 96 * 64
    x = torch.randint(0, 96, (4, 16))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    first = None
    for _ in range(20):
        loss = m(x, torch.roll(x, -1, 1))[1]
        first = first or loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first - 0.5
    with pytest.raises(ConfigError, match="model.mlp='relu'"):
        GPTConfig(mlp="relu")
