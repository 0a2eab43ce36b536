"""LoopViT's test-time prediction and vote side by side with the official code, on the same predicted canvases.

Needs a checkout of the official code, which this project does not ship:

    git clone https://github.com/WenjieShu/LoopViT benchmarks/out/loopvit-reference
    python benchmarks/compare_reference_ttt_vote.py --reference benchmarks/out/loopvit-reference

What it does, at a tiny size on the CPU:
1. one task with `--tests` test inputs (random grids, an output a colour map of the input) and the
   official 51 views (VARC's `augment_data.py` layout: `<id>.json`, the five `rotate_90/180/270`,
   `flip_0/1` views, each with 9 colour permutations that keep colour 0): as the official view files
   (`data/<split>/<view>.json` with their `augmentation.color_map`) and as our dataset (each view
   a dihedral transform and a colour map of `arc_data.originals`' table, written by
   `tests/vote_synthetic.write_split`);
2. `--passes` passes over every view's test inputs, each example drawn on a canvas at a random scale
   and corner (`data.canvas.draw_view`), its predicted canvas the true output in the view's frame
   (`data.canvas.place`'s target) with, by chance, errors: a wrong cell, the border
   moved in by one pixel (a crop that is no multiple of the scale), a shared wrong answer (the view's
   input);
3. the official `utils/eval_utils_ttt.generate_predictions` runs on them (a stand-in model returns the
   prepared canvases, a stand-in loader yields them in its order: pass after pass, view files
   sorted, test inputs in order), and ours: each canvas to a row (`eval.arc.canvas_views.canvas_row`,
   what `evaluate` does for LoopViT), the rows voted by `eval.arc.vote.vote`;
4. compared: the predictions before the vote (per test input, the official list of un-augmented
   grids against ours, row by row, `eval.arc.decode.decode_grid`), and the vote (the official
   `get_majority_vote`: grids and counts in order, against our ranked candidates, and the two
   attempts). Exit 1 when any differs; the rows that differ are counted by cause.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from arc_data import format as fmt  # noqa: E402
from eval.arc.canvas_views import canvas_row  # noqa: E402
from eval.arc.decode import decode_grid  # noqa: E402
from eval.arc.vote import vote  # noqa: E402
from eval.predictions import Predictions  # noqa: E402
from hrm_deeploop.data.canvas import View, draw_view, place  # noqa: E402
from tests.vote_synthetic import write_split  # noqa: E402

TASK = "0a1b2c3d"  # no "_": the official resolver splits a view's name at its first one
# the official geometric views and our dihedral ids (arc_data.format.dihedral: 1 = np.rot90 k=1,
# 2 = k=2, 3 = k=3, 4 = fliplr, 5 = flipud)
GEOMETRY = {"rotate_90": 1, "rotate_180": 2, "rotate_270": 3, "flip_0": 5, "flip_1": 4}


def views(rng: np.random.Generator, perms: int) -> list[tuple[str, int, np.ndarray]]:
    """(file stem, dihedral id, colour map) of the 1 + 5 x (1 + perms) views, in sorted file order."""
    out = [(TASK, 0, np.arange(10, dtype=np.uint8))]
    for slug, tid in GEOMETRY.items():
        out.append((f"{TASK}_{slug}_augmented", tid, np.arange(10, dtype=np.uint8)))
        for k in range(1, perms + 1):
            cmap = np.concatenate([[0], rng.permutation(9) + 1]).astype(np.uint8)
            out.append((f"{TASK}_{slug}_perm{k}_augmented", tid, cmap))
    return sorted(out, key=lambda v: v[0] + ".json")


class Loader:
    """The official eval loader's batches, pass after pass (`generate_predictions` iterates it once
    per attempt); `dataset` answers the calls it makes."""

    def __init__(self, batches: list[list[dict]], root: Path):
        self.batches, self.pass_ = batches, 0
        self.dataset = type("D", (), {"root": root, "enable_translation": lambda s: None,
                                      "disable_translation": lambda s: None,
                                      "enable_resolution_augmentation": lambda s: None,
                                      "disable_resolution_augmentation": lambda s, **k: None})()

    def __iter__(self):
        batches = self.batches[self.pass_]
        self.pass_ += 1
        return iter(batches)

    def __len__(self) -> int:
        return len(self.batches[0])


class Replay(torch.nn.Module):
    """Returns the prepared canvases as one-hot logits (B, 12, S, S), batch after batch."""

    def __init__(self, canvases: list[np.ndarray]):
        super().__init__()
        self.canvases = iter(canvases)

    def forward(self, inputs, task_ids, attention_mask=None, override_max_steps=None):
        c = torch.from_numpy(next(self.canvases)).long()
        return torch.nn.functional.one_hot(c, 12).permute(0, 3, 1, 2).float()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", required=True, help="a checkout of WenjieShu/LoopViT")
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--perms", type=int, default=9)
    ap.add_argument("--tests", type=int, default=2)
    ap.add_argument("--size", type=int, default=32, help="canvas side")
    ap.add_argument("--p-error", type=float, default=0.3, help="chance of each of the three errors")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.reference).resolve()))
    sys.modules.setdefault("wandb", type(sys)("wandb"))
    from utils import eval_utils_ttt as ref

    rng = np.random.default_rng(args.seed)
    pairs = []
    for _ in range(args.tests):
        g = rng.integers(0, 10, size=tuple(rng.integers(2, 6, size=2))).astype(np.uint8)
        pairs.append((g, np.concatenate([[0], rng.permutation(9) + 1]).astype(np.uint8)[g]))
    vs = views(rng, args.perms)
    tmp = Path(tempfile.mkdtemp(prefix="ttt-vote-"))
    split = "eval_views"
    (tmp / "data" / split).mkdir(parents=True)
    for stem, tid, cmap in vs:
        aug = [{"input": fmt.augment_grid(i, tid, cmap).tolist(), "output": fmt.augment_grid(o, tid, cmap).tolist()}
               for i, o in pairs]
        (tmp / "data" / split / f"{stem}.json").write_text(json.dumps(
            {"train": aug, "test": aug, "augmentation": {"color_map": {str(k): int(v) for k, v in enumerate(cmap)}}}))
    (tmp / "raw_data" / "ARC-AGI" / "data" / "evaluation").mkdir(parents=True)
    (tmp / "raw_data" / "ARC-AGI" / "data" / "evaluation" / f"{TASK}.json").write_text(json.dumps(
        {"train": [], "test": [{"input": i.tolist(), "output": o.tolist()} for i, o in pairs]}))
    ours = write_split(tmp / "ours", {TASK: pairs}, {TASK: [(tid, cmap) for stem, tid, cmap in vs if stem != TASK]})
    # our puzzle of each view: the identity first, then the others in the order given (= sorted, less the identity)
    order = [TASK] + [stem for stem, _, _ in vs if stem != TASK]
    pid_of = {stem: int(ours.puzzle_ids[k]) for k, stem in enumerate(order)}
    row_of = {(int(ours.example_puzzle_id[e]), int(ours.example_test[e])): e for e in range(len(ours.inputs))}

    S, batch = args.size, 8
    batches, canvases, rows, row_cause = [], [], [], []
    for _ in range(args.passes):
        examples = [(stem, tid, cmap, j) for stem, tid, cmap in vs for j in range(args.tests)]
        this_pass = []
        for lo in range(0, len(examples), batch):
            chunk = examples[lo:lo + batch]
            pred = np.empty((len(chunk), S, S), dtype=np.int64)
            meta = {"offset": [], "scale_factors": [], "example_indices": [], "task_names": []}
            for b, (stem, tid, cmap, j) in enumerate(chunk):
                i, o = (fmt.augment_grid(g, tid, cmap) for g in pairs[j])
                cause = []
                if rng.random() < args.p_error:
                    o, cause = i, ["wrong answer"]  # a shared wrong answer: the view's input
                v = draw_view(i.shape, o.shape, S, rng)
                _, _, target = place(i, o, S, v)
                if rng.random() < args.p_error:  # a wrong cell
                    target[v.y0 + int(rng.integers(o.shape[0] * v.scale)), v.x0 + int(rng.integers(o.shape[1] * v.scale))] = \
                        int(rng.integers(10))
                    cause.append("cell")
                if rng.random() < args.p_error / 3:  # a background cell inside: no valid grid
                    target[v.y0 + int(rng.integers(o.shape[0] * v.scale)), v.x0 + int(rng.integers(o.shape[1] * v.scale))] = 10
                    cause.append("hole")
                if v.scale > 1 and rng.random() < args.p_error:  # the border one pixel in: no multiple of the scale
                    h, w = o.shape[0] * v.scale, o.shape[1] * v.scale
                    target[v.y0:v.y0 + h, v.x0 + w - 1] = 11
                    cause.append("border")
                pred[b] = target
                meta["offset"].append([v.x0, v.y0])
                meta["scale_factors"].append(v.scale)
                meta["example_indices"].append(j)
                meta["task_names"].append(stem)
                e = row_of[(pid_of[stem], j)]
                rows.append((pid_of[stem], ours.inputs[e], canvas_row(target, View(v.scale, v.x0, v.y0), tid), tid, cmap))
                row_cause.append(cause)
            canvases.append(pred)
            B = len(chunk)
            this_pass.append({"inputs": torch.zeros(B, S, S), "attention_mask": torch.ones(B, S, S),
                              "task_ids": torch.zeros(B, dtype=torch.long), "offset": torch.tensor(meta["offset"]),
                              "scale_factors": torch.tensor(meta["scale_factors"]),
                              "example_indices": torch.tensor(meta["example_indices"]),
                              "task_names": meta["task_names"]})
        batches.append(this_pass)

    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ref.generate_predictions(Replay(canvases), Loader(batches, tmp), torch.device("cpu"), S, split,
                                     attempt_nums=args.passes, task_transform_resolver=ref.get_eval_rot_transform_resolver(),
                                     save_name="ref")
        theirs = json.loads((tmp / "outputs" / "ref" / f"{TASK}_predictions.json").read_text())
    finally:
        os.chdir(cwd)

    preds = Predictions(np.array([r[0] for r in rows], np.int32), np.stack([r[1] for r in rows]),
                        np.stack([r[2] for r in rows]), np.zeros(len(rows), np.float32))
    result = vote(preds, tmp / "ours", keep_grids=10_000)
    # rows of test input j, in order: row k of the stream belongs to test (k mod tests) (views x tests per pass)
    failed = False
    print(f"# {len(vs)} views x {args.tests} test inputs x {args.passes} passes = {len(rows)} predictions; "
          f"canvas {S}, error chance {args.p_error} each (seed {args.seed})")
    print("\ntest  predictions  same grid  differ (by cause)                       vote same  attempts same")
    for j in range(args.tests):
        mine = [k for k in range(len(rows)) if k % args.tests == j]
        ref_list = theirs[str(j)]
        same, differ = 0, {}
        for k, g in zip(mine, ref_list):
            pid, _, tokens, tid, cmap = rows[k]
            ours_g = decode_grid(tokens, tid, cmap).tolist() if (tokens != fmt.PAD).any() else None
            if ours_g == g or (ours_g is None and any(x > 9 for row in g for x in row)):
                same += 1  # the same grid, or no valid grid on both sides
            else:
                c = " + ".join(row_cause[k]) or "none"
                if ours_g is None:
                    c += " (no grid here)"
                differ[c] = differ.get(c, 0) + 1
        ref_vote = [(e["prediction"], e["votes"]) for e in ref.get_majority_vote(ref_list)]
        t = result.tasks[0].tests[j]
        our_vote = [(c.grid.tolist(), c.votes) for c in t.candidates if c.shape != (0, 0)]
        ref_valid = [(g, n) for g, n in ref_vote if all(0 <= x <= 9 for row in g for x in row) and g and g[0]]
        vote_same = our_vote == ref_valid
        attempts_same = [g for g, _ in our_vote[:2]] == [g for g, _ in ref_vote[:2]]
        failed |= not (vote_same and attempts_same and same == len(mine) == len(ref_list))
        print(f"{j:>4}  {len(mine):>11}  {same:>9}  {json.dumps(differ):<38}  {'yes' if vote_same else 'NO':>9}  "
              f"{'yes' if attempts_same else 'NO':>13}")
    print("\n(the vote compared on valid grids: the official one also ranks grids holding 10 or 11, ours has no "
          "such candidate)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
