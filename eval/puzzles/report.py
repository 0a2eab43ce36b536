"""Puzzle evaluation outputs: metrics.json, metrics.md, report.html + report/<id>.png, tta_augmentations.npz.

`write_files` writes them into a stage that `eval.outputs.write_outputs` publishes together (as the
ARC vote's outputs), so a crash never leaves half-written outputs; existing outputs are replaced only
with overwrite=true.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.fsio import file_stem

PREDICTIONS_FILE = "predictions.npz"
FILES = ("metrics.json", "metrics.md", "tta_augmentations.npz", "report.html", "report")


# ---------------------------------------------------------------- tables


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def markdown(m: dict) -> str:
    """metrics.md: the headline table, the first-Q-halt table and the per-segment table."""
    solve = "solve_token_accuracy" in m["final"]["no_tta"]
    head = ["exact", "token"] + (["solve-token"] if solve else [])
    keys = ["exact_accuracy", "token_accuracy"] + (["solve_token_accuracy"] if solve else [])
    tta = m["tta"]["copies"]
    lines = [f"# {m['task']} evaluation: {m['num_examples']} examples of '{m['split']}', "
             f"{m['segments']} segments (trained with {m['halt_max_steps_trained']})", "",
             "Accuracies in percent. " + (f"Cells to solve: {m['cells_to_solve']}." if solve else ""), "",
             "| protocol | " + " | ".join(head) + (" | pass@2 |" if tta else " |"),
             "|---|" + "---:|" * (len(head) + (1 if tta else 0))]

    def row(name: str, d: dict) -> str:
        extra = f" | {_f(d.get('pass@2'))}" if tta else ""
        return f"| {name} | " + " | ".join(_f(d[k]) for k in keys) + extra + " |"

    lines.append(row(f"last segment ({m['segments']}), no TTA", m["final"]["no_tta"]))
    if tta:
        lines.append(row(f"last segment, TTA vote over 1 + {tta} copies (top-1)", m["final"]["tta"]))
    q = m["q_halt"]["no_tta"]
    lines.append(row(f"first Q halt (mean {q['mean_segments']:.2f} segments), no TTA", q))
    if tta:
        lines.append(row(f"first Q halt per copy (mean {m['q_halt']['tta']['mean_segments']:.2f}), TTA vote",
                         m["q_halt"]["tta"]))
    lines += ["", "Per segment (the prediction after segment s; no TTA unless marked):", "",
              "| segment | exact | token | " + ("solve-token | " if solve else "") + "Q halted by here |"
              + (" TTA exact | TTA pass@2 |" if tta else ""),
              "|---:|---:|---:|" + ("---:|" if solve else "") + "---:|" + ("---:|---:|" if tta else "")]
    for s in m["per_segment"]:
        cells = [str(s["segment"]), _f(s["exact_accuracy"]), _f(s["token_accuracy"])]
        cells += [_f(s["solve_token_accuracy"])] if solve else []
        cells += [_f(s["halted_by_here"])]
        cells += [_f(s["tta_exact_accuracy"]), _f(s["tta_pass@2"])] if tta else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- pictures


@dataclass
class Shown:
    """One pictured test example, in the original frame."""

    example: int
    inputs: np.ndarray  # [L] tokens
    labels: np.ndarray  # [L]
    prediction: np.ndarray  # [L]: the headline prediction (the top-1 vote with TTA, else the input as stored)
    solved: bool
    caption: str


def picture(task: str, s: Shown) -> bytes:
    """PNG: input | truth | prediction, the prediction framed green (solved) or red."""
    from PIL import Image, ImageDraw

    from arc_data.puzzles.viz import render_puzzle

    n = int(round(len(s.inputs) ** 0.5))
    cell = min(40, max(20, 252 // n)) if task == "sudoku" else min(24, max(6, 240 // n))  # boards of ~240 px
    panels = [("input", render_puzzle(task, s.inputs, s.inputs, cell=cell)),
              ("truth", render_puzzle(task, s.inputs, s.labels, cell=cell)),
              ("prediction", render_puzzle(task, s.inputs, s.labels, prediction=s.prediction, cell=cell))]
    side = max(p.width for _, p in panels)
    pad, title_h, label_h = 10, 22, 16
    img = Image.new("RGB", (max(3 * (side + 2 * pad), 360), title_h + label_h + side + 2 * pad), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.text((pad, 4), s.caption, fill=(0, 0, 0))
    for i, (label, p) in enumerate(panels):
        x, y = pad + i * (side + 2 * pad), title_h + label_h
        draw.text((x, title_h), label, fill=(0, 0, 0))
        img.paste(p, (x, y))
        if label == "prediction":
            colour = (46, 160, 64) if s.solved else (200, 40, 40)
            draw.rectangle([x - 3, y - 3, x + p.width + 2, y + p.height + 2], outline=colour, width=3)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _html(m: dict, md: str, shown: list[tuple[Shown, bytes]]) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>puzzle evaluation report</title>",
             "<style>body{font-family:sans-serif;margin:20px} .fail{color:#c22} .ok{color:#2a2}</style></head><body>",
             f"<h1>{html.escape(m['task'])} evaluation report</h1>",
             f"<pre>{html.escape(md)}</pre>"]
    if not shown:
        parts.append("<p>No pictures (no renderer for this task, or report_puzzles=0).</p>")
    for s, png in shown:
        parts.append(f"<h3 class='{'ok' if s.solved else 'fail'}'>{html.escape(s.caption)}</h3>"
                     f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------- writing


def write_files(stage: Path, metrics: dict, task: str, shown: list[Shown], tta_table: dict | None,
                report: bool = True) -> None:
    """metrics.json, metrics.md, tta_augmentations.npz (with a TTA table) and the report, into the
    stage that `eval.outputs.write_outputs` publishes (with predictions.npz) together."""
    md = markdown(metrics)
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (stage / "metrics.md").write_text(md)
    if tta_table is not None:
        with open(stage / "tta_augmentations.npz", "wb") as f:
            np.savez(f, **tta_table)
    if report:
        (stage / "report").mkdir()
        pictures = [(s, picture(task, s)) for s in shown]
        for s, png in pictures:
            (stage / "report" / f"{file_stem(f'example_{s.example}')}.png").write_bytes(png)
        (stage / "report.html").write_text(_html(metrics, md, pictures))
