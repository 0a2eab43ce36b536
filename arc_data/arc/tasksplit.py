"""Which tasks a build holds, and whether their test inputs carry solutions (`build-arc`).

Two rules, both decided before anything is written:

- **Task-level hold-out.** `holdout_tasks=[names]` and/or `holdout_fraction=f` move whole tasks out
  of the build into a second dataset (`holdout_dir`): nothing of a held-out task (no demonstration,
  no augmentation, no identifier) is in `output_dir`, nor is any generated task that imitates it
  (`Task.imitates`: RE-ARC, ARC-GEN and BARC tasks, arc_data/arc/generated.py). The fraction is drawn from a pool (`all`
  tasks, or only the `evaluation` tasks) by `numpy.random.Generator(PCG64([seed, 1]))`: the pool in
  source order is permuted and the first `round(f * len(pool))` tasks are held out, so the choice
  depends only on the sources, the pool and the seed (not on `num_aug`). Every held-out task is an
  evaluation task of the second dataset: its demonstrations (and their augmentations) go to
  `train`, its test inputs to `test`.
- **Labels.** `test_labels=required` (the default, a labelled evaluation) refuses a test pair
  without an output and a Kaggle challenges file without its solutions file. `test_labels=optional`
  accepts them: such a task is always an evaluation task (its test inputs cannot train anything),
  its test pairs are written with an empty output (every label cell PAD, so the loader ignores
  them), and every later step sees an unlabelled test input by its all-PAD label.
- **Validation without the test inputs.** `validation_dir=PATH` writes a third dataset of the
  evaluation tasks whose test inputs are scored or submitted (the held-out ones with a hold-out,
  else those of `output_dir`): each task's last demonstration is its one labelled test pair, the
  rest its demonstrations (`validation_tasks`). Adapting on it and scoring every checkpoint
  (`evaluate all_checkpoints=true`) picks a step count without looking at a test input.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from arc_data.arc.sources import Task
from arc_data.arc.tasklist import TaskList
from arc_data.errors import ArcError

LABEL_MODES = ("required", "optional")
HOLDOUT_POOLS = ("all", "evaluation")


def unlabelled_tasks(tasks) -> list[str]:
    """Names of the tasks with at least one test input without a solution (a generated table's
    tasks are all labelled)."""
    return [t.name for t in TaskList.of(tasks).lists() if any(out is None for _, out in t.test)]


def as_evaluation(tasks, names: set[str] | None = None) -> TaskList:
    """The tasks with `is_eval` set for those named (all when `names` is None); inputs untouched."""
    tl = TaskList.of(tasks)
    if names is None:
        mark = np.ones(len(tl), bool)
    elif names:
        mark = np.fromiter((n in names for n in tl.names()), bool, len(tl))
    else:
        return tl
    return tl.take(np.ones(len(tl), bool), tl.is_eval | mark)


def mode_line(tasks, where: str) -> str:
    """One line saying whether a build is labelled: every test input scored, or some not."""
    tl = TaskList.of(tasks)
    unl = unlabelled_tasks(tl)
    if not unl:
        return f"build-arc: {where}: labelled build (every test input has its solution; accuracy is computed)"
    tests, lo, ev = 0, 0, tl.is_eval  # the evaluation tasks' test pairs, a chunk of tasks at a time
    for _, n_test in tl.count_chunks(1 << 16):
        tests, lo = tests + int(n_test[ev[lo:lo + len(n_test)]].sum()), lo + len(n_test)
    missing = sum(out is None for t in tl.lists() for _, out in t.test)
    shown = ", ".join(unl[:3]) + (", ..." if len(unl) > 3 else "")
    return (f"build-arc: {where}: UNLABELLED build: {missing} of {tests} test inputs have no solution "
            f"({len(unl)} task(s): {shown}); they go to test/ without labels, and evaluate/vote write "
            "votes and submission.json but no accuracy for them")


def split_tasks(tasks, names: list[str], fraction: float, pool: str, seed: int) -> tuple[TaskList, TaskList]:
    """(kept, held out), each in source order. Unknown names are an error naming the first one.
    Tasks are found by index, their names made only for those asked for: a generated source's
    tasks stay rows of its table (`tasktable`)."""
    if pool not in HOLDOUT_POOLS:
        raise ArcError(f"holdout_pool={pool!r}: must be one of {', '.join(HOLDOUT_POOLS)}")
    if not (isinstance(fraction, (int, float)) and 0.0 <= fraction <= 1.0):
        raise ArcError(f"holdout_fraction={fraction!r}: must be in [0, 1]")
    tl = TaskList.of(tasks)
    if not names and fraction == 0:
        return tl, TaskList([])  # nothing held out (no mask a task long)
    wanted = set(names)
    found = {n: i for i, n in enumerate(tl.names()) if n in wanted} if wanted else {}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ArcError(f"holdout_tasks: task {unknown[0]} is in none of the sources "
                           f"({len(unknown)} unknown name(s))")
    held = np.zeros(len(tl), bool)
    held[list(found.values())] = True
    if fraction > 0:
        candidates = np.nonzero(tl.is_eval if pool == "evaluation" else np.ones(len(tl), bool))[0]
        rng = np.random.Generator(np.random.PCG64([seed, 1]))
        order = rng.permutation(len(candidates))
        held[candidates[order[: int(round(fraction * len(candidates)))]]] = True
    # strict: a generated task imitating a held-out task is held out of the pretraining set too
    held_names = {tl.name(int(i)) for i in np.nonzero(held)[0]}
    keep = ~held & ~tl.imitates_any(held_names) if held_names else ~held
    if held.any() and not keep.any():
        raise ArcError("holdout: every task is held out; nothing is left for output_dir")
    return tl.take(keep), tl.take(held, np.ones(len(tl), bool))


def imitations(tasks, held_names: list[str]) -> int:
    """How many tasks imitate one of the held-out tasks (those left out of the pretraining set)."""
    return int(TaskList.of(tasks).imitates_any(set(held_names)).sum()) if held_names else 0


def validation_tasks(tasks) -> tuple[list[Task], list[str]]:
    """Leave-one-out over the demonstrations, for picking a checkpoint without the test inputs:
    each evaluation task's last demonstration becomes its only (labelled) test pair and leaves its
    demonstrations; the task's real test inputs are not included. Tasks with a single
    demonstration are left out (returned by name)."""
    out, skipped = [], []
    tl = TaskList.of(tasks)
    for i in np.nonzero(tl.is_eval)[0]:
        t = tl[int(i)]
        if len(t.train) < 2:
            skipped.append(t.name)
            continue
        out.append(dataclasses.replace(t, train=t.train[:-1], test=[t.train[-1]]))
    return out, skipped
