"""Vote outputs: pass@K (json, md, csv), tasks.json, submission.json, report.html + report/*.png.

`write_vote_files` writes them into a stage that `eval.outputs.write_outputs` publishes together
(a crash never leaves half-written outputs; existing outputs are replaced only with overwrite).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from arc_data.fsio import file_stem
from eval.arc.arcprize import LABEL as PRIZE_LABEL
from eval.arc.arcprize import submission as arc_submission
from eval.arc.results import ARC_PRIZE, TaskResult, VoteResult

# The standard ARC palette (colours 0..9).
ARC_PALETTE = np.array(
    [
        [0x00, 0x00, 0x00],  # 0 black
        [0x00, 0x74, 0xD9],  # 1 blue
        [0xFF, 0x41, 0x36],  # 2 red
        [0x2E, 0xCC, 0x40],  # 3 green
        [0xFF, 0xDC, 0x00],  # 4 yellow
        [0xAA, 0xAA, 0xAA],  # 5 grey
        [0xF0, 0x12, 0xBE],  # 6 magenta
        [0xFF, 0x85, 0x1B],  # 7 orange
        [0x7F, 0xDB, 0xFF],  # 8 sky
        [0x87, 0x0C, 0x25],  # 9 maroon
    ],
    dtype=np.uint8,
)

FILES = ("pass_at_k.json", "pass_at_k.md", "pass_at_k.csv", "tasks.json", "submission.json")
REPORT_FILES = ("report.html", "report")
HEADLINE_K = 2  # failures-first order and the submission use the official two-attempt rule


def output_names(report: bool) -> tuple[str, ...]:
    return FILES + (REPORT_FILES if report else ())


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def format_table(scores: dict[str, dict[str, float | None]]) -> str:
    """pass@K by HRM's rule and per test input; pass@2 by the ARC Prize rule (on submission.json)
    below them; n/a where nothing is labelled."""
    ks = list(scores["hrm"])
    rows = [
        "| protocol | " + " | ".join(f"pass@{k}" for k in ks) + " |",
        "|---|" + "---:|" * len(ks),
        "| hrm (task: all test inputs right) | " + " | ".join(_pct(scores['hrm'][k]) for k in ks) + " |",
        "| fractional (per test input) | " + " | ".join(_pct(scores['fractional'][k]) for k in ks) + " |",
    ]
    if ARC_PRIZE in scores:
        rows.append(f"| {PRIZE_LABEL}, on submission.json | "
                    + " | ".join(_pct(scores[ARC_PRIZE]["2"]) if k == "2" else "" for k in ks) + " |")
    return "\n".join(rows)


def _grid_list(grid: np.ndarray | None) -> list[list[int]] | None:
    return None if grid is None else np.asarray(grid).tolist()


def submission(result: VoteResult) -> dict[str, list[dict[str, list[list[int]]]]]:
    """ARC Prize / Kaggle format (`eval.arc.arcprize.submission`, covering `challenges=` when given)."""
    return result.submission or arc_submission(result.tasks)


def tasks_json(result: VoteResult, max_candidates: int) -> dict:
    tasks = {}
    for task in result.tasks:
        tests = []
        for t in task.tests:
            tests.append(
                {
                    "index": t.test.index,
                    "num_votes": t.num_votes,
                    "num_candidates": len(t.candidates),
                    "truth_rank": None if t.truth_rank is None else t.truth_rank + 1,  # 1-based
                    "input": _grid_list(t.test.input_grid),
                    "truth": _grid_list(t.test.truth_grid),
                    "candidates": [
                        {
                            "rank": i + 1,
                            "votes": c.votes,
                            "mean_q": round(c.mean_q, 6),
                            "correct": c.key == t.test.truth_key if t.test.labelled else None,
                            "shape": list(c.shape),
                            "first_row": c.first_seen,
                            "grid": _grid_list(c.grid),
                        }
                        for i, c in enumerate(t.candidates[:max_candidates])
                    ],
                }
            )
        tasks[task.name] = {"correct": {str(k): task.correct_at(k) if task.labelled else None for k in result.ks},
                            "test_inputs": tests}
    return {
        "ranking": "votes desc, then mean sigmoid(q_halt) desc, then first row in predictions.npz",
        "pass_at_k": result.scores,
        "stats": result.stats,
        "config": result.config,
        "warnings": result.warnings,
        "tasks": tasks,
    }


# ---------------------------------------------------------------- pictures

# Pictures are palette PNGs: one byte a pixel and no per-row filter search, about 4x cheaper to
# encode than RGB. Indices 0..9 are the ARC colours (0 black, also the text), then white, the grid
# lines and the two border colours. Labels use Pillow's built-in bitmap font: one-bit glyphs that
# take a tenth of the time of the FreeType default (1.2 s of text for ARC-1's 400 tasks).
_WHITE, _LINE, _CORRECT, _WRONG = 10, 11, 12, 13
PALETTE = np.concatenate([ARC_PALETTE, [[255, 255, 255], [60, 60, 60], [46, 160, 64], [200, 40, 40]]]).astype(np.uint8)
_FONT = ImageFont.load_default_imagefont()


def _grid_image(grid: np.ndarray, cell: int) -> Image.Image:
    g = np.asarray(grid, dtype=np.uint8)
    if g.size == 0:
        return Image.new("P", (cell * 3, cell * 3), _WHITE)
    idx = g.repeat(cell, axis=0).repeat(cell, axis=1)
    if cell >= 4:  # thin grey grid lines
        idx[::cell, :] = _LINE
        idx[:, ::cell] = _LINE
    return Image.frombytes("P", (idx.shape[1], idx.shape[0]), idx.tobytes())


def task_png(task: TaskResult, num_candidates: int) -> bytes:
    """One row per test input: input | truth | top candidates (votes, mean q); green = correct."""
    panels: list[list[tuple[str, np.ndarray | None, int | None]]] = []
    for t in task.tests:
        row = [(f"test {t.test.index}\ninput", t.test.input_grid, None),
               ("\ntruth" if t.test.labelled else "no solution\n(unlabelled)", t.test.truth_grid, None)]
        for i, c in enumerate(t.candidates[:num_candidates]):
            border = None if not t.test.labelled else _CORRECT if c.key == t.test.truth_key else _WRONG
            row.append((f"#{i + 1}: {c.votes} votes\nmean q {c.mean_q:.3f}", c.grid, border))
        if not t.candidates:
            row.append(("no predictions", None, _WRONG))
        panels.append(row)
    side = max([max(g.shape) for r in panels for _, g, _ in r if g is not None and g.size] + [1])
    cell = int(np.clip(180 // side, 3, 16))
    box, label_h, pad = side * cell, 28, 10
    col_w = max(box, 100) + 2 * pad
    width = max(len(r) for r in panels) * col_w
    height = 22 + len(panels) * (box + label_h + 2 * pad)
    img = Image.new("P", (max(width, 360), height), _WHITE)
    img.putpalette(PALETTE.tobytes())
    draw = ImageDraw.Draw(img)
    ranks = ", ".join("-" if t.truth_rank is None else str(t.truth_rank + 1) for t in task.tests)
    ok = task.correct_at(HEADLINE_K)
    draw.text((pad, 4), f"{task.name}   pass@{HEADLINE_K}: {'yes' if ok else 'NO'}   truth rank: {ranks}", fill=0,
              font=_FONT)
    for ri, row in enumerate(panels):
        y = 22 + ri * (box + label_h + 2 * pad)
        for ci, (label, grid, border) in enumerate(row):
            x = pad + ci * col_w
            draw.text((x, y), label, fill=0, font=_FONT)
            if grid is None:
                continue
            gi = _grid_image(grid, cell)
            img.paste(gi, (x, y + label_h))
            if border is not None:
                draw.rectangle([x - 2, y + label_h - 2, x + gi.width + 1, y + label_h + gi.height + 1], outline=border, width=2)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # 40% faster than the default 6, files 40% larger
    return buf.getvalue()


def write_report(result: VoteResult, folder: Path, num_candidates: int) -> None:
    """folder/report.html (images embedded) and folder/report/<task>.png, failures first."""
    (folder / "report").mkdir()
    order = sorted(result.tasks, key=lambda t: (t.correct_at(HEADLINE_K), t.name))  # failures (False) first
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ARC vote report</title>",
        "<style>body{font-family:sans-serif;margin:20px} table{border-collapse:collapse}"
        " td,th{border:1px solid #ccc;padding:3px 8px} .fail{color:#c22} .ok{color:#2a2}</style></head><body>",
        "<h1>ARC vote report</h1>",
        "<p>Candidates ranked by votes, then mean sigmoid(q_halt), then first seen. Failures (at pass@2) first.</p>",
        _md_table_html(result.scores),
        f"<p>{html.escape(json.dumps(result.stats))}</p>",
    ]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # PNG encoding releases the GIL
        pngs = pool.map(lambda task: task_png(task, num_candidates), order)
    for task, png in zip(order, pngs):
        (folder / "report" / f"{file_stem(task.name)}.png").write_bytes(png)
        ok = task.correct_at(HEADLINE_K)
        parts.append(
            f"<h3 class='{'ok' if ok else 'fail'}'>{html.escape(task.name)}: {'solved' if ok else 'failed'} at pass@2</h3>"
            f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        )
    parts.append("</body></html>")
    (folder / "report.html").write_text("\n".join(parts))


def _md_table_html(scores: dict[str, dict[str, float]]) -> str:
    ks = list(scores["hrm"])
    head = "".join(f"<th>pass@{k}</th>" for k in ks)
    body = "".join(
        f"<tr><td>{p}</td>" + "".join(f"<td>{_pct(scores[p][k])}</td>" for k in ks) + "</tr>" for p in ("hrm", "fractional")
    )
    return f"<table><tr><th>protocol</th>{head}</tr>{body}</table>"


# ---------------------------------------------------------------- writing


def write_vote_files(result: VoteResult, folder: Path, max_candidates: int = 10, report: bool = True,
                     report_candidates: int = 3) -> None:
    """Every vote output, written into `folder` (a stage that `eval.outputs.write_outputs` publishes)."""
    (folder / "pass_at_k.json").write_text(json.dumps(result.scores, indent=2) + "\n")
    (folder / "pass_at_k.md").write_text(format_table(result.scores) + "\n")
    with open(folder / "pass_at_k.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["protocol", *(f"pass@{k}" for k in result.scores["hrm"])])
        for p in ("hrm", "fractional"):
            w.writerow([p, *("" if v is None else f"{v:.4f}" for v in result.scores[p].values())])
        if ARC_PRIZE in result.scores:
            v = result.scores[ARC_PRIZE]["2"]
            w.writerow([PRIZE_LABEL, *("" if k != "2" or v is None else f"{v:.4f}" for k in result.scores["hrm"])])
    (folder / "tasks.json").write_text(json.dumps(tasks_json(result, max_candidates)))
    (folder / "submission.json").write_text(json.dumps(submission(result)))
    if report:
        write_report(result, folder, report_candidates)


__all__ = ["ARC_PALETTE", "format_table", "output_names", "submission", "write_vote_files"]
