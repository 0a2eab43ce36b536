"""`hrm-deeploop sweep`: the looped-GPT experiments of DeepLoop section 5.1 and appendix 10.

- `rounds`: {methods} x R x seeds (paper table 1: baseline vs deeploop at R in {1,3,5,7}).
- `p`: scheme=power, alpha=(2N)^p, beta=(8N)^(-p), p in p_values x p_seeds at R = p_rounds
  (paper figure 6: p in {0.30, ..., 0.60} at R=3, up to five seeds).
- `both`: the two.

Every run gets its own folder under `output_dir` (`rounds/<method>_R<r>_s<seed>`,
`p/p<p>_s<seed>`) and is an ordinary train-gpt run. A run whose summary.json says finished or
diverged is skipped, an unfinished one is resumed, so a sweep is resumed by re-running it.
Runs go in-process one after another (`launcher=inprocess`) or as `torchrun` subprocesses
(`launcher=torchrun`, `nproc_per_node` GPUs each, e.g. the paper's 4 x H200 per cell).

A run has 'left the unigram floor' when its loss (validation, else the trailing train loss, as
the paper's surrogate) is `train.floor_margin` nats below the unigram entropy of the training
tokens (computed from the shards by the trainer). Diverged runs and runs still at the floor are
marked failed: 'floor' / 'div' in the tables, red crosses in the plot.

Outputs: table.md, table.csv (every run), rounds.png (loss vs R per method), p_sweep.png.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hrm_deeploop.errors import TrainingDiverged, UserError
from hrm_deeploop.models.scaling import SCHEMES
from hrm_deeploop.training.train_config import TrainGPTConfig
from hrm_deeploop.typed_config import at_least, check, one_of, positive, to_dict, typed

if TYPE_CHECKING:  # an annotation only: training.lm imports torch, which `sweep --help` does without
    from hrm_deeploop.training.lm import Data

KINDS = ("rounds", "p", "both")
TRAIN_KEYS = tuple(f.name for f in fields(TrainGPTConfig))


@dataclass
class SweepConfig(TrainGPTConfig):
    """`hrm-deeploop sweep`: {methods} x R (paper table 1) and/or the p-sweep (paper figure 6).

    Every train-gpt setting (model, scaling, data, train, optim, checkpoint, eval, ...) is a
    setting of the sweep too and applies to every run; the sweep then sets each run's output_dir,
    seed, model.num_rounds and scaling.scheme (and scaling.p for the p-sweep). `scaling.p` is the
    exponent of `methods=[power]` runs; `scaling.eps_lambda` / `scaling.beta_targets` apply to all."""

    output_dir: str | None = "runs/sweep"
    kind: str = "rounds"  # rounds | p | both
    methods: list[str] = field(default_factory=lambda: ["baseline", "deeploop"])  # any scaling schemes
    rounds: list[int] = field(default_factory=lambda: [1, 3, 5, 7])
    seeds: list[int] = field(default_factory=lambda: [0])
    p_values: list[float] = field(default_factory=lambda: [0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60])
    p_rounds: int = 3
    p_seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    launcher: str = "inprocess"  # inprocess | torchrun
    nproc_per_node: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("kind", self.kind, KINDS)
        one_of("launcher", self.launcher, ("inprocess", "torchrun"))
        at_least("nproc_per_node", self.nproc_per_node, 1)
        at_least("p_rounds", self.p_rounds, 1)
        needed = {"rounds": ("rounds", "methods", "seeds"), "p": ("p_values", "p_seeds")}
        for part, keys in needed.items():  # an empty list would make a sweep of no runs, "done" with exit 0
            for key in keys if self.kind in (part, "both") else ():
                check(bool(getattr(self, key)), key, getattr(self, key), f"a non-empty list for kind={self.kind}")
        for r in self.rounds:
            at_least("rounds", r, 1)
        for p in self.p_values:
            positive("p_values", p)
        for m in self.methods:
            one_of("methods", m, SCHEMES)
            check(m != "power" or self.scaling.p is not None, "methods", m,
                  "given with scaling.p=<exponent> when it includes power")
        for key in ("seeds", "p_seeds"):
            for s in getattr(self, key):
                at_least(key, s, 0)


@dataclass(frozen=True)
class RunSpec:
    kind: str  # rounds | p
    name: str  # folder name under <output_dir>/<kind>/
    scheme: str
    num_rounds: int
    seed: int
    p: float | None = None


def plan(opts: SweepConfig) -> list[RunSpec]:
    specs: list[RunSpec] = []
    if opts.kind in ("rounds", "both"):
        for method in opts.methods:
            p = opts.scaling.p if method == "power" else None
            tag = f"power{p:.2f}" if method == "power" else method
            for r in opts.rounds:
                for s in opts.seeds:
                    specs.append(RunSpec("rounds", f"{tag}_R{r}_s{s}", method, r, s, p))
    if opts.kind in ("p", "both"):
        for p in opts.p_values:
            for s in opts.p_seeds:
                specs.append(RunSpec("p", f"p{p:.2f}_s{s}", "power", opts.p_rounds, s, p))
    return specs


def run(cfg: SweepConfig) -> int:
    results = sweep(cfg)
    failed = sum(1 for r in results if r["failed"])
    print(f"sweep: {len(results)} runs ({failed} failed / at the unigram floor); tables and plots in {cfg.output_dir}")
    return 0


def sweep(opts: SweepConfig, data_for: Callable[[RunSpec], Data] | None = None) -> list[dict[str, Any]]:
    """Run (or skip) every planned run, then write the tables and plots. `data_for` replaces the
    shard loaders for in-process runs (tests)."""
    from arc_data.files.guard import check_output_dir  # lazy: `sweep --help` skips it

    root = check_output_dir(opts.output_dir, opts.inputs())
    results = []
    for spec in plan(opts):
        run_dir = root / spec.kind / spec.name
        summary = read_summary(run_dir)
        if not run_done(summary, opts.train.stop_after):
            print(f"sweep: {spec.kind}/{spec.name}", flush=True)
            _launch(opts, spec, run_dir, data_for)
            summary = read_summary(run_dir)
        else:
            print(f"sweep: {spec.kind}/{spec.name} done, skipped", flush=True)
            if summary.get("status") == "finished" and summary.get("steps") != opts.train.max_steps:
                print(f"sweep: warning: {spec.name} finished {summary.get('steps')} steps, not "
                      f"train.max_steps={opts.train.max_steps}; use a new output_dir for a new budget", flush=True)
        results.append(_row(spec, summary))
    write_reports(results, root)
    return results


def run_done(summary: dict[str, Any] | None, stop_after: int | None) -> bool:
    """Finished, diverged, or stopped at the run's train.stop_after: nothing left to run (also `study`'s rule)."""
    if summary is None:
        return False
    status = summary.get("status")
    if status == "stopped":
        return stop_after is not None and summary.get("steps", 0) >= stop_after
    return status in ("finished", "diverged")


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "summary.json"
    try:  # one a crash or a hand left unreadable is no summary: the run is resumed, which writes it again
        summary = json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def run_config(opts: SweepConfig, spec: RunSpec, run_dir: Path) -> TrainGPTConfig:
    """One run's train-gpt config: the sweep's settings with this run's folder, seed, R and scheme."""
    values = {k: v for k, v in to_dict(opts).items() if k in TRAIN_KEYS}
    values.update(output_dir=str(run_dir), seed=spec.seed, resume=True,
                  run_name=f"{Path(opts.output_dir).name}/{spec.name}")
    values["model"]["num_rounds"] = spec.num_rounds
    values["scaling"].update(scheme=spec.scheme, p=spec.p)
    return typed(values, TrainGPTConfig)


