"""How far the demo's Sudoku comparison holds: seeds, learning rates and rounding-sized perturbations.

The demo's puzzle part (`hrm-deeploop demo`, preset cpu: 6x6 Sudoku with 20 givens, 1000 training
puzzles x 4, tiny HRM, batch 32) trained once per scheme gave DeepLoop 37.0% exact on one 2-core
machine and 7.0% on another of the same kind (issue 32). This script measures what the demo should
report instead, on the demo's own data and settings:

1. a grid `scaling x optim.lr x seeds` (the `study` subcommand: one process per run, one thread
   each, two at a time), every run then scored by `evaluate tta=8 halt_max_steps=8` as the demo does;
2. perturbations of seed 0 of each scheme at its demo rate: every weight multiplied by
   (1 + 1e-7 N(0, 1)) after the first step (`benchlib.perturbed`, the benchmarks' floor rows; the
   run stops at step 1 with a checkpoint, the checkpoint is perturbed, `resume=true` continues,
   which without the perturbation is bit-identical to an uninterrupted run:
   tests/test_hardening_runs.py), trained to the end and scored; and the first `--thread-steps`
   steps trained with two intra-op threads instead of one, their losses compared bit for bit.

It prints one table (exact accuracy on the 200 held-out puzzles, %) and writes it to
<out>/table.md. Resumable: finished runs and evaluations are kept. Numbers in docs/demo.md.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/study_demo.py --out runs/study/demo
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchlib import perturbed  # noqa: E402

from hrm_deeploop.demo import DemoPreset, puzzle_summary  # noqa: E402


def cli(args: list[str], threads: int = 1, log: Path | None = None) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", *args]
    print("$ hrm-deeploop " + " ".join(args), flush=True)
    with open(log, "a") if log else open(os.devnull, "w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f if log else None, stderr=subprocess.STDOUT if log else None).returncode
    if rc != 0:
        raise SystemExit(f"study_demo: '{' '.join(args[:1])}' failed with exit code {rc}" + (f" (log {log})" if log else ""))


def train_args(p: DemoPreset, data: Path, out: Path, scheme: str, lr: float, seed: int, steps: int) -> list[str]:
    """The demo's `train` step (hrm_deeploop/demo.py), with this output folder, scheme, rate and seed."""
    return ["train", f"model={p.puzzle_model}", f"scaling={scheme}", f"data_dir={data}", f"output_dir={out}",
            f"seed={seed}", "logger=none", "device=cpu", f"train.max_steps={steps}",
            f"train.global_batch_size={p.puzzle_batch}", f"optim.lr={lr}", f"optim.warmup_steps={p.puzzle_warmup}",
            "checkpoint.every=0", "train.progress=false"]


def perturbed_run(p: DemoPreset, data: Path, out: Path, scheme: str, lr: float, steps: int) -> None:
    """Seed 0 with every weight x (1 + 1e-7 N(0, 1)) after step 1, then trained to the end."""
    import torch

    from hrm_deeploop import checkpoint as ckpt

    if (out / "summary.json").exists() and json.loads((out / "summary.json").read_text()).get("steps") == steps:
        return
    args = train_args(p, data, out, scheme, lr, 0, steps)
    if not (out / "perturbed").exists():
        cli([*args, "train.stop_after=1"])
        path = ckpt.latest(out)
        state = ckpt.load(path)
        holder = torch.nn.Module()  # the weights as a module's parameters, in state-dict order
        for i, t in enumerate(state["model"].values()):
            holder.register_parameter(f"w{i}", torch.nn.Parameter(t, requires_grad=False))
        with perturbed(holder, rel=1e-7, seed=0):  # the state's tensors share the parameters' storage
            ckpt.save(path, {k: v for k, v in state.items() if k not in ("format", "code_version")})
        (out / "perturbed").write_text(f"weights x (1 + 1e-7 N(0,1)) in {path.name}\n")
    cli([*args, "resume=true"])


def same_losses(p: DemoPreset, data: Path, out: Path, scheme: str, lr: float, steps: int, first: int) -> str:
    """Seed 0 trained with two intra-op threads for its first `first` steps (kept when already there),
    its per-step training loss compared bit for bit with the one-thread run's."""
    run = out / "perturb" / f"{scheme}_threads2"
    if len(_losses(run)) < first:
        cli([*train_args(p, data, run, scheme, lr, 0, steps), f"train.stop_after={first}", "resume=true"], threads=2)
    two, one = _losses(run), _losses(out / "grid" / f"scaling-{scheme}__optim.lr-{lr:g}" / "s0")
    n = min(len(two), len(one))
    diff = next((i for i in range(n) if two[i] != one[i]), None)
    return f"bit-identical training loss over the first {n} steps" if diff is None else \
        f"training losses differ from step {diff + 1} ({one[diff]!r} vs {two[diff]!r})"


