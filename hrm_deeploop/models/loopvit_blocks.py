"""LoopViT's two blocks and their parts (the model is `models/loopvit.py`).

- `rope_2d` / `apply_rope_2d`: EVA-02's axial 2-D rotary embedding as the official code builds it
  (`VisionRotaryEmbeddingFast`): the first half of each head rotates by the patch's row, the second
  half by its column, in interleaved pairs (x_2m, x_2m+1); the `prefix` tokens (the task token)
  are not rotated.
- `VisionAttention`: a biased fused qkv ([q | k | v], head-major), RoPE on q and k, a key padding
  mask, then either the explicit softmax (the vanilla block's arithmetic: scores masked with the
  dtype's minimum) or SDPA (the hybrid block's), and a biased output projection.
- `GeluMLP`: fc1 -> exact GELU -> dropout -> fc2 (VARC's MLP; `core.GeluMLP` is GPT-2's tanh GELU).
- `ConvGLU`: fc1 to 2h channels split into gate (first h) and value (last h); the image tokens'
  gate passes a 3x3 depthwise convolution over the G x G patch grid (the task token's bypasses
  it); out = fc2(drop(GELU(gate) * value)), then dropout.
- `VanillaBlock` (Post-LN, LayerNorm): z <- LN(alpha z + Drop(Attn(z))); z <- LN(alpha z + Drop(MLP(z))).
  alpha = 1: VARC's block. DeepLoop's alpha / beta apply here.
- `HybridBlock` (pre-norm, RMSNorm with a gain, eps 1e-6): z <- z + eps Drop(Attn(RMS(z)));
  z <- z + eps Drop(ConvGLU(RMS(z))). eps = 1: the paper's block; looped_eps sets eps.

Both blocks name their residual-branch matrices (`beta_matrices`, as `core.Block`) so the model's
init applies a scheme's beta gain; their forward reads `x, rope, pad_mask`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.core import Linear, RMSNorm
from hrm_deeploop.models.scaling import Residual

# ---- 2-D rotary embedding --------------------------------------------------------------------


def rope_2d(head_dim: int, grid: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos, sin tables (G^2, head_dim) of the axial 2-D RoPE, computed as the official code does
    (including its positions t = arange(G) / G * G, which are the integers for G a power of two)."""
    dim = head_dim // 2  # per axis
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))  # (dim/2,)
    t = torch.arange(grid) / grid * grid
    f = torch.einsum("i,f->if", t, freqs).repeat_interleave(2, dim=-1)  # (G, dim): each frequency twice
    rows = f[:, None, :].expand(grid, grid, dim)  # (G, G, dim): angle by the patch's row
    cols = f[None, :, :].expand(grid, grid, dim)  # by its column
    both = torch.cat((rows, cols), dim=-1).reshape(grid * grid, head_dim)  # (G^2, hd)
    return both.cos(), both.sin()


def _rotate_pairs(x: Tensor) -> Tensor:
    """(x_2m, x_2m+1) -> (-x_2m+1, x_2m) over the last dim."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., hd/2, 2)
    x1, x2 = pairs.unbind(-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope_2d(x: Tensor, cos: Tensor, sin: Tensor, prefix: int) -> Tensor:
    """x: (B, H, L, hd) with L = prefix + G^2; the prefix tokens pass unrotated."""
    img = x[:, :, prefix:]
    out = img * cos + _rotate_pairs(img) * sin
    return torch.cat((x[:, :, :prefix], out), dim=2) if prefix else out


class GainRMSNorm(RMSNorm):
    """`core.RMSNorm` with a gain (eps 1e-6 here), its product rounded in the official hybrid block's
    order, (weight * x) * rsqrt(mean(x^2) + eps), the mean computed first (autograd sums the
    gradients of x's uses in the order they were made): core's x * rsqrt(...) * weight differs in
    the last bit, and the comparison with the official code is bit for bit."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__(dim, eps, weight=True)

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]  (no fused residual form here)
        ms = torch.mean(x ** 2, dim=-1, keepdim=True)  # first: the order of x's uses orders its backward sums
        return self.weight * x * torch.rsqrt(ms + self.eps)


# ---- sublayers ----------------------------------------------------------------------------------


class VisionAttention(nn.Module):
    """Multi-head self-attention over (task token + patches) with 2-D RoPE and a key padding mask.
    `explicit`: softmax(q k^T / sqrt(hd)) written out (the vanilla block's), else SDPA (the hybrid's)."""

    def __init__(self, dim: int, num_heads: int, dropout: float, prefix: int, explicit: bool):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.prefix, self.explicit, self.dropout = prefix, explicit, dropout
        self.qkv = Linear(dim, 3 * dim, bias=True)
        self.proj = Linear(dim, dim, bias=True)
        self.attn_drop = nn.Dropout(dropout)
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], pad_mask: Tensor | None) -> Tensor:
        """pad_mask: (B, L) bool, True = not a key (padding)."""
        B, L, D = x.shape
        qkv = self.qkv(x).view(B, L, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, L, hd)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = apply_rope_2d(q, *rope, self.prefix)
        k = apply_rope_2d(k, *rope, self.prefix)
        if self.explicit:
            scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # (B, H, L, L)
            if pad_mask is not None:
                scores = scores.masked_fill(pad_mask[:, None, None, :], torch.finfo(scores.dtype).min)
            y = torch.matmul(self.attn_drop(torch.softmax(scores, dim=-1)), v)
        else:
            keep = ~pad_mask[:, None, None, :] if pad_mask is not None else None  # SDPA: True = attend
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.proj_drop(self.proj(y))


