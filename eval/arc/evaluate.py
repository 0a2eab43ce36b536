"""ARC's part of `hrm-deeploop evaluate` (`eval.tasks.TaskEvaluation`): predict every augmented test
copy (`eval.predict.predict_split`), then vote over them (`eval.arc.vote`, skip with vote=false).

Writes `OUT/predictions.npz` (`eval.predictions`):

    puzzle_identifiers  int32   [n]       the example's puzzle id, as in the dataset
    inputs              uint8   [n, 900]  the example's input sequence
    predictions         uint8   [n, 900]  argmax token per position (augmented frame, label encoding)
    q_halt              float32 [n]       halting logit of the last segment

in dataset order, without padding rows; with poe=true `OUT/log_probs.npy` (`eval.arc.poe`: each
row's log-softmax, float16 [n, 900, 12]); with vote=true the vote's outputs (`eval.arc.report`;
with poe=true also poe.json and submission_poe.json, the product-of-experts ranking), all
published together.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arc_data.files.atomic import atomic_file
from eval.arc.poe import FILE as POE_FILE
from eval.arc.report import every_output, write_vote_files
from eval.arc.vote import VoteConfig, print_summary, read_table, vote_file
from eval.evaluate_config import EvaluateConfig
from eval.outputs import check_outputs, write_outputs
from eval.predict import predict_split
from eval.predictions import save_predictions
from hrm_deeploop.errors import ConfigError
from hrm_deeploop.loading import LoadedModel

if TYPE_CHECKING:
    from arc_data.dataset import PuzzleSplit
    from hrm_deeploop.runtime import Env

PREDICTIONS_FILE = "predictions.npz"


class ArcEvaluation:
    task = "arc"

    def check(self, c: EvaluateConfig, out: Path) -> None:
        if c.tta:
            raise ConfigError(f"tta={c.tta}: an ARC test split holds its augmented copies already (build-arc), and "
                              "the vote step votes over them; tta is for Sudoku and Maze datasets")
        if c.vote and c.split != "test":
            raise ConfigError(f"split={c.split} with vote=true: voting needs the untranslated test split; "
                              "pass vote=false to only write predictions.npz for another split")
        # fail before the (long) predict step, not after it: any output an earlier evaluate may have left
        check_outputs(out, (POE_FILE, *every_output()), c.overwrite, "vote" if c.vote else "evaluate")
        if c.vote:
            read_table(Path(c.data_dir))  # the augmentation table the vote reads: a corrupt one, now
            if c.challenges is not None:  # a missing, malformed or empty challenges file, now
                from eval.arc.arcprize import cover, read_json  # lazy: as the vote imports them

                cover({}, read_json(c.challenges, "challenges"), str(c.challenges))

    def check_split(self, c: EvaluateConfig, split: PuzzleSplit, out: Path) -> None:
        pass  # the split's sizes are ARC's (eval.tasks.evaluation_for); every example is one row

    def rows_per_forward(self, local_batch: int, split: PuzzleSplit) -> int:
        return local_batch  # ARC's batches are padded to the global batch

    def predict(self, loaded: LoadedModel, split: PuzzleSplit, env: Env, c: EvaluateConfig, global_batch_size: int,
                rows: Any) -> dict[str, np.ndarray] | None:
        return predict_split(loaded.model, split, env, global_batch_size, c.max_batches, c.progress, rows,
                             segments=c.halt_max_steps, log_probs=c.poe)

    def publish(self, preds: dict[str, np.ndarray], c: EvaluateConfig, out: Path) -> None:
        """predictions.npz and (vote=true) the vote's outputs, staged and published together: a vote
        that fails, a full disk or Ctrl-C publishes nothing, and an earlier good output stays."""
        pred_path = out / PREDICTIONS_FILE
        vc = VoteConfig(predictions=str(pred_path), data_dir=c.data_dir, output_dir=c.output_dir, split=c.split,
                        overwrite=c.overwrite, report=c.report, challenges=c.challenges,
                        log_probs=str(out / POE_FILE) if c.poe else None, poe_candidates=c.poe_candidates)
        result = None

        def write(stage: Path) -> None:
            nonlocal result
            save_predictions(stage / PREDICTIONS_FILE, preds["puzzle_identifiers"], preds["inputs"],
                             preds["predictions"], preds["q_halt"])
            if c.poe:
                with atomic_file(stage / POE_FILE) as f:
                    np.save(f, preds["log_probs"])
            if c.vote:
                result = vote_file(dataclasses.replace(vc, log_probs=vc.log_probs and str(stage / POE_FILE)),
                                   stage / PREDICTIONS_FILE)
                write_vote_files(result, stage, vc.max_candidates, vc.report, vc.report_candidates)

        # every output an earlier evaluate may have left (log_probs.npy, a vote's poe.json, its report): with
        # overwrite, those this run does not write are removed, so the folder never mixes two runs
        names = (PREDICTIONS_FILE, POE_FILE, *every_output())
        write_outputs(out, names, c.overwrite, "vote" if c.vote else "evaluate", "evaluate", write)
        print(f"wrote {pred_path} ({len(preds['q_halt'])} rows)")
        if result is not None:
            print_summary(result, out)
