"""URM model: parameter counts, init coverage (Q head, init_hidden, the convolution), ConvSwiGLU
by hand, the truncated gradient window (the last pass only, nothing before), ACT halting and
exploration, evaluation depth, DeepLoop's gains, config errors, `scales` and a tiny training run."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from hrm_deeploop.cli import compose
from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.core import ConvSwiGLU, SwiGLU
from hrm_deeploop.models.model_config import URMConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.models.urm import URM
from tests.hrm_helpers import make_dataset, read_metrics, train_cli
from tests.hrm_helpers import random_batch as batch

URM_TINY_OVERRIDES = [
    "experiment=urm_tiny_cpu", "logger=none", "device=cpu", "train.progress=false",
    "model.hidden_size=32", "model.halt_max_steps=2", "train.global_batch_size=8", "optim.warmup_steps=5",
]


def tiny_cfg(**kw) -> URMConfig:
    base = dict(hidden_size=32, num_heads=2, expansion=2.0, mlp_multiple=16, num_layers=2, num_h_cycles=3,
                num_l_cycles=2, halt_max_steps=3, seq_len=16, vocab_size=12, num_puzzle_identifiers=5,
                forward_dtype="float32")
    base.update(kw)
    return URMConfig(**base)


@pytest.mark.parametrize("kw, expected", [
    # Counted by building the reference's URM + ACTLossHead at these configs (sum of its
    # parameters(); init_hidden and the puzzle table are buffers): benchmarks/compare_reference_urm.py
    # prints it.
    (dict(), 13_663_234),  # ARC: vocab 12, 900 tokens, the published 4 layers
    (dict(vocab_size=11, seq_len=81), 13_662_210),  # Sudoku
])
def test_param_count_at_reference_configs(kw, expected):
    with torch.device("meta"):  # shapes only
        m = URM(URMConfig(num_puzzle_identifiers=3, **kw))
    assert m.num_params() == expected
    assert m.total_len == 1 + m.cfg.seq_len  # one puzzle position (ceil(512 / 512))


def test_init_covers_every_tensor_and_fails_on_a_missed_one():
    torch.manual_seed(0)
    m = URM(tiny_cfg(hidden_size=64))
    assert torch.all(m.q_head.weight == 0) and torch.all(m.q_head.bias == -5)
    assert torch.all(m.puzzle_emb.weights == 0) and not isinstance(m.puzzle_emb.weights, torch.nn.Parameter)
    assert {"init_hidden", "puzzle_emb.weights"} <= set(m.state_dict()) and not m.init_hidden.requires_grad
    assert "H_init" not in m.state_dict() and "L_init" not in m.state_dict()
    assert m.init_hidden.abs().max() <= 2.2737 + 1e-6 and m.init_hidden.std() > 0.5
    conv = m.net.layers[0].mlp.dwconv  # torch's Conv1d default: U(-1/sqrt(fan_in)), fan_in = kernel 2
    assert conv.weight.shape == (m.net.layers[0].mlp.inner, 1, 2) and conv.groups == m.net.layers[0].mlp.inner
    assert 0.5 < conv.weight.abs().max() * math.sqrt(2) <= 1 and conv.bias.abs().max() * math.sqrt(2) <= 1
    m.stray = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(AssertionError, match="stray"):
        m.init_weights()


def test_conv_swiglu_is_the_causal_width_2_convolution_by_hand():
    torch.manual_seed(0)
    mlp = ConvSwiGLU(16, 2.0, multiple=8)
    x = torch.randn(3, 5, 16)
    gate, up = mlp.gate_up_proj(x).chunk(2, dim=-1)
    h = F.silu(gate) * up  # (B, T, inner)
    w, b = mlp.dwconv.weight[:, 0], mlp.dwconv.bias  # (inner, 2), (inner,)
    prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)  # h_{t-1}, zero before the start
    expected = mlp.down_proj(F.silu(w[:, 0] * prev + w[:, 1] * h + b))
    torch.testing.assert_close(mlp(x), expected)
    plain = SwiGLU(16, 2.0, multiple=8)
    plain.load_state_dict({k: v for k, v in mlp.state_dict().items() if not k.startswith("dwconv")})
    assert not torch.allclose(plain(x), mlp(x))  # the convolution is in the path


def test_gradient_window_is_the_last_pass_only():
    """Per ACT step H*C_L rounds of K blocks; autograd reaches exactly the C_L*K visits of the last
    pass, and the gradient equals that pass's run from the detached state of the H-1 before it."""
    torch.manual_seed(0)
    H, C, K = 3, 2, 2
    m = URM(tiny_cfg(num_h_cycles=H, num_l_cycles=C, num_layers=K, halt_max_steps=1)).train()
    visits, reached = [], []
    for k, block in enumerate(m.net.layers):
        def hook(mod, inp, out, k=k):
            i = len(visits)
            visits.append(out.requires_grad)
            if out.requires_grad:
                out.register_hook(lambda g, i=i: reached.append(i))
        block.register_forward_hook(hook)
    b = batch()
    carry, out = m(m.initial_carry(b), b)
    assert len(visits) == H * C * K
    assert visits == [False] * (H - 1) * C * K + [True] * C * K
    assert carry.z_L.shape == (4, 0, 32) and not carry.z_H.requires_grad
    out["logits"].float().square().mean().backward()
    assert sorted(reached) == list(range((H - 1) * C * K, H * C * K))
    g_model = {k: p.grad.clone() for k, p in m.net.named_parameters()}
    m.zero_grad()
    m.puzzle_emb.clear()
    x = m.input_embedding(b["inputs"], b["puzzle_identifiers"], track_puzzle_grad=False)
    z, rope = m.init_hidden.expand(4, 17, -1), m._rope()
    with torch.no_grad():
        for _ in range(H - 1):
            for _ in range(C):
                z = z + x
                for block in m.net.layers:
                    z = block(z, rope)
    for _ in range(C):
        z = z + x
        for block in m.net.layers:
            z = block(z, rope)
    m.lm_head(z)[:, 1:].float().square().mean().backward()
    for k, p in m.net.named_parameters():
        torch.testing.assert_close(p.grad, g_model[k], msg=k)


