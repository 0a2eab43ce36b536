"""Vote outputs: pass@K (json, md, csv), tasks.json, submission.json, report.html + report/*.png.

`write_vote_files` writes them into a stage that `eval.outputs.write_outputs` publishes together
(a crash never leaves half-written outputs; existing outputs are replaced only with overwrite).
"""

from __future__ import annotations

import csv
import json
from collections import deque
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arc_data.arc.palette import LINE, UNKNOWN
from arc_data.arc.palette import PALETTE as ARC_PALETTE
from arc_data.files.names import file_stem
from eval.arc.arcprize import LABEL as PRIZE_LABEL
from eval.arc.arcprize import submission as arc_submission
from eval.arc.deflate import CL_ORDER, LENGTHS, MAX_DISTANCE, bound, distances
from eval.arc.jsontext import as_list, dumps
from eval.arc.label_text import TEXT, TEXT_LEVELS, draw_labels, label_of, readonly
from eval.arc.paint import paint_picture, paint_png
from eval.arc.png import png_file, zlib_stream
from eval.arc.results import ARC_PRIZE, Ranked, TaskResult, VoteResult
from eval.arc.threads import Job, Workers
from eval.html import Table, heading, image, page, paragraph

if TYPE_CHECKING:
    from PIL import Image

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


def every_output() -> tuple[str, ...]:
    """Every file a vote may write, whatever its options: what a vote checks and replaces, so that an
    earlier vote's poe.json or report never stays beside a new submission.json (`eval.outputs`)."""
    return output_names(report=True, poe=True)


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
    from eval.arc.poe import RULE as POE_RULE  # lazy: only with a product of experts

    return (f"count-first vote ({rule}):\n\n{text}\n\nproduct of experts ({POE_RULE}):\n\n"
            + score_table(poe_scores).markdown())


def submission(result: VoteResult) -> dict[str, list[dict[str, list[list[int]]]]]:
    """ARC Prize / Kaggle format (`eval.arc.arcprize.submission`, covering `challenges=` when given)."""
    return result.submission or arc_submission(result.tasks)


def tasks_json(result: VoteResult, max_candidates: int, grid: Callable[[Any], Any] = as_list) -> dict:
    """tasks.json's object; `grid(g)`: each grid's value (its nested lists; `eval.arc.jsontext.dumps`
    passes a placeholder)."""
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
                    "input": grid(t.test.input_grid),
                    "truth": grid(t.test.truth_grid),
                    "candidates": [
                        {
                            "rank": i + 1,
                            "votes": votes,
                            "mean_q": round(mean_q, 6),
                            "correct": key == t.test.truth_key if t.test.labelled else None,
                            "shape": list(shape),
                            "first_row": first_seen,
                            "grid": grid(g),
                        }
                        for i, (key, votes, mean_q, first_seen, shape, g) in enumerate(_top(t.candidates,
                                                                                           max_candidates))
                    ],
                }
            )
        labelled = task.labelled  # once a task, not once a K
        tasks[task.name] = {"correct": {str(k): task.correct_at(k) if labelled else None for k in result.ks},
                            "test_inputs": tests}
    return {
        "ranking": ranking(result),
        "pass_at_k": result.scores,
        "stats": result.stats,
        "config": result.config,
        "warnings": result.warnings,
        "tasks": tasks,
    }


def _top(candidates: Any, n: int) -> Iterator[tuple]:
    """(key, votes, mean_q, first_seen, shape, grid) of the first n candidates: from the vote's columns
    (`results.Ranked`) in a few `tolist` calls, without making a `Candidate` each; the same values."""
    if not isinstance(candidates, Ranked):
        return ((c.key, c.votes, c.mean_q, c.first_seen, c.shape, c.grid) for c in candidates[:n])
    columns, lo = candidates.columns, candidates.lo
    hi = min(lo + n, candidates.hi)
    k1, k2, votes, mean_q, first_seen, rows, cols = (col[lo:hi].tolist() for col in columns.columns)
    return zip(zip(k1, k2), votes, mean_q, first_seen, zip(rows, cols), columns.grids[lo:hi])


