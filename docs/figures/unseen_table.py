"""The unseen-tasks table of docs/unseen-tasks.md ("Measured on the 2-core CPU"), one row per seed.

    PYTHONPATH=. python docs/figures/unseen_table.py [--model hrm|trm] [root]    # default runs/study

Reads <root>/unseen_s<seed>/<model>_s<seed>/eval_{a,b,c,d}/tasks.json as benchmarks/study_unseen.py
writes them, and prints for each protocol: pass@1 and pass@2 by HRM's rule (a task counts when all
its test inputs are right), the exact copies (test copies whose prediction is the truth: the
truth's votes, of 9 test inputs x 9 copies) and, per solved or near task, the truth's rank.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
MODEL = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else "hrm"
ROOT = Path(next((a for a in ARGS if a != MODEL), "runs/study"))
NAMES = {"a": "(a) no adaptation", "b": "(b) embeddings only", "c": "(c) full fine-tune", "d": "(d) joint protocol"}


def cell(eval_dir: Path) -> str:
    if not (eval_dir / "tasks.json").is_file():
        return "not run"
    t = json.loads((eval_dir / "tasks.json").read_text())
    p = t["pass_at_k"]["hrm"]
    exact, copies, ranks = 0, 0, []
    for name, task in t["tasks"].items():
        for ti in task["test_inputs"]:
            copies += ti["num_votes"]
            hit = next((c for c in ti["candidates"] if c["correct"]), None)
            if hit is not None:
                exact += hit["votes"]
                ranks.append(f"{name} at rank {hit['rank']}")
    where = f" ({', '.join(ranks)})" if ranks else ""
    return f"{p['1']:.1f}, {p['2']:.1f}; {exact}/{copies}{where}"


def main() -> int:
    runs = sorted(ROOT.glob(f"unseen_s*/{MODEL}_s*"), key=lambda r: int(r.name.split("_s")[1]))
    print(f"| seed | {' | '.join(NAMES.values())} |")
    print("|---|" + "---|" * len(NAMES))
    for r in runs:
        print(f"| {r.name.split('_s')[1]} | " + " | ".join(cell(r / f"eval_{k}") for k in NAMES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
