"""`hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT`: predict, then score by task.

The steps every task shares run here: find the dataset's task (`eval.tasks.evaluation_for`), refuse
what cannot be served before the checkpoint is read, load the checkpoint (`hrm_deeploop.loading.load_model`,
refused in one line when this machine cannot hold it), check it fits the dataset. The rest is the
task's room (`eval.tasks.TaskEvaluation`): ARC predicts every augmented test copy and votes
(`eval.arc.evaluate`: predictions.npz, pass@K, submission.json, the report); Sudoku, Maze and any
other task are predicted and scored per ACT segment, with and without test-time augmentation
(`eval.puzzles.evaluate`: predictions.npz, metrics, pictures); docs/evaluation.md. With
`all_checkpoints=true` every checkpoint of a run is evaluated in turn (`eval.curve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from arc_data.files.guard import check_output_dir
from eval.evaluate_config import EvaluateConfig
from eval.tasks import TaskEvaluation, evaluation_for
from hrm_deeploop.errors import ConfigError, UserError


def _arc(task: str) -> TaskEvaluation:
    from eval.arc.evaluate import ArcEvaluation  # lazy: only the dataset's task room loads (PIL)

    return ArcEvaluation()


def _puzzles(task: str) -> TaskEvaluation:
    from eval.puzzles.evaluate import PuzzleEvaluation  # lazy: only the dataset's task room loads (numba)

    return PuzzleEvaluation(task)


# The task rooms that are not the puzzle scoring (which serves every grid task of
# `arc_data.puzzles.registry.TASKS` and any other dataset), by the task a dataset holds
# (`eval.tasks.evaluation_for`): a task with a room of its own adds its row. Imported when evaluate
# runs, so that `evaluate --help` starts without numba and the rooms' imports.
EVALUATIONS: dict[str, Callable[[str], TaskEvaluation]] = {"arc": _arc}


def run(c: EvaluateConfig) -> int:
    from hrm_deeploop import families  # lazy: the registry is light, the loaders it names are not

    for key in ("checkpoint", "data_dir", "output_dir"):
        if not getattr(c, key):
            raise ConfigError(f"{key} is not set (hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT)")
    out = check_output_dir(c.output_dir, [c.data_dir])
    if c.all_checkpoints:
        from eval.curve import evaluate_run  # lazy: only with all_checkpoints=true

        if (task := evaluation_for(c.data_dir, c.split, c.task)) != "arc":  # its curve is the vote's pass@K
            raise ConfigError(f"all_checkpoints=true draws ARC's pass@K against the step, but {c.data_dir} holds "
                              f"{task}: evaluate each checkpoints/step_N.pt on its own (checkpoint=RUN/checkpoints/"
                              "step_N.pt), each into its own output_dir")
        return evaluate_run(c, run)
    pred_path = out / "predictions.npz"
    if pred_path.exists() and not c.overwrite:
        raise UserError(f"'{pred_path}' exists; pass overwrite=true to replace it or choose another output_dir")
    task = evaluation_for(c.data_dir, c.split, c.task)
    if c.poe and task != "arc":
        raise ConfigError(f"poe=true: the product of experts scores ARC's candidates, but {c.data_dir} holds {task}")
    evaluation = EVALUATIONS.get(task, _puzzles)(task)
    evaluation.check(c, out)
    # torch and what imports it load once run() starts: importing this module stays light
    from hrm_deeploop.data.batches import open_dataset  # lazy: torch only once run() starts

    split = open_dataset(c.data_dir, c.split)  # the data's errors first, then the checkpoint's
    evaluation.check_split(c, split, out)
    fam = families.of_checkpoint(c.checkpoint)  # from the run's config where there is one: no weights read
    families.require(fam, "evaluate", f"checkpoint '{c.checkpoint}'")
    if c.halt_max_steps is not None and not fam.halts:  # it was accepted and did nothing
        raise ConfigError(f"halt_max_steps={c.halt_max_steps}: the ACT segments of a model that halts; a "
                          f"{fam.title} checkpoint runs the loops it was trained with (no ACT segments): drop it")
    return PREDICTORS[fam.predictor](c, evaluation, task, out, split)


def _canvas(c: EvaluateConfig, evaluation: TaskEvaluation, task: str, out: Path, split: Any) -> int:
    """A model that predicts canvases (LoopViT): its views of every ARC test copy, then the vote."""
    if task != "arc":
        raise ConfigError(f"a canvas model predicts ARC grids, but {c.data_dir} holds {task}")
    from eval.arc.canvas_views import evaluate_canvas  # lazy: only for canvas models

    return evaluate_canvas(c, evaluation, out)


def _sequence(c: EvaluateConfig, evaluation: TaskEvaluation, task: str, out: Path, split: Any) -> int:
    """A model that predicts token sequences (the ACT reasoners): every example of `split`, then
    the task's scoring (the ARC vote, or the puzzle scores)."""
    from hrm_deeploop import runtime  # lazy: torch only once run() starts
    from hrm_deeploop.data.batches import check_matches  # lazy: torch only once run() starts
    from hrm_deeploop.loading import load_model, table_rows  # lazy: torch only once run() starts

    env = runtime.setup(c.device)
    try:
        G = c.global_batch_size or (768 if env.device.type == "cuda" else 16 * env.world_size)
        loaded = load_model(c.checkpoint, env.device, c.dtype, seq_len=int(split.meta.seq_len), ema=c.ema,
                            batch=max(1, evaluation.rows_per_forward(G // env.world_size, split)), command="evaluate")
        rows = table_rows(loaded, c.data_dir)
        check_matches(loaded.config if rows is None else replace(loaded.config, num_puzzle_identifiers=int(
            split.meta.num_puzzle_identifiers)), split, str(Path(c.data_dir) / c.split),
            what=f"checkpoint '{loaded.path}'")
        trained = loaded.config.halt_max_steps
        runtime.print0(f"evaluate: {loaded.kind} {loaded.family.title} checkpoint {loaded.path} (step {loaded.step}, "
                       f"{loaded.weights} weights), "
                       f"{split.num_examples} examples of '{c.split}' ({task}), halt_max_steps={c.halt_max_steps or trained}"
                       + (f" (trained with {trained})" if c.halt_max_steps and c.halt_max_steps != trained else "")
                       + f", dtype={loaded.model.dtype}, world={env.world_size}")
        result = evaluation.predict(loaded, split, env, c, G, rows)
    finally:
        runtime.teardown()
    if env.is_main and result is not None:
        evaluation.publish(result, c, out)
    return 0


# how `evaluate` predicts with a family, by the predictor it declares (`Family.predictor`)
PREDICTORS: dict[str, Callable[[EvaluateConfig, TaskEvaluation, str, Path, Any], int]] = {
    "sequence": _sequence, "canvas": _canvas}
