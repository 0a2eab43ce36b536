"""Checkpoints on the Hugging Face Hub, and the exported folder in the Hub's conventions.

- `checkpoint=hf://OWNER/NAME[@REVISION][/PATH]`: the repo (or only PATH in it: a file, with the
  `all_config.yaml` beside it that official HRM/TRM checkpoints need, or a folder) is downloaded
  with `huggingface_hub.snapshot_download` into its normal cache (`HF_HOME` / `HF_HUB_CACHE`,
  default `~/.cache/huggingface/hub`); with `HF_HUB_OFFLINE=1` it is read from that cache without
  the network. With `HRM_DEEPLOOP_HUB_DIR=DIR` it is read from the plain folder `DIR/OWNER/NAME`
  instead (an export before its upload, a clone of the repo): `hf://` tried offline without a Hub
  cache. `checkpoint.resolve` calls `fetch` and then treats the local path as any other.
- An exported folder (`hrm-deeploop export`, `hrm_deeploop.export`): `model.safetensors` (the
  weights) and `config.json` (`format`, the model and scaling sections that rebuild the model, the
  step, which weights, the run's whole resolved config), plus `README.md` and metadata files.
  `read_export` turns it back into the train-state shape every loader reads (model, config,
  step), so `checkpoint=FOLDER` works wherever a checkpoint does.

Needs the optional extra `hub` (huggingface_hub, safetensors); without it the one-line error says so.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from hrm_deeploop.errors import UserError

PREFIX = "hf://"
EXPORT_FORMAT = "hrm-deeploop/export/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
OFFICIAL_CONFIG = "all_config.yaml"  # beside an official HRM/TRM `step_N` file
INSTALL = "pip install 'hrm-deeploop[hub]'"
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")  # the Hub's own limit: 96 characters a part
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")  # a branch, tag or commit; never a path


@dataclass(frozen=True)
class HubRef:
    repo_id: str  # OWNER/NAME
    revision: str | None  # branch, tag or commit; None: main
    path: str  # file or folder inside the repo; "" for the whole repo

    def __str__(self) -> str:
        return PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "") + (f"/{self.path}" if self.path else "")


def is_hub_ref(spec: str | Path) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse(spec: str) -> HubRef:
    """'hf://OWNER/NAME[@REVISION][/PATH]' -> HubRef; a malformed one is a one-line error."""
    parts = spec[len(PREFIX):].split("/")
    if len(parts) < 2:
        raise UserError(f"checkpoint '{spec}': a Hub checkpoint is hf://OWNER/NAME[@REVISION][/PATH]")
    owner, (name, _, revision) = parts[0], parts[1].partition("@")
    path = "/".join(parts[2:]).strip("/")
    if not (_REPO_PART.fullmatch(owner) and _REPO_PART.fullmatch(name)) or (_ and not revision) \
            or ".." in owner + name or (revision and (not _REVISION.fullmatch(revision) or ".." in revision)) \
            or any(p in ("", ".", "..") for p in path.split("/") if path):
        raise UserError(f"checkpoint '{spec}': a Hub checkpoint is hf://OWNER/NAME[@REVISION][/PATH]")
    return HubRef(f"{owner}/{name}", revision or None, path)


BESIDE = (OFFICIAL_CONFIG, CONFIG, "trained_tasks.json")  # read beside a file: its config, its run's record
RUN_FILES = ("config.yaml", "trained_tasks.json", "summary.json")  # a run folder's, above checkpoints/step_N.pt
STEPS = "checkpoints"  # a run folder's step files: RUN/checkpoints/step_N.pt


def folder_of(file: Path) -> Path:
    """The folder a checkpoint file belongs to: a step file's run folder (RUN/checkpoints/step_N.pt),
    else the file's own folder (an export's model.safetensors, a lone file)."""
    return file.parent.parent if file.parent.name == STEPS else file.parent


def _patterns(path: str) -> list[str] | None:
    """What to download for PATH: the file or folder; beside a file, an official checkpoint's config,
    an export's config and the run record (what `ttt protocol=strict` reads); above a run's
    `checkpoints/step_N.pt`, the run's config and record."""
    if not path:
        return None  # the whole repo
    parent = PurePosixPath(path).parent

    def at(folder: PurePosixPath, name: str) -> str:
        return name if str(folder) == "." else f"{folder}/{name}"

    out = [path, f"{path}/*", *(at(parent, n) for n in BESIDE)]
    if parent.name == STEPS:
        out += [at(parent.parent, n) for n in RUN_FILES]
    return out


LOCAL_ENV = "HRM_DEEPLOOP_HUB_DIR"  # hf://OWNER/NAME reads DIR/OWNER/NAME: the Hub repo's files, kept locally


def local_folder(ref: HubRef, root: str) -> Path:
    """`hf://OWNER/NAME[@REVISION][/PATH]` in a local folder laid out like the Hub (`root/OWNER/NAME`
    holding the repo's files, e.g. an export before upload or a clone of the repo; a revision is a
    folder `root/OWNER/NAME@REVISION`), read as it is, without huggingface_hub or the network."""
    repo = Path(root).expanduser() / (ref.repo_id + (f"@{ref.revision}" if ref.revision else ""))
    if not repo.is_dir():
        raise UserError(f"checkpoint '{ref}': {LOCAL_ENV}={root} has no folder {repo} (the repo's files go in "
                        f"{LOCAL_ENV}/OWNER/NAME, a revision's in OWNER/NAME@REVISION)")
    target = repo / ref.path if ref.path else repo
    if not target.exists():
        raise UserError(f"checkpoint '{ref}': the repo has no file or folder '{ref.path}' (in {repo})")
    return target


