"""What a run started from a checkpoint (`train init_from=RUN`, `train-vit init_from=RUN`) takes
from the checkpoint's run, and the warmup check. One rule for every trainer:

- the optimiser and schedule (`optim.*`: rate, warmup, decay, betas, the optimiser's name, and for
  LoopViT its gate regularisers) and the logger (`logger`, `project`): a tiny model pretrained at lr
  1e-3 with 10 warmup steps and no logger is adapted the same way, not with the full-size defaults
  (lr 1e-4 after 2000 warmup steps, wandb);
- what the checkpoint needs to run, as its family declares (`Family.carried`: LoopViT's `canvas.*`,
  the evaluation scale a 16 x 16 canvas was trained with);
- the batch (`train.global_batch_size`) where the new data can fill it (every sampler pass yields
  enough examples); otherwise it is left at the command's value, and the line says so.

A key the command line (or an `experiment=` named there) sets is never inherited. The CLI calls
`inherit` on the trainer's overrides before composing; it reads the run's `config.yaml` (or an
exported folder's `config.json`) through `hrm_deeploop.families.run_config`, torch-free, and prints
one line naming what it inherited. A checkpoint of another trainer's family inherits nothing (the
trainer refuses it in one line); official checkpoints and `hf://` references carry no run config of
ours: nothing is inherited from them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import UserError
from hrm_deeploop.families import FAMILIES, run_config

INHERITED_SECTIONS = ("optim",)
INHERITED_KEYS = ("logger", "project")
BATCH = "train.global_batch_size"
_ABSENT = object()

__all__ = ["contradictions", "inherit", "run_config", "warmup_warning"]


def _value(v: Any) -> str:
    """A config value as a Hydra override value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return "'" + v.replace("'", "\\'") + "'"
    return repr(v)


def _given(overrides: list[str], key: str) -> str | None:
    return next((o.partition("=")[2].strip("'\"") for o in overrides if o.partition("=")[0] == key), None)


