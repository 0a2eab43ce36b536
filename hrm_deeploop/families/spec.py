"""What a model family declares for the commands (torchtitan's `TrainSpec`, read 2026-12-06), and
what a loaded checkpoint is. Torch-free: `--help` and the per-task plan read it without torch.

A family is one entry (`Family`) beside its model file and config: its config class, the command
that trains it, how its checkpoints are recognised and read (ours and the official ones), what an
export carries beside the weights, how `evaluate` predicts with it, what `init_from` and `ttt`
carry from its pretraining run, the figures its evaluation prints and its tiny flavour. Commands
look the family up (`hrm_deeploop.families`); none branches on a family's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREDICTORS = ("sequence", "canvas", "text")  # evaluate's token-sequence predictor, LoopViT's canvas views, text
METADATA = ("dataset", "tokenizer")  # what an export carries beside the weights


@dataclass
class LoadOptions:
    """How a command asks for a checkpoint: its device, dtype ('auto': the family's), the sequence
    length an official RoPE checkpoint does not record, the weight average, rows per forward (the
    memory check), the looped GPT's rounds."""

    device: Any = "cpu"
    dtype: str = "auto"
    seq_len: int | None = None
    ema: bool = True
    batch: int = 0
    num_rounds: int | None = None


@dataclass
class LoadedModel:
    model: Any  # the built module, in eval mode, on the asked device
    config: Any  # the family's config dataclass
    kind: str  # "hrm-deeploop" | "official"
    step: int | None
    path: Path
    weights: str = "raw"  # raw | ema (the weight average of our checkpoint) | official
    scaling: Any = None  # models.scaling.ScalingConfig
    puzzle_names: list[str] | None = None  # name of every puzzle-table row (adapted checkpoints: data/rows.py)
    run_config: dict | None = None  # the resolved config of the run that wrote it (ours), e.g. its data_dir
    family: Family | None = None  # set by `hrm_deeploop.loading.load_model`


@dataclass(frozen=True)
class GridRoom:
    """The largest grid side one `ttt` path can put on a checkpoint's model (`Family.grid_room`): a
    demonstration pair's, input or output (`train`: training draws its scale from 1 up), and a
    predicted pair's (`test`: a test input; with leave_one_out a held-out demonstration, its output
    too), what sets them as a user reads it (`holds`) and what a ttt user can change (`fix`)."""

    train: int
    test: int
    holds: str  # e.g. "its 16 x 16 canvas holds sides up to 14"
    fix: str  # what lets a task over `train` train, e.g. "a checkpoint with a larger canvas"
    test_fix: str = ""  # what else lets a task over `test` alone train, e.g. a lower evaluation scale


@dataclass(frozen=True)
class Family:
    """One model family, as every command needs it."""

    name: str  # model.name in our configs and checkpoints
    title: str  # as printed: HRM, TRM, URM, LoopViT, looped GPT
    config: type  # its config dataclass
    trainer: str  # the command that trains it (train, train-vit, train-gpt)
    evaluator: str  # the command that scores it (evaluate, eval-gpt)
    predictor: str  # PREDICTORS: how `evaluate` predicts with it
    commands: tuple[str, ...]  # every command that serves it
    load: Callable[[Path, dict, LoadOptions], LoadedModel]  # (resolved path, state read by the safe loader, options)
    metadata: str  # METADATA: what its export carries beside the weights
    describe: Callable[[dict, int | None], str]  # the model card's first line: (model config, parameters)
    official: Callable[[Path, dict], bool] | None = None  # whether a state read from a file is its official layout
    official_source: str = ""  # where its official checkpoints come from (docs, --help)
    adapts: bool = False  # takes `train`'s adapt.* (the puzzle table grown by name)
    official_loop: bool = False  # `ttt views=official` runs its official per-task loop
    lanes: str = ""  # "module:Class" that stacks its copies for `ttt copies=K` (pertask/build_lanes.py); "": one at a time
    halts: bool = False  # predicts a halting logit (q_halt): the vote's tie-break after votes
    carried: tuple[str, ...] = ()  # config sections/keys a checkpoint needs to run, carried by init_from and ttt
    figures: tuple[str, ...] = ()  # what its evaluation prints beside pass@K
    tiny: tuple[str, ...] = ()  # its trainer's overrides for the tiny CPU flavour (conformance tests, demos)
    # (checkpoint path, its state as the safe loader read it, the task trainer's composed config with
    # views=build or None, views) -> the grid sides that `ttt` path holds; None (or no callable): any ARC grid
    grid_room: Callable[[Path, dict, Any, str], GridRoom | None] | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def serves(self, command: str) -> bool:
        return command in self.commands
