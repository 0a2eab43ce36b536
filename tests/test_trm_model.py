"""TRM model: parameter counts at the reference's configs, init coverage, puzzle prefix, the
gradient window (the whole last recursion, nothing before), ACT halting rules, the mlp_t block,
every residual scheme, config errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.core import SeqMLPBlock
from hrm_deeploop.models.model_config import TRMConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.models.trm import TRM
from tests.hrm_helpers import random_batch as batch


def tiny_cfg(**kw) -> TRMConfig:
    base = dict(hidden_size=32, num_heads=2, expansion=2.0, mlp_multiple=16, num_layers=2, num_h_cycles=3,
                num_l_cycles=2, halt_max_steps=3, seq_len=16, vocab_size=12, num_puzzle_identifiers=5,
                puzzle_emb_len=4, forward_dtype="float32")
    base.update(kw)
    return TRMConfig(**base)


@pytest.mark.parametrize("kw, expected", [
    # Counted by building the reference's TinyRecursiveReasoningModel_ACTV1 + ACTLossHead at these
    # configs (sum of its parameters(): H_init/L_init and the puzzle table are buffers).
    (dict(), 6_829_058),  # ARC: vocab 12, 900 tokens, attention + RoPE (any L_cycles)
    (dict(pos_encodings="learned"), 7_298_050),  # + a (916, 512) position table
    (dict(mixer="mlp", pos_encodings="none", vocab_size=11, seq_len=81), 5_028_866),  # Sudoku, TRM-MLP
    (dict(vocab_size=11, seq_len=81), 6_828_034),  # Sudoku, attention
])
def test_param_count_at_reference_configs(kw, expected):
    with torch.device("meta"):  # shapes only
        m = TRM(TRMConfig(num_puzzle_identifiers=3, **kw))
    assert m.num_params() == expected
    assert m.total_len == 16 + m.cfg.seq_len  # 16 prefix positions (916 on ARC, 97 on Sudoku)


def test_init_covers_every_tensor_and_fails_on_a_missed_one():
    torch.manual_seed(0)
    m = TRM(tiny_cfg(hidden_size=64, pos_encodings="learned"))
    assert torch.all(m.q_head.weight == 0) and torch.all(m.q_head.bias == -5)
    assert torch.all(m.puzzle_emb.weights == 0) and not isinstance(m.puzzle_emb.weights, torch.nn.Parameter)
    assert {"H_init", "L_init", "puzzle_emb.weights"} <= set(m.state_dict()) and not m.H_init.requires_grad
    assert m.embed_tokens.embedding_weight.abs().max() <= 2.2737 / math.sqrt(64) + 1e-6
    qkv = m.net.layers[0].self_attn.qkv_proj.weight
    assert abs(qkv.std().item() * math.sqrt(64) - 1) < 0.05
    assert sorted(n.split(".")[0] for n, _ in m.named_parameters()) == sorted(
        ["embed_tokens", "lm_head", "q_head", "q_head", "embed_pos"] + ["net"] * 8)
    m.stray = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(AssertionError, match="stray"):
        m.init_weights()


def test_puzzle_prefix_first_position_carries_the_embedding_rest_zero():
    """puzzle_emb_len positions: the (ndim = D) embedding fills the first, the others are zeros."""
    torch.manual_seed(0)
    m = TRM(tiny_cfg(puzzle_emb_len=4))
    with torch.no_grad():
        m.puzzle_emb.weights.normal_()
    b = batch()
    x = m.input_embedding(b["inputs"], b["puzzle_identifiers"], track_puzzle_grad=False)
    assert x.shape == (4, 4 + 16, 32)
    D = 32
    torch.testing.assert_close(x[:, 0], math.sqrt(D) * m.puzzle_emb.weights[b["puzzle_identifiers"].long()])
    assert torch.all(x[:, 1:4] == 0)
    torch.testing.assert_close(x[:, 4:], math.sqrt(D) * m.embed_tokens.embedding_weight[b["inputs"].long()])
    # puzzle_emb_len 0: ceil(ndim / D) positions; no puzzle embedding: no prefix
    assert TRM(tiny_cfg(puzzle_emb_len=0, puzzle_emb_ndim=40)).total_len == 2 + 16
    m0 = TRM(tiny_cfg(puzzle_emb_ndim=0))
    assert m0.puzzle_emb is None and m0.total_len == 16
    m0(m0.initial_carry(b), b)


def test_gradient_window_is_the_whole_last_recursion():
    """Per segment T*(n+1) calls of the network, K block visits each; autograd reaches exactly the
    (n+1)*K visits of the last recursion, and the gradient equals the one of that recursion run
    from the detached states of the T-1 before it."""
    torch.manual_seed(0)
    T, n, K = 3, 2, 2
    m = TRM(tiny_cfg(num_h_cycles=T, num_l_cycles=n, num_layers=K, halt_max_steps=1)).train()
    visits, reached = [], []
    for k, block in enumerate(m.net.layers):
        def hook(mod, inp, out, k=k):
            i = len(visits)
            visits.append((k, out.requires_grad))
            if out.requires_grad:
                out.register_hook(lambda g, i=i: reached.append(i))
        block.register_forward_hook(hook)
    b = batch()
    _, out = m(m.initial_carry(b), b)
    assert len(visits) == T * (n + 1) * K
    assert [g for _, g in visits] == [False] * (T - 1) * (n + 1) * K + [True] * (n + 1) * K
    out["logits"].float().square().mean().backward()
    assert sorted(reached) == list(range((T - 1) * (n + 1) * K, T * (n + 1) * K))  # every visit of the last recursion
    g_model = {k: p.grad.clone() for k, p in m.net.named_parameters()}
    m.zero_grad()
    m.puzzle_emb.clear()
    # by hand: T-1 recursions without grad, then the last one with grad
    x = m.input_embedding(b["inputs"], b["puzzle_identifiers"], track_puzzle_grad=False)
    z_H, z_L, rope = m.H_init.expand(4, 20, -1), m.L_init.expand(4, 20, -1), m._rope()
    with torch.no_grad():
        for _ in range(T - 1):
            for _ in range(n):
                z_L = m.net(z_L, z_H + x, rope)
            z_H = m.net(z_H, z_L, rope)
    for _ in range(n):
        z_L = m.net(z_L, z_H + x, rope)
    z_H = m.net(z_H, z_L, rope)
    m.lm_head(z_H)[:, 4:].float().square().mean().backward()
    for k, p in m.net.named_parameters():
        torch.testing.assert_close(p.grad, g_model[k], msg=k)


def test_halting_rules_and_one_forward_per_step():
    """Default (no_ACT_continue): halt when Q(halt) > 0, no target-Q forward. act_continue: HRM's
    rule Q(halt) > Q(continue) and a second forward for the target."""
    torch.manual_seed(0)
    b = batch()
    for act_continue, halts, segments in ((False, True, 1), (True, False, 2)):
        m = TRM(tiny_cfg(halt_max_steps=4, halt_exploration_prob=0.0, act_continue=act_continue)).train()
        with torch.no_grad():
            m.q_head.bias.copy_(torch.tensor([1.0, 5.0]))  # Q(halt) > 0 but < Q(continue)
        calls = []
        m.net.register_forward_hook(lambda *a, calls=calls: calls.append(1))
        carry, out = m(m.initial_carry(b), b, torch.Generator().manual_seed(0))
        assert bool(carry.halted.all()) == halts and bool(carry.halted.any()) == halts
        assert ("target_q_continue" in out) == act_continue
        assert len(calls) == segments * m.cfg.num_h_cycles * (m.cfg.num_l_cycles + 1)
        m.puzzle_emb.clear()


def test_exploration_and_eval_run_halt_max_steps():
    torch.manual_seed(0)
    m = TRM(tiny_cfg(halt_max_steps=5, halt_exploration_prob=1.0)).train()
    with torch.no_grad():
        m.q_head.bias.copy_(torch.tensor([5.0, -5.0]))  # halt now, says Q
    b = batch(B=32)
    carry, _ = m(m.initial_carry(b), b, torch.Generator().manual_seed(1))
    assert not carry.halted.any()  # exploration (prob 1) forces at least 2 steps
    m.puzzle_emb.clear()
    m.eval()
    carry = m.initial_carry(b)
    for i in range(5):
        carry, out = m(carry, b)
        assert bool(carry.halted.all()) == (i == 4)  # eval ignores Q: exactly halt_max_steps
    _, out2 = m.predict(b)
    torch.testing.assert_close(out2["logits"], out["logits"])
    assert not carry.z_H.requires_grad


def _rms(x, eps=1e-5):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def _swiglu(x, mlp):
    gate, up = (x @ mlp.gate_up_proj.weight.T).chunk(2, -1)
    return (F.silu(gate) * up) @ mlp.down_proj.weight.T


@pytest.mark.parametrize("scheme", ["baseline", "deeploop"])
def test_mlp_mixer_block_by_hand(scheme):
    """TRM's mlp_t block: SwiGLU across the T positions, RMSNorm across T (on the transposed
    stream), then the channel SwiGLU with RMSNorm across D; alpha on both skips."""
    torch.manual_seed(0)
    m = TRM(tiny_cfg(mixer="mlp", pos_encodings="none"), ScalingConfig(scheme=scheme))
    blk = m.net.layers[0]
    assert isinstance(blk, SeqMLPBlock) and blk.mlp_t.gate_up_proj.weight.shape[1] == 20  # P + S
    a = blk.cfg.residual.alpha
    assert a == (1.0 if scheme == "baseline" else pytest.approx(math.sqrt(2 * 3 * 2)))  # N_g = (n+1)K = 6
    x = torch.randn(3, 20, 32)
    h = _rms(a * x.transpose(1, 2) + _swiglu(x.transpose(1, 2), blk.mlp_t)).transpose(1, 2)
    y = _rms(a * h + _swiglu(h, blk.mlp))
    torch.testing.assert_close(blk(x), y, atol=1e-5, rtol=1e-5)
    x2 = x.clone()
    x2[:, 7] += 1.0  # token mixing: a change at one position moves the others
    assert (blk(x2) - blk(x))[:, 3].abs().max() > 1e-4
    b = batch()
    m(m.initial_carry(b), b)


@pytest.mark.parametrize("scheme, p", [("baseline", None), ("deepnorm", None), ("deeploop", None), ("power", 0.4),
                                       ("looped_eps", None)])
@pytest.mark.parametrize("mixer", ["attention", "mlp"])
def test_every_residual_scheme_applies(scheme, p, mixer):
    torch.manual_seed(0)
    cfg = tiny_cfg(hidden_size=128, expansion=4.0, mlp_multiple=64, mixer=mixer, num_l_cycles=4)
    m = TRM(cfg, ScalingConfig(scheme=scheme, p=p))
    n_g = (4 + 1) * 2  # (n+1) K
    exp = {"baseline": 0.0, "deepnorm": 0.25, "deeploop": 0.5, "power": p}.get(scheme)
    for blk in m.net.layers:
        r = blk.cfg.residual
        if scheme == "looped_eps":
            assert r.norm == "pre" and r.eps == pytest.approx(1.0 / (5 * math.sqrt(2)))
            continue
        assert r.alpha == pytest.approx((2 * n_g) ** exp) and r.beta == pytest.approx((8 * n_g) ** -exp)
        lecun = 1 / math.sqrt(128)
        assert blk.mlp.down_proj.weight.std().item() == pytest.approx(r.beta / math.sqrt(blk.mlp.inner), rel=0.05)
        if mixer == "attention":
            assert blk.self_attn.o_proj.weight.std().item() == pytest.approx(r.beta * lecun, rel=0.05)
    assert (m.net.final_norm is not None) == (scheme == "looped_eps")
    b = batch()
    _, out = m(m.initial_carry(b), b)
    assert torch.isfinite(out["logits"]).all()
    m.puzzle_emb.clear()


@pytest.mark.parametrize("kw, key", [
    (dict(mixer="conv"), "model.mixer='conv'"),
    (dict(puzzle_emb_len=1, puzzle_emb_ndim=64), "model.puzzle_emb_len=1"),
    (dict(pos_encodings="alibi"), "model.pos_encodings"),
    (dict(num_l_cycles=0), "model.num_l_cycles=0"),
    (dict(hidden_size=30, num_heads=4), "model.hidden_size=30"),
])
def test_config_errors_name_the_key(kw, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        tiny_cfg(**kw)
    tiny_cfg(mixer="mlp", hidden_size=30, num_heads=4)  # no attention: heads need not divide
