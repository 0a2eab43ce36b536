"""The one place for our checkpoints: full train state, atomic writes, key-prefix fixes (the official
HRM/TRM checkpoints' key maps live in `official.py`).

Layout of a run folder:
    <run>/config.yaml                      resolved config
    <run>/checkpoints/step_<N>.pt          full train state (the keys below)
    <run>/checkpoints/step_<N>.rank<r>.pt  per-rank state of rank r > 0 (HRM's ACT carry), if any
    <run>/metrics.jsonl, metrics.csv       metrics log
    <run>/summary.json                     status and final figures (training.loop)

A train-state file is a dict written by `training.loop`: format, code_version, step, rng (torch
CPU/CUDA states), local (rank 0's per-rank state), recent_losses, last_eval, wall_time_s, config,
and the task's entries: model, optimizers (name -> state_dict), schedule, sampler (loader
position), and task-specific ones (the reasoners' `ema`: the weight average {rate, shadow} or
None; the GPT's val_loss). Every value is a tensor or a plain type (numbers, strings, lists,
dicts), so `load` reads files with `torch.load(weights_only=True)`: loading never runs code from a
file (a pickle that asks for anything else is refused). Writes go to `<file>.tmp` and are
renamed, so a killed run never leaves a half-written checkpoint, and the previous ones are kept;
the temp file is removed on any failure (a full disk, Ctrl-C), which is one line naming the path.

One run per folder: `RunLock` holds `<run>/run.lock` (fcntl.flock, so the kernel releases it when
the process ends however it ends) for as long as a trainer runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct as _np_reconstruct

from arc_data.budget import check_fits
from arc_data.errors import DatasetError
from arc_data.files import locks
from arc_data.files.atomic import atomic_file
from arc_data.files.jsonio import read_json
from arc_data.files.names import why_not_a_file
from hrm_deeploop import __version__, hub
from hrm_deeploop.errors import UserError, os_error

FORMAT = "hrm-deeploop/train-state/1"
# states held in memory by this process (`held`): `resolve` and `load` answer a path named here
# without touching the disk
_HELD: dict[Path, dict[str, Any]] = {}
# and the loader handed with one of them (`held(load=...)`), which `loading.load_model` asks instead of
# the state's family: (family, path, state, LoadOptions) -> LoadedModel
_HELD_LOADERS: dict[Path, Callable[..., Any]] = {}
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
    """Write `<path>.tmp`, fsync, rename over `path` (arc_data.files.atomic.atomic_file). On any failure (a full disk, a file-size
    limit, a read-only folder, Ctrl-C) the temp file is removed and `path` is left as it was; an
    OSError becomes one line naming the path and the errno."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as f:
            f.write(data)
    except OSError as e:
        raise UserError(f"cannot write '{path}': {os_error(e)}") from None


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Atomically save a train-state dict (tensors and plain types only: see `load`)."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "code_version": code_version(), **state}, buf)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


# Train states written before 2026-12-01 held the sampler's NumPy bit-generator state as arrays;
# rebuilding a NumPy array of numbers runs no code, so these (and only these) are allowed too.
# numpy 1.x pickles name the module `numpy.core`, numpy 2.x `numpy._core`.
_NUMPY_ARRAY_GLOBALS = [np.ndarray, np.dtype, (_np_reconstruct, "numpy.core.multiarray._reconstruct"),
                        (_np_reconstruct, "numpy._core.multiarray._reconstruct"),
                        *[type(np.dtype(t)) for t in ("b1", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8",
                                                      "f2", "f4", "f8")]]  # numeric dtypes only, no object arrays
_ASKED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")  # torch's words for a refused class or function


@contextlib.contextmanager
def held(path: str | Path, state: dict[str, Any], load: Callable[..., Any] | None = None):
    """While the block runs, `resolve(path)` is `path` and `load(path)` is `state` (a shallow copy
    of its dict; the tensors are shared, and no reader writes into them): `ttt`'s in-process
    per-task path reads its checkpoint once for every task, and hands each task's trained weights
    to its evaluation without writing them to disk (pertask/inprocess.py). With `load`,
    `loading.load_model` of `path` asks it, not the state's family, for the model: `load(family,
    path, state, options)` returns the `LoadedModel` the family's loader would (`training.reuse.Reuse.loaded`:
    a model kept between the tasks' evaluations, the state's weights copied in)."""
    key = Path(path)
    _HELD[key] = state
    if load is not None:
        _HELD_LOADERS[key] = load
    try:
        yield key
    finally:
        _HELD.pop(key, None)
        _HELD_LOADERS.pop(key, None)


