"""Vote outputs: pass@K (json, md, csv), tasks.json, submission.json, report.html + report/*.png.

`write_vote_files` writes them into a stage that `eval.outputs.write_outputs` publishes together
(a crash never leaves half-written outputs; existing outputs are replaced only with overwrite).
"""

from __future__ import annotations

import csv
import io
import json
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from arc_data.arc.viz import LINE, UNKNOWN, grid_indices
from arc_data.arc.viz import PALETTE as ARC_PALETTE
from arc_data.files.names import file_stem
from eval.arc.arcprize import LABEL as PRIZE_LABEL
from eval.arc.arcprize import submission as arc_submission
from eval.arc.poe import RULE as POE_RULE
from eval.arc.poe import poe_json
from eval.arc.results import ARC_PRIZE, TaskResult, VoteResult
from eval.html import Table, heading, image, page, paragraph

FILES = ("pass_at_k.json", "pass_at_k.md", "pass_at_k.csv", "tasks.json", "submission.json")
REPORT_FILES = ("report.html", "report")
RANKING = "votes desc, then mean sigmoid(q_halt) desc, then first row in predictions.npz"
RANKING_NO_HALT = "votes desc, then first row in predictions.npz (the model predicts no q_halt)"


def ranking(result: VoteResult) -> str:
    """The count-first rule as it ranked these candidates: a model without a halting head (every
    row's q_halt the same) is ranked by votes, then first seen."""
    return RANKING if result.halting else RANKING_NO_HALT
HEADLINE_K = 2  # failures-first order and the submission use the official two-attempt rule


POE_FILES = ("poe.json", "submission_poe.json")  # with log_probs (eval.arc.poe)


def output_names(report: bool, poe: bool = False) -> tuple[str, ...]:
    return FILES + (POE_FILES if poe else ()) + (REPORT_FILES if report else ())


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def score_table(scores: dict[str, dict[str, float | None]]) -> Table:
    """pass@K by HRM's rule and per test input; pass@2 by the ARC Prize rule (on submission.json)
    below them; n/a where nothing is labelled."""
    ks = list(scores["hrm"])
    rows = [["hrm (task: all test inputs right)", *(_pct(scores["hrm"][k]) for k in ks)],
            ["fractional (per test input)", *(_pct(scores["fractional"][k]) for k in ks)]]
    if ARC_PRIZE in scores:
        rows.append([f"{PRIZE_LABEL}, on submission.json", *(_pct(scores[ARC_PRIZE]["2"]) if k == "2" else "" for k in ks)])
    return Table(["protocol", *(f"pass@{k}" for k in ks)], rows)


def format_table(scores: dict[str, dict[str, float | None]], poe_scores: dict | None = None,
                 rule: str = RANKING) -> str:
    """pass_at_k.md and the printed summary: `score_table` as Markdown, and with `poe_scores` the
    same table for the product-of-experts ranking of the same candidates (`eval.arc.poe`)."""
    text = score_table(scores).markdown()
    if poe_scores is None:
        return text
    return (f"count-first vote ({rule}):\n\n{text}\n\nproduct of experts ({POE_RULE}):\n\n"
            + score_table(poe_scores).markdown())


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
        "ranking": ranking(result),
        "pass_at_k": result.scores,
        "stats": result.stats,
        "config": result.config,
        "warnings": result.warnings,
        "tasks": tasks,
    }


# ---------------------------------------------------------------- pictures

