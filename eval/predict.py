"""The predictions layer of `hrm-deeploop evaluate`, for every task: how a model is run on a batch
(`run_segments`: the dataset's puzzle ids mapped to the checkpoint's table rows, a fresh carry, then
`segments` ACT segments in eval mode, halt_max_steps by default, more to run deeper than trained),
and how the ranks' results come together (`gather_on_main`). `predict_split` runs every example
of a split in the reference's protocol (sequential batches padded to the global batch, sharded
across ranks under torchrun, gathered on rank 0 in dataset order: ARC's predictions); the puzzle
evaluation runs whole examples with their test-time copies through the same two functions
(`eval.puzzles.evaluate`). What a task does with the predictions (ARC's vote, the puzzles'
per-segment scores) is its room's (`eval.arc.evaluate`, `eval.puzzles.evaluate`); the command is
`eval.evaluate`, the checkpoint's loader `hrm_deeploop.loading.load_model`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hrm_deeploop import runtime
from hrm_deeploop.data.batches import num_sequential_batches, sequential_batches
from hrm_deeploop.data.rows import map_rows
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.act import ACTReasoner


def run_segments(model: ACTReasoner, batch: dict[str, torch.Tensor], rows: torch.Tensor | None,
                 segments: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """The model's outputs after each of `segments` ACT segments (None: its halt_max_steps; the
    last is `model.predict`'s, bit for bit) on `batch`, whose puzzle ids go through `rows` (dataset
    id -> puzzle-table row of a checkpoint that names its rows, `hrm_deeploop.loading.table_rows`;
    None: ids are rows) on the model's copy only."""
    for _, out in model.predict_steps(map_rows(batch, rows), segments):
        yield out


def gather_on_main(local: Any, env: runtime.Env) -> list[Any] | None:
    """Every rank's `local`, in rank order, on rank 0 (None on the other ranks)."""
    if not env.distributed:
        return [local]
    gathered: list[Any] = [None] * env.world_size if env.is_main else None
    dist.gather_object(local, gathered, dst=0)
    return gathered if env.is_main else None


@torch.no_grad()
def predict_split(model: ACTReasoner, split: Any, env: runtime.Env, global_batch_size: int, max_batches: int | None = None,
                  show_progress: bool = True, rows: torch.Tensor | None = None,
                  segments: int | None = None, log_probs: bool = False) -> dict[str, np.ndarray] | None:
    """The last segment's predictions of this rank's rows, gathered on rank 0 in dataset order
    (None on other ranks); `rows` and `segments` as `run_segments` takes them. With `log_probs`,
    also "log_probs": float16 [n, L, V], the log-softmax of those logits (for `eval.arc.poe`)."""
    model.eval()
    cols: dict[str, list[np.ndarray]] = {"index": [], "puzzle_identifiers": [], "inputs": [], "predictions": [], "q_halt": []}
    if log_probs:
        cols["log_probs"] = []
    bar = runtime.progress(num_sequential_batches(split, global_batch_size, max_batches), "predict") if show_progress else None
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        n = b.num_valid
        if n:
            for step_out in run_segments(model, {k: v.to(env.device) for k, v in b.tensors.items()}, rows, segments):
                out = step_out  # the last segment's outputs are the predictions
            cols["index"].append(b.index[:n])
            cols["puzzle_identifiers"].append(b.tensors["puzzle_identifiers"][:n].numpy().astype(np.int32))
            cols["inputs"].append(b.tensors["inputs"][:n].numpy().astype(np.uint8))
            cols["predictions"].append(out["logits"][:n].argmax(-1).to(torch.uint8).cpu().numpy())
            cols["q_halt"].append(out["q_halt_logits"][:n].float().cpu().numpy())
            if log_probs:  # (n, L, V)
                cols["log_probs"].append(torch.log_softmax(out["logits"][:n].float(), -1).to(torch.float16).cpu().numpy())
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    gathered = gather_on_main({k: (np.concatenate(v) if v else None) for k, v in cols.items()}, env)
    if gathered is None:
        return None
    parts = [g for g in gathered if g["index"] is not None]
    if not parts:
        raise UserError("the split has no examples to predict")
    merged = {k: np.concatenate([g[k] for g in parts]) for k in cols}
    order = np.argsort(merged.pop("index"), kind="stable")
    return {k: v[order] for k, v in merged.items()}