def test_carry_keeps_its_strides_across_steps():
    """A compiled step guards on the carry's strides: the initial carry must look like the one a
    step returns, or the second step recompiles (it did: z_L was a slice of a full tensor)."""
    m = URM(tiny_cfg())
    b = batch()
    c0 = m.initial_carry(b)
    c1, _ = m(c0, b, torch.Generator().manual_seed(0))
    for k in ("z_H", "z_L", "steps", "halted"):
        assert getattr(c0, k).shape == getattr(c1, k).shape and getattr(c0, k).stride() == getattr(c1, k).stride(), k


def test_halting_exploration_and_evaluation_depth():
    torch.manual_seed(0)
    b = batch(B=64, num_ids=5)
    m = URM(tiny_cfg(halt_max_steps=4, halt_exploration_prob=0.0)).train()
    calls = []
    m.net.register_forward_hook(lambda *a: calls.append(1))
    carry, out = m(m.initial_carry(b), b, torch.Generator().manual_seed(0))
    assert not carry.halted.any() and "target_q_continue" not in out  # Q(halt) = -5 at init; no target forward
    assert len(calls) == m.cfg.num_h_cycles  # one forward per step
    with torch.no_grad():
        m.q_head.bias.copy_(torch.tensor([1.0, 5.0]))  # Q(halt) > 0 though < Q(continue): URM halts
    carry, _ = m(m.initial_carry(b), b, torch.Generator().manual_seed(0))
    assert carry.halted.all()
    # exploration 1: every slot draws a minimum in [2, 4], so none halts at step 1
    m.cfg.halt_exploration_prob = 1.0
    carry, _ = m(m.initial_carry(b), b, torch.Generator().manual_seed(0))
    assert not carry.halted.any()
    ever = torch.zeros(64, dtype=torch.bool)
    for k in range(3):  # each slot halts at its drawn minimum (Q says halt), by halt_max_steps at the latest
        carry, _ = m(carry, b, torch.Generator().manual_seed(k + 1))
        assert torch.all(carry.steps[carry.halted & ~ever] >= 2)
        ever |= carry.halted
    assert ever.all() and not torch.all(carry.steps[carry.halted] == 4)  # the minima differ
    m.eval()  # evaluation: exactly halt_max_steps steps, Q not consulted
    carry, _ = m.predict(b)
    assert torch.all(carry.steps == 4) and carry.halted.all()


def test_deeploop_gains():
    torch.manual_seed(0)
    cfg = tiny_cfg(num_l_cycles=3, num_layers=2)
    base = URM(cfg)
    torch.manual_seed(0)
    deep = URM(cfg, ScalingConfig(scheme="deeploop"))
    n_g = 3 * 2  # C_L * K
    res = deep.net.layers[0].cfg.residual
    assert (deep.depth.N, deep.depth.N_g) == (3 * 3 * 2, n_g)
    assert res.alpha == pytest.approx(math.sqrt(2 * n_g)) and res.beta == pytest.approx((8 * n_g) ** -0.5)
    for bb, bd in zip(base.net.layers, deep.net.layers):
        hd = bb.self_attn.num_heads * bb.self_attn.head_dim
        qkv_b, qkv_d = bb.self_attn.qkv_proj.weight, bd.self_attn.qkv_proj.weight
        torch.testing.assert_close(qkv_d[:2 * hd], qkv_b[:2 * hd])  # q, k unscaled
        torch.testing.assert_close(qkv_d[2 * hd:], res.beta * qkv_b[2 * hd:])  # v
        torch.testing.assert_close(bd.self_attn.o_proj.weight, res.beta * bb.self_attn.o_proj.weight)
        inner = bb.mlp.inner
        torch.testing.assert_close(bd.mlp.gate_up_proj.weight[:inner], bb.mlp.gate_up_proj.weight[:inner])  # gate
        torch.testing.assert_close(bd.mlp.gate_up_proj.weight[inner:], res.beta * bb.mlp.gate_up_proj.weight[inner:])
        torch.testing.assert_close(bd.mlp.down_proj.weight, res.beta * bb.mlp.down_proj.weight)
        torch.testing.assert_close(bd.mlp.dwconv.weight, bb.mlp.dwconv.weight)  # the convolution: unscaled
    b = batch()
    _, ob = base.eval()(base.initial_carry(b), b)
    _, od = deep.eval()(deep.initial_carry(b), b)
    assert not torch.allclose(ob["logits"], od["logits"])


