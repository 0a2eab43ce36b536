"""Fused Post-LN residual step ``y = RMSNorm(alpha * x + f)`` (DeepLoop / DeepNorm), in Triton.

Unfused, the step costs an elementwise kernel for ``alpha * x + f`` (write ``s``) and an RMSNorm
kernel (read ``s`` again, write ``y``), plus a matching chain in the backward pass. The fused kernel
reads ``x`` and ``f`` once, writes ``y`` and one fp32 ``rstd`` per row; its backward reads the
upstream grad and one saved activation and writes ``dx`` and ``df`` in one pass, with the weight
grad reduced through per-program fp32 partial sums.

What the backward reads: without a weight it reuses the output ``y`` (which equals the normalized
sum, and which the next layer keeps alive anyway, so saving it costs no memory); with a weight it
saves the pre-norm sum ``s`` in the input dtype.

The kernel keeps ``s`` in fp32 where the reference rounds it to the input dtype first, so in bf16 the
two differ by rounding (the kernel being the closer to an fp64 computation); in fp32 they agree to
about 1e-7.

``residual_rms_norm_reference`` is the plain-PyTorch definition and the CPU fallback; the model's
own ``RMSNorm`` in ``hrm_deeploop/models/core.py`` computes the same thing (and calls this kernel
for CUDA tensors when the model was built with ``fused=True``).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only install without triton still imports this module
    triton = None
    tl = None

__all__ = ["interpreter_active", "residual_rms_norm", "residual_rms_norm_reference", "triton_available"]

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_HIDDEN = 16384  # one row lives in one program's registers; wider rows use the reference


def residual_rms_norm_reference(
    x: Tensor, f: Tensor, alpha: float, weight: Tensor | None, eps: float
) -> Tensor:
    """Plain PyTorch: ``s = alpha*x + f`` in the input dtype, RMSNorm in fp32, cast back to x's dtype."""
    s = f + x if alpha == 1.0 else alpha * x + f
    s32 = s.float()
    y = s32 * torch.rsqrt(s32.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


def triton_available() -> bool:
    """Whether triton imported (the kernels still need a CUDA tensor or the interpreter to run)."""
    return triton is not None


# ---- kernels ------------------------------------------------------------------------------------
# triton.jit reads TRITON_INTERPRET when it decorates, and triton.language's own jit helpers
# (tl.sum, ...) are decorated when triton is first imported: the interpreter therefore needs
# TRITON_INTERPRET=1 in the environment before the first `import triton` of the process.

if triton is not None:

    @triton.jit
    def _fwd_kernel(
        X, F, W, Y, S, RSTD,  # X, F, Y, S: (M, D) contiguous; W: (D,); RSTD: (M,) fp32
        M, D, alpha, eps,
        HAS_W: tl.constexpr, STORE_S: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_D)
        row_mask = rows < M
        col_mask = cols < D
        mask = row_mask[:, None] & col_mask[None, :]
        offs = rows[:, None].to(tl.int64) * D + cols[None, :]  # (BLOCK_M, BLOCK_D)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        f = tl.load(F + offs, mask=mask, other=0.0).to(tl.float32)
        s = alpha * x + f
        rstd = tl.rsqrt(tl.sum(s * s, axis=1) / D + eps)  # (BLOCK_M,)
        y = s * rstd[:, None]
        if HAS_W:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
            y = y * w[None, :]
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + rows, rstd, mask=row_mask)
        if STORE_S:
            tl.store(S + offs, s.to(S.dtype.element_ty), mask=mask)

    @triton.jit
    def _bwd_kernel(
        G, SAVED, W, RSTD, DX, DF, DW_PARTIAL,  # G, SAVED, DX, DF: (M, D); DW_PARTIAL: (programs, D) fp32
        M, D, rows_per_program, alpha,
        HAS_W: tl.constexpr, SAVED_IS_OUTPUT: tl.constexpr, COMPUTE_DW: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        # Each program walks rows_per_program rows (a multiple of BLOCK_M) in tiles of BLOCK_M and
        # keeps its weight-grad partial sum in fp32 registers; the host sums the few partials.
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK_D)
        col_mask = cols < D
        if HAS_W:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        first_row = pid * rows_per_program
        for start in range(0, rows_per_program, BLOCK_M):
            rows = first_row + start + tl.arange(0, BLOCK_M)
            row_mask = rows < M
            mask = row_mask[:, None] & col_mask[None, :]
            offs = rows[:, None].to(tl.int64) * D + cols[None, :]  # (BLOCK_M, BLOCK_D)
            g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            saved = tl.load(SAVED + offs, mask=mask, other=0.0).to(tl.float32)
            if SAVED_IS_OUTPUT:
                s_hat = saved  # y == s * rstd when there is no weight
            else:
                s_hat = saved * rstd[:, None]
            if HAS_W:
                gw = g * w[None, :]
            else:
                gw = g
            # d/ds of s*rstd(s): rstd * (gw - s_hat * mean(gw * s_hat))
            c = tl.sum(gw * s_hat, axis=1) / D
            ds = rstd[:, None] * (gw - s_hat * c[:, None])
            tl.store(DF + offs, ds.to(DF.dtype.element_ty), mask=mask)
            tl.store(DX + offs, (alpha * ds).to(DX.dtype.element_ty), mask=mask)
            if COMPUTE_DW:
                dw_acc += tl.sum(g * s_hat, axis=0)
        if COMPUTE_DW:
            tl.store(DW_PARTIAL + pid * D + cols, dw_acc, mask=col_mask)


