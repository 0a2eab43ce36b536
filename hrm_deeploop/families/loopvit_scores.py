"""LoopViT's evaluation figures (`Family.figures`): pixel accuracy and exact match of its canvases
at a fixed scale and corner (1, 1), as the official validation scores them. `train-vit` prints them
on its test split as it trains; `evaluate` prints them beside pass@K (the one figure that separates
two tiny runs that solve nothing)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hrm_deeploop import runtime
from hrm_deeploop.data.batches import rank_windows
from hrm_deeploop.data.canvas import IGNORE, canvas_batch
from hrm_deeploop.errors import UserError


def to_tensors(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}


def canvas_scores(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(correct valid pixels, valid pixels, exactly right examples among those with valid pixels)."""
    valid = target != IGNORE
    right = (logits.argmax(-1) == target) & valid
    labelled = valid.flatten(1).any(1)
    exact = (right.flatten(1).sum(1) == valid.flatten(1).sum(1)) & labelled
    return right.sum(), valid.sum(), exact.sum()




@torch.no_grad()
def canvas_accuracy(model: Any, split: Any, env: runtime.Env, global_batch_size: int, scale: int,
             max_batches: int | None = None) -> dict[str, float] | None:
    """Pixel accuracy and exact match on a split's canvases at `scale`, corner (1, 1); None when no
    example has a label. Every rank runs every batch's forward (FSDP2's all-gathers are
    collective): a rank whose slice of the last batch is empty scores a stand-in row with weight 0."""
    if global_batch_size % env.world_size:
        raise UserError(f"eval batch {global_batch_size} is not divisible by the world size {env.world_size}")
    was = model.training
    model.eval()
    pi, pids = np.asarray(split.puzzle_indices, np.int64), np.asarray(split.puzzle_identifiers, np.int64)
    sums = torch.zeros(4, dtype=torch.float64, device=env.device)
    rng = np.random.default_rng(0)  # unused: no random view at evaluation
    for idx in rank_windows(int(split.num_examples), global_batch_size, env.rank, env.world_size, max_batches):
        weight = 1.0 if len(idx) else 0.0
        if not len(idx):
            idx = np.zeros(1, dtype=np.int64)
        puzzle = np.searchsorted(pi, idx, side="right") - 1
        t = to_tensors(canvas_batch(split, idx, pids[puzzle], model.cfg.image_size, rng, resolution=False,
                                    translation=False, fix_scale=scale), env.device)
        out = model(t["canvas"], t["task_ids"], t["mask"])
        right, valid, exact = canvas_scores(out.logits, t["target"])
        labelled = (t["target"] != IGNORE).flatten(1).any(1).sum()
        sums += weight * torch.stack([right, valid, exact, labelled]).double()
    runtime.all_reduce_(sums)
    model.train(was)
    right, valid, exact, count = sums.tolist()
    if count == 0:
        return None
    return {"accuracy": right / max(valid, 1.0), "exact_accuracy": exact / count, "count": count}


