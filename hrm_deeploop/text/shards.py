"""Token shards: the on-disk format of the looped GPT's training data, and its `meta.json` sidecar.

Shard format (llm.c / modded-nanogpt `.bin`): a header of 256 little-endian int32 — magic
20240520, version 1, token count, the rest zero — then `count` uint16 tokens. Files are named
`train_000000.bin`, `val_000000.bin`, ... and each output folder carries a `meta.json` sidecar
(tokenizer id, vocabulary size, counts, source hashes) so a tokenizer mismatch between shards and
a model is caught before training (`check_meta`).

Data flow:  text/JSONL/Parquet/HF dataset --text.prepare--> folder of shards + meta.json
            --text.loader (TokenShards, iter_eval_batches)--> (x, y) int64 tensors (B, T)
"""

from __future__ import annotations

import glob as globlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arc_data.errors import DatasetError
from arc_data.files.jsonio import parse_json
from hrm_deeploop.errors import UserError
from hrm_deeploop.text.tokenizer import get_tokenizer

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")  # uint16: GPT-2's 50,257 ids fit
META_NAME = "meta.json"
META_FORMAT = "hrm-deeploop token shards v1"

PathLike = str | os.PathLike


# --------------------------------------------------------------------------------------------
# Shard files
# --------------------------------------------------------------------------------------------


def write_shard(path: PathLike, tokens: Sequence[int] | np.ndarray) -> int:
    """Write `tokens` as a `.bin` shard, atomically (temp file in the same folder + rename).

    Returns the number of tokens written. Raises UserError if a token does not fit in uint16.
    """
    path = Path(path)
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise UserError(f"write_shard {path}: tokens must be 1-D, got shape {arr.shape}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(np.uint16).max):
        raise UserError(
            f"write_shard {path}: token ids must lie in [0, 65535] for uint16 shards, "
            f"got [{int(arr.min())}, {int(arr.max())}]"
        )
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, arr.size
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(arr.astype(TOKEN_DTYPE, copy=False).tobytes())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return int(arr.size)


def read_shard_header(path: PathLike) -> int:
    """Validate a shard's header and size; return its token count.

    Every failure is a UserError naming the file: unreadable, empty, header cut short, wrong magic,
    wrong version, zero tokens, or a file size that disagrees with the header's count (truncated
    or with trailing bytes).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise UserError(f"token shard {path}: cannot read it ({e.strerror or e})") from None
    if size == 0:
        raise UserError(f"token shard {path}: the file is empty")
    if len(raw) < HEADER_BYTES:
        raise UserError(
            f"token shard {path}: truncated header ({len(raw)} bytes, expected {HEADER_BYTES})"
        )
    header = np.frombuffer(raw, dtype="<i4")
    if header[0] != SHARD_MAGIC:
        raise UserError(
            f"token shard {path}: wrong magic number {int(header[0])} (expected {SHARD_MAGIC}); "
            "not an llm.c/modded-nanogpt token shard"
        )
    if header[1] != SHARD_VERSION:
        raise UserError(
            f"token shard {path}: unsupported version {int(header[1])} (expected {SHARD_VERSION})"
        )
    count = int(header[2])
    if count <= 0:
        raise UserError(f"token shard {path}: header says it holds {count} tokens (empty shard)")
    expected = HEADER_BYTES + count * TOKEN_DTYPE.itemsize
    if size < expected:
        raise UserError(
            f"token shard {path}: truncated ({size} bytes, the header's {count} tokens need "
            f"{expected}); re-run prepare-text"
        )
    if size > expected:
        raise UserError(
            f"token shard {path}: {size - expected} unexpected trailing bytes after {count} tokens"
        )
    return count


def open_shard(path: PathLike) -> np.memmap:
    """Validate a shard and memory-map its tokens (read-only uint16 array of length count)."""
    count = read_shard_header(path)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))


def expand_shards(pattern: PathLike | Sequence[PathLike]) -> list[Path]:
    """A glob, a folder (all `*.bin` in it), a file, or a list of these -> sorted shard paths."""
    items = [pattern] if isinstance(pattern, (str, os.PathLike)) else list(pattern)
    out: list[Path] = []
    for item in items:
        s = str(item)
        p = Path(s)
        if p.is_dir():
            matches = sorted(p.glob("*.bin"))
        elif globlib.has_magic(s):
            matches = sorted(Path(m) for m in globlib.glob(s))
        else:
            matches = [p] if p.exists() else []
        if not matches:
            raise UserError(f"no token shard matches '{s}'")
        out.extend(matches)
    return out


# --------------------------------------------------------------------------------------------
# meta.json sidecar
# --------------------------------------------------------------------------------------------


def read_meta(folder: PathLike) -> dict[str, Any]:
    """Read `folder/meta.json` written by prepare-text."""
    path = Path(folder) / META_NAME
    try:
        meta = parse_json(path.read_bytes(), str(path))
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing: the shards' tokenizer is unknown. Shards written by "
            "`hrm-deeploop prepare-text` carry one; for shards from elsewhere write one with "
            "hrm_deeploop.text.shards.write_meta(folder, tokenizer_id='gpt2'), or skip the check: "
            "tokenizer_id=null (eval-gpt), data.tokenizer_id=null (train-gpt, sweep), tokenizer_id=None from Python"
        ) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e})") from None
    except DatasetError as e:
        raise UserError(str(e)) from None
    if meta.get("format") != META_FORMAT or "tokenizer_id" not in meta:
        raise UserError(f"{path}: not a token-shard metadata file (format '{meta.get('format')}')")
    return meta


def write_meta(folder: PathLike, tokenizer_id: str, **extra: Any) -> Path:
    """Write `meta.json` for a folder of shards (prepare-text does this; also for foreign shards)."""
    tok = get_tokenizer(tokenizer_id)
    meta = {
        "format": META_FORMAT,
        "tokenizer_id": tokenizer_id,
        "vocab_size": tok.n_vocab,
        "eot_token": tok.eot_token,
        "dtype": "uint16",
        **extra,
    }
    path = Path(folder) / META_NAME
    tmp = path.with_name(f".{META_NAME}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def check_meta(
    shards: Sequence[Path], tokenizer_id: str | None, vocab_size: int | None = None
) -> dict[str, Any] | None:
    """Check that every shard folder's meta.json names `tokenizer_id` and fits `vocab_size`.

    `tokenizer_id=None` skips the check (returns None). Returns the (common) metadata.
    """
    if tokenizer_id is None:
        return None
    metas = {folder: read_meta(folder) for folder in sorted({p.parent for p in shards})}
    for folder, meta in metas.items():
        if meta["tokenizer_id"] != tokenizer_id:
            raise UserError(
                f"tokenizer mismatch: shards in {folder} were written with tokenizer "
                f"'{meta['tokenizer_id']}' but the model uses '{tokenizer_id}'"
            )
        if vocab_size is not None and int(meta["vocab_size"]) > vocab_size:
            raise UserError(
                f"tokenizer mismatch: shards in {folder} have vocabulary size {meta['vocab_size']}, "
                f"larger than the model's {vocab_size}"
            )
    return next(iter(metas.values()))