def interpreter_active() -> bool:
    """Whether this process's triton kernels run in Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    if triton is None:
        return False
    return all(type(fn).__name__ == "InterpretedFunction" for fn in (_fwd_kernel, tl.sum))


# ---- launch configuration -----------------------------------------------------------------------

def _block_sizes(D: int) -> tuple[int, int, int]:
    """(BLOCK_M rows per tile, BLOCK_D, num_warps): tiles of about 4K elements, one row at least."""
    block_d = triton.next_power_of_2(D)
    block_m = max(1, min(16, 4096 // block_d))
    tile = block_m * block_d
    num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 16
    return block_m, block_d, num_warps


_NUM_SMS: dict[int, int] = {}


def _num_programs_bwd(device: torch.device, num_tiles: int) -> int:
    if device.type != "cuda":
        return min(num_tiles, 2)  # the interpreter: still exercise several programs and row loops
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _NUM_SMS:
        _NUM_SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return min(num_tiles, 4 * _NUM_SMS[index])


def _launch_ctx(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _forward(
    x: Tensor, f: Tensor, weight: Tensor | None, alpha: float, eps: float, store_s: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """x, f: (M, D) contiguous. Returns y (M, D), s (M, D) or None, rstd (M,) fp32."""
    M, D = x.shape
    block_m, block_d, num_warps = _block_sizes(D)
    y = torch.empty_like(x)
    s = torch.empty_like(x) if store_s else None
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(M, block_m),)
    with _launch_ctx(x.device):
        _fwd_kernel[grid](
            x, f, weight if weight is not None else x, y, s if s is not None else y, rstd,
            M, D, float(alpha), float(eps),
            HAS_W=weight is not None, STORE_S=store_s,
            BLOCK_M=block_m, BLOCK_D=block_d, num_warps=num_warps,
        )
    return y, s, rstd


def _backward(
    g: Tensor, saved: Tensor, saved_is_output: bool, weight: Tensor | None, rstd: Tensor,
    alpha: float, compute_dw: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """g, saved: (M, D) contiguous. Returns dx, df (M, D) in g's dtype and dw (D,) fp32 or None."""
    M, D = g.shape
    block_m, block_d, num_warps = _block_sizes(D)
    num_tiles = triton.cdiv(M, block_m)
    programs = _num_programs_bwd(g.device, num_tiles)
    rows_per_program = triton.cdiv(num_tiles, programs) * block_m
    programs = triton.cdiv(M, rows_per_program)
    dx = torch.empty_like(g)
    df = torch.empty_like(g)
    dw_partial = (
        torch.empty(programs, D, dtype=torch.float32, device=g.device) if compute_dw else None
    )
    with _launch_ctx(g.device):
        _bwd_kernel[(programs,)](
            g, saved, weight if weight is not None else g, rstd, dx, df,
            dw_partial if dw_partial is not None else rstd,
            M, D, rows_per_program, float(alpha),
            HAS_W=weight is not None, SAVED_IS_OUTPUT=saved_is_output, COMPUTE_DW=compute_dw,
            BLOCK_M=block_m, BLOCK_D=block_d, num_warps=num_warps,
        )
    dw = dw_partial.sum(0) if dw_partial is not None else None
    return dx, df, dw


