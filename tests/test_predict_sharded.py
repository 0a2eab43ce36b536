"""Evaluation's one shard / gather loop (`eval.predict.predict_sharded` over
`hrm_deeploop.data.batches.rank_windows`): every example once, in example order, for any world
size; and `evaluate` under two gloo ranks (spawned as torchrun sets them up) writes the one-process
predictions byte for byte, for ARC's padded batches and for Sudoku's whole examples with their
test-time copies."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from hrm_deeploop.data.batches import rank_windows
from tests.hrm_helpers import TINY_OVERRIDES, make_dataset
from tests.test_hrm_train import _free_port


@pytest.mark.parametrize("total,window,world", [(0, 4, 2), (1, 4, 2), (7, 4, 2), (8, 4, 2), (9, 6, 3), (10, 1, 1),
                                                (5, 8, 4), (13, 4, 4)])
def test_rank_windows_cover_the_split_once_in_order(total, window, world):
    shares = [list(rank_windows(total, window, r, world)) for r in range(world)]
    assert len({len(s) for s in shares}) == 1  # every rank walks every window (collectives stay in step)
    assert all(len(idx) <= window // world for s in shares for idx in s)
    order = [i for k in range(len(shares[0])) for s in shares for i in s[k]]
    assert order == list(range(total))
    assert len(list(rank_windows(total, window, 0, world, max_windows=1))) == min(1, -(-total // window))


def test_rank_windows_refuse_an_indivisible_window():
    from hrm_deeploop.errors import UserError

    with pytest.raises(UserError, match="not divisible by the world size 2"):
        list(rank_windows(10, 5, 0, 2))


def _evaluate(args: list[str]) -> int:
    from hrm_deeploop.cli import run_subcommand

    return run_subcommand("evaluate", [*args, "progress=false", "report=false"])


def _worker(rank: int, world: int, ports: list[int], jobs: list[list[str]]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      WANDB_MODE="disabled")
    torch.set_num_threads(1)
    for args, port in zip(jobs, ports):  # a port a process group (a reused one can hang the next rendezvous)
        os.environ["MASTER_PORT"] = str(port)
        assert _evaluate(args) == 0, args
    os._exit(0)  # past the work: no interpreter teardown in a spawned rank (see tests/test_vision_distributed.py)


def test_two_ranks_predict_what_one_process_predicts(tmp_path):
    from hrm_deeploop.cli import run_subcommand

    import torch.multiprocessing as mp

    arc = make_dataset(tmp_path / "arc", num_tasks=3, num_aug=2, test_per_puzzle=2, canvas=6)  # 18 test rows
    assert run_subcommand("generate-puzzles", ["task=sudoku", "size=4", "count_train=16", "count_test=7",
                                               f"output_dir={tmp_path / 'raw'}", "progress=false"]) == 0
    assert run_subcommand("build-puzzles", ["task=sudoku", f"source={tmp_path / 'raw'}", "num_aug=1",
                                            f"output_dir={tmp_path / 'sudoku'}", "progress=false"]) == 0
    runs = {}
    for name, data in (("arc", arc), ("sudoku", tmp_path / "sudoku")):
        runs[name] = tmp_path / f"run_{name}"
        assert run_subcommand("train", [*TINY_OVERRIDES, f"data_dir={data}", f"output_dir={runs[name]}",
                                        "train.max_steps=2", "checkpoint.every=2", "eval.every=0"]) == 0
    jobs = {"arc": [f"checkpoint={runs['arc']}", f"data_dir={arc}", "global_batch_size=4", "vote=false"],
            "sudoku": [f"checkpoint={runs['sudoku']}", f"data_dir={tmp_path / 'sudoku'}", "global_batch_size=6",
                       "tta=2", "halt_max_steps=3"]}
    for name, args in jobs.items():
        assert _evaluate([*args, f"output_dir={tmp_path / ('one_' + name)}"]) == 0
    mp.spawn(_worker, args=(2, [_free_port() for _ in jobs], [[*a, f"output_dir={tmp_path / ('two_' + n)}"] for n, a in jobs.items()]),
             nprocs=2, join=True)
    for name in jobs:
        one, two = np.load(tmp_path / f"one_{name}" / "predictions.npz"), np.load(tmp_path / f"two_{name}" / "predictions.npz")
        assert sorted(one.files) == sorted(two.files)
        for k in one.files:
            assert np.array_equal(one[k], two[k]), (name, k)
    assert len(np.load(tmp_path / "one_arc" / "predictions.npz")["inputs"]) == 18
    assert len(np.load(tmp_path / "one_sudoku" / "predictions.npz")["inputs"]) == 7 * 3  # test examples x (1 + tta) copies