def fewest_per_pass(data_dir: str, epochs_per_iter: int) -> int | None:
    """The fewest examples one sampler pass over a dataset's training split can yield (every group
    its smallest puzzle, times the epochs of a pass; `data.batches.TrainSampler`'s bound), or None
    when the split cannot be read here (the trainer then names what is wrong)."""
    import numpy as np  # lazy: only when a batch is inherited

    from arc_data.format import GROUP_INDICES_FILE, PUZZLE_INDICES_FILE  # lazy: when a batch is inherited

    root = Path(data_dir) / "train"
    try:
        groups = np.load(root / GROUP_INDICES_FILE, mmap_mode="r", allow_pickle=False)
        puzzles = np.load(root / PUZZLE_INDICES_FILE, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    sizes = np.diff(np.asarray(puzzles, dtype=np.int64))
    if len(groups) < 2 or not len(sizes):
        return None
    return int(np.minimum.reduceat(sizes, np.asarray(groups[:-1], dtype=np.int64)).sum()) * max(1, epochs_per_iter)


def contradictions(overrides: list[str], chosen: dict[str, str], config: dict[str, Any]) -> list[tuple[str, Any]]:
    """The overrides that set the model or its scaling otherwise than the checkpoint's run did, each
    with the run's value: the trainer takes both from the checkpoint, so they would not be used.
    `chosen`: the model name a `model=` / `experiment=` override selects (cli.prepare reads its file)."""
    import yaml  # lazy: only with init_from

    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    scaling = config.get("scaling") if isinstance(config.get("scaling"), dict) else {}
    out = []
    for o in overrides:
        key, _, value = o.partition("=")
        section, _, field = key.lstrip("+~").partition(".")
        if o in chosen:
            saved, differs = model.get("name"), chosen[o] != model.get("name")
        elif section in ("model", "scaling") and field:
            saved = (model if section == "model" else scaling).get(field, _ABSENT)
            try:
                differs = saved is not _ABSENT and yaml.safe_load(value) != saved
            except yaml.YAMLError:
                differs = False  # the composer names what is wrong with it
        else:
            saved = scaling.get("scheme")
            differs = key == "scaling" and bool(scaling) and value != saved
        if differs:
            out.append((o, saved))
    return out


def inherit(overrides: list[str], preset_keys: set[str] | frozenset[str] = frozenset(), command: str = "train",
            chosen: dict[str, str] | None = None) -> list[str]:
    """`command`'s overrides with the checkpoint's run's settings (the rule above) put before them,
    except the keys the command line (or `preset_keys`, an experiment's) sets. Another model than the
    checkpoint's (`model=`, `experiment=`, `model.name=`) is refused in one line; a field or scaling
    set otherwise than the checkpoint's (`contradictions`) is a warning: the trainer would not use it."""
    given = {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}
    init_from = _given(overrides, "init_from") or ""
    if not init_from or init_from == "null":
        return overrides
    found = run_config(init_from)
    if found is None:
        return overrides
    source, config = found
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    fam = FAMILIES.get(str(model.get("name", "hrm")))
    if fam is None or fam.trainer != command:
        return overrides  # another trainer's family: the trainer refuses the checkpoint in one line
    wrong = contradictions(overrides, chosen or {}, config)
    said = (f"init_from: the model and its scaling are the checkpoint's ({model.get('name')}, scaling "
            f"{(config.get('scaling') or {}).get('scheme')}, from {source})")
    other = [o for o, _ in wrong if (o.partition("=")[0] in ("model", "experiment", "model.name"))]
    if other:  # another model altogether: the run would train the checkpoint's, not the one asked for
        raise UserError(f"{said}: {', '.join(other)} would not be used; drop {'it' if len(other) == 1 else 'them'}, "
                        f"or leave init_from out to train that model from scratch")
    if wrong:  # a field or the scheme: the checkpoint's is used, and this line says so
        print(f"warning: {said}: " + ", ".join(f"{o} is not used (the checkpoint's: {_value(v)})" for o, v in wrong),
              file=sys.stderr, flush=True)
    free = set(given) | set(preset_keys)
    taken: list[str] = []
    for section in (*INHERITED_SECTIONS, *fam.carried):
        for key, value in (config.get(section) or {}).items():
            full = f"{section}.{key}"
            if full not in free and not isinstance(value, dict):
                taken.append(f"{full}={_value(value)}")
    for key in INHERITED_KEYS:
        if key in config and key not in free:
            taken.append(f"{key}={_value(config[key])}")
    notes = ""
    batch = (config.get("train") or {}).get("global_batch_size")
    data_dir = _given(overrides, "data_dir")
    if isinstance(batch, int) and BATCH not in free and data_dir:
        epochs = _given(overrides, "train.epochs_per_iter")
        fewest = fewest_per_pass(data_dir, int(epochs) if epochs and epochs.isdigit() else 1)
        if fewest is not None and fewest >= batch:
            taken.append(f"{BATCH}={batch}")
        elif fewest is not None:
            notes = (f"; {BATCH}={batch} not inherited: one pass over {data_dir} yields as few as {fewest} examples "
                     f"(set {BATCH} yourself)")
    if taken or notes:
        print(f"{command}: init_from: inherited from {source} (set any of them on the command line to change it): "
              + " ".join(taken) + notes, file=sys.stderr, flush=True)
    return taken + list(overrides)


def warmup_warning(optim: Any, total_steps: int) -> str | None:
    """A warning when the warmup is longer than the run: its rate never reaches `optim.lr`."""
    warmup = int(getattr(optim, "warmup_steps", 0) or 0)
    if warmup <= total_steps:
        return None
    return (f"warning: optim.warmup_steps={warmup} is longer than the run ({total_steps} steps): the learning rate "
            f"only reaches {optim.lr * total_steps / warmup:.3g} of optim.lr={optim.lr:g} (lower optim.warmup_steps)")
