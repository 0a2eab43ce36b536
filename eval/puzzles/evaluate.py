"""`hrm-deeploop evaluate` on a Sudoku, Maze or generic dataset: predict, score, report.

For each test example: copy 0 is the input as stored; with tta=N, copies 1..N are seeded
augmentations of it from the task's group (`eval.puzzles.tta`). Every copy runs `segments` ACT segments from
a fresh carry (`eval.predict.run_segments`: halt_max_steps by default, more with the
halt_max_steps= override); after each segment its argmax prediction is mapped back to the original
frame and scored (`eval.puzzles.scoring`), and the copies of an example vote (count-first, `eval.ranking`).
Nothing per segment is kept beyond the scores, so memory grows with the examples, not the segments.

Batches hold whole examples (all their copies), so each vote happens where its copies were
predicted; under torchrun each rank takes its chunk of every window of examples and rank 0
gathers the per-example results (`eval.predict.predict_sharded`, the loop ARC's predictions use), and writes:

    predictions.npz          the last segment's predictions of every copy, in the frame the model saw
                             (eval.predictions; rows example-major, with `example` and `tta_copy`)
    tta_augmentations.npz    (tta > 0) the transform of every row: example, tta_copy and the task's
                             table fields (eval.puzzles.tta)
    metrics.json, metrics.md, report.html, report/example_<i>.png   (eval.puzzles.report)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from arc_data.grid_key import row_keys
from arc_data.puzzles.registry import TASKS, GridTask
from eval.evaluate_config import EvaluateConfig
from eval.outputs import check_outputs, write_outputs
from eval.predict import predict_sharded, run_segments
from eval.predictions import save_predictions
from eval.puzzles import tta as T
from eval.puzzles.report import FILES, PREDICTIONS_FILE, Shown, write_files
from eval.puzzles.scoring import (
    RowSteps,
    row_scores,
    score_examples,
    solve_mask,
    summarize,
    supervised_mask,
)
from eval.ranking import RULE
from hrm_deeploop import runtime
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.act import ACTReasoner
from hrm_deeploop.models.losses import IGNORE_LABEL

if TYPE_CHECKING:
    from arc_data.dataset import PuzzleSplit
    from hrm_deeploop.loading import LoadedModel


@dataclass
class Plan:
    """What to run: examples, copies, segments, the task and its group."""

    task: GridTask | None  # None: a task that is not a grid task of the registry (generic)
    group: T.Group | None  # None: no test-time augmentation possible (generic)
    copies: int  # 1 + tta
    segments: int
    examples: np.ndarray  # int64 [E]: the split's examples to evaluate
    table: T.Table | None  # [E * copies] rows, example-major (copy 0 the identity); None without TTA
    chunk: int  # examples per forward batch


def make_plan(task: GridTask | None, split: Any, tta: int, tta_seed: int, segments: int, local_batch: int,
              world_size: int, max_batches: int | None) -> Plan:
    seq_len, vocab = int(split.meta.seq_len), int(split.meta.vocab_size)
    group = T.group_of(task, seq_len, vocab) if task is not None else None
    if tta and group is None:
        raise UserError(f"tta={tta}: this task has no invertible augmentation group here; use tta=0")
    copies = 1 + tta
    chunk = max(1, local_batch // copies)
    num = int(split.num_examples)
    if max_batches is not None:
        num = min(num, max_batches * chunk * world_size)
    examples = np.arange(num, dtype=np.int64)
    table = None
    if tta:
        drawn = group.draw(np.random.Generator(np.random.PCG64(tta_seed)), num, tta)
        ident = group.identity(num)
        table = {}
        for k in drawn:  # interleave: row e * copies + 0 is the identity, + 1..tta the draws
            both = np.concatenate([ident[k].reshape(num, 1, *ident[k].shape[1:]),
                                   drawn[k].reshape(num, tta, *drawn[k].shape[1:])], axis=1)
            table[k] = both.reshape(num * copies, *drawn[k].shape[1:])
    return Plan(task, group, copies, segments, examples, table, chunk)


@dataclass
class Chunk:
    examples: np.ndarray  # int64 [k]
    scores: dict[str, np.ndarray]  # eval.puzzles.scoring.score_examples output, [k, ...]
    num_supervised: np.ndarray  # int64 [k]
    num_solve: np.ndarray | None  # int64 [k]
    puzzle_identifiers: np.ndarray  # int32 [k * copies]
    inputs: np.ndarray  # uint8 [k * copies, L]: what the model saw
    predictions: np.ndarray  # uint8 [k * copies, L]: the last segment's argmax, in that frame
    q_halt: np.ndarray  # float32 [k * copies]: the last segment's halting logit


def _puzzle_ids(split: Any, idx: np.ndarray) -> np.ndarray:
    pi = np.asarray(split.puzzle_indices, dtype=np.int64)
    return np.asarray(split.puzzle_identifiers, dtype=np.int32)[np.searchsorted(pi, idx, side="right") - 1]


@torch.no_grad()
def run_chunk(model: ACTReasoner, split: Any, plan: Plan, idx: np.ndarray, device: torch.device,
              batch_rows: int, rows_of_ids: torch.Tensor | None = None) -> Chunk:
    """Predict and score every copy of the examples `idx` (see the module docstring); `rows_of_ids`:
    dataset id -> puzzle-table row of a checkpoint that names its rows (`eval.predict.run_segments`)."""
    C, S = plan.copies, plan.segments
    x, y = split.examples(idx)  # original frame, [k, L]
    x, y = np.asarray(x, np.uint8), np.asarray(y, np.uint8)
    ignore = split.meta.ignore_label_id
    sup = supervised_mask(y, ignore)
    solve = solve_mask(plan.task, x, y, sup)
    rows = (idx[:, None] * C + np.arange(C)[None, :]).reshape(-1)  # rows of the plan's table
    table = T.take(plan.table, rows) if plan.table is not None else None
    x_rows = np.repeat(x, C, axis=0)
    if table is not None:
        x_rows = plan.group.apply(x_rows, table)
    y_rows, sup_rows = np.repeat(y, C, axis=0), np.repeat(sup, C, axis=0)
    solve_rows = np.repeat(solve, C, axis=0) if solve is not None else None
    pids = np.repeat(_puzzle_ids(split, idx), C)
    R, L = x_rows.shape
    r = RowSteps(exact=np.zeros((R, S), bool), token_correct=np.zeros((R, S), np.int32),
                 solve_correct=np.zeros((R, S), np.int32), q_halt=np.zeros((R, S), np.float32),
                 halts=np.zeros((R, S), bool), keys=np.zeros((R, S, 2), np.uint64) if C > 1 else None)
    last = np.empty((R, L), np.uint8)
    for a in range(0, R, batch_rows):
        b = slice(a, min(a + batch_rows, R))
        n = b.stop - a
        t = {"inputs": torch.from_numpy(x_rows[b].astype(np.int32)).to(device),
             "labels": torch.full((n, L), IGNORE_LABEL, dtype=torch.int32, device=device),
             "puzzle_identifiers": torch.from_numpy(pids[b]).to(device)}
        for s, out in enumerate(run_segments(model, t, rows_of_ids, S)):
            pred = out["logits"].argmax(-1).to(torch.uint8).cpu().numpy()  # (n, L), the model's frame
            orig = plan.group.invert(pred, T.take(table, b)) if table is not None else pred
            e, tok, sol = row_scores(orig, y_rows[b], sup_rows[b], solve_rows[b] if solve_rows is not None else None)
            r.exact[b, s], r.token_correct[b, s], r.solve_correct[b, s] = e, tok, sol
            r.q_halt[b, s] = out["q_halt_logits"].float().cpu().numpy()
            r.halts[b, s] = model.q_halts(out).cpu().numpy()
            if r.keys is not None:
                r.keys[b, s] = row_keys(orig)
            if s == S - 1:
                last[b] = pred
    return Chunk(examples=idx, scores=score_examples(r, C), num_supervised=sup.sum(axis=1).astype(np.int64),
                 num_solve=solve.sum(axis=1).astype(np.int64) if solve is not None else None,
                 puzzle_identifiers=pids, inputs=x_rows, predictions=last, q_halt=r.q_halt[:, S - 1].copy())


def _merge(chunks: list[Chunk]) -> Chunk:
    """The chunks, in example order already (`predict_sharded`), as one."""
    def cat(get):
        parts = [get(c) for c in chunks]
        return None if parts[0] is None else np.concatenate(parts)

    return Chunk(examples=cat(lambda c: c.examples), scores={k: cat(lambda c, k=k: c.scores[k]) for k in chunks[0].scores},
                 num_supervised=cat(lambda c: c.num_supervised), num_solve=cat(lambda c: c.num_solve),
                 puzzle_identifiers=cat(lambda c: c.puzzle_identifiers), inputs=cat(lambda c: c.inputs),
                 predictions=cat(lambda c: c.predictions), q_halt=cat(lambda c: c.q_halt))


def predict_and_score(model: ACTReasoner, split: Any, plan: Plan, env: runtime.Env, local_batch: int,
                      show_progress: bool = True, rows_of_ids: torch.Tensor | None = None) -> Chunk | None:
    """Every example of the plan: this rank's chunk of each window of `plan.chunk` examples a rank
    (`eval.predict.predict_sharded`), merged on rank 0 in example order (None elsewhere)."""
    model.eval()
    chunks = predict_sharded(lambda idx: run_chunk(model, split, plan, plan.examples[idx], env.device, local_batch, rows_of_ids),
                             len(plan.examples), plan.chunk * env.world_size, env, label="evaluate",
                             show_progress=show_progress)
    return None if chunks is None else _merge(chunks)


def _shown(split: Any, plan: Plan, res: Chunk, count: int) -> list[Shown]:
    """Up to `count` examples, half solved and half not where there are, for the pictures."""
    if count <= 0 or plan.task is None:
        return []
    voting = plan.copies > 1
    ok = res.scores["vote_exact" if voting else "plain_exact"][:, -1]
    solved, failed = np.flatnonzero(ok), np.flatnonzero(~ok)
    n_ok = min(len(solved), max(count - len(failed), (count + 1) // 2))
    pick = sorted(list(solved[:n_ok]) + list(failed[:count - n_ok]))
    out = []
    for i in pick:
        e = int(res.examples[i])
        x, y = (np.asarray(a[0]) for a in split.examples(np.array([e])))
        copy = int(res.scores["vote_top_copy"][i]) if voting else 0
        row = i * plan.copies + copy
        pred = res.predictions[row:row + 1]
        if plan.table is not None:
            pred = plan.group.invert(pred, T.take(plan.table, np.array([e * plan.copies + copy])))
        pred = pred[0]
        sup = supervised_mask(y[None], split.meta.ignore_label_id)[0]
        solve = solve_mask(plan.task, x[None], y[None], sup[None])[0]
        wrong = sup & (pred != y)
        what = plan.task.solve_short
        caption = f"example {e}: " + ("solved" if ok[i] else f"wrong: {int(wrong.sum())} cells, "
                                      f"{int((wrong & solve).sum())} of {int(solve.sum())} {what}")
        candidate = (f"top-1 vote: copy {copy}, {int(res.scores['vote_top_votes'][i])} of {plan.copies} votes"
                     if voting else "copy 0 (the input as stored, no TTA)")
        out.append(Shown(e, x, y, pred, bool(ok[i]), f"{caption}; pictured: {candidate}", candidate))
    return out


@dataclass
class Scored:
    """What rank 0 holds after predicting: the plan, every example's scores, the timing."""

    split: PuzzleSplit
    plan: Plan
    res: Chunk
    info: dict[str, Any]  # the checkpoint's description for metrics.json
    halt_max_steps_trained: int
    seconds: float


