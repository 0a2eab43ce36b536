"""What LoopViT's exit rules save and cost on a trained checkpoint: compute and accuracy of fixed
depth against each rule (docs/loopvit.md#exit-rules-inference).

The split's canvases at the run's evaluation scale, corner (1, 1) (as train-vit evaluates), in
batches of --batch. For fixed depth and each rule, in two forms:

- per example (`LoopViT.forward_compact`): an exited sample leaves the batch; it costs its own loops;
- per batch (`LoopViT.forward` with the rule: the official freeze-on-exit): every sample of the
  batch keeps being computed until the last one exits (the loop then ends).

Printed per rule: the mean exit loop, the block-stack passes actually run per example (loops x
samples still in the batch), FLOPs (the passes x the per-loop FLOPs of the K blocks, counted by
`torch.utils.flop_counter` on one loop; and the whole forward counted the same way, which adds the
embedding, the readout, and for the entropy rules the per-loop readout they need), pixel accuracy
over the target's valid pixels and exactly right canvases. Rules: gate (the official dynamic exit,
threshold 0.6), plateau (the official evaluation's rule: relative entropy drop < 5% on 2
consecutive loops), threshold (the paper's: mean canvas entropy < tau, one row per --taus).

    python benchmarks/study_loopvit_exit.py --checkpoint RUN --data DATA --split test
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import print_table  # noqa: E402
from hrm_deeploop.data.batches import open_dataset  # noqa: E402
from hrm_deeploop.data.canvas import IGNORE, canvas_batch  # noqa: E402
from hrm_deeploop.loading import load_model  # noqa: E402
from hrm_deeploop.models.loopvit import ExitRule, LoopViT, canvas_entropy  # noqa: E402


def batches(model: LoopViT, split, batch: int, scale: int) -> list[dict[str, torch.Tensor]]:
    """The labelled examples of the split as canvases at `scale`, corner (1, 1)."""
    pi, pids = np.asarray(split.puzzle_indices, np.int64), np.asarray(split.puzzle_identifiers, np.int64)
    idx = np.arange(int(split.num_examples), dtype=np.int64)
    puzzle = np.searchsorted(pi, idx, side="right") - 1
    out = []
    for lo in range(0, len(idx), batch):
        b = canvas_batch(split, idx[lo:lo + batch], pids[puzzle[lo:lo + batch]], model.cfg.image_size,
                         np.random.default_rng(0), resolution=False, translation=False, fix_scale=scale)
        keep = (b["target"] != IGNORE).reshape(len(b["target"]), -1).any(1)
        if keep.any():
            out.append({k: torch.from_numpy(v[keep]) for k, v in b.items() if k != "views"})
    return out


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


@torch.no_grad()
def measure(model: LoopViT, data: list[dict[str, torch.Tensor]], rule: ExitRule | None, compact: bool) -> dict:
    right = valid = exact = count = passes = total_flops = 0
    exits = []
    T = model.cfg.num_loops
    for b in data:
        args = (b["canvas"], b["task_ids"], b["mask"])
        with FlopCounterMode(display=False) as counter:
            if rule is None:
                out = model(*args)
            elif compact:
                out = model.forward_compact(*args, exit_rule=rule)
            else:
                out = model(*args, exit_rule=rule)
        total_flops += int(counter.get_total_flops())
        B = b["canvas"].shape[0]
        steps = out.exit_steps if out.exit_steps is not None else torch.full((B,), T)
        exits.append(steps)
        passes += int(steps.sum()) if compact or rule is None else B * int(steps.max())
        ok = b["target"] != IGNORE
        hit = (out.logits.argmax(-1) == b["target"]) & ok
        right, valid = right + int(hit.sum()), valid + int(ok.sum())
        exact += int((hit.flatten(1).sum(1) == ok.flatten(1).sum(1)).sum())
        count += B
    return {"exit": float(torch.cat(exits).float().mean()), "passes": passes / count, "flops": total_flops / count,
            "accuracy": right / valid, "exact": exact, "count": count}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a train-vit run folder or checkpoint")
    ap.add_argument("--data", required=True, help="the dataset it was trained on (build-arc)")
    ap.add_argument("--split", default="test", choices=("train", "test"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--taus", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    ap.add_argument("--scale", type=int, default=None, help="canvas scale (default: the run's canvas.eval_scale)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load_model(a.checkpoint, "cpu", command="evaluate")
    model: LoopViT = loaded.model
    scale = a.scale or int(((loaded.run_config or {}).get("canvas") or {}).get("eval_scale", 2))
    data = batches(model, open_dataset(a.data, a.split), a.batch, scale)
    b0 = data[0]
    one = b0["canvas"][:1], b0["task_ids"][:1], b0["mask"][:1]
    per_loop = flops(lambda: model(*one, num_loops=2)) - flops(lambda: model(*one, num_loops=1))
    m = model.cfg
    print(f"# {loaded.path} ({m.block}, d {m.hidden_size}, K {m.num_blocks} x T {m.num_loops}), split {a.split}, "
          f"{sum(len(b['canvas']) for b in data)} labelled canvases of {m.image_size}, scale {scale}, batch {a.batch}; "
          f"one loop (K blocks) = {per_loop / 1e6:.2f} MFLOP per example")
    with torch.no_grad():
        per = [model(b["canvas"], b["task_ids"], b["mask"], intermediates=True) for b in data]
        ent = torch.stack([torch.cat([canvas_entropy(o.intermediates[t]) for o in per]) for t in range(m.num_loops)])
        gate = torch.cat([o.gate_probs for o in per]) if per[0].gate_probs is not None else None
    print("# mean canvas entropy after each loop (min over examples): " + ", ".join(
        f"{e.mean():.3f} ({e.min():.3f})" for e in ent))
    acc = []
    for t in range(m.num_loops):  # what stopping every example after loop t would score
        hit = sum(int(((o.intermediates[t].argmax(-1) == b["target"]) & (b["target"] != IGNORE)).sum())
                  for o, b in zip(per, data))
        acc.append(hit / sum(int((b["target"] != IGNORE).sum()) for b in data))
    print("# pixel accuracy after each loop: " + ", ".join(f"{a:.4f}" for a in acc))
    if gate is not None:
        print("# mean exit gate after each loop: " + ", ".join(f"{g:.3f}" for g in gate.mean(0)))
    rules: list[tuple[str, ExitRule | None]] = [("fixed depth", None), ("gate >= 0.6", ExitRule("gate")),
                                                ("plateau (code: 5%, 2 loops)", ExitRule("plateau"))]
    rules += [(f"threshold (paper: tau {t:g})", ExitRule("threshold", tau=t)) for t in a.taus]
    rows = []
    base = None
    for name, rule in rules:
        for form, compact in (("per example", True), ("per batch", False)):
            if rule is None and not compact:
                continue
            r = measure(model, data, rule, compact)
            base = base or r
            rows.append([name, form if rule is not None else "-", f"{r['exit']:.2f}", f"{r['passes']:.2f}",
                         f"{r['passes'] * per_loop / 1e6:.2f}", f"{r['flops'] / 1e6:.2f}",
                         f"{r['passes'] / base['passes']:.2f}", f"{r['accuracy']:.4f}", f"{r['exact']}/{r['count']}"])
    print_table(["rule", "form", "mean exit loop", "block passes / ex", "block MFLOP / ex", "forward MFLOP / ex",
                 "compute vs fixed", "pixel acc", "exact"], rows)


if __name__ == "__main__":
    main()
