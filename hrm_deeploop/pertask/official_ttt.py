"""`ttt views=official`: one task's copy of a LoopViT trained and predicted as the official
`test_time_train_ARC.py` does it (reference spec section 5; docs/per-task.md#the-official-loopvit-loop).

- The views: the 51 official view files (`official_views.build_views`), each its own task token: a
  fresh table of 51 rows (trunc-normal std 0.02, from a torch.Generator seeded by `seed`); every
  other weight from the checkpoint; the whole model trained, dropout `official.dropout`.
- Training: every demonstration pair of every view, shuffled each epoch, each drawn on the canvas at
  a fresh random scale and corner (`data.canvas.draw_view`, from a numpy Generator); AdamW (weight
  decay 0), gradient norm clipped to 1, batches of `official.batch`; epochs 0..`official.epochs`
  (101 by default), the learning rate set once per epoch (`official_views.epoch_lr_factor`: warm-up
  and cosine, the first and last epoch at 0); cross-entropy over the output and its border only.
- `official.runs` independent runs, each from the same start (the same fresh table), its own
  optimiser, the random streams continuing.
- The fit (`Fit`, every run, recorded in its log), read from the training forward's own logits (no
  extra forward): per epoch, how many of its training rows were exactly right (argmax on every cell
  the loss sees), and (`official.stop_fit=stable`) how many predicted the same grid as that row
  (view and demonstration) the epoch before. `official.stop_after=E` (0: off, the official fixed
  schedule) ends a run at the end of an epoch once at least `official.stop_share` of the epoch's
  rows (1.0: every row) were exact (or stable) in each of its last E epochs; the per-epoch learning
  rate stays the official schedule's, truncated (docs/per-task.md#early-stop-officialstop_after).
- Reproducible: the numpy stream is `default_rng([seed, 1])`, torch's (dropout) the global generator
  seeded by `torch_seed(seed)` for the task and restored after it (`torch.random.fork_rng`), so the
  same command gives the same votes (the official script seeds its global generator too).
- Prediction: `passes` passes over every test input of every view, each redrawing scale and corner;
  each predicted canvas un-augmented (`official_views.unaugment`); per test input the grids of every
  pass of every view (of each run: `official.pool`) voted count-first, ties to the grid seen first
  (the official stable sort); the top two valid grids are the attempts.
- The product of experts (`poe`): each of the count-first top candidates scored by its
  log-likelihood under every prediction, in that prediction's frame (the candidate recoloured and
  transformed into the view, drawn at the prediction's scale and corner: the canvas target the
  loss would see, output and border), summed over the predictions; candidates rank by that sum,
  ties in count-first order. A pixel of the candidate off the canvas counts log(1/12).

The official code runs in fp16 autocast on CUDA; this loop runs fp32 (as the official one on CPU).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from arc_data import format as fmt
from arc_data.grid_key import grid_key
from hrm_deeploop.checkpoint import resolve
from hrm_deeploop.data.canvas import IGNORE, View, decode, draw_view, place
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.models.loopvit_config import NUM_COLORS
from hrm_deeploop.pertask.official_views import OfficialView, epoch_lr_factor, recolour, unaugment
from hrm_deeploop.pertask.plan import is_grid
from hrm_deeploop.training.vision import read_start, start_weights

UNIFORM = -math.log(NUM_COLORS)  # a candidate pixel off the canvas: the model said nothing about it


def torch_seed(seed: int) -> int:
    """The seed of a task's torch generator (its dropout masks), apart from its numpy stream's."""
    return int(np.random.SeedSequence([seed, 2]).generate_state(1)[0])


def start_model(checkpoint: str, num_views: int, seed: int, dropout: float | None) -> LoopViT:
    """The checkpoint's LoopViT, its residual scaling included (an official file's: baseline), with a
    fresh task table of `num_views` rows (trunc-normal 0.02)."""

    path = str(resolve(checkpoint))
    cfg, start = read_start(path)
    cfg = replace(cfg, num_tasks=num_views, **({} if dropout is None else {"dropout": dropout}))
    model = LoopViT(cfg, start["scaling"])  # a DeepLoop run's alpha and beta (it was built as baseline)
    start_weights(model, start, path)
    with torch.no_grad():
        torch.nn.init.trunc_normal_(model.task_embed.weight, std=0.02, generator=torch.Generator().manual_seed(seed))
    return model


def _canvases(pairs: list[tuple[np.ndarray, np.ndarray | None, int]], size: int, rng: np.random.Generator
              ) -> dict[str, torch.Tensor]:
    cols: dict[str, list] = {"canvas": [], "mask": [], "target": [], "task_ids": [], "views": []}
    for inp, out, vid in pairs:
        shape = out.shape if out is not None else (0, 0)
        try:
            v = draw_view(inp.shape, shape, size, rng)
        except ValueError as e:
            raise UserError(f"views=official: {e} (model.image_size {size})") from None
        c, m, t = place(inp.astype(np.uint8), None if out is None else out.astype(np.uint8), size, v)
        for k, x in zip(("canvas", "mask", "target", "task_ids", "views"), (c, m, t, vid, (v.scale, v.x0, v.y0))):
            cols[k].append(x)
    return {k: torch.from_numpy(np.asarray(v)).long() for k, v in cols.items()}


def train_batches(views: list[OfficialView], size: int, batch: int, rng: np.random.Generator
                  ) -> Callable[[int], Iterator[dict]]:
    """Each epoch: every demonstration of every view, in a fresh order, batch by batch."""
    samples = [(i, o, vid) for vid, v in enumerate(views) for i, o in v.train]

    def epoch(_: int) -> Iterator[dict]:
        order = rng.permutation(len(samples))
        for lo in range(0, len(order), batch):
            b = _canvases([samples[k] for k in order[lo:lo + batch]], size, rng)
            b["sample"] = torch.from_numpy(order[lo:lo + batch]).long()  # which demonstration of which view
            yield b
    return epoch


def eval_batches(views: list[OfficialView], size: int, batch: int, passes: int, rng: np.random.Generator
                 ) -> Iterator[dict]:
    """`passes` passes over every test input of every view (views in order, test inputs in
    order), each drawn anew; every batch also names its rows' view and test input."""
    samples = [(t, vid, j) for vid, v in enumerate(views) for j, t in enumerate(v.test)]
    for _ in range(passes):
        for lo in range(0, len(samples), batch):
            chunk = samples[lo:lo + batch]
            b = _canvases([(t, None, vid) for t, vid, _ in chunk], size, rng)
            b["test_index"] = torch.tensor([j for _, _, j in chunk])
            yield b


