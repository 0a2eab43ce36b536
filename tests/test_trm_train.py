"""`hrm-deeploop train model=trm` end to end on tiny synthetic data (CPU): learning, the weight
average (formula, swap, checkpoints), bit-exact resume with it, `evaluate` on our TRM checkpoints,
the paper setups' configs."""

import numpy as np
import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.training.ema import EMA
from tests.hrm_helpers import (
    TRM_TINY_OVERRIDES,
    make_dataset,
    read_metrics,
    stand_in_open_split,
    straight_and_resumed,
    train_cli,
    use_stand_in,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("trmdata"), num_tasks=4, num_aug=1, train_per_puzzle=3,
                        test_per_puzzle=1, canvas=4)


def trm_cli(monkeypatch, data, out, *overrides) -> int:
    return train_cli(monkeypatch, data, out, *overrides, base=TRM_TINY_OVERRIDES)


def test_tiny_run_learns(monkeypatch, tmp_path, data):
    rc = trm_cli(monkeypatch, data, tmp_path / "run", "train.max_steps=150", "optim.lr=3e-3", "train.ema_rate=0.9",
                 "eval.every=150", "checkpoint.every=0")
    assert rc == 0
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    first = sum(r["train/lm_loss"] for r in rows[:10]) / 10
    last = sum(r["train/lm_loss"] for r in rows[-10:]) / 10
    assert last < 0.6 * first, (first, last)
    acc_first = sum(r["train/accuracy"] for r in rows[:10]) / 10
    acc_last = sum(r["train/accuracy"] for r in rows[-10:]) / 10
    assert acc_last > acc_first + 0.05, (acc_first, acc_last)
    evals = [r for r in read_metrics(tmp_path / "run") if "eval/accuracy" in r]
    assert len(evals) == 1 and evals[0]["eval/accuracy"] > 0.5  # with the averaged weights
    s = ckpt.load(ckpt.step_path(tmp_path / "run", 150))
    assert s["config"]["model"]["name"] == "trm" and s["ema"]["rate"] == 0.9
    assert set(s["ema"]["shadow"]) == {k for k in s["model"] if k.startswith(("net.", "embed", "lm_head", "q_head"))}