def fetch(spec: str) -> Path:
    """Download (or, offline, find in the cache) a Hub checkpoint; returns the local file or folder.
    With HRM_DEEPLOOP_HUB_DIR set, the repo is read from that local folder instead (`local_folder`)."""
    ref = parse(spec)
    if os.environ.get(LOCAL_ENV):
        return local_folder(ref, os.environ[LOCAL_ENV])
    try:
        import huggingface_hub  # lazy: the optional `hub` extra
        from huggingface_hub import constants, errors  # lazy: the optional `hub` extra
    except ImportError:
        raise UserError(f"checkpoint '{spec}' is on the Hugging Face Hub, which needs huggingface_hub: {INSTALL}") from None
    try:
        root = Path(huggingface_hub.snapshot_download(ref.repo_id, revision=ref.revision,
                                                      allow_patterns=_patterns(ref.path)))
    except errors.RepositoryNotFoundError:
        raise UserError(f"checkpoint '{spec}': no Hub repo '{ref.repo_id}' (or it is private or gated: "
                        "log in with `hf auth login`)") from None
    except errors.RevisionNotFoundError:
        raise UserError(f"checkpoint '{spec}': the repo has no revision '{ref.revision}'") from None
    except errors.LocalEntryNotFoundError:
        raise UserError(f"checkpoint '{spec}' is not in the Hugging Face cache and the Hub cannot be reached (no "
                        "network, or HF_HUB_OFFLINE=1): download it once with network") from None
    except errors.HfHubHTTPError as e:
        raise UserError(f"checkpoint '{spec}': the Hub refused the download: {str(e).splitlines()[0]}") from None
    except (ValueError, OSError) as e:  # HFValidationError (a ValueError), a cache folder that is not one
        raise UserError(f"checkpoint '{spec}': {' '.join(str(e).split())[:300]}") from None
    local = root / ref.path if ref.path else root
    if not local.exists():
        raise UserError(f"checkpoint '{spec}': the repo has no file or folder '{ref.path}'")
    _confine(local, Path(constants.HF_HUB_CACHE), spec)
    return local


def _confine(local: Path, cache: Path, spec: str) -> None:
    """Everything read for `spec` lies inside the Hugging Face cache: a hand-edited `refs/main` or a
    snapshot link naming a path outside it is refused (it would load a model from anywhere)."""
    cache = cache.expanduser().resolve()
    for p in [local, *(local.rglob("*") if local.is_dir() else ())]:
        real = p.resolve()
        if real != cache and cache not in real.parents:
            raise UserError(f"checkpoint '{spec}': '{p}' leads to '{real}', outside the Hugging Face cache {cache} "
                            "(a hand-edited refs/ file or link?); refusing to read it")


# ---- the exported folder -------------------------------------------------------------------------


def is_export(folder: Path) -> bool:
    return (folder / WEIGHTS).is_file() and (folder / CONFIG).is_file()


def _safetensors() -> Any:
    try:
        import safetensors.torch  # lazy: keeps torch off `export --help`
    except ImportError:
        raise UserError(f"reading or writing {WEIGHTS} needs safetensors: {INSTALL}") from None
    return safetensors.torch


def read_export(folder: Path) -> dict[str, Any]:
    """An exported folder as the train-state entries the loaders read: model, config, step, ema (None)."""
    from arc_data.errors import DatasetError  # lazy: `export --help` skips it
    from arc_data.files.jsonio import read_json  # lazy: `export --help` skips it

    config_path = folder / CONFIG
    try:  # the one JSON reader: a FIFO, deep nesting or a key twice is one line too
        meta = read_json(config_path, "exported config")
    except DatasetError as e:
        raise UserError(str(e)) from None
    if not isinstance(meta, dict) or meta.get("format") != EXPORT_FORMAT:
        raise UserError(f"'{config_path}' is not an hrm-deeploop export (format {EXPORT_FORMAT})")
    for key in ("model", "scaling", "config"):
        if not isinstance(meta.get(key), dict):
            raise UserError(f"'{config_path}' has no '{key}' section")
    try:
        weights = _safetensors().load_file(str(folder / WEIGHTS), device="cpu")
    except UserError:
        raise
    except Exception as e:  # safetensors raises its own error types for truncated or corrupt files
        raise UserError(f"'{folder / WEIGHTS}' is corrupt or unreadable: {type(e).__name__}: {e}") from None
    config = {**meta["config"], "model": meta["model"], "scaling": meta["scaling"]}
    return {"step": meta.get("step"), "model": weights, "config": config, "ema": None,
            "puzzle_names": meta.get("puzzle_names"), "scaling_rounds": meta.get("scaling_rounds"),
            "exported": {"weights": meta.get("weights")}}


def write_weights(path: Path, weights: dict[str, Any], metadata: dict[str, str]) -> None:
    """model.safetensors; tied tensors are stored once per key (cloned), as safetensors requires. The
    bytes are made in memory and written with open(), so a full disk or a file-size limit is an
    OSError naming its errno (safetensors' own writer raises its own error type)."""
    data = _safetensors().save({k: v.detach().cpu().contiguous().clone() for k, v in weights.items()},
                               metadata=metadata)
    # safetensors writes its JSON header from a hash map, in an order that changes from call to call
    # (two exports of one run differed in the metadata's key order): the header again, keys sorted,
    # padded to 8 bytes as the format asks; the tensors' offsets are relative to the data, unchanged
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    data = len(header).to_bytes(8, "little") + header + data[8 + n:]
    with open(path, "wb") as f:
        f.write(data)
