"""The ARC Prize side of a vote: `submission.json` (two attempts per test input) and its official score.

Submission format (ARC Prize / Kaggle): `{task_id: [{"attempt_1": grid, "attempt_2": grid}, ...]}`,
one entry per test input in the task's order; a grid is a list of rows of integers 0..9.

Official rule ("pass@2 (ARC Prize rule)", arcprize/arc-agi-benchmarking `scoring.py`): a test input
is solved when either attempt equals its solution exactly; a task's score is the fraction of its test
inputs solved; the total is the mean of the task scores. Our denominator is every task of the
solutions (a task the submission leaves out scores 0); the official scorer averages over the tasks
it finds submission files for, so on a partial submission its total is ours times
(tasks with solutions) / (tasks submitted); `benchmarks/compare_reference_arc_scorer.py` checks
both, task by task, on the same file. HRM's rule (every test input of a task right) is
`vote.pass_at_k`'s `hrm` row; the ARC Prize rule gives partial credit like its `fractional` row,
but on the two attempts actually submitted (empty candidates are skipped there).

Malformed entries are scored, never fatal: an entry that is not a list, an attempt that is not a
grid or is missing counts as a wrong attempt, with a warning naming the task and test input. A cell
that is a float of integral value (1.0) is that integer, as the official scorer reads it (pydantic's
lax `List[List[int]]`); any other float (1.5) makes the attempt wrong (the official scorer raises).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from hrm_deeploop.errors import UserError

MISSING = "???"  # omegaconf.MISSING (a required field): `vote` imports this module, not omegaconf

ATTEMPTS = ("attempt_1", "attempt_2")
LABEL = "pass@2 (ARC Prize rule)"
Grid = list[list[int]]


def submission(tasks: list[Any]) -> dict[str, list[dict[str, Grid]]]:
    """Two attempts per test input of every task (`eval.arc.vote.TaskResult`s; not imported: vote imports this): the top two non-empty candidates; with one, it fills
    both; with none (a test input nothing was predicted for), [[0]] twice."""
    out: dict[str, list[dict[str, Grid]]] = {}
    for task in tasks:
        entries = []
        for t in task.tests:
            grids = []
            for c in t.candidates:  # the first two (not every candidate read: `results.Ranked` makes them when read)
                if c.grid is not None and c.shape != (0, 0):
                    grids.append(c.grid)
                    if len(grids) == 2:
                        break
            if not grids:
                grids = [np.zeros((1, 1), dtype=np.uint8)]
            if len(grids) < 2:
                grids.append(grids[0])
            entries.append({a: np.asarray(g).tolist() for a, g in zip(ATTEMPTS, grids)})
        out[task.name] = entries
    return out


def cover(sub: dict[str, list[dict[str, Grid]]], challenges: dict[str, Any], where: str
          ) -> tuple[dict[str, list[dict[str, Grid]]], list[str]]:
    """The submission over every task and test input of a challenges file (in its order): a task or
    test input the vote has nothing for gets [[0]] twice. Returns (submission, warnings)."""
    if not isinstance(challenges, dict):
        raise UserError(f"{where}: not a JSON object mapping task ids to tasks")
    if not challenges:
        raise UserError(f"{where}: holds no tasks (an empty JSON object)")
    warnings = []
    out: dict[str, list[dict[str, Grid]]] = {}
    for name, task in challenges.items():
        if not isinstance(task, dict) or not isinstance(task.get("test"), list):
            raise UserError(f"{where}: task {name}: not a task with a 'test' list")
        if not task["test"]:
            raise UserError(f"{where}: task {name}: no test inputs (an empty 'test' list)")
        have = sub.get(name, [])
        if name not in sub:
            warnings.append(f"task {name} of {Path(where).name} is not in the dataset: submitted as [[0]]")
        elif len(have) != len(task["test"]):
            raise UserError(f"{where}: task {name}: {len(task['test'])} test inputs, but the dataset has {len(have)}")
        out[name] = [have[i] if i < len(have) else {a: [[0]] for a in ATTEMPTS} for i in range(len(task["test"]))]
    extra = sorted(set(sub) - set(out))
    if extra:
        warnings.append(f"{len(extra)} dataset task(s) are not in {Path(where).name} (e.g. {extra[0]}); left out")
    return out, warnings


def solutions_of(tasks: list[Any]) -> dict[str, list[Grid]]:
    """{task: [solution grid per test input]} of labelled vote results."""
    return {t.name: [np.asarray(r.test.truth_grid).tolist() for r in t.tests] for t in tasks}


def read_json(path: str | Path, what: str) -> Any:
    """A user's JSON file through the one reader (`arc_data.files.jsonio`: a regular file, valid JSON,
    no key twice in one object, not nested beyond the parser), its refusal a UserError."""
    from arc_data.errors import DatasetError  # lazy: `score --help` skips it
    from arc_data.files.jsonio import read_json as read  # lazy: `score --help` skips it

    try:
        return read(path, what)
    except DatasetError as e:
        raise UserError(str(e)) from None


@dataclass
class PrizeScore:
    tasks: dict[str, float]  # task -> fraction of its test inputs solved
    warnings: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        """Mean task score over every task of the solutions."""
        return float(np.mean(list(self.tasks.values()))) if self.tasks else 0.0

    @property
    def percent(self) -> float:
        return 100.0 * self.total


def _is_grid(g: Any) -> bool:
    if not (isinstance(g, list) and len(g) > 0 and all(isinstance(r, list) and len(r) > 0 for r in g)):
        return False
    # every cell a plain int (the usual grid) in one pass over the cells, else row by row
    return set(map(type, chain.from_iterable(g))) == {int} or all(map(_int_row, g))


def _int_row(row: list) -> bool:
    """Every cell an int and not a bool, or a float of integral value (1.0: the official scorer's
    pydantic `List[List[int]]` reads it as 1, and 1.0 == 1); a row of plain ints (the usual one)
    without a test per cell."""
    if set(map(type, row)) == {int}:
        return True
    return all((isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
               for v in row)


def arc_prize_score(sub: Any, solutions: dict[str, list[Grid]]) -> PrizeScore:
    """Score a submission (parsed JSON) against {task: [solution grid, ...]} by the official rule."""
    if not isinstance(sub, dict):
        return PrizeScore({t: 0.0 for t in solutions}, ["submission is not a JSON object of task ids: every task 0"])
    scores: dict[str, float] = {}
    warnings: list[str] = []
    for name, truths in solutions.items():
        entries = sub.get(name)
        if entries is None:
            warnings.append(f"task {name}: not in the submission, scored 0")
            entries = []
        elif not isinstance(entries, list):
            warnings.append(f"task {name}: entry is not a list of test inputs, scored 0")
            entries = []
        elif len(entries) != len(truths):
            warnings.append(f"task {name}: {len(entries)} entries for {len(truths)} test inputs")
        solved = 0
        for i, truth in enumerate(truths):
            entry = entries[i] if i < len(entries) else None
            if not isinstance(entry, dict):
                if i < len(entries):
                    warnings.append(f"task {name} test input {i}: entry is not an object of attempts")
                continue
            attempts = [entry.get(a) for a in ATTEMPTS]
            grids = [_is_grid(g) for g in attempts]
            bad = [a for a, ok in zip(ATTEMPTS, grids) if not ok]
            if bad:
                warnings.append(f"task {name} test input {i}: {', '.join(bad)} missing or not a grid (wrong)")
            solved += any(ok and g == truth for ok, g in zip(grids, attempts))
        scores[name] = solved / len(truths) if truths else 0.0
    extra = sorted(set(sub) - set(solutions))
    if extra:
        warnings.append(f"{len(extra)} submitted task(s) have no solution (e.g. {extra[0]}); not scored")
    return PrizeScore(scores, warnings)


def load_solutions(path: str | Path) -> dict[str, list[Grid]]:
    """A Kaggle `*_solutions.json` ({task: [grid, ...]}), checked to be grids."""
    sol = read_json(path, "solutions")
    if not isinstance(sol, dict):
        raise UserError(f"solutions '{path}': not a JSON object mapping task ids to lists of grids")
    if not sol:
        raise UserError(f"solutions '{path}': holds no tasks (an empty JSON object): there is nothing to score")
    for name, grids in sol.items():
        if not isinstance(grids, list) or not all(_is_grid(g) for g in grids):
            raise UserError(f"solutions '{path}': task {name}: not a list of grids")
        if not grids:
            raise UserError(f"solutions '{path}': task {name}: no solution grids (an empty list): it cannot be scored")
    return sol


def ranked_pass_at_k(ranked: Any, solutions: dict[str, list[Grid]], ks: list[int], where: str = "ranked"
                     ) -> dict[str, dict[str, float | None]]:
    """pass@K (`eval.arc.results.pass_at_k`: HRM's rule and per test input) of ranked candidates,
    `{task: [[grid, ...] best first, per test input]}`, against the solutions; a task or test
    input without candidates is wrong."""
    from eval.arc.results import pass_at_k  # lazy: `score --help` skips it

    if not isinstance(ranked, dict):
        raise UserError(f"{where}: not a JSON object mapping task ids to ranked candidates")
    ranks = []
    for name, truths in solutions.items():
        tests = ranked.get(name, [])
        if not isinstance(tests, list):
            raise UserError(f"{where}: task {name}: not a list of candidate lists")
        ranks.append([next((j for j, g in enumerate(tests[i]) if g == truth), None)
                      if i < len(tests) and isinstance(tests[i], list) else None for i, truth in enumerate(truths)])
    return pass_at_k(ranks, ks)


# ---------------------------------------------------------------- the command


@dataclass
class ScoreConfig:
    """`hrm-deeploop score`: a submission.json against a *_solutions.json by the ARC Prize rule (a test input is
    solved when either attempt equals its solution; a task scores the fraction of its test inputs solved; the
    total is the mean over the solutions' tasks, a task left out scoring 0). Malformed entries count as wrong,
    with a warning naming the task."""

    submission: str = MISSING  # the submission.json (Kaggle format: {task: [{attempt_1, attempt_2}, ...]})
    solutions: str = MISSING  # the *_solutions.json ({task: [grid, ...]})
    output: str | None = None  # also write the scores here as JSON (total, per task, warnings)
    overwrite: bool = False  # replace an existing `output` file (never a folder, a device, a link or an input)
    quiet: bool = False  # the total only, no per-task lines
    ranked: str | None = None  # also pass@K of ranked candidates ({task: [[grid, ...] best first, per test input]})
    ks: list[int] = field(default_factory=lambda: [1, 2, 10])  # the Ks of pass@K with `ranked`


def run(c: ScoreConfig) -> int:
    if not c.ks or any(not isinstance(k, int) or k < 1 for k in c.ks):
        raise UserError(f"ks={c.ks}: must be a non-empty list of positive integers")
    target = None
    if c.output is not None:  # "may I write there" is decided before anything is read
        from arc_data.files.guard import check_output_file  # lazy: `score --help` skips it

        target = check_output_file(c.output, c.overwrite, [c.submission, c.solutions, *([c.ranked] if c.ranked else [])], "output",
                                   "score")
    sol = load_solutions(c.solutions)
    sub = read_json(c.submission, "submission")
    at_k = None  # every input read and checked before anything is printed
    if c.ranked:
        at_k = ranked_pass_at_k(read_json(c.ranked, "ranked"), sol, sorted(set(c.ks)), f"ranked={c.ranked}")
    score = arc_prize_score(sub, sol)
    for w in score.warnings:
        print(f"warning: {w}", file=sys.stderr)
    submitted = [t for t in score.tasks if isinstance(sub, dict) and t in sub]
    if not c.quiet:
        for name, v in score.tasks.items():
            print(f"  {name}: {v:.3f}{'' if name in submitted else '  (not submitted)'}")
    over_submitted = float(np.mean([score.tasks[t] for t in submitted])) if submitted else 0.0
    solved = sum(score.tasks.values())
    print(f"{LABEL}: {score.percent:.2f}% ({solved:g} of {len(score.tasks)} tasks' worth of test inputs solved; "
          f"{100 * over_submitted:.2f}% over the {len(submitted)} tasks submitted, the official scorer's denominator)")
    if at_k is not None:
        print("pass@K of the ranked candidates: " + ", ".join(
            f"pass@{k} {at_k['hrm'][k]:.2f}% (per test input {at_k['fractional'][k]:.2f}%)" for k in at_k["hrm"]))
    if target is not None:
        from arc_data.files.publish import publish_file  # lazy: `score --help` skips it

        record = {"rule": LABEL, "percent": score.percent, "percent_over_submitted": 100 * over_submitted,
                  "num_tasks": len(score.tasks), "num_submitted": len(submitted), "tasks": score.tasks,
                  "warnings": score.warnings, "submission": str(c.submission), "solutions": str(c.solutions)}
        if at_k is not None:
            record |= {"pass_at_k": at_k, "ranked": str(c.ranked)}
        publish_file(target, (json.dumps(record, indent=1) + "\n").encode())
    return 0
