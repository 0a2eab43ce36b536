"""What an adaptation (`train init_from=RUN`) takes from its pretraining run, and the warmup check.

A run that starts from one of our checkpoints inherits the pretraining run's optimiser and schedule
(`optim.*`: rate, warmup, decay, betas, the optimiser's name) and its logger (`logger`, `project`)
unless the command line (or an `experiment=` named there) sets them: a tiny model pretrained at
lr 1e-3 with 10 warmup steps and no logger is adapted the same way, not with the full-size
defaults (lr 1e-4 after 2000 warmup steps, wandb). The CLI calls `inherit` on `train`'s overrides
before composing; it reads the run's `config.yaml` (or an exported folder's `config.json`), torch-free,
and prints one line naming what it inherited. Official HRM/TRM checkpoints and `hf://` references
carry no run config of ours: nothing is inherited from them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

INHERITED_SECTIONS = ("optim",)
INHERITED_KEYS = ("logger", "project")


def run_config(init_from: str) -> tuple[Path, dict[str, Any]] | None:
    """The pretraining run's resolved config and the file it came from, or None where there is none
    (an official checkpoint, a Hub reference, a path that does not exist: the trainer names those)."""
    if init_from.startswith("hf://"):
        return None
    p = Path(init_from)
    run_dir = p.parent.parent if p.is_file() and p.parent.name == "checkpoints" else p
    for name in ("config.yaml", "config.json"):
        f = run_dir / name
        if not f.is_file():
            continue
        try:
            if name == "config.yaml":
                data = yaml.safe_load(f.read_text())
            else:  # an exported folder: the run's config sits under "config"
                data = json.loads(f.read_text()).get("config")
        except (OSError, ValueError, AttributeError, ImportError):
            return None
        except Exception:  # noqa: BLE001 - yaml's own errors: an unreadable file inherits nothing
            return None
        return (f, data) if isinstance(data, dict) else None
    return None


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


def inherit(overrides: list[str], preset_keys: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """`train`'s overrides with the pretraining run's optimiser, schedule and logger settings put
    before them, except the keys the command line (or `preset_keys`, an experiment's) sets."""
    given = {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}
    init_from = next((o.partition("=")[2] for o in overrides if o.partition("=")[0] == "init_from"), "")
    if not init_from or init_from == "null":
        return overrides
    found = run_config(init_from.strip("'\""))
    if found is None:
        return overrides
    source, config = found
    taken: list[str] = []
    for section in INHERITED_SECTIONS:
        for key, value in (config.get(section) or {}).items():
            full = f"{section}.{key}"
            if full not in given and full not in preset_keys and not isinstance(value, dict):
                taken.append(f"{full}={_value(value)}")
    for key in INHERITED_KEYS:
        if key in config and key not in given and key not in preset_keys:
            taken.append(f"{key}={_value(config[key])}")
    if taken:
        print(f"train: init_from: inherited from {source} (set any of them on the command line to change it): "
              + " ".join(taken), file=sys.stderr, flush=True)
    return taken + list(overrides)


def warmup_warning(optim: Any, total_steps: int) -> str | None:
    """A warning when the warmup is longer than the run: its rate never reaches `optim.lr`."""
    warmup = int(getattr(optim, "warmup_steps", 0) or 0)
    if warmup <= total_steps:
        return None
    return (f"warning: optim.warmup_steps={warmup} is longer than the run ({total_steps} steps): the learning rate "
            f"only reaches {optim.lr * total_steps / warmup:.3g} of optim.lr={optim.lr:g} (lower optim.warmup_steps)")
