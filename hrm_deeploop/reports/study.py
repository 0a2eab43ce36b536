"""A study's report: `study.md` (per cell the spread over seeds; the Mann-Whitney U comparison of
the `compare` axis), `study.csv`, `study.json` and `study.png`. Accuracies (a metric whose name
says accuracy, stored as fractions) are shown in percent in the table and the figure alike; the
csv and json keep the stored values."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import UserError, os_error
from hrm_deeploop.reports.stats import mann_whitney_u, spread

# `cfg` below is the study's StudyConfig (hrm_deeploop/study.py), read for its grid, metrics, base
# and compare key; not imported, even for annotations: the study imports this module


def command_value(v: Any) -> str:
    """A grid value as a command-line value: bare where Hydra reads it back unchanged."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_./+-]+", v):
        return v
    from hrm_deeploop.training.sweep import hydra_value  # lazy: `study --help` skips it

    return hydra_value(v)


def percent(metric: str) -> bool:
    """Whether a metric is an accuracy stored as a fraction, shown in percent."""
    return "accuracy" in metric.rsplit(".", 1)[-1]


def shown(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """The rows with `value` in the unit the report shows (percent for accuracies)."""
    if not percent(metric):
        return rows
    return [{**r, "value": None if r["value"] is None else 100.0 * r["value"]} for r in rows]


def unit(metric: str) -> str:
    return f"{metric.rsplit('.', 1)[-1]}" + (" (%)" if percent(metric) else "")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def cell_table(cfg: Any, rows: list[dict[str, Any]]) -> str:
    keys = list(cfg.grid)
    head = ["| " + " | ".join([*keys, "runs", "mean", "std", "min", "max", "per seed"]) + " |",
            "|" + "---|" * (len(keys) + 6)]
    for group in by(rows, "cell").values():
        sp = spread([r["value"] for r in group if r["value"] is not None])
        per = ", ".join(f"s{r['seed']}: " + (_fmt(r["value"]) if r["value"] is not None else r["status"]) for r in group)
        done = sum(r["value"] is not None for r in group)
        head.append("| " + " | ".join([*(str(group[0][k]) for k in keys), f"{done}/{len(group)}",
                                       *(["-"] * 4 if sp is None else [_fmt(sp.mean), _fmt(sp.std), _fmt(sp.min),
                                                                        _fmt(sp.max)]), per]) + " |")
    return "\n".join(head)


def compare_table(cfg: Any, rows: list[dict[str, Any]]) -> str:
    key = cfg.compare_key
    if key is None or len(cfg.grid[key]) < 2:
        return ""
    others = [k for k in cfg.grid if k != key]
    ref = command_value(cfg.grid[key][0])
    lines = [f"Two-sided Mann-Whitney U of each `{key}` against `{key}={ref}` (U of the first sample; "
             "Δ = difference of means)", "",
             "| " + " | ".join([*others, key, "n", f"n ({ref})", "Δ mean", "U", "p"]) + " |",
             "|" + "---|" * (len(others) + 6)]
    for setting, group in by(rows, *others).items():
        by_value = by(group, key)
        base = [r["value"] for r in by_value.get((ref,), []) if r["value"] is not None]
        for value, rs in by_value.items():
            if value == (ref,):
                continue
            xs = [r["value"] for r in rs if r["value"] is not None]
            if xs and base:
                u, p = mann_whitney_u(xs, base)
                stats = [_fmt(spread(xs).mean - spread(base).mean), f"{u:g}", f"{p:.3g}"]
            else:
                stats = ["-", "-", "-"]
            lines.append("| " + " | ".join([*setting, value[0], str(len(xs)), str(len(base)), *stats]) + " |")
    return "\n".join(lines)


def by(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(str(r[k]) for k in keys), []).append(r)
    return out


def write_reports(cfg: Any, rows: list[dict[str, Any]], root: Path) -> dict[str, Path]:
    from hrm_deeploop.checkpoint import atomic_write_bytes  # lazy: keeps torch off `study --help`

    metric = ", else ".join(f"`{m}`" for m in cfg.metrics)
    table_rows = shown(rows, cfg.metrics[0])
    in_percent = " Shown in percent (the files store fractions)." if percent(cfg.metrics[0]) else ""
    parts = [f"# Study: {cfg.trainer}, {len(rows)} runs", "",
             f"Metric: {metric} from each run's summary.json (finished or stopped runs).{in_percent}", "",
             "Base overrides: " + (" ".join(f"`{k}={command_value(v)}`" for k, v in cfg.base.items()) or "none"), "", cell_table(cfg, table_rows)]
    comparison = compare_table(cfg, table_rows)
    if comparison:
        parts += ["", comparison]
    out = {"study.md": root / "study.md", "study.csv": root / "study.csv"}
    atomic_write_bytes(out["study.md"], ("\n".join(parts) + "\n").encode())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(out["study.csv"], buf.getvalue().encode())
    atomic_write_bytes(root / "study.json", (json.dumps({"trainer": cfg.trainer, "metric": cfg.metrics,
                                                         "rows": rows}, indent=1) + "\n").encode())
    tmp = root / ".study.tmp.png"  # drawn beside it, then renamed: never a half-written picture
    try:
        plot_study(cfg, table_rows, tmp)
        os.replace(tmp, root / "study.png")
    except OSError as e:  # a full disk, the file-size limit: one line
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write '{root / 'study.png'}': {os_error(e)}") from None
    out["study.png"] = root / "study.png"
    return out


def plot_study(cfg: Any, rows: list[dict[str, Any]], path: Path) -> Path:
    """study.png (see `study_figure`)."""
    from hrm_deeploop.training.sweep import pyplot  # lazy: `study --help` skips it

    fig, _ = study_figure(cfg, rows)
    fig.savefig(path)
    pyplot().close(fig)
    return path


def study_figure(cfg: Any, rows: list[dict[str, Any]]) -> tuple[Any, Any]:
    """One dot per seed and the mean per cell; cells grouped by the other axes, coloured by `compare`.
    `rows` hold the values in the unit shown (`shown`); an axis of values that are all >= 0 starts
    at 0 (never below, even when every value is 0)."""
    from hrm_deeploop.training.sweep import pyplot  # lazy: `study --help` skips it

    plt = pyplot()
    key = cfg.compare_key
    others = [k for k in cfg.grid if k != key]
    groups = list(by(rows, *others))
    values = [command_value(v) for v in cfg.grid[key]] if key else [""]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(groups) * max(1, len(values)) ** 0.5 + 2), 3.6), dpi=120)
    width = 0.8 / len(values)
    for j, value in enumerate(values):
        xs_mean, ys_mean = [], []
        for i, g in enumerate(groups):
            rs = [r for r in rows if tuple(str(r[k]) for k in others) == g and (not key or str(r[key]) == value)]
            ys = [r["value"] for r in rs if r["value"] is not None]
            x = i + (j - (len(values) - 1) / 2) * width
            ax.scatter([x] * len(ys), ys, color=f"C{j}", alpha=0.6, s=14)
            if ys:
                xs_mean.append(x)
                ys_mean.append(sum(ys) / len(ys))
        ax.scatter(xs_mean, ys_mean, color=f"C{j}", marker="_", s=400, label=f"{key}={value}" if key else "mean")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([", ".join(f"{k}={v}" for k, v in zip(others, g)) or "all" for g in groups], fontsize=7)
    values_all = [r["value"] for r in rows if r["value"] is not None]
    if values_all and min(values_all) >= 0:
        top = max(values_all)
        ax.set_ylim(0, top * 1.08 if top > 0 else (100.0 if unit(cfg.metrics[0]).endswith("(%)") else 1.0))
    ax.set_ylabel(unit(cfg.metrics[0]))
    ax.set_title(f"study: {cfg.trainer}, {len(cfg.seeds)} seed(s) per cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, ax