class _ResidualRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, f: Tensor, weight: Tensor | None, alpha: float, eps: float) -> Tensor:
        shape = x.shape
        D = shape[-1]
        x2 = x.reshape(-1, D).contiguous()  # (M, D)
        f2 = f.reshape(-1, D).contiguous()  # (M, D)
        w = weight.contiguous() if weight is not None else None
        needs_grad = any(ctx.needs_input_grad[:3])
        store_s = needs_grad and w is not None
        y2, s2, rstd = _forward(x2, f2, w, alpha, eps, store_s)
        y = y2.view(shape)
        ctx.alpha = alpha
        ctx.saved_is_output = w is None
        if needs_grad:
            # Without a weight, y is the normalized sum; saving the output shares its storage.
            ctx.save_for_backward(y if w is None else s2, rstd, w)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        saved, rstd, w = ctx.saved_tensors
        D = grad_y.shape[-1]
        g2 = grad_y.reshape(-1, D).contiguous()  # (M, D)
        saved2 = saved.reshape(-1, D)  # contiguous: our own output or our own buffer
        compute_dw = w is not None and ctx.needs_input_grad[2]
        dx, df, dw = _backward(g2, saved2, ctx.saved_is_output, w, rstd, ctx.alpha, compute_dw)
        dx = dx.view(grad_y.shape) if ctx.needs_input_grad[0] else None
        df = df.view(grad_y.shape) if ctx.needs_input_grad[1] else None
        dw = dw.to(w.dtype) if dw is not None else None
        return dx, df, dw, None, None


def _triton_unsupported_reason(x: Tensor, f: Tensor, weight: Tensor | None) -> str | None:
    if triton is None:
        return "triton is not installed"
    if x.shape != f.shape:
        return f"x {tuple(x.shape)} and f {tuple(f.shape)} differ in shape"
    if x.dtype != f.dtype or x.dtype not in SUPPORTED_DTYPES:
        return f"dtypes x {x.dtype}, f {f.dtype} (need equal, one of {SUPPORTED_DTYPES})"
    if x.device != f.device or (weight is not None and weight.device != x.device):
        return "tensors on different devices"
    if weight is not None and weight.shape != x.shape[-1:]:
        return f"weight {tuple(weight.shape)} does not match hidden size {x.shape[-1]}"
    if not x.is_cuda and not interpreter_active():
        return "CPU tensors need Triton's interpreter: TRITON_INTERPRET=1 before triton is imported"
    if x.numel() == 0:
        return "empty input"
    if x.shape[-1] > MAX_HIDDEN:
        return f"hidden size {x.shape[-1]} > {MAX_HIDDEN}"
    return None


def residual_rms_norm(
    x: Tensor,
    f: Tensor,
    alpha: float,
    weight: Tensor | None = None,
    eps: float = 1e-5,
    *,
    force_triton: bool = False,
) -> Tensor:
    """Post-LN residual step ``RMSNorm(alpha * x + f) * weight`` over the last dim.

    x, f: (..., D), same shape and dtype; weight: (D,) or None; alpha: a Python float.
    Runs the fused Triton kernels for CUDA tensors when triton is usable, otherwise the reference.
    ``force_triton=True`` runs the kernels even on CPU (through Triton's interpreter, fp32 only) and
    raises instead of falling back, which is what the interpreter tests use.
    """
    reason = _triton_unsupported_reason(x, f, weight)
    if force_triton:
        if reason is not None:
            raise ValueError(f"force_triton: the Triton path cannot run: {reason}")
        return _ResidualRMSNorm.apply(x, f, weight, float(alpha), float(eps))
    if reason is None and x.is_cuda:
        return _ResidualRMSNorm.apply(x, f, weight, float(alpha), float(eps))
    return residual_rms_norm_reference(x, f, alpha, weight, eps)