def _losses(run: Path) -> list[float]:
    path = run / "metrics.jsonl"
    return [json.loads(x)["train/loss"] for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def evaluate(p: DemoPreset, data: Path, run: Path) -> dict:
    from hrm_deeploop.checkpoint import latest

    dest = run.parent / (run.name + "_eval")
    if not (dest / "metrics.json").exists():
        cli(["evaluate", f"checkpoint={latest(run)}", f"data_dir={data}", f"output_dir={dest}", "device=cpu",
             f"tta={p.puzzle_tta}", f"halt_max_steps={p.puzzle_eval_segments}", "progress=false", "overwrite=true"])
    return puzzle_summary(json.loads((dest / "metrics.json").read_text()))


def spread(xs: list[float]) -> str:
    return f"{sum(xs) / len(xs):.1f} [{min(xs):.1f}, {max(xs):.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 2e-3])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--thread-steps", type=int, default=200, help="steps of the 2-thread rerun compared")
    ap.add_argument("--skip-perturb", action="store_true")
    a = ap.parse_args()
    p = DemoPreset()
    out = a.out.resolve()
    raw, data = out / "raw", out / "data"
    if not (data / "manifest.json").exists():
        cli(["generate-puzzles", f"task={p.puzzle_task}", f"size={p.puzzle_size}", f"count_train={p.puzzle_train}",
             f"count_test={p.puzzle_test}", f"givens={p.puzzle_givens}", "seed=0", f"output_dir={raw}",
             "progress=false"])
        cli(["build-puzzles", f"task={p.puzzle_task}", f"source={raw}", f"num_aug={p.puzzle_num_aug}", "seed=0",
             f"output_dir={data}", "progress=false"])
    base = {"model": p.puzzle_model, "data_dir": data, "logger": "none", "device": "cpu",
            "train.progress": "false", "checkpoint.every": 0, "train.global_batch_size": p.puzzle_batch,
            "train.max_steps": a.steps, "optim.warmup_steps": p.puzzle_warmup}
    lrs = ",".join(f"{lr:g}" for lr in a.lrs)
    cli(["study", "trainer=train", f"output_dir={out / 'grid'}", "base={" + ",".join(f"{k}:{v}" for k, v in base.items())
         + "}", f"grid={{scaling:[baseline,deeploop],optim.lr:[{lrs}]}}",
         "seeds=[" + ",".join(map(str, a.seeds)) + "]", f"jobs={a.jobs}", "threads=1"])
    rows: list[tuple[str, Path]] = []
    for cell in sorted((out / "grid").glob("scaling-*")):
        rows += [(cell.name, run) for run in sorted(cell.glob("s[0-9]*")) if not run.name.endswith("_eval")]
    schemes = (("baseline", p.puzzle_lr), ("deeploop", p.puzzle_lr_deeploop))
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        if not a.skip_perturb:
            list(pool.map(lambda x: perturbed_run(p, data, out / "perturb" / f"{x[0]}_w1e-7", x[0], x[1], a.steps),
                          schemes))
            rows += [(f"{s} lr {lr:g} seed 0, weights x (1 + 1e-7 N) after step 1", out / "perturb" / f"{s}_w1e-7")
                     for s, lr in schemes]
        scores = list(pool.map(lambda r: evaluate(p, data, r[1]), rows))
    threads = []
    if not a.skip_perturb:
        for scheme, lr in schemes:
            threads.append(f"{scheme} lr {lr:g} seed 0, 2 threads against 1: "
                           + same_losses(p, data, out, scheme, lr, a.steps, a.thread_steps))
    lines = [f"HRM tiny on 6x6 Sudoku (the demo's data), {a.steps} steps of batch {p.puzzle_batch}: exact accuracy on "
             f"the 200 held-out puzzles (%)", "",
             "| run | exact, 4 seg | exact, 8 seg | exact, TTA vote | pass@2, TTA | token, 8 seg |",
             "|---|---|---|---|---|---|"]
    cells: dict[str, list[dict]] = {}
    for (name, run), s in zip(rows, scores):
        label = name if not name.startswith("scaling-") else f"{name} {run.name}"
        cells.setdefault(name, []).append(s)
        lines.append(f"| {label} | {s['exact_trained_depth']:.1f} | {s['exact']:.1f} | {s['tta_exact']:.1f} | "
                     f"{s['tta_pass2']:.1f} | {s['token']:.1f} |")
    lines += ["", "| cell | seeds | exact, 4 seg: mean [min, max] | exact, 8 seg | exact, TTA vote |",
              "|---|---|---|---|---|"]
    for name, ss in cells.items():
        if name.startswith("scaling-") and len(ss) > 1:
            lines.append(f"| {name} | {len(ss)} | {spread([s['exact_trained_depth'] for s in ss])} | "
                         f"{spread([s['exact'] for s in ss])} | {spread([s['tta_exact'] for s in ss])} |")
    lines += ["", *threads]
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
