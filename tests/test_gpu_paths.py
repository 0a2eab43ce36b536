"""The CUDA code paths of the trainers, evaluator and benchmarks (skipped without a GPU).

The CPU suite covers the same logic in fp32; these check what only a GPU runs: bf16 compute,
the fused residual-norm kernel inside the models (eager and under torch.compile), bf16 autocast
with fused AdamW, CUDA memory accounting in the benchmarks. (build -> train -> evaluate -> vote on
CUDA is the `cuda` case of tests/test_hrm_arc_pipeline.py.) Tolerances are for bf16.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

pytestmark = pytest.mark.gpu


def _hrm_trainer(compile_: bool, fused: bool, monkeypatch):
    from benchmarks.bench_hrm import PRESETS
    from benchmarks.reasoner_setup import make_trainer
    from hrm_deeploop.models.scaling import ScalingConfig

    cfg = replace(PRESETS["tiny"]["model"], num_puzzle_identifiers=8, seq_len=64, forward_dtype="bfloat16")
    return make_trainer(cfg, ScalingConfig(scheme="deeploop"), torch.device("cuda"), 8, compile_, fused=fused), cfg


@pytest.mark.parametrize("compile_,fused", [(False, True), (True, True)], ids=["eager+fused", "compile+fused"])
def test_hrm_cuda_bf16_step_matches_eager_plain(compile_, fused, monkeypatch):
    """bf16 HRM train steps with the fused kernel and/or torch.compile match eager plain PyTorch."""
    from benchmarks.reasoner_setup import random_batches
    from hrm_deeploop.models.kernels import residual_norm as rn

    calls = {"n": 0}
    real = rn.residual_rms_norm

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    runs = {}
    for name, (c, f) in {"ref": (False, False), "test": (compile_, fused)}.items():
        trainer, cfg = _hrm_trainer(c, f, monkeypatch)
        if name == "test" and fused and not compile_:
            monkeypatch.setattr(rn, "residual_rms_norm", counting)
        batches = random_batches(cfg, 8, 2, torch.device("cuda"), seed=1)
        runs[name] = [trainer.train_step(tensors=b) for b in batches]
        monkeypatch.setattr(rn, "residual_rms_norm", real)
        torch._dynamo.reset()
    if fused and not compile_:
        assert calls["n"] > 0, "the fused kernel was not used on CUDA"
    for a, b in zip(runs["ref"], runs["test"]):
        assert math.isfinite(b["loss"]) and math.isfinite(b["grad_norm"])
        assert b["lm_loss"] == pytest.approx(a["lm_loss"], rel=3e-2)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-1)


@pytest.mark.parametrize("mixer", ["attention", "mlp"])
@pytest.mark.parametrize("compile_,fused", [(False, True), (True, True)], ids=["eager+fused", "compile+fused"])
def test_trm_cuda_bf16_step_matches_eager_plain(compile_, fused, mixer, monkeypatch):
    """bf16 TRM train steps (weight average on) with the fused kernel and/or torch.compile match
    eager plain PyTorch; the model computes in bf16 and the average stays fp32."""
    from benchmarks.reasoner_setup import make_trainer, random_batches
    from hrm_deeploop.models.model_config import TRMConfig
    from hrm_deeploop.models.scaling import ScalingConfig

    cfg = TRMConfig(hidden_size=64, num_heads=2, expansion=2.0, num_h_cycles=2, num_l_cycles=2, halt_max_steps=3,
                    puzzle_emb_len=4, seq_len=64, num_puzzle_identifiers=8, mixer=mixer,
                    pos_encodings="none" if mixer == "mlp" else "rope")
    runs = {}
    for name, (c, f) in {"ref": (False, False), "test": (compile_, fused)}.items():
        trainer = make_trainer(cfg, ScalingConfig(scheme="deeploop"), torch.device("cuda"), 8, c, ema=True, fused=f)
        assert trainer.model.dtype == torch.bfloat16
        batches = random_batches(cfg, 8, 3, torch.device("cuda"), seed=1)
        runs[name] = [trainer.train_step(tensors=b) for b in batches]
        assert all(s.dtype == torch.float32 and s.is_cuda for s in trainer.ema.shadow.values())
        torch._dynamo.reset()
    for a, b in zip(runs["ref"], runs["test"]):
        assert math.isfinite(b["loss"]) and math.isfinite(b["grad_norm"])
        assert b["lm_loss"] == pytest.approx(a["lm_loss"], rel=3e-2)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-1)


@pytest.mark.parametrize("compile_", [False, True], ids=["eager", "compiled"])
def test_gpt_cuda_bf16_autocast_fused_adamw_learns(tmp_path, compile_):
    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.training import lm as train_gpt
    from tests.gpt_helpers import array_data, patterned_tokens, tiny_model, tiny_train_cfg

    stream = patterned_tokens(22_000, seed=0)
    cfg = tiny_train_cfg(str(tmp_path / "run"), tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop"),
                         max_steps=40, eval_every=40, device="cuda", compile=compile_)
    summary = train_gpt.train(cfg, data=array_data(stream[:20_000], stream[20_000:], 32, 4))
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert summary["status"] == "finished" and math.isfinite(summary["final_val_loss"])
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(r["perf/mfu"] > 0 for r in rows if "perf/mfu" in r)


def test_benchmarks_cuda_tiny(capsys):
    from benchmarks import bench_gpt, bench_hrm

    rc = bench_hrm.main(["--preset", "tiny", "--device", "cuda", "--warmup", "1", "--steps", "2", "--no-compile"])
    out = capsys.readouterr().out
    assert rc == 0 and "eager+fused" in out and "MFU" in out, out
    rc = bench_gpt.main(["--preset", "tiny", "--device", "cuda", "--warmup", "1", "--steps", "2", "--no-compile",
                         "--rounds", "1", "--mem-rounds", "1", "2", "--max-r", "4"])
    out = capsys.readouterr().out
    assert rc == 0 and "largest R within" in out and "FAILED" not in out, out


def test_train_vit_bf16_autocast_tracks_float32(tmp_path, monkeypatch):
    """train-vit on CUDA: the bf16 autocast step (the default dtype) trains as the float32 one does,
    to bf16 tolerance over a few steps (CPU runs float32 whatever `dtype` says)."""
    from hrm_deeploop.cli import run_subcommand
    from tests.hrm_helpers import make_dataset, read_metrics, use_stand_in

    use_stand_in(monkeypatch)
    data = make_dataset(tmp_path / "arc", num_tasks=3, train_per_puzzle=3, test_per_puzzle=1, side=3)
    losses = {}
    for dtype in ("bfloat16", "float32"):
        out = tmp_path / dtype
        assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "train.progress=false", "device=cuda",
                                            "train.global_batch_size=4", "optim.warmup_steps=2", "train.max_steps=4",
                                            "model.dropout=0.0", f"dtype={dtype}", f"data_dir={data}",
                                            f"output_dir={out}"]) in (0, None)
        losses[dtype] = [r["train/loss"] for r in read_metrics(out) if "train/loss" in r]
    assert len(losses["bfloat16"]) == 4 and all(math.isfinite(v) for v in losses["bfloat16"])
    for a, b in zip(losses["bfloat16"], losses["float32"]):
        assert abs(a - b) <= 0.05 * abs(b)
