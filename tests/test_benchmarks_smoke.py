"""The model benchmark scripts still run (smallest CPU size, one step, no compile): not timed tests."""

import os
import re
from pathlib import Path

import pytest
import torch

from benchmarks import bench_gpt, bench_hrm


def test_bench_hrm_runs(capsys):
    rc = bench_hrm.main(["--preset", "tiny", "--device", "cpu", "--warmup", "0", "--steps", "1", "--no-compile",
                         "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "eager" in out and "tokens/s" in out and "FAILED" not in out


def test_bench_gpt_runs(capsys):
    rc = bench_gpt.main(["--preset", "tiny", "--device", "cpu", "--warmup", "0", "--steps", "1", "--no-compile",
                         "--rounds", "1", "--mem-rounds", "1", "2", "--max-r", "3", "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "R=1 eager" in out and "R=2 ckpt" in out and "largest R within" in out and "FAILED" not in out


def test_largest_r_search_steps_down_and_up():
    """The verification walks from the linear prediction to the true largest R."""

    class FakeModel:
        def __init__(self, true_mb):
            self.true_mb = true_mb

        def measure(self, r, ckpt):
            return {"mem_mb": self.true_mb(r)}

    # Convex memory: the line through R=1, 3 over-predicts; the search must step down.
    line = bench_gpt.largest_r(FakeModel(lambda r: 10 + r * r), False, [(1, 11.0), (3, 19.0)], 60.0, 40)
    assert "largest verified R = 7" in line, line  # 10 + 49 = 59 <= 60 < 10 + 64
    # Concave memory: the line under-predicts; the search must step up.
    line = bench_gpt.largest_r(FakeModel(lambda r: 10 + 4 * r ** 0.5 * 2), False, [(1, 18.0), (4, 26.0)], 40.0, 40)
    assert "largest verified R = 14" in line, line  # 10 + 8 sqrt(14) = 39.9
    assert "not verified" in bench_gpt.largest_r(FakeModel(lambda r: r), True, [(1, 1.0), (2, 2.0)], 1e6, 40)


def test_hrm_flops_paper_config_by_hand():
    """499.47 GFLOP per example at the paper config, counted by hand: per token 64 layer visits
    (2 segments x 24 forward + 8 backward at 2x) of 2 x 3,407,872 weights + 4 x 901 x 512 attention,
    plus the 12-way head (2 forward, 1 backward at 2x)."""
    visit = 2 * 3_407_872 + 4 * 901 * 512
    per_token = 64 * visit + 2 * 512 * 12 * 4
    assert bench_hrm.model_flops_per_example(bench_hrm.PRESETS["paper"]["model"]) == 901 * per_token


def test_bench_fusion_runs(capsys):
    from benchmarks import bench_fusion

    rc = bench_fusion.main(["--device", "cpu", "--batch-hrm", "1", "--batch-gpt", "1", "--warmup", "0",
                            "--steps", "1", "--no-compile", "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for op in ("rope", "swiglu", "residual", "matmul", "loss"):
        assert f"# HRM paper | {op} | " in out and f"# GPT-2 small R=3 | {op} | " in out
    assert "40 / 8" in out and "0 / 36" in out  # HRM and GPT R=3 call counts


REFERENCE = Path(os.environ.get("HRM_REFERENCE", Path(__file__).resolve().parents[1] / "benchmarks/out/hrm-reference"))


@pytest.mark.skipif(not (REFERENCE / "models/hrm/hrm_act_v1.py").is_file(),
                    reason="no checkout of sapientinc/HRM at HRM_REFERENCE (not shipped; see the README)")
def test_compare_reference_hrm_is_bit_identical(capsys):
    from benchmarks import compare_reference_hrm

    rc = compare_reference_hrm.main(["--reference", str(REFERENCE), "--preset", "tiny", "--device", "cpu",
                                     "--check-steps", "3", "--variants", "eager", "--schemes", "baseline",
                                     "--warmup", "0", "--steps", "1", "--tol", "0"])  # bit-identical on CPU
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "# equivalence: ok" in out and "ratio" in out


@pytest.mark.skipif(not (REFERENCE / "arc_eval.ipynb").is_file(),
                    reason="no checkout of sapientinc/HRM at HRM_REFERENCE (not shipped; see the README)")
def test_compare_reference_vote_agrees(capsys):
    from benchmarks import compare_reference_vote

    trm = REFERENCE.parent / "trm-reference"
    rc = compare_reference_vote.main(["--reference", str(REFERENCE), "--num-aug", "8", "--p-correct", "0.2"]
                                     + (["--trm", str(trm)] if (trm / "evaluators/arc.py").is_file() else []))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert " yes" in out and " NO" not in out


@pytest.mark.skipif(not (REFERENCE / "dataset/build_arc_dataset.py").is_file(),
                    reason="no checkout of sapientinc/HRM at HRM_REFERENCE (not shipped; see the README)")
def test_compare_reference_arc_build_agrees(capsys):
    from benchmarks import compare_reference_arc_build

    rc = compare_reference_arc_build.main(["--reference", str(REFERENCE)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "DIFF" not in out and "byte-identical" in out


ARC_SCORER = Path(os.environ.get("ARC_SCORER_REFERENCE",
                                  Path(__file__).resolve().parents[1] / "benchmarks/out/arc-agi-benchmarking"))


@pytest.mark.skipif(not (ARC_SCORER / "src/arc_agi_benchmarking/scoring/scoring.py").is_file(),
                    reason="no checkout of arcprize/arc-agi-benchmarking at ARC_SCORER_REFERENCE (not shipped)")
def test_compare_reference_arc_scorer_agrees(capsys):
    from benchmarks import compare_reference_arc_scorer

    rc = compare_reference_arc_scorer.main(["--reference", str(ARC_SCORER), "--tasks", "24"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "# agreement: ok" in out and out.count("every task: same score") == 3  # clean, partial, floats
    assert "official raised" in out  # the malformed case reaches the official scorer's validation


TRM_REFERENCE = Path(os.environ.get("TRM_REFERENCE",
                                    Path(__file__).resolve().parents[1] / "benchmarks/out/trm-reference"))


@pytest.mark.skipif(not (TRM_REFERENCE / "models/recursive_reasoning/trm.py").is_file(),
                    reason="no checkout of SamsungSAILMontreal/TinyRecursiveModels at TRM_REFERENCE (not shipped)")
@pytest.mark.parametrize("variant", [[], ["--set", "mixer=mlp", "pos_encodings=none"]], ids=["attention", "mlp_t"])
def test_compare_reference_trm_is_bit_identical(capsys, variant):
    from benchmarks import compare_reference_trm

    rc = compare_reference_trm.main(["--reference", str(TRM_REFERENCE), "--preset", "tiny", "--device", "cpu",
                                     "--check-steps", "3", "--variants", "eager", "--schemes", "baseline",
                                     "--warmup", "0", "--steps", "1", *variant])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "tolerance 0)" in out and "# equivalence: ok" in out and "# sensitivity: ok (differs)" in out
    assert "EMA weights (worst)" in out and "ratio" in out


URM_REFERENCE = Path(os.environ.get("URM_REFERENCE",
                                    Path(__file__).resolve().parents[1] / "benchmarks/out/urm-reference"))


@pytest.mark.skipif(not (URM_REFERENCE / "models/urm/urm.py").is_file(),
                    reason="no checkout of zitian-gao/URM at URM_REFERENCE (not shipped)")
def test_compare_reference_urm_is_bit_identical(capsys):
    from benchmarks import compare_reference_urm

    rc = compare_reference_urm.main(["--reference", str(URM_REFERENCE), "--preset", "tiny", "--device", "cpu",
                                     "--check-steps", "3", "--variants", "eager", "--schemes", "baseline",
                                     "--warmup", "0", "--steps", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "tolerance 0)" in out and "# equivalence: ok" in out and "# sensitivity: ok (differs)" in out
    assert "EMA weights (worst)" in out and "ratio" in out and "exploration 0.1" in out


@pytest.mark.skipif(not (URM_REFERENCE / "models/muon.py").is_file(),
                    reason="no checkout of zitian-gao/URM at URM_REFERENCE (not shipped)")
def test_compare_reference_urm_muon_is_bit_identical(capsys):
    from benchmarks import compare_reference_urm

    rc = compare_reference_urm.main(["--reference", str(URM_REFERENCE), "--preset", "tiny", "--device", "cpu",
                                     "--check-steps", "2", "--optimizer", "muon", "--skip-speed"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "optimiser muon" in out and "tolerance 0)" in out and "# equivalence: ok" in out
    assert "models/muon.py (msign eager)" in out


def test_urm_flash_attn_stand_in_is_sdpa_in_flash_attn_layout():
    import torch
    import torch.nn.functional as F

    from benchmarks.compare_reference_urm import flash_attn_func

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 4) for _ in range(3))  # (B, T, H, D), flash-attn's layout
    y = flash_attn_func(q, k, v, causal=False)
    assert y.shape == (2, 5, 3, 4) and y.is_contiguous()
    for h in range(3):  # head by head, plain softmax attention
        att = F.softmax(q[:, :, h] @ k[:, :, h].transpose(1, 2) / 2.0, dim=-1)
        torch.testing.assert_close(y[:, :, h], att @ v[:, :, h])


NANOGPT = Path(os.environ.get("NANOGPT_REFERENCE", REFERENCE.parent / "nanogpt-reference"))


@pytest.mark.skipif(not (NANOGPT / "model.py").is_file(),
                    reason="no checkout of karpathy/nanoGPT at NANOGPT_REFERENCE (not shipped; see docs/benchmarks.md)")
def test_compare_nanogpt_runs(capsys):
    from benchmarks import compare_nanogpt

    for mlp in ("swiglu", "gelu"):
        rc = compare_nanogpt.main(["--reference", str(NANOGPT), "--preset", "tiny", "--device", "cpu", "--warmup", "0",
                                   "--steps", "2", "--block", "1", "--mlp", mlp])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert f"ours (looped GPT, R = 1, {mlp})" in out and "nanoGPT" in out and "tokens/s" in out
    rc = compare_nanogpt.main(["--reference", str(NANOGPT), "--preset", "tiny", "--device", "cpu", "--warmup", "0",
                               "--steps", "2", "--block", "1", "--loops", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    params = {m[1]: int(m[2].replace(",", "")) for m in re.finditer(r"^(ours \(.*?\))\s+([\d,]+)", out, re.M)}
    assert params["ours (K = 1, R = 2, swiglu)"] < params["ours (looped GPT, R = 1, swiglu)"]  # one block fewer

    from hrm_deeploop.models import core

    norm, rope = core.rms_norm, core.apply_rope
    rc = compare_nanogpt.main(["--reference", str(NANOGPT), "--preset", "tiny", "--device", "cpu", "--warmup", "0",
                               "--steps", "2", "--block", "1", "--what-if", "norm", "rope"])
    out = capsys.readouterr().out
    assert rc == 0 and "# WHAT-IF, not our model" in out and "here: norm rope" in out
    assert core.rms_norm is norm and core.apply_rope is rope  # restored


def test_compare_nanogpt_rejects_rounds_that_do_not_divide_the_depth(tmp_path, capsys):
    from benchmarks import compare_nanogpt

    with pytest.raises(SystemExit) as e:
        compare_nanogpt.main(["--reference", str(tmp_path), "--preset", "tiny", "--device", "cpu", "--loops", "3"])
    assert e.value.code == 2 and "divide the preset's 2 layers" in capsys.readouterr().err


def test_setup_device_gives_set_device_an_index(monkeypatch):
    """torch 2.11's torch.cuda.set_device rejects a bare 'cuda' (seen on the first GPU lease: every
    benchmark failed before it started); setup_device must pass an index, as the trainers'
    runtime.setup, which it now calls, does."""
    import torch

    from benchmarks.benchlib import setup_device

    calls = []

    def strict_set_device(dev):
        if isinstance(dev, torch.device) and dev.index is None:
            raise ValueError("Expected a torch.device with a specified index or an integer")
        calls.append(dev)

    from hrm_deeploop import runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", strict_set_device)
    monkeypatch.setattr(runtime, "_ENV", runtime._ENV)  # setup_device records the environment: restored after
    threads = torch.get_num_threads()
    try:
        assert setup_device("cuda", threads) == torch.device("cuda", 0)
        assert setup_device("cuda:0", threads) == torch.device("cuda", 0)
    finally:
        torch.set_num_threads(threads)
    assert calls == [torch.device("cuda", 0)] * 2


def test_judge_uses_limits_floors_and_skips_information():
    from benchmarks.benchlib import FLOOR, judge

    rows = [["1", "loss", "2.00e-04"], ["1", "logits", "5.00e-03"], ["1", "halted (mismatches)", "1"],
            ["1", "(slots halted, of 8)", "3"],
            ["eval", "eval logits", "5.90e-01"], ["floor", FLOOR + "eval logits", "1.39e+00"],
            ["eval", "eval q", "2.00e-02"], ["floor", FLOOR + "eval q", "1.00e-02"],
            ["eval", "eval argmax (mismatches)", "1218"], ["floor", FLOOR + "eval argmax (mismatches)", "1800"]]
    bad = judge(rows, tol=1e-3)
    assert [r[1] for r in bad] == ["logits", "halted (mismatches)", "eval q"]
    assert judge(rows, tol=10.0) == [rows[2]]  # a mismatch count is judged exactly whatever the tolerance


def test_perturbed_moves_weights_and_restores_them_bit_for_bit():
    import torch

    from benchmarks.benchlib import perturbed

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    before = [p.detach().clone() for p in model.parameters()]
    with perturbed(model, rel=1e-3) as m:
        assert m is model
        changes = [float(((p.detach() - b).abs() / b.abs().clamp_min(1e-12)).max()) for p, b in zip(model.parameters(), before)]
        assert all(1e-5 < c < 1e-2 for c in changes), changes
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_host_drawn_torch_draws_what_the_reference_draws_on_cpu():
    """The CUDA stand-in for the TRM reference's exploration draws must give the values its real
    torch.rand_like / torch.randint_like give on CPU from the same global generator state."""
    import torch

    from benchmarks.refcheck import HostDrawnTorch as _HostDrawnTorch

    q = torch.zeros(16)
    steps = torch.zeros(16, dtype=torch.int32)
    stand_in = _HostDrawnTorch()
    draws = []
    for t in (torch, stand_in):
        torch.manual_seed(3)
        draws.append((t.rand_like(q), t.randint_like(steps, low=2, high=17)))
    (a, b), (c, d) = draws
    assert torch.equal(a, c) and torch.equal(b, d) and b.dtype == d.dtype == torch.int32
    assert stand_in.where is torch.where  # everything else is torch itself


def test_sdpa_in_query_layout_same_values_view_works():
    """The TRM reference `.view`s SDPA's output after a transpose: under the math backend (the GPU
    checks' strict numerics) that failed; the stand-in returns the same values in the query's layout."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.gpuprof import sdpa_in_query_layout

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 4, generator=g).transpose(1, 2) for _ in range(3))  # (B, H, S, D) views
    with sdpa_kernel(SDPBackend.MATH):
        plain = F.scaled_dot_product_attention(q, k, v)
        out = sdpa_in_query_layout(q, k, v)
    with pytest.raises(RuntimeError):
        plain.transpose(1, 2).view(2, 5, 12)
    assert torch.equal(out, plain)
    assert out.transpose(1, 2).view(2, 5, 12).shape == (2, 5, 12)


def test_gpu_turn_holds_the_lock(tmp_path, monkeypatch):
    """With GPU_TURN_LOCK set, a second locker cannot take the GPU while a timed section runs."""
    import fcntl

    from benchmarks.gpuprof import gpu_turn

    path = tmp_path / "gpu.turn"
    monkeypatch.setenv("GPU_TURN_LOCK", str(path))
    with gpu_turn():
        with open(path, "a") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the section


def test_kernel_profile_rows_on_cpu():
    from benchmarks.gpuprof import kernel_profile

    a = torch.randn(64, 64)
    kernels, kinds = kernel_profile(lambda: a @ a, torch.device("cpu"), steps=2, top=3)
    assert 1 <= len(kernels) <= 3 and kinds[-1][0] == "all"
    assert all(not row[0].startswith("cuda") for row in kernels)
