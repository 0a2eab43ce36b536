"""The fused residual RMSNorm kernel against its plain-PyTorch reference.

CPU: the Triton kernels run in Triton's interpreter. Triton reads TRITON_INTERPRET when a function is
decorated with triton.jit, including its own helpers (tl.sum, ...) when triton is first imported,
so the variable must be set before the first `import triton` of a process. The pytest process may
already have imported triton (torch, another test), so the interpreter checks run once in a fresh
subprocess (this file run as a script, with TRITON_INTERPRET=1) and each parametrized test asserts
on its case's result. GPU tests (`-m gpu`, skipped without CUDA) call the kernels directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hrm_deeploop.models.kernels import residual_norm as rn

REPO = Path(__file__).resolve().parents[1]
EPS = 1e-5
ATOL = RTOL = 1e-5  # fp32 kernel vs fp32 reference

# (shape (..., D), alpha, has_weight): hidden sizes 48, 64, 100 and 512 (non-powers of two are
# masked); row counts that leave partial tiles and make the backward loop over several tiles.
CASES = [
    ((4, 48), 1.0, False),
    ((37, 48), 2.5, True),
    ((3, 5, 64), 0.7, True),
    ((40, 64), 5.0, False),
    ((6, 100), 3.0, False),
    ((9, 100), 1.0, True),
    ((5, 512), 4.2, True),
    ((3, 512), 0.5, False),
]


def _case_id(case) -> str:
    shape, alpha, has_weight = case
    return f"{'x'.join(map(str, shape))}-a{alpha}-{'w' if has_weight else 'now'}"


def _err_ratio(actual: torch.Tensor | None, expected: torch.Tensor) -> float:
    """max |a - e| / (atol + rtol |e|): <= 1 passes torch.testing.assert_close's rule."""
    if actual is None:
        return float("inf")
    bound = ATOL + RTOL * expected.abs()
    return ((actual.double() - expected.double()).abs() / bound).max().item()


def _run_case(shape, alpha, has_weight, force_triton, seed=0, ref_alpha=None, ref_weight_off=False):
    """Kernel (force_triton) or reference outputs and grads: dict name -> tensor."""
    gen = torch.Generator().manual_seed(seed)
    D = shape[-1]
    x = torch.randn(shape, generator=gen).requires_grad_()
    f = (0.5 * torch.randn(shape, generator=gen)).requires_grad_()
    w = (0.5 + torch.rand(D, generator=gen)).requires_grad_() if has_weight else None
    g = torch.randn(shape, generator=gen)
    if force_triton:
        y = rn.residual_rms_norm(x, f, alpha, w, EPS, force_triton=True)
        assert "ResidualRMSNorm" in type(y.grad_fn).__name__, "the Triton Function did not run"
    else:
        a = alpha if ref_alpha is None else ref_alpha
        y = rn.residual_rms_norm_reference(x, f, a, None if ref_weight_off else w, EPS)
    inputs = [x, f] + ([w] if w is not None else [])
    grads = torch.autograd.grad(y, inputs, g, allow_unused=True)
    out = {"y": y.detach(), "dx": grads[0], "df": grads[1]}
    if w is not None:
        out["dw"] = grads[2]
    return out


