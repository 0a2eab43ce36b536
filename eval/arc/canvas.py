"""LoopViT's predictions for the ARC vote (`hrm-deeploop evaluate` on a LoopViT checkpoint, ours or
official; docs/loopvit.md#evaluation-without-training).

Each row of the split (every augmented copy of every test input, as `build-arc` wrote it) is drawn
as a canvas the way the official evaluation draws it (`data.canvas`: a fixed upscale, corner (1, 1);
the scale the run evaluated with, `canvas.eval_scale`, 2 for an official file, lowered for a row
whose input would not fit), from the input alone (the label is never read). The model's argmax
canvas is decoded to a grid (`data.canvas.decode`: the shape from the border) and written as a
30 x 30 token row at the top-left corner (`prediction_row`): what `eval.arc.vote` crops, un-augments
and votes, as for every other model. LoopViT has no halting head: q_halt is 0, so the vote ranks
its candidates by their votes, ties to the first seen. A row whose input does not fit the canvas
even at scale 1 gets an empty prediction (counted wrong) and is counted in the printed line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from arc_data import format as fmt
from eval.predict import gather_on_main
from hrm_deeploop import runtime
from hrm_deeploop.data.canvas import View, decode, grid_of, place
from hrm_deeploop.data.puzzles import num_sequential_batches, sequential_batches
from hrm_deeploop.errors import UserError
from hrm_deeploop.loading import LoadedModel

OFFICIAL_EVAL_SCALE = 2  # the official validation's fix_scale_factor


def eval_scale(loaded: LoadedModel) -> int:
    """The scale the run evaluated its canvases at (ours: `canvas.eval_scale`), the official 2 otherwise."""
    run = loaded.run_config or {}
    return int((run.get("canvas") or {}).get("eval_scale", OFFICIAL_EVAL_SCALE))


def check_fits(loaded: LoadedModel, num_puzzle_identifiers: int, where: str) -> None:
    """The dataset's puzzle ids must be rows of the checkpoint's task table (one row per puzzle id)."""
    rows = loaded.config.num_tasks
    if num_puzzle_identifiers > rows:
        raise UserError(f"checkpoint '{loaded.path}' has {rows} task-table rows; '{where}' has "
                        f"{num_puzzle_identifiers} puzzle ids (a LoopViT checkpoint evaluates the dataset it was "
                        "trained on, whose puzzle ids are its rows)")


def prediction_row(pred: np.ndarray, view: View) -> np.ndarray:
    """A predicted canvas (S, S) -> the vote's token row [900]: the decoded grid (up to 30 x 30) at
    the top-left, colour c as c + 2, EOS after it; a cell predicted 10 or 11 becomes PAD, so the
    vote's crop (the largest all-colour top-left rectangle) stops there."""
    grid = decode(pred, view)[: fmt.MAX_SIDE, : fmt.MAX_SIDE].astype(np.int64)
    tokens = fmt.encode_grid(np.minimum(grid, 9).astype(np.uint8)).reshape(fmt.MAX_SIDE, fmt.MAX_SIDE)
    h, w = grid.shape
    tokens[:h, :w][grid > 9] = fmt.PAD
    return tokens.reshape(-1)


def _view(inp: np.ndarray, size: int, scale: int) -> View | None:
    longest = max(inp.shape) if inp.size else 1
    s = min(scale, (size - 2) // longest)
    return View(s, 1, 1) if s >= 1 else None


@torch.no_grad()
def predict_canvases(model: Any, split: Any, env: runtime.Env, global_batch_size: int, scale: int,
                     max_batches: int | None = None, show_progress: bool = True, num_loops: int | None = None
                     ) -> dict[str, np.ndarray] | None:
    """Every row's prediction (`eval.predictions` fields, dataset order) on rank 0; None elsewhere."""
    model.eval()
    S = model.cfg.image_size
    cols: dict[str, list[np.ndarray]] = {"index": [], "puzzle_identifiers": [], "inputs": [], "predictions": []}
    refused = 0
    bar = runtime.progress(num_sequential_batches(split, global_batch_size, max_batches), "predict") if show_progress else None
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        n = b.num_valid
        inputs = b.tensors["inputs"][:n].numpy()
        pids = b.tensors["puzzle_identifiers"][:n].numpy()
        grids = [grid_of(row) for row in inputs]
        views = [_view(g, S, scale) for g in grids]
        ok = [i for i, v in enumerate(views) if v is not None]
        refused += n - len(ok)
        preds = np.zeros((n, fmt.SEQ_LEN), dtype=np.uint8)
        if ok:
            canvas, mask = (np.stack(a) for a in zip(*[place(grids[i], None, S, views[i])[:2] for i in ok]))
            out = model(torch.from_numpy(canvas).to(env.device), torch.from_numpy(pids[ok]).to(env.device),
                        torch.from_numpy(mask).to(env.device), num_loops=num_loops)
            argmax = out.logits.argmax(-1).to(torch.uint8).cpu().numpy()
            for j, i in enumerate(ok):
                preds[i] = prediction_row(argmax[j], views[i])
        cols["index"].append(b.index[:n])
        cols["puzzle_identifiers"].append(pids.astype(np.int32))
        cols["inputs"].append(inputs.astype(np.uint8))
        cols["predictions"].append(preds)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    local = {k: np.concatenate(v) for k, v in cols.items()} if cols["index"] else None
    gathered = gather_on_main((local, refused), env)
    if gathered is None:
        return None
    refused = sum(r for _, r in gathered)
    if refused:
        runtime.print0(f"predict: {refused} row(s) whose input does not fit a {S} x {S} canvas got an empty "
                       "prediction")
    parts = [g for g, _ in gathered if g is not None and len(g["index"])]
    if not parts:
        raise UserError("the split has no examples to predict")
    merged = {k: np.concatenate([g[k] for g in parts]) for k in cols}
    order = np.argsort(merged.pop("index"), kind="stable")
    out = {k: v[order] for k, v in merged.items()}
    return out | {"q_halt": np.zeros(len(order), dtype=np.float32)}

