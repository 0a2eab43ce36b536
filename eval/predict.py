"""The predictions layer of `hrm-deeploop evaluate`, for every task: how a model is run on a batch
(`run_segments`: the dataset's puzzle ids mapped to the checkpoint's table rows, a fresh carry, then
`segments` ACT segments in eval mode, halt_max_steps by default, more to run deeper than trained:
the one way to run deeper) and the one shard / gather loop (`predict_sharded`: each rank's share
of every sequential window, `hrm_deeploop.data.batches.rank_windows`, gathered on rank 0 in
example order). ARC's predictions (`predict_split`: the reference's protocol, each share padded
to the local batch) and the puzzles' per-segment scores of whole examples with their test-time
copies (`eval.puzzles.evaluate.predict_and_score`) are two `work` functions of that loop; what a
task does with the predictions (ARC's vote, the puzzles' report) is its room's (`eval.arc.evaluate`,
`eval.puzzles.evaluate`); the command is `eval.evaluate`, the checkpoint's loader
`hrm_deeploop.loading.load_model`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from hrm_deeploop import runtime
from hrm_deeploop.data.batches import rank_windows, window_batch
from hrm_deeploop.data.rows import map_rows
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.act import ACTReasoner

T = TypeVar("T")


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


def predict_sharded(work: Callable[[np.ndarray], T], total: int, window: int, env: runtime.Env,
                    max_windows: int | None = None, label: str = "predict", show_progress: bool = True) -> list[T] | None:
    """`work(idx)` on this rank's share of every sequential window of the split's `total` examples
    (`hrm_deeploop.data.batches.rank_windows`; an empty share is skipped), every rank's results on
    rank 0 in example order (None on the other ranks): the one shard / gather loop of evaluation."""
    windows = list(rank_windows(total, window, env.rank, env.world_size, max_windows))
    bar = runtime.progress(len(windows), label) if show_progress else None
    mine: list[T | None] = []
    for idx in windows:
        mine.append(work(idx) if len(idx) else None)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    gathered = gather_on_main(mine, env)
    if gathered is None:
        return None
    ordered = [part[k] for k in range(len(windows)) for part in gathered if part[k] is not None]
    if not ordered:
        raise UserError("the split has no examples to predict")
    return ordered


@torch.no_grad()
def predict_split(model: ACTReasoner, split: Any, env: runtime.Env, global_batch_size: int, max_batches: int | None = None,
                  show_progress: bool = True, rows: torch.Tensor | None = None,
                  segments: int | None = None, log_probs: bool = False) -> dict[str, np.ndarray] | None:
    """The last segment's predictions of every example, on rank 0 in dataset order (None on other
    ranks): the reference's protocol, each rank's share of a window padded to the local batch;
    `rows` and `segments` as `run_segments` takes them. With `log_probs`, also "log_probs":
    float16 [n, L, V], the log-softmax of those logits (for `eval.arc.poe`)."""
    model.eval()
    B = global_batch_size // env.world_size

    def work(idx: np.ndarray) -> dict[str, np.ndarray]:
        b, n = window_batch(split, idx, B), len(idx)
        for step_out in run_segments(model, {k: v.to(env.device) for k, v in b.tensors.items()}, rows, segments):
            out = step_out  # the last segment's outputs are the predictions
        cols = {"puzzle_identifiers": b.tensors["puzzle_identifiers"][:n].numpy().astype(np.int32),
                "inputs": b.tensors["inputs"][:n].numpy().astype(np.uint8),
                "predictions": out["logits"][:n].argmax(-1).to(torch.uint8).cpu().numpy(),
                "q_halt": out["q_halt_logits"][:n].float().cpu().numpy()}
        if log_probs:  # (n, L, V)
            cols["log_probs"] = torch.log_softmax(out["logits"][:n].float(), -1).to(torch.float16).cpu().numpy()
        return cols

    parts = predict_sharded(work, int(split.num_examples), global_batch_size, env, max_batches, "predict", show_progress)
    return None if parts is None else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
