"""train-gpt: run folder, bit-exact resume, gradient accumulation and DDP equivalence, divergence."""

from __future__ import annotations

import dataclasses
import json
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.errors import ConfigError, TrainingDiverged, UserError
from hrm_deeploop.models.gpt import GPT
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training import lm as train_gpt
from tests.gpt_helpers import array_data, one_thread, patterned_tokens, tiny_model, tiny_train_cfg  # noqa: F401  (autouse)

_STREAM = patterned_tokens(22_000, seed=0)
TRAIN, VAL = _STREAM[:20_000], _STREAM[20_000:]


def with_model(cfg, model, scaling):
    """cfg with this model and scaling (configs are plain dataclasses: a copy with two fields set)."""
    return dataclasses.replace(cfg, model=model, scaling=scaling)


def _weights(run_dir, step):
    return ckpt.load(ckpt.step_path(run_dir, step))["model"]


def test_run_folder_and_summary(tmp_path, capsys):
    cfg = tiny_train_cfg(str(tmp_path / "run"), max_steps=30, eval_every=15)
    summary = train_gpt.train(with_model(cfg, tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop")),
                              data=array_data(TRAIN, VAL, 32, 4))
    run = tmp_path / "run"
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "summary.json", "checkpoints/step_30.pt"):
        assert (run / name).exists(), name
    saved = json.loads((run / "summary.json").read_text())
    assert saved["status"] == "finished" and saved["steps"] == 30 and saved["tokens"] == 30 * 128
    assert saved["final_val_loss"] == pytest.approx(summary["final_val_loss"])
    assert saved["final_val_loss"] < saved["unigram_entropy"]  # the patterned stream is learnable
    assert saved["left_unigram_floor"] is True
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "train/loss" in r]
    assert {"perf/tokens_per_s", "perf/mfu", "train/lr", "train/grad_norm"} <= set(train_rows[0])
    assert train_rows[-1]["train/loss"] < train_rows[0]["train/loss"] - 0.5
    assert [r["step"] for r in rows if "val/loss" in r] == [15, 30]
    printed = capsys.readouterr().out  # each validation loss on the console too, as logged
    for r in rows:
        if "val/loss" in r:
            assert f"train-gpt: step {r['step']}: val loss {r['val/loss']:.4f}\n" in printed
    state = ckpt.load(run / "checkpoints/step_30.pt")
    assert {"model", "optimizers", "schedule", "rng", "sampler", "config", "code_version", "step"} <= set(state)
    # a fresh run refuses a folder that holds checkpoints
    with pytest.raises(UserError, match="resume=true"):
        train_gpt.train(with_model(cfg, tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop")),
                        data=array_data(TRAIN, VAL, 32, 4))


def test_resume_is_bit_exact(tmp_path):
    model, scaling = tiny_model(num_rounds=2), ScalingConfig(scheme="deeploop")
    straight = tiny_train_cfg(str(tmp_path / "a"), max_steps=8, checkpoint_every=100)
    train_gpt.train(with_model(straight, model, scaling), data=array_data(TRAIN, VAL, 32, 4))
    first = tiny_train_cfg(str(tmp_path / "b"), max_steps=8, stop_after=4, checkpoint_every=100)
    out = train_gpt.train(with_model(first, model, scaling), data=array_data(TRAIN, VAL, 32, 4))
    assert out["status"] == "stopped" and out["steps"] == 4
    assert json.loads((tmp_path / "b/summary.json").read_text())["status"] == "stopped"
    second = tiny_train_cfg(str(tmp_path / "b"), max_steps=8, resume=True, checkpoint_every=100)
    train_gpt.train(with_model(second, model, scaling), data=array_data(TRAIN, VAL, 32, 4))
    a, b = _weights(tmp_path / "a", 8), _weights(tmp_path / "b", 8)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    sa = json.loads((tmp_path / "a/summary.json").read_text())
    sb = json.loads((tmp_path / "b/summary.json").read_text())
    assert sa["final_train_loss"] == sb["final_train_loss"] and sa["final_val_loss"] == sb["final_val_loss"]
    # architecture changes cannot resume
    bad = tiny_train_cfg(str(tmp_path / "b"), max_steps=8, resume=True)
    with pytest.raises(UserError, match="model.num_rounds"):
        train_gpt.train(with_model(bad, tiny_model(num_rounds=3), scaling), data=array_data(TRAIN, VAL, 32, 4))


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    model, scaling = tiny_model(), ScalingConfig(scheme="deeploop")
    one = tiny_train_cfg(str(tmp_path / "one"), max_steps=3, micro_batch_size=4)
    two = tiny_train_cfg(str(tmp_path / "two"), max_steps=3, micro_batch_size=2)
    train_gpt.train(with_model(one, model, scaling), data=array_data(TRAIN, None, 32, 4))
    train_gpt.train(with_model(two, model, scaling), data=array_data(TRAIN, None, 32, 2))
    a, b = _weights(tmp_path / "one", 3), _weights(tmp_path / "two", 3)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def _ddp_worker(rank: int, world: int, port: int, out: str, compile_: bool = False) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), WANDB_MODE="disabled")
    torch.set_num_threads(1)
    cfg = tiny_train_cfg(out, max_steps=3, micro_batch_size=2, compile=compile_)
    train_gpt.train(with_model(cfg, tiny_model(), ScalingConfig(scheme="deeploop")),
                    data=array_data(TRAIN, VAL, 32, 2, rank=rank, world_size=world))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("compile_", [False, pytest.param(True, marks=pytest.mark.slow)],  # compiled: .ci/run's second step
                         ids=["eager", "compiled"])
