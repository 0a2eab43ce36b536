"""The shared looped-block core against naive references."""

import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.models.core import (
    Attention,
    Block,
    BlockConfig,
    LoopedCore,
    Rotary,
    apply_rope,
    init_block_,
    make_block,
    rms_norm,
    swiglu_width,
    trunc_normal_,
)
from hrm_deeploop.models.model_config import GPTConfig
from hrm_deeploop.models.scaling import Residual, ScalingConfig, alpha_beta, model_depth, module_residuals

torch.set_grad_enabled(True)



def make_blocks(n, *args, **kwargs):
    """n blocks of BlockConfig(*args, **kwargs), initialised as a model's init_weights does it."""
    blocks = [make_block(BlockConfig(*args, **kwargs)) for _ in range(n)]
    for b in blocks:
        init_block_(b)
    return blocks


def looped(n, *args, num_rounds=1, checkpoint_rounds=False, **kwargs):
    """A LoopedCore of n blocks of BlockConfig(*args, **kwargs), each initialised by init_block_."""
    core = LoopedCore(BlockConfig(*args, **kwargs), n, num_rounds, checkpoint_rounds)
    for b in core.layers:
        init_block_(b)
    return core


def naive_rms(x, w=None, eps=1e-5):
    out = torch.empty_like(x)
    for idx in range(x.shape[0]):
        row = x[idx]
        out[idx] = row / torch.sqrt((row**2).sum() / row.numel() + eps)
    return out * w if w is not None else out


def test_rms_norm_matches_naive():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 33, generator=g, dtype=torch.float64)
    w = torch.randn(33, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rms_norm(x, None, 1e-5), naive_rms(x))
    torch.testing.assert_close(rms_norm(x, w, 1e-5), naive_rms(x, w))
    xb = x.to(torch.bfloat16)
    assert rms_norm(xb).dtype == torch.bfloat16


