"""Figures and tables for docs/results.md, "A reasoner that learns on a CPU" (issue 16).

    PYTHONPATH=. python docs/figures/study_figures.py [study_root]     # default /work/runs/study

Reads the run folders the study's queue wrote (every command is in docs/results.md):
  <model>/<data>/lr<LR>/<scheme>_s<seed>/       train runs (metrics.jsonl, summary.json)
  <model>/<data>/lr<LR>/<scheme>_s<seed>_eval/  `evaluate tta=8 halt_max_steps=16` (metrics.json)
  clp/<data>/CL<C_L>/<setting>_s<seed>/         the C_L x p sweep, with diagnostics.kappa_every
  gpt/lr<LR>/rounds/<run>/                       the looped-GPT learning-rate check (sweep kind=rounds)
writes docs/figures/study_*.png and prints every table used in the report (markdown).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/runs/study")
FIG = Path(__file__).resolve().parent
SCHEMES = ("baseline", "deeploop")
COLORS = {"baseline": "tab:blue", "deeploop": "tab:red"}
THRESHOLD = 0.80  # "steps to threshold": first evaluation with exact accuracy >= this (no TTA, trained depth)


def rows(run: Path) -> list[dict]:
    p = run / "metrics.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def evals(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["eval/exact_accuracy"]) for r in rows(run) if "eval/exact_accuracy" in r]


def finished(run: Path) -> bool:
    s = run / "summary.json"
    return s.exists() and json.loads(s.read_text()).get("status") == "finished"


def runs_of(model: str, data: str, lr: str) -> dict[str, dict[int, Path]]:
    out: dict[str, dict[int, Path]] = defaultdict(dict)
    base = ROOT / model / data / f"lr{lr}"
    for scheme in SCHEMES:
        for d in sorted(base.glob(f"{scheme}_s*")):
            if d.name.endswith("_eval") or not finished(d):
                continue
            out[scheme][int(d.name.rsplit("_s", 1)[1])] = d
    return out


def lrs_of(model: str, data: str) -> list[str]:
    return sorted((d.name[2:] for d in (ROOT / model / data).glob("lr*")), key=float)


def steps_to(ev: list[tuple[int, float]], thr: float = THRESHOLD) -> int | None:
    return next((s for s, v in ev if v >= thr), None)


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def spread(vals: list[float]) -> str:
    if not vals:
        return "-"
    m = statistics.mean(vals)
    return f"{100 * m:.1f} [{100 * min(vals):.1f}, {100 * max(vals):.1f}]"


def eval_metrics(run: Path) -> dict | None:
    p = Path(str(run) + "_eval") / "metrics.json"
    return json.loads(p.read_text()) if p.exists() else None


# ---- HRM / TRM: baseline vs DeepLoop at one learning rate ---------------------------------------

def cell_table(model: str, data: str, lr: str) -> str:
    cell = runs_of(model, data, lr)
    lines = [f"**{model.upper()}, {data}, lr {lr}** (exact accuracy in %, 200 held-out puzzles; per-seed values "
             f"s0..s4; mean [min, max]; steps to {int(100 * THRESHOLD)}%: first evaluation (every 250 steps) at "
             "or above it, no TTA, trained depth)", "",
             "| scheme | seeds | exact at the end, trained depth (4 seg), per seed | mean [min, max] "
             f"| steps to 50% | steps to {int(100 * THRESHOLD)}% | exact, 16 seg | exact, TTA vote (1+8 copies, 16 seg) |",
             "|---|---|---|---|---|---|---|---|"]
    for scheme in SCHEMES:
        runs = cell.get(scheme, {})
        if not runs:
            continue
        finals = {s: evals(r)[-1][1] for s, r in runs.items() if evals(r)}
        st = [steps_to(evals(r)) for r in runs.values()]
        st50 = [steps_to(evals(r), 0.5) for r in runs.values()]
        deep, tta = [], []
        for r in runs.values():
            m = eval_metrics(r)
            if m:
                deep.append(m["final"]["no_tta"]["exact_accuracy"] / 100)
                tta.append(m["final"]["tta"]["exact_accuracy"] / 100)
        lines.append(f"| {scheme} | {len(runs)} | {', '.join(fmt_pct(finals[s]) for s in sorted(finals))} | "
                     f"{spread(list(finals.values()))} | "
                     f"{', '.join('never' if s is None else str(s) for s in st50)} | "
                     f"{', '.join('never' if s is None else str(s) for s in st)} | {spread(deep)} | {spread(tta)} |")
    return "\n".join(lines)


def plot_cell(model: str, data: str, lr: str | dict[str, str], ax) -> None:
    """Every seed's held-out exact accuracy over training; `lr` one rate, or one per scheme."""
    lrs = lr if isinstance(lr, dict) else {s: lr for s in SCHEMES}
    for scheme in SCHEMES:
        if scheme not in lrs:
            continue
        runs = runs_of(model, data, lrs[scheme]).get(scheme, {})
        for i, r in enumerate(runs.values()):
            ev = evals(r)
            ax.plot([s for s, _ in ev], [100 * v for _, v in ev], color=COLORS[scheme], alpha=0.7, marker=".",
                    label=f"{scheme} (lr {lrs[scheme]})" if i == 0 else None)
    ax.axhline(100 * THRESHOLD, color="gray", ls="--", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out exact accuracy (%), no TTA")
    ax.set_title(f"{model.upper()} {data}, " + (f"lr {lr}" if isinstance(lr, str) else "each at its best lr")
                 + ": every seed", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()


# ---- learning-rate sweep -------------------------------------------------------------------------

def lr_table(model: str, data: str) -> tuple[str, dict[str, str]]:
    """Final exact accuracy per lr and scheme over the seeds present; and each scheme's best lr
    (highest mean over the seeds that every learning rate of the sweep has)."""
    lrs = lrs_of(model, data)
    cells = {lr: runs_of(model, data, lr) for lr in lrs}
    common = [0]  # the sweep itself is one seed; the chosen rate then gets five
    lines = [f"**{model.upper()}, {data}: learning-rate sweep** (final exact accuracy, %, no TTA, trained depth; "
             f"per seed s0, s1, ...; the best rate is chosen on seed {common[0]}, the seed every rate has)", "",
             "| lr | " + " | ".join(f"{s} per seed | {s} seed 0" for s in SCHEMES) + " |",
             "|---|" + "---|---|" * len(SCHEMES)]
    best: dict[str, tuple[float, str]] = {}
    for lr in lrs:
        parts = []
        for scheme in SCHEMES:
            runs = cells[lr].get(scheme, {})
            finals = {s: evals(r)[-1][1] for s, r in sorted(runs.items()) if evals(r)}
            shared = [finals[s] for s in common if s in finals]
            mean = statistics.mean(shared) if shared and len(shared) == len(common) else None
            if mean is not None and (scheme not in best or mean > best[scheme][0]):
                best[scheme] = (mean, lr)
            parts += [", ".join(fmt_pct(v) for v in finals.values()) or "-", fmt_pct(mean)]
        lines.append(f"| {lr} | " + " | ".join(parts) + " |")
    return "\n".join(lines), {s: b[1] for s, b in best.items()}


def plot_lr(model: str, data: str, ax) -> None:
    for k, scheme in enumerate(SCHEMES):
        xs, ys = [], []
        for lr in lrs_of(model, data):
            for r in runs_of(model, data, lr).get(scheme, {}).values():
                if evals(r):
                    xs.append(float(lr) * (1.04 if k else 0.96))
                    ys.append(100 * evals(r)[-1][1])
        ax.scatter(xs, ys, color=COLORS[scheme], label=scheme, alpha=0.8)
    ax.set_xscale("log")
    lrs = lrs_of(model, data)
    ax.set_xticks([float(x) for x in lrs], lrs)
    ax.minorticks_off()
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final exact accuracy (%), no TTA")
    ax.set_title(f"{model.upper()} {data}: lr sweep (one dot per seed)")
    ax.grid(alpha=0.3)
    ax.legend()


# ---- depth at test time ---------------------------------------------------------------------------

def depth_rows(model: str, data: str, lr: str) -> dict[str, list[list[dict]]]:
    out: dict[str, list[list[dict]]] = defaultdict(list)
    for scheme, runs in runs_of(model, data, lr).items():
        for r in runs.values():
            m = eval_metrics(r)
            if m:
                out[scheme].append(m["per_segment"])
    return out


def depth_table(model: str, data: str, lr: str) -> str:
    d = depth_rows(model, data, lr)
    if not d:
        return ""
    segs = [1, 2, 3, 4, 6, 8, 12, 16]
    lines = [f"**{model.upper()}, {data}, lr {lr}: accuracy vs ACT segments at evaluation** (trained with 4; exact "
             "accuracy %, mean over seeds [min, max]; `evaluate halt_max_steps=16 tta=8`)", "",
             "| scheme | protocol | " + " | ".join(f"{s} seg" for s in segs) + " |",
             "|---|---|" + "---|" * len(segs)]
    for scheme, per in d.items():
        for key, name in (("exact_accuracy", "no TTA"), ("tta_exact_accuracy", "TTA vote")):
            cells = [spread([p[s - 1][key] / 100 for p in per if len(p) >= s]) for s in segs]
            lines.append(f"| {scheme} ({len(per)} seeds) | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_depth(model: str, data: str, lr: str, ax) -> None:
    for scheme, per in depth_rows(model, data, lr).items():
        for key, ls in (("exact_accuracy", "-"), ("tta_exact_accuracy", ":")):
            S = min(len(p) for p in per)
            mean = [statistics.mean(p[s][key] for p in per) for s in range(S)]
            ax.plot(range(1, S + 1), mean, color=COLORS[scheme], ls=ls, marker=".",
                    label=f"{scheme}, {'no TTA' if ls == '-' else 'TTA vote'}")
            for p in per:
                ax.plot(range(1, S + 1), [p[s][key] for s in range(S)], color=COLORS[scheme], ls=ls, lw=0.5,
                        alpha=0.3)
    ax.axvline(4, color="gray", ls="--", lw=1)
    ax.set_xlabel("ACT segments at evaluation (trained: 4)")
    ax.set_ylabel("held-out exact accuracy (%)")
    ax.set_title(f"{model.upper()} {data}, lr {lr}: depth at test time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


# ---- C_L x p -----------------------------------------------------------------------------------------

CLP_SETTINGS = ("p0", "p0.25", "p0.5", "pH0.25_pL0.5", "pH0.5_pL0.25")


def clp_runs(data: str, folder: str = "clp") -> dict[tuple[int, str], list[Path]]:
    out: dict[tuple[int, str], list[Path]] = defaultdict(list)
    for d in sorted((ROOT / folder / data).glob("CL*/*_s*")):
        if finished(d):
            out[(int(d.parent.name[2:]), d.name.rsplit("_s", 1)[0])].append(d)
    return out


def kappa_init_trained(run: Path, key: str) -> tuple[float, float] | None:
    s = [(r["step"], r[key]) for r in rows(run) if key in r]
    if not s:
        return None
    half = s[len(s) // 2:]
    return s[0][1], statistics.mean(v for _, v in half)


def clp_tables(data: str, folder: str = "clp", lr: str = "1e-3") -> str:
    from hrm_deeploop.training.alignment_report import fit_gamma

    cells = clp_runs(data, folder)
    if not cells:
        return ""
    cls = sorted({c for c, _ in cells})
    lines = [f"**HRM, {data}, lr {lr}: C_L x p** (final exact / token accuracy %, no TTA, trained depth; seeds s0, s1, ... separated by semicolons)",
             "",
             "| setting | " + " | ".join(f"C_L={c}" for c in cls) + " |", "|---|" + "---|" * len(cls)]
    for st in CLP_SETTINGS:
        out = []
        for c in cls:
            rs = cells.get((c, st), [])
            vals = [[r2 for r2 in rows(r) if "eval/exact_accuracy" in r2][-1] for r in rs if evals(r)]
            out.append("; ".join(f"{100 * v['eval/exact_accuracy']:.1f} / {100 * v['eval/accuracy']:.1f}"
                                 for v in vals) or "-")
        if any(o != "-" for o in out):
            lines.append(f"| {st} | " + " | ".join(out) + " |")
    for key, name in (("kappa/L/max", "L"), ("kappa/H/max", "H")):
        lines += ["", f"kappa/{name}/max (max over the module's sublayers): first measurement (init) -> mean over the "
                  "second half of training; fitted gamma in kappa = C_L^gamma (least squares through the origin, "
                  "`alignment_report.fit_gamma`)", "",
                  "| setting | " + " | ".join(f"C_L={c}" for c in cls) + " | gamma (init) | gamma (trained) |",
                  "|---|" + "---|" * (len(cls) + 2)]
        for st in CLP_SETTINGS:
            out, pi, pt = [], [], []
            for c in cls:
                ks = [kappa_init_trained(r, key) for r in cells.get((c, st), [])]
                ks = [k for k in ks if k]
                if not ks:
                    out.append("-")
                    continue
                ki, kt = statistics.mean(k[0] for k in ks), statistics.mean(k[1] for k in ks)
                pi.append((c, ki))
                pt.append((c, kt))
                out.append(f"{ki:.2f} -> {kt:.2f}")
            gi, gt = fit_gamma(pi), fit_gamma(pt)
            if not pi:
                continue
            lines.append(f"| {st} | " + " | ".join(out) + f" | {'-' if gi is None else f'{gi:.2f}'} | "
                         f"{'-' if gt is None else f'{gt:.2f}'} |")
    return "\n".join(lines)


def plot_clp(data: str, axes, folder: str = "clp", lr: str = "1e-3") -> None:
    cells = clp_runs(data, folder)
    cls = sorted({c for c, _ in cells})
    for st in CLP_SETTINGS:
        xs, acc, kap = [], [], []
        for c in cls:
            rs = cells.get((c, st), [])
            if not rs or not evals(rs[0]):
                continue
            xs.append(c)
            acc.append(100 * statistics.mean(evals(r)[-1][1] for r in rs))
            k = [kappa_init_trained(r, "kappa/L/max") for r in rs]
            kap.append(statistics.mean(x[1] for x in k if x) if any(k) else float("nan"))
        if not xs:
            continue
        color = f"C{CLP_SETTINGS.index(st)}"  # one colour per setting in every panel
        axes[0].plot(xs, acc, marker="o", label=st, color=color)
        axes[1].plot(xs, kap, marker="o", label=st, color=color)
    axes[1].plot(cls, cls, color="gray", ls="--", lw=1, label="kappa = C_L (aligned)")
    for ax, t, y in ((axes[0], "final exact accuracy (%, mean over seeds)", "exact (%)"),
                     (axes[1], "kappa/L/max, trained (mean of 2nd half)", "kappa")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cls, [str(c) for c in cls])
        ax.set_xlabel("C_L (inner L cycles)")
        ax.set_ylabel(y)
        ax.set_title(f"HRM {data}, lr {lr}: {t}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)


# ---- looped GPT: learning-rate check -------------------------------------------------------------

def gpt_runs() -> dict[tuple[int, str, str], list[tuple[int, float, bool]]]:
    """(R, lr, scheme) -> [(seed, final val loss, left the floor)] from the sweeps under gpt/lr<LR>/."""
    out: dict[tuple[int, str, str], list[tuple[int, float, bool]]] = defaultdict(list)
    for lrdir in sorted((ROOT / "gpt").glob("lr*")):
        for r in sorted((lrdir / "rounds").glob("*_R*_s*")):
            s = r / "summary.json"
            if not s.exists():
                continue
            j = json.loads(s.read_text())
            scheme, rest = r.name.split("_R")
            rr, seed = rest.split("_s")
            if j.get("final_val_loss") is not None:
                out[(int(rr), lrdir.name[2:], scheme)].append((int(seed), j["final_val_loss"],
                                                               bool(j.get("left_unigram_floor"))))
    return out


def gpt_table() -> str:
    runs = gpt_runs()
    if not runs:
        return ""
    lines = ["**Looped GPT, 200 steps: final validation loss (nats/byte) per learning rate** "
             "(x = never left the unigram floor, 3.083 - 0.1; seeds s0, s1, s2; mean over all seeds)", "",
             "| R | lr | baseline s0, s1, s2 | baseline mean | DeepLoop s0, s1, s2 | DeepLoop mean | delta |",
             "|---|---|---|---|---|---|---|"]
    best: dict[tuple[int, str], tuple[float, str]] = {}
    for R in sorted({k[0] for k in runs}):
        for lr in sorted({k[1] for k in runs if k[0] == R}, key=float):
            cells, means = [], []
            for scheme in SCHEMES:
                v = sorted(runs.get((R, lr, scheme), []))
                cells.append(", ".join(f"{x:.3f}" + ("" if ok else " x") for _, x, ok in v) or "-")
                m = statistics.mean(x for _, x, _ in v) if v else None
                means.append(m)
                cells.append("-" if m is None else f"{m:.3f}")
                if m is not None and ((R, scheme) not in best or m < best[(R, scheme)][0]):
                    best[(R, scheme)] = (m, lr)
            delta = "-" if None in means else f"{means[1] - means[0]:+.3f}"
            lines.append(f"| {R} | {lr} | " + " | ".join(cells) + f" | {delta} |")
    lines += ["", "best lr (lowest mean) per R and scheme: " + ", ".join(
        f"R={R} {scheme}: {lr} ({m:.3f})" for (R, scheme), (m, lr) in sorted(best.items()))]
    return "\n".join(lines)


def plot_gpt(ax) -> None:
    runs = gpt_runs()
    for (R, lr, scheme), v in sorted(runs.items()):
        xs = [float(lr) * (0.96 if scheme == "baseline" else 1.04)] * len(v)
        ax.scatter(xs, [x for _, x, _ in v], color=COLORS[scheme], marker="o" if R == 1 else "^", alpha=0.8,
                   label=f"{scheme}, R={R}")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    ax.axhline(3.083, color="gray", ls="--", lw=1)
    ax.set_xscale("log")
    lrs = sorted({k[1] for k in runs}, key=float)
    ax.set_xticks([float(x) for x in lrs], lrs)
    ax.minorticks_off()
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final validation loss (nats/byte)")
    ax.set_title("looped GPT, 200 steps: lr check (one marker per seed)")
    ax.grid(alpha=0.3)


def main() -> None:
    out = []
    for model in ("hrm", "trm"):
        data = "sudoku6"
        if not (ROOT / model / data).exists():
            continue
        out.append(cell_table(model, data, "1e-3"))
        t, best = lr_table(model, data)
        out.append(t)
        out.append(f"best lr per scheme: {best}")
        for lr in sorted(set(best.values()) - {"1e-3"}, key=float):
            out.append(cell_table(model, data, lr))
        for lr in sorted(set(best.values()) | {"1e-3"}, key=float):
            out.append(depth_table(model, data, lr))
        two = len(best) == len(SCHEMES) and len(set(best.values())) > 1
        fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
        axes = axes.ravel()
        if not two:
            axes[3].axis("off")
        plot_cell(model, data, "1e-3", axes[0])
        plot_lr(model, data, axes[1])
        plot_depth(model, data, "1e-3", axes[2])
        if two:
            plot_cell(model, data, best, axes[3])
        fig.tight_layout()
        fig.savefig(FIG / f"study_{model}_{data}.png", dpi=100)
        plt.close(fig)
    clp = [(f, lr) for f, lr in (("clp", "1e-3"), ("clp_lr2e-3", "2e-3")) if (ROOT / f).exists()]
    if clp:
        fig, axes = plt.subplots(len(clp), 2, figsize=(11, 4 * len(clp)), squeeze=False)
        for row, (folder, lr) in zip(axes, clp):
            out.append(clp_tables("sudoku6", folder, lr))
            plot_clp("sudoku6", row, folder, lr)
        fig.tight_layout()
        fig.savefig(FIG / "study_clp.png", dpi=100)
        plt.close(fig)
    if (ROOT / "gpt").exists():
        out.append(gpt_table())
        fig, ax = plt.subplots(figsize=(6, 4))
        plot_gpt(ax)
        fig.tight_layout()
        fig.savefig(FIG / "study_gpt_lr.png", dpi=100)
        plt.close(fig)
    print("\n\n".join(x for x in out if x))


if __name__ == "__main__":
    main()
