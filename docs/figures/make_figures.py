"""Figures and summary numbers for docs/results.md from the run folders under runs/.

    PYTHONPATH=. python docs/figures/make_figures.py [runs_root]

Reads runs/psweep/p/*, runs/rounds/rounds/*, runs/hrm_{baseline,deeploop} (metrics.jsonl,
summary.json) and runs/hrm_eval_* ; writes docs/figures/{p_sweep,rounds,hrm_arc}.png and prints
the tables used in the report.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "runs")
FIG = Path(__file__).resolve().parent


def style_train_loss_axis(ax, floor: float, ylim: tuple[float, float]) -> None:
    """The shared look of the 'train loss, every seed' panels."""
    ax.axhline(floor, color="gray", ls="--", lw=1)
    ax.set_ylim(*ylim)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (nats/byte)")
    ax.set_title("train loss, every seed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def save(fig, name: str) -> None:
    fig.tight_layout()
    fig.savefig(FIG / name)
    plt.close(fig)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def curve(run: Path, key: str) -> tuple[list[int], list[float]]:
    pts = [(m["step"], m[key]) for m in metrics(run) if key in m]
    return [s for s, _ in pts], [v for _, v in pts]


def escape_step(run: Path, floor: float, margin: float = 0.1) -> int | None:
    """First logged step whose train loss is `margin` nats below the unigram floor."""
    for s, v in zip(*curve(run, "train/loss")):
        if math.isfinite(v) and v < floor - margin:
            return s
    return None


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def finished_runs(folder: Path, pattern: str) -> list[Path]:
    """Run folders under `folder` matching `pattern` that wrote a summary.json, sorted."""
    return [r for r in sorted(folder.glob(pattern)) if (r / "summary.json").exists()]


def p_sweep(folder: str = "psweep", lr: str = "2e-3", out: str = "p_sweep.png") -> None:
    runs = finished_runs(ROOT / folder / "p", "p*_s*")
    if not runs:
        return
    rows = []
    for r in runs:
        s = summary(r)
        p = float(r.name.split("_")[0][1:])
        seed = int(r.name.split("_s")[1])
        floor = s["unigram_entropy"]
        rows.append(dict(run=r, p=p, seed=seed, val=s["final_val_loss"], trained=bool(s["left_unigram_floor"]),
                         status=s["status"], esc=escape_step(r, floor), floor=floor, wall=s["wall_time_s"]))
    floor = float(np.mean([x["floor"] for x in rows]))
    print(f"p-sweep {folder} (lr {lr})")
    print("| p | seeds that left the floor | val loss per seed (s0, s1, ...) | mean val (all seeds) | "
          "first step with train loss < floor - 0.1 (per seed) |")
    print("|---|---|---|---|---|")
    ps = sorted({x["p"] for x in rows})
    for p in ps:
        xs = sorted([x for x in rows if x["p"] == p], key=lambda x: x["seed"])
        per = ", ".join(f"{x['val']:.3f}" + ("" if x["trained"] else " ✗") for x in xs)
        esc = ", ".join(str(x["esc"]) if x["esc"] is not None else "never" for x in xs)
        print(f"| {p:.2f} | {sum(x['trained'] for x in xs)}/{len(xs)} | {per} | "
              f"{np.mean([x['val'] for x in xs]):.3f} | {esc} |")
    print(f"floor {floor:.4f}; wall per run {np.mean([x['wall'] for x in rows]):.0f} s "
          f"(min {min(x['wall'] for x in rows):.0f}, max {max(x['wall'] for x in rows):.0f})")

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    cmap = plt.get_cmap("viridis")
    for x in rows:
        jit = (x["seed"] - 2) * 0.005
        a.scatter(x["p"] + jit, x["val"], marker="o" if x["trained"] else "x",
                  color="tab:blue" if x["trained"] else "red", s=30 if x["trained"] else 45)
    a.plot(ps, [np.mean([x["val"] for x in rows if x["p"] == p]) for p in ps], color="tab:blue", lw=1,
           label="mean over seeds (all)")
    a.axhline(floor, color="gray", ls="--", lw=1, label=f"unigram floor ({floor:.2f})")
    a.scatter([], [], marker="x", color="red", label="never left the floor")
    a.scatter([], [], marker="o", color="tab:blue", label="left the floor")
    a.set_xlabel("p  (alpha=(2N)^p, beta=(8N)^-p, N=6)")
    a.set_ylabel("final validation loss (nats/byte)")
    nseeds = max(sum(1 for x in rows if x["p"] == p) for p in ps)
    a.set_title(f"p-sweep, looped GPT tiny, R=3, lr {lr}, 200 steps, {nseeds} seeds", fontsize=10)
    a.set_xticks(ps)
    a.grid(alpha=0.3)
    a.legend(fontsize=7)
    for x in rows:
        st, v = curve(x["run"], "train/loss")
        c = cmap((x["p"] - min(ps)) / max(1e-9, max(ps) - min(ps)))
        b.plot(st, v, color=c, lw=1, alpha=0.8, label=f"p={x['p']:.2f}" if x["seed"] == 0 else None)
    style_train_loss_axis(b, floor, (1.5, 4.2))
    save(fig, out)


def rounds() -> None:
    runs = finished_runs(ROOT / "rounds/rounds", "*_R*_s*")
    if not runs:
        return
    rows = []
    for r in runs:
        s = summary(r)
        m, R, seed = r.name.split("_")
        rows.append(dict(run=r, method=m, R=int(R[1:]), seed=int(seed[1:]), val=s["final_val_loss"],
                         trained=bool(s["left_unigram_floor"]), wall=s["wall_time_s"],
                         esc=escape_step(r, s["unigram_entropy"]), floor=s["unigram_entropy"]))
    Rs = sorted({x["R"] for x in rows})
    print("| R | baseline per seed | baseline mean | deeploop per seed | deeploop mean | Δ (deeploop − baseline) | per-seed Δ |")
    print("|---|---|---|---|---|---|---|")
    for R in Rs:
        b = sorted([x for x in rows if x["R"] == R and x["method"] == "baseline"], key=lambda x: x["seed"])
        d = sorted([x for x in rows if x["R"] == R and x["method"] == "deeploop"], key=lambda x: x["seed"])
        bm, dm = np.mean([x["val"] for x in b]), np.mean([x["val"] for x in d])
        pairs = {x["seed"]: x["val"] for x in b}
        per = ", ".join(f"{x['val'] - pairs[x['seed']]:+.3f}" for x in d if x["seed"] in pairs)
        bs = ", ".join(f"{x['val']:.4f}" for x in b)
        ds = ", ".join(f"{x['val']:.4f}" for x in d)
        print(f"| {R} | {bs} | {bm:.4f} | {ds} | {dm:.4f} | {dm - bm:+.4f} | {per} |")
    for m in ("baseline", "deeploop"):
        for R in Rs:
            xs = [x for x in rows if x["R"] == R and x["method"] == m]
            print(f"{m} R={R}: wall {np.mean([x['wall'] for x in xs]):.0f} s, escape steps "
                  f"{[x['esc'] for x in sorted(xs, key=lambda x: x['seed'])]}, left floor {[x['trained'] for x in xs]}")

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    w = 0.38
    for i, m in enumerate(("baseline", "deeploop")):
        means = [np.mean([x["val"] for x in rows if x["R"] == R and x["method"] == m]) for R in Rs]
        xs = np.arange(len(Rs)) + (i - 0.5) * w
        a.bar(xs, means, width=w, color=f"C{i}", alpha=0.7, label=f"{m} (mean)")
        for j, R in enumerate(Rs):
            v = [x["val"] for x in rows if x["R"] == R and x["method"] == m]
            a.scatter([xs[j]] * len(v), v, color="k", s=12, zorder=3)
    a.scatter([], [], color="k", s=12, label="one seed")
    a.axhline(rows[0]["floor"], color="gray", ls="--", lw=1, label="unigram floor")
    a.set_xticks(np.arange(len(Rs)), [f"R={R}" for R in Rs])
    a.set_ylabel("final validation loss (nats/byte)")
    a.set_title("looped GPT tiny: baseline vs DeepLoop, lr 1e-3, 200 steps")
    a.grid(alpha=0.3, axis="y")
    a.legend(fontsize=7)
    styles = {1: ":", 3: "-", 5: "--"}
    for x in rows:
        st, v = curve(x["run"], "train/loss")
        b.plot(st, v, color="C0" if x["method"] == "baseline" else "C1", ls=styles.get(x["R"], "-."), lw=1,
               label=f"{x['method']} R={x['R']}" if x["seed"] == 0 else None)
    style_train_loss_axis(b, rows[0]["floor"], (0.5, 4.5))
    save(fig, "rounds.png")


def hrm() -> None:
    runs = {s: ROOT / f"hrm_{s}" for s in ("baseline", "deeploop") if (ROOT / f"hrm_{s}/metrics.jsonl").exists()}
    if not runs:
        return
    keys = [("train/lm_loss", "LM loss (halted sequences)"), ("train/accuracy", "token accuracy"),
            ("train/exact_accuracy", "exact accuracy")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=110)
    for i, (s, run) in enumerate(runs.items()):
        ms = [m for m in metrics(run) if "train/count" in m and m["train/count"] > 0]
        st = np.array([m["step"] for m in ms])
        for ax, (k, title) in zip(axes, keys):
            v = np.array([m[k] for m in ms])
            ax.plot(st, v, color=f"C{i}", alpha=0.25, lw=0.8)
            if len(v) >= 10:
                ker = np.ones(10) / 10
                ax.plot(st[9:], np.convolve(v, ker, mode="valid"), color=f"C{i}", lw=1.6, label=f"{s} (10-step mean)")
            ax.set_title(title)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        first = [m["train/lm_loss"] for m in ms[:10]]
        last = [m["train/lm_loss"] for m in ms[-10:]]
        acc_last = [m["train/accuracy"] for m in ms[-10:]]
        ex_last = [m["train/exact_accuracy"] for m in ms[-10:]]
        print(f"HRM {s}: lm_loss first10 {np.mean(first):.3f} last10 {np.mean(last):.3f}; token acc last10 "
              f"{np.mean(acc_last):.3f}; exact last10 {np.mean(ex_last):.3f}; max exact {max(m['train/exact_accuracy'] for m in ms):.3f}")
    axes[0].legend(fontsize=7)
    fig.suptitle("HRM tiny (1+1 layers, halt_max_steps 2, batch 8) on a 16+8-task ARC-AGI-1 subset, seed 0", fontsize=9)
    fig.tight_layout()
    fig.savefig(FIG / "hrm_arc.png")
    plt.close(fig)


if __name__ == "__main__":
    p_sweep()
    p_sweep("psweep_lr1e-3", "1e-3", "p_sweep_lr1e-3.png")
    rounds()
    hrm()
