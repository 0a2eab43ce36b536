"""Visit alignment across runs: kappa_R over training per (method, R), the fitted exponent gamma in
kappa_R = Theta(R^gamma), and the threshold p >= (1 + gamma) / 4 it implies (DeepLoop, Prop. 3).

Reads the `kappa/*` rows each run logged (`diagnostics.kappa_every`, training/kappa.py) from its
metrics.jsonl. Per run: kappa at the first measurement (init) and the mean over the second half of
training ("trained"), of the paper's statistic, the max over sublayers (`kappa/max`), and of the
mean over sublayers. gamma is the least-squares slope of log kappa against log R through the origin
(kappa_1 = 1 by definition), over the runs' R values.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any


def kappa_series(run_dir: Path, key: str = "kappa/max") -> list[tuple[int, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r[key])) for r in rows if key in r]


def run_alignment(run_dir: Path) -> dict[str, float] | None:
    """init / trained values of kappa/max and kappa/mean and the gradient cosine of one run."""
    out: dict[str, float] = {}
    for key, name in (("kappa/max", "max"), ("kappa/mean", "mean"), ("kappa_cos/mean", "cos")):
        s = kappa_series(run_dir, key)
        if not s:
            continue
        half = s[len(s) // 2:]
        out[f"{name}_init"] = s[0][1]
        out[f"{name}_trained"] = sum(v for _, v in half) / len(half)
    return out or None


def fit_gamma(points: list[tuple[int, float]]) -> float | None:
    """Slope of log kappa vs log R through the origin; None without a point at R > 1."""
    pts = [(math.log(R), math.log(k)) for R, k in points if R > 1 and k > 0]
    if not pts:
        return None
    return sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)


def alignment_table(results: list[dict[str, Any]], root: Path) -> str:
    """Markdown: kappa (max over sublayers) per method x R, init and trained, gamma and p threshold."""
    cells: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    for r in results:
        if r["kind"] != "rounds":
            continue
        a = run_alignment(root / r["kind"] / r["name"])
        if a:
            cells[(r["scheme"], r["num_rounds"])].append(a)
    if not cells:
        return ""
    methods = list(dict.fromkeys(m for m, _ in cells))
    rs = sorted({R for _, R in cells})
    mean = lambda rows, k: sum(x[k] for x in rows) / len(rows)  # noqa: E731
    lines = ["Visit alignment kappa_R (max over physical sublayers; init -> mean over the second half of "
             "training), fitted gamma (kappa = R^gamma) and the implied threshold p >= (1 + gamma) / 4.", "",
             "| method | " + " | ".join(f"R={R}" for R in rs) + " | gamma (init) | gamma (trained) | p >= |",
             "|---|" + "---|" * (len(rs) + 3)]
    for m in methods:
        row, init_pts, trained_pts = [], [], []
        for R in rs:
            rows = cells.get((m, R), [])
            if not rows or "max_init" not in rows[0]:
                row.append("-")
                continue
            ki, kt = mean(rows, "max_init"), mean(rows, "max_trained")
            init_pts.append((R, ki))
            trained_pts.append((R, kt))
            row.append(f"{ki:.2f} -> {kt:.2f}")
        gi, gt = fit_gamma(init_pts), fit_gamma(trained_pts)
        fmt = lambda g: "-" if g is None else f"{g:.2f}"  # noqa: E731
        p = "-" if gt is None else f"{(1 + gt) / 4:.2f}"
        lines.append(f"| {m} | " + " | ".join(row) + f" | {fmt(gi)} | {fmt(gt)} | {p} |")
    return "\n".join(lines)


def plot_alignment(results: list[dict[str, Any]], root: Path, path: Path) -> Path | None:
    """kappa/max over training, one panel per method, one line per R."""
    import matplotlib  # lazy: matplotlib only when the figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only when the figure is drawn

    runs = [r for r in results if r["kind"] == "rounds"]
    methods = list(dict.fromkeys(r["scheme"] for r in runs))
    series = {(r["scheme"], r["num_rounds"], r["seed"]): kappa_series(root / r["kind"] / r["name"]) for r in runs}
    if not any(series.values()):
        return None
    cols = min(len(methods), 3)
    nrows = -(-len(methods) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), dpi=120, sharey=True, squeeze=False)
    for ax in axes.flat[len(methods):]:
        ax.set_visible(False)
    rs = sorted({R for _, R, _ in series})
    for ax, m in zip(axes.flat, methods):
        for i, R in enumerate(rs):
            for (mm, RR, seed), s in series.items():
                if mm == m and RR == R and s:
                    ax.plot(*zip(*s), color=f"C{i}", alpha=0.9, label=f"R={R}" if seed == min(
                        sd for (a, b, sd) in series if a == m and b == R) else None)
            ax.axhline(R, color=f"C{i}", ls=":", lw=0.8)
        ax.set_title(m)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("kappa_R (max over sublayers)")
    axes.flat[len(methods) - 1].legend(fontsize=8)
    fig.suptitle("visit alignment over training (dotted: R, the aligned limit)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
