"""`hrm-deeploop train-vit`: a few LoopViT steps on a tiny ARC-format dataset (seconds on CPU),
the summary and metrics, bit-exact resume, the loss by hand, and the config's refusals."""

import json

import pytest
import torch

from hrm_deeploop.cli import compose, run_subcommand
from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.loopvit import LoopViTOutput
from hrm_deeploop.training.vision import gate_regularisers, vision_loss
from tests.hrm_helpers import make_dataset, read_metrics, use_stand_in

BASE = ["experiment=loopvit_tiny_cpu", "train.progress=false", "train.global_batch_size=4", "optim.warmup_steps=2"]


def train_vit(monkeypatch, data_dir, out_dir, *overrides) -> int:
    use_stand_in(monkeypatch)
    try:
        return run_subcommand("train-vit", [*BASE, f"data_dir={data_dir}", f"output_dir={out_dir}", *overrides])
    except SystemExit as e:
        return int(e.code or 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("arc"), num_tasks=3, train_per_puzzle=3, test_per_puzzle=1, side=3)


def test_a_few_steps_finish_with_metrics_and_an_evaluation(monkeypatch, data, tmp_path):
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=4", "eval.every=2") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 4 and summary["model"] == "loopvit"
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    assert len(rows) == 4 and all(0 < r["train/loss"] < 10 and 0 <= r["train/accuracy"] <= 1 for r in rows)
    assert summary["last_eval"]["eval/count"] > 0


def test_resume_is_bit_exact(monkeypatch, data, tmp_path):
    from hrm_deeploop import checkpoint as ckpt

    assert train_vit(monkeypatch, data, tmp_path / "straight", "train.max_steps=4", "checkpoint.every=2") == 0
    assert train_vit(monkeypatch, data, tmp_path / "cut", "train.max_steps=4", "checkpoint.every=2",
                     "train.stop_after=2") == 0
    assert train_vit(monkeypatch, data, tmp_path / "cut", "train.max_steps=4", "checkpoint.every=2", "resume=true") == 0
    a = ckpt.load(tmp_path / "straight" / "checkpoints" / "step_4.pt")["model"]
    b = ckpt.load(tmp_path / "cut" / "checkpoints" / "step_4.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_loss_by_hand():
    logits = torch.randn(2, 4, 4, 12)
    target = torch.full((2, 4, 4), 10)
    target[:, 1, 1:3] = torch.tensor([3, 11])
    g = torch.tensor([[0.2, 0.7], [0.5, 0.9]])
    loss, parts = vision_loss(LoopViTOutput(logits, g, None), target, 0.5, 0.25, num_loops=2)
    valid = target != 10
    ce = torch.nn.functional.cross_entropy(logits[valid], target[valid])
    h = -(g * torch.log(g + 1e-6) + (1 - g) * torch.log(1 - g + 1e-6))
    torch.testing.assert_close(loss, ce - 0.5 * h.mean() + 0.25 * 1.0)
    torch.testing.assert_close(parts["gate_entropy"], h.mean())
    neg, steps = gate_regularisers(g, torch.tensor([1, 2]), num_loops=2)
    assert steps.item() == pytest.approx(0.75)


def test_config_refusals():
    with pytest.raises(ConfigError, match="model.name"):
        compose("train-vit", ["model=urm_tiny"])
    with pytest.raises(ConfigError, match="pre-norm"):
        compose("train-vit", ["model=loopvit_tiny", "scaling=deeploop"])
    cfg = compose("train-vit", ["model=loopvit_b6", "scaling=deeploop"])
    assert cfg.model.block == "vanilla"
    with pytest.raises(ConfigError, match="float16 needs a loss scaler"):
        compose("train-vit", ["model=loopvit_tiny", "dtype=float16"])
    with pytest.raises(ConfigError, match="train.compile_scope"):
        compose("train-vit", ["model=loopvit_tiny", "train.compile_scope=loops"])


def test_a_dataset_that_is_not_arc_grids_is_refused(monkeypatch, tmp_path):
    small = make_dataset(tmp_path / "small", num_tasks=2, canvas=8)
    assert train_vit(monkeypatch, small, tmp_path / "run", "train.max_steps=2") == 2


def _official_file(path, block: str, num_tasks: int):
    """An official-layout LoopViT file ({model_state, config, scaler_state}) of a tiny model."""
    from hrm_deeploop.models.loopvit import LoopViT, official_key_map
    from hrm_deeploop.models.loopvit_config import flavour

    torch.manual_seed(3)
    m = LoopViT(flavour("tiny", block=block, num_tasks=num_tasks))
    ours = m.state_dict()
    state = {"_orig_mod." + theirs: (m.rope_cos if theirs.endswith("cos") else m.rope_sin) if mine is None
             else ours[mine] for theirs, mine in official_key_map(m.cfg).items()}
    args = {"architecture": {"hybrid": "loop_vit1", "vanilla": "loop_vit"}[block], "embed_dim": 32, "num_heads": 2,
            "mlp_dim": 48, "loop_core_depth": 2, "max_loop_steps": 3, "min_loop_steps": 3, "image_size": 16,
            "patch_size": 2, "dropout": 0.0, "num_colors": 12, "num_task_tokens": 1, "disable_exit_gate": False,
            "no_step_embedding": False, "save_path": "checkpoints/loop_vit_base.pt"}
    torch.save({"model_state": state, "config": args, "scaler_state": {"scale": 65536.0}}, path)
    return m


@pytest.mark.parametrize("block", ["hybrid", "vanilla"])
def test_init_from_an_official_checkpoint(monkeypatch, data, tmp_path, block):
    from hrm_deeploop import runtime
    from hrm_deeploop.training import vision

    src = _official_file(tmp_path / "loop_vit_base.pt", block, num_tasks=400)
    use_stand_in(monkeypatch)
    cfg = compose("train-vit", [*BASE, f"data_dir={data}", f"output_dir={tmp_path / 'run'}",
                                f"init_from={tmp_path / 'loop_vit_base.pt'}"])
    trainer = vision.build(cfg, runtime.Env(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), fused_kernel=False))
    assert trainer.cfg.model.block == block and trainer.model.task_embed.weight.shape[0] != 400  # fresh table
    got, want = trainer.model.state_dict(), src.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want if k != "task_embed.weight")
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=2",
                     f"init_from={tmp_path / 'loop_vit_base.pt'}") == 0


