"""Figure and tables for docs/results.md section 4.7 (ARC: held-out test inputs of simple tasks).

    PYTHONPATH=. python docs/figures/study_arc.py RUN_ROOT      # e.g. runs/study/arcpw

RUN_ROOT holds the dataset (`data/`), the training runs `<scheme>_<lr>[_s<seed>]/` (metrics.jsonl)
and their `evaluate` folders `eval_<scheme>_<lr>[_s<seed>]/` (predictions.npz), as written by the
commands in section 4.7. Prints, per run, the share of single augmented copies predicted exactly
(before any vote), the voted pass@K (HRM protocol) and, per test input, the votes of the true
output and its rank among the candidates; writes docs/figures/study_arc.png.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from eval.arc.vote import vote  # noqa: E402
from eval.predictions import load_predictions  # noqa: E402

FIG = Path(__file__).resolve().parent
SCHEMES = ("baseline", "deeploop")
COLORS = {"baseline": "tab:blue", "deeploop": "tab:red"}
RUN = re.compile(r"^(baseline|deeploop)_([0-9.e-]+?)(?:_s(\d+))?$")


def runs(root: Path) -> list[tuple[str, str, int, Path]]:
    if not root.is_dir():
        raise SystemExit(f"{root}: no such run folder")
    out = []
    for d in sorted(root.iterdir()):
        m = RUN.match(d.name)
        if m and (root / f"eval_{d.name}" / "predictions.npz").exists():
            out.append((m[1], m[2], int(m[3] or 0), d))
    return sorted(out, key=lambda r: (SCHEMES.index(r[0]), float(r[1]), r[2]))


def curve(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], 100 * r["eval/exact_accuracy"]) for r in rows if "eval/exact_accuracy" in r]


def vote_figures(eval_dir: Path, data: Path) -> tuple[int, int, dict, list[str], list[str]]:
    """(exact single copies, copies, pass@K scores by the HRM protocol, tasks solved at pass@2,
    one line per test input: its truth's votes and rank) of one `evaluate` folder."""
    res = vote(load_predictions(eval_dir / "predictions.npz"), data)
    rows = exact = 0
    lines = []
    for task in res.tasks:
        for t in task.tests:
            truth = t.candidates[t.truth_rank].votes if t.truth_rank is not None else 0
            rows, exact = rows + t.num_votes, exact + truth
            rank = "-" if t.truth_rank is None else str(t.truth_rank + 1)
            lines.append(f"{task.name}: truth {truth}/{t.num_votes} votes, "
                         f"top candidate {t.candidates[0].votes}, truth rank {rank}")
    solved = [t.name for t in res.tasks if t.correct_at(2)]
    return exact, rows, res.scores["hrm"], solved, lines


def main(root: Path) -> int:
    found = runs(root)
    if not found:
        raise SystemExit(f"no finished runs with an eval_* folder under {root}")
    table = ["| scheme | lr | seed | exact single copies | pass@1 | pass@2 | pass@10 | tasks solved (pass@2) |",
             "|---|---|---|---|---|---|---|---|"]
    cells = sorted({(scheme, lr) for scheme, lr, _, _ in found}, key=lambda c: (SCHEMES.index(c[0]), float(c[1])))
    summary: dict[tuple[str, str], list[tuple[float, float, float]]] = {c: [] for c in cells}
    detail = []
    for scheme, lr, seed, run in found:
        exact, rows, s, solved, lines = vote_figures(root / f"eval_{run.name}", root / "data")
        detail += [f"{scheme} s{seed} {line}" for line in lines]
        table.append(f"| {scheme} | {lr} | {seed} | {100 * exact / rows:.1f}% ({exact}/{rows}) | {s['1']:.1f} | "
                     f"{s['2']:.1f} | {s['10']:.1f} | {', '.join(solved) or '-'} |")
        summary[(scheme, lr)].append((100 * exact / rows, s["1"], s["2"]))
    print("\n".join(table), "\n")
    for (scheme, lr), vals in summary.items():
        cols = list(zip(*vals))
        print(f"{scheme} lr {lr}: {len(vals)} seeds, mean exact copies {statistics.mean(cols[0]):.1f}% "
              f"[{min(cols[0]):.1f}, {max(cols[0]):.1f}], mean pass@1 {statistics.mean(cols[1]):.1f}, "
              f"mean pass@2 {statistics.mean(cols[2]):.1f}")
    print("\n" + "\n".join(detail))

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    style = {c: (COLORS[c[0]], "-" if i == 0 or c[0] != cells[i - 1][0] else "--") for i, c in enumerate(cells)}
    labelled = set()
    for scheme, lr, _seed, run in found:
        steps, ex = zip(*curve(run))
        colour, line = style[(scheme, lr)]
        a.plot(steps, ex, color=colour, linestyle=line, alpha=0.6, marker="o", ms=3,
               label=None if (scheme, lr) in labelled else f"{scheme} (lr {lr})")
        labelled.add((scheme, lr))
    a.set(xlabel="training step", ylabel="held-out copies exact (%)",
          title="single augmented test copies, no vote")
    a.legend()
    labels = ["single copies exact", "voted pass@1", "voted pass@2"]
    width = 0.8 / len(cells)
    for i, cell in enumerate(cells):
        colour, line = style[cell]
        for j in range(3):
            ys = [v[j] for v in summary[cell]]
            xs = [j + (i - (len(cells) - 1) / 2) * width] * len(ys)
            b.scatter(xs, ys, color=colour, alpha=0.7, marker="o" if line == "-" else "s",
                      label=f"{cell[0]} (lr {cell[1]})" if j == 0 else None)
            b.hlines(statistics.mean(ys), xs[0] - width / 3, xs[0] + width / 3, color=colour, linestyle=line)
    b.set_xticks(range(3), labels)
    b.set(ylabel="%", title="the vote over 9 copies (one dot per seed, line = mean)")
    b.legend()
    fig.suptitle("Tiny HRM, 8 held-out ARC-1 test inputs of simple tasks, 1500 steps")
    fig.tight_layout()
    fig.savefig(FIG / "study_arc.png", dpi=110)
    print(f"\nwrote {FIG / 'study_arc.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/study/arcpw")))
