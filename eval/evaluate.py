"""`hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT`: predict, then score by task.

The steps every task shares run here: find the dataset's task (`eval.tasks.evaluation_for`), refuse
what cannot be served before the checkpoint is read, load the checkpoint (`eval.checkpoints.load_model`,
refused in one line when this machine cannot hold it), check it fits the dataset. The rest is the
task's room (`eval.tasks.TaskEvaluation`): ARC predicts every augmented test copy and votes
(`eval.arc.evaluate`: predictions.npz, pass@K, submission.json, the report); Sudoku, Maze and any
other task are predicted and scored per ACT segment, with and without test-time augmentation
(`eval.puzzles.evaluate`: predictions.npz, metrics, pictures); docs/evaluation.md. With
`all_checkpoints=true` every checkpoint of a run is evaluated in turn (`eval.curve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from arc_data.files.guard import check_output_dir
from eval.tasks import TASK_CHOICES, TaskEvaluation, evaluation_for
from hrm_deeploop.config import at_least, device_name, one_of, optional_at_least
from hrm_deeploop.errors import ConfigError, UserError


def _arc(task: str) -> TaskEvaluation:
    from eval.arc.evaluate import ArcEvaluation

    return ArcEvaluation()


def _puzzles(task: str) -> TaskEvaluation:
    from eval.puzzles.evaluate import PuzzleEvaluation

    return PuzzleEvaluation(task)


# The task rooms, by the task a dataset holds (`arc_data.dataset.task_kind`): a new task adds its row.
# Imported when evaluate runs, so that `evaluate --help` starts without numba and the rooms' imports.
EVALUATIONS: dict[str, Callable[[str], TaskEvaluation]] = {
    "arc": _arc,
    "sudoku": _puzzles,
    "maze": _puzzles,
    "generic": _puzzles,
}


@dataclass
class EvaluateConfig:
    """`hrm-deeploop evaluate`: predict every augmented test copy with a checkpoint, then vote."""

    checkpoint: str | None = None  # <run>/checkpoints/step_N.pt, a run folder, or an official HRM/TRM <dir>/step_N
    data_dir: str | None = None
    output_dir: str | None = None
    split: str = "test"
    global_batch_size: int | None = None  # None: 768 on CUDA, 16 per rank on CPU
    device: str = "auto"
    dtype: str = "auto"  # auto: the checkpoint's forward_dtype on CUDA, float32 on CPU
    max_batches: int | None = None  # cap (quick looks and tests); the vote then sees a subset
    ema: bool = True  # use the weight average of a checkpoint trained with train.ema=true
    vote: bool = True  # ARC: run the vote step on the predictions (other tasks are always scored)
    overwrite: bool = False  # replace an existing OUT/predictions.npz
    progress: bool = True
    halt_max_steps: int | None = None  # ACT segments to run (None: the checkpoint's; more = deeper than trained)
    task: str = "auto"  # auto (the dataset's) | sudoku | maze | generic: for datasets that do not record it
    tta: int = 0  # Sudoku/Maze: augmented copies of every test input, voted count-first (0 = off)
    tta_seed: int = 0
    report: bool = True  # report.html + report/*.png (ARC's vote report, or the puzzle pictures)
    report_puzzles: int = 6  # puzzles pictured in the report (Sudoku/Maze; half solved, half not)
    challenges: str | None = None  # ARC: submission.json covers every task and test input of this *_challenges.json
    all_checkpoints: bool = False  # checkpoint=RUN: every checkpoint into OUT/step_N/, then curve.json/png (eval/curve.py)

    def __post_init__(self) -> None:
        optional_at_least("global_batch_size", self.global_batch_size, 1)
        optional_at_least("max_batches", self.max_batches, 1)
        optional_at_least("halt_max_steps", self.halt_max_steps, 1)
        at_least("tta", self.tta, 0)
        at_least("tta_seed", self.tta_seed, 0)
        at_least("report_puzzles", self.report_puzzles, 0)
        one_of("task", self.task, TASK_CHOICES)
        device_name("device", self.device)
        one_of("dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        one_of("split", self.split, ("train", "test"))


def run(c: EvaluateConfig) -> int:
    from eval.checkpoints import load_model, table_rows  # torch: here, so `evaluate --help` starts without it
    from hrm_deeploop import runtime
    from hrm_deeploop.data.puzzles import check_matches, open_dataset

    for key in ("checkpoint", "data_dir", "output_dir"):
        if not getattr(c, key):
            raise ConfigError(f"{key} is not set (hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT)")
    out = check_output_dir(c.output_dir, [c.data_dir])
    if c.all_checkpoints:
        from eval.curve import evaluate_run

        return evaluate_run(c, run)
    pred_path = out / "predictions.npz"
    if pred_path.exists() and not c.overwrite:
        raise UserError(f"'{pred_path}' exists; pass overwrite=true to replace it or choose another output_dir")
    task = evaluation_for(c.data_dir, c.split, c.task)
    evaluation = EVALUATIONS[task](task)
    evaluation.check(c, out)
    env = runtime.setup(c.device)
    try:
        split = open_dataset(c.data_dir, c.split)
        evaluation.check_split(c, split, out)
        G = c.global_batch_size or (768 if env.device.type == "cuda" else 16 * env.world_size)
        loaded = load_model(c.checkpoint, env.device, c.dtype, seq_len=int(split.meta.seq_len), ema=c.ema,
                            batch=max(1, evaluation.rows_per_forward(G // env.world_size, split)), gpt=False)
        rows = table_rows(loaded, c.data_dir)
        check_matches(loaded.config if rows is None else replace(loaded.config, num_puzzle_identifiers=int(
            split.meta.num_puzzle_identifiers)), split, str(Path(c.data_dir) / c.split),
            what=f"checkpoint '{loaded.path}'")
        trained = loaded.config.halt_max_steps
        runtime.print0(f"evaluate: {loaded.kind} {loaded.config.name.upper()} checkpoint {loaded.path} (step {loaded.step}, "
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