def test_init_from_a_deeploop_run_keeps_its_scaling(monkeypatch, data, tmp_path):
    """The architecture is the checkpoint's, its residual scaling included: a vanilla DeepLoop run
    started from without `scaling=` was trained on as baseline (alpha 1: another model; new-user audit)."""
    from hrm_deeploop import runtime
    from hrm_deeploop.loading import load_model
    from hrm_deeploop.pertask import official_ttt
    from hrm_deeploop.training import vision

    assert train_vit(monkeypatch, data, tmp_path / "dl", "train.max_steps=1", "model.block=vanilla",
                     "scaling=deeploop") == 0
    cfg = compose("train-vit", ["train.progress=false", "train.global_batch_size=4", f"data_dir={data}",
                                f"output_dir={tmp_path / 'run'}",
                                f"init_from={tmp_path / 'dl'}"])
    trainer = vision.build(cfg, runtime.Env(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"),
                                            fused_kernel=False))
    want = load_model(str(tmp_path / "dl"), "cpu", "float32").model
    assert trainer.cfg.scaling.scheme == "deeploop" and trainer.model.residual == want.residual
    lone = official_ttt.start_model(str(tmp_path / "dl"), 51, 0, None)  # `ttt views=official`'s copy: built as baseline
    assert lone.scaling.scheme == "deeploop" and lone.residual == want.residual


def test_init_from_another_familys_run_names_the_commands_that_serve_it(monkeypatch, data, tmp_path, capsys):
    """As `train init_from=<a LoopViT run>` says (new-user audit: train-vit said only `neither an official
    LoopViT checkpoint nor a train-vit one`)."""
    from tests.hrm_helpers import TINY_OVERRIDES

    assert run_subcommand("train", [*TINY_OVERRIDES, f"data_dir={data}", f"output_dir={tmp_path / 'hrm'}",
                                    "train.max_steps=1", "train.global_batch_size=4"]) == 0
    capsys.readouterr()
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=1", f"init_from={tmp_path / 'hrm'}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a HRM model: train-vit serves LoopViT; HRM is served by train" in err[0]
    assert not (tmp_path / "run").exists()


