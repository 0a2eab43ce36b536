"""Which evaluation a dataset gets: ARC's vote, or the puzzle evaluation (Sudoku, Maze, generic).

`arc_data.dataset.task_kind` says what a dataset holds ("arc", "sudoku", "maze", "generic");
`evaluate` sends ARC datasets to the ARC vote and every other task to `eval.puzzle_eval`, and the
ARC vote refuses anything that is not ARC with one line (`require_arc`).
"""

from __future__ import annotations

from pathlib import Path

from arc_data import format as fmt
from arc_data.dataset import DatasetMeta, read_meta, task_kind
from arc_data.errors import DatasetError
from arc_data.fsio import why_not_a_folder
from hrm_deeploop.errors import UserError

TASK_CHOICES = ("auto", "sudoku", "maze", "generic")  # `evaluate task=...`


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


def require_arc(data_dir: str | Path, split: str, what: str = "the vote") -> DatasetMeta:
    """Raise a one-line UserError unless `data_dir` is an ARC dataset in ARC's token format; returns
    the split's dataset.json. Cheap: reads manifest.json and dataset.json only."""
    root = Path(data_dir)
    try:
        meta = read_meta(root / split / fmt.META_FILE)
        kind = task_kind(root) if (root / fmt.MANIFEST_FILE).is_file() else None
    except DatasetError as e:
        raise UserError(str(e)) from None
    arc_tokens = meta.seq_len == fmt.SEQ_LEN and meta.vocab_size == fmt.VOCAB_SIZE
    if kind not in (None, "arc") or not arc_tokens:
        raise UserError(
            f"{what} is ARC's (dihedral + colour augmentations of 30x30 grids), but '{root}' is a "
            f"{kind or 'non-ARC'} dataset (seq_len {meta.seq_len}, vocab_size {meta.vocab_size}): score it with "
            f"`hrm-deeploop evaluate` (exact and token accuracy, tta=N voting; docs/evaluation.md)")
    return meta
