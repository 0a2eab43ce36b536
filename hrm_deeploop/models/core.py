"""The looped-block core shared by HRM, TRM, URM and the looped GPT.

- `Block`: attention and an MLP, each a residual sublayer. Its forward is the paper's equation,
  x <- RMSNorm(alpha * x + f(x)) twice (alpha = 1: HRM's Post-LN block); the Pre-LN and OperLoop
  alternatives are transitions (`models/transitions.py`). beta is a gain on the residual-branch
  matrices, applied once by `init_block_`.
- `BlockConfig`: everything a block is built from, alpha and beta included (`residual`, from
  `scaling.module_residuals`), and the explicit choice of the fused Triton residual-norm kernel
  (`fused`, used for CUDA tensors; the CPU path is plain PyTorch).
- `SeqMLPBlock`: TRM's token-mixing variant (mlp_t), a SwiGLU across positions in place of attention.
- `LoopedCore`: K blocks built from one `BlockConfig`, applied for R rounds with optional input
  injection (unrolled depth N = K*R).
- The parts: `Linear` (fp32 master weight cast at use), `RMSNorm`, `Rotary` / `apply_rope`,
  `Attention` (SDPA), `SwiGLU`, `GeluMLP`, `ConvSwiGLU`, `trunc_normal_`.

Architecture only: no process group, no config files, no environment variables. Module and
parameter names follow HRM (`layers.N.self_attn.qkv_proj`, `mlp.gate_up_proj`, ...) so official
checkpoints map onto this code by stripping prefixes only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.kvcache import KVSlot
from hrm_deeploop.models.scaling import Residual
from hrm_deeploop.models.transitions import Transition, make_transition

# ---- init ------------------------------------------------------------------------------------

def trunc_normal_(t: Tensor, std: float = 1.0, lower: float = -2.0, upper: float = 2.0) -> Tensor:
    """JAX-style truncated normal whose actual std equals `std` (HRM models/common.py semantics).

    Samples N(0, comp_std) truncated to [lower, upper] * comp_std, with comp_std chosen so the
    truncated distribution's std is `std` (|x| <= 2.2737 * std for the default bounds).
    """
    with torch.no_grad():
        if std == 0:
            return t.zero_()
        sqrt2 = math.sqrt(2)
        a, b = math.erf(lower / sqrt2), math.erf(upper / sqrt2)
        z = (b - a) / 2
        c = (2 * math.pi) ** -0.5
        pdf_u, pdf_l = c * math.exp(-0.5 * lower**2), c * math.exp(-0.5 * upper**2)
        comp_std = std / math.sqrt(1 - (upper * pdf_u - lower * pdf_l) / z - ((pdf_u - pdf_l) / z) ** 2)
        t.uniform_(a, b)
        t.erfinv_()
        t.mul_(sqrt2 * comp_std)
        t.clip_(lower * comp_std, upper * comp_std)
    return t


# ---- building blocks ---------------------------------------------------------------------------

class Linear(nn.Module):
    """Bias-optional linear layer whose fp32 master weight is cast to the input dtype at use.

    This is HRM's CastedLinear: bf16 compute with fp32 weights, with or without autocast.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.reset_parameters()  # usable standalone; a model re-initialises it in its init_weights

    def reset_parameters(self) -> None:
        trunc_normal_(self.weight, std=1.0 / math.sqrt(self.weight.shape[1]))  # truncated LeCun normal
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.weight.to(x.dtype), bias)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """RMSNorm over the last dim, computed in (at least) fp32 and cast back to x's dtype."""
    x32 = x.to(torch.promote_types(x.dtype, torch.float32))
    y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(x32.dtype)
    return y.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with an optional learnable gain (HRM's is weightless, eps 1e-5). Called with a
    sublayer output f, it is the Post-LN residual step RMSNorm(alpha * x + f): with `fused`, the
    fused Triton kernel for CUDA tensors (models/kernels/residual_norm.py), else plain PyTorch."""

    def __init__(self, dim: int, eps: float = 1e-5, weight: bool = False, fused: bool = False):
        super().__init__()
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim)) if weight else None

    def forward(self, x: Tensor, f: Tensor | None = None, alpha: float = 1.0) -> Tensor:
        if f is None:
            return rms_norm(x, self.weight, self.eps)
        if self.fused and x.is_cuda:
            from hrm_deeploop.models.kernels.residual_norm import (
                residual_rms_norm,  # lazy: triton, only for fused blocks on CUDA
            )

            return residual_rms_norm(x, f, alpha, self.weight, self.eps)
        # x first: the sum keeps x's memory layout (TRM's transposed stream), so the norm reduces in
        # the reference's order; alpha = 1 skips the multiply, as the references do
        return rms_norm(x + f if alpha == 1.0 else alpha * x + f, self.weight, self.eps)


class Rotary(nn.Module):
    """Rotary position embedding tables (fp32, non-persistent), 'rotate half' convention."""

    def __init__(self, head_dim: int, max_len: int, theta: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, seq_len: int) -> tuple[Tensor, Tensor]:
        return self.cos[:seq_len], self.sin[:seq_len]


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """q, k: (B, T, H, D); cos, sin: (T, D). Rotation in fp32, result in the input dtype."""
    cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, D)
    q32 = q.to(torch.promote_types(q.dtype, torch.float32))
    k32 = k.to(torch.promote_types(k.dtype, torch.float32))
    q_out = q32 * cos + _rotate_half(q32) * sin
    k_out = k32 * cos + _rotate_half(k32) * sin
    return q_out.to(q.dtype), k_out.to(k.dtype)


class Attention(nn.Module):
    """Multi-head attention: fused bias-free QKV ([q heads | k heads | v heads]), SDPA, RoPE."""

    def __init__(self, dim: int, num_heads: int, causal: bool, head_dim: int | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        self.causal = causal
        self.qkv_proj = Linear(dim, 3 * num_heads * self.head_dim)
        self.o_proj = Linear(num_heads * self.head_dim, dim)

    def qkv(self, x: Tensor, rope: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values (B, H, T, D), RoPE applied to q and k."""
        B, T, _ = x.shape
        qkv = self.qkv_proj(x).view(B, T, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.split(self.num_heads, dim=2)  # each (B, T, H, D)
        if rope is not None:
            q, k = apply_rope(q, k, *rope)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None = None, kv: KVSlot | None = None) -> Tensor:
        """kv: this visit's slot of a KV cache (`models/kvcache.py`); x then holds the T newest
        positions and `rope` their tables; the slot returns every key and value they attend to."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x, rope)  # each (B, H, T, D)
        mask, causal = None, self.causal
        if kv is not None:
            k, v = kv.update(k, v)  # (B, H, S, D): S = cached + T
            mask, causal = kv.mask(T, k.shape[2]) if self.causal else None, False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # (B, H, T, D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim))


def swiglu_width(dim: int, expansion: float, multiple: int = 256) -> int:
    """HRM's SwiGLU inner width: round(expansion * dim * 2/3) rounded up to `multiple`."""
    inner = round(expansion * dim * 2 / 3)
    return -(inner // -multiple) * multiple


class SwiGLU(nn.Module):
    """Fused gate/up projection (first half gate, second half up), then down."""

    def __init__(self, dim: int, expansion: float, multiple: int = 256):
        super().__init__()
        self.inner = swiglu_width(dim, expansion, multiple)
        self.gate_up_proj = Linear(dim, 2 * self.inner)
        self.down_proj = Linear(self.inner, dim)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        return {"gate": [(self.gate_up_proj.weight, slice(0, self.inner))],
                "up": [(self.gate_up_proj.weight, slice(self.inner, 2 * self.inner))],
                "down": [(self.down_proj.weight, slice(None))]}


class GeluMLP(nn.Module):
    """GPT-2's MLP: up to expansion x dim, tanh-approximated GELU, down (the looped GPT's `model.mlp=gelu`)."""

    def __init__(self, dim: int, expansion: float):
        super().__init__()
        self.inner = int(round(expansion * dim))
        self.up_proj = Linear(dim, self.inner)
        self.down_proj = Linear(self.inner, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        return {"gate": [], "up": [(self.up_proj.weight, slice(None))], "down": [(self.down_proj.weight, slice(None))]}


class ConvSwiGLU(SwiGLU):
    """URM's ConvSwiGLU: SwiGLU whose gated product passes a short depthwise convolution over the
    positions (causal: y_t = w_0 h_{t-1} + w_1 h_t + b at width 2) and a SiLU before the down
    projection. The convolution's fp32 weight is cast to the compute dtype at use, as `Linear`'s
    (the reference holds it in bf16 outright). Beta targets as SwiGLU's (gate/up/down; the
    convolution is not scaled)."""

    def __init__(self, dim: int, expansion: float, multiple: int = 256, kernel: int = 2):
        super().__init__(dim, expansion, multiple)
        self.dwconv = nn.Conv1d(self.inner, self.inner, kernel, padding=kernel // 2, groups=self.inner, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        h = (F.silu(gate) * up).transpose(1, 2)  # (B, inner, T): convolve along the positions
        c = self.dwconv
        h = F.conv1d(h, c.weight.to(h.dtype), c.bias.to(h.dtype), padding=c.padding, groups=c.groups)
        return self.down_proj(F.silu(h[..., :T]).transpose(1, 2).contiguous())  # (B, T, D)


def make_mlp(kind: str, dim: int, expansion: float, multiple: int = 256, conv_kernel: int = 2) -> nn.Module:
    """The channel MLP `kind` names (swiglu | gelu | convswiglu), at the reference widths."""
    if kind == "gelu":
        return GeluMLP(dim, expansion)
    if kind == "convswiglu":
        return ConvSwiGLU(dim, expansion, multiple, conv_kernel)
    assert kind == "swiglu", f"unknown mlp {kind!r}; known: swiglu, gelu, convswiglu"
    return SwiGLU(dim, expansion, multiple)


def mlp_width(kind: str, dim: int, expansion: float, multiple: int = 256) -> int:
    """Inner width of an MLP (for FLOP counts): SwiGLU rounds 2/3 of expansion x dim up to `multiple`."""
    return swiglu_width(dim, expansion, multiple) if kind in ("swiglu", "convswiglu") else int(round(expansion * dim))


# ---- blocks ------------------------------------------------------------------------------------

# Whether a model uses the fused Triton residual-norm kernel on CUDA when its builder is not told
# (`fused=`): the one default. Every builder in the library is told: runtime.Env.fused_kernel, set
# once by `runtime.setup` from HRM_DEEPLOOP_FUSED_RESIDUAL_NORM (docs/kernels.md).
FUSED = True


@dataclass(frozen=True)
class BlockConfig:
    """What one block is built from; a `LoopedCore` builds its K blocks from one of these."""

    dim: int
    num_heads: int
    expansion: float
    causal: bool
    residual: Residual = Residual()  # the transition and its alpha / beta / eps (scaling.module_residuals)
    norm_eps: float = 1e-5
    norm_weight: bool = False
    mlp_multiple: int = 256
    mlp: str = "swiglu"  # swiglu | gelu | convswiglu
    conv_kernel: int = 2  # convswiglu's convolution width
    mixer: str = "attention"  # attention | mlp (TRM's token-mixing SwiGLU over `seq_len` positions)
    seq_len: int | None = None  # the mlp mixer's width
    fused: bool = FUSED  # the fused Triton residual-norm kernel for the Post-LN step on CUDA tensors


class Block(nn.Module):
    """Attention, then the MLP, each updating the stream x by the paper's Post-LN step
    x <- RMSNorm(alpha * x + f(x)) (alpha = 1: HRM's block). `residual.norm` pre / operloop
    replaces the step by a transition (`models/transitions.py`; OperLoop's step size is a parameter
    of `attn_step` / `mlp_step`)."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        self.cfg = cfg
        self.self_attn = Attention(cfg.dim, cfg.num_heads, cfg.causal)
        self.mlp = make_mlp(cfg.mlp, cfg.dim, cfg.expansion, cfg.mlp_multiple, cfg.conv_kernel)
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps, weight=cfg.norm_weight, fused=cfg.fused)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps, weight=cfg.norm_weight, fused=cfg.fused)
        self.post = cfg.residual.norm == "post"
        if not self.post:
            self.attn_step = make_transition(cfg.residual)
            self.mlp_step = make_transition(cfg.residual)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None = None, kv: KVSlot | None = None) -> Tensor:
        if self.post:
            alpha = self.cfg.residual.alpha
            x = self.attn_norm(x, self.self_attn(x, rope, kv), alpha)  # x <- RMSNorm(alpha * x + Attn(x))
            return self.mlp_norm(x, self.mlp(x), alpha)  # x <- RMSNorm(alpha * x + MLP(x))
        x = self.attn_step(x, lambda h: self.self_attn(h, rope, kv), self.attn_norm)
        return self.mlp_step(x, self.mlp, self.mlp_norm)

    @property
    def unnormalised_output(self) -> bool:
        """The stream leaves the block unnormalised (Pre-LN, OperLoop): `LoopedCore` closes with an RMSNorm."""
        return not self.post and self.attn_step.final_norm

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        """The residual-branch matrices (and row ranges) that take the beta gain, by target name."""
        hd = self.self_attn.num_heads * self.self_attn.head_dim
        return {
            "v": [(self.self_attn.qkv_proj.weight, slice(2 * hd, 3 * hd))],  # value rows of the fused QKV
            "o": [(self.self_attn.o_proj.weight, slice(None))],
            **self.mlp.beta_matrices(),
        }


class SeqMLPBlock(nn.Module):
    """TRM's `mlp_t` block: a SwiGLU across the sequence axis (token mixing, in place of attention)
    and the channel SwiGLU, both under the block's residual step.

    The token-mixing sublayer runs on the transposed stream (B, D, T), so its RMSNorm normalises
    across the T positions of each channel, as the reference's does (never the fused kernel). Its
    SwiGLU's up and down matrices are residual-branch matrices like the channel MLP's:
    `scaling.beta_targets` up / down / gate apply to both MLPs (v and o have no counterpart here).
    """

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        assert cfg.seq_len is not None, "the mlp mixer needs seq_len (its width is the sequence length)"
        self.cfg = cfg
        self.mlp_t = SwiGLU(cfg.seq_len, cfg.expansion, cfg.mlp_multiple)
        self.mlp = SwiGLU(cfg.dim, cfg.expansion, cfg.mlp_multiple)
        self.mix_norm = RMSNorm(cfg.seq_len, cfg.norm_eps, weight=cfg.norm_weight)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps, weight=cfg.norm_weight, fused=cfg.fused)
        self.post = cfg.residual.norm == "post"
        if not self.post:
            self.mix_step = make_transition(cfg.residual)
            self.mlp_step = make_transition(cfg.residual)

    @property
    def unnormalised_output(self) -> bool:
        return not self.post and self.mix_step.final_norm

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        xt = x.transpose(1, 2)  # (B, D, T): mix along the sequence axis
        if self.post:
            alpha = self.cfg.residual.alpha
            x = self.mix_norm(xt, self.mlp_t(xt), alpha).transpose(1, 2)  # (B, T, D)
            return self.mlp_norm(x, self.mlp(x), alpha)
        x = self.mix_step(xt, self.mlp_t, self.mix_norm).transpose(1, 2)  # (B, T, D)
        return self.mlp_step(x, self.mlp, self.mlp_norm)

    def beta_matrices(self) -> dict[str, list[tuple[Tensor, slice]]]:
        out: dict[str, list[tuple[Tensor, slice]]] = {"v": [], "o": [], "gate": [], "up": [], "down": []}
        for mlp in (self.mlp_t, self.mlp):  # no attention here
            for target, mats in mlp.beta_matrices().items():
                out[target] += mats
        return out


def init_block_(block: Block | SeqMLPBlock, std: float | None = None, proj_std: float | None = None) -> None:
    """(Re)initialise one block: truncated LeCun normal on every matrix (or, with `std`, GPT-2's
    N(0, std^2) and N(0, proj_std^2) on the residual projections o_proj and the MLP's down_proj),
    torch's default on a ConvSwiGLU's convolution, unit norm gains, then the beta gain on the
    residual-branch matrices named in `residual.beta_targets` (query and key rows are never scaled)."""
    seen = set()
    for name, module in block.named_modules():
        if isinstance(module, Linear):
            if std is None:
                module.reset_parameters()
            else:
                is_proj = name.endswith(("o_proj", "down_proj"))
                nn.init.normal_(module.weight, 0.0, proj_std if is_proj and proj_std is not None else std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            seen.add(id(module.weight))
        elif isinstance(module, RMSNorm) and module.weight is not None:
            nn.init.ones_(module.weight)
            seen.add(id(module.weight))
        elif isinstance(module, nn.Conv1d):  # ConvSwiGLU's depthwise convolution: torch's default, as URM's
            module.reset_parameters()  # weight and bias U(-1/sqrt(kernel), 1/sqrt(kernel))
            seen.update(id(p) for p in module.parameters())
        elif isinstance(module, Transition):
            module.reset_parameters()
            seen.update(id(p) for p in module.parameters())
    missing = [n for n, p in block.named_parameters() if id(p) not in seen]
    assert not missing, f"init_block_ does not initialise {missing}"
    residual = block.cfg.residual
    if residual.beta != 1.0:
        with torch.no_grad():
            mats = block.beta_matrices()
            for target in residual.beta_targets:
                for w, rows in mats[target]:
                    w[rows].mul_(residual.beta)


def make_block(cfg: BlockConfig) -> Block | SeqMLPBlock:
    """The block `cfg.mixer` names, with its modules' default init (a model's `init_weights` then
    initialises it the model's way, `init_block_`, once)."""
    assert cfg.mixer in ("attention", "mlp"), f"unknown mixer {cfg.mixer!r}"
    return SeqMLPBlock(cfg) if cfg.mixer == "mlp" else Block(cfg)


class LoopedCore(nn.Module):
    """K physical blocks applied for R rounds (unrolled depth N = K*R).

    The blocks are built once from `block` and reused every round, so gradients from all R visits
    accumulate into the same tensors. `injection`, if given, is added to the stream at the start of
    every round (HRM's input injection: module(z, u) = blocks(z + u)). When the blocks leave the
    stream unnormalised (pre-LN, OperLoop), a final RMSNorm closes the stack.
    """

    def __init__(self, block: BlockConfig, num_blocks: int, num_rounds: int = 1, checkpoint_rounds: bool = False):
        super().__init__()
        assert num_blocks > 0, "LoopedCore needs at least one block"
        self.layers = nn.ModuleList(make_block(block) for _ in range(num_blocks))
        self.num_rounds = num_rounds
        self.checkpoint_rounds = checkpoint_rounds
        self.final_norm = (RMSNorm(block.dim, block.norm_eps, weight=block.norm_weight)
                           if self.layers[0].unnormalised_output else None)

    def _round(self, x: Tensor, rope: tuple[Tensor, Tensor] | None) -> Tensor:
        for block in self.layers:
            x = block(x, rope)
        return x

    def forward(self, x: Tensor, injection: Tensor | None = None, rope: tuple[Tensor, Tensor] | None = None,
                num_rounds: int | None = None, backprop_rounds: int | None = None) -> Tensor:
        """backprop_rounds=k: only the last k rounds are on the autograd tape (Huginn's truncated
        recurrence); the earlier ones run under no_grad. None: every round."""
        rounds = self.num_rounds if num_rounds is None else num_rounds
        no_grad_rounds = 0 if backprop_rounds is None else max(rounds - backprop_rounds, 0)
        for r in range(rounds):
            if injection is not None:
                x = x + injection
            if r < no_grad_rounds:
                with torch.no_grad():
                    x = self._round(x, rope)
            elif self.checkpoint_rounds and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(self._round, x, rope, use_reentrant=False)
            else:
                x = self._round(x, rope)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x
