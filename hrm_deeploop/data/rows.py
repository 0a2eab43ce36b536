"""Puzzle ids -> rows of a model's puzzle-embedding table, matched by name.

A model trained on one dataset has one table row per identifier of that dataset, in its order. A
model adapted with `old_rows=keep` (training/adapt.py) has more rows than a new dataset has ids,
in another order; its checkpoint records the name of every row (`puzzle_names`), and a dataset's
ids are mapped to rows through its identifiers.json before the model sees them. The map is applied
to the model's copy of the batch only: predictions keep the dataset's ids.
"""

from __future__ import annotations

import torch

from hrm_deeploop.errors import UserError


def row_map(table_names: list[str], dataset_names: list[str], where: str) -> torch.Tensor | None:
    """int64 [len(dataset_names)]: dataset id -> table row; None when they are the same list."""
    if list(table_names) == list(dataset_names):
        return None
    index = {n: i for i, n in enumerate(table_names)}
    missing = [n for n in dataset_names[1:] if n not in index]
    if missing:
        raise UserError(f"{where}: {len(missing)} puzzle identifier(s) of the dataset have no row in the checkpoint's "
                        f"puzzle table (e.g. {missing[0]}); adapt it to them first (train init_from=CKPT)")
    return torch.tensor([0] + [index[n] for n in dataset_names[1:]], dtype=torch.int64)


def map_rows(tensors: dict[str, torch.Tensor], rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The batch with its puzzle ids replaced by table rows (the same dict without a map)."""
    if rows is None:
        return tensors
    ids = tensors["puzzle_identifiers"]
    return {**tensors, "puzzle_identifiers": rows.to(ids.device)[ids.long()].to(ids.dtype)}
