"""Official HRM checkpoints (`step_N` + `all_config.yaml`) load into our model with identical
outputs; bad files fail loudly; `hrm-deeploop evaluate` accepts them and ours."""

import numpy as np
import pytest
import torch
import yaml

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.errors import UserError
from hrm_deeploop.loading import load_model
from hrm_deeploop.models.hrm import HRM
from hrm_deeploop.models.model_config import HRMConfig
from tests.hrm_helpers import make_dataset, stand_in_open_split, use_stand_in

ARCH = {
    "name": "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1",
    "loss": {"name": "losses@ACTLossHead", "loss_type": "softmax_cross_entropy"},
    "halt_exploration_prob": 0.1, "halt_max_steps": 3, "H_cycles": 2, "L_cycles": 1, "H_layers": 1,
    "L_layers": 2, "hidden_size": 32, "num_heads": 2, "expansion": 4, "puzzle_emb_ndim": "${.hidden_size}",
    "pos_encodings": "rope", "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "forward_dtype": "bfloat16",
}


def write_official(tmp_path, arch=ARCH, seq_len=16, num_ids=9, prefix="_orig_mod.", step=77, seed=0):
    """A fake official checkpoint: HRM's key layout, written from one of our models' weights."""
    cfg = HRMConfig(hidden_size=32, num_heads=2, expansion=4.0, num_h_layers=arch["H_layers"],
                    num_l_layers=arch["L_layers"], num_h_cycles=arch["H_cycles"], num_l_cycles=arch["L_cycles"],
                    halt_max_steps=arch["halt_max_steps"], pos_encodings=arch["pos_encodings"],
                    seq_len=seq_len, num_puzzle_identifiers=num_ids, forward_dtype="float32",
                    loss_type=arch["loss"]["loss_type"])
    torch.manual_seed(seed)
    model = HRM(cfg)
    with torch.no_grad():
        model.puzzle_emb.weights.normal_()
        model.q_head.weight.normal_(0, 0.1)
        model.H_init.copy_(model.H_init.bfloat16().float())  # HRM keeps H_init/L_init in bf16
        model.L_init.copy_(model.L_init.bfloat16().float())
    state = {f"{prefix}model.inner.{k}": v.clone() for k, v in model.state_dict().items()}
    state[f"{prefix}model.inner.H_init"] = model.H_init.bfloat16()
    state[f"{prefix}model.inner.L_init"] = model.L_init.bfloat16()
    d = tmp_path / "official"
    d.mkdir(exist_ok=True)
    torch.save(state, d / f"step_{step}")
    (d / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch, "data_path": "data/arc-2-aug-1000",
                                                       "global_batch_size": 768, "lr": 1e-4}))
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
    assert loaded.kind == "official" and loaded.step == 77
    c = loaded.config
    assert (c.num_h_cycles, c.num_l_cycles, c.num_h_layers, c.num_l_layers, c.hidden_size) == (2, 1, 1, 2, 32)
    assert c.puzzle_emb_ndim == 32 and c.forward_dtype == "bfloat16" and c.loss_type == "softmax_cross_entropy"
    assert c.halt_max_steps == 3 and c.num_puzzle_identifiers == 9 and loaded.model.dtype == torch.float32  # CPU
    b = _batch()
    _, a = ref.predict(b)
    _, o = loaded.model.predict(b)
    for k in ("logits", "q_halt_logits", "q_continue_logits"):
        assert torch.equal(a[k], o[k]), k


def test_official_learned_positions(tmp_path):
    arch = dict(ARCH, pos_encodings="learned")
    path, ref = write_official(tmp_path, arch=arch, seq_len=16)
    loaded = load_model(path)
    assert loaded.config.pos_encodings == "learned" and loaded.config.seq_len == 16
    b = _batch()
    assert torch.equal(ref.predict(b)[1]["logits"], loaded.model.predict(b)[1]["logits"])


def test_official_checkpoint_errors(tmp_path):
    path, _ = write_official(tmp_path)
    state = ckpt.load(path)
    extra = dict(state)
    extra["_orig_mod.model.inner.mystery.weight"] = torch.zeros(1)
    torch.save(extra, path)
    with pytest.raises(UserError, match="mystery"):
        load_model(path)
    missing = {k: v for k, v in state.items() if "L_level.layers.1.mlp.down_proj" not in k}
    torch.save(missing, path)
    with pytest.raises(UserError, match=r"L_level\.layers\.1\.mlp\.down_proj"):
        load_model(path)
    torch.save(state, path)
    (path.parent / "all_config.yaml").write_text(yaml.safe_dump({"arch": dict(ARCH, H_cylces=3)}))
    with pytest.raises(UserError, match="H_cylces"):
        load_model(path)
    (path.parent / "all_config.yaml").unlink()
    with pytest.raises(UserError, match="all_config.yaml"):
        load_model(path)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="corrupt"):
        load_model(path)


def test_evaluate_cli_on_official_checkpoint(monkeypatch, tmp_path, capsys):
    from hrm_deeploop.cli import run_subcommand

    data = make_dataset(tmp_path / "data", num_tasks=3, num_aug=1, test_per_puzzle=1, canvas=30)
    split = stand_in_open_split(data, "test")
    num_ids = split.meta.num_puzzle_identifiers
    path, ref = write_official(tmp_path, seq_len=900, num_ids=num_ids)
    use_stand_in(monkeypatch)
    out = tmp_path / "out"
    args = [f"checkpoint={path}", f"data_dir={data}", f"output_dir={out}", "vote=false", "progress=false",
            "global_batch_size=4"]
    assert run_subcommand("evaluate", args) == 0
    z = np.load(out / "predictions.npz")
    n = split.num_examples
    assert z["puzzle_identifiers"].dtype == np.int32 and z["puzzle_identifiers"].shape == (n,)
    assert z["inputs"].dtype == np.uint8 and z["inputs"].shape == (n, 900)
    assert z["predictions"].dtype == np.uint8 and z["q_halt"].dtype == np.float32
    assert np.array_equal(z["inputs"], np.asarray(split.inputs))
    b = {"inputs": torch.from_numpy(np.asarray(split.inputs).astype(np.int32)),
         "labels": torch.full((n, 900), -100, dtype=torch.int32),
         "puzzle_identifiers": torch.from_numpy(z["puzzle_identifiers"])}
    _, o = ref.predict(b)
    assert np.array_equal(z["predictions"], o["logits"].argmax(-1).numpy().astype(np.uint8))
    np.testing.assert_allclose(z["q_halt"], o["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-5)
    # nothing overwritten without overwrite=true
    assert run_subcommand("evaluate", args) == 2
    assert "overwrite=true" in capsys.readouterr().err
    # a dataset that does not fit the checkpoint
    other = make_dataset(tmp_path / "other", num_tasks=5, canvas=30)
    assert run_subcommand("evaluate", [f"checkpoint={path}", f"data_dir={other}", f"output_dir={tmp_path / 'o2'}",
                                       "vote=false"]) == 2
    assert "num_puzzle_identifiers" in capsys.readouterr().err
    # voting is defined on the test split only: refused before any prediction is made
    assert run_subcommand("evaluate", [f"checkpoint={path}", f"data_dir={other}", f"output_dir={tmp_path / 'o3'}",
                                       "split=train"]) == 2
    assert "vote=false" in capsys.readouterr().err and not (tmp_path / "o3").exists()
