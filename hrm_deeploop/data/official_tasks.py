"""Which row of an official LoopViT file's task table serves which puzzle identifier of a dataset.

The official code (`src/ARC_loader.py:ARCDataset`, reference spec section 3.3) numbers the tasks of
the split it trains on from 0, in the sorted order of the split's `*.json` files; a RE-ARC file
(`re_arc/tasks/<id>.json`) takes the row of the ARC-1 task it is named after. The file keeps the
table (`task_token_embed.weight`) but not the names. A dataset of `build-arc` numbers its puzzle
identifiers otherwise: 0 is `<blank>`, then every task and its augmentations. So row i of the
official table is not identifier i, even when the counts are equal (each task would get the next
task's token).

The official order is established from the dataset itself: each identifier's base task (the
dataset's augmentation table, `arc_data.originals.load_aug_table`; a RE-ARC task of build-arc,
`rearc-<id>-<k>`, under the ARC-1 task `<id>` it imitates) is its official name. When the dataset
holds exactly as many distinct official names as the table has rows, they are taken to be the
official run's split, in the official sort order (`<name>.json`), and identifier i is served by
row k, k the position of its name; the blank row 0 gets no official row. Otherwise the order
cannot be established and the caller says so in one line (`init_from`: a fresh table, as the
official test-time training; `evaluate`: refused), never shifting rows silently.

What the file cannot tell: a dataset of as many *other* tasks (ARC-1's 400 evaluation tasks for a
file trained on its 400 training tasks) passes the count; its tokens are then those of unrelated
tasks, as they are in any reading of such a file (the official test-time training starts fresh).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from arc_data.errors import DatasetError
from arc_data.originals import load_aug_table
from hrm_deeploop.errors import UserError

REARC = re.compile(r"^rearc-(.+)-\d{4,}$")  # build-arc's name of a RE-ARC task (arc_data/arc/generated.py)
TABLE_KEY = "task_token_embed.weight"  # the official key of the task table (models.loopvit.official_key_map)


@dataclass(frozen=True)
class TaskOrder:
    """The official row of every puzzle identifier 1..N of a dataset (`rows`), or why there is none."""

    rows: np.ndarray | None  # int64 [N]: identifier i -> official row rows[i - 1]; None: not established
    why: str  # the reason it is not established ("" when it is)
    num_ids: int  # puzzle identifiers of the dataset, <blank> included (N + 1)


def official_name(base: str) -> str:
    """The official task name of one of our base tasks: a RE-ARC task's ARC-1 id, else its own name."""
    m = REARC.match(base)
    return m.group(1) if m else base


def task_order(num_rows: int, data_dir: str | Path) -> TaskOrder:
    """The official row of each identifier of `data_dir` for a table of `num_rows` rows (module docstring)."""
    try:
        table = load_aug_table(Path(data_dir))
    except DatasetError as e:  # a dataset without names (identifiers.json, augmentations.npz)
        return TaskOrder(None, f"the dataset's task names cannot be read: {e}", 0)
    base = np.asarray(table.base_task)
    names = [official_name(n) for n in table.task_names]
    if any(int(b) < 0 for b in base[1:]):
        return TaskOrder(None, f"the dataset '{data_dir}' has identifiers without a task", len(base))
    per_id = [names[int(b)] for b in base[1:]]
    distinct = sorted(set(per_id), key=lambda n: n + ".json")  # the official sorted(glob("*.json"))
    if len(distinct) != num_rows:
        return TaskOrder(None, f"its table has {num_rows} rows, the dataset '{data_dir}' {len(distinct)} tasks "
                               "(the file does not store its tasks' names: they are established only from a dataset "
                               "of the official run's split)", len(base))
    position = {n: k for k, n in enumerate(distinct)}
    return TaskOrder(np.array([position[n] for n in per_id], dtype=np.int64), "", len(base))


def dataset_table(official: torch.Tensor, order: TaskOrder, blank: torch.Tensor | None = None) -> torch.Tensor:
    """The table in the dataset's identifier order: row i = official[order.rows[i - 1]]; row 0 (the
    blank identifier, never looked up) from `blank` (a fresh row) or zero."""
    assert order.rows is not None
    out = torch.empty(order.num_ids, official.shape[1], dtype=official.dtype)
    out[0] = blank if blank is not None else 0.0
    out[1:] = official[torch.from_numpy(order.rows)]
    return out


def map_weights(weights: dict[str, torch.Tensor], data_dir: str | Path, blank: torch.Tensor | None = None
                ) -> tuple[dict[str, torch.Tensor], TaskOrder]:
    """An official state dict (keys as `models.loopvit.official_key_map`) with its task table in the
    dataset's order when that can be established; unchanged otherwise (the order says why)."""
    table = weights.get(TABLE_KEY)
    if table is None:
        return weights, TaskOrder(None, "the file has no task table", 0)
    order = task_order(int(table.shape[0]), data_dir)
    if order.rows is None:
        return weights, order
    return {**weights, TABLE_KEY: dataset_table(table, order, blank)}, order


def fit_model(model: torch.nn.Module, data_dir: str | Path, where: str) -> None:
    """A LoopViT loaded from an official file (its table in the official order), its table put in the
    dataset's order in place (`model.cfg.num_tasks` with it): what `evaluate` reads. Refused in one
    line when the order cannot be established."""
    table = model.task_embed.weight.detach()
    order = task_order(int(table.shape[0]), data_dir)
    if order.rows is None:
        raise UserError(f"{where}: an official LoopViT file's task tokens are numbered by the official run's sorted "
                        f"task files, and which serves which task of this dataset cannot be established: {order.why}. "
                        "Train its copies on this dataset first (train-vit init_from=..., fresh tokens, as ttt does)")
    new = torch.nn.Embedding(order.num_ids, table.shape[1], device=table.device, dtype=table.dtype)
    with torch.no_grad():
        new.weight.copy_(dataset_table(table.cpu(), order).to(table.device))
    model.task_embed = new
    model.cfg = replace(model.cfg, num_tasks=order.num_ids)
