"""HRM losses and metrics (reference spec 4): pure functions of tensors.

- `stablemax_cross_entropy`: s(x) = x + 1 (x >= 0), 1 / (1 - x + 1e-30) (x < 0); log p = log(s / sum s),
  in float64 by default (the reference), float32 as an option.
- `softmax_cross_entropy`: fp32 cross-entropy with ignore_index -100.
- `act_loss`: per-sequence normalised LM loss summed over sequences, q_halt BCE against "this
  segment's prediction is exactly right", q_continue BCE against the target Q;
  total = lm + 0.5 * (q_halt + q_continue). Metrics are sums over sequences that halted at this
  call and have at least one supervised token (`count`); divide by `count` to log.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_LABEL = -100
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _stablemax_s(x: Tensor, eps: float = 1e-30) -> Tensor:
    return torch.where(x < 0, 1 / (1 - x + eps), x + 1)


def log_stablemax(x: Tensor, dim: int = -1) -> Tensor:
    s = _stablemax_s(x)
    return torch.log(s / s.sum(dim=dim, keepdim=True))


def stablemax_cross_entropy(logits: Tensor, labels: Tensor, dtype: str = "float64") -> Tensor:
    """logits (B, S, V), labels (B, S) with -100 ignored -> per-token loss (B, S) in `dtype`."""
    logp = log_stablemax(logits.to(_DTYPES[dtype]))  # (B, S, V)
    valid = labels != IGNORE_LABEL
    safe = torch.where(valid, labels, 0).long()
    picked = torch.gather(logp, -1, safe.unsqueeze(-1)).squeeze(-1)  # (B, S)
    return -torch.where(valid, picked, 0)


def softmax_cross_entropy(logits: Tensor, labels: Tensor, dtype: str = "float32") -> Tensor:
    """fp32 cross-entropy per token (B, S), 0 where labels == -100."""
    B, S, V = logits.shape
    return F.cross_entropy(logits.float().reshape(B * S, V), labels.long().reshape(B * S),
                           ignore_index=IGNORE_LABEL, reduction="none").view(B, S)


LOSSES = {"stablemax_cross_entropy": stablemax_cross_entropy, "softmax_cross_entropy": softmax_cross_entropy}


def act_loss(outputs: dict[str, Tensor], labels: Tensor, halted: Tensor, steps: Tensor,
             loss_type: str = "stablemax_cross_entropy", stablemax_dtype: str = "float64"
             ) -> tuple[Tensor, dict[str, Tensor]]:
    """Total loss (a scalar, summed over the B sequences) and metric sums.

    outputs: logits (B, S, V), q_halt_logits (B,), q_continue_logits (B,), optional
    target_q_continue (B,). labels (B, S) with -100 ignored; halted (B,) bool; steps (B,) int.
    """
    logits = outputs["logits"]
    mask = labels != IGNORE_LABEL  # (B, S)
    counts = mask.sum(-1)  # (B,)
    divisor = counts.clamp_min(1).unsqueeze(-1)  # (B, 1)
    with torch.no_grad():
        correct = mask & (torch.argmax(logits, dim=-1) == labels)  # (B, S)
        seq_correct = correct.sum(-1) == counts  # (B,)
        valid = halted & (counts > 0)
        q_halt = outputs["q_halt_logits"]
        metrics = {
            "count": valid.sum(),
            "accuracy": torch.where(valid, (correct.float() / divisor).sum(-1), 0).sum(),
            "exact_accuracy": (valid & seq_correct).sum(),
            "q_halt_accuracy": (valid & ((q_halt >= 0) == seq_correct)).sum(),
            "steps": torch.where(valid, steps, 0).sum(),
        }
    per_token = LOSSES[loss_type](logits, labels, stablemax_dtype)
    lm_loss = (per_token / divisor).sum()
    q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, seq_correct.to(q_halt.dtype), reduction="sum")
    q_continue_loss = torch.zeros((), dtype=q_halt.dtype, device=q_halt.device)
    if "target_q_continue" in outputs:
        q_continue_loss = F.binary_cross_entropy_with_logits(
            outputs["q_continue_logits"], outputs["target_q_continue"], reduction="sum")
    metrics.update(lm_loss=lm_loss.detach(), q_halt_loss=q_halt_loss.detach(),
                   q_continue_loss=q_continue_loss.detach())
    return lm_loss + 0.5 * (q_halt_loss + q_continue_loss), metrics
