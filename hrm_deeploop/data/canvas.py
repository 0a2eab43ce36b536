"""ARC grids as LoopViT / VARC canvases: a view the data layer computes from the existing dataset
(`arc_data` owns the on-disk format; nothing here writes files). docs/loopvit.md#the-canvas.

A pair (input grid, output grid) becomes three S x S arrays (S = `size`, 64 in the official scripts):

- `canvas`: background 10 everywhere, the input grid (colours 0-9, upscaled by s) at (y0, x0);
- `mask`: 1 on exactly the input's cells (the model's key padding mask is built from it);
- `target`: the output (upscaled by s) at the same (y0, x0), the border colour 11 in the column right
  of it (its rows) and the row below it (its columns plus the corner), 10 (ignored by the loss)
  elsewhere: the model predicts the output's shape through the border.

The view (`View`: scale s and corner (x0, y0)) is drawn as the official loader draws it, from an
explicit numpy Generator: with m = S - 2 and mx the largest side of either grid, s ~ U{1..m // mx}
(resolution augmentation; else `fix_scale`), then x0 ~ U{1..m - s W} when m > s W (else 1), y0
likewise (translation; else 1), W and H the larger width and height of the two grids.
`decode` inverts it for a predicted canvas: crop at the corner, width = the cells of the first row
before the first 11, height likewise down the first column, then a per-block majority (ties to the
lower colour) down to the original scale: the grid the existing vote takes.

The grids come from the dataset's encoded rows (`grids_of`): the colour cells (tokens >= 2) of a
30 x 30 row form one rectangle wherever the builder translated it; its tokens minus 2 are the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from arc_data import format as fmt
from hrm_deeploop.errors import UserError

BACKGROUND = 10  # the input canvas around the grid; also the ignored target cells (the official IGNORE_INDEX)
BORDER = 11  # the output's right column and bottom row (the official PAD_INDEX)
IGNORE = BACKGROUND


@dataclass(frozen=True)
class View:
    """Where one pair lands on the canvas: integer upscale and top-left corner."""

    scale: int
    x0: int
    y0: int


def grid_of(tokens: np.ndarray) -> np.ndarray:
    """The grid (colours 0-9) of one encoded 30 x 30 row (`arc_data.format`): the bounding box of its
    colour cells. An empty row (an unlabelled test output) gives a (0, 0) grid."""
    t = np.asarray(tokens).reshape(fmt.MAX_SIDE, fmt.MAX_SIDE)
    colour = t >= fmt.COLOUR_OFFSET
    if not colour.any():
        return np.zeros((0, 0), dtype=np.uint8)
    rows, cols = np.flatnonzero(colour.any(1)), np.flatnonzero(colour.any(0))
    box = t[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    if not (box >= fmt.COLOUR_OFFSET).all():
        raise ValueError("an encoded row's colour cells do not form one rectangle (not an ARC grid row)")
    return (box - fmt.COLOUR_OFFSET).astype(np.uint8)


def draw_view(in_shape: tuple[int, int], out_shape: tuple[int, int], size: int, rng: np.random.Generator,
              resolution: bool = True, translation: bool = True, fix_scale: int = 1) -> View:
    """A random view of a pair with these grid shapes (module docstring)."""
    m = size - 2
    h, w = max(in_shape[0], out_shape[0]), max(in_shape[1], out_shape[1])
    longest = max(h, w)
    if longest > m:
        raise ValueError(f"a {h} x {w} pair does not fit a {size} x {size} canvas (sides up to {m})")
    s = int(rng.integers(1, m // longest + 1)) if resolution else fix_scale
    if s * longest > m:
        raise ValueError(f"scale {s} puts a {h} x {w} pair outside a {size} x {size} canvas")
    x0 = int(rng.integers(1, m - s * w + 1)) if translation and m > s * w else 1
    y0 = int(rng.integers(1, m - s * h + 1)) if translation and m > s * h else 1
    return View(s, x0, y0)


def place(inp: np.ndarray, out: np.ndarray | None, size: int, view: View
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(canvas, mask, target), each (size, size) uint8, of one pair under `view` (module docstring).
    out None or empty: an unlabelled pair, target all ignored."""
    s, x0, y0 = view.scale, view.x0, view.y0
    canvas = np.full((size, size), BACKGROUND, dtype=np.uint8)
    mask = np.zeros((size, size), dtype=np.uint8)
    target = np.full((size, size), IGNORE, dtype=np.uint8)
    big = np.repeat(np.repeat(inp, s, axis=0), s, axis=1)
    canvas[y0:y0 + big.shape[0], x0:x0 + big.shape[1]] = big
    mask[y0:y0 + big.shape[0], x0:x0 + big.shape[1]] = 1
    if out is not None and out.size:
        big = np.repeat(np.repeat(out, s, axis=0), s, axis=1)
        H, W = big.shape
        target[y0:y0 + H, x0:x0 + W] = big
        target[y0:y0 + H, x0 + W] = BORDER
        target[y0 + H, x0:x0 + W + 1] = BORDER
    return canvas, mask, target


