"""The official LoopViT / VARC test-time views of one task, torch-free (`ttt views=official`,
docs/per-task.md#the-official-loopvit-loop; reference spec sections 3.4 and 5).

VARC's `augment_data.py` builds, per evaluation task, 51 task files that the official TTT trains
and predicts on, each file its own task token (its index in the sorted file names):

- `<id>.json`: the task itself (no colour map);
- `<id>_<slug>_augmented.json` for the five geometric augmenters, in their order Rotate(90),
  Rotate(270), Rotate(180), Flip(0) (= flipud), Flip(1) (= fliplr): no transpose, no identity
  with permutations; an identity colour map;
- `<id>_<slug>_perm{k}_augmented.json`, k = 1..9, the geometric view recoloured.

A colour permutation keeps 0 and sends the task's other colours (its demonstrations' inputs and
outputs and its first test input) to shuffled unused colours first, then swaps among themselves;
it is drawn from `numpy.random.RandomState(97 * file_index + aug_index + 1_048_583 * k)`,
file_index the task's position among the sorted task ids (the official evaluation directory),
aug_index the geometric augmenter's. Later test inputs reuse the first one's map (colours only
they hold map to themselves). Built here with the same data structures (a Python set and list,
`RandomState.shuffle` and `.permutation`), so the draws and the maps are the official ones.

The official builder also reads the test output's colours when the task file holds one (a peek
at the answer, spec section 7 bug 7); ttt never has them (challenges only), which is what the
official code does on a file without solutions: its test "output" is then a copy of the input.

Un-augmenting a prediction (`unaugment`) is the official `generate_predictions`': crop at the
view's corner up to the border, undo the geometry, a per-block majority down by the scale (ties
to the lower value), then the inverse of the colour map as a dict ({new: old}, built in the
map's order; a value it does not hold passes unchanged, 10 and 11 included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arc_data import format as fmt

# the official get_basic_augmenters(), in order: (slug, our dihedral id: arc_data.format.dihedral)
GEOMETRIC = (("rotate_90", 1), ("rotate_270", 3), ("rotate_180", 2), ("flip_0", 5), ("flip_1", 4))
PERM_SEED_STEP = 1_048_583
FILE_SEED_STEP = 97
BACKGROUND, BORDER = 10, 11


@dataclass(frozen=True)
class OfficialView:
    """One view file: its name (file stem), geometry, colour map ({old: new} in the official order;
    None for the task's own file) and grids in the view's frame."""

    name: str
    dihedral: int
    colour_map: dict[int, int] | None
    train: list[tuple[np.ndarray, np.ndarray]]
    test: list[np.ndarray]  # the test inputs


def official_colour_map(train: list[tuple[np.ndarray, np.ndarray]], test_input: np.ndarray,
                        rng: np.random.RandomState) -> dict[int, int]:
    """The official `PermuteColors` map of a (geometric) view, drawn from `rng`."""
    colours: list[int] = []
    for i, o in train:
        colours += i.ravel().tolist()
        colours += o.ravel().tolist()
    colours += test_input.ravel().tolist()
    colours += test_input.ravel().tolist()  # its "output": a copy of the input without solutions
    # the same container operations as the official code: a set's iteration order is part of the draw
    used = set(colours)
    used = used - {0}
    remaining = list(set(list(range(1, 10))) - used)
    order = list(used)
    rng.shuffle(remaining)
    permuted = rng.permutation(order).tolist()
    cmap = {0: 0}
    for c in order:
        if c in cmap:
            continue
        if remaining:
            new = remaining.pop()
        else:
            new = int(permuted.pop())
            cmap[new] = c  # a direct swap
            if c in permuted:
                permuted.remove(c)
        cmap[c] = new
    return {int(k): int(v) for k, v in cmap.items()}


def recolour(grid: np.ndarray, cmap: dict[int, int]) -> np.ndarray:
    """map.get(c, c) on every cell."""
    lut = np.arange(max(12, int(grid.max(initial=0)) + 1), dtype=np.int64)
    for k, v in cmap.items():
        lut[k] = v
    return lut[np.asarray(grid, dtype=np.int64)]


def inverse_map(cmap: dict[int, int] | None) -> dict[int, int] | None:
    return None if cmap is None else {v: k for k, v in cmap.items()}


def build_views(tid: str, task: dict, file_index: int, perms: int = 9) -> list[OfficialView]:
    """The task's 1 + 5 x (1 + perms) views in the official token order (sorted file names)."""
    train = [(np.asarray(p["input"], dtype=np.int64), np.asarray(p["output"], dtype=np.int64)) for p in task["train"]]
    tests = [np.asarray(t["input"], dtype=np.int64) for t in task["test"]]
    views = [OfficialView(tid, 0, None, train, tests)]
    for aug_index, (slug, d) in enumerate(GEOMETRIC):
        g_train = [(fmt.dihedral(i, d), fmt.dihedral(o, d)) for i, o in train]
        g_tests = [fmt.dihedral(t, d) for t in tests]
        views.append(OfficialView(f"{tid}_{slug}_augmented", d, {i: i for i in range(10)}, g_train, g_tests))
        seed = file_index * FILE_SEED_STEP + aug_index
        for k in range(perms):
            rng = np.random.RandomState((seed + (k + 1) * PERM_SEED_STEP) & 0xFFFFFFFF)
            cmap = official_colour_map(g_train, g_tests[0], rng)
            views.append(OfficialView(f"{tid}_{slug}_perm{k + 1}_augmented", d, cmap,
                                      [(recolour(i, cmap), recolour(o, cmap)) for i, o in g_train],
                                      [recolour(t, cmap) for t in g_tests]))
    return sorted(views, key=lambda v: v.name + ".json")


def view_json(view: OfficialView) -> dict:
    """The parts of an official view file the TTT reads: train pairs, test inputs, colour map."""
    out = {"train": [{"input": i.tolist(), "output": o.tolist()} for i, o in view.train],
           "test": [t.tolist() for t in view.test]}
    if view.colour_map is not None:
        out["color_map"] = {str(k): v for k, v in view.colour_map.items()}
    return out


def epoch_lr_factor(epoch: int, epochs: int) -> float:
    """The official TTT's learning-rate factor in epoch `epoch` of 0..epochs (epochs + 1 in all):
    `get_cosine_schedule_with_warmup(warmup=min(epochs // 5, 10), total=epochs)` stepped once per
    epoch, so epoch 0 and epoch `epochs` run at 0."""
    warmup = min(epochs // 5, 10)
    if epoch < warmup:
        return epoch / max(1, warmup)
    progress = (epoch - warmup) / max(1, epochs - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def block_majority(grid: np.ndarray, scale: int) -> np.ndarray:
    """Per scale x scale block from the top left (edge blocks partial), the most frequent value,
    ties to the lower one (np.bincount's argmax)."""
    h, w = grid.shape
    if scale == 1 or grid.size == 0:
        return grid
    out = np.empty((-(-h // scale), -(-w // scale)), dtype=np.int64)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = np.bincount(grid[i * scale:(i + 1) * scale, j * scale:(j + 1) * scale].ravel()).argmax()
    return out


def unaugment(pred: np.ndarray, scale: int, x0: int, y0: int, view: OfficialView) -> list[list[int]]:
    """A predicted canvas (S, S) of one of `view`'s test inputs, drawn at (scale, x0, y0) -> the
    grid in the task's frame, as the official code decodes it (module docstring); it may hold 10
    or 11, or be empty."""
    c = np.asarray(pred, dtype=np.int64)[y0:, x0:]
    w = int(np.argmax(c[0] == BORDER)) if (c[0] == BORDER).any() else c.shape[1]
    h = int(np.argmax(c[:, 0] == BORDER)) if (c[:, 0] == BORDER).any() else c.shape[0]
    g = c[:h, :w]
    if g.size == 0:
        return [[] for _ in range(h)] if w == 0 else []
    g = block_majority(fmt.inverse_dihedral(g, view.dihedral), scale)
    inv = inverse_map(view.colour_map)
    return (recolour(g, inv) if inv else g).tolist()