def test_ema_is_trms_formula_bit_for_bit_and_swaps_back_exactly():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3))
    ema = EMA(model, 0.999)
    shadow = [ema.shadow[n].clone() for n, _ in model.named_parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    ema.update(model)
    for (n, p), s in zip(model.named_parameters(), shadow):
        assert torch.equal(ema.shadow[n], (1.0 - 0.999) * p + 0.999 * s), n  # TRM's EMAHelper.update
    raw = [p.detach().clone() for p in model.parameters()]
    with ema.applied(model):
        assert all(torch.equal(p, ema.shadow[n]) for n, p in model.named_parameters())
    assert all(torch.equal(p, r) for p, r in zip(model.parameters(), raw))
    other = EMA(model, 0.5)
    other.load_state_dict(ema.state_dict())
    assert other.rate == 0.999 and all(torch.equal(other.shadow[n], ema.shadow[n]) for n in ema.shadow)


def test_resume_after_crash_is_bit_exact_with_the_average(monkeypatch, tmp_path, data):
    a, b = straight_and_resumed(monkeypatch, data, tmp_path, "model.halt_max_steps=3", "train.ema_rate=0.7",
                                base=TRM_TINY_OVERRIDES)
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for k, v in a["ema"]["shadow"].items():
        assert torch.equal(v, b["ema"]["shadow"][k]), k
        assert not torch.equal(v, a["model"][k]), k  # the average is not the weights
    sa, sb = a["optimizers"]["adam"]["state"], b["optimizers"]["adam"]["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)
    assert a["sampler"]["cursor"] == b["sampler"]["cursor"]
    assert torch.equal(a["local"]["carries"][0]["z_H"], b["local"]["carries"][0]["z_H"])
    assert torch.equal(a["local"]["generator"], b["local"]["generator"])
    assert [r["step"] for r in read_metrics(tmp_path / "crashed") if "train/loss" in r] == [1, 2, 3, 4, 5, 6]


def test_evaluate_cli_predicts_with_the_average(monkeypatch, tmp_path):
    from hrm_deeploop.cli import run_subcommand
    from hrm_deeploop.loading import load_model

    data = make_dataset(tmp_path / "data", num_tasks=3, num_aug=1, canvas=30)  # predictions.npz is the ARC format
    assert trm_cli(monkeypatch, data, tmp_path / "run", "train.max_steps=3", "train.ema_rate=0.5", "optim.lr=3e-3",
                   "optim.warmup_steps=1", "train.global_batch_size=4") == 0
    path = ckpt.step_path(tmp_path / "run", 3)
    use_stand_in(monkeypatch)
    split = stand_in_open_split(data, "test")
    n = split.num_examples
    outs = {}
    for ema in ("true", "false"):
        out = tmp_path / f"eval_{ema}"
        assert run_subcommand("evaluate", [f"checkpoint={tmp_path / 'run'}", f"data_dir={data}", f"output_dir={out}",
                                           "vote=false", "progress=false", "global_batch_size=4", f"ema={ema}"]) == 0
        outs[ema] = np.load(out / "predictions.npz")
        z = outs[ema]
        assert z["q_halt"].dtype == np.float32 and z["q_halt"].shape == (n,) and z["predictions"].shape == (n, 900)
        loaded = load_model(path, ema=ema == "true")
        assert loaded.weights == ("ema" if ema == "true" else "raw") and loaded.config.name == "trm"
        b = {"inputs": torch.from_numpy(np.asarray(split.inputs).astype(np.int32)),
             "labels": torch.full((n, 900), -100, dtype=torch.int32),
             "puzzle_identifiers": torch.from_numpy(z["puzzle_identifiers"])}
        _, o = loaded.model.predict(b)
        assert np.array_equal(z["predictions"], o["logits"].argmax(-1).numpy().astype(np.uint8))
        np.testing.assert_allclose(z["q_halt"], o["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-5)
    assert not np.allclose(outs["true"]["q_halt"], outs["false"]["q_halt"])  # the average was used


def test_paper_setups_compose_with_the_reference_hyperparameters():
    from hrm_deeploop.cli import compose

    common = dict(global_batch_size=768, lr=1e-4, warmup=2000, betas=(0.9, 0.95), min_lr_ratio=1.0, ema=True,
                  ema_rate=0.999, h_cycles=3, layers=2, at_eval=True, compile=True)
    setups = {  # name: (data_dir, L_cycles, mixer, pos, epochs, eval interval, puzzle lr, weight decay)
        "trm_arc1": ("data/arc1concept-aug-1000", 4, "attention", "rope", 100000, 10000, 1e-2, 0.1),
        "trm_arc2": ("data/arc2concept-aug-1000", 4, "attention", "rope", 100000, 10000, 1e-2, 0.1),
        "trm_sudoku_mlp": ("data/sudoku-extreme-1k-aug-1000", 6, "mlp", "none", 50000, 5000, 1e-4, 1.0),
        "trm_sudoku_att": ("data/sudoku-extreme-1k-aug-1000", 6, "attention", "rope", 50000, 5000, 1e-4, 1.0),
        "trm_maze": ("data/maze-30x30-hard-1k", 4, "attention", "rope", 50000, 5000, 1e-4, 1.0),
    }
    for setup, (data_dir, n, mixer, pos, epochs, every, puzzle_lr, wd) in setups.items():
        for scheme in ("baseline", "deeploop"):
            t = compose("train", [f"experiment={setup}_{scheme}"])
            m, o, tr = t.model, t.optim, t.train
            assert (t.data_dir, t.run_name, t.scaling.scheme, m.name) == (data_dir, f"{setup}_{scheme}", scheme, "trm")
            assert (m.num_l_cycles, m.num_h_cycles, m.num_layers, m.mixer, m.pos_encodings) == (
                n, common["h_cycles"], common["layers"], mixer, pos)
            assert (m.hidden_size, m.num_heads, m.puzzle_emb_len, m.halt_max_steps, m.act_continue) == (
                512, 8, 16, 16, False)
            assert (tr.epochs, tr.epochs_per_iter, t.eval.interval_epochs) == (epochs, every, every)
            assert (o.lr, o.puzzle_emb_lr, o.weight_decay, o.puzzle_emb_weight_decay) == (1e-4, puzzle_lr, wd, wd)
            assert (tr.global_batch_size, o.warmup_steps, (o.beta1, o.beta2), o.min_lr_ratio) == (
                common["global_batch_size"], common["warmup"], common["betas"], common["min_lr_ratio"])
            assert (tr.ema, tr.ema_rate, t.checkpoint.at_eval, tr.compile) == (True, 0.999, True, True)
    t = compose("train", ["experiment=trm_tiny_cpu"])
    assert t.model.name == "trm" and t.model.hidden_size == 64 and t.device == "cpu" and t.train.ema