def test_init_from_refuses_a_file_that_would_run_code(monkeypatch, data, tmp_path):
    import argparse

    torch.save({"model_state": {}, "config": argparse.Namespace(architecture="loop_vit")}, tmp_path / "bad.pt")
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=2", f"init_from={tmp_path / 'bad.pt'}") == 2


def test_without_the_entropy_term_the_gate_gets_no_gradient_and_training_runs(monkeypatch, data, tmp_path):
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=2", "optim.gate_entropy_weight=0") == 0
    assert train_vit(monkeypatch, data, tmp_path / "noclip", "train.max_steps=2", "optim.grad_clip=0") == 0
    assert all(r["train/grad_norm"] > 0 for r in read_metrics(tmp_path / "noclip") if "train/grad_norm" in r)
    with pytest.raises(ConfigError, match="train.compile"):
        compose("train-vit", ["train.compile=true", "train.fsdp=true"])


def test_the_trainer_step_is_the_compared_step(monkeypatch, data, tmp_path):
    """VisionTrainer.train_step = vision_loss, clip 1.0 and AdamW at the schedule's lr: the
    composition compare_reference_loopvit.py checks against the official step, bit for bit."""
    import copy

    from hrm_deeploop import runtime
    from hrm_deeploop.training import vision
    from hrm_deeploop.training.optim import loopvit_lr_at

    use_stand_in(monkeypatch)
    cfg = compose("train-vit", [*BASE, f"data_dir={data}", f"output_dir={tmp_path}", "train.max_steps=10"])
    t = vision.build(cfg, runtime.Env(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), fused_kernel=False))
    twin = copy.deepcopy(t.model)
    batch = t.next_batch(1)
    t.train_step(2, tensors=batch)  # update 2 of a 2-step warm-up: lr / 2 (update 1 runs at 0, as the official)
    o = cfg.optim
    lr = loopvit_lr_at(2, o.lr, o.warmup_steps, 10, o.min_lr_ratio)
    assert lr == o.lr / 2 and (o.gate_entropy_weight, o.loop_penalty_weight) == (5e-4, 1e-3)  # the script's
    opt = torch.optim.AdamW(twin.parameters(), lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)
    out = twin(batch["canvas"], batch["task_ids"], batch["mask"])
    vision_loss(out, batch["target"], o.gate_entropy_weight, o.loop_penalty_weight, cfg.model.num_loops)[0].backward()
    torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(t.model.parameters(), twin.parameters()))


@pytest.mark.parametrize("poison", ["nan", "int8"])
def test_init_from_refuses_poisoned_weights(monkeypatch, data, tmp_path, capsys, poison):
    """NaN weights or int8 tensors in an official-layout file: one line naming the tensor, exit 2."""
    _official_file(tmp_path / "ok.pt", "hybrid", num_tasks=4)
    state = torch.load(tmp_path / "ok.pt", weights_only=True)
    key = next(k for k, v in state["model_state"].items() if k.endswith(".weight") and v.dtype.is_floating_point)
    w = state["model_state"][key]
    state["model_state"][key] = w.clone().fill_(float("nan")) if poison == "nan" else w.to(torch.int8)
    torch.save(state, tmp_path / "bad.pt")
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=2", f"init_from={tmp_path / 'bad.pt'}") == 2
    err = capsys.readouterr().err
    assert key.removeprefix("_orig_mod.") in err and ("NaN" in err if poison == "nan" else "int8" in err)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow  # the compile: about a minute of the 2-core CPU (train and eval graphs of one block)