class PuzzleEvaluation:
    """Sudoku's, Maze's and any other task's part of `hrm-deeploop evaluate` (`eval.tasks.TaskEvaluation`)."""

    def __init__(self, task: str):
        self.task = task  # the name, as metrics.json records it
        self.grid = TASKS.get(task)  # its grid task (scoring, augmentation, pictures), None for a generic dataset

    def check(self, c: EvaluateConfig, out: Path) -> None:
        check_outputs(out, FILES, c.overwrite, "evaluation")

    def check_split(self, c: EvaluateConfig, split: PuzzleSplit, out: Path) -> None:
        if c.tta or c.halt_max_steps:  # before the checkpoint is read: what cannot be served
            seq_len = int(split.meta.seq_len)
            if c.tta:
                T.group_for(self.task, seq_len, int(split.meta.vocab_size))  # refuses a task without a group
            T.check_request(c.tta, int(split.num_examples), seq_len, out, segments=c.halt_max_steps or 1)

    def rows_per_forward(self, local_batch: int, split: PuzzleSplit) -> int:
        return min(local_batch, int(split.num_examples))

    def predict(self, loaded: LoadedModel, split: PuzzleSplit, env: runtime.Env, c: EvaluateConfig, global_batch_size: int,
                rows: Any) -> Scored | None:
        """Predict and score every copy of every example, per segment (the module docstring)."""
        t0 = time.perf_counter()
        model = loaded.model
        segments = c.halt_max_steps or model.cfg.halt_max_steps
        local = max(1, global_batch_size // env.world_size)
        plan = make_plan(self.grid, split, c.tta, c.tta_seed, segments, local, env.world_size, c.max_batches)
        res = predict_and_score(model, split, plan, env, local, c.progress, rows)
        if res is None:
            return None
        info = {"checkpoint": str(loaded.path), "checkpoint_kind": loaded.kind, "step": loaded.step,
                "model": loaded.config.name, "weights": loaded.weights}
        return Scored(split, plan, res, info, int(model.cfg.halt_max_steps), time.perf_counter() - t0)

    def publish(self, scored: Scored, c: EvaluateConfig, out: Path) -> None:
        """metrics, pictures, predictions.npz and the TTA table, published together; one line."""
        plan, res, task = scored.plan, scored.res, self.task
        copy = np.tile(np.arange(plan.copies, dtype=np.int32), len(res.examples))
        example = np.repeat(res.examples, plan.copies)
        m = {"task": task, "data_dir": str(c.data_dir), "split": c.split, **scored.info,
             "halt_max_steps_trained": scored.halt_max_steps_trained,
             "tta": {"copies": c.tta, "seed": c.tta_seed, "group": plan.group.description if c.tta else None},
             "cells_to_solve": plan.task.solve_cells if plan.task is not None else None, "units": "percent",
             "ranking": f"{RULE} (copy 0 = the input as stored)"}
        m.update(summarize(res.scores, res.num_supervised, res.num_solve))
        m["stats"] = {"num_rows": int(len(res.q_halt)), "seconds_predict_and_score": round(scored.seconds, 3)}
        tta_table = None
        if plan.table is not None:
            tta_table = {"example": example, "tta_copy": copy, **{k: v[example * plan.copies + copy]
                                                                    for k, v in plan.table.items()}}
        shown = _shown(scored.split, plan, res, c.report_puzzles)  # the pictures read their examples again

        def write(stage: Path) -> None:
            save_predictions(stage / PREDICTIONS_FILE, res.puzzle_identifiers, res.inputs, res.predictions,
                             res.q_halt, extra={"example": example, "tta_copy": copy})
            write_files(stage, m, plan.task, shown, tta_table, c.report)

        write_outputs(out, (PREDICTIONS_FILE, *FILES), c.overwrite, "evaluation", "evaluate", write)
        print(one_line(m, out))


def one_line(m: dict, out: Path) -> str:
    f, q = m["final"], m["q_halt"]["no_tta"]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}%"

    s = (f"evaluate: {m['task']}, {m['num_examples']} examples, {m['segments']} segments: "
         f"exact {pct(f['no_tta']['exact_accuracy'])}, token {pct(f['no_tta']['token_accuracy'])}")
    if "solve_token_accuracy" in f["no_tta"]:
        s += f", to-solve {pct(f['no_tta']['solve_token_accuracy'])}"
    if "tta" in f:
        s += (f"; tta={m['tta']['copies']} vote: exact {pct(f['tta']['exact_accuracy'])}, "
              f"pass@2 {pct(f['tta']['pass@2'])}")
    s += f"; at first Q halt: exact {pct(q['exact_accuracy'])} after {q['mean_segments']:.2f} segments -> {out}"
    return s
