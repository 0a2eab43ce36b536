"""Official TRM checkpoints in the ARC Prize verification release layout
(arcprize/trm_arc_prize_verification: `arc_v1_public/step_518071` + `all_config.yaml`, trm.py,
losses.py) load into our TRM with identical outputs; bad files fail loudly; `hrm-deeploop
evaluate` writes predictions.npz from them."""

import numpy as np
import pytest
import torch
import yaml

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.errors import UserError
from hrm_deeploop.loading import load_model
from hrm_deeploop.models.model_config import TRMConfig
from hrm_deeploop.models.trm import TRM
from hrm_deeploop.official import official_trm_key_map
from tests.hrm_helpers import make_dataset, stand_in_open_split, use_stand_in

# The arch section as TRM's pretrain writes it (yaml.dump of PretrainConfig.model_dump(): sorted
# keys, interpolations resolved), at a tiny width.
ARCH = {
    "H_cycles": 2, "H_layers": 0, "L_cycles": 2, "L_layers": 2, "expansion": 4, "forward_dtype": "bfloat16",
    "halt_exploration_prob": 0.1, "halt_max_steps": 3, "hidden_size": 32,
    "loss": {"loss_type": "stablemax_cross_entropy", "name": "losses@ACTLossHead"},
    "mlp_t": False, "name": "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1", "no_ACT_continue": True,
    "num_heads": 2, "pos_encodings": "rope", "puzzle_emb_len": 16, "puzzle_emb_ndim": 32,
}


def write_official(tmp_path, arch=ARCH, seq_len=16, num_ids=9, prefix="_orig_mod.", step=518071, seed=0):
    """A fake release folder: TRM's key layout (`model.inner.L_level...`), written from one of our
    models' weights, with H_init/L_init in bf16 as TRM keeps them."""
    cfg = TRMConfig(hidden_size=arch["hidden_size"], num_heads=arch["num_heads"], expansion=float(arch["expansion"]),
                    num_layers=arch["L_layers"], num_h_cycles=arch["H_cycles"], num_l_cycles=arch["L_cycles"],
                    halt_max_steps=arch["halt_max_steps"], pos_encodings=arch["pos_encodings"],
                    mixer="mlp" if arch["mlp_t"] else "attention", puzzle_emb_len=arch["puzzle_emb_len"],
                    seq_len=seq_len, num_puzzle_identifiers=num_ids, forward_dtype="float32")
    torch.manual_seed(seed)
    model = TRM(cfg)
    with torch.no_grad():
        model.puzzle_emb.weights.normal_()
        model.q_head.weight.normal_(0, 0.1)
        model.H_init.copy_(model.H_init.bfloat16().float())
        model.L_init.copy_(model.L_init.bfloat16().float())
    ours_to_official = {v: k for k, v in official_trm_key_map(cfg.num_layers, cfg.pos_encodings, True, cfg.mixer).items()}
    state = {prefix + ours_to_official[k]: v.clone() for k, v in model.state_dict().items()}
    state[prefix + "model.inner.H_init"] = model.H_init.bfloat16()
    state[prefix + "model.inner.L_init"] = model.L_init.bfloat16()
    d = tmp_path / "trm_arc_prize_verification" / "arc_v1_public"
    d.mkdir(parents=True, exist_ok=True)
    torch.save(state, d / f"step_{step}")
    (d / "all_config.yaml").write_text(yaml.dump({
        "arch": arch, "beta1": 0.9, "beta2": 0.95, "checkpoint_every_eval": True, "data_paths": ["data/arc1concept-aug-1000"],
        "data_paths_test": [], "ema": True, "ema_rate": 0.999, "epochs": 100000, "eval_interval": 10000,
        "evaluators": [{"name": "arc@ARC"}], "global_batch_size": 768, "lr": 1e-4, "lr_min_ratio": 1.0,
        "lr_warmup_steps": 2000, "puzzle_emb_lr": 0.01, "puzzle_emb_weight_decay": 0.1, "seed": 0, "weight_decay": 0.1}))
    for name in ("trm.py", "losses.py"):  # the release ships the model code beside the weights; never read
        (d / name).write_text("# not read\n")
    return d / f"step_{step}", model.eval()


def _batch(B=3, S=16, num_ids=9):
    g = torch.Generator().manual_seed(5)
    return {"inputs": torch.randint(0, 12, (B, S), generator=g, dtype=torch.int32),
            "labels": torch.full((B, S), -100, dtype=torch.int32),
            "puzzle_identifiers": torch.randint(1, num_ids, (B,), generator=g, dtype=torch.int32)}


