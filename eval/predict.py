"""The predictions layer of `hrm-deeploop evaluate`, for every task: `predict_split` runs a model
(loaded by `hrm_deeploop.loading.load_model`) over every example of a split, each batch from a fresh
carry for exactly halt_max_steps segments in eval mode (the reference's protocol), sharded across
ranks under torchrun and gathered on rank 0 in dataset order. What a task does with the predictions (ARC's vote, the puzzles' per-segment scores) is its
room's (`eval.arc.evaluate`, `eval.puzzles.evaluate`); the command is `eval.evaluate`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hrm_deeploop import runtime
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.act import ACTReasoner

# ---- predict --------------------------------------------------------------------------------------

@torch.no_grad()
def predict_split(model: ACTReasoner, split: Any, env: runtime.Env, global_batch_size: int, max_batches: int | None = None,
                  show_progress: bool = True, rows: torch.Tensor | None = None) -> dict[str, np.ndarray] | None:
    """Predictions of this rank's rows, gathered on rank 0 in dataset order (None on other ranks).
    `rows`: dataset id -> puzzle-table row (`data.rows.row_map`), applied to the model's input only."""
    from hrm_deeploop.data.puzzles import num_sequential_batches, sequential_batches
    from hrm_deeploop.data.rows import map_rows
    from hrm_deeploop.runtime import progress

    model.eval()
    cols: dict[str, list[np.ndarray]] = {"index": [], "puzzle_identifiers": [], "inputs": [], "predictions": [], "q_halt": []}
    bar = progress(num_sequential_batches(split, global_batch_size, max_batches), "predict") if show_progress else None
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        n = b.num_valid
        if n:
            t = map_rows({k: v.to(env.device) for k, v in b.tensors.items()}, rows)
            _, out = model.predict(t)
            cols["index"].append(b.index[:n])
            cols["puzzle_identifiers"].append(b.tensors["puzzle_identifiers"][:n].numpy().astype(np.int32))
            cols["inputs"].append(b.tensors["inputs"][:n].numpy().astype(np.uint8))
            cols["predictions"].append(out["logits"][:n].argmax(-1).to(torch.uint8).cpu().numpy())
            cols["q_halt"].append(out["q_halt_logits"][:n].float().cpu().numpy())
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    local = {k: (np.concatenate(v) if v else None) for k, v in cols.items()}
    if env.distributed:
        import torch.distributed as dist

        gathered: list[Any] = [None] * env.world_size if env.is_main else None
        dist.gather_object(local, gathered, dst=0)
        if not env.is_main:
            return None
        parts = [g for g in gathered if g["index"] is not None]
    else:
        parts = [local] if local["index"] is not None else []
    if not parts:
        raise UserError("the split has no examples to predict")
    merged = {k: np.concatenate([g[k] for g in parts]) for k in cols}
    order = np.argsort(merged.pop("index"), kind="stable")
    return {k: v[order] for k, v in merged.items()}
