"""Weight helpers the families' readers share: the weight average swapped in, and the per-tensor
checks for weights in another key layout (an official LoopViT file)."""

from __future__ import annotations

from typing import Any

import torch

from hrm_deeploop.errors import UserError


def with_average(weights: dict[str, Any], shadow: dict[str, Any], where: str) -> dict[str, Any]:
    """The state dict with every trainable parameter replaced by its average (buffers kept)."""
    unknown = sorted(set(shadow) - set(weights))
    if unknown:
        raise UserError(f"checkpoint '{where}': its weight average has key(s) the model lacks: {unknown[:5]}")
    return {**weights, **shadow}


def check_tensors(weights: dict[str, Any], where: str) -> None:
    """`checkpoint.load_weights`'s per-tensor checks for weights in another key layout (an official
    LoopViT file); `where` names the file in the message: a value that is not a tensor, an integer
    tensor where a weight is, NaN or infinity: one line naming it."""
    for key, t in weights.items():
        if not isinstance(t, torch.Tensor):
            raise UserError(f"{where}: '{key}' is a {type(t).__name__}, not a tensor")
        if not t.dtype.is_floating_point and key.rsplit(".", 1)[-1] in ("weight", "bias"):
            raise UserError(f"{where}: tensor '{key}' holds {str(t.dtype).removeprefix('torch.')}, a "
                            "floating-point weight is expected (loading would change its values)")
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            raise UserError(f"{where}: tensor '{key}' holds {int((~torch.isfinite(t)).sum()):,} NaN or "
                            "infinite value(s)")