def test_ddp_two_processes_match_one(tmp_path, compile_):
    """2 gloo processes x 2 sequences == 1 eager process x 4 sequences (same global batch, same
    windows); compiled: DDP around torch.compile(model) on both ranks."""
    single = tiny_train_cfg(str(tmp_path / "single"), max_steps=3, micro_batch_size=4)
    s1 = train_gpt.train(with_model(single, tiny_model(), ScalingConfig(scheme="deeploop")), data=array_data(TRAIN, VAL, 32, 4))
    mp.start_processes(_ddp_worker, args=(2, _free_port(), str(tmp_path / "ddp"), compile_), nprocs=2, join=True,
                       start_method="spawn")
    a, b = _weights(tmp_path / "single", 3), _weights(tmp_path / "ddp", 3)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    s2 = json.loads((tmp_path / "ddp/summary.json").read_text())
    assert s2["final_val_loss"] == pytest.approx(s1["final_val_loss"], rel=1e-4)
    assert s2["final_train_loss"] == pytest.approx(s1["final_train_loss"], rel=1e-4)


class _NaNAfter(GPT):
    calls = 0

    def forward(self, idx, targets=None, num_rounds=None):
        out = super().forward(idx, targets, num_rounds)
        if targets is not None and self.training:
            type(self).calls += 1
            if type(self).calls > 3:
                return out[0], out[1] * float("nan")
        return out


def test_divergence_raises_with_step_and_keeps_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(train_gpt, "GPT", _NaNAfter)
    cfg = tiny_train_cfg(str(tmp_path / "run"), max_steps=10, checkpoint_every=2)
    with pytest.raises(TrainingDiverged, match="at step 4; the last checkpoint is .*step_2.pt"):
        train_gpt.train(with_model(cfg, tiny_model(), ScalingConfig()), data=array_data(TRAIN, VAL, 32, 4))
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["status"] == "diverged" and summary["steps"] == 3 and summary["left_unigram_floor"] is False
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "run")] == [2]  # the last good one is kept


def test_bad_batch_config_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="train.global_batch_tokens=100: must be a multiple"):
        tiny_train_cfg(str(tmp_path / "run"), global_batch_tokens=100)
    # a multiple per process that the world size does not divide is found at launch, before writing
    cfg = tiny_train_cfg(str(tmp_path / "run"), global_batch_tokens=128, micro_batch_size=4)
    with pytest.raises(ConfigError, match="world_size"):
        train_gpt.grad_accum_steps(cfg.train.global_batch_tokens, cfg.train.micro_batch_size, 32, world_size=3)
    assert not (tmp_path / "run").exists()


def test_nan_before_any_checkpoint_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(train_gpt, "GPT", _NaNAfter)
    _NaNAfter.calls = 0
    cfg = tiny_train_cfg(str(tmp_path / "run"), max_steps=10, checkpoint_every=8)
    with pytest.raises(TrainingDiverged, match="at step 4; no checkpoint was written yet"):
        train_gpt.train(cfg, data=array_data(TRAIN, VAL, 32, 4))


def test_resume_after_a_kill_logs_each_step_once(tmp_path, monkeypatch):
    """Rows a killed run logged after its last checkpoint are dropped on resume (they are re-run)."""
    cfg = tiny_train_cfg(str(tmp_path / "run"), max_steps=8, checkpoint_every=3, log_every=1, eval_every=100)
    real = train_gpt.LMTrainer.train_step

    def killed_at_6(self, step):
        if step == 6:
            raise KeyboardInterrupt("simulated kill")
        return real(self, step)

    monkeypatch.setattr(train_gpt.LMTrainer, "train_step", killed_at_6)
    with pytest.raises(KeyboardInterrupt):
        train_gpt.train(cfg, data=array_data(TRAIN, VAL, 32, 4))
    logged = [json.loads(x)["step"] for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4, 5]  # steps 4 and 5 came after the step-3 checkpoint
    monkeypatch.setattr(train_gpt.LMTrainer, "train_step", real)
    train_gpt.train(dataclasses.replace(cfg, resume=True), data=array_data(TRAIN, VAL, 32, 4))
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if "train/loss" in r]
    assert train_steps == list(range(1, 9))
    csv_lines = (tmp_path / "run/metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(rows)


def test_a_second_pass_over_the_data_is_announced(tmp_path, capsys):
    """The trainer says when it starts repeating its training tokens (50B-token runs must not)."""
    cfg = tiny_train_cfg(str(tmp_path / "run"), max_steps=4)
    short = patterned_tokens(32 * 4 * 2 + 1, seed=1)  # two batches of windows: epoch 1 starts at step 3
    train_gpt.train(cfg, data=array_data(short, VAL, 32, 4))
    out = capsys.readouterr().out
    assert "step 3 starts pass 2 over the training shards" in out and "pass 3" not in out
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["train/data_epoch"] for r in rows if "train/data_epoch" in r][-1] == 1.0
