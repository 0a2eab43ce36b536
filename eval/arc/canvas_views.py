"""LoopViT's predictions for `hrm-deeploop evaluate` on an ARC test split (a checkpoint of
`train-vit`): every example of the split (each augmented copy of each test input, as build-arc made
it: a dihedral transform and a colour permutation, its own task token) is drawn `passes` times as a
canvas view with a fresh random scale and corner (`hrm_deeploop.data.canvas`, as the official
`generate_predictions` redraws them on each of its `--num-attempts` passes), predicted, and the
predicted canvas decoded back to a grid in the copy's frame (`data.canvas.decode`: crop at the
corner, the shape from the border, a per-block majority down by the scale).

Each decoded grid becomes one row of `predictions.npz` (`eval.predictions`), encoded in the copy's
30 x 30 frame as build-arc encodes a label, with q_halt 0: the ARC vote (`eval.arc.vote`) then undoes
the copy's augmentation and votes, so LoopViT's V copies x P passes go through the one vote, its
ties broken by the row order (pass after pass, each over the split in order), as the official
stable sort breaks them by the order its passes saw them. A decoded grid larger than 30 x 30 (no
border predicted) is cut to 30 x 30, and one with a background or border cell inside is no grid
(a PAD row, the vote's empty candidate, never submitted): the official vote keeps such grids as
candidates of their own, which can take an attempt; neither can match an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from arc_data import format as fmt
from eval.arc.poe import canvas_table
from eval.arc.vote import read_table
from hrm_deeploop import runtime
from hrm_deeploop.data import official_tasks
from hrm_deeploop.data.batches import open_dataset
from hrm_deeploop.data.canvas import BORDER, View, canvas_batch, decode
from hrm_deeploop.errors import UserError
from hrm_deeploop.families.loopvit_scores import canvas_accuracy
from hrm_deeploop.loading import check_same_puzzles, load_model


def canvas_row(pred: np.ndarray, view: View, dihedral: int = 0) -> np.ndarray:
    """A predicted canvas (S, S) under `view`, of a copy made by dihedral transform `dihedral` ->
    its grid encoded as a 900-token row in the copy's frame (uint8). As the official
    `generate_predictions`: the crop at the corner (`data.canvas.decode` at scale 1), the copy's
    transform undone, then the per-block majority down by the scale (`data.canvas.decode`), so that
    a crop that is no multiple of the scale is cut into the same blocks; then back into the copy's
    frame (the vote undoes it with the colours). A grid with a background or border cell left after
    the majority, or none, is a PAD row (the vote's empty candidate); one beyond 30 x 30 is cut to
    30 x 30."""
    crop = decode(pred, View(1, view.x0, view.y0)).astype(np.int64)
    if not crop.size:
        return np.full(fmt.SEQ_LEN, fmt.PAD, dtype=np.uint8)
    # a border cell inside the crop must not end the second decode's crop: held as 12 meanwhile (the
    # majority's order is kept: it is above every colour and the background, as 11 is)
    held = np.where(crop == BORDER, BORDER + 1, crop)
    g = decode(fmt.inverse_dihedral(held, dihedral), View(view.scale, 0, 0))  # no border in it: all of it
    if (g > 9).any():  # a background or border cell survived the majority: no grid, as no answer
        return np.full(fmt.SEQ_LEN, fmt.PAD, dtype=np.uint8)
    return fmt.encode_grid(fmt.dihedral(g.astype(np.uint8), dihedral)[:fmt.MAX_SIDE, :fmt.MAX_SIDE])


@torch.no_grad()
def predict_views(model: Any, split: Any, device: torch.device, batch: int, passes: int, seed: int,
                  dihedral: np.ndarray, max_batches: int | None = None, log_probs: bool = False
                  ) -> dict[str, np.ndarray]:
    """Rows for `predictions.npz`: for each example of `split` (in order), `passes` predictions, each
    on its own random view (scale and corner drawn from `default_rng([seed, pass])`), decoded and
    encoded in the example's frame (`canvas_row`; `dihedral`: the augmentation table's transform of
    each puzzle id); columns as `eval.predict.predict_split` returns them, plus "views" (n, 3)
    int64: scale, x0, y0; with `log_probs` also "log_probs", each row's canvas table float16
    [n, 961, 13] (`eval.arc.poe.canvas_table`: what the product of experts scores candidates by)."""
    pi = np.asarray(split.puzzle_indices, np.int64)
    pids = np.asarray(split.puzzle_identifiers, np.int64)
    n = int(split.num_examples)
    cols: dict[str, list[np.ndarray]] = {"puzzle_identifiers": [], "inputs": [], "predictions": [], "views": []}
    if log_probs:
        cols["log_probs"] = []
    size = model.cfg.image_size
    for p in range(passes):
        rng = np.random.default_rng([seed, p])
        for k, lo in enumerate(range(0, n, batch)):
            if max_batches is not None and k >= max_batches:
                break
            idx = np.arange(lo, min(lo + batch, n), dtype=np.int64)
            puzzle = pids[np.searchsorted(pi, idx, side="right") - 1]
            b = canvas_batch(split, idx, puzzle, size, rng, resolution=True, translation=True)
            t = {key: torch.from_numpy(b[key]).to(device) for key in ("canvas", "mask", "task_ids")}
            logits = model(t["canvas"], t["task_ids"], t["mask"]).logits  # (B, S, S, C)
            pred = logits.argmax(-1).cpu().numpy()  # (B, S, S)
            if log_probs:
                lp = torch.log_softmax(logits.float(), -1).cpu().numpy()
                cols["log_probs"].append(np.stack([canvas_table(lp[i], *map(int, b["views"][i]))
                                                   for i in range(len(idx))]).astype(np.float16))
            rows = np.stack([canvas_row(pred[i], View(*map(int, b["views"][i])), int(dihedral[puzzle[i]]))
                             for i in range(len(idx))])
            cols["puzzle_identifiers"].append(puzzle.astype(np.int32))
            cols["inputs"].append(split.examples(idx)[0].astype(np.uint8))
            cols["predictions"].append(rows)
            cols["views"].append(b["views"])
    if not cols["inputs"]:
        raise UserError("the split has no examples to predict")
    out = {k: np.concatenate(v) for k, v in cols.items()}  # pass after pass: the official order
    out["q_halt"] = np.zeros(len(out["inputs"]), dtype=np.float32)
    return out


def evaluate_canvas(c: Any, evaluation: Any, out: Path) -> int:
    """`evaluate` for a canvas model (LoopViT: a train-vit run, an export, hf://, an official `.pt`)
    on an ARC dataset: `predict_views` (c.passes views of every copy, drawn from c.tta_seed), then
    ARC's publish step (predictions.npz, the vote), with the family's figures printed beside pass@K:
    pixel and exact accuracy of the labelled test copies at the run's evaluation scale, corner (1, 1)
    (what train-vit prints as it trains)."""

    env = runtime.setup(c.device)
    try:
        if env.distributed:
            raise UserError("a LoopViT checkpoint is evaluated in one process (torchrun: one task per rank, ttt)")
        loaded = load_model(c.checkpoint, env.device, ema=c.ema, command="evaluate")
        if loaded.kind == "official":  # its task tokens to the dataset's ids in the official order, or one line
            official_tasks.fit_model(loaded.model, c.data_dir, f"checkpoint '{loaded.path}'")
            loaded.config = loaded.model.cfg
        split = open_dataset(c.data_dir, c.split)
        rows = int(split.meta.num_puzzle_identifiers)
        if loaded.config.num_tasks != rows:
            raise UserError(f"checkpoint '{loaded.path}' has {loaded.config.num_tasks} task tokens, the dataset {rows} "
                            "puzzle identifiers: a LoopViT predicts the tasks it was trained on (train-vit "
                            "init_from=... on this dataset first, as ttt does)")
        check_same_puzzles(loaded, c.data_dir)  # as many task tokens as another dataset's puzzles: one line
        model = loaded.model
        G = c.global_batch_size or (256 if env.device.type == "cuda" else 16)
        print(f"evaluate: {loaded.kind} {loaded.family.title} checkpoint {loaded.path} ({loaded.weights} weights), "
              f"{split.num_examples} examples of '{c.split}' x {c.passes} random views each (seed {c.tta_seed}), "
              f"device={env.device}")
        check_passes(loaded.config, int(split.num_examples), c.passes, G, c.poe, env.device)
        figures = canvas_figures(loaded, split, env, G, c.max_batches)
        preds = predict_views(model, split, env.device, G, c.passes, c.tta_seed, read_table(Path(c.data_dir)).dihedral,
                              c.max_batches, log_probs=c.poe)
    finally:
        runtime.teardown()
    preds.pop("views")
    evaluation.publish(preds, c, out)
    print(figures)
    return 0


def canvas_figures(loaded: Any, split: Any, env: Any, batch: int, max_batches: int | None) -> str:
    """The line of LoopViT's figures: pixel and exact accuracy at the scale its run evaluated at
    (`canvas.eval_scale`; 1 for an official file or a run that does not say), or why there are none."""
    canvas = (loaded.run_config or {}).get("canvas") or {}
    scale = int(canvas.get("eval_scale", 1)) if isinstance(canvas, dict) else 1
    try:
        em = canvas_accuracy(loaded.model, split, env, batch, scale, max_batches)
    except UserError as e:
        return f"evaluate: pixel / exact accuracy at scale {scale}: not scored ({e})"
    if em is None:
        return f"evaluate: pixel / exact accuracy at scale {scale}: no labelled test example"
    return (f"evaluate: {loaded.family.title} at scale {scale}, corner (1, 1): pixel accuracy {em['accuracy']:.4f}, "
            f"exact accuracy {em['exact_accuracy']:.4f} over {int(em['count'])} labelled test copies")


def check_passes(m: Any, examples: int, passes: int, batch: int, poe: bool, device: Any) -> None:
    """`passes` views of every example, refused in one line before the first forward when their
    rows cannot be held (each: input, prediction, id, view, q_halt; with poe its canvas table of
    961 x 13 float16, `eval.arc.poe.canvas_table`) or their forwards cannot take less than an hour
    (`runtime.check_loop_time`); a long one is announced."""
    from arc_data.budget import check_fits  # lazy: only when a canvas model is evaluated
    from arc_data.errors import DatasetError  # lazy: only when a canvas model is evaluated

    rows = examples * passes
    per_row = 2 * fmt.SEQ_LEN + 4 + 4 + 24 + (961 * 13 * 2 if poe else 0)
    what = f"evaluate passes={passes:,}: {rows:,} canvas predictions ({examples:,} test copies x {passes:,} views)"
    try:
        check_fits(what, memory=2 * rows * per_row, fix="lower passes" + (" or set poe=false" if poe else ""))
    except DatasetError as e:
        raise UserError(str(e)) from None
    tokens = 1 + (m.image_size // m.patch_size) ** 2
    visits = m.num_blocks * m.num_loops
    runtime.check_loop_time(what, -(-rows // max(batch, 1)) * visits, rows * tokens * visits * runtime.block_flops(
        m.hidden_size), device, "in all", "lower passes")