@pytest.mark.parametrize("scope", ["block", "model"])
def test_compiled_blocks_give_the_eager_losses(monkeypatch, data, tmp_path, scope):
    """train.compile=true compiles each block (one graph for K blocks x T loops), or with
    compile_scope=model the unrolled model: the same losses and evaluation as eager, to fp32
    tolerance, over a few steps; the checkpoint keeps eager's keys."""
    from hrm_deeploop import checkpoint as ckpt

    common = ["train.max_steps=3", "eval.every=3", "model.dropout=0.0"]
    assert train_vit(monkeypatch, data, tmp_path / "eager", *common) == 0
    from torch._dynamo.utils import counters

    counters.clear()
    assert train_vit(monkeypatch, data, tmp_path / "compiled", *common, "train.compile=true",
                     f"train.compile_scope={scope}") == 0
    assert counters["stats"]["unique_graphs"] >= 1  # it did compile (no silent eager fallback)
    rows = {run: [r for r in read_metrics(tmp_path / run)] for run in ("eager", "compiled")}
    loss = {run: torch.tensor([r["train/loss"] for r in rs if "train/loss" in r]) for run, rs in rows.items()}
    assert len(loss["eager"]) == 3
    torch.testing.assert_close(loss["compiled"], loss["eager"], rtol=1e-5, atol=1e-6)
    ev = {run: next(r for r in rs if "eval/accuracy" in r) for run, rs in rows.items()}
    assert ev["compiled"]["eval/accuracy"] == pytest.approx(ev["eager"]["eval/accuracy"], abs=1e-6)
    a = ckpt.load(tmp_path / "eager" / "checkpoints" / "step_3.pt")["model"]
    b = ckpt.load(tmp_path / "compiled" / "checkpoints" / "step_3.pt")["model"]
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(monkeypatch, data, tmp_path, capsys):
    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.training import vision

    real, calls = vision.vision_loss, {"n": 0}

    def poisoned(*a, **kw):
        loss, parts = real(*a, **kw)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 3 else loss), parts

    monkeypatch.setattr(vision, "vision_loss", poisoned)
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=5", "checkpoint.every=1") != 0
    assert "step 3" in capsys.readouterr().err
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "run")] == [1, 2]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "diverged"
    ckpt.load(ckpt.step_path(tmp_path / "run", 2))  # intact


def test_the_weight_average_is_updated_each_step_resumed_and_evaluated(monkeypatch, data, tmp_path):
    """train.ema: shadow_t = r shadow_{t-1} + (1 - r) w_t, carried through resume, and the trainer
    evaluates with the averaged weights."""
    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.training import vision

    ema = ["train.ema=true", "train.ema_rate=0.5", "checkpoint.every=1", "train.max_steps=3", "eval.every=3"]
    assert train_vit(monkeypatch, data, tmp_path / "run", *ema) == 0
    s2, s3 = (ckpt.load(ckpt.step_path(tmp_path / "run", k)) for k in (2, 3))
    for k, w in s3["model"].items():
        torch.testing.assert_close(s3["ema"]["shadow"][k], 0.5 * s2["ema"]["shadow"][k] + 0.5 * w)
    assert any(not torch.equal(s3["ema"]["shadow"][k], w) for k, w in s3["model"].items())
    assert train_vit(monkeypatch, data, tmp_path / "cut", *ema, "train.stop_after=2") == 0
    assert train_vit(monkeypatch, data, tmp_path / "cut", *ema, "resume=true") == 0
    r3 = ckpt.load(ckpt.step_path(tmp_path / "cut", 3))
    assert all(torch.equal(r3["ema"]["shadow"][k], v) for k, v in s3["ema"]["shadow"].items())
    seen = {}
    real = vision.evaluate

    def recording(model, *a, **kw):  # the weights the trainer's evaluation runs with
        seen.update({k: v.clone() for k, v in model.state_dict().items()})
        return real(model, *a, **kw)

    monkeypatch.setattr(vision, "evaluate", recording)
    assert train_vit(monkeypatch, data, tmp_path / "again", *ema) == 0
    assert all(torch.equal(seen[k], v) for k, v in s3["ema"]["shadow"].items())


def test_the_time_budget_stops_with_a_checkpoint_that_resumes(monkeypatch, data, tmp_path):
    from hrm_deeploop import checkpoint as ckpt

    assert train_vit(monkeypatch, data, tmp_path / "run", "train.time_budget=0.001", "train.max_steps=100000") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "stopped" and 0 < summary["steps"] < 100000
    (step, _), = ckpt.list_checkpoints(tmp_path / "run")[-1:]
    assert step == summary["steps"]
    assert train_vit(monkeypatch, data, tmp_path / "run", f"train.max_steps={step + 2}", "resume=true") == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == step + 2


@pytest.mark.parametrize("size, model, twin", [("large", "loopvit", "looped_eps"), ("medium", "loopvit_medium", "looped_eps"),
                                               ("small", "loopvit_small", "looped_eps"), ("b6", "loopvit_b6", "deeploop")])
