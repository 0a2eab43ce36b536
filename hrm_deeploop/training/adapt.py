"""`train init_from=CKPT`: start a run from a trained HRM / TRM / URM checkpoint on tasks it has not seen.

Why an option of `train` and not an `adapt` command: adaptation is training, with a different
starting point. As an option it keeps everything the trainer has (resume, NaN guard, logging,
torchrun, checkpoints, `train.time_budget`) and every `train.*` / `optim.*` key, with nothing to
keep in sync between two commands.

What it does, before the first step (`prepare`, then `Trainer` applies it):
- the checkpoint is read by `hrm_deeploop.loading.load_model` (ours, HRM's or TRM's, official layouts too;
  with its weight average when it has one); the model and scaling configs are the checkpoint's;
- the puzzle-embedding table is rebuilt for the new dataset's identifiers, matched **by name**
  (the checkpoint's names: its `puzzle_names`, or the identifiers.json of the dataset it was trained
  on, or `adapt.identifiers=PATH`; an official checkpoint needs the last): a name the checkpoint
  knows keeps its trained row bit for bit, a new one starts as the mean of the trained rows
  (`adapt.new_rows=mean`, rows 1.. : row 0 is the blank padding id) or zeros (`zeros`).
  `adapt.old_rows=drop` keeps only the new dataset's rows (table = its identifiers);
  `keep` keeps every old row at its index and appends the new names after them, so the adapted
  model still serves the old tasks; the dataset's ids then map to table rows through `row_map`,
  which the trainer and `evaluate` apply by the names saved in the checkpoint (`puzzle_names`);
- what trains (`adapt.trains`): `all` (the network and the table, TRM's test-time-training recipe),
  `embeddings` (the table only: every dense parameter frozen), or `embeddings_then_all` (the table
  for `adapt.embedding_steps` steps, then everything);
- the optimiser state of the checkpoint is not carried over unless `adapt.optimizer_state=true`
  (ours only; the dense Adam moments, the table's optimiser is stateless).

Applies to tasks with one puzzle identifier per task (ARC: each task and augmentation has its own
row). Sudoku and Maze datasets have a single identifier (the blank one): there is no table to grow,
so init_from there is plain fine-tuning from the checkpoint's weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from arc_data.dataset import load_identifiers
from arc_data.errors import DatasetError
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.data.batches import check_matches
from hrm_deeploop.data.rows import row_map
from hrm_deeploop.errors import UserError
from hrm_deeploop.loading import load_model
from hrm_deeploop.training.optim import dense_state

TABLE_KEY = "puzzle_emb.weights"


@dataclass
class Start:
    """What the trainer needs to start from a checkpoint."""

    model_config: Any  # the checkpoint's model config, num_puzzle_identifiers = the new table's rows
    scaling: Any
    weights: dict[str, torch.Tensor]  # the full state dict, the new table included
    puzzle_names: list[str] | None  # name of every table row (None: no table)
    row_map: torch.Tensor | None  # int64 [dataset ids]: dataset id -> table row (None: identity)
    optimizer: dict | None  # the checkpoint's dense optimiser state (adapt.optimizer_state)
    source: str  # for the log line
    kept_rows: int  # table rows copied from the checkpoint


def grow_table(old: torch.Tensor, old_names: list[str] | None, new_names: list[str], new_rows: str,
               old_rows: str) -> tuple[torch.Tensor, list[str], torch.Tensor | None, int]:
    """(table, its row names, dataset id -> row map or None for identity, rows copied).

    A row whose name the checkpoint knows is copied (bit for bit); row 0 (blank) is always copied.
    """
    known = {n: i for i, n in enumerate(old_names)} if old_names is not None else {}
    trained = old[1:] if old.shape[0] > 1 else old
    fill = trained.mean(dim=0) if new_rows == "mean" else torch.zeros(old.shape[1], dtype=old.dtype)
    if old_rows == "keep":
        names = list(old_names) if old_names is not None else [f"<row {i}>" for i in range(old.shape[0])]
        extra = [n for n in new_names[1:] if n not in known]
        names += extra
        table = torch.cat([old, fill.expand(len(extra), -1).to(old.dtype)]) if extra else old.clone()
        return table, names, row_map(names, new_names, "init_from"), old.shape[0]
    table = fill.expand(len(new_names), -1).to(old.dtype).clone()
    table[0] = old[0]
    copied = 1
    for i, n in enumerate(new_names[1:], start=1):
        j = known.get(n)
        if j is not None:
            table[i] = old[j]
            copied += 1
    return table, list(new_names), None, copied


def _checkpoint_names(loaded: Any, explicit: str | None) -> list[str] | None:
    """The names of the checkpoint's table rows: adapt.identifiers, its own record, or the
    identifiers.json of the dataset its run trained on; None when none of them is there."""
    if explicit:
        try:
            return load_identifiers(Path(explicit).parent if Path(explicit).is_file() else explicit)
        except DatasetError as e:
            raise UserError(f"adapt.identifiers: {e}") from None
    if loaded.puzzle_names is not None:
        return list(loaded.puzzle_names)
    data_dir = (loaded.run_config or {}).get("data_dir")
    if data_dir and (Path(data_dir) / "identifiers.json").is_file():
        return load_identifiers(data_dir)
    return None


def prepare(init_from: str, cfg: Any, data_dir: str, train_split: Any, load: Callable = load_model) -> Start:
    """Read the checkpoint and build the starting point for a run on `data_dir`; `load`: `load_model`,
    or one that hands back its model as read before (ttt's tasks in one process: nothing written into it)."""
    loaded = load(init_from, "cpu", "float32", seq_len=int(train_split.meta.seq_len), ema=True, command="train")
    where = str(loaded.path)
    weights = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    n_ids = int(train_split.meta.num_puzzle_identifiers)
    check_matches(replace(loaded.config, num_puzzle_identifiers=n_ids), train_split, f"{data_dir}/train",
                  what=f"checkpoint '{where}'")
    names, row_map, kept = None, None, 0
    if TABLE_KEY in weights:
        try:
            new_names = load_identifiers(data_dir)
        except DatasetError as e:
            raise UserError(f"init_from: the puzzle table is matched by name, and {e}") from None
        if len(new_names) != n_ids:
            raise UserError(f"{data_dir}: identifiers.json has {len(new_names)} names for {n_ids} puzzle identifiers")
        old_names = _checkpoint_names(loaded, cfg.adapt.identifiers)
        old = weights[TABLE_KEY]
        if old_names is not None and len(old_names) != old.shape[0]:
            raise UserError(f"init_from: {len(old_names)} identifier names for the {old.shape[0]} rows of the puzzle "
                            f"table of '{where}' (adapt.identifiers from another dataset?)")
        table, names, row_map, kept = grow_table(old, old_names, new_names, cfg.adapt.new_rows, cfg.adapt.old_rows)
        if old_names is None:
            kept = 1
        weights[TABLE_KEY] = table
    model_config = replace(loaded.config, num_puzzle_identifiers=weights[TABLE_KEY].shape[0]
                           if TABLE_KEY in weights else loaded.config.num_puzzle_identifiers)
    optimizer = None
    if cfg.adapt.optimizer_state:
        state = ckpt.load(loaded.path, map_location="cpu") if loaded.kind == "hrm-deeploop" else {}
        if "optimizers" not in state:
            raise UserError(f"adapt.optimizer_state=true: '{where}' holds no optimiser state (an official checkpoint?)")
        optimizer = dense_state(state["optimizers"], cfg.optim.name, f"adapt.optimizer_state=true: '{where}'")
    return Start(model_config, loaded.scaling, weights, names, row_map, optimizer,
                 f"{loaded.kind} {loaded.family.title} {where} (step {loaded.step}, {loaded.weights} weights)",
                 kept)


def dense_trainable(trains: str, embedding_steps: int, step: int) -> bool:
    """Whether the network's parameters train at `step` (1-based)."""
    return trains == "all" or (trains == "embeddings_then_all" and step > embedding_steps)
