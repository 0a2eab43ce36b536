"""The template module `ReasonerCopies` runs under vmap (pertask/reasoner_copies.py): a copy of a
reasoner whose pieces that cannot run per lane as they are written are swapped for ones that can.

- `LaneTable` for `PuzzleEmbedding`: the lone table's gradient leaf is made by `prepare` and
  collected in a Python list during the forward (`_pending`); under vmap the leaf is an input of the
  vmapped function instead (`offset`, set on the module inside it), and its gradient is the lane's
  row gradients. The looked-up rows are the lone ones bit for bit (`weights[ids] + offset`, the
  offset zero, as `PuzzleEmbedding.forward` after `prepare`).
- `lane_bce_sum`: the Q losses' `F.binary_cross_entropy_with_logits(..., reduction="sum")`, whose
  batched rule under vmap rounds differently from the lone kernel (6.8e-7 on q_halt_loss at the
  first step, measured); run once per lane inside the vmap. `lane_loss` is `losses.act_loss`'s loss
  with it (the metrics, which the lanes do not report, left out).
- `lane_linear` for the Linears named in `per_lane` (`ReasonerCopies` names the q head: a (D, 2)
  Linear with bias on the strided slice z_H[:, 0], 4.8e-7 on the q logits batched); the others
  (QKV, O, MLPs, lm_head) are batched and bit-identical to the lone ones on CPU.
- `lane_conv1d` in URM's `ConvSwiGLU`: under vmap the depthwise convolution becomes one grouped
  convolution over the lanes, which rounds differently (2e-8..5e-8 on the losses).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.act import ACTReasoner, PuzzleEmbedding
from hrm_deeploop.models.core import ConvSwiGLU, Linear
from hrm_deeploop.models.losses import IGNORE_LABEL, LOSSES
from hrm_deeploop.pertask.copies import lane_linear


@torch.library.custom_op("hrm_reasoner::lane_bce_sum", mutates_args=())
def lane_bce_sum(logits: Tensor, target: Tensor) -> Tensor:
    """F.binary_cross_entropy_with_logits summed; under vmap, one call per lane."""
    return F.binary_cross_entropy_with_logits(logits, target, reduction="sum")


@lane_bce_sum.register_fake
def _(logits, target):
    return logits.new_empty(())


@lane_bce_sum.register_vmap
def _(info, in_dims, logits, target):
    k = info.batch_size
    at = [t.movedim(d, 0) if d is not None else t.expand(k, *t.shape) for t, d in zip((logits, target), in_dims)]
    return torch.stack([F.binary_cross_entropy_with_logits(at[0][i], at[1][i], reduction="sum") for i in range(k)]), 0


@torch.library.custom_op("hrm_reasoner::lane_conv1d", mutates_args=())
def lane_conv1d(x: Tensor, weight: Tensor, bias: Tensor, padding: list[int], groups: int) -> Tensor:
    """F.conv1d; under vmap, one per lane (the batched rule is a grouped convolution over the lanes,
    which rounds differently)."""
    return F.conv1d(x, weight, bias, padding=padding, groups=groups)


@lane_conv1d.register_fake
def _(x, weight, bias, padding, groups):
    return F.conv1d(x, weight, bias, padding=padding, groups=groups)


@lane_conv1d.register_vmap
def _(info, in_dims, x, weight, bias, padding, groups):
    k = info.batch_size
    at = [t.movedim(d, 0) if d is not None else t.expand(k, *t.shape) for t, d in zip((x, weight, bias), in_dims[:3])]
    return torch.stack([F.conv1d(at[0][i], at[1][i], at[2][i], padding=padding, groups=groups) for i in range(k)]), 0


def _conv_swiglu_forward(m: ConvSwiGLU):
    """`ConvSwiGLU.forward` with its convolution through `lane_conv1d` (the same ops otherwise)."""
    def forward(x: Tensor) -> Tensor:
        T = x.shape[1]
        gate, up = m.gate_up_proj(x).chunk(2, dim=-1)
        h = (F.silu(gate) * up).transpose(1, 2)  # (B, inner, T)
        c = m.dwconv
        h = lane_conv1d(h, c.weight.to(h.dtype), c.bias.to(h.dtype), list(c.padding), c.groups)
        return m.down_proj(F.silu(h[..., :T]).transpose(1, 2).contiguous())  # (B, T, D)
    return forward


def lane_loss(outputs: dict[str, Tensor], labels: Tensor, loss_type: str, stablemax_dtype: str
              ) -> dict[str, Tensor]:
    """`losses.act_loss`'s total and its three parts (lm_loss, q_halt_loss, q_continue_loss), the Q
    losses through `lane_bce_sum`; op for op the lone function's otherwise (a test holds them equal)."""
    logits = outputs["logits"]
    mask = labels != IGNORE_LABEL  # (B, S)
    counts = mask.sum(-1)  # (B,)
    divisor = counts.clamp_min(1).unsqueeze(-1)  # (B, 1)
    with torch.no_grad():
        seq_correct = (mask & (torch.argmax(logits, dim=-1) == labels)).sum(-1) == counts  # (B,)
    q_halt = outputs["q_halt_logits"]
    lm_loss = (LOSSES[loss_type](logits, labels, stablemax_dtype) / divisor).sum()
    q_halt_loss = lane_bce_sum(q_halt, seq_correct.to(q_halt.dtype))
    q_continue_loss = torch.zeros((), dtype=q_halt.dtype, device=q_halt.device)
    if "target_q_continue" in outputs:
        q_continue_loss = lane_bce_sum(outputs["q_continue_logits"], outputs["target_q_continue"])
    return {"loss": lm_loss + 0.5 * (q_halt_loss + q_continue_loss), "lm_loss": lm_loss.detach(),
            "q_halt_loss": q_halt_loss.detach(), "q_continue_loss": q_continue_loss.detach()}


class LaneTable(nn.Module):
    """`PuzzleEmbedding`'s lookup with the gradient leaf given (`offset`, (B, dim), set per call)."""

    def __init__(self, like: PuzzleEmbedding):
        super().__init__()
        self.register_buffer("weights", like.weights.detach().clone(), persistent=True)
        self.offset: Tensor | None = None

    def forward(self, ids: Tensor, dtype, track_grad: bool) -> Tensor:
        if not track_grad:
            return self.weights[ids].to(dtype)
        assert self.offset is not None, "LaneTable: a tracked lookup without its offset"
        return (self.weights[ids] + self.offset).to(dtype)  # (B, dim)


def _lane_linear_forward(m: Linear):
    def forward(x: Tensor) -> Tensor:
        return lane_linear(x, m.weight.to(x.dtype), m.bias.to(x.dtype) if m.bias is not None else None)
    return forward


def lane_template(model: ACTReasoner, per_lane: tuple[str, ...] = ()) -> ACTReasoner:
    """A copy of `model` that runs one lane under vmap (module docstring); the `Linear`s whose names
    end with one of `per_lane` through `lane_linear`."""
    t = copy.deepcopy(model)
    for name, m in t.named_modules():
        if isinstance(m, Linear) and any(name.endswith(s) for s in per_lane):
            m.forward = _lane_linear_forward(m)
        if type(m) is ConvSwiGLU:
            m.forward = _conv_swiglu_forward(m)
    if t.puzzle_emb is not None:
        t.puzzle_emb = LaneTable(t.puzzle_emb)
    return t
