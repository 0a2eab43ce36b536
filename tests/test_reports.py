"""report.html of the ARC vote and of the puzzle evaluation: HTML tables (no Markdown pipes, no JSON
dump), the pictured candidate named, legible grids; metrics.md and pass_at_k.md byte for byte."""

import io

import numpy as np
import pytest
from PIL import Image

from arc_data import sudoku
from arc_data.arc.viz import LINE, PALETTE
from arc_data.puzzles.registry import TASKS
from eval.arc import report as R
from eval.arc.vote import vote, write_vote
from eval.html import Table, page
from eval.predictions import load_predictions, save_predictions
from eval.puzzles.report import Shown, markdown, picture, write_files
from tests.vote_helpers import make_split, predict, random_grid


def test_table_markdown_and_html():
    t = Table(["protocol", "exact"], [["a <b>", "1.00"], ["c", ""]])
    assert t.markdown() == "| protocol | exact |\n|---|---:|\n| a <b> | 1.00 |\n| c |  |"
    h = t.html()
    assert h.startswith("<table>") and "<th class='r'>exact</th>" in h and "a &lt;b&gt;" in h and "|" not in h
    assert Table(["s", "x"], [["1", "2"]], align="rr").markdown().splitlines()[1] == "|---:|---:|"
    with pytest.raises(AssertionError, match="2 columns"):
        Table(["a", "b"], [["1"]])
    assert "<style>" in page("t", ["<p>x</p>"]) and page("t", []).endswith("</html>\n")


# ---------------------------------------------------------------- ARC


@pytest.fixture(scope="module")
def arc(tmp_path_factory):
    """small: 3x3, the truth voted second; big: 30x30, every copy right; eight copies each."""
    rng = np.random.default_rng(1)
    tasks = {"small": [(random_grid(rng, 3, 4), np.arange(9, dtype=np.uint8).reshape(3, 3))],
             "big": [(random_grid(rng), rng.integers(0, 10, (30, 30)).astype(np.uint8))]}
    root = tmp_path_factory.mktemp("arc_report")
    split = make_split(root / "data", tasks, num_aug=7)
    wrong = np.full((3, 3), 4, np.uint8)
    grids, seen = [], 0
    for e in range(len(split.example_task)):
        name = list(tasks)[split.example_task[e]]
        seen += name == "small"
        grids.append(wrong if name == "small" and seen <= 5 else tasks[name][0][1])
    preds = predict(split, np.arange(len(grids)), grids, [0.0] * len(grids))
    path = save_predictions(root / "p.npz", preds.puzzle_identifiers, preds.inputs, preds.predictions, preds.q_halt)
    result = vote(load_predictions(path), root / "data")
    write_vote(result, root / "out")
    return result, root / "out", tasks


def test_arc_report_html_tables_no_json(arc):
    result, out, _ = arc
    html = (out / "report.html").read_text()
    assert html.count("<table>") == 2 + 2  # pass@K, statistics, one candidate table per task
    assert "|---" not in html and "<pre>" not in html and "&quot;num_rows&quot;" not in html
    assert "<td class='l'>num_votes</td><td class='r'>16</td>" in html
    assert "pass@2 (ARC Prize rule), on submission.json" in html  # the HTML table has every row of pass_at_k.md
    small = html[html.index("small: "):]
    assert "<td class='r'>1</td><td class='r'>5</td>" in small and "<td class='r'>2</td><td class='r'>3</td>" in small
    assert (out / "pass_at_k.md").read_text() == R.format_table(result.scores) + "\n"
    assert R.format_table(result.scores).splitlines()[:2] == [
        "| protocol | pass@1 | pass@2 | pass@10 | pass@100 | pass@1000 |", "|---|---:|---:|---:|---:|---:|"]


def test_arc_picture_cells_lines_and_palette(arc):
    result, out, tasks = arc
    by_name = {t.name: t for t in result.tasks}
    assert R.cell_size(by_name["big"], 3) == R.MIN_CELL == 8  # a 30x30 grid: 8 px cells, 241 px
    assert R.cell_size(by_name["small"], 3) == R.MAX_CELL  # 3x3 grids: no thumbnails
    img = Image.open(out / "report" / "big.png")
    assert img.mode == "P" and img.width >= 2 * (30 * 8 + 1)  # truth and one candidate at least
    rgb = np.asarray(img.convert("RGB"))
    want = PALETTE[tasks["big"][0][1]].repeat(8, 0).repeat(8, 1)  # the truth's cells, 8 px each
    # the truth's panel: top-left corner on a grid line, its first cell's colour inside
    line = (rgb == LINE).all(-1)
    first = np.zeros_like(line)
    first[:-4, :-4] = (rgb[4:, 4:] == want[4, 4]).all(-1)
    hits = [(y, x) for y, x in np.argwhere(line & first) if y + 241 <= rgb.shape[0] and x + 241 <= rgb.shape[1]
            and line[y:y + 241:8, x].all() and line[y, x:x + 241:8].all()
            and (rgb[y + 4:y + 240:8, x + 4:x + 240:8] == want[4::8, 4::8]).all()]
    assert hits, "no 30x30 grid of 8 px cells with grid lines in the ARC palette"
    y, x = hits[0]
    inner = rgb[y:y + 240, x:x + 240].copy()
    inner[::8, :] = want[::8, :]
    inner[:, ::8] = want[:, ::8]
    assert (inner == want).all() and (rgb[y + 240, x:x + 241] == LINE).all()  # closed on the right and bottom too


