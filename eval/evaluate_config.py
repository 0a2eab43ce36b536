"""`hrm-deeploop evaluate`'s options (`EvaluateConfig`), apart from the command (`eval.evaluate`) so that
the task rooms that read them (`eval.tasks`, `eval.arc.evaluate`, `eval.puzzles.evaluate`) sit above
it and below the command, with no cycle; torch-free, so `evaluate --help` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from arc_data.puzzles.registry import TASKS
from hrm_deeploop.typed_config import at_least, device_name, one_of, optional_at_least

# `evaluate task=...`: the dataset's own (auto), a grid task of the registry (the one list of them), or
# generic (scored without cells to solve, augmentation or pictures)
TASK_CHOICES = ("auto", *TASKS, "generic")


@dataclass
class EvaluateConfig:
    """`hrm-deeploop evaluate`: predict every augmented test copy with a checkpoint, then vote."""

    checkpoint: str | None = None  # a run folder, step_N.pt, export, hf://, or an official file of a family it serves
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
    tta_seed: int = 0  # also seeds a LoopViT's random views
    passes: int = 10  # LoopViT: random views (scale, corner) of every copy, as the official --num-attempts
    report: bool = True  # report.html + report/*.png (ARC's vote report, or the puzzle pictures)
    report_puzzles: int = 6  # puzzles pictured in the report (Sudoku/Maze; half solved, half not)
    poe: bool = False  # ARC: also keep each row's log-probs (log_probs.npy) and rank by the product of experts
    poe_candidates: int = 10  # ARC with poe: count-first top candidates per test input that it re-ranks
    challenges: str | None = None  # ARC: submission.json covers every task and test input of this *_challenges.json
    all_checkpoints: bool = False  # checkpoint=RUN: every checkpoint into OUT/step_N/, then curve.json/png (eval/curve.py)

    def __post_init__(self) -> None:
        optional_at_least("global_batch_size", self.global_batch_size, 1)
        optional_at_least("max_batches", self.max_batches, 1)
        optional_at_least("halt_max_steps", self.halt_max_steps, 1)
        at_least("tta", self.tta, 0)
        at_least("tta_seed", self.tta_seed, 0)
        at_least("passes", self.passes, 1)
        at_least("report_puzzles", self.report_puzzles, 0)
        at_least("poe_candidates", self.poe_candidates, 1)
        one_of("task", self.task, TASK_CHOICES)
        device_name("device", self.device)
        one_of("dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        one_of("split", self.split, ("train", "test"))