def decode(pred: np.ndarray, view: View) -> np.ndarray:
    """The grid a predicted canvas (S, S) holds under `view`: crop at the corner, the shape from the
    border (cells before the first 11 along the first row and column), then a per-block majority
    (ties to the lower value) down by the scale. Cells predicted 10 or 11 inside the grid stay (a
    grid with them matches no answer)."""
    c = np.asarray(pred)[view.y0:, view.x0:]
    w = int(np.argmax(c[0] == BORDER)) if (c[0] == BORDER).any() else c.shape[1]
    h = int(np.argmax(c[:, 0] == BORDER)) if (c[:, 0] == BORDER).any() else c.shape[0]
    g = c[:h, :w].astype(np.int64)
    s = view.scale
    if s == 1 or g.size == 0:
        return g.astype(np.uint8)
    out = np.empty((-(-h // s), -(-w // s)), dtype=np.uint8)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = np.bincount(g[i * s:(i + 1) * s, j * s:(j + 1) * s].ravel()).argmax()
    return out


def canvas_batch(split: Any, idx: np.ndarray, puzzle_ids: np.ndarray, size: int, rng: np.random.Generator,
                 resolution: bool = True, translation: bool = True, fix_scale: int = 1,
                 keep: slice | None = None) -> dict[str, np.ndarray]:
    """Canvases of examples `idx` of a dataset split (`arc_data.dataset.PuzzleSplit`), each a fresh
    view from `rng`: canvas, mask, target (B, S, S) uint8, task_ids (B,) int64 (the puzzle
    identifiers), views (B, 3) int64 (scale, x0, y0). `keep`: draw every row's view (in order, from
    `rng`) but return only these rows, so that a rank's slice of a global batch gets the views the
    whole batch would give it in one process."""
    idx = np.asarray(idx, dtype=np.int64)
    x, y = split.examples(idx)
    rows = range(len(idx))[keep] if keep is not None else range(len(idx))
    B = len(rows)
    out = {k: np.empty((B, size, size), dtype=np.uint8) for k in ("canvas", "mask", "target")}
    views = np.empty((B, 3), dtype=np.int64)
    for b in range(len(idx)):
        inp, res = grid_of(x[b]), grid_of(y[b])
        try:
            v = draw_view(inp.shape, res.shape, size, rng, resolution, translation, fix_scale)
        except ValueError as e:
            raise UserError(f"example {int(idx[b])} of the dataset: {e} (raise model.image_size: 64 holds 30 x 30 "
                            "grids; at evaluation, or lower canvas.eval_scale)") from None
        if b in rows:
            i = b - rows.start
            out["canvas"][i], out["mask"][i], out["target"][i] = place(inp, res, size, v)
            views[i] = (v.scale, v.x0, v.y0)
    pids = np.asarray(puzzle_ids, dtype=np.int64)
    return out | {"task_ids": pids[keep] if keep is not None else pids, "views": views}


def largest_side(split: Any, chunk: int = 1 << 16) -> int:
    """The longest side of any grid (input or output) of a split's examples, read from the encoded
    rows in chunks (vectorised: a row's height is its rows holding a colour cell): what a canvas of
    side S holds at scale s is S - 2 >= s x this."""
    n, top = int(split.num_examples), 0
    for lo in range(0, n, chunk):
        x, y = split.examples(np.arange(lo, min(lo + chunk, n), dtype=np.int64))
        for rows in (x, y):
            cells = np.asarray(rows).reshape(len(rows), fmt.MAX_SIDE, fmt.MAX_SIDE) >= fmt.COLOUR_OFFSET
            top = max(top, int(cells.any(2).sum(1).max(initial=0)), int(cells.any(1).sum(1).max(initial=0)))
    return top