def _worker() -> dict:
    """Runs under TRITON_INTERPRET=1: error ratios per case, plus checks that the tests can fail."""
    assert rn.interpreter_active(), "TRITON_INTERPRET=1 must be set before triton is imported"
    results = {}
    for case in CASES:
        shape, alpha, has_weight = case
        kern = _run_case(shape, alpha, has_weight, force_triton=True)
        ref = _run_case(shape, alpha, has_weight, force_triton=False)
        res = {k: _err_ratio(kern.get(k), ref[k]) for k in ref}
        # Sensitivity: the same comparison must reject a 1% wrong alpha and a dropped weight.
        wrong = _run_case(shape, alpha, has_weight, force_triton=False, ref_alpha=alpha * 1.01)
        res["wrong_alpha_dx"] = _err_ratio(kern["dx"], wrong["dx"])
        if has_weight:
            no_w = _run_case(shape, alpha, has_weight, force_triton=False, ref_weight_off=True)
            res["dropped_weight_y"] = _err_ratio(kern["y"], no_w["y"])
        results[_case_id(case)] = res

    # Only some inputs need grads (weight alone; x alone), and inference without grads.
    gen = torch.Generator().manual_seed(1)
    x, f = torch.randn(7, 100, generator=gen), torch.randn(7, 100, generator=gen)
    w = (0.5 + torch.rand(100, generator=gen)).requires_grad_()
    y = rn.residual_rms_norm(x, f, 2.0, w, EPS, force_triton=True)
    (dw,) = torch.autograd.grad(y, [w], torch.ones_like(y))
    (dw_ref,) = torch.autograd.grad(rn.residual_rms_norm_reference(x, f, 2.0, w, EPS), [w], torch.ones_like(y))
    xg = x.clone().requires_grad_()
    (dx,) = torch.autograd.grad(rn.residual_rms_norm(xg, f, 2.0, w.detach(), EPS, force_triton=True), [xg], y)
    (dx_ref,) = torch.autograd.grad(rn.residual_rms_norm_reference(xg, f, 2.0, w.detach(), EPS), [xg], y)
    with torch.no_grad():
        y_ng = rn.residual_rms_norm(x, f, 2.0, w, EPS, force_triton=True)
    results["partial"] = {
        "dw_only": _err_ratio(dw, dw_ref),
        "dx_only": _err_ratio(dx, dx_ref),
        "no_grad_y": _err_ratio(y_ng, rn.residual_rms_norm_reference(x, f, 2.0, w, EPS).detach()),
    }
    return results


@pytest.fixture(scope="module")
def interp_results() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_interpreter_matches_reference(interp_results, case):
    res = interp_results[_case_id(case)]
    for name in ("y", "dx", "df") + (("dw",) if case[2] else ()):
        assert res[name] <= 1.0, f"{name}: error {res[name]:.3g} x tolerance; all: {res}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_interpreter_comparison_can_fail(interp_results, case):
    res = interp_results[_case_id(case)]
    assert res["wrong_alpha_dx"] > 10.0, res
    if case[2]:
        assert res["dropped_weight_y"] > 10.0, res


def test_interpreter_partial_grads_and_no_grad(interp_results):
    res = interp_results["partial"]
    assert all(v <= 1.0 for v in res.values()), res


# ---- in-process, no interpreter needed ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_without_force_is_the_reference(dtype):
    gen = torch.Generator().manual_seed(0)
    x, f = torch.randn(3, 4, 100, generator=gen).to(dtype), torch.randn(3, 4, 100, generator=gen).to(dtype)
    w = torch.rand(100, generator=gen)
    y = rn.residual_rms_norm(x, f, 1.7, w)
    assert y.dtype == dtype
    torch.testing.assert_close(y, rn.residual_rms_norm_reference(x, f, 1.7, w, 1e-5), atol=0, rtol=0)


def test_reference_is_post_ln_rmsnorm():
    gen = torch.Generator().manual_seed(0)
    x, f, w = torch.randn(5, 48, generator=gen), torch.randn(5, 48, generator=gen), torch.rand(48, generator=gen)
    s = (3.0 * x + f).double()
    expected = s / (s.square().mean(-1, keepdim=True) + EPS).sqrt() * w.double()
    torch.testing.assert_close(rn.residual_rms_norm_reference(x, f, 3.0, w, EPS).double(), expected)


@pytest.mark.skipif(rn.interpreter_active(), reason="this process runs triton in the interpreter")
def test_force_triton_on_cpu_without_interpreter_raises():
    x = torch.randn(2, 64)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        rn.residual_rms_norm(x, x.clone(), 1.0, force_triton=True)


def test_import_without_triton_falls_back():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\n"
        "from hrm_deeploop.models.kernels import residual_norm as rn\n"
        "assert not rn.triton_available() and not rn.interpreter_active()\n"
        "x = torch.randn(2, 8)\n"
        "assert torch.equal(rn.residual_rms_norm(x, x, 2.0), rn.residual_rms_norm_reference(x, x, 2.0, None, 1e-5))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("0", False), ("off", False)])
