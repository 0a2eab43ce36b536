"""Depth at test time for trained looped GPTs: validation loss vs R, and adaptive exit as loss vs
mean rounds used (docs/generation.md). Runs are train-gpt folders named <scheme>_<kind>_s<seed>
(kind: fixed or a depth sampler); rows are averaged over seeds.

    python benchmarks/study_depth.py runs/depth/*_s? --data data/val_000000.bin --rounds 1 2 3 4 6 8 12 \
        --exit-rounds 12 --thresholds 1e-1 3e-2 1e-2 3e-3 1e-3
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hrm_deeploop import checkpoint as ckpt  # noqa: E402
from hrm_deeploop.loading import load_model  # noqa: E402
from hrm_deeploop.models.gpt import ExitRule  # noqa: E402
from hrm_deeploop.text.loader import iter_eval_batches  # noqa: E402
from hrm_deeploop.text.loss import evaluate_loss, evaluate_loss_exit  # noqa: E402

CPU, FP32 = torch.device("cpu"), torch.float32


def batches(args, model):
    return iter_eval_batches(args.data, model.cfg.seq_len, args.batch_size, 0, 1, max_batches=args.max_batches,
                             tokenizer_id=args.tokenizer_id, vocab_size=model.cfg.vocab_size)


def group_of(run: Path) -> str:
    return re.sub(r"_s\d+$", "", run.name)


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer-id", default="bytes")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-batches", type=int, default=10)
    p.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12])
    p.add_argument("--exit-rounds", type=int, default=12, help="the most rounds adaptive exit may run")
    p.add_argument("--thresholds", type=float, nargs="+", default=[1e-1, 3e-2, 1e-2, 3e-3, 1e-3])
    p.add_argument("--criteria", nargs="+", default=["kl", "hidden"])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    by_r: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    by_exit: dict[tuple[str, str, float], list[tuple[float, float]]] = defaultdict(list)
    for run in args.runs:
        path = ckpt.resolve(run)
        for r in args.rounds:
            model = load_model(path, CPU, num_rounds=r).model
            by_r[group_of(run)][r].append(evaluate_loss(model, batches(args, model), CPU, FP32))
        model = load_model(path, CPU, num_rounds=args.exit_rounds).model
        for crit in args.criteria:
            for th in args.thresholds:
                loss, rounds = evaluate_loss_exit(model, batches(args, model), CPU, FP32, ExitRule(crit, th))
                by_exit[(group_of(run), crit, th)].append((loss, rounds))
        print(f"# {run}: " + ", ".join(f"R={r} {by_r[group_of(run)][r][-1]:.3f}" for r in args.rounds), flush=True)
    seeds = {g: len(v[args.rounds[0]]) for g, v in by_r.items()}
    print("\n## validation loss (nats/byte) vs R at test time, mean ± sd over seeds\n")
    print("| run (seeds) | " + " | ".join(f"R={r}" for r in args.rounds) + " |")
    print("|---" * (len(args.rounds) + 1) + "|")
    for g in sorted(by_r):
        print(f"| {g} ({seeds[g]}) | " + " | ".join(mean_sd(by_r[g][r]) for r in args.rounds) + " |")
    print(f"\n## adaptive exit (at most {args.exit_rounds} rounds): loss / mean rounds used, mean over seeds\n")
    print("| run | criterion | " + " | ".join(f"< {t:g}" for t in args.thresholds) + " |")
    print("|---" * (len(args.thresholds) + 2) + "|")
    for g in sorted(by_r):
        for crit in args.criteria:
            cells = []
            for th in args.thresholds:
                pts = by_exit[(g, crit, th)]
                cells.append(f"{statistics.mean(x for x, _ in pts):.3f} / {statistics.mean(r for _, r in pts):.2f}")
            print(f"| {g} | {crit} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