def naive_rope(x, theta=10000.0):
    """x: (T, D). Rotate pairs (i, i + D/2) by angle t * theta^(-2i/D)."""
    T, D = x.shape
    out = x.clone()
    for t in range(T):
        for i in range(D // 2):
            ang = t * theta ** (-2 * i / D)
            a, b = x[t, i], x[t, i + D // 2]
            out[t, i] = a * math.cos(ang) - b * math.sin(ang)
            out[t, i + D // 2] = b * math.cos(ang) + a * math.sin(ang)
    return out


def test_rope_matches_naive_and_is_relative():
    g = torch.Generator().manual_seed(1)
    T, D = 6, 8
    q = torch.randn(1, T, 1, D, generator=g, dtype=torch.float64)
    k = torch.randn(1, T, 1, D, generator=g, dtype=torch.float64)
    cos, sin = Rotary(D, 16)(T)
    q_r, k_r = apply_rope(q, k, cos.double(), sin.double())
    torch.testing.assert_close(q_r[0, :, 0], naive_rope(q[0, :, 0]), atol=1e-5, rtol=1e-5)
    # relative: <R_s q, R_t k> depends on t - s only
    v = torch.randn(D, generator=g, dtype=torch.float64)
    w = torch.randn(D, generator=g, dtype=torch.float64)
    qq = v.expand(1, T, 1, D).clone()
    kk = w.expand(1, T, 1, D).clone()
    a, b = apply_rope(qq, kk, cos.double(), sin.double())
    dots = torch.einsum("d,d->", a[0, 1, 0], b[0, 3, 0]), torch.einsum("d,d->", a[0, 2, 0], b[0, 4, 0])
    torch.testing.assert_close(dots[0], dots[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_naive(causal):
    torch.manual_seed(0)
    B, T, dim, H = 2, 5, 16, 2
    attn = Attention(dim, H, causal=causal).double()
    x = torch.randn(B, T, dim, dtype=torch.float64)
    rope = tuple(t.double() for t in Rotary(dim // H, T)(T))
    y = attn(x, rope)
    D = dim // H
    qkv = x @ attn.qkv_proj.weight.T
    q, k, v = qkv.view(B, T, 3 * H, D).split(H, dim=2)
    q, k = apply_rope(q, k, *rope)
    out = torch.zeros(B, T, H, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            s = q[b, :, h] @ k[b, :, h].T / math.sqrt(D)
            if causal:
                s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            out[b, :, h] = torch.softmax(s, -1) @ v[b, :, h]
    ref = out.reshape(B, T, dim) @ attn.o_proj.weight.T
    torch.testing.assert_close(y, ref)


def test_swiglu_width_matches_hrm():
    assert swiglu_width(512, 4) == 1536


def test_trunc_normal_std_and_bounds():
    t = trunc_normal_(torch.empty(200_000), std=0.5)
    assert abs(t.std().item() - 0.5) < 0.01
    assert t.abs().max().item() <= 2.2737 * 0.5 + 1e-4


def plain_post_ln_block(block: Block, x, rope):
    """HRM's block written out: h <- RMSNorm(h + Attn(h)); h <- RMSNorm(h + SwiGLU(h))."""
    a = block.self_attn
    B, T, dim = x.shape
    H, D = a.num_heads, a.head_dim
    q, k, v = (x @ a.qkv_proj.weight.T).view(B, T, 3 * H, D).split(H, dim=2)
    q, k = apply_rope(q, k, *rope)
    att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    x = naive_rms((x + att.transpose(1, 2).reshape(B, T, dim) @ a.o_proj.weight.T).reshape(-1, dim)).view(B, T, dim)
    gate, up = (x @ block.mlp.gate_up_proj.weight.T).chunk(2, -1)
    m = (F.silu(gate) * up) @ block.mlp.down_proj.weight.T
    return naive_rms((x + m).reshape(-1, dim)).view(B, T, dim)


def test_baseline_block_equals_plain_post_ln():
    torch.manual_seed(0)
    dim = 32
    (block,) = make_blocks(1, dim, 4, 2.0, False, Residual(), mlp_multiple=16)
    block = block.double()
    x = torch.randn(2, 9, dim, dtype=torch.float64)
    rope = tuple(t.double() for t in Rotary(8, 9)(9))
    torch.testing.assert_close(block(x, rope), plain_post_ln_block(block, x, rope))


def test_alpha_is_used_in_forward():
    torch.manual_seed(0)
    dim = 32
    (block,) = make_blocks(1, dim, 4, 2.0, False, Residual(alpha=3.0), mlp_multiple=16)
    (plain,) = make_blocks(1, dim, 4, 2.0, False, Residual(alpha=1.0), mlp_multiple=16)
    plain.load_state_dict(block.state_dict())  # the same weights; alpha lives in the config
    x = torch.randn(1, 4, dim)
    y3 = block(x)
    y1 = plain(x)
    assert not torch.allclose(y1, y3)
    # by hand: attention sublayer with alpha
    a = rms_norm(3.0 * x + block.self_attn(x))
    expect = rms_norm(3.0 * a + block.mlp(a))
    torch.testing.assert_close(y3, expect)


def test_beta_lands_on_exactly_the_intended_matrices():
    dim, heads = 256, 4
    beta = 0.1
    torch.manual_seed(0)
    (blk,) = make_blocks(1, dim, heads, 4.0, False, Residual(alpha=2.0, beta=beta))
    hd = dim
    inner = blk.mlp.inner
    qkv = blk.self_attn.qkv_proj.weight
    lecun_in = 1 / math.sqrt(dim)
    stds = {
        "q": qkv[:hd].std().item(), "k": qkv[hd:2 * hd].std().item(), "v": qkv[2 * hd:].std().item(),
        "o": blk.self_attn.o_proj.weight.std().item(),
        "gate": blk.mlp.gate_up_proj.weight[:inner].std().item(),
        "up": blk.mlp.gate_up_proj.weight[inner:].std().item(),
        "down": blk.mlp.down_proj.weight.std().item(),
    }
    expect = {"q": lecun_in, "k": lecun_in, "v": beta * lecun_in, "o": beta * lecun_in, "gate": lecun_in,
              "up": beta * lecun_in, "down": beta / math.sqrt(inner)}
    for name, s in stds.items():
        assert s == pytest.approx(expect[name], rel=0.05), name
    # configurable: gate included
    (blk2,) = make_blocks(1, dim, heads, 4.0, False,
                          Residual(alpha=2.0, beta=beta, beta_targets=("v", "o", "gate", "up", "down")))
    assert blk2.mlp.gate_up_proj.weight[:inner].std().item() == pytest.approx(beta * lecun_in, rel=0.05)


def test_looped_core_params_independent_of_R_and_grads_accumulate():
    torch.manual_seed(0)
    dim = 16
    res = Residual()
    counts = []
    for R in (1, 3, 5):
        torch.manual_seed(0)
        core = looped(2, dim, 2, 2.0, True, res, mlp_multiple=16, num_rounds=R)
        counts.append(sum(p.numel() for p in core.parameters()))
    assert len(set(counts)) == 1
    # gradient of the shared tensor == sum of the gradients of R untied copies
    torch.manual_seed(0)
    core = looped(1, dim, 2, 2.0, False, res, mlp_multiple=16, num_rounds=3).double()
    x = torch.randn(1, 5, dim, dtype=torch.float64)
    u = torch.randn(1, 5, dim, dtype=torch.float64)
    core(x, injection=u).square().sum().backward()
    shared_grad = core.layers[0].mlp.down_proj.weight.grad.clone()
    import copy
    copies = [copy.deepcopy(core.layers[0]) for _ in range(3)]
    for c in copies:
        c.zero_grad()
    h = x
    for c in copies:
        h = c(h + u)
    h.square().sum().backward()
    untied = sum(c.mlp.down_proj.weight.grad for c in copies)
    torch.testing.assert_close(shared_grad, untied)
    assert not torch.allclose(copies[0].mlp.down_proj.weight.grad, untied)  # each visit contributes


def test_looped_core_injection_and_rounds():
    torch.manual_seed(0)
    core = looped(2, 16, 2, 2.0, False, Residual(), mlp_multiple=16, num_rounds=2)
    x, u = torch.randn(1, 3, 16), torch.randn(1, 3, 16)
    h = x
    for _ in range(2):
        h = h + u
        for b in core.layers:
            h = b(h)
    torch.testing.assert_close(core(x, injection=u), h)


def test_deeploop_residuals_land_in_every_block():
    cfg = ScalingConfig(scheme="deeploop")
    d = model_depth(GPTConfig(num_blocks=3, num_rounds=4))
    res = module_residuals(cfg, d)["core"]
    blocks = make_blocks(3, 32, 2, 2.0, True, res, mlp_multiple=16)
    a, b = alpha_beta("deeploop", 12)
    assert all(bl.cfg.residual.alpha == pytest.approx(a) and bl.cfg.residual.beta == pytest.approx(b) for bl in blocks)


def test_pre_ln_looped_eps_block():
    torch.manual_seed(0)
    res = Residual(norm="pre", eps=0.25)
    core = looped(1, 16, 2, 2.0, True, res, mlp_multiple=16, num_rounds=2)
    x = torch.randn(1, 4, 16)
    blk = core.layers[0]
    h = x
    for _ in range(2):
        h = h + 0.25 * blk.self_attn(rms_norm(h))
        h = h + 0.25 * blk.mlp(rms_norm(h))
    torch.testing.assert_close(core(x), rms_norm(h))


def test_activation_checkpointing_same_grads():
    torch.manual_seed(0)
    a = looped(2, 16, 2, 2.0, True, Residual(alpha=2.0, beta=0.5), mlp_multiple=16, num_rounds=3)
    b = looped(2, 16, 2, 2.0, True, Residual(alpha=2.0, beta=0.5), mlp_multiple=16, num_rounds=3,
               checkpoint_rounds=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 5, 16)
    a(x).sum().backward()
    b(x).sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad)


@pytest.mark.parametrize("alpha", [10.0, 30.0, 100.0, 300.0])
def test_lemma1_rmsnorm_expansion(alpha):
    """RMSNorm(alpha x + z) = x + (z - <x,z>_d x)/alpha + O(RMS(z)^2/alpha^2) for RMS(x) = 1."""
    g = torch.Generator().manual_seed(0)
    d = 512
    x = torch.randn(d, generator=g, dtype=torch.float64)
    x = x / x.square().mean().sqrt()
    z = torch.randn(d, generator=g, dtype=torch.float64)
    lhs = rms_norm(alpha * x + z, eps=0.0)
    m = (x @ z) / d
    first_order = x + (z - m * x) / alpha
    err = (lhs - first_order).square().mean().sqrt().item()
    rms_z = z.square().mean().sqrt().item()
    assert err <= 2.0 * (rms_z / alpha) ** 2  # second-order remainder
    zeroth = (lhs - x).square().mean().sqrt().item()
    assert zeroth > 5 * err  # the 1/alpha term is really the leading correction
