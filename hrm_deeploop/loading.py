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
from hrm_deeploop import families, hub
from hrm_deeploop.data.rows import row_map
from hrm_deeploop.errors import UserError
from hrm_deeploop.families.spec import LoadedModel, LoadOptions

__all__ = ["LoadedModel", "check_same_puzzles", "load_model", "table_rows"]


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
    """Dataset id -> puzzle-table row for a checkpoint that names its rows (None: ids are rows, and
    `check_same_puzzles` has checked that they are)."""
    if loaded.puzzle_names is None:
        check_same_puzzles(loaded, data_dir)
        return None
    try:
        names = load_identifiers(data_dir)
    except DatasetError as e:
        raise UserError(f"checkpoint '{loaded.path}' names its puzzle rows, and {e}") from None
    return row_map(loaded.puzzle_names, names, f"checkpoint '{loaded.path}' on '{data_dir}'")


def check_same_puzzles(loaded: LoadedModel, data_dir: str) -> None:
    """A checkpoint whose table rows are its training dataset's puzzle ids (no `puzzle_names`) is
    evaluated on a dataset that names its puzzles as that one did, or refused in one line: two builds
    can hold as many identifiers and other puzzles (ARC-1's 400 training and 400 evaluation tasks at
    one num_aug), and each id would then read another puzzle's row. What the run trained on comes from
    an exported folder's identifiers.json, or a run folder's data_identity.json (the file's hash);
    official checkpoints and runs without either are not checked."""
    from arc_data.format import IDENTIFIERS_FILE  # lazy: only where a dataset is checked
    from hrm_deeploop.data.batches import file_identity  # lazy: only where a dataset is checked

    here = Path(data_dir) / IDENTIFIERS_FILE
    if loaded.kind != "hrm-deeploop" or not here.is_file():
        return
    path = Path(loaded.path)
    folder = hub.folder_of(path)
    hint = (f"checkpoint '{loaded.path}' was trained on another dataset than {data_dir} (its puzzle-table rows are "
            "that dataset's puzzle ids{}): evaluate it on the dataset it trained on, or adapt it to this one "
            "(train init_from=, ttt)")
    try:
        if (folder / IDENTIFIERS_FILE).is_file():  # an exported folder: the names themselves
            theirs, mine = load_identifiers(folder), load_identifiers(data_dir)
            if theirs != mine:
                row = next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine)))
                shown = (f"; row {row}: '{theirs[row]}' there, '{mine[row]}' here"
                         if row < min(len(theirs), len(mine)) else f"; {len(theirs)} names there, {len(mine)} here")
                raise UserError(hint.format(shown))
        elif (folder / ckpt.IDENTITY_FILE).is_file():
            import json  # lazy: only where a run folder is checked

            recorded = (json.loads((folder / ckpt.IDENTITY_FILE).read_text()).get("files") or {}).get(".") or {}
            saved = recorded.get(IDENTIFIERS_FILE)
            if isinstance(saved, dict) and saved.get("sha256") and saved.get("sha256") != file_identity(here)["sha256"]:
                raise UserError(hint.format(f"; its {ckpt.IDENTITY_FILE} records another {IDENTIFIERS_FILE}"))
    except (OSError, ValueError, AttributeError, DatasetError):
        return  # unreadable records: the checks above are a help, not a gate

