"""The model families, by name: every command asks here what a checkpoint is and what serves it
(`spec.Family`; torchtitan's TrainSpec registry, STYLE.md "Families, not names"). A new family is
its model file, its config and its entry in `FAMILIES` below; the conformance test
(tests/test_families.py) then runs every command that serves it.

Torch-free: `--help` and the per-task plan look families up without importing torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import UserError
from hrm_deeploop.families import gpt, loopvit, reasoners
from hrm_deeploop.families.spec import Family, LoadedModel, LoadOptions

FAMILIES: dict[str, Family] = {f.name: f for f in (*reasoners.FAMILIES, loopvit.FAMILY, gpt.FAMILY)}

__all__ = ["FAMILIES", "Family", "LoadOptions", "LoadedModel", "family", "of_checkpoint", "of_state", "run_config",
           "serving", "require"]


def family(name: str, where: str = "model.name") -> Family:
    """The family named `name`; an unknown one is one line naming the known ones."""
    if name not in FAMILIES:
        raise UserError(f"{where}={name!r}: not a model family ({', '.join(FAMILIES)})")
    return FAMILIES[name]


def serving(command: str) -> list[Family]:
    """The families a command serves, in registry order."""
    return [f for f in FAMILIES.values() if f.serves(command)]


def titles(command: str) -> str:
    """'HRM, TRM, URM, LoopViT': the families `command` serves, for --help and refusals."""
    return ", ".join(f.title for f in serving(command))


def require(fam: Family, command: str, where: str) -> None:
    """One line when `command` does not serve `fam`, naming the commands that do."""
    if not fam.serves(command):
        raise UserError(f"{where} holds a {fam.title} model: {command} serves {titles(command) or 'no family'}; "
                        f"{fam.title} is served by {', '.join(fam.commands)}")


def of_state(path: Path, state: dict[str, Any]) -> Family:
    """The family of a checkpoint already read by the safe loader: ours by its config's model.name
    (a train state, or an export read by `hub.read_export`), else the family whose official layout
    it is; neither is one line."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch, only once a state is in hand

    conf = state.get("config")
    model = conf.get("model") if isinstance(conf, dict) else None
    if state.get("format") == ckpt.FORMAT and isinstance(model, dict):
        return family(str(model.get("name", "hrm")), f"checkpoint '{path}': model.name")
    for fam in FAMILIES.values():
        if fam.official is not None and fam.official(path, state):
            return fam
    known = "; ".join(f"{f.title}: {f.official_source}" for f in FAMILIES.values() if f.official_source)
    raise UserError(f"checkpoint '{path}' is neither an hrm-deeploop train state nor an official checkpoint this "
                    f"toolkit reads ({known})")


def run_config(path: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The resolved config of the run that wrote a local checkpoint (a run folder, its
    checkpoints/step_N.pt, or an exported folder's `config.json` "config" section, with its model
    and scaling) and the file it came from, a Hub reference read from its local copy; None where
    there is none or it cannot be read (an official checkpoint, a Hub reference not fetched, a path
    that does not exist: the loaders name those). Torch-free."""
    import yaml  # lazy: light, but only when a run is looked at

    if isinstance(path, str) and path.startswith("hf://"):
        from hrm_deeploop import hub  # lazy: only for a Hub reference (torch-free)

        try:
            p = hub.fetch(path)  # the local copy (HRM_DEEPLOOP_HUB_DIR, or the Hugging Face cache)
        except UserError:
            return None
    else:
        p = Path(path)
    run_dir = p.parent.parent if p.is_file() and p.parent.name == "checkpoints" else p.parent if p.is_file() else p
    for name in ("config.yaml", "config.json"):
        f = run_dir / name
        if not f.is_file():
            continue
        try:
            if name == "config.yaml":
                data = yaml.safe_load(f.read_text())
            else:  # an exported folder: the run's config under "config", its model and scaling beside it
                meta = json.loads(f.read_text())
                data = {**(meta.get("config") or {}), "model": meta.get("model"), "scaling": meta.get("scaling")}
        except (OSError, ValueError, AttributeError, ImportError):
            return None
        except Exception:  # noqa: BLE001 - yaml's own errors: an unreadable file tells nothing
            return None
        return (f, data) if isinstance(data, dict) else None
    return None


def of_checkpoint(path: str | Path) -> Family:
    """The family of a checkpoint named as a command takes it (run folder, step file, exported
    folder, hf://, an official file): from its run's config when one is beside it (no weights
    read), else from the file itself through the safe loader."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch, only when a command looks a checkpoint up

    found = run_config(path)
    model = found[1].get("model") if found else None
    if isinstance(model, dict) and model.get("name"):
        return family(str(model["name"]), f"{found[0]}: model.name")
    p = ckpt.resolve(path)  # a Hub reference fetched, a folder's latest step file, an export's weights
    found = run_config(p)
    model = found[1].get("model") if found else None
    if isinstance(model, dict) and model.get("name"):
        return family(str(model["name"]), f"{found[0]}: model.name")
    state = ckpt.load(p)
    if not isinstance(state, dict):
        raise UserError(f"checkpoint '{p}' is not a state dict or a train-state file")
    return of_state(p, state)
