"""`train-vit` under torchrun (2 gloo ranks, spawned as torchrun would set them up): DDP and FSDP2 give
the one-process run's losses, evaluation and weights for the same global batch; FSDP2's checkpoints
keep the one-process layout (a sharded run resumes its own checkpoint, a one-process run resumes a
sharded one). Dropout is off (each rank draws its own masks for its rows: not the one-process masks).

The fast test checks the two pieces that make the runs agree without starting processes: each rank's
slice of a global batch gets the views one process gives it, and the ranks' weighted losses average
to the one-process loss."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hrm_deeploop import checkpoint as ckpt
from tests.hrm_helpers import make_dataset, read_metrics, stand_in_open_split, use_stand_in
from tests.test_hrm_train import _free_port

BASE = ["experiment=loopvit_tiny_cpu", "train.progress=false", "train.global_batch_size=4", "optim.warmup_steps=2",
        "model.dropout=0.0", "train.max_steps=4", "checkpoint.every=2", "eval.every=4", "eval.max_batches=null",
        "eval.global_batch_size=4"]


def _run(data_dir: Path, out: Path, *extra: str) -> int:
    from hrm_deeploop.cli import run_subcommand

    try:
        return run_subcommand("train-vit", [*BASE, f"data_dir={data_dir}", f"output_dir={out}", *extra])
    except SystemExit as e:
        return int(e.code or 0)


def _worker(rank: int, world: int, ports: list[int], data_dir: str, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      WANDB_MODE="disabled")
    torch.set_num_threads(1)
    import hrm_deeploop.data.batches
    from hrm_deeploop.training import fsdp

    hrm_deeploop.data.batches.open_split = stand_in_open_split
    shard, seen = fsdp.shard, []

    def recorded(model, blocks):  # proof that the parameters really are sharded
        out = shard(model, blocks)
        params = list(model.parameters())
        seen.append({"dtensors": sum(hasattr(q, "to_local") for q in params), "params": len(params),
                     "local": sum(q.to_local().numel() for q in params), "full": sum(q.numel() for q in params)})
        return out

    fsdp.shard = recorded
    runs = [("ddp", []), ("fsdp", ["train.fsdp=true", "train.stop_after=2"]), ("fsdp", ["train.fsdp=true", "resume=true"]),
            ("fsdp_from_one", ["train.fsdp=true", "resume=true"])]
    for (out, extra), port in zip(runs, ports):
        os.environ["MASTER_PORT"] = str(port)
        assert _run(Path(data_dir), Path(root) / out, *extra) == 0, (out, extra)
    Path(root, f"sharded.rank{rank}.json").write_text(json.dumps(seen))


def _losses(run: Path, first: int = 1) -> torch.Tensor:
    return torch.tensor([r["train/loss"] for r in read_metrics(run) if "train/loss" in r and r["step"] >= first])


def _eval(run: Path) -> dict[str, float]:
    return {k: v for r in read_metrics(run) if r["step"] == 4 for k, v in r.items() if k.startswith("eval/")}


def _trim_to_step_2(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    for f in (dst / "checkpoints").glob("step_4*"):
        f.unlink()
    (dst / "summary.json").unlink()


@pytest.mark.slow  # 12 s on the 2-core machine when idle (two spawned ranks, five runs); more under load
def test_ddp_and_fsdp_on_two_ranks_match_one_process(monkeypatch, tmp_path):
    # grids of several sizes on a 16 canvas: the upscale (1..4) makes the ranks' valid pixels differ
    data = make_dataset(tmp_path / "data", num_tasks=4, train_per_puzzle=3, test_per_puzzle=1, side=3)
    use_stand_in(monkeypatch)
    one = tmp_path / "one"
    assert _run(data, one) == 0
    _trim_to_step_2(one, tmp_path / "fsdp_from_one")
    mp.start_processes(_worker, args=(2, [_free_port() for _ in range(4)], str(data), str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    for rank in (0, 1):
        for seen in json.loads((tmp_path / f"sharded.rank{rank}.json").read_text()):
            assert seen["dtensors"] == seen["params"] and seen["local"] < seen["full"], seen
    ref = _losses(one)
    assert len(ref) == 4
    _trim_to_step_2(tmp_path / "fsdp", tmp_path / "one_from_fsdp")  # the sharded step-2 checkpoint, on one process
    assert _run(data, tmp_path / "one_from_fsdp", "resume=true") == 0
    for name in ("ddp", "fsdp"):
        torch.testing.assert_close(_losses(tmp_path / name), ref, rtol=1e-5, atol=1e-6, msg=name)
        assert _eval(tmp_path / name) == pytest.approx(_eval(one), rel=1e-5, abs=1e-6)
    for name in ("fsdp_from_one", "one_from_fsdp"):
        torch.testing.assert_close(_losses(tmp_path / name, first=3), ref[2:], rtol=1e-5, atol=1e-6, msg=name)
    sa = ckpt.load(ckpt.step_path(one, 4))
    for name in ("ddp", "fsdp"):
        sb = ckpt.load(ckpt.step_path(tmp_path / name, 4))
        assert sb["model"].keys() == sa["model"].keys()
        for k, v in sa["model"].items():
            torch.testing.assert_close(sb["model"][k], v, rtol=1e-4, atol=1e-5, msg=f"{name} {k}")
        oa, ob = sa["optimizers"]["adamw"], sb["optimizers"]["adamw"]
        for i, s in oa["state"].items():
            torch.testing.assert_close(ob["state"][i]["exp_avg"], s["exp_avg"], rtol=1e-4, atol=1e-6)


def test_rank_slices_get_the_one_process_views_and_the_weighted_losses_average_to_its_loss(monkeypatch, tmp_path):
    from hrm_deeploop import runtime
    from hrm_deeploop.data.canvas import canvas_batch
    from hrm_deeploop.models.loopvit import LoopViTOutput
    from hrm_deeploop.training import vision

    data = make_dataset(tmp_path / "data", num_tasks=3, train_per_puzzle=4, test_per_puzzle=1, side=3)
    split = stand_in_open_split(data, "train")
    idx, pids = np.arange(8), np.arange(8) % 3

    def batch(keep=None):
        return canvas_batch(split, idx, pids, 16, np.random.default_rng([0, 5, 0]), keep=keep)

    whole = batch()
    halves = [batch(slice(0, 4)), batch(slice(4, 8))]
    for k, v in whole.items():
        assert np.array_equal(np.concatenate([h[k] for h in halves]), v), k
    assert len(set(whole["views"][:, 0])) > 1  # the scales differ: so do the ranks' valid pixels

    target = torch.from_numpy(whole["target"]).long()
    logits = torch.randn(8, 16, 16, 12)
    g = torch.rand(8, 3)
    ref, _ = vision.vision_loss(LoopViTOutput(logits, g, None), target, 5e-4, 1e-3, 3)
    counts = [int((target[r * 4:(r + 1) * 4] != 10).sum()) for r in (0, 1)]
    assert counts[0] != counts[1]
    losses = []
    for r in (0, 1):  # the all-reduce of the valid-pixel count, played by hand
        monkeypatch.setattr(runtime, "all_reduce_", lambda t: t.fill_(sum(counts)))
        rows = slice(r * 4, (r + 1) * 4)
        share = vision.pixel_share(target[rows], world_size=2)
        assert share == pytest.approx(2 * counts[r] / sum(counts))
        losses.append(vision.vision_loss(LoopViTOutput(logits[rows], g[rows], None), target[rows], 5e-4, 1e-3, 3,
                                         share)[0])
    torch.testing.assert_close(sum(losses) / 2, ref)  # DDP's average over ranks
    assert vision.pixel_share(target, world_size=1) == 1.0