# Pictures are palette PNGs: one byte a pixel and no per-row filter search, about 4x cheaper to
# encode than RGB. Indices 0..9 are the ARC colours, then white, the grid lines, the two frame
# colours, the grey of a grid not given, and a ramp of greys for anti-aliased text (black on white).
_WHITE, _LINE, _CORRECT, _WRONG, _UNKNOWN, _TEXT = 10, 11, 12, 13, 14, 15
_TEXT_LEVELS = 8  # index _TEXT + i: i = 0 white ... 7 black
PALETTE = np.concatenate([ARC_PALETTE, [[255, 255, 255], LINE, [46, 160, 64], [200, 40, 40], UNKNOWN],
                          [[255 - 255 * i // (_TEXT_LEVELS - 1)] * 3 for i in range(_TEXT_LEVELS)]]).astype(np.uint8)
TITLE_SIZE, LABEL_SIZE = 15, 13  # px (Pillow's bundled FreeType font)
MIN_CELL, MAX_CELL, BOX = 8, 24, 240  # px per cell: a task's largest grid drawn about BOX px wide, cells 8-24 px


@cache
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)  # decodes the bundled font: once per size, not per label


@cache
def _glyph(ch: str, size: int) -> tuple[np.ndarray, float]:
    """One character drawn at the pen's origin on a line-high strip (uint8 coverage), and its advance."""
    font = _font(size)
    ascent, descent = font.getmetrics()
    right = max(1, int(np.ceil(max(font.getbbox(ch)[2], font.getlength(ch)))))
    strip = Image.new("L", (right + 1, ascent + descent + 1), 0)
    ImageDraw.Draw(strip).text((0, 0), ch, fill=255, font=font)
    return np.asarray(strip, np.uint8), font.getlength(ch)


@lru_cache(maxsize=4096)
def _text(text: str, size: int) -> Image.Image:
    """A label as palette indices (black on white, anti-aliased in _TEXT_LEVELS greys), composed from
    cached glyphs (FreeType draws each character once per size, not each label: a report has a
    thousand distinct labels and about a hundred distinct characters); lines 3 px apart."""
    ascent, descent = _font(size).getmetrics()
    line_h = ascent + descent + 3
    lines = text.split("\n")
    widths = [sum(_glyph(ch, size)[1] for ch in line) for line in lines]
    glyph_w = max((_glyph(ch, size)[0].shape[1] for line in lines for ch in line), default=1)
    canvas = np.zeros((line_h * len(lines), int(np.ceil(max(widths, default=0))) + glyph_w + 1), np.uint8)
    for i, line in enumerate(lines):
        x = 0.0
        for ch in line:
            g, advance = _glyph(ch, size)
            left = int(round(x))
            region = canvas[i * line_h:i * line_h + g.shape[0], left:left + g.shape[1]]
            np.maximum(region, g[:region.shape[0], :region.shape[1]], out=region)
            x += advance
    rows, cols = np.nonzero(canvas)
    canvas = canvas[:max(rows.max(initial=0) + 1, 1), :max(cols.max(initial=0) + 1, 1)]
    level = (canvas.astype(np.uint16) * (_TEXT_LEVELS - 1) + 127) // 255
    return Image.frombytes("P", (canvas.shape[1], canvas.shape[0]), (_TEXT + level).astype(np.uint8).tobytes())


def _votes(n: int) -> str:
    return f"{n} vote" if n == 1 else f"{n} votes"


def _panels(task: TaskResult, num_candidates: int) -> list[list[tuple[str, np.ndarray | None, int | None]]]:
    """One row per test input: (label, grid or None, frame index or None) for input, truth, candidates."""
    rows = []
    for t in task.tests:
        row = [(f"test {t.test.index}: input", t.test.input_grid, None),
               ("truth" if t.test.labelled else "truth\n(not given)", t.test.truth_grid, None)]
        for i, c in enumerate(t.candidates[:num_candidates]):
            right = t.test.labelled and c.key == t.test.truth_key
            verdict = ("right, " if right else "wrong, ") if t.test.labelled else ""
            row.append((f"#{i + 1}: {_votes(c.votes)}\n{verdict}mean q {c.mean_q:.3f}", c.grid,
                        None if not t.test.labelled else _CORRECT if right else _WRONG))
        if not t.candidates:
            row.append(("no predictions", None, None))
        rows.append(row)
    return rows


def cell_size(task: TaskResult, num_candidates: int) -> int:
    """Pixels per cell of a task's picture: its largest grid about BOX px, within MIN_CELL..MAX_CELL."""
    side = max([max(g.shape) for r in _panels(task, num_candidates) for _, g, _ in r if g is not None and g.size] + [1])
    return int(np.clip(BOX // side, MIN_CELL, MAX_CELL))


def task_png(task: TaskResult, num_candidates: int) -> bytes:
    """One row per test input: input | truth | top candidates by the vote, each labelled with its
    rank and votes; a candidate framed green when it is the truth, red when not."""
    rows = _panels(task, num_candidates)
    cell = cell_size(task, num_candidates)
    grids = [[None if g is None or not g.size else grid_indices(g, cell, _LINE) for _, g, _ in r] for r in rows]
    labels = [[_text(lab, LABEL_SIZE) for lab, _, _ in r] for r in rows]
    pad, frame = 14, 3
    num_cols = max(len(r) for r in rows)
    col_w = [max([60] + [g.shape[1] for r in grids if c < len(r) and (g := r[c]) is not None]
                 + [lab[c].width for lab in labels if c < len(lab)]) for c in range(num_cols)]
    label_h = max(lab.height for r in labels for lab in r) + 6
    row_h = [label_h + max([g.shape[0] for g in r if g is not None] + [0]) + 2 * frame + pad for r in grids]
    ranks = ", ".join("none" if t.truth_rank is None else f"#{t.truth_rank + 1}" for t in task.tests
                      if t.test.labelled)
    ok = task.correct_at(HEADLINE_K)
    title = _text(f"{task.name}: {'solved' if ok else 'failed'} at pass@{HEADLINE_K}"
                  + (f"; the truth's rank among the candidates: {ranks}" if ranks else "; no truth given"), TITLE_SIZE)
    top = title.height + 2 * pad
    width = max(sum(col_w) + pad * (num_cols + 1) + 2 * frame, title.width + 2 * pad)
    img = Image.new("P", (width, top + sum(row_h)), _WHITE)
    img.putpalette(PALETTE.tobytes())
    img.paste(title, (pad, pad))
    draw = ImageDraw.Draw(img)
    y = top
    for r, (row, grid_row, label_row) in enumerate(zip(rows, grids, labels)):
        x = pad + frame
        for c, ((_, _, border), g, lab) in enumerate(zip(row, grid_row, label_row)):
            img.paste(lab, (x, y))
            if g is not None:
                gy = y + label_h + frame
                img.paste(Image.frombytes("P", (g.shape[1], g.shape[0]), g.tobytes()), (x, gy))
                if border is not None:
                    draw.rectangle([x - frame, gy - frame, x + g.shape[1] + frame - 1, gy + g.shape[0] + frame - 1],
                                   outline=border, width=frame)
            x += col_w[c] + pad
        y += row_h[r]
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # 40% faster than the default 6, files 40% larger
    return buf.getvalue()


def candidate_table(task: TaskResult, num_candidates: int, halting: bool = True) -> Table:
    """The pictured candidates of a task, one row each (the numbers under its picture); the mean
    sigmoid(q_halt) column only for a model with a halting head (`halting`)."""
    rows = []
    for t in task.tests:
        for i, c in enumerate(t.candidates[:num_candidates]):
            right = ("yes" if c.key == t.test.truth_key else "no") if t.test.labelled else "-"
            rows.append([str(t.test.index), str(i + 1), str(c.votes), *([f"{c.mean_q:.3f}"] if halting else []),
                         "x".join(map(str, c.shape)), right])
        if not t.candidates:
            rows.append([str(t.test.index), "-", "0", *(["-"] if halting else []), "-",
                         "no" if t.test.labelled else "-"])
    return Table(["test input", "rank", "votes", *(["mean sigmoid(q_halt)"] if halting else []), "shape", "the truth"],
                 rows)


def write_report(result: VoteResult, folder: Path, num_candidates: int) -> None:
    """folder/report.html (images embedded) and folder/report/<task>.png, failures first."""
    (folder / "report").mkdir()
    order = sorted(result.tasks, key=lambda t: (t.correct_at(HEADLINE_K), t.name))  # failures (False) first
    num_solved = sum(t.correct_at(HEADLINE_K) for t in result.tasks)
    parts = [
        heading(1, "ARC vote report"),
        paragraph(f"{len(result.tasks)} tasks, {num_solved} solved at pass@{HEADLINE_K}. Candidates are the distinct "
                  "predicted grids of a test input's augmented copies (mapped back), ranked by votes, then "
                  + ("mean sigmoid(q_halt), then " if result.halting else "")
                  + "first seen" + ("" if result.halting else " (the model predicts no halting logit)")
                  + ". pass@K in percent:"),
        score_table(result.scores).html(),
        Table(["statistic", "value"], [[k, str(v)] for k, v in result.stats.items()], caption="vote statistics").html(),
        heading(2, f"Tasks, failures at pass@{HEADLINE_K} first"),
        paragraph(f"Each picture: per test input, the input, the truth and the top {num_candidates} candidates by the "
                  "vote, labelled with their rank and votes; a candidate framed green when it is the truth, red "
                  "when not (no frame when the truth is not given)."),
    ]
    pngs = [task_png(task, num_candidates) for task in order]  # 0.4 s for 400 tasks; threads only contended
    for task, png in zip(order, pngs):
        (folder / "report" / f"{file_stem(task.name)}.png").write_bytes(png)
        ok = task.correct_at(HEADLINE_K)
        parts += [heading(3, f"{task.name}: {'solved' if ok else 'failed'} at pass@{HEADLINE_K}", "ok" if ok else "fail"),
                  image(png, task.name), candidate_table(task, num_candidates, result.halting).html()]
    (folder / "report.html").write_text(page("ARC vote report", parts))


# ---------------------------------------------------------------- writing


def write_vote_files(result: VoteResult, folder: Path, max_candidates: int = 10, report: bool = True,
                     report_candidates: int = 3) -> None:
    """Every vote output, written into `folder` (a stage that `eval.outputs.write_outputs` publishes)."""
    (folder / "pass_at_k.json").write_text(json.dumps(result.scores, indent=2) + "\n")
    (folder / "pass_at_k.md").write_text(format_table(result.scores, result.poe and result.poe.scores, ranking(result))
                                         + "\n")
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
    if result.poe is not None:
        (folder / "poe.json").write_text(json.dumps(poe_json(result.poe, max_candidates)))
        (folder / "submission_poe.json").write_text(json.dumps(result.poe.submission))
    if report:
        write_report(result, folder, report_candidates)


__all__ = ["ARC_PALETTE", "format_table", "output_names", "submission", "write_vote_files"]