def _launch(opts: SweepConfig, spec: RunSpec, run_dir: Path, data_for: Callable[[RunSpec], Data] | None) -> None:
    from hrm_deeploop.training import lm as train_gpt  # lazy: keeps torch off `sweep --help`

    cfg = run_config(opts, spec, run_dir)
    if opts.launcher == "inprocess":
        try:
            train_gpt.train(cfg, data=data_for(spec) if data_for else None)
        except TrainingDiverged as err:  # recorded in summary.json as diverged
            print(f"sweep: {spec.name} diverged: {err}", flush=True)
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={opts.nproc_per_node}", "-m", "hrm_deeploop.cli", "train-gpt",
               *overrides("", to_dict(cfg))]
        done = subprocess.run(cmd)
        if done.returncode != 0 and read_summary(run_dir) is None:
            raise UserError(f"sweep run {spec.name} failed (exit {done.returncode}); see its output above")


def overrides(prefix: str, values: dict[str, Any]) -> list[str]:
    """Flatten a config dict into Hydra `key=value` overrides."""
    out = []
    for k, v in values.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out += overrides(key, v)
        else:
            out.append(f"{key}={hydra_value(v)}")
    return out


def hydra_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, str):
        return "'" + v.replace("'", "\\'") + "'"
    return repr(v)


