"""`evaluate checkpoint=RUN all_checkpoints=true`: every checkpoint of a run, scored, and pass@K vs step.

Each `<run>/checkpoints/step_N.pt` is evaluated as `evaluate` does for one (predict, vote) into
`OUT/step_N/`; then `OUT/curve.json` and `OUT/curve.csv` hold, per step, pass@K by HRM's rule and
per test input, and pass@2 by the ARC Prize rule, and `OUT/curve.png` draws them against the step.
A run's last checkpoint is not always its best; on tasks whose test inputs are unlabelled, score
the run's checkpoints on a validation build instead (`build-arc validation_dir=`: each task's last
demonstration held out as its test pair) and never on the test inputs.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.errors import UserError

CURVE_FILES = ("curve.json", "curve.csv", "curve.png")


def evaluate_run(c: Any, run_one) -> int:
    """Evaluate every checkpoint of the run folder `c.checkpoint` with `run_one(config)`; write the curve."""
    run_dir = Path(c.checkpoint)
    found = ckpt.list_checkpoints(run_dir) if run_dir.is_dir() else []
    if not found:
        raise UserError(f"all_checkpoints=true: '{run_dir}' is not a run folder with checkpoints/step_N.pt")
    if not c.vote:
        raise UserError("all_checkpoints=true scores every checkpoint: it needs vote=true")
    out = Path(c.output_dir)
    existing = [n for n in CURVE_FILES if (out / n).exists()]
    if existing and not c.overwrite:
        raise UserError(f"{out} already holds {existing}; pass overwrite=true to replace them")
    rows: list[dict[str, Any]] = []
    for step, path in found:
        sub = out / f"step_{step}"
        rc = run_one(replace(c, checkpoint=str(path), output_dir=str(sub), all_checkpoints=False))
        if rc:
            return rc
        scores = json.loads((sub / "pass_at_k.json").read_text())
        rows.append({"step": step, **{f"{p}@{k}": v for p, ks in scores.items() for k, v in ks.items()}})
    write_curve(rows, out)
    print(f"wrote {out / 'curve.json'} ({len(rows)} checkpoints)")
    best = [r for r in rows if r.get("hrm@2") is not None]
    if best:
        top = max(best, key=lambda r: (r["hrm@2"], -r["step"]))  # the earliest of the best: least adapted
        print(f"best pass@2 (hrm rule): {top['hrm@2']:.2f} at step {top['step']}")
    return 0


def write_curve(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib  # lazy: matplotlib only when the curve is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only when the curve is drawn

    keys = [k for k in rows[0] if k != "step"]
    (out / "curve.json").write_text(json.dumps(rows, indent=1) + "\n")
    with open(out / "curve.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", *keys])
        for r in rows:
            w.writerow([r["step"], *("" if r.get(k) is None else f"{r[k]:.4f}" for k in keys)])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [r["step"] for r in rows]
    for k in keys:
        if k.split("@")[1] in ("1", "2") and any(r.get(k) is not None for r in rows):
            label = "pass@2 (ARC Prize rule)" if k.startswith("arc_prize") else k.replace("@", " pass@")
            ax.plot(steps, [r.get(k) for r in rows], marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("%")
    ax.set_title("pass@K against the checkpoint's step")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no labelled test inputs: nothing to score", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=100)
    plt.close(fig)
