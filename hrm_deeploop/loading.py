"""One `load_model` for every checkpoint a command reads (`eval/`, export, init_from, ttt): it
resolves the path (a run folder's latest `checkpoints/step_N.pt`, a step file, an exported folder,
`hf://OWNER/NAME`), reads it with the one safe loader (`checkpoint.load`: no code from the file),
asks the family registry which family the state is (`hrm_deeploop.families`: ours by its config's
model.name, official layouts by each family's recogniser) and lets that family build and load it.
A command that serves only some families names itself (`command=`): another family is refused in
one line, naming the commands that serve it, before any model is built. `table_rows` maps a
dataset's puzzle ids to the rows of a checkpoint that names them.

It sits above the families' readers (`hrm_deeploop.families`, which read through `checkpoint.py`,
`official.py` and `hub.py`) and the puzzle-row map (`data/rows.py`), and below its readers:
`eval/`, `training/adapt.py`, `export.py`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from arc_data.dataset import load_identifiers
from arc_data.errors import DatasetError
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import families
from hrm_deeploop.data.rows import row_map
from hrm_deeploop.errors import UserError
from hrm_deeploop.families.spec import LoadedModel, LoadOptions

__all__ = ["LoadedModel", "load_model", "table_rows"]


def load_model(path: str | Path, device: torch.device | str = "cpu", dtype: str = "auto",
               seq_len: int | None = None, ema: bool = True, batch: int = 0, num_rounds: int | None = None,
               command: str | None = None) -> LoadedModel:
    """Build the model a checkpoint holds and load its weights, in eval mode, whatever its family
    (`hrm_deeploop.families`). With `ema`, a checkpoint of ours that holds a weight average loads
    the average. A model this machine cannot hold (with `batch` rows per forward, if given) is
    refused in one line before it is built. `command`: the command asking; a family it does not
    serve is refused in one line before anything is built.

    An official RoPE reasoner checkpoint does not record the sequence length (HRM and TRM take it
    from the dataset): `seq_len` supplies it, default 900 (the ARC format). `num_rounds` (the looped
    GPT) sets the R it runs by default; `dtype` is the reasoners' (the others load in float32)."""
    p = ckpt.resolve(path)
    state = ckpt.load(p, map_location="cpu")
    if not isinstance(state, dict):
        raise UserError(f"checkpoint '{p}' is not a state dict or a train-state file")
    fam = families.of_state(p, state)
    if command is not None:
        families.require(fam, command, f"checkpoint '{p}'")
    opts = LoadOptions(device=device, dtype=dtype, seq_len=seq_len, ema=ema, batch=batch, num_rounds=num_rounds)
    held = ckpt.held_loader(p)  # a state held in memory may come with its loader (checkpoint.held; ttt's evaluations)
    loaded = fam.load(p, state, opts) if held is None else held(fam, p, state, opts)
    loaded.family = fam
    return loaded


def table_rows(loaded: LoadedModel, data_dir: str) -> torch.Tensor | None:
    """Dataset id -> puzzle-table row for a checkpoint that names its rows (None: ids are rows)."""
    if loaded.puzzle_names is None:
        return None
    try:
        names = load_identifiers(data_dir)
    except DatasetError as e:
        raise UserError(f"checkpoint '{loaded.path}' names its puzzle rows, and {e}") from None
    return row_map(loaded.puzzle_names, names, f"checkpoint '{loaded.path}' on '{data_dir}'")