def test_env_var_switches_the_fused_path(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "HRM_DEEPLOOP_FUSED_RESIDUAL_NORM"}
    if value is not None:
        env["HRM_DEEPLOOP_FUSED_RESIDUAL_NORM"] = value
    env["PYTHONPATH"] = str(REPO)
    code = ("from hrm_deeploop import runtime; before = runtime.env().fused_kernel; "
            "print(before, runtime.setup('cpu').fused_kernel)")  # the same choice before setup as after
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(expected)] * 2


def test_fused_is_a_constructor_choice(monkeypatch):
    """A block's Post-LN step calls the kernel module only when built with fused=True, for CUDA
    tensors; CPU tensors always take the plain path (so the CPU figures cannot depend on it)."""
    from hrm_deeploop.models.core import Block, BlockConfig

    calls = []
    monkeypatch.setattr(rn, "residual_rms_norm", lambda *a: calls.append(a) or a[0])
    x = torch.randn(1, 3, 16)
    for fused in (True, False):
        block = Block(BlockConfig(16, 2, 2.0, False, mlp_multiple=16, fused=fused))
        assert block.attn_norm.fused is fused and block.mlp_norm.fused is fused
        block(x)
    assert calls == []


# ---- GPU ----------------------------------------------------------------------------------------

GPU_SHAPES = [(4, 901, 512), (2, 1024, 768), (3, 333, 1024), (64, 100), (8, 4096)]


def _gpu_case(shape, dtype, alpha, has_weight):
    gen = torch.Generator(device="cuda").manual_seed(0)
    D = shape[-1]
    x = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    f = (0.5 * torch.randn(shape, device="cuda", generator=gen)).to(dtype)
    w = (0.5 + torch.rand(D, device="cuda", generator=gen)) if has_weight else None
    g = torch.randn(shape, device="cuda", generator=gen).to(dtype)

    def run(fn, cast):
        xs, fs = x.to(cast).requires_grad_(), f.to(cast).requires_grad_()
        # The gain stays an fp32 parameter next to bf16 activations, as in the models.
        ws = w.to(torch.float64 if cast == torch.float64 else torch.float32).requires_grad_() if w is not None else None
        y = fn(xs, fs, alpha, ws, EPS)
        inputs = [xs, fs] + ([ws] if ws is not None else [])
        return [y.detach(), *torch.autograd.grad(y, inputs, g.to(cast))]

    kern = run(rn.residual_rms_norm, dtype)
    ref = run(rn.residual_rms_norm_reference, dtype)
    gold = run(rn.residual_rms_norm_reference, torch.float64)
    return kern, ref, gold


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("has_weight", [False, True], ids=["now", "w"])
def test_gpu_matches_reference(shape, dtype, has_weight):
    alpha = 2.7
    kern, ref, gold = _gpu_case(shape, dtype, alpha, has_weight)
    names = ["y", "dx", "df", "dw"]
    for name, k, r, g in zip(names, kern, ref, gold):
        assert k.dtype == r.dtype, name
        k_err = (k.double() - g).abs().max().item()
        r_err = (r.double() - g).abs().max().item()
        scale = g.abs().max().item()
        if dtype == torch.float32:  # within 1e-5 of the scale, or no worse than the fp32 reference
            bound = max(2 * r_err, 1e-5 * scale) + 1e-6
            assert k_err <= bound, f"{name}: {k_err:.3g} (ref {r_err:.3g}, scale {scale:.3g})"
        else:  # bf16 in and out: no worse than the bf16 reference, up to rounding
            assert k_err <= 2 * r_err + 1e-2 * scale, f"{name}: {k_err:.3g} vs ref {r_err:.3g}, scale {scale:.3g}"


@pytest.mark.gpu
def test_gpu_auto_path_uses_triton_and_catches_wrong_alpha():
    x = torch.randn(4, 901, 512, device="cuda", requires_grad=True)
    f = torch.randn(4, 901, 512, device="cuda")
    y = rn.residual_rms_norm(x, f, 3.0)
    assert "ResidualRMSNorm" in type(y.grad_fn).__name__
    assert not torch.allclose(y, rn.residual_rms_norm_reference(x, f, 3.03, None, EPS), atol=1e-4)


if __name__ == "__main__" and "--worker" in sys.argv:
    print(json.dumps(_worker()))
