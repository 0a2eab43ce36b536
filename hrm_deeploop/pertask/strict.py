"""`ttt protocol=strict`: refuse a checkpoint that was trained on any of the evaluated tasks, on an
imitation of one (a generated `rearc:` / `arcgen:` / `barc:` task made for it, test answer
included), or that was initialised from a run that was, as its run record says
(`training.record`: `trained_tasks.json` in the run folder or its export, wherever they now live).
Both the checkpoint and any `init_from` among `train_overrides` (what each task's copy would then
start from) are checked. `protocol=transductive` runs any of them, labelled so."""

from __future__ import annotations

from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from hrm_deeploop.training import record

SHOWN = 5  # task ids named in a refusal


def starts(cfg: PerTaskConfig) -> list[str]:
    """What a task's copy starts from: the checkpoint, and any `init_from=` among train_overrides."""
    found = [cfg.checkpoint] if cfg.checkpoint else []
    for o in cfg.train_overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "init_from" and value.strip("'\"") not in ("", "null", "None"):
            found.append(value.strip("'\""))
    return found


def check_protocol(cfg: PerTaskConfig, ids: list[str]) -> None:
    """protocol=strict: one line and exit 2 when a start was trained on (or on an imitation of) any
    of `ids`, or when what it was trained on cannot be told."""
    if cfg.protocol == "transductive":
        return
    for source in starts(cfg):
        entry = record.of_source(source)
        tasks, imitates, unknown = record.flatten(entry)
        seen = [t if t in tasks else f"{t} (imitated by {imitates[t]} generated task(s))"
                for t in ids if t in tasks or t in imitates]
        if seen:
            raise UserError(f"protocol=strict: {source} was trained on {len(seen)} of these tasks or imitations of "
                            f"them ({', '.join(seen[:SHOWN])}{', ...' if len(seen) > SHOWN else ''}); "
                            "protocol=transductive runs it, labelled so")
        if unknown:
            raise UserError(f"protocol=strict: cannot tell which tasks {source} was trained on ({unknown[0]}); "
                            "protocol=transductive runs it, labelled so")


def trained_names(checkpoint: str) -> list[str] | None:
    """Every task id the checkpoint (and the runs it was initialised from) trained on or on an
    imitation of, sorted; None when any part of that cannot be told."""
    tasks, imitates, unknown = record.flatten(record.of_source(checkpoint))
    return None if unknown else sorted(tasks | set(imitates))
