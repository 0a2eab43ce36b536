"""The one place for checkpoints: full train state, atomic writes, key-prefix fixes.

Layout of a run folder:
    <run>/config.yaml                 resolved config
    <run>/checkpoints/step_<N>.pt     full train state (see `TrainState` keys below)
    <run>/metrics.jsonl, metrics.csv  metrics log

A train-state file is a dict: format, step, model, optimizers (name -> state_dict), schedule,
rng (torch CPU/CUDA states and any named generators), sampler (loader position), config,
code_version. Writes go to `<file>.tmp` and are renamed, so a killed run never leaves a
half-written checkpoint, and the previous ones are kept.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from hrm_deeploop import __version__
from hrm_deeploop.errors import UserError

FORMAT = "hrm-deeploop/train-state/1"
_STEP_RE = re.compile(r"^step_(\d+)\.pt$")
WRAPPER_PREFIXES = ("_orig_mod.", "module.")


def code_version() -> str:
    """Package version plus the git commit when run from a checkout."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+{sha}" if sha else __version__


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Atomically save a train-state dict."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "code_version": code_version(), **state}, buf)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint file with a clear error for missing or corrupt files."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint '{path}' does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # torch raises several types for truncated/corrupt zip files
        raise UserError(f"checkpoint '{path}' is corrupt or unreadable: {type(e).__name__}: {e}") from None


def step_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}.pt"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    d = Path(run_dir) / "checkpoints"
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _STEP_RE.match(p.name))]
    return sorted(found)


def latest(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def strip_prefixes(state_dict: dict[str, Any], prefixes: tuple[str, ...] = WRAPPER_PREFIXES) -> dict[str, Any]:
    """Remove torch.compile / DDP wrapper prefixes from state-dict keys."""
    out = {}
    for k, v in state_dict.items():
        changed = True
        while changed:
            changed = False
            for p in prefixes:
                if k.startswith(p):
                    k, changed = k[len(p):], True
        out[k] = v
    return out


def rng_state(**generators: torch.Generator) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "generators": {k: g.get_state() for k, g in generators.items()}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], **generators: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for k, g in generators.items():
        if k in state["generators"]:
            g.set_state(state["generators"][k])


def prepare_run_dir(run_dir: str | Path, config: dict[str, Any], resume: bool,
                    must_match: tuple[str, ...] = ("model",)) -> Path | None:
    """Create or reopen a run folder. Returns the checkpoint to resume from, or None.

    - A fresh run refuses a folder that already holds checkpoints (nothing saved is overwritten);
      pass resume=true to continue it.
    - resume=true with no checkpoint starts fresh (so a crashed first attempt can be relaunched).
    - On resume, the config sections named in `must_match` (the architecture) must equal the saved
      ones; a mismatch names the first differing key.
    Writes `<run>/config.yaml` (the resolved config).
    """
    import yaml

    run_dir = Path(run_dir)
    ckpt = latest(run_dir)
    saved_cfg_path = run_dir / "config.yaml"
    if ckpt is not None and not resume:
        raise UserError(f"output_dir '{run_dir}' already holds checkpoints ({ckpt.name}); "
                        "pass resume=true to continue it or choose another output_dir")
    if ckpt is not None and saved_cfg_path.exists():
        saved = yaml.safe_load(saved_cfg_path.read_text()) or {}
        for section in must_match:
            diff = _first_diff(saved.get(section), config.get(section), section)
            if diff:
                raise UserError(f"cannot resume '{run_dir}': {diff} differs from the saved run "
                                f"(architecture changes need a new output_dir)")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(saved_cfg_path, yaml.safe_dump(config, sort_keys=False).encode())
    return ckpt


def _first_diff(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = _first_diff(a.get(k), b.get(k), f"{path}.{k}")
            if d:
                return d
        return None
    return None if a == b else f"'{path}' ({a!r} saved, {b!r} now)"
