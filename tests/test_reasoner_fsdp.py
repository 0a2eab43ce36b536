"""train.fsdp=true for the reasoners (HRM; TRM and URM with their weight average): FSDP2 over 2 gloo ranks
gives the 1-rank run's losses, evaluation and weights, and its checkpoints keep the 1-rank layout:
a sharded run resumes its own checkpoint, a 1-rank checkpoint resumes sharded, a sharded one
resumes at 1 rank and loads in evaluate's loader.

The 1-rank run uses train.grad_accum=2: its two micro-batches are the two ranks' halves of each
global batch (each with its own ACT carry), so the runs see the same rows. Exploration is off
(halt_exploration_prob=0: the per-rank exploration generators then draw nothing that matters),
and with halt_max_steps=2 every slot halts at step 2 (Q(halt) = Q(continue) at step 1), so a
carry restarted by a change of world size at step 2 is the carry the run had."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from hrm_deeploop import checkpoint as ckpt
from tests.hrm_helpers import TINY_OVERRIDES, TRM_TINY_OVERRIDES, make_dataset, read_metrics, train_cli
from tests.test_hrm_train import _free_port
from tests.test_urm_model import URM_TINY_OVERRIDES

BASES = {"hrm": TINY_OVERRIDES, "trm": TRM_TINY_OVERRIDES, "urm": URM_TINY_OVERRIDES}
COMMON = ["model.halt_exploration_prob=0", "train.max_steps=4", "checkpoint.every=2", "eval.every=4",
          "eval.max_batches=1"]


def _fsdp_worker(rank: int, world: int, ports: list[int], data_dir: str, root: str, names: list[str]) -> None:
    """Three sharded runs per model, each its own process group on its own port (a rank that
    finished one run must not join the previous run's store)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      WANDB_MODE="disabled")
    torch.set_num_threads(1)
    import hrm_deeploop.data.batches
    from hrm_deeploop.cli import run_subcommand
    from hrm_deeploop.training import fsdp
    from tests.hrm_helpers import stand_in_open_split

    hrm_deeploop.data.batches.open_split = stand_in_open_split
    shard, seen = fsdp.shard, []

    def recorded(model, blocks):  # proof that the parameters really are sharded (DTensors, a part each)
        out = shard(model, blocks)
        params = list(model.parameters())
        seen.append({"dtensors": sum(hasattr(q, "to_local") for q in params), "params": len(params),
                     "local": sum(q.to_local().numel() for q in params), "full": sum(q.numel() for q in params)})
        return out

    fsdp.shard = recorded
    ports = iter(ports)
    for name in names:
        args = [*BASES[name], *COMMON, f"data_dir={data_dir}", "train.fsdp=true"]
        runs = [(f"{name}_b", ["train.stop_after=2"]), (f"{name}_b", ["resume=true"]), (f"{name}_d", ["resume=true"])]
        for out, extra in runs:
            os.environ["MASTER_PORT"] = str(next(ports))
            rc = run_subcommand("train", [*args, f"output_dir={Path(root) / out}", *extra])
            assert rc == 0, (name, out, extra, rc)
    Path(root, f"sharded.rank{rank}.json").write_text(json.dumps(seen))


def _trim_to_step_2(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    for f in (dst / "checkpoints").glob("step_4*"):
        f.unlink()
    (dst / "summary.json").unlink()  # else the run counts as finished


def _losses(run: Path, first: int = 1) -> list[float]:
    return [r["train/loss"] for r in read_metrics(run) if "train/loss" in r and r["step"] >= first]


def _eval(run: Path) -> dict[str, float]:
    """The evaluation at step 4 (a run stopped at step 2 also evaluated there)."""
    return next(r for r in read_metrics(run) if "eval/exact_accuracy" in r and r["step"] == 4)


@pytest.mark.slow  # 13-29 s idle, 61 s under load
def test_fsdp_two_ranks_match_one_and_checkpoints_cross_world_sizes(monkeypatch, tmp_path):
    data = make_dataset(tmp_path / "data", num_tasks=4, num_aug=1, train_per_puzzle=3, test_per_puzzle=1, canvas=4)
    for name, base in BASES.items():  # A: one process, two micro-batches
        assert train_cli(monkeypatch, data, tmp_path / f"{name}_a", *COMMON, "train.grad_accum=2", base=base) == 0
        _trim_to_step_2(tmp_path / f"{name}_a", tmp_path / f"{name}_d")
    mp.start_processes(_fsdp_worker, args=(2, [_free_port() for _ in range(3 * len(BASES))], str(data), str(tmp_path), list(BASES)), nprocs=2, join=True,
                       start_method="spawn")
    for rank in (0, 1):
        for seen in json.loads((tmp_path / f"sharded.rank{rank}.json").read_text()):
            assert seen["dtensors"] == seen["params"] and seen["local"] < seen["full"], seen
    from hrm_deeploop.loading import load_model

    for name, base in BASES.items():
        a, b, d = (tmp_path / f"{name}_{x}" for x in "abd")
        _trim_to_step_2(b, tmp_path / f"{name}_c")  # C: the sharded step-2 checkpoint, resumed on one process
        c = tmp_path / f"{name}_c"
        assert train_cli(monkeypatch, data, c, *COMMON, "train.grad_accum=2", "resume=true", base=base) == 0
        ref = torch.tensor(_losses(a))
        assert len(ref) == 4
        torch.testing.assert_close(torch.tensor(_losses(b)), ref, rtol=1e-5, atol=1e-6, msg=f"{name} sharded")
        for run in (c, d):  # steps 3-4 after a change of world size, either way
            torch.testing.assert_close(torch.tensor(_losses(run, first=3)), ref[2:], rtol=1e-5, atol=1e-6,
                                       msg=f"{name} {run.name}")
        ea, eb = _eval(a), _eval(b)
        assert {k: eb[k] for k in ea if k.startswith("eval/")} == pytest.approx(
            {k: v for k, v in ea.items() if k.startswith("eval/")}, rel=1e-5, abs=1e-6)
        sa, sb = (ckpt.load(ckpt.step_path(r, 4)) for r in (a, b))
        assert sb.keys() == sa.keys() and sb["model"].keys() == sa["model"].keys()
        for k, v in sa["model"].items():  # full (unsharded) tensors, the same values
            torch.testing.assert_close(sb["model"][k], v, rtol=1e-4, atol=1e-5, msg=f"{name} {k}")
        oa, ob = sa["optimizers"]["adam"], sb["optimizers"]["adam"]
        assert [g["params"] for g in ob["param_groups"]] == [g["params"] for g in oa["param_groups"]]
        for i, s in oa["state"].items():
            assert {k: v.shape for k, v in ob["state"][i].items()} == {k: v.shape for k, v in s.items()}
            torch.testing.assert_close(ob["state"][i]["exp_avg"], s["exp_avg"], rtol=1e-4, atol=1e-6)
        assert (sa["ema"] is None) == (sb["ema"] is None) == (name == "hrm")  # TRM and URM average
        if sa["ema"] is not None:
            for k, v in sa["ema"]["shadow"].items():
                torch.testing.assert_close(sb["ema"]["shadow"][k], v, rtol=1e-4, atol=1e-5, msg=f"{name} ema {k}")
        assert load_model(ckpt.step_path(b, 4)).model.num_params() > 0  # evaluate's loader reads it


@pytest.mark.parametrize("override, key", [("train.compile=true", "train.compile"),
                                           ("diagnostics.kappa_every=5", "diagnostics.kappa_every"),
                                           ("adapt.trains=embeddings", "adapt.trains")])
def test_fsdp_refuses_what_it_was_not_built_for(override, key, capsys):
    from hrm_deeploop.cli import run_subcommand

    rc = run_subcommand("train", [*TINY_OVERRIDES, "data_dir=unused", "output_dir=unused", "train.fsdp=true", override])
    err = capsys.readouterr().err
    assert rc == 2 and key in err and "train.fsdp=true" in err and len(err.strip().splitlines()) == 1, err