def _row(spec: RunSpec, s: dict[str, Any] | None) -> dict[str, Any]:
    s = s or {"status": "missing"}
    val, tr = s.get("final_val_loss"), s.get("final_train_loss")
    loss = val if val is not None else tr
    failed = s.get("status") not in ("finished", "stopped") or s.get("left_unigram_floor") is False
    return {"kind": spec.kind, "name": spec.name, "scheme": spec.scheme, "num_rounds": spec.num_rounds,
            "p": spec.p, "seed": spec.seed, "status": s.get("status"), "steps": s.get("steps"),
            "val_loss": val, "train_loss": tr, "loss": loss, "loss_source": "val" if val is not None else "train",
            "unigram_entropy": s.get("unigram_entropy"), "left_unigram_floor": s.get("left_unigram_floor"),
            "failed": failed, "wall_time_s": s.get("wall_time_s")}


# ---- reports -----------------------------------------------------------------------------------


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def _cell(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "-"
    good = [r["loss"] for r in rows if not r["failed"]]
    shown = _mean(good) if good else _mean([r["loss"] for r in rows])  # failed only: their own mean loss
    text = f"{shown:.4f}" if shown is not None else ""
    bad = [("div" if r["status"] == "diverged" else "floor") for r in rows if r["failed"]]
    if bad:
        text += (" " if text else "") + f"({len(bad)}/{len(rows)} {'/'.join(sorted(set(bad)))})"
    return text


def rounds_table(results: list[dict[str, Any]]) -> str:
    rows = [r for r in results if r["kind"] == "rounds"]
    if not rows:
        return ""
    rs = sorted({r["num_rounds"] for r in rows})
    methods = list(dict.fromkeys(r["scheme"] for r in rows))
    by = {(m, R): [r for r in rows if r["scheme"] == m and r["num_rounds"] == R] for m in methods for R in rs}
    lines = ["| Method | " + " | ".join(f"R={R}" for R in rs) + " |", "|---|" + "---|" * len(rs)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(_cell(by[m, R]) for R in rs) + " |")
    if "baseline" in methods:
        for m in methods:
            if m == "baseline":
                continue
            deltas = []
            for R in rs:
                a = _mean([r["loss"] for r in by[m, R] if not r["failed"]])
                b = _mean([r["loss"] for r in by["baseline", R] if not r["failed"]])
                deltas.append(f"{a - b:+.4f}" if a is not None and b is not None else "-")
            lines.append(f"| Δ ({m} − baseline) | " + " | ".join(deltas) + " |")
    src = {r["loss_source"] for r in rows if r["loss"] is not None}
    note = ("final validation loss" if src == {"val"} else "final validation loss (train loss where no val)")
    return "\n".join([f"Loss ({note}); mean over seeds of the runs that trained (of the failed runs when "
                      "none did); (k/n floor|div) = runs at the unigram floor or diverged.", "", *lines])


def p_table(results: list[dict[str, Any]]) -> str:
    rows = [r for r in results if r["kind"] == "p"]
    if not rows:
        return ""
    lines = ["| p | R | seeds trained | mean loss (trained) | per seed |", "|---|---|---|---|---|"]
    for p in sorted({r["p"] for r in rows}):
        ps = [r for r in rows if r["p"] == p]
        trained = [r for r in ps if not r["failed"]]
        mean = _mean([r["loss"] for r in trained])
        per = ", ".join(f"s{r['seed']}: " + (f"{r['loss']:.4f}" if r["loss"] is not None and math.isfinite(r["loss"])
                                            else "nan") + (" ✗" if r["failed"] else "") for r in ps)
        lines.append(f"| {p:.2f} | {ps[0]['num_rounds']} | {len(trained)}/{len(ps)} | "
                     f"{'-' if mean is None else f'{mean:.4f}'} | {per} |")
    floor = _mean([r["unigram_entropy"] for r in rows])
    head = "p-sweep (scheme=power, alpha=(2N)^p, beta=(8N)^(-p)); ✗ = diverged or never left the unigram floor"
    if floor is not None:
        head += f" (unigram entropy of the training tokens: {floor:.3f} nats)"
    return "\n".join([head, "", *lines])


def write_reports(results: list[dict[str, Any]], root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    from hrm_deeploop.training.alignment_report import (  # lazy: `sweep --help` skips it
        alignment_table,
        plot_alignment,
    )

    parts = [t for t in (rounds_table(results), p_table(results), alignment_table(results, root)) if t]
    out["table.md"] = root / "table.md"
    out["table.md"].write_text("# Sweep results\n\n" + "\n\n".join(parts) + "\n")
    out["table.csv"] = root / "table.csv"
    keys = list(results[0]) if results else []
    with open(out["table.csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(results)
    if any(r["kind"] == "rounds" for r in results):
        out["rounds.png"] = plot_rounds(results, root / "rounds.png")
    if any(r["kind"] == "p" for r in results):
        out["p_sweep.png"] = plot_p(results, root / "p_sweep.png")
    kappa_png = plot_alignment(results, root, root / "kappa.png")
    if kappa_png is not None:
        out["kappa.png"] = kappa_png
    return out


def pyplot():
    import matplotlib  # lazy: keeps matplotlib off `sweep --help`

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: keeps matplotlib off `sweep --help`

    return plt


def plot_rounds(results: list[dict[str, Any]], path: Path) -> Path:
    """Loss vs R, one line per method (mean of trained seeds), failed runs as red crosses."""
    plt = pyplot()
    rows = [r for r in results if r["kind"] == "rounds"]
    fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
    for i, m in enumerate(dict.fromkeys(r["scheme"] for r in rows)):
        rs = sorted({r["num_rounds"] for r in rows if r["scheme"] == m})
        means = [_mean([r["loss"] for r in rows if r["scheme"] == m and r["num_rounds"] == R and not r["failed"]])
                 for R in rs]
        pts = [(R, v) for R, v in zip(rs, means) if v is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=m)
    bad = [r for r in rows if r["failed"]]
    if bad:
        ys = [r["loss"] if r["loss"] is not None and math.isfinite(r["loss"]) else r["unigram_entropy"] for r in bad]
        ax.scatter([r["num_rounds"] for r in bad], ys, marker="x", color="red", label="failed")
    floor = _mean([r["unigram_entropy"] for r in rows])
    if floor is not None:
        ax.axhline(floor, color="gray", ls="--", lw=1, label=f"unigram floor ({floor:.2f})")
    ax.set_xlabel("loop rounds R")
    ax.set_ylabel("loss (nats)")
    ax.set_xticks(sorted({r["num_rounds"] for r in rows}))
    ax.set_title("validation loss vs loop count")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_p(results: list[dict[str, Any]], path: Path) -> Path:
    """Paper figure 6: one marker per seed (blue circle trained, red cross failed), the trained-seed
    mean per p joined by a line, the unigram floor dashed. Diverged runs (no finite loss) are
    drawn at the floor."""
    plt = pyplot()
    rows = [r for r in results if r["kind"] == "p"]
    floor = _mean([r["unigram_entropy"] for r in rows])
    fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
    good = [r for r in rows if not r["failed"]]
    bad = [r for r in rows if r["failed"]]
    if good:
        ax.scatter([r["p"] for r in good], [r["loss"] for r in good], marker="o", color="tab:blue",
                   alpha=0.7, label="trained seed")
    if bad:
        ys = [r["loss"] if r["loss"] is not None and math.isfinite(r["loss"]) else floor for r in bad]
        ax.scatter([r["p"] for r in bad], ys, marker="x", color="red", s=50, label="failed seed (floor/diverged)")
    ps = sorted({r["p"] for r in good})
    if ps:
        ax.plot(ps, [_mean([r["loss"] for r in good if r["p"] == p]) for p in ps], color="tab:blue", lw=1.5,
                label="trained-seed mean")
    if floor is not None:
        ax.axhline(floor, color="gray", ls="--", lw=1, label=f"unigram floor ({floor:.2f})")
    ax.set_xlabel("exponent p  (alpha=(2N)^p, beta=(8N)^-p)")
    ax.set_ylabel("loss (nats)")
    R = rows[0]["num_rounds"] if rows else "?"
    ax.set_title(f"p-sweep at R={R}")
    ax.set_xticks(sorted({r["p"] for r in rows}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
