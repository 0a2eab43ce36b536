"""The same-budget table of docs/results.md section 4.8: HRM, TRM and URM on 6x6 Sudoku.

    PYTHONPATH=. python docs/figures/same_budget.py [root]     # default /work/runs/study3
    PYTHONPATH=. python docs/figures/same_budget.py --speed    # CPU time per step, the three interleaved

Reads <root>/<model>/sudoku6/lr<LR>/baseline_s<seed>/ (metrics.jsonl, summary.json), as the loop
in section 4.8 writes them, and prints one markdown row per (model, lr): parameters, final exact
accuracy on the 200 held-out puzzles per seed and their mean [min, max], the median time per
training step (from the trainer's examples/s: wall time, so the machine's load is in it) and the
wall time per run. `--speed` times one training step of each tiny model at the study's shapes
(batch 32, 36 cells, vocabulary 8, EMA off) in one process, the three taking turns, as the CPU
time of the process (which other processes' load does not inflate): the fairer time per step.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(next((a for a in sys.argv[1:] if not a.startswith("--")), "/work/runs/study3"))


def run_figures(run: Path) -> tuple[float, float, float, int] | None:
    """(final exact %, median ms per step, wall s, params) of a finished run, else None."""
    summary = run / "summary.json"
    if not summary.is_file():
        return None
    s = json.loads(summary.read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    batch = rows[0]["examples"]  # examples seen after step 1 = the global batch
    per_step = [1e3 * batch / r["perf/examples_per_s"] for r in rows if r.get("perf/examples_per_s")]
    return 100 * s["last_eval"]["eval/exact_accuracy"], statistics.median(per_step), s["wall_time_s"], s["params"]


def speed(steps: int = 40, warmup: int = 5) -> None:
    import torch

    from benchmarks.bench_hrm import make_trainer, random_batches
    from benchmarks.benchlib import time_interleaved
    from hrm_deeploop.cli import compose
    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.training.config import ReasonerOptim

    torch.set_num_threads(1)
    device = torch.device("cpu")
    sides = {}
    for model in ("hrm", "trm", "urm"):
        cfg = compose("train", [f"experiment={model}_tiny_cpu", "model.vocab_size=8", "model.seq_len=36",
                                "model.num_puzzle_identifiers=1"]).model
        trainer = make_trainer(cfg, ScalingConfig(), device, 32, False, ReasonerOptim(lr=1e-3, warmup_steps=10))
        batches = random_batches(cfg, 32, 4, device)
        sides[model] = lambda t=trainer, b=batches: t.train_step(tensors=b[t.step % len(b)])
    ms = time_interleaved(sides, device, warmup, steps)
    print(f"| model | ms / step (CPU time, median of {steps}, interleaved) |")
    print("|---|---|")
    for model, t in ms.items():
        print(f"| {model.upper()} | {t:.1f} |")


def main() -> int:
    if "--speed" in sys.argv:
        speed()
        return 0
    print("| model | lr | params | final exact %, per seed | mean [min, max] | ms / step (median) | wall / run |")
    print("|---|---|---|---|---|---|---|")
    for model in ("hrm", "trm", "urm"):
        for lr_dir in sorted((ROOT / model / "sudoku6").glob("lr*")):
            runs = sorted(lr_dir.glob("baseline_s*"), key=lambda p: int(p.name.split("_s")[1]))
            done = [f for f in (run_figures(r) for r in runs) if f is not None]
            if not done:
                continue
            exact = [f[0] for f in done]
            print(f"| {model.upper()} | {lr_dir.name[2:]} | {done[0][3]:,} | {', '.join(f'{e:.1f}' for e in exact)} | "
                  f"**{statistics.mean(exact):.1f}** [{min(exact):.1f}, {max(exact):.1f}] | "
                  f"{statistics.median(f[1] for f in done):.0f} | "
                  f"{min(f[2] for f in done):.0f}-{max(f[2] for f in done):.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
