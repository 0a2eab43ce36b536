"""train.fsdp=true: FSDP2 (fully_shard) under a 2-rank gloo launch gives the 1-rank run's loss curve,
and its checkpoints keep the single-process layout: a 1-rank checkpoint resumes sharded, a sharded
one resumes at 1 rank and loads in eval-gpt's loader."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training import lm as train_gpt
from tests.gpt_helpers import array_data, one_thread, patterned_tokens, tiny_model, tiny_train_cfg  # noqa: F401  (autouse)
from tests.test_gpt_train import _free_port

_STREAM = patterned_tokens(22_000, seed=0)
TRAIN, VAL = _STREAM[:20_000], _STREAM[20_000:]
STEPS = 6


def _cfg(out: str, micro: int, **kw):
    cfg = tiny_train_cfg(out, tiny_model(num_blocks=2), ScalingConfig(scheme="deeploop"), max_steps=STEPS,
                         micro_batch_size=micro, log_every=1, checkpoint_every=100, eval_every=STEPS, **kw)
    return cfg


def _fsdp_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), WANDB_MODE="disabled")
    torch.set_num_threads(1)
    shard = train_gpt.fsdp.shard

    def recorded(model, blocks):  # proof that the parameters really are sharded (DTensors, half each)
        out = shard(model, blocks)
        params = list(model.parameters())
        (Path(out_dir) / f"sharded.rank{rank}.json").write_text(json.dumps({
            "dtensors": sum(hasattr(q, "full_tensor") for q in params), "params": len(params),
            "local": sum(q.to_local().numel() for q in params), "full": sum(q.numel() for q in params)}))
        return out

    out_dir = out
    train_gpt.fsdp.shard = recorded
    cfg = _cfg(out, micro=1, resume=True, stop_after=5)  # 2 ranks x 1 sequence x 2 micro-batches = 4 sequences
    cfg.train = dataclasses.replace(cfg.train, fsdp=True)
    train_gpt.train(cfg, data=array_data(TRAIN, VAL, 32, 1, rank=rank, world_size=world))


def _losses(run) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["train/loss"] for r in rows if "train/loss" in r]


def test_fsdp_two_ranks_match_one_and_checkpoints_cross_world_sizes(tmp_path):
    straight = train_gpt.train(_cfg(str(tmp_path / "a"), micro=4), data=array_data(TRAIN, VAL, 32, 4))
    run = tmp_path / "b"
    # steps 1-3 on one process, 4-5 sharded over two, 6 on one process again
    train_gpt.train(_cfg(str(run), micro=4, stop_after=3), data=array_data(TRAIN, VAL, 32, 4))
    mp.start_processes(_fsdp_worker, args=(2, _free_port(), str(run)), nprocs=2, join=True, start_method="spawn")
    assert json.loads((run / "summary.json").read_text())["status"] == "stopped"
    for rank in (0, 1):
        seen = json.loads((run / f"sharded.rank{rank}.json").read_text())
        assert seen["dtensors"] == seen["params"] and seen["local"] < seen["full"], seen
    plain, sharded = (ckpt.load(ckpt.step_path(run, s))["optimizers"]["adamw"] for s in (3, 5))
    assert [g["params"] for g in sharded["param_groups"]] == [g["params"] for g in plain["param_groups"]]
    for i, s in plain["state"].items():  # the same layout and full (unsharded) shapes
        assert {k: v.shape for k, v in sharded["state"][i].items()} == {k: v.shape for k, v in s.items()}
    resumed = train_gpt.train(_cfg(str(run), micro=4, resume=True), data=array_data(TRAIN, VAL, 32, 4))
    a, b = _losses(tmp_path / "a"), _losses(run)
    assert len(a) == len(b) == STEPS
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-5, atol=1e-6)
    wa = ckpt.load(ckpt.step_path(tmp_path / "a", STEPS))["model"]
    wb = ckpt.load(ckpt.step_path(run, STEPS))["model"]
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5, msg=k)
    assert abs(resumed["final_val_loss"] - straight["final_val_loss"]) < 1e-4
    from hrm_deeploop.loading import load_model

    model = load_model(ckpt.step_path(run, 5)).model  # the sharded run's checkpoint, in eval-gpt's loader
    assert model.num_params() > 0