@pytest.mark.parametrize("prefix", ["_orig_mod.", ""])
def test_official_checkpoint_loads_with_identical_outputs(tmp_path, prefix):
    path, ref = write_official(tmp_path, prefix=prefix)
    loaded = load_model(path, seq_len=16)
    assert loaded.kind == "official" and loaded.step == 518071 and loaded.weights == "official"
    c = loaded.config
    assert c.name == "trm" and (c.num_h_cycles, c.num_l_cycles, c.num_layers, c.hidden_size) == (2, 2, 2, 32)
    assert (c.puzzle_emb_ndim, c.puzzle_emb_len, c.mixer, c.act_continue, c.forward_dtype) == (
        32, 16, "attention", False, "bfloat16")
    assert c.halt_max_steps == 3 and c.num_puzzle_identifiers == 9 and loaded.model.dtype == torch.float32  # CPU
    b = _batch()
    _, a = ref.predict(b)
    _, o = loaded.model.predict(b)
    for k in ("logits", "q_halt_logits", "q_continue_logits"):
        assert torch.equal(a[k], o[k]), k


def test_official_mlp_t_checkpoint_reads_its_length_from_the_weights(tmp_path):
    arch = dict(ARCH, mlp_t=True, pos_encodings="none")
    path, ref = write_official(tmp_path, arch=arch, seq_len=16)
    loaded = load_model(path)  # no seq_len given: the sequence MLP's width is P + S
    assert loaded.config.mixer == "mlp" and loaded.config.seq_len == 16
    assert "net.layers.1.mlp_t.down_proj.weight" in loaded.model.state_dict()
    b = _batch()
    assert torch.equal(ref.predict(b)[1]["logits"], loaded.model.predict(b)[1]["logits"])


def test_official_checkpoint_errors(tmp_path):
    path, _ = write_official(tmp_path)
    state = ckpt.load(path)
    extra = dict(state)
    extra["_orig_mod.model.inner.H_level.layers.0.mlp.down_proj.weight"] = torch.zeros(1)
    torch.save(extra, path)
    with pytest.raises(UserError, match=r"H_level\.layers\.0"):
        load_model(path)
    torch.save({k: v for k, v in state.items() if "L_level.layers.1.self_attn.o_proj" not in k}, path)
    with pytest.raises(UserError, match=r"L_level\.layers\.1\.self_attn\.o_proj"):
        load_model(path)
    torch.save(state, path)
    cfg_path = path.parent / "all_config.yaml"
    for arch, match in ((dict(ARCH, L_cylces=3), "L_cylces"),
                        ({k: v for k, v in ARCH.items() if k != "L_cycles"}, "L_cycles"),
                        (dict(ARCH, name="recursive_reasoning.trm_hier6@X"), "trm_hier6"),
                        (dict(ARCH, loss={"name": "losses@ACTLossHead", "lambda": 1}), "lambda")):
        cfg_path.write_text(yaml.dump({"arch": arch}))
        with pytest.raises(UserError, match=match):
            load_model(path)
    cfg_path.unlink()
    with pytest.raises(UserError, match="all_config.yaml"):
        load_model(path)


def test_evaluate_cli_on_official_trm_checkpoint(monkeypatch, tmp_path):
    from hrm_deeploop.cli import run_subcommand

    data = make_dataset(tmp_path / "data", num_tasks=3, num_aug=1, test_per_puzzle=1, canvas=30)
    split = stand_in_open_split(data, "test")
    path, ref = write_official(tmp_path, seq_len=900, num_ids=split.meta.num_puzzle_identifiers)
    use_stand_in(monkeypatch)
    out = tmp_path / "out"
    assert run_subcommand("evaluate", [f"checkpoint={path}", f"data_dir={data}", f"output_dir={out}", "vote=false",
                                       "progress=false", "global_batch_size=4"]) == 0
    z = np.load(out / "predictions.npz")
    n = split.num_examples
    assert z["predictions"].shape == (n, 900) and z["q_halt"].shape == (n,) and z["q_halt"].dtype == np.float32
    b = {"inputs": torch.from_numpy(np.asarray(split.inputs).astype(np.int32)),
         "labels": torch.full((n, 900), -100, dtype=torch.int32),
         "puzzle_identifiers": torch.from_numpy(z["puzzle_identifiers"])}
    _, o = ref.predict(b)
    assert np.array_equal(z["predictions"], o["logits"].argmax(-1).numpy().astype(np.uint8))
    np.testing.assert_allclose(z["q_halt"], o["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-5)