# ---------------------------------------------------------------- puzzles


def _metrics(tta: int) -> dict:
    acc = {"exact_accuracy": 50.0, "token_accuracy": 90.0, "solve_token_accuracy": 80.0}
    seg = {"segment": 1, **acc, "halted_by_here": 0.0}
    m = {"task": "sudoku", "num_examples": 2, "split": "test", "segments": 1, "halt_max_steps_trained": 1,
         "cells_to_solve": "the blank cells of the input", "tta": {"copies": tta},
         "final": {"no_tta": acc}, "q_halt": {"no_tta": {**acc, "mean_segments": 1.0}}, "per_segment": [seg]}
    if tta:
        m["final"]["tta"] = {**acc, "pass@2": 100.0}
        m["q_halt"]["tta"] = {**acc, "pass@2": 100.0, "mean_segments": 1.0}
        seg.update({"tta_exact_accuracy": 50.0, "tta_pass@2": 100.0})
    return m


MD_TTA = """# sudoku evaluation: 2 examples of 'test', 1 segments (trained with 1)

Accuracies in percent. Cells to solve: the blank cells of the input.

| protocol | exact | token | solve-token | pass@2 |
|---|---:|---:|---:|---:|
| last segment (1), no TTA | 50.00 | 90.00 | 80.00 | - |
| last segment, TTA vote over 1 + 3 copies (top-1) | 50.00 | 90.00 | 80.00 | 100.00 |
| first Q halt (mean 1.00 segments), no TTA | 50.00 | 90.00 | 80.00 | - |
| first Q halt per copy (mean 1.00), TTA vote | 50.00 | 90.00 | 80.00 | 100.00 |

Per segment (the prediction after segment s; no TTA unless marked):

| segment | exact | token | solve-token | Q halted by here | TTA exact | TTA pass@2 |
|---:|---:|---:|---:|---:|---:|---:|
| 1 | 50.00 | 90.00 | 80.00 | 0.00 | 50.00 | 100.00 |
"""


def _shown(candidate: str, wrong_given: bool = False) -> Shown:
    puzzle, solution, _, _ = sudoku.generate(np.random.default_rng(0), 4)
    x, y = puzzle.astype(np.uint8) + 1, solution.astype(np.uint8) + 1
    p = y.copy()
    if wrong_given:
        c = int(np.flatnonzero(x != 1)[0])
        p[c] = 2 + (int(y[c]) - 1) % 4
    return Shown(0, x, y, p, not wrong_given, f"example 0: ...; pictured: {candidate}", candidate)


def test_puzzle_metrics_md_unchanged():
    assert markdown(_metrics(3)) == MD_TTA
    plain = markdown(_metrics(0))
    assert "| protocol | exact | token | solve-token |\n|---|---:|---:|---:|\n" in plain and "TTA exact" not in plain and "TTA vote" not in plain


def test_puzzle_report_html_tables_and_pictured_candidate(tmp_path):
    shown = [_shown("top-1 vote: copy 2, 3 of 4 votes"), _shown("copy 0 (the input as stored, no TTA)", True)]
    write_files(tmp_path, _metrics(3), TASKS["sudoku"], shown, None)  # what evaluate stages (eval.outputs publishes)
    html = (tmp_path / "report.html").read_text()
    assert html.count("<table>") == 2 and "|---" not in html and "<pre>" not in html
    assert "<td class='l'>last segment, TTA vote over 1 + 3 copies (top-1)</td>" in html
    assert "pictured: top-1 vote: copy 2, 3 of 4 votes" in html and "Colours: givens black" in html
    assert (tmp_path / "metrics.md").read_text() == MD_TTA
    # the candidate is written into the picture: another candidate, other pixels (above the boards only)
    a = np.asarray(Image.open(io.BytesIO(picture(TASKS["sudoku"], shown[0]))).convert("L"))
    b = np.asarray(Image.open(io.BytesIO(picture(TASKS["sudoku"], _shown("copy 0 (the input as stored, no TTA)")))).convert("L"))
    rows = np.flatnonzero((a != b).any(axis=1)) if a.shape == b.shape else np.array([0])
    assert len(rows) and rows.max() < a.shape[0] - 4 * 20  # differs in the label and caption, not the board
