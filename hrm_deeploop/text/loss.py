"""The looped GPT's loss on held-out token windows: token-weighted mean cross-entropy, summed over
ranks; with an adaptive exit rule, also the mean rounds per position. Read by the trainer's
validation (`training.lm`) and by `hrm-deeploop eval-gpt` (`eval.lm`)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from hrm_deeploop import runtime
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.gpt import GPT, ExitRule


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, batches: Iterable[tuple[Tensor, Tensor]], device: torch.device,
                  dtype: torch.dtype) -> float:
    """Token-weighted mean cross-entropy over `batches`, summed over all ranks."""
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (sum of losses, tokens)
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with runtime.autocast(device, dtype):
            loss = model(x, y)[1]  # drop the (B, T, V) logits now, not after backward
        n = (y != -1).sum()
        total += torch.stack([loss.double() * n, n.double()])
    model.train(was_training)
    runtime.all_reduce_(total)
    if total[1] == 0:
        raise UserError("validation produced no batches")
    return float(total[0] / total[1])


@torch.no_grad()
def evaluate_loss_exit(model: GPT, batches: Iterable[tuple[Tensor, Tensor]], device: torch.device,
                       dtype: torch.dtype, exit: ExitRule) -> tuple[float, float]:
    """(token-weighted mean cross-entropy, mean rounds per position) with adaptive exit
    (`GPT.decode`), summed over all ranks."""
    total = torch.zeros(3, dtype=torch.float64, device=device)  # (sum of losses, tokens, rounds)
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with runtime.autocast(device, dtype):
            logits, used = model.decode(x, exit=exit)
        keep = y != -1
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-1,
                                                 reduction="sum")
        total += torch.stack([loss.double(), keep.sum().double(), used[keep].sum().double()])
    runtime.all_reduce_(total)
    if total[1] == 0:
        raise UserError("validation produced no batches")
    return float(total[0] / total[1]), float(total[2] / total[1])