def exact_rows(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """How many rows of a batch the logits (B, S, S, C) get exactly right: the argmax equal to the
    target on every cell the loss sees (output and border; IGNORE cells aside). A 0-dim tensor."""
    wrong = (logits.argmax(-1) != target) & (target != IGNORE)
    return (~wrong.flatten(1).any(1)).sum()


class Fit:
    """One run's fit, epoch by epoch (module docstring): `add` each step's exact rows (and, rule
    `stable`, its predicted canvases), `end_epoch` at each epoch's end says whether the run stops
    there (`stop_after` > 0 and at least `share` of the rows exact, or stable, in each of the last
    `stop_after` epochs). The same object serves the lone loop and the lanes."""

    def __init__(self, stop_after: int = 0, share: float = 1.0, rule: str = "exact"):
        self.stop_after, self.share, self.rule = stop_after, share, rule
        self.exact: list[int] = []  # per finished epoch: its training rows predicted exactly
        self.same: list[int] = []  # rule stable: per finished epoch, rows predicting the grid of the epoch before
        self.rows = 0  # training rows an epoch (the last finished epoch's)
        self._exact = self._rows = self._same = 0
        self._before: dict[int, bytes] = {}
        self._now: dict[int, bytes] = {}

    def add(self, exact: int, rows: int, pred: torch.Tensor | None = None, batch: dict | None = None) -> None:
        self._exact += exact
        self._rows += rows
        if self.rule == "stable":  # each row's grid decoded at its own view: the same sample comparable
            for i, (row, canvas) in enumerate(zip(batch["sample"].tolist(), pred.cpu().numpy())):
                g = decode(canvas, View(*map(int, batch["views"][i])))
                self._now[row] = key = g.shape[0].to_bytes(2, "big") + g.tobytes()
                self._same += self._before.get(row) == key

    def end_epoch(self) -> bool:
        self.exact.append(self._exact)
        if self.rule == "stable":
            self.same.append(self._same)
            self._before, self._now = self._now, {}
        self.rows, self._exact, self._rows, self._same = self._rows, 0, 0, 0
        e, held = self.stop_after, self.same if self.rule == "stable" else self.exact
        return e > 0 and len(held) >= e and all(x >= self.share * self.rows for x in held[-e:])

    def log(self, why: str) -> dict:
        """The run log's fields: why it ended (schedule | fit | deadline), rows an epoch, exact (and
        stable) rows per epoch."""
        return {"stop": why, "rows": self.rows, "exact": self.exact, **({"same": self.same} if self.same else {})}


def train_run(model: LoopViT, batches: Callable[[int], Iterable[dict]], epochs: int, lr: float, device: torch.device,
              deadline: float = math.inf, clip: float = 1.0, before_step: Callable[[int], None] | None = None,
              stop_after: int = 0, stop_share: float = 1.0, stop_fit: str = "exact") -> dict:
    """Epochs 0..epochs of the official loop (module docstring). Stops at `deadline`
    (time.monotonic()) after the step that passes it, or (`stop_after`) at the end of an epoch once
    the fit held that many epochs in a row (`Fit`). Returns per step its loss and learning rate,
    and the fit."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses, lrs, why, fit = [], [], "schedule", Fit(stop_after, stop_share, stop_fit)
    for epoch in range(epochs + 1):
        for g in opt.param_groups:
            g["lr"] = lr * epoch_lr_factor(epoch, epochs)
        model.train()
        for b in batches(epoch):
            if before_step is not None:
                before_step(len(losses))
            opt.zero_grad(set_to_none=True)
            logits = model(b["canvas"].to(device), b["task_ids"].to(device), b["mask"].to(device)).logits  # (B,S,S,C)
            target = b["target"].to(device)
            loss = F.cross_entropy(logits.reshape(-1, NUM_COLORS), target.reshape(-1), ignore_index=IGNORE)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            losses.append(loss.item())
            lrs.append(opt.param_groups[0]["lr"])
            fit.add(int(exact_rows(logits.detach(), target)), len(target),
                    logits.detach().argmax(-1) if stop_fit == "stable" else None, b)
            if time.monotonic() > deadline:
                why = "deadline"
                break
        if why == "deadline":
            break
        if fit.end_epoch() and epoch < epochs:
            why = "fit"
            break
    return {"losses": losses, "lrs": lrs, "epochs": epoch + 1, "stopped": why == "deadline", **fit.log(why)}


@torch.no_grad()
def predict(model: LoopViT, batches: Iterable[dict], views: list[OfficialView], device: torch.device,
            keep_log_probs: bool) -> list[dict]:
    """One record per predicted row, in order: test input, view, canvas view (scale, x0, y0), the
    un-augmented grid, and (keep_log_probs) the canvas log-probabilities (S, S, C) float16."""
    model.eval()
    out = []
    for b in batches:
        logits = model(b["canvas"].to(device), b["task_ids"].to(device), b["mask"].to(device)).logits
        pred = logits.argmax(-1).cpu().numpy()
        lp = torch.log_softmax(logits.float(), -1).half().cpu().numpy() if keep_log_probs else None
        for i in range(len(pred)):
            vid, (s, x0, y0) = int(b["task_ids"][i]), map(int, b["views"][i])
            out.append({"test": int(b["test_index"][i]), "view": vid, "at": (s, x0, y0),
                        "grid": unaugment(pred[i], s, x0, y0, views[vid]), "log_probs": None if lp is None else lp[i]})
    return out


def vote(grids: list[list[list[int]]]) -> list[tuple[list[list[int]], int]]:
    """(grid, votes) by votes, ties to the grid seen first: the official majority vote."""
    counts: dict = {}
    first: dict = {}
    for g in grids:
        k = grid_key(np.asarray(g, dtype=np.int64).reshape(len(g), -1)) if g and g[0] else ("empty", len(g))
        counts[k] = counts.get(k, 0) + 1
        first.setdefault(k, g)
    return sorted(((first[k], n) for k, n in counts.items()), key=lambda c: -c[1])


def candidate_log_likelihood(record: dict, grid: list[list[int]], view: OfficialView, size: int) -> float:
    """log p(candidate) under one prediction: the candidate (task frame) recoloured and transformed
    into the view, placed at the prediction's scale and corner as the loss's target (its cells, the
    border column right of it and the row below it, corner included), the log-probabilities of
    those pixels summed; a pixel off the canvas counts `UNIFORM`."""

    g = np.asarray(grid, dtype=np.int64)
    if view.colour_map is not None:
        g = recolour(g, view.colour_map)
    g = fmt.dihedral(g, view.dihedral)
    s, x0, y0 = record["at"]
    H, W = g.shape[0] * s, g.shape[1] * s
    target = np.full((y0 + H + 1, x0 + W + 1), IGNORE, dtype=np.int64)
    target[y0:y0 + H, x0:x0 + W] = np.repeat(np.repeat(g, s, 0), s, 1)
    target[y0:y0 + H, x0 + W] = 11
    target[y0 + H, x0:x0 + W + 1] = 11
    inside = target[:size, :size]
    lp = record["log_probs"][:inside.shape[0], :inside.shape[1]].astype(np.float64)  # (h, w, C)
    valid = inside != IGNORE
    total = float(np.take_along_axis(lp, np.where(valid, inside, 0)[..., None], -1)[..., 0][valid].sum())
    off = int((target != IGNORE).sum() - valid.sum())
    return total + off * UNIFORM


def rank_poe(candidates: list[list[list[int]]], records: list[dict], views: list[OfficialView], size: int
             ) -> list[tuple[list[list[int]], float]]:
    """(grid, summed log-likelihood) best first; ties keep the given (count-first) order."""
    scored = [(g, sum(candidate_log_likelihood(r, g, views[r["view"]], size) for r in records)) for g in candidates]
    return sorted(scored, key=lambda c: -c[1])


def attempts_of(ranked: list[list[list[int]]], test_input: list[list[int]]) -> dict:
    """The two attempts: the first two grids ranked, the test input where there are fewer."""
    a = ranked + [test_input] * max(0, 2 - len(ranked))
    return {"attempt_1": a[0], "attempt_2": a[1]}


def score_task(records: list[dict], views: list[OfficialView], task: dict, size: int, poe: bool,
               max_candidates: int = 10) -> dict:
    """Per test input: the count-first vote and (poe) the product-of-experts ranking of the same
    predictions; the attempts and ranked valid grids of each rule, the vote's counts."""
    out: dict = {"attempts": [], "ranked": [], "votes": []}
    if poe:
        out |= {"attempts_poe": [], "ranked_poe": [], "log_lik": []}
    for j, t in enumerate(task["test"]):
        mine = [r for r in records if r["test"] == j]
        counted = vote([r["grid"] for r in mine])
        valid = [(g, n) for g, n in counted if is_grid(g)]
        ranked = [g for g, _ in valid[:max_candidates]]
        out["attempts"].append(attempts_of(ranked, t["input"]))
        out["ranked"].append(ranked)
        out["votes"].append([n for _, n in valid[:max_candidates]])
        if poe:
            by_ll = rank_poe(ranked, mine, views, size)
            out["ranked_poe"].append([g for g, _ in by_ll])
            out["log_lik"].append([round(v, 4) for _, v in by_ll])
            out["attempts_poe"].append(attempts_of([g for g, _ in by_ll], t["input"]))
    return out


def run_task(model0: LoopViT, views: list[OfficialView], task: dict, *, epochs: int, batch: int, lr: float,
             runs: int, passes: int, pool: bool, poe: bool, seed: int, device: torch.device,
             deadline: float = math.inf, stop_after: int = 0, stop_share: float = 1.0,
             stop_fit: str = "exact") -> dict:
    """`runs` runs of one task from `model0` (each a deep copy), their predictions scored."""
    rng = np.random.default_rng([seed, 1])
    size = model0.cfg.image_size
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(torch_seed(seed))
        return _run_task(model0, views, task, epochs=epochs, batch=batch, lr=lr, runs=runs, passes=passes, pool=pool,
                         poe=poe, device=device, deadline=deadline, rng=rng, size=size,
                         fit=(stop_after, stop_share, stop_fit))


def run_log(losses: list[float], epochs: int, stopped: bool, fit: dict) -> dict:
    """A run's entry in the task's `runs` (result.json): steps, epochs run, whether the deadline
    stopped it, why it ended (schedule | fit | deadline), rows an epoch, exact (and, rule stable,
    stable) rows per epoch, its first and last loss."""
    return {"steps": len(losses), "epochs": epochs, "stopped": stopped, "stop": fit["stop"], "rows": fit["rows"],
            "exact": fit["exact"], **({"same": fit["same"]} if "same" in fit else {}),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def _run_task(model0: LoopViT, views: list[OfficialView], task: dict, *, epochs: int, batch: int, lr: float,
              runs: int, passes: int, pool: bool, poe: bool, device: torch.device, deadline: float,
              rng: np.random.Generator, size: int, fit: tuple[int, float, str]) -> dict:
    records, log, t_train = [], [], 0.0
    for k in range(runs):
        model = copy.deepcopy(model0).to(device)
        t0 = time.monotonic()
        run_deadline = t0 + (deadline - t0) / (runs - k)  # the training time left, shared by the runs left
        r = train_run(model, train_batches(views, size, batch, rng), epochs, lr, device, run_deadline,
                      stop_after=fit[0], stop_share=fit[1], stop_fit=fit[2])
        t_train += time.monotonic() - t0
        preds = predict(model, eval_batches(views, size, batch, passes, rng), views, device, poe)
        if pool or k == 0:
            records += preds
        log.append(run_log(r["losses"], r["epochs"], r["stopped"], r))
        del model
    return {**score_task(records, views, task, size, poe), "runs": log, "train_seconds_inner": t_train}