def test_the_paper_setups_and_their_deeploop_twins(size, model, twin):
    """configs/experiment/loopvit_<size>_{baseline,<twin>}.yaml: the flavour, the official schedule
    (global batch 256, 156,700 steps), and a twin that differs in the residual scheme only."""
    from dataclasses import asdict

    base = compose("train-vit", [f"experiment=loopvit_{size}_baseline"])
    other = compose("train-vit", [f"experiment=loopvit_{size}_{twin}"])
    assert asdict(base.model) == asdict(compose("train-vit", [f"model={model}"]).model)
    assert base.train.global_batch_size == 256 and base.train.max_steps == 156700 and base.scaling.scheme == "baseline"
    assert other.scaling.scheme == twin and other.run_name == f"loopvit_{size}_{twin}"
    a, b = asdict(base), asdict(other)
    assert {k for k in a if a[k] != b[k]} == {"scaling", "run_name"}


def test_the_loader_reads_both_kinds_and_the_exit_study_runs(monkeypatch, data, tmp_path, capsys):
    """`loading.load_model`: an official file (its weights mapped) and a train-vit run, whatever the
    caller; refused in one line for a command that does not serve LoopViT; the exit study's script runs."""
    from benchmarks import study_loopvit_exit
    from hrm_deeploop.errors import UserError
    from hrm_deeploop.loading import load_model

    src = _official_file(tmp_path / "official.pt", "vanilla", num_tasks=7)
    loaded = load_model(tmp_path / "official.pt")
    assert loaded.kind == "official" and loaded.config.block == "vanilla" and loaded.family.name == "loopvit"
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in src.state_dict().items())
    with pytest.raises(UserError, match="holds a LoopViT model: train serves HRM, TRM, URM"):
        load_model(tmp_path / "official.pt", command="train")
    assert train_vit(monkeypatch, data, tmp_path / "run", "train.max_steps=2") == 0
    assert load_model(tmp_path / "run").config.num_loops == 3
    capsys.readouterr()
    study_loopvit_exit.main(["--checkpoint", str(tmp_path / "run"), "--data", str(data), "--split", "train",
                             "--taus", "0.05", "--batch", "4"])
    lines = {ln.split("  ")[0].strip(): ln for ln in capsys.readouterr().out.splitlines()}
    assert " 3.00 " in lines["fixed depth"] and "plateau (code: 5%, 2 loops)" in lines  # T = 3 loops each


def test_evaluate_takes_an_official_file_whose_task_order_is_established(monkeypatch, tmp_path, capsys):
    """`evaluate` on an official LoopViT `.pt` (no run beside it): read by the one LoopViT reader
    (`loading.load_model`), its task tokens put in the dataset's order (`data.official_tasks`: one
    official row per task, every augmentation of a task on its row), predicted through canvas views
    and voted. A table as long as the dataset's identifiers (row i would serve id i, shifted by the
    blank) or of any other size is one line naming the file."""
    import numpy as np

    from arc_data.arc.build import BuildConfig, build
    from tests.arc_synth import write_kaggle

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {"t": task}, solutions=False)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "data"), test_labels="optional", num_aug=2,
                      seed=0, progress=False))
    rows = json.loads((tmp_path / "data" / "test" / "dataset.json").read_text())["num_puzzle_identifiers"]
    assert rows == 4  # <blank>, t and its 2 augmentations: one task
    _official_file(tmp_path / "fits.pt", "hybrid", num_tasks=1)
    _official_file(tmp_path / "shifted.pt", "hybrid", num_tasks=rows)
    _official_file(tmp_path / "other.pt", "hybrid", num_tasks=rows + 5)

    def evaluate(ckpt, out):
        try:
            return run_subcommand("evaluate", [f"checkpoint={tmp_path / ckpt}", f"data_dir={tmp_path / 'data'}",
                                               f"output_dir={tmp_path / out}", "passes=2", "device=cpu"])
        except SystemExit as e:
            return int(e.code or 0)

    assert evaluate("fits.pt", "ev") == 0
    assert "official LoopViT checkpoint" in capsys.readouterr().out
    preds = np.load(tmp_path / "ev" / "predictions.npz")
    assert len(preds["predictions"]) == 2 * (2 + 1)  # passes x (num_aug copies + the original)
    for name, table in (("shifted.pt", rows), ("other.pt", rows + 5)):
        assert evaluate(name, "ev_" + name) == 2
        err = capsys.readouterr().err
        assert name in err and "cannot be established" in err and f"its table has {table} rows" in err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / ("ev_" + name)).exists()
