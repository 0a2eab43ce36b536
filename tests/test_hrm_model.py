"""HRM model: parameter count, init, baseline == plain Post-LN HRM reference, DeepLoop alpha/beta,
one-step gradient reach, ACT halting and carry, sparse puzzle-embedding gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.models.hrm import HRM
from hrm_deeploop.models.model_config import HRMConfig
from hrm_deeploop.models.scaling import ScalingConfig
from tests.hrm_helpers import random_batch as batch


def tiny_cfg(**kw) -> HRMConfig:
    base = dict(hidden_size=32, num_heads=2, expansion=2.0, mlp_multiple=16, num_h_layers=1, num_l_layers=2,
                num_h_cycles=2, num_l_cycles=2, halt_max_steps=3, seq_len=16, vocab_size=12,
                num_puzzle_identifiers=5, forward_dtype="float32")
    base.update(kw)
    return HRMConfig(**base)


def test_param_count_at_defaults():
    with torch.device("meta"):  # shapes only: no 27M-parameter init on the shared CPU
        assert HRM(HRMConfig(num_puzzle_identifiers=3)).num_params() == 27_276_290
        assert HRM(HRMConfig(num_puzzle_identifiers=3, pos_encodings="learned")).num_params() == 27_737_602


def test_init():
    torch.manual_seed(0)
    m = HRM(tiny_cfg(hidden_size=64, num_puzzle_identifiers=7))
    assert torch.all(m.q_head.weight == 0) and torch.all(m.q_head.bias == -5)
    assert torch.all(m.puzzle_emb.weights == 0) and not isinstance(m.puzzle_emb.weights, torch.nn.Parameter)
    assert not m.H_init.requires_grad and "H_init" in m.state_dict()
    w = m.embed_tokens.embedding_weight
    assert w.abs().max() <= 2.2737 / math.sqrt(64) + 1e-6
    qkv = m.L_level.layers[0].self_attn.qkv_proj.weight
    assert abs(qkv.std().item() * math.sqrt(64) - 1) < 0.05


# ---- a plain Post-LN HRM written from the spec, independent of core.Block ----------------------

def _rms(x, eps=1e-5):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def _rope_tables(T, hd, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    f = torch.outer(torch.arange(T).float(), inv)
    e = torch.cat([f, f], -1)
    return e.cos(), e.sin()


def _rot(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def _ref_block(h, sd, pre, heads, alpha, cos, sin):
    B, T, D = h.shape
    hd = D // heads
    qkv = (h @ sd[pre + "self_attn.qkv_proj.weight"].T).view(B, T, 3, heads, hd)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, T, hd)
    q, k = _rot(q, cos, sin), _rot(k, cos, sin)
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1)
    o = (att @ v).transpose(1, 2).reshape(B, T, D) @ sd[pre + "self_attn.o_proj.weight"].T
    h = _rms(alpha * h + o)
    gate, up = (h @ sd[pre + "mlp.gate_up_proj.weight"].T).chunk(2, -1)
    return _rms(alpha * h + (F.silu(gate) * up) @ sd[pre + "mlp.down_proj.weight"].T)


def _ref_module(z, u, sd, level, n, heads, alpha, cos, sin):
    z = z + u
    for i in range(n):
        z = _ref_block(z, sd, f"{level}.layers.{i}.", heads, alpha, cos, sin)
    return z


def ref_segment(sd, cfg, z_H, z_L, b, alpha=1.0):
    """Spec 3.2-3.4: embeddings, then for each H cycle C_L L updates and one H update."""
    D = cfg.hidden_size
    x = sd["embed_tokens.embedding_weight"][b["inputs"].long()]
    x = torch.cat([sd["puzzle_emb.weights"][b["puzzle_identifiers"].long()][:, None], x], 1) * math.sqrt(D)
    cos, sin = _rope_tables(x.shape[1], D // cfg.num_heads)
    for _ in range(cfg.num_h_cycles):
        for _ in range(cfg.num_l_cycles):
            z_L = _ref_module(z_L, z_H + x, sd, "L_level", cfg.num_l_layers, cfg.num_heads, alpha, cos, sin)
        z_H = _ref_module(z_H, z_L, sd, "H_level", cfg.num_h_layers, cfg.num_heads, alpha, cos, sin)
    logits = (z_H @ sd["lm_head.weight"].T)[:, 1:]
    q = z_H[:, 0] @ sd["q_head.weight"].T + sd["q_head.bias"]
    return logits, q


@pytest.mark.parametrize("scheme", ["baseline", "deeploop"])
def test_matches_plain_post_ln_reference(scheme):
    torch.manual_seed(0)
    cfg = tiny_cfg()
    m = HRM(cfg, ScalingConfig(scheme=scheme)).eval()
    with torch.no_grad():
        m.puzzle_emb.weights.normal_()  # nonzero puzzle rows, to check the prefix slot
        m.q_head.weight.normal_(0, 0.1)
    b = batch()
    sd = {k: v.detach() for k, v in m.state_dict().items()}
    carry = m.initial_carry(b)
    carry, out = m(carry, b)
    T = cfg.seq_len + 1
    z0_H = sd["H_init"].expand(4, T, -1)
    z0_L = sd["L_init"].expand(4, T, -1)
    alpha = 1.0 if scheme == "baseline" else math.sqrt(2 * (1 + 2 * 2))  # N_g = K_H + C_L*K_L = 5
    logits, q = ref_segment(sd, cfg, z0_H, z0_L, b, alpha)
    torch.testing.assert_close(out["logits"], logits, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out["q_halt_logits"], q[:, 0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out["q_continue_logits"], q[:, 1], atol=2e-5, rtol=1e-4)
    # the second segment continues from the carried state
    _, out2 = m(carry, b)
    logits2, _ = ref_segment(sd, cfg, carry.z_H, carry.z_L, b, alpha)
    torch.testing.assert_close(out2["logits"], logits2, atol=2e-5, rtol=1e-4)


def test_deeploop_alpha_beta_in_every_block():
    torch.manual_seed(0)
    cfg = tiny_cfg(hidden_size=128, num_heads=2, expansion=4.0, mlp_multiple=64, num_h_layers=2, num_l_layers=2)
    m = HRM(cfg, ScalingConfig(scheme="deeploop"))
    n_g = 2 + 2 * 2
    alpha, beta = math.sqrt(2 * n_g), 1 / math.sqrt(8 * n_g)
    blocks = list(m.H_level.layers) + list(m.L_level.layers)
    assert len(blocks) == 4
    D = cfg.hidden_size
    for blk in blocks:
        assert blk.cfg.residual.alpha == pytest.approx(alpha) and blk.cfg.residual.beta == pytest.approx(beta)
        qkv = blk.self_attn.qkv_proj.weight
        q_std, k_std, v_std = (qkv[i * D:(i + 1) * D].std().item() for i in range(3))
        lecun = 1 / math.sqrt(D)
        assert q_std == pytest.approx(lecun, rel=0.05) and k_std == pytest.approx(lecun, rel=0.05)
        assert v_std == pytest.approx(beta * lecun, rel=0.05)
        assert blk.self_attn.o_proj.weight.std().item() == pytest.approx(beta * lecun, rel=0.05)
        inner = blk.mlp.inner
        gu = blk.mlp.gate_up_proj.weight
        assert gu[:inner].std().item() == pytest.approx(lecun, rel=0.05)  # gate: not a beta target
        assert gu[inner:].std().item() == pytest.approx(beta * lecun, rel=0.05)
        assert blk.mlp.down_proj.weight.std().item() == pytest.approx(beta / math.sqrt(inner), rel=0.05)
    # baseline: alpha = beta = 1
    base = HRM(cfg, ScalingConfig(scheme="baseline"))
    assert all(b.cfg.residual.alpha == 1.0 and b.cfg.residual.beta == 1.0
               for b in list(base.H_level.layers) + list(base.L_level.layers))
    # autograd convention: N = K_H + K_L
    auto = HRM(cfg, ScalingConfig(scheme="deeploop", hrm_depth="autograd"))
    assert auto.H_level.layers[0].cfg.residual.alpha == pytest.approx(math.sqrt(2 * 4))


def test_one_step_gradient_reach():
    """Per segment: C_H*C_L L calls and C_H H calls; only the last L and the last H carry grad."""
    torch.manual_seed(0)
    cfg = tiny_cfg(num_h_cycles=3, num_l_cycles=2, halt_max_steps=1)  # no target-Q segment
    m = HRM(cfg).train()
    calls = {"H": [], "L": []}
    for name, core in (("H", m.H_level), ("L", m.L_level)):
        core.register_forward_hook(lambda mod, inp, out, name=name: calls[name].append(out.requires_grad))
    b = batch()
    carry, out = m(m.initial_carry(b), b)
    assert calls["L"] == [False] * 5 + [True]
    assert calls["H"] == [False] * 2 + [True]
    out["logits"].float().square().mean().backward()
    for n, p in m.named_parameters():
        if n.startswith(("H_level", "L_level", "embed_tokens", "lm_head")):
            assert p.grad is not None and p.grad.abs().sum() > 0, n
    assert not carry.z_H.requires_grad and not carry.z_L.requires_grad
    # The gradient equals the one through only the last L and H call, from detached states.
    ids, g = m.puzzle_emb.take_grads()
    assert g.shape == (4, cfg.hidden_size) and g.abs().sum() > 0 and torch.equal(ids, b["puzzle_identifiers"].long())


def test_gradient_equals_detached_last_calls():
    torch.manual_seed(0)
    cfg = tiny_cfg(halt_max_steps=1)
    m = HRM(cfg).train()
    b = batch()
    carry = m.initial_carry(b)
    _, out = m(carry, b)
    out["logits"].float().sum().backward()
    g_model = m.L_level.layers[0].mlp.down_proj.weight.grad.clone()
    m.zero_grad()
    m.puzzle_emb.clear()
    # manual: run everything but the last L/H without grad, then the last two calls with grad
    z_H = m.H_init.expand(4, 17, -1)
    z_L = m.L_init.expand(4, 17, -1)
    x = m.input_embedding(b["inputs"], b["puzzle_identifiers"], track_puzzle_grad=False)
    rope = m._rope()
    with torch.no_grad():  # L, L, H, L | then L, H with grad
        z_L = m.L_level(z_L, z_H + x, rope)
        z_L = m.L_level(z_L, z_H + x, rope)
        z_H = m.H_level(z_H, z_L, rope)
        z_L = m.L_level(z_L, z_H + x, rope)
    z_L = m.L_level(z_L, z_H + x, rope)
    z_H = m.H_level(z_H, z_L, rope)
    m.lm_head(z_H)[:, 1:].sum().backward()
    torch.testing.assert_close(m.L_level.layers[0].mlp.down_proj.weight.grad, g_model)


def test_eval_runs_halt_max_steps():
    torch.manual_seed(0)
    m = HRM(tiny_cfg(halt_max_steps=4)).eval()
    with torch.no_grad():
        m.q_head.bias.copy_(torch.tensor([10.0, -10.0]))  # Q says "halt now": eval must ignore it
    b = batch()
    carry = m.initial_carry(b)
    for i in range(4):
        carry, out = m(carry, b)
        assert torch.all(carry.steps == i + 1)
        assert bool(carry.halted.all()) == (i == 3)
        assert "target_q_continue" not in out
    carry2, out2 = m.predict(b)
    torch.testing.assert_close(out2["logits"], out["logits"])


def test_train_halting_and_carry():
    torch.manual_seed(0)
    cfg = tiny_cfg(halt_max_steps=3, halt_exploration_prob=0.0)
    m = HRM(cfg).train()
    b1, b2 = batch(seed=1), batch(seed=2)
    g = torch.Generator().manual_seed(0)
    carry = m.initial_carry(b1)
    carry, out = m(carry, b1, g)  # q_halt = q_continue = -5 at init: no greedy halt
    assert "target_q_continue" in out and out["target_q_continue"].shape == (4,)
    assert not carry.halted.any() and torch.all(carry.steps == 1)
    z_H = carry.z_H.clone()
    carry, _ = m(carry, b2, g)  # not halted: keeps b1's rows, b2 is dropped
    assert torch.equal(carry.data["inputs"], b1["inputs"]) and not torch.equal(carry.z_H, z_H)
    carry, _ = m(carry, b2, g)
    assert carry.halted.all() and torch.all(carry.steps == 3)  # every slot halts at halt_max_steps
    carry, _ = m(carry, b2, g)  # halted slots restart on the new rows
    assert torch.equal(carry.data["inputs"], b2["inputs"]) and torch.all(carry.steps == 1)
    m.puzzle_emb.clear()


def test_greedy_halt_and_exploration():
    torch.manual_seed(0)
    cfg = tiny_cfg(halt_max_steps=8, halt_exploration_prob=1.0)
    m = HRM(cfg).train()
    with torch.no_grad():
        m.q_head.bias.copy_(torch.tensor([5.0, -5.0]))  # greedy: halt immediately
    b = batch(B=64)
    carry = m.initial_carry(b)
    g = torch.Generator().manual_seed(1)
    carry, _ = m(carry, b, g)
    # exploration (prob 1) forces min_halt in [2, 8] > 1: nobody halts at step 1
    assert not carry.halted.any()
    m.cfg.halt_exploration_prob = 0.0
    carry, _ = m(m.initial_carry(b), b, g)
    assert carry.halted.all()
    # the generator alone decides exploration
    m.cfg.halt_exploration_prob = 0.5

    def halts(seed):
        c = m.initial_carry(b)
        gen = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(3):
            c, _ = m(c, b, gen)
            out.append(c.halted.clone())
        return torch.stack(out)

    assert torch.equal(halts(3), halts(3))
    m.puzzle_emb.clear()


def test_puzzle_embedding_eval_untracked_and_learned_pos():
    torch.manual_seed(0)
    m = HRM(tiny_cfg(pos_encodings="learned")).eval()
    b = batch()
    with torch.no_grad():
        m(m.initial_carry(b), b)
    assert m.puzzle_emb.take_grads() is None
    assert m.embed_pos.embedding_weight.shape == (17, 32)
    m0 = HRM(tiny_cfg(puzzle_emb_ndim=0))
    assert m0.puzzle_emb is None and m0.total_len == 16
    m0(m0.initial_carry(b), b)


def test_token_embedding_backward_is_deterministic():
    """Duplicate ids must sum in a fixed order (weight[ids]'s backward did not, across threads),
    or a resumed run in a new process drifts from the uninterrupted one."""
    from hrm_deeploop.models.act import Embedding

    torch.manual_seed(0)
    emb = Embedding(12, 32)
    torch.nn.init.normal_(emb.embedding_weight)
    ids = torch.randint(0, 12, (4, 900))
    g = torch.randn(4, 900, 32)
    grads = []
    for _ in range(10):
        emb.embedding_weight.grad = None
        emb(ids, torch.float32).backward(g)
        grads.append(emb.embedding_weight.grad.clone())
    assert all(torch.equal(grads[0], x) for x in grads[1:])
