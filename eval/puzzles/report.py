"""Puzzle evaluation outputs: metrics.json, metrics.md, report.html + report/<id>.png, tta_augmentations.npz.

`write_files` writes them into a stage that `eval.outputs.write_outputs` publishes together (as the
ARC vote's outputs), so a crash never leaves half-written outputs; existing outputs are replaced only
with overwrite=true.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.files.names import file_stem
from arc_data.puzzles.registry import GridTask
from eval.html import Table, heading, image, page, paragraph

PREDICTIONS_FILE = "predictions.npz"
FILES = ("metrics.json", "metrics.md", "tta_augmentations.npz", "report.html", "report")


# ---------------------------------------------------------------- tables


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def tables(m: dict) -> tuple[str, str, Table, str, Table]:
    """metrics.md's parts: the title, a note, the headline table (last segment and first Q halt,
    with and without TTA), the per-segment table's intro, the per-segment table."""
    solve = "solve_token_accuracy" in m["final"]["no_tta"]
    head = ["exact", "token"] + (["solve-token"] if solve else [])
    keys = ["exact_accuracy", "token_accuracy"] + (["solve_token_accuracy"] if solve else [])
    tta = m["tta"]["copies"]
    title = (f"{m['task']} evaluation: {m['num_examples']} examples of '{m['split']}', "
             f"{m['segments']} segments (trained with {m['halt_max_steps_trained']})")
    note = "Accuracies in percent. " + (f"Cells to solve: {m['cells_to_solve']}." if solve else "")

    def row(name: str, d: dict) -> list[str]:
        return [name, *(_f(d[k]) for k in keys), *([_f(d.get("pass@2"))] if tta else [])]

    rows = [row(f"last segment ({m['segments']}), no TTA", m["final"]["no_tta"])]
    if tta:
        rows.append(row(f"last segment, TTA vote over 1 + {tta} copies (top-1)", m["final"]["tta"]))
    q = m["q_halt"]["no_tta"]
    rows.append(row(f"first Q halt (mean {q['mean_segments']:.2f} segments), no TTA", q))
    if tta:
        rows.append(row(f"first Q halt per copy (mean {m['q_halt']['tta']['mean_segments']:.2f}), TTA vote",
                        m["q_halt"]["tta"]))
    headline = Table(["protocol", *head, *(["pass@2"] if tta else [])], rows)
    seg_head = ["segment", "exact", "token", *(["solve-token"] if solve else []), "Q halted by here",
                *(["TTA exact", "TTA pass@2"] if tta else [])]
    seg_rows = []
    for s in m["per_segment"]:
        cells = [str(s["segment"]), _f(s["exact_accuracy"]), _f(s["token_accuracy"])]
        cells += [_f(s["solve_token_accuracy"])] if solve else []
        cells += [_f(s["halted_by_here"])]
        cells += [_f(s["tta_exact_accuracy"]), _f(s["tta_pass@2"])] if tta else []
        seg_rows.append(cells)
    per_segment = Table(seg_head, seg_rows, align="r" * len(seg_head))
    return title, note, headline, "Per segment (the prediction after segment s; no TTA unless marked):", per_segment


def markdown(m: dict) -> str:
    """metrics.md: the headline table, the first-Q-halt table and the per-segment table."""
    title, note, headline, intro, per_segment = tables(m)
    return "\n".join([f"# {title}", "", note, "", headline.markdown(), "", intro, "", per_segment.markdown()]) + "\n"


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
    candidate: str  # which prediction is pictured, e.g. "top-1 vote: copy 3, 6 of 9 votes"


TITLE_SIZE, LABEL_SIZE = 15, 13  # px: the caption above the boards, the panel labels


def picture(task: GridTask, s: Shown) -> bytes:
    """PNG: input | truth | prediction, the prediction framed green (solved) or red and labelled
    with the candidate it is (copy 0, or the vote's top-1 and its votes)."""
    from PIL import Image, ImageDraw, ImageFont  # lazy: PIL only for pictures

    n = int(round(len(s.inputs) ** 0.5))
    cell = task.picture_cell(n)
    verdict = "solved" if s.solved else "wrong"
    panels = [("input", task.render(s.inputs, s.inputs, cell=cell)),
              ("truth", task.render(s.inputs, s.labels, cell=cell)),
              (f"prediction ({verdict})\n{s.candidate}", task.render(s.inputs, s.labels, prediction=s.prediction, cell=cell))]
    title_font, label_font = ImageFont.load_default(size=TITLE_SIZE), ImageFont.load_default(size=LABEL_SIZE)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    col_w = max(max(p.width for _, p in panels), *(probe.multiline_textbbox((0, 0), t, font=label_font)[2]
                                                   for t, _ in panels))
    side = max(p.height for _, p in panels)
    pad, title_h, label_h = 12, TITLE_SIZE + 10, 2 * LABEL_SIZE + 10
    width = max(3 * col_w + 4 * pad, int(probe.textlength(s.caption, font=title_font)) + 2 * pad)
    img = Image.new("RGB", (width, title_h + label_h + side + 2 * pad), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.text((pad, 5), s.caption, fill=(0, 0, 0), font=title_font)
    for i, (label, p) in enumerate(panels):
        x, y = pad + i * (col_w + pad), title_h + label_h
        draw.multiline_text((x, y - 4), label, fill=(0, 0, 0), font=label_font, anchor="ld", spacing=3)
        img.paste(p, (x, y))
        if i == 2:
            colour = (46, 160, 64) if s.solved else (200, 40, 40)
            draw.rectangle([x - 3, y - 3, x + p.width + 2, y + p.height + 2], outline=colour, width=3)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _html(m: dict, task: GridTask | None, shown: list[tuple[Shown, bytes]]) -> str:
    title, note, headline, intro, per_segment = tables(m)
    parts = [heading(1, f"{m['task']} evaluation report"), paragraph(title + ". " + note), headline.html(),
             paragraph(intro), per_segment.html(), heading(2, "Pictured puzzles")]
    if not shown:
        parts.append(paragraph("No pictures (no renderer for this task, or report_puzzles=0)."))
    else:
        parts.append(paragraph("Each picture: the input, the truth, and the pictured prediction (mapped back to the "
                               "input's frame), framed green when solved, red when not; its label names the "
                               "candidate: copy 0 (the input as stored) without TTA, the vote's top-1 with it."))
        if task is not None and task.legend:
            parts.append(paragraph(f"Colours: {task.legend}."))
    for s, png in shown:
        parts += [heading(3, s.caption, "ok" if s.solved else "fail"), image(png, f"example {s.example}")]
    return page(f"{m['task']} evaluation report", parts)


# ---------------------------------------------------------------- writing


def write_files(stage: Path, metrics: dict, task: GridTask | None, shown: list[Shown], tta_table: dict | None,
                report: bool = True) -> None:
    """metrics.json, metrics.md, tta_augmentations.npz (with a TTA table) and the report, into the
    stage that `eval.outputs.write_outputs` publishes (with predictions.npz) together. `task`: the
    grid task that draws the pictures (None: a task without pictures, and then `shown` is empty)."""
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (stage / "metrics.md").write_text(markdown(metrics))
    if tta_table is not None:
        with open(stage / "tta_augmentations.npz", "wb") as f:
            np.savez(f, **tta_table)
    if report:
        (stage / "report").mkdir()
        pictures = [(s, picture(task, s)) for s in shown]
        for s, png in pictures:
            (stage / "report" / f"{file_stem(f'example_{s.example}')}.png").write_bytes(png)
        (stage / "report.html").write_text(_html(metrics, task, pictures))