def held_loader(path: Path) -> Callable[..., Any] | None:
    """The loader handed with the state held at `path` (`held(load=...)`), or None."""
    return _HELD_LOADERS.get(path)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint (a train state of ours, or an official HRM/TRM state dict) without
    running code from it: `torch.load(weights_only=True)`, which rebuilds tensors, numbers,
    strings and containers only, plus NumPy arrays (older train states). A file whose pickle needs
    anything else is refused in one line naming the file and what it asked for; a missing or
    corrupt file is one line too."""
    path = Path(path)
    if path in _HELD:
        return dict(_HELD[path])
    if not path.is_file():
        raise UserError(f"checkpoint '{path}' {why_not_a_file(path)}")
    # reading it takes about its size in host memory: refused up front when that is not there
    size = path.stat().st_size
    check_fits(f"checkpoint '{path}'", memory=size, fix="load it on a machine with more memory", say=None)
    if path.suffix == ".safetensors":  # an exported folder's weights (`hrm-deeploop export`)
        return {"format": FORMAT, **hub.read_export(path.parent)}
    try:
        with torch.serialization.safe_globals(_NUMPY_ARRAY_GLOBALS):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        asked = _ASKED_GLOBAL.search(str(e))
        if asked:
            raise UserError(f"checkpoint '{path}' is refused: loading it would need '{asked.group(1)}', which could "
                            "run code (a checkpoint may hold only tensors, numbers, strings, lists and dicts)") from None
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        after = [i + 1 for i, ln in enumerate(lines) if ln.endswith("WeightsUnpickler error:")]
        detail = lines[after[0]] if after and after[0] < len(lines) else "the weights-only reader refused it"
        raise UserError(f"checkpoint '{path}' is corrupt or not a weights-only checkpoint ({detail})") from None
    except Exception as e:  # torch raises several types for truncated/corrupt zip files
        what = f"{type(e).__name__}: {e}" if str(e) else "it is empty (0 bytes)" if size == 0 else type(e).__name__
        raise UserError(f"checkpoint '{path}' is corrupt or unreadable: {what}") from None


def step_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / hub.STEPS / f"step_{step}.pt"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    d = Path(run_dir) / hub.STEPS
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _STEP_RE.match(p.name))]
    return sorted(found)


def latest(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def resolve(path: str | Path) -> Path:
    """A checkpoint file, the latest `checkpoints/step_N.pt` of a run folder, the weights of an
    exported folder, or any of these on the Hugging Face Hub (`hf://OWNER/NAME[@REV][/PATH]`)."""
    p = hub.fetch(path) if hub.is_hub_ref(path) else Path(path)
    if p in _HELD:
        return p
    if p.is_dir() and hub.is_export(p):
        return p / hub.WEIGHTS
    if p.is_dir():
        found = latest(p)
        if found is None:
            raise UserError(f"checkpoint folder '{p}' holds no checkpoints/step_N.pt")
        return found
    if not p.is_file():  # a symbolic-link loop, a FIFO or a device is named as such, never opened
        raise UserError(f"checkpoint '{p}' {why_not_a_file(p)}")
    return p


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


IDENTITY_FILE = "data_identity.json"  # the dataset a run trains on (`data.batches.dataset_identity`)
LOCK_FILE = locks.LOCK_FILE


class RunLock(locks.RunLock):
    """`arc_data.files.locks.RunLock` (one run per folder: an exclusive flock on `<run>/run.lock`),
    its refusal a UserError (what the trainer broadcasts to every rank)."""

    def __init__(self, run_dir: str | Path):
        try:
            super().__init__(run_dir)
        except DatasetError as e:
            raise UserError(str(e)) from None


def prepare_run_dir(run_dir: str | Path, config: dict[str, Any], resume: bool,
                    must_match: tuple[str, ...] = ("model",), identity: dict[str, Any] | None = None) -> Path | None:
    """Check a run folder before it is (re)used (call it holding the folder's `RunLock`).
    Returns the checkpoint to resume from, or None. Writes nothing but the folder itself.

    - A fresh run refuses a folder that already holds checkpoints (nothing saved is overwritten);
      pass resume=true to continue it.
    - resume=true with no checkpoint starts fresh (so a crashed first attempt can be relaunched).
    - On resume, the config sections named in `must_match` (the architecture) must equal the saved
      ones; a mismatch names the first differing key. So must the dataset's `identity`, when given
      (a different dataset names the first differing file). A config.yaml or data_identity.json
      that a crash or a hand left unreadable is one line naming it.
    - Temp files of a killed run (`*.tmp` here and in checkpoints/) are removed.
    `record_run` writes config.yaml and data_identity.json once the resume state has loaded.
    """
    run_dir = Path(run_dir)
    ckpt = latest(run_dir)
    saved_cfg_path = run_dir / "config.yaml"
    identity_path = run_dir / IDENTITY_FILE
    if ckpt is not None and not resume:
        raise UserError(f"output_dir '{run_dir}' already holds checkpoints ({ckpt.name}); "
                        "pass resume=true to continue it or choose another output_dir")
    if ckpt is not None and saved_cfg_path.exists():
        try:
            saved = yaml.safe_load(saved_cfg_path.read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise UserError(f"cannot resume '{run_dir}': '{saved_cfg_path}' is unreadable "
                            f"({' '.join(str(e).split())[:200]}); restore it from a checkpoint's 'config' "
                            "or choose another output_dir") from None
        if not isinstance(saved, dict):
            raise UserError(f"cannot resume '{run_dir}': '{saved_cfg_path}' holds a {type(saved).__name__}, "
                            "not a config mapping")
        for section in must_match:
            diff = _first_diff(saved.get(section), config.get(section), section)
            if diff:
                raise UserError(f"cannot resume '{run_dir}': {diff} differs from the saved run's "
                                f"'{saved_cfg_path}' (architecture changes need a new output_dir)")
    if ckpt is not None and identity is not None and identity_path.exists():
        try:
            saved_identity = read_json(identity_path, "dataset record")
        except DatasetError as e:
            raise UserError(f"cannot resume '{run_dir}': {e}") from None
        diff = _identity_diff(saved_identity.get("files") if isinstance(saved_identity, dict) else None, identity)
        if diff:
            raise UserError(f"cannot resume '{run_dir}': the dataset is not the one the run trained on ({diff}; "
                            f"recorded in '{identity_path}'); a different dataset needs a new output_dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*run_dir.glob("*.tmp"), *(run_dir / "checkpoints").glob("*.tmp")]:
        with contextlib.suppress(OSError):  # a read-only checkpoints/ is reported when it is written to
            stale.unlink(missing_ok=True)
    return ckpt


def record_run(run_dir: str | Path, config: dict[str, Any], identity: dict[str, Any] | None = None) -> None:
    """Write `<run>/config.yaml` (the resolved config) and, given the dataset's identity,
    `<run>/data_identity.json` (what `prepare_run_dir` compares on resume)."""
    run_dir = Path(run_dir)
    atomic_write_bytes(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False).encode())
    if identity is not None:
        record = {"data_dir": str(config.get("data_dir", "")), "files": identity}
        atomic_write_bytes(run_dir / IDENTITY_FILE, (json.dumps(record, indent=1) + "\n").encode())


def _identity_diff(saved: Any, now: dict[str, Any]) -> str | None:
    """The first file in which two `dataset_identity` records differ, in words; None if equal."""
    if not isinstance(saved, dict):
        return "the record holds no 'files' mapping"
    for folder in sorted(set(saved) | set(now)):
        a, b = saved.get(folder) or {}, now.get(folder) or {}
        for name in sorted(set(a) | set(b)):
            where = name if folder == "." else f"{folder}/{name}"
            if name not in b:
                return f"{where} is gone"
            if name not in a:
                return f"{where} is new"
            if a[name] != b[name]:
                sa, sb = (a[name].get("bytes") if isinstance(a[name], dict) else None), b[name]["bytes"]
                return f"{where} changed ({sa} bytes then, {sb} now)" if sa != sb else f"{where} changed (sha256)"
    return None


def _first_diff(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = _first_diff(a.get(k), b.get(k), f"{path}.{k}")
            if d:
                return d
        return None
    return None if a == b else f"'{path}' ({a!r} saved, {b!r} now)"


def load_weights(model: torch.nn.Module, weights: dict[str, Any], where: str) -> None:
    """The one safe way weights enter a model: the tensor set, each tensor's shape and kind of dtype
    (a float model takes floating-point tensors: int8 ones would be rounded silently) and finiteness
    (NaN/inf would reach the sampler) are checked first, each failure one line naming `where` and
    the tensor; then a strict `load_state_dict` (same-kind dtypes are cast as torch casts them)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    if missing or extra:
        said = "; ".join(part for part in (
            f"{len(missing)} tensor(s) missing (e.g. '{missing[0]}')" if missing else "",
            f"{len(extra)} tensor(s) the model lacks (e.g. '{extra[0]}')" if extra else "") if part)
        raise UserError(f"checkpoint '{where}' does not fit its model config: {said}")
    for key, want in expected.items():
        got = weights[key]
        if not isinstance(got, torch.Tensor):
            raise UserError(f"checkpoint '{where}': '{key}' is a {type(got).__name__}, not a tensor")
        if tuple(got.shape) != tuple(want.shape):
            raise UserError(f"checkpoint '{where}': tensor '{key}' has shape {tuple(got.shape)}, the model "
                            f"{tuple(want.shape)}")
        if got.dtype.is_floating_point != want.dtype.is_floating_point or got.dtype.is_complex or \
                (got.dtype == torch.bool) != (want.dtype == torch.bool):
            raise UserError(f"checkpoint '{where}': tensor '{key}' holds {str(got.dtype).removeprefix('torch.')}, "
                            f"the model {str(want.dtype).removeprefix('torch.')} (loading would change its values)")
        if got.dtype.is_floating_point and not bool(torch.isfinite(got).all()):
            bad = int((~torch.isfinite(got)).sum())
            raise UserError(f"checkpoint '{where}': tensor '{key}' holds {bad:,} NaN or infinite value(s)")
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise UserError(f"checkpoint '{where}' does not fit its model config: {str(e).splitlines()[0]}") from None
