"""The demo's figure, loss_curves.png (matplotlib, through `training.sweep.pyplot`, imported only
when it is drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hrm_deeploop.reports.demo import read_rows

SCHEME_STYLE = {"baseline": {"color": "C0", "ls": "-"}, "deeploop": {"color": "C3", "ls": "--"}}
SEED_SHADES = {"baseline": ("#1f77b4", "#6baed6", "#08306b"), "deeploop": ("#d62728", "#fc9272", "#67000d")}


def _style(scheme: str, i: int) -> dict[str, Any]:
    """The scheme's dash pattern, and the i-th seed's shade of its colour."""
    shades = SEED_SHADES.get(scheme)
    return {**SCHEME_STYLE.get(scheme, {}), **({"color": shades[i % len(shades)]} if shades else {})}


def _line(ax: Any, xs: list, ys: list, **kw: Any) -> None:
    """A line, with a marker on each point when there are few (a single point stays visible)."""
    ax.plot(xs, ys, marker="." if len(xs) < 30 else None, **kw)


def _smooth(ys: list[float], window: int) -> list[float]:
    """Trailing mean over `window` points (the noisy per-batch training metrics)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y - (ys[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_curves(out: Path, results: dict[str, Any]) -> Path:
    """loss_curves.png: one row per part (Sudoku, ARC, looped GPT), loss on the left and accuracy
    (the GPT: validation loss) on the right, each panel with its own step axis; one line per run,
    the schemes in different colours and dash patterns so that neither hides the other."""
    from matplotlib.ticker import FuncFormatter  # lazy: matplotlib only when a figure is drawn

    from hrm_deeploop.training.sweep import pyplot  # lazy: matplotlib only when a figure is drawn

    parts = []
    if results.get("puzzles"):
        name = results["puzzle_task"]
        parts.append((f"HRM on {name}", [(f"{s} s{seed}", s, i, out / f"puzzle_{s}_s{seed}")
                                         for s, r in results["puzzles"].items() for i, seed in enumerate(r["seeds"])], 50,
                      {s: [x["exact_trained_depth"] for x in r["runs"]] for s, r in results["puzzles"].items()}))
    if results.get("hrm"):
        parts.append(("HRM on the ARC subset", [(s, s, 0, out / f"hrm_{s}") for s in results["hrm"]], 10, {}))
    rows = len(parts) + bool(results.get("gpt"))
    plt = pyplot()
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.2 * rows), squeeze=False, dpi=110)
    for (title, runs, window, held_out), (ax_loss, ax_acc) in zip(parts, axes):
        for label, scheme, i, d in runs:
            rows_ = read_rows(d / "metrics.jsonl")
            steps = [r["step"] for r in rows_ if r.get("train/lm_loss") is not None]
            _line(ax_loss, steps, _smooth([r["train/lm_loss"] for r in rows_ if r.get("train/lm_loss") is not None],
                                          window), label=label, lw=1.0, alpha=0.85, **_style(scheme, i))
            acc = [(r["step"], 100 * r["train/exact_accuracy"]) for r in rows_ if r.get("train/exact_accuracy") is not None]
            _line(ax_acc, [s for s, _ in acc], _smooth([a for _, a in acc], window),
                  label=f"{label}, training batches", lw=1.0, alpha=0.85, **_style(scheme, i))
        last = max((r["step"] for *_, d in runs for r in read_rows(d / "metrics.jsonl")), default=0)
        for j, (scheme, xs) in enumerate(held_out.items()):  # side by side at the last step, not on top
            ax_acc.scatter([last * (1 + 0.012 * (2 * j - 1)) + 0.05 * (2 * j - 1)] * len(xs), xs, marker="o" if j else "D",
                           s=30, zorder=3, edgecolors="black", linewidths=0.5,
                           color=SCHEME_STYLE.get(scheme, {}).get("color"), label=f"{scheme}, held-out puzzles (each seed)")
        ax_loss.set_title(f"{title}: training loss (mean of the last {window} steps)")
        ax_loss.set_ylabel("cross-entropy (nats/token)")
        ax_loss.set_yscale("log")
        ax_loss.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax_loss.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
        ax_acc.set_title(f"{title}: exact accuracy (mean of the last {window} steps)")
        ax_acc.set_ylabel("puzzles solved exactly (%)")
        ax_acc.set_ylim(-3, 103)
    if results.get("gpt"):
        ax_train, ax_val = axes[-1]
        for key in results["gpt"]:
            r_, scheme = key.split("_", 1)
            rows_ = read_rows(out / f"gpt_{key}" / "metrics.jsonl")
            style = {**SCHEME_STYLE.get(scheme, {}), "alpha": 0.45 + 0.15 * min(3, int(r_[1:]))}
            tr = [(r["step"], r["train/loss"]) for r in rows_ if r.get("train/loss") is not None]
            _line(ax_train, [s for s, _ in tr], _smooth([v for _, v in tr], 20), label=f"R = {r_[1:]}, {scheme}",
                  lw=1.0, **style)
            va = [(r["step"], r["val/loss"]) for r in rows_ if r.get("val/loss") is not None]
            ax_val.plot([s for s, _ in va], [v for _, v in va], marker="o" if scheme == "baseline" else "s", ms=4,
                        label=f"R = {r_[1:]}, {scheme}", lw=1.0, **style)
        ax_train.set_title("Looped GPT: training loss (mean of the last 20 steps)")
        ax_val.set_title("Looped GPT: validation loss")
        for ax in (ax_train, ax_val):
            ax.set_ylabel("cross-entropy (nats/token)")
    for ax in axes.flat:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(9)
        if ax.lines or ax.collections:
            ax.legend(fontsize=6.5, ncol=2)
    fig.tight_layout()
    path = out / "loss_curves.png"
    fig.savefig(path)
    plt.close(fig)
    return path
