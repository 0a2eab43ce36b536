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
from arc_data.errors import ArcError

LABEL_MODES = ("required", "optional")
HOLDOUT_POOLS = ("all", "evaluation")


def unlabelled_tasks(tasks: list[Task]) -> list[str]:
    """Names of the tasks with at least one test input without a solution."""
    return [t.name for t in tasks if any(out is None for _, out in t.test)]


def as_evaluation(tasks: list[Task], names: set[str] | None = None) -> list[Task]:
    """The tasks with `is_eval` set for those named (all when `names` is None); copies, inputs untouched."""
    return [dataclasses.replace(t, is_eval=True) if names is None or t.name in names else t for t in tasks]


def mode_line(tasks: list[Task], where: str) -> str:
    """One line saying whether a build is labelled: every test input scored, or some not."""
    unl = unlabelled_tasks(tasks)
    tests = sum(len(t.test) for t in tasks if t.is_eval)
    if not unl:
        return f"build-arc: {where}: labelled build (every test input has its solution; accuracy is computed)"
    missing = sum(out is None for t in tasks for _, out in t.test)
    shown = ", ".join(unl[:3]) + (", ..." if len(unl) > 3 else "")
    return (f"build-arc: {where}: UNLABELLED build: {missing} of {tests} test inputs have no solution "
            f"({len(unl)} task(s): {shown}); they go to test/ without labels, and evaluate/vote write "
            "votes and submission.json but no accuracy for them")


def split_tasks(tasks: list[Task], names: list[str], fraction: float, pool: str,
                seed: int) -> tuple[list[Task], list[Task]]:
    """(kept, held out), each in source order. Unknown names are an error naming the first one."""
    if pool not in HOLDOUT_POOLS:
        raise ArcError(f"holdout_pool={pool!r}: must be one of {', '.join(HOLDOUT_POOLS)}")
    if not (isinstance(fraction, (int, float)) and 0.0 <= fraction <= 1.0):
        raise ArcError(f"holdout_fraction={fraction!r}: must be in [0, 1]")
    by_name = {t.name: t for t in tasks}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ArcError(f"holdout_tasks: task {unknown[0]} is in none of the sources "
                           f"({len(unknown)} unknown name(s))")
    held = set(names)
    if fraction > 0:
        candidates = [t.name for t in tasks if pool == "all" or t.is_eval]
        rng = np.random.Generator(np.random.PCG64([seed, 1]))
        order = rng.permutation(len(candidates))
        held |= {candidates[i] for i in order[: int(round(fraction * len(candidates)))]}
    # strict: a generated task imitating a held-out task is held out of the pretraining set too
    kept = [t for t in tasks if t.name not in held and not held.intersection(t.imitates)]
    out = [t for t in tasks if t.name in held]
    if held and not kept:
        raise ArcError("holdout: every task is held out; nothing is left for output_dir")
    return kept, as_evaluation(out)


def validation_tasks(tasks: list[Task]) -> tuple[list[Task], list[str]]:
    """Leave-one-out over the demonstrations, for picking a checkpoint without the test inputs:
    each evaluation task's last demonstration becomes its only (labelled) test pair and leaves its
    demonstrations; the task's real test inputs are not included. Tasks with a single
    demonstration are left out (returned by name)."""
    out, skipped = [], []
    for t in tasks:
        if not t.is_eval:
            continue
        if len(t.train) < 2:
            skipped.append(t.name)
            continue
        out.append(dataclasses.replace(t, train=t.train[:-1], test=[t.train[-1]]))
    return out, skipped