class GeluMLP(nn.Module):
    """VARC's MLP: fc1 (D -> M), exact GELU, dropout, fc2 (M -> D)."""

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.fc1 = Linear(dim, hidden, bias=True)
        self.fc2 = Linear(hidden, dim, bias=True)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.drop(F.gelu(self.fc1(x))))

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        return {"gate": [], "up": [(self.fc1.weight, slice(None))], "down": [(self.fc2.weight, slice(None))]}


class ConvGLU(nn.Module):
    """The hybrid block's FFN (TransNeXt's convolutional GLU): fc1 (D -> 2h) gives gate | value; the
    image tokens' gate passes a 3x3 depthwise convolution over the G x G grid; GELU(gate) * value,
    dropout, fc2 (h -> D), dropout. The task token's gate skips the convolution."""

    def __init__(self, dim: int, hidden: int, grid: int, prefix: int, dropout: float):
        super().__init__()
        self.hidden, self.grid, self.prefix = hidden, grid, prefix
        self.fc1 = Linear(dim, 2 * hidden, bias=True)
        self.dwconv = nn.Conv2d(hidden, hidden, kernel_size=3, stride=1, padding=1, groups=hidden)
        self.fc2 = Linear(hidden, dim, bias=True)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)  # each (B, L, h)
        B, G, h = x.shape[0], self.grid, self.hidden
        img = gate[:, self.prefix:].transpose(1, 2).reshape(B, h, G, G)  # (B, h, G, G), row-major patches
        c = self.dwconv
        img = F.conv2d(img, c.weight.to(img.dtype), c.bias.to(img.dtype), padding=1, groups=h)
        gate = torch.cat((gate[:, :self.prefix], img.flatten(2).transpose(1, 2)), dim=1)  # (B, L, h)
        return self.drop(self.fc2(self.drop(F.gelu(gate) * value)))

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        h = self.hidden
        return {"gate": [(self.fc1.weight, slice(0, h))], "up": [(self.fc1.weight, slice(h, 2 * h))],
                "down": [(self.fc2.weight, slice(None))]}


# ---- blocks -------------------------------------------------------------------------------------


class _Block(nn.Module):
    self_attn: VisionAttention
    mlp: GeluMLP | ConvGLU

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        """The residual-branch matrices (and row ranges) that take the beta gain, by target name."""
        d = self.self_attn.num_heads * self.self_attn.head_dim
        return {"v": [(self.self_attn.qkv.weight, slice(2 * d, 3 * d))], "o": [(self.self_attn.proj.weight, slice(None))],
                **self.mlp.beta_matrices()}


class VanillaBlock(_Block):
    """VARC's Post-LN block: z <- LN1(alpha z + Drop(Attn(z))); z <- LN2(alpha z + Drop(MLP(z)))."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, dropout: float, prefix: int, residual: Residual):
        super().__init__()
        assert residual.norm == "post", f"the vanilla block is Post-LN, got residual {residual.norm!r}"
        self.alpha = residual.alpha
        self.self_attn = VisionAttention(dim, num_heads, dropout, prefix, explicit=True)
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = GeluMLP(dim, mlp_dim, dropout)
        self.drop2 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], pad_mask: Tensor | None) -> Tensor:
        skip = x if self.alpha == 1.0 else self.alpha * x
        x = self.norm1(skip + self.drop1(self.self_attn(x, rope, pad_mask)))  # z <- LN(alpha z + Attn(z))
        skip = x if self.alpha == 1.0 else self.alpha * x
        return self.norm2(skip + self.drop2(self.mlp(x)))  # z <- LN(alpha z + MLP(z))


class HybridBlock(_Block):
    """The paper's hybrid block, pre-norm: z <- z + eps Drop(Attn(RMS1(z))); z <- z + eps Drop(ConvGLU(RMS2(z)))."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, dropout: float, prefix: int, grid: int,
                 residual: Residual):
        super().__init__()
        # scaling=baseline arrives as Post-LN alpha = beta = 1: the reference's pre-norm block unscaled
        assert residual.norm == "pre" or (residual.alpha == 1.0 and residual.beta == 1.0), \
            f"the hybrid block is pre-norm; got a Post-LN residual with alpha {residual.alpha}"
        self.eps = residual.eps if residual.norm == "pre" else 1.0
        self.self_attn = VisionAttention(dim, num_heads, dropout, prefix, explicit=False)
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = GainRMSNorm(dim)
        self.mlp = ConvGLU(dim, int(2 * mlp_dim / 3), grid, prefix, dropout)
        self.drop2 = nn.Dropout(dropout)
        self.norm2 = GainRMSNorm(dim)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], pad_mask: Tensor | None) -> Tensor:
        f = self.drop1(self.self_attn(self.norm1(x), rope, pad_mask))
        x = x + (f if self.eps == 1.0 else self.eps * f)  # z <- z + eps Attn(RMS(z))
        f = self.drop2(self.mlp(self.norm2(x)))
        return x + (f if self.eps == 1.0 else self.eps * f)  # z <- z + eps ConvGLU(RMS(z))
