"""LoopViT model: the official parameter counts of every flavour, init coverage, 2-D RoPE by hand
(the task token unrotated), the key padding mask, weight tying and the step table, the readout's
un-patchifying, DeepLoop's alpha / beta on the Post-LN block and looped_eps on the pre-norm one,
the schemes each block refuses, `scales`, the YAML flavours, and loading an official state dict.
(Bit-identity with the official code: benchmarks/compare_reference_loopvit.py.)"""

import math
from dataclasses import replace

import pytest
import torch

from hrm_deeploop.cli import compose
from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.loopvit import LoopViT, load_official, official_key_map
from hrm_deeploop.models.loopvit_blocks import apply_rope_2d, rope_2d
from hrm_deeploop.models.loopvit_config import FLAVOURS, LoopViTConfig, flavour
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.scales import describe


def tiny(**kw) -> LoopViTConfig:
    return flavour("tiny", **{"num_tasks": 5, **kw})


def batch(cfg: LoopViTConfig, B: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    S = cfg.image_size
    canvas = torch.randint(0, 12, (B, S, S), generator=g)
    mask = torch.zeros(B, S, S, dtype=torch.long)
    mask[:, 1:7, 1:5] = 1
    return canvas, torch.randint(0, cfg.num_tasks, (B,), generator=g), mask


@pytest.mark.parametrize("name, expected", [
    # Counted by instantiating the official LoopARCViT at these configs (its count_parameters: task
    # table excluded): the reference spec section 1.3, and compare_reference_loopvit.py's key map.
    ("large", 17_541_129), ("medium", 11_221_017), ("b6", 11_208_753), ("small", 3_857_961),
])
def test_param_counts_are_the_official_ones(name, expected):
    with torch.device("meta"):
        m = LoopViT(FLAVOURS[name])
    assert m.num_params() == expected


def test_init_covers_every_parameter_and_fails_on_a_missed_one():
    torch.manual_seed(0)
    m = LoopViT(tiny())
    for t in (m.pos_embed, m.task_embed.weight, m.color_embed.weight, m.step_embed.weight, m.gate.fc1.weight):
        assert t.abs().max() <= 2.0 and 0.01 < t.std() < 0.03  # trunc normal std 0.02, bounds +-2 absolute
    assert torch.all(m.head.bias == 0) and torch.all(m.gate.fc1.bias == 0)
    fan_in = m.layers[0].self_attn.qkv.weight.shape[1]  # torch's default: U(+-1/sqrt(fan_in)) after kaiming(a=sqrt 5)
    assert m.layers[0].self_attn.qkv.weight.abs().max() <= 1 / math.sqrt(fan_in)
    m.stray = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(AssertionError, match="stray"):
        m.init_weights()


def test_rope_2d_by_hand_and_the_task_token_is_not_rotated():
    hd, G = 8, 4
    cos, sin = rope_2d(hd, G)
    freqs = [1.0, 0.01]  # 10000^(-2k/(hd/2)), k = 0, 1
    for i, j in ((0, 0), (1, 2), (3, 1)):
        want = [i * freqs[0]] * 2 + [i * freqs[1]] * 2 + [j * freqs[0]] * 2 + [j * freqs[1]] * 2
        torch.testing.assert_close(cos[i * G + j], torch.tensor(want).cos())
    x = torch.randn(1, 1, 1 + G * G, hd)
    y = apply_rope_2d(x, cos, sin, prefix=1)
    assert torch.equal(y[:, :, 0], x[:, :, 0])  # the task token
    p, a = x[0, 0, 1 + G + 2], (1 * freqs[0])  # patch (1, 2): its first pair turns by the row angle
    torch.testing.assert_close(y[0, 0, 1 + G + 2, :2],
                               torch.stack([p[0] * math.cos(a) - p[1] * math.sin(a), p[1] * math.cos(a) + p[0] * math.sin(a)]))
    with pytest.raises(ConfigError, match="divisible by 4"):
        LoopViTConfig(hidden_size=24, num_heads=4)  # head 6


def test_forward_shapes_gates_intermediates_and_the_readout_layout():
    torch.manual_seed(0)
    cfg = tiny()
    m = LoopViT(cfg)
    canvas, tasks, mask = batch(cfg)
    out = m(canvas, tasks, mask, intermediates=True)
    S = cfg.image_size
    assert out.logits.shape == (2, S, S, 12) and out.gate_probs.shape == (2, cfg.num_loops)
    assert ((out.gate_probs > 0) & (out.gate_probs < 1)).all()
    assert len(out.intermediates) == cfg.num_loops and torch.equal(out.intermediates[-1], out.logits)
    # the head's output k = (py * p + px) * 12 + c of patch (i, j) is pixel (p i + py, p j + px)
    z = torch.randn(1, 1 + cfg.grid_size ** 2, cfg.hidden_size)
    head = m.head(m.norm(z))[0, 1 + 1 * cfg.grid_size + 3]  # patch (1, 3)
    pix = m.readout(z)[0]
    torch.testing.assert_close(pix[2 + 1, 6 + 0], head[(1 * 2 + 0) * 12:(1 * 2 + 0) * 12 + 12])
    with pytest.raises(ValueError, match="canvas must be"):
        m(canvas[:, :8, :8], tasks)


def test_padded_patches_are_not_keys():
    """Vanilla, one block, one loop: the unmasked patches' logits do not depend on what the masked
    patches hold (the hybrid's convolution does mix neighbours, as the official one)."""
    torch.manual_seed(0)
    cfg = tiny(block="vanilla", num_blocks=1, num_loops=1)
    m = LoopViT(cfg).eval()
    canvas, tasks, mask = batch(cfg)
    other = canvas.clone()
    other[:, 8:, 8:] = (other[:, 8:, 8:] + 1) % 12  # patches entirely outside the input cells
    a, b = m(canvas, tasks, mask).logits, m(other, tasks, mask).logits
    assert torch.equal(a[:, :8, :8], b[:, :8, :8]) and not torch.equal(a, b)
    assert not torch.equal(m(canvas, tasks).logits[:, :8, :8], a[:, :8, :8])  # without the mask they are keys


def test_weight_tying_and_step_embeddings():
    torch.manual_seed(0)
    m3 = LoopViT(tiny(num_loops=3))
    assert len(m3.layers) == 2 and m3.step_embed.weight.shape[0] == 3
    canvas, tasks, mask = batch(m3.cfg)
    m3(canvas, tasks, mask).logits.square().mean().backward()
    assert all(p.grad is not None for n, p in m3.named_parameters() if not n.startswith("gate."))  # one set, every loop
    with torch.no_grad():  # beyond T the last step vector repeats (identity extrapolation): 4 loops = 3 + one more
        four = m3(canvas, tasks, mask, num_loops=4).logits
        z = m3.embed(canvas, tasks)
        pad = m3.pad_mask(mask)
        rope = (m3.rope_cos, m3.rope_sin)
        for t in (0, 1, 2, 2):
            z = z + m3.step_embed.weight[t]
            for blk in m3.layers:
                z = blk(z, rope, pad)
        assert torch.equal(m3.readout(z), four)


def test_deeploop_on_the_post_ln_block_and_looped_eps_on_the_pre_norm_one():
    cfg = tiny(block="vanilla")
    torch.manual_seed(0)
    base = LoopViT(cfg)
    torch.manual_seed(0)
    deep = LoopViT(cfg, ScalingConfig(scheme="deeploop"))
    n = cfg.num_blocks * cfg.num_loops
    assert deep.depth.N == n == deep.depth.N_g and deep.depth.M == 2 * n
    assert deep.layers[0].alpha == pytest.approx(math.sqrt(2 * n))
    beta = (8 * n) ** -0.5
    d = cfg.hidden_size
    for name, rows in (("self_attn.qkv.weight", slice(2 * d, 3 * d)), ("self_attn.proj.weight", slice(None)),
                       ("mlp.fc1.weight", slice(None)), ("mlp.fc2.weight", slice(None))):
        b, s = base.layers[1].get_parameter(name), deep.layers[1].get_parameter(name)
        torch.testing.assert_close(s[rows], b[rows] * beta)
    assert torch.equal(deep.layers[1].self_attn.qkv.weight[:2 * d], base.layers[1].self_attn.qkv.weight[:2 * d])
    hybrid = LoopViT(tiny(), ScalingConfig(scheme="looped_eps"))
    assert hybrid.layers[0].eps == pytest.approx(1 / (cfg.num_loops * math.sqrt(cfg.num_blocks)))
    with pytest.raises(ConfigError, match="model.block=hybrid is pre-norm"):
        LoopViT(tiny(), ScalingConfig(scheme="deeploop"))
    with pytest.raises(ConfigError, match="Post-LN"):
        LoopViT(tiny(block="vanilla"), ScalingConfig(scheme="looped_eps"))
    with pytest.raises(ConfigError, match="per-module"):
        LoopViT(tiny(), ScalingConfig(per_module=True))


def test_scales_and_the_yaml_flavours():
    r = describe(FLAVOURS["b6"], ScalingConfig(scheme="deeploop"))
    assert (r["N"], r["N_g"]) == (36, 36)
    assert r["modules"]["core"]["alpha"] == pytest.approx(math.sqrt(72))
    assert r["modules"]["core"]["beta"] == pytest.approx(288 ** -0.5)
    for yaml_name, name in (("loopvit", "large"), ("loopvit_medium", "medium"), ("loopvit_b6", "b6"),
                            ("loopvit_small", "small"), ("loopvit_tiny", "tiny")):
        assert compose("scales", [f"model={yaml_name}"]).model == FLAVOURS[name]


def _official_state(m: LoopViT) -> dict[str, torch.Tensor]:
    """Our weights under the official names (the key map inverted), RoPE tables included."""
    ours = m.state_dict()
    out = {}
    for theirs, mine in official_key_map(m.cfg).items():
        out[theirs] = (m.rope_cos if theirs.endswith("cos") else m.rope_sin) if mine is None else ours[mine].clone()
    return out


@pytest.mark.parametrize("block", ["hybrid", "vanilla"])
def test_load_official_round_trip_and_its_errors(block):
    torch.manual_seed(0)
    src = LoopViT(tiny(block=block))
    torch.manual_seed(1)
    dst = LoopViT(tiny(block=block))
    state = {"_orig_mod." + k: v for k, v in _official_state(src).items()}
    assert load_official(dst, state) == []
    assert all(torch.equal(a, b) for a, b in zip(src.state_dict().values(), dst.state_dict().values()))
    fresh = LoopViT(tiny(block=block, num_tasks=3))  # TTT's fresh table: kept with strict_tasks=False
    assert load_official(fresh, _official_state(src), strict_tasks=False) == ["task_token_embed.weight"]
    with pytest.raises(ValueError, match="task_token_embed.weight"):
        load_official(LoopViT(tiny(block=block, num_tasks=3)), _official_state(src))
    other = "vanilla" if block == "hybrid" else "hybrid"
    with pytest.raises(ValueError, match="keys this config does not"):
        load_official(LoopViT(tiny(block=other)), _official_state(src))
    bad = _official_state(src)
    bad["core_layers.0.self_attn.rotary.freqs_cos"] = bad["core_layers.0.self_attn.rotary.freqs_cos"] + 1
    with pytest.raises(ValueError, match="RoPE"):
        load_official(dst, bad)


def test_flavour_errors():
    with pytest.raises(ConfigError, match="flavour"):
        flavour("huge")
    with pytest.raises(ConfigError, match="model.block"):
        replace(FLAVOURS["tiny"], block="conv")


def test_parameters_are_registered_in_the_official_order():
    """Gradient clipping sums per-parameter norms in registration order: the official order keeps
    the clipped step bit-identical (compare_reference_loopvit.py)."""
    names = [n for n, _ in LoopViT(tiny()).named_parameters()]
    assert names[:5] == ["pos_embed", "color_embed.weight", "task_embed.weight", "patch_embed.weight",
                         "patch_embed.bias"]
    assert names[-6:] == ["gate.fc2.weight", "gate.fc2.bias", "norm.weight", "norm.bias", "head.weight", "head.bias"]
    inverse = {ours: theirs for theirs, ours in official_key_map(tiny()).items() if ours}
    block = [inverse[n].split(".", 2)[2] for n in names if n.startswith("layers.0.")]
    assert block == ["self_attn.qkv.weight", "self_attn.qkv.bias", "self_attn.proj.weight", "self_attn.proj.bias",
                     "norm1.scale", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.dwconv.weight", "mlp.dwconv.bias",
                     "mlp.fc2.weight", "mlp.fc2.bias", "norm2.scale"]


def test_exit_rules_freeze_exited_samples_and_match_their_post_hoc_form():
    from hrm_deeploop.models.loopvit import ExitRule, entropy_exit_steps

    torch.manual_seed(0)
    m = LoopViT(tiny()).eval()
    canvas, tasks, mask = batch(m.cfg, B=4)
    with torch.no_grad():
        two = m(canvas, tasks, mask, num_loops=2).logits
        full = m(canvas, tasks, mask, num_loops=5, intermediates=True)
        for rule in (ExitRule("gate", min_loops=2, gate_threshold=0.0), ExitRule("threshold", min_loops=2, tau=99.0)):
            out = m(canvas, tasks, mask, num_loops=5, exit_rule=rule)
            assert out.exit_steps.tolist() == [2] * 4 and torch.equal(out.logits, two)
            assert out.gate_probs.shape == (4, 2)  # the loop ended when every sample had exited
        never = m(canvas, tasks, mask, num_loops=5, exit_rule=ExitRule("threshold", tau=0.0))
        assert never.exit_steps.tolist() == [5] * 4 and torch.equal(never.logits, full.logits)
        for rule in (ExitRule("plateau", pct=10.0), ExitRule("plateau"), ExitRule("plateau", pct=0.01, patience=1)):
            out = m(canvas, tasks, mask, num_loops=5, exit_rule=rule)
            steps = entropy_exit_steps(full.intermediates, rule)
            assert torch.equal(out.exit_steps, steps)
            for b, s in enumerate(steps.tolist()):  # the official picks the exit loop's logits afterwards
                assert torch.equal(out.logits[b], full.intermediates[s - 1][b])
        assert m(canvas, tasks, mask, num_loops=5, exit_rule=ExitRule("plateau", pct=10.0)).exit_steps.tolist() == [3] * 4
    with pytest.raises(ValueError, match="exit gate"):
        LoopViT(tiny(exit_gate=False))(canvas, tasks, mask, exit_rule=ExitRule("gate"))


def test_the_compact_exit_drops_exited_samples_with_the_same_exits_and_logits():
    from hrm_deeploop.models.loopvit import ExitRule, canvas_entropy

    torch.manual_seed(0)
    m = LoopViT(tiny()).eval()
    canvas, tasks, mask = batch(m.cfg, B=6)
    with torch.no_grad():
        full = m(canvas, tasks, mask, num_loops=6, intermediates=True)
        gate = float(full.gate_probs[:, 1].median())
        ent = [canvas_entropy(x) for x in full.intermediates]
        tau = float(ent[2].median())
        rel = [(ent[t - 1] - ent[t]) / (ent[t - 1] + 1e-8) for t in (1, 2)]
        pct = float(torch.maximum(*rel).median())  # about half the samples plateau by loop 3
        for rule in (ExitRule("gate", min_loops=2, gate_threshold=gate), ExitRule("plateau", pct=pct),
                     ExitRule("threshold", tau=tau)):
            frozen = m(canvas, tasks, mask, num_loops=6, exit_rule=rule)
            compact = m.forward_compact(canvas, tasks, mask, rule, num_loops=6)
            assert torch.equal(compact.exit_steps, frozen.exit_steps)
            assert 1 < len(set(compact.exit_steps.tolist()))  # some exit early, some later: rows really leave
            torch.testing.assert_close(compact.logits, frozen.logits, rtol=1e-5, atol=1e-6)
            seen = torch.arange(6)[None, :] < compact.exit_steps[:, None]  # gates recorded up to each exit
            assert (~compact.gate_probs.isnan() == seen).all()