@pytest.mark.parametrize("kw, match", [
    (dict(mlp="gelu"), "model.mlp"),
    (dict(pos_encodings="learned"), "model.pos_encodings"),
    (dict(conv_kernel=0), "model.conv_kernel"),
    (dict(num_l_cycles=0), "model.num_l_cycles"),
])
def test_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        tiny_cfg(**kw)


def test_scaling_errors_and_scales(capsys):
    with pytest.raises(ConfigError, match="per_module"):
        URM(tiny_cfg(), ScalingConfig(scheme="deeploop", per_module=True))
    with pytest.raises(ConfigError, match="p_h"):
        URM(tiny_cfg(), ScalingConfig(scheme="deeploop", p_h=0.25))
    from hrm_deeploop.cli import run_subcommand

    assert run_subcommand("scales", ["model=urm", "scaling=deeploop", "format=json"]) == 0
    r = json.loads(capsys.readouterr().out)
    # the published setup: H=2 passes of C_L=6 rounds of K=4 blocks; N_g = C_L * K = 24
    assert (r["N"], r["M"], r["N_g"], r["M_g"], r["urm_depth"]) == (48, 96, 24, 48, "gradient")
    assert r["modules"]["net"]["alpha"] == pytest.approx(math.sqrt(48))
    assert r["modules"]["net"]["beta"] == pytest.approx(192 ** -0.5)
    assert run_subcommand("scales", ["model=urm", "scaling=deeploop", "scaling.urm_depth=forward",
                                     "format=json"]) == 0
    assert json.loads(capsys.readouterr().out)["modules"]["net"]["N"] == 48


@pytest.mark.parametrize("model", ["hrm_tiny", "trm_tiny"])
def test_conv_swiglu_is_available_to_hrm_and_trm(model):
    from hrm_deeploop.models.reasoners import build_reasoner

    cfg = compose("train", [f"model={model}", "model.mlp=convswiglu", "model.seq_len=16",
                            "model.num_puzzle_identifiers=5"]).model
    torch.manual_seed(0)
    m = build_reasoner(cfg)
    assert all(isinstance(b.mlp, ConvSwiGLU) for core in m.reasoning_cores() for b in core.layers)
    b = batch()
    _, out = m(m.initial_carry(b), b, torch.Generator().manual_seed(0))
    out["logits"].square().mean().backward()
    assert m.reasoning_cores()[0].layers[0].mlp.dwconv.weight.grad is not None
    with pytest.raises(ConfigError, match="model.mlp"):
        compose("train", ["model=trm_tiny", "model.mlp=convswiglu", "model.mixer=mlp"])


def test_train_config_accepts_urm():
    t = compose("train", ["model=urm_tiny", "scaling=deeploop"])
    assert t.model.name == "urm" and t.model.mlp == "convswiglu"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("urmdata"), num_tasks=4, num_aug=1, train_per_puzzle=3,
                        test_per_puzzle=1, canvas=4)


def test_tiny_run_learns_with_the_weight_average(monkeypatch, tmp_path, data):
    from hrm_deeploop import checkpoint as ckpt

    rc = train_cli(monkeypatch, data, tmp_path / "run", "train.max_steps=120", "optim.lr=3e-3",
                   "train.ema_rate=0.9", "eval.every=120", "checkpoint.every=0", base=URM_TINY_OVERRIDES)
    assert rc == 0
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    first = sum(r["train/lm_loss"] for r in rows[:10]) / 10
    last = sum(r["train/lm_loss"] for r in rows[-10:]) / 10
    assert last < 0.6 * first, (first, last)
    evals = [r for r in read_metrics(tmp_path / "run") if "eval/accuracy" in r]
    assert len(evals) == 1
    s = ckpt.load(ckpt.step_path(tmp_path / "run", 120))
    assert s["config"]["model"]["name"] == "urm" and s["ema"]["rate"] == 0.9
    assert "init_hidden" in s["model"] and "net.layers.0.mlp.dwconv.weight" in s["ema"]["shadow"]
