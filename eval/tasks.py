"""Which evaluation a dataset gets, and what `evaluate` asks of a task's room.

`arc_data.dataset.task_kind` says what a dataset holds ("arc", "sudoku", "maze", "generic");
`evaluation_for` resolves it (with the `task=` override; the choices: `eval.evaluate_config`). `eval.evaluate` runs the task-neutral
steps (checkpoint, split, memory, the predictions layer of `eval.predict`) and hands the rest to the
task's `TaskEvaluation`: ARC's vote (`eval.arc.evaluate`) or the puzzle scoring
(`eval.puzzles.evaluate`, every other task). The ARC vote itself refuses anything that is not ARC
with one line (`eval.arc.vote.require_arc`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from arc_data import format as fmt
from arc_data.dataset import read_meta, task_kind
from arc_data.errors import DatasetError
from arc_data.files.names import why_not_a_folder
from eval.evaluate_config import EvaluateConfig
from hrm_deeploop.errors import UserError

if TYPE_CHECKING:  # annotations only: torch, which `evaluate --help` does without
    from arc_data.dataset import PuzzleSplit
    from hrm_deeploop.loading import LoadedModel
    from hrm_deeploop.runtime import Env

class TaskEvaluation(Protocol):
    """A task's part of `hrm-deeploop evaluate`, called in this order (eval.evaluate.run)."""

    task: str

    def check(self, c: EvaluateConfig, out: Path) -> None:
        """Before anything is read: refuse a request this task cannot serve and outputs that exist."""

    def check_split(self, c: EvaluateConfig, split: PuzzleSplit, out: Path) -> None:
        """Before the checkpoint is read: refuse what this split cannot serve (memory, sizes)."""

    def rows_per_forward(self, local_batch: int, split: PuzzleSplit) -> int:
        """Rows of one forward pass on one rank (the checkpoint's memory check)."""

    def predict(self, loaded: LoadedModel, split: PuzzleSplit, env: Env, c: EvaluateConfig, global_batch_size: int,
                rows: Any) -> Any:
        """Run the model on every rank; the result on rank 0, None on the others."""

    def publish(self, result: Any, c: EvaluateConfig, out: Path) -> None:
        """Rank 0, after the process group is gone: score and write every output, print one summary."""


def evaluation_for(data_dir: str | Path, split: str, override: str = "auto") -> str:
    """"arc" (predict, then ARC's vote) or the puzzle task to score ("sudoku", "maze", "generic").

    auto: the dataset's `task_kind`; a "generic" dataset in ARC's token format (seq_len 900,
    vocab_size 12: e.g. an ARC set from HRM's builder under other task names) keeps the ARC path it
    always had. `override` names the task of a dataset that does not say (no manifest: the reference
    builders' Sudoku and Maze sets read as "generic"); it cannot contradict a task the dataset records."""
    root = Path(data_dir)
    if not root.is_dir():
        raise UserError(f"data_dir '{root}' {why_not_a_folder(root)}")
    try:
        kind = task_kind(root)
        meta = read_meta(root / split / fmt.META_FILE)
    except DatasetError as e:
        raise UserError(str(e)) from None
    if override != "auto":
        if kind not in ("generic", override):
            raise UserError(f"task={override}: '{root}' is a {kind} dataset (manifest.json / dataset.json); "
                            "task= only names the task of a dataset that does not record one")
        return override
    if kind == "generic" and meta.seq_len == fmt.SEQ_LEN and meta.vocab_size == fmt.VOCAB_SIZE:
        return "arc"
    return kind