# ---------------------------------------------------------------- pictures

# Pictures are palette PNGs: one byte a pixel and no per-row filter search, about 4x cheaper to
# encode than RGB. Indices 0..9 are the ARC colours, then white, the grid lines, the two frame
# colours, the grey of a grid not given, and a ramp of greys for anti-aliased text (black on white).
_WHITE, _LINE, _CORRECT, _WRONG, _UNKNOWN = 10, 11, 12, 13, 14  # then the text's greys (`label_text.TEXT`)
PALETTE = np.concatenate([ARC_PALETTE, [[255, 255, 255], LINE, [46, 160, 64], [200, 40, 40], UNKNOWN],
                          [[255 - 255 * i // (TEXT_LEVELS - 1)] * 3 for i in range(TEXT_LEVELS)]]).astype(np.uint8)
assert len(PALETTE) == TEXT + TEXT_LEVELS  # the text's greys end the palette (`label_text.TEXT`)
TITLE_SIZE, LABEL_SIZE = 15, 13  # px (Pillow's bundled FreeType font)
MIN_CELL, MAX_CELL, BOX = 8, 24, 240  # px per cell: a task's largest grid drawn about BOX px wide, cells 8-24 px


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
    return _cell(_panels(task, num_candidates))


def _cell(rows: list[list[tuple[str, np.ndarray | None, int | None]]]) -> int:
    side = max([max(g.shape) for r in rows for _, g, _ in r if g is not None and g.size] + [1])
    return min(max(BOX // side, MIN_CELL), MAX_CELL)  # np.clip's value, without its call on a scalar


def _title(task: TaskResult) -> str:
    ranks = ", ".join("none" if t.truth_rank is None else f"#{t.truth_rank + 1}" for t in task.tests
                      if t.test.labelled)
    return (f"{task.name}: {'solved' if task.correct_at(HEADLINE_K) else 'failed'} at pass@{HEADLINE_K}"
            + (f"; the truth's rank among the candidates: {ranks}" if ranks else "; no truth given"))


def _layout(task: TaskResult, num_candidates: int, rows: list | None = None) -> tuple:
    """A task's picture, laid out: (height, width, cells, grids, frames, pastes) as `paint_picture`
    and the labels' pastes (label, y, x) take them (`task_scanlines`)."""
    rows = _panels(task, num_candidates) if rows is None else rows
    cell = _cell(rows)
    sizes = [[None if g is None or not g.size else (g.shape[0] * cell + 1, g.shape[1] * cell + 1) for _, g, _ in r]
             for r in rows]
    labels = [[label_of(lab, LABEL_SIZE) for lab, _, _ in r] for r in rows]
    pad, frame = 14, 3
    num_cols = max(len(r) for r in rows)
    col_w = [max([60] + [g[1] for r in sizes if c < len(r) and (g := r[c]) is not None]
                 + [lab[c].shape[1] for lab in labels if c < len(lab)]) for c in range(num_cols)]
    label_h = max(lab.shape[0] for r in labels for lab in r) + 6
    row_h = [label_h + max([g[0] for g in r if g is not None] + [0]) + 2 * frame + pad for r in sizes]
    title = label_of(_title(task), TITLE_SIZE)
    top = title.shape[0] + 2 * pad
    width = max(sum(col_w) + pad * (num_cols + 1) + 2 * frame, title.shape[1] + 2 * pad)
    height = top + sum(row_h)
    pastes = [(title, pad, pad)]
    grids, frames, cells = [], [], []
    offset = 0
    y = top
    for r, (row, size_row, label_row) in enumerate(zip(rows, sizes, labels)):
        x = pad + frame
        for c, ((_, g, border), size, lab) in enumerate(zip(row, size_row, label_row)):
            pastes.append((lab, y, x))
            if size is not None:
                gy = y + label_h + frame
                grids.append((gy, x, g.shape[0], g.shape[1], cell, offset))
                cells.append(np.asarray(g, np.uint8).reshape(-1))
                offset += g.size
                if border is not None:
                    frames.append((x - frame, gy - frame, x + size[1] + frame - 1, gy + size[0] + frame - 1, border,
                                   frame))
            x += col_w[c] + pad
        y += row_h[r]
    return (height, width, readonly(np.concatenate(cells) if cells else np.zeros(0, np.uint8)),
            readonly(np.array(grids, np.int64).reshape(-1, 6)), readonly(np.array(frames, np.int64).reshape(-1, 6)),
            pastes)


def task_scanlines(task: TaskResult, num_candidates: int, rows: list | None = None) -> np.ndarray:
    """One row per test input: input | truth | top candidates by the vote, each labelled with its
    rank and votes; a candidate framed green when it is the truth, red when not. Returned as the
    picture's filtered scanlines (`eval.arc.png`: uint8 [rows, 1 + cols], column 0 the filter byte,
    then the palette indices); background, grids and frames painted by one kernel call
    (`eval.arc.paint`), the labels pasted as numpy slices. `rows`: the task's `_panels`, when already
    made. (The report deflates the same scanlines without painting them all: `_task_stream`.)"""
    return _paint(_layout(task, num_candidates, rows))


def _paint(layout: tuple) -> np.ndarray:
    height, width, cells, grids, frames, pastes = layout
    scan = np.empty((height, width + 1), np.uint8)
    paint_picture(scan, _WHITE, _LINE, cells, grids, frames)
    for label, py, px in pastes:
        _paste(scan[:, 1:], label, py, px)
    return scan


def _task_stream(layout: tuple) -> tuple[int, int, bytes]:
    """(rows, cols, the zlib stream of the picture's scanlines) of a `_layout`, painted and deflated
    in one kernel call (`eval.arc.paint.paint_png`: no picture in memory, only its changing rows);
    a picture too wide for it (over 32,767 px) is painted whole and deflated by zlib."""
    height, width, cells, grids, frames, pastes = layout
    if width + 1 > MAX_DISTANCE:
        return height, width, zlib_stream(_paint(layout))
    rows, at = [], 0  # y, x, h, w, offset of each label (the kernel clips as numpy's slices)
    for label, py, px in pastes:
        rows.append((py, px, label.shape[0], label.shape[1], at))
        at += label.size
    table = np.array(rows, np.int64).reshape(-1, 5)
    pixels = np.concatenate([label.reshape(-1) for label, _, _ in pastes])
    out = np.empty(bound(height * (width + 1)), np.uint8)
    tok = np.empty(height * (width + 1) + 1, np.int32)  # only the tokens written are touched
    end = np.zeros(1, np.int64)
    paint_png(height, width, _WHITE, _LINE, cells, grids, frames, readonly(pixels), readonly(table), LENGTHS,
              _distances(width + 1), CL_ORDER, np.empty((2, width + 1), np.uint8), tok, out, end)
    return height, width, out[:int(end[0])].tobytes()


@cache
def _distances(width: int) -> np.ndarray:
    """`deflate.distances(width)`, once a width (read-only: the pictures' threads share it)."""
    return distances(width)


def task_image(task: TaskResult, num_candidates: int, rows: list | None = None) -> Image.Image:
    """`task_scanlines` as a palette image (Pillow's)."""
    from PIL import Image  # lazy: the report writes its PNGs without Pillow (`eval.arc.png`)

    picture = np.ascontiguousarray(task_scanlines(task, num_candidates, rows)[:, 1:])
    img = Image.frombuffer("P", (picture.shape[1], picture.shape[0]), picture, "raw", "P", 0, 1)
    img.putpalette(PALETTE.tobytes())
    return img


def task_png(task: TaskResult, num_candidates: int) -> bytes:
    """The task's picture as PNG bytes, as the report writes it."""
    return png_file(*_task_stream(_layout(task, num_candidates)), _PALETTE_BYTES)


_PALETTE_BYTES = PALETTE.tobytes()


def _paste(canvas: np.ndarray, label: np.ndarray, y: int, x: int) -> None:
    """`Image.paste` of a label's palette indices at (y, x), clipped to the canvas as Pillow clips."""
    h, w = label.shape
    region = canvas[y:y + h, x:x + w]
    region[...] = label[:region.shape[0], :region.shape[1]]


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
    panels = [_panels(task, num_candidates) for task in order]
    draw_labels([label for rows in panels for row in rows for label, _, _ in row], LABEL_SIZE)  # all at once
    draw_labels([_title(task) for task in order], TITLE_SIZE)
    for task, png in zip(order, _pngs(order, panels, num_candidates, folder / "report")):
        ok = task.correct_at(HEADLINE_K)
        parts += [heading(3, f"{task.name}: {'solved' if ok else 'failed'} at pass@{HEADLINE_K}", "ok" if ok else "fail"),
                  image(png, task.name), candidate_table(task, num_candidates, result.halting).html()]
    _write_page(folder / "report.html", "ARC vote report", parts)


def _write_page(path: Path, title: str, parts: list[str]) -> None:
    """`eval.html.page(title, parts)` written part by part: the same bytes, no 4 MB page string and its copy."""
    head, _, tail = page(title, ["\0"]).partition("\0")  # no part holds NUL: escaped text and base64
    with open(path, "w", encoding="utf-8") as f:
        f.write(head)
        for part in parts:
            f.write(part)
            f.write("\n")
        f.write(tail.removeprefix("\n"))


def _pngs(tasks: list[TaskResult], panels: list, num_candidates: int, folder: Path) -> Iterator[bytes]:
    """Each task's picture as PNG bytes, in order, also written to folder/<task>.png. This thread lays
    the pictures out; two threads paint, deflate (`_task_stream`: the kernel releases the GIL) and
    write them meanwhile. At most `ahead` pictures wait, so memory stays flat; the bytes of each
    depend on its layout only, not on the threads' timing."""
    ahead = 8
    with Workers(2, "png") as pool:
        waiting: deque[Job] = deque()
        for task, rows in zip(tasks, panels):
            path = folder / f"{file_stem(task.name)}.png"
            waiting.append(pool.submit(_write_png, _layout(task, num_candidates, rows), path))
            if len(waiting) > ahead:
                yield waiting.popleft().result()
        while waiting:
            yield waiting.popleft().result()


def _write_png(layout: tuple, path: Path) -> bytes:
    png = png_file(*_task_stream(layout), _PALETTE_BYTES)
    path.write_bytes(png)
    return png


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
    if not report:
        _write_json_files(result, folder, max_candidates)
        return
    # the JSON files beside the report: its drawing thread waits on the PNG encoding (`_pngs`)
    # anyway, and this work fills those waits
    with Workers(1, "json") as side:
        written = side.submit(_write_json_files, result, folder, max_candidates)
        write_report(result, folder, report_candidates)
        written.result()


def _write_json_files(result: VoteResult, folder: Path, max_candidates: int) -> None:
    (folder / "tasks.json").write_text(dumps(lambda grid: tasks_json(result, max_candidates, grid)))
    (folder / "submission.json").write_text(json.dumps(submission(result)))
    if result.poe is not None:
        from eval.arc.poe import poe_json  # lazy: only with a product of experts

        (folder / "poe.json").write_text(json.dumps(poe_json(result.poe, max_candidates)))
        (folder / "submission_poe.json").write_text(json.dumps(result.poe.submission))


__all__ = ["ARC_PALETTE", "format_table", "output_names", "submission", "write_vote_files"]
