"""Token shards for the looped GPT: the on-disk format, the training/eval loaders, `prepare-text`.

Shard format (llm.c / modded-nanogpt `.bin`): a header of 256 little-endian int32 — magic
20240520, version 1, token count, the rest zero — then `count` uint16 tokens. Files are named
`train_000000.bin`, `val_000000.bin`, ... and each output folder carries a `meta.json` sidecar
(tokenizer id, vocabulary size, counts, source hashes) so a tokenizer mismatch between shards and
a model is caught before training (`check_meta`).

Data flow:  text/JSONL/Parquet/HF dataset --run_prepare--> folder of shards + meta.json
            --TokenShards (train) / iter_eval_batches (val)--> (x, y) int64 tensors (B, T)
"""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import MISSING

from hrm_deeploop.errors import UserError

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

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
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing: the shards' tokenizer is unknown. Shards written by "
            "`hrm-deeploop prepare-text` carry one; for shards from elsewhere write one with "
            "hrm_deeploop.text.write_meta(folder, tokenizer_id='gpt2'), or pass tokenizer_id=None "
            "to skip the check"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot read it ({e})") from None
    if meta.get("format") != META_FORMAT or "tokenizer_id" not in meta:
        raise UserError(f"{path}: not a token-shard metadata file (format '{meta.get('format')}')")
    return meta


def write_meta(folder: PathLike, tokenizer_id: str, **extra: Any) -> Path:
    """Write `meta.json` for a folder of shards (prepare-text does this; also for foreign shards)."""
    from hrm_deeploop.tokenizer import get_tokenizer

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


# --------------------------------------------------------------------------------------------
# Training loader
# --------------------------------------------------------------------------------------------


def _to_xy(windows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    buf = torch.from_numpy(np.stack(windows).astype(np.int64))  # (B, T+1)
    return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()  # x, y: (B, T)


class TokenShards:
    """Shuffled (B, T) batches of next-token pairs from `.bin` shards, split across ranks.

    Every epoch cuts each shard into windows of T+1 tokens at stride T, starting at a random
    offset in [0, T) (so window boundaries move between epochs); consecutive windows share one
    token, so every token is an input at most once and a target at most once per epoch. The
    windows of all shards form one stream: shards in a random order, windows in a random order
    within each shard (reads stay local to one memmapped shard at a time). Global batch g is
    stream items [g*W*B, (g+1)*W*B); rank r takes the r-th block of B, so ranks never share a
    window. The tail of an epoch shorter than a global batch is dropped. Everything is a function
    of (seed, epoch), so `state_dict()` = (epoch, position in the stream) resumes exactly.
    """

    def __init__(
        self,
        shards: PathLike | Sequence[PathLike],
        seq_len: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        tokenizer_id: str | None = "gpt2",
        vocab_size: int | None = None,
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise UserError(f"TokenShards: seq_len ({seq_len}) and batch_size ({batch_size}) must be >= 1")
        if not 0 <= rank < world_size:
            raise UserError(f"TokenShards: rank {rank} is not in [0, world_size={world_size})")
        self.paths = expand_shards(shards)
        self.meta = check_meta(self.paths, tokenizer_id, vocab_size)
        self.seq_len, self.batch_size = seq_len, batch_size
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.num_tokens = [read_shard_header(p) for p in self.paths]
        for path, n in zip(self.paths, self.num_tokens):
            if n < seq_len + 1:
                raise UserError(
                    f"context longer than a shard: {path} holds {n} tokens, fewer than "
                    f"seq_len + 1 = {seq_len + 1}; lower seq_len or write larger shards"
                )
        self.global_batch = batch_size * world_size
        # Fewest windows any epoch can have (largest offset, T - 1): every epoch fills a batch.
        fewest = sum((n - seq_len) // seq_len for n in self.num_tokens)
        if fewest < self.global_batch:
            raise UserError(
                f"TokenShards: the shards hold {fewest} windows of {seq_len + 1} tokens, fewer "
                f"than one global batch ({batch_size} x {world_size} ranks)"
            )
        self.epoch, self.position = 0, 0  # position: index into this epoch's window stream
        self._plan_epoch()
        self._maps: dict[int, np.memmap] = {}
        self._perm_cache: tuple[int, np.ndarray] | None = None

    @property
    def tokens_per_batch(self) -> int:
        """Tokens per rank per batch (B * T)."""
        return self.batch_size * self.seq_len

    def _plan_epoch(self) -> None:
        rng = np.random.default_rng([self.seed, self.epoch])
        self._order = rng.permutation(len(self.paths))  # shard visit order
        self._offsets = rng.integers(0, self.seq_len, size=len(self.paths))  # per shard
        counts = np.array(
            [(self.num_tokens[i] - 1 - self._offsets[i]) // self.seq_len for i in self._order]
        )
        counts = np.maximum(counts, 0)
        self._cum = np.concatenate([[0], np.cumsum(counts)])  # stream index where slot k starts
        self._total = int(self._cum[-1])
        self._perm_cache = None

    def _window(self, item: int) -> np.ndarray:
        slot = int(np.searchsorted(self._cum, item, side="right")) - 1
        shard = int(self._order[slot])
        if self._perm_cache is None or self._perm_cache[0] != shard:
            n = int(self._cum[slot + 1] - self._cum[slot])
            rng = np.random.default_rng([self.seed, self.epoch, 1 + shard])
            self._perm_cache = (shard, rng.permutation(n))
        start = int(self._offsets[shard]) + int(self._perm_cache[1][item - self._cum[slot]]) * self.seq_len
        if shard not in self._maps:
            self._maps[shard] = open_shard(self.paths[shard])
        return self._maps[shard][start : start + self.seq_len + 1]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's next (x, y), each int64 (B, T) on CPU; y[:, t] is the token after x[:, t]."""
        if self.position + self.global_batch > self._total:
            self.epoch, self.position = self.epoch + 1, 0
            self._plan_epoch()
        first = self.position + self.rank * self.batch_size
        windows = [self._window(first + i) for i in range(self.batch_size)]
        self.position += self.global_batch
        return _to_xy(windows)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "shards": [p.name for p in self.paths],
            "num_tokens": list(self.num_tokens),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved position. The shards, seed, seq_len and global batch must match
        (the per-rank batch and world size may change if their product does not)."""
        mine = self.state_dict()
        for key in ("seed", "seq_len", "global_batch", "shards", "num_tokens"):
            if state.get(key) != mine[key]:
                raise UserError(
                    f"TokenShards: cannot resume, '{key}' differs (checkpoint {state.get(key)!r:.200}, "
                    f"now {mine[key]!r:.200})"
                )
        self.epoch = int(state["epoch"])
        self._plan_epoch()
        self.position = int(state["position"])


def iter_eval_batches(
    shards: PathLike | Sequence[PathLike],
    seq_len: int,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    max_batches: int | None = None,
    tokenizer_id: str | None = "gpt2",
    vocab_size: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Sequential (x, y) batches for validation loss: the same windows every call.

    Windows of T+1 tokens at stride T from offset 0 of each shard, in file order; global batches
    of W*B windows, rank r takes its block of B. Only whole global batches are yielded, so every
    rank runs the same number of steps (DDP all-reduce safe). `max_batches` caps batches per rank.
    """
    if seq_len < 1 or batch_size < 1:
        raise UserError(f"iter_eval_batches: seq_len ({seq_len}) and batch_size ({batch_size}) must be >= 1")
    if not 0 <= rank < world_size:
        raise UserError(f"iter_eval_batches: rank {rank} is not in [0, world_size={world_size})")
    paths = expand_shards(shards)
    check_meta(paths, tokenizer_id, vocab_size)
    counts = [read_shard_header(p) for p in paths]
    for path, n in zip(paths, counts):
        if n < seq_len + 1:
            raise UserError(
                f"context longer than a shard: {path} holds {n} tokens, fewer than "
                f"seq_len + 1 = {seq_len + 1}"
            )
    index = [(i, k * seq_len) for i, n in enumerate(counts) for k in range((n - 1) // seq_len)]
    global_batch = batch_size * world_size
    num_batches = len(index) // global_batch
    if max_batches is not None:
        num_batches = min(num_batches, max_batches)
    if num_batches == 0:
        raise UserError(
            f"iter_eval_batches: the shards hold {len(index)} windows of {seq_len + 1} tokens, "
            f"fewer than one global batch ({batch_size} x {world_size} ranks)"
        )
    maps = [open_shard(p) for p in paths]
    for g in range(num_batches):
        first = g * global_batch + rank * batch_size
        windows = [maps[i][s : s + seq_len + 1] for i, s in index[first : first + batch_size]]
        yield _to_xy(windows)


# --------------------------------------------------------------------------------------------
# Demo corpus
# --------------------------------------------------------------------------------------------

_SYLLABLES = ["ka", "lo", "mi", "ren", "ta", "vo", "zu", "pel", "dor", "sin", "ba", "qui", "nor", "el", "fa"]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                 "eighteen", "nineteen", "twenty"]
_COLORS = ["red", "blue", "green", "yellow", "white", "black", "purple", "orange"]
_ANIMALS = ["fox", "owl", "cat", "horse", "frog", "bear", "crow", "goat"]
_ARTICLE = {a: ("an" if a[0] in "aeiou" else "a") for a in _ANIMALS}
_FOODS = ["apples", "bread", "fish", "rice", "honey", "cheese", "plums", "beans"]


def write_demo_corpus(path: PathLike, num_docs: int = 2000, seed: int = 0) -> Path:
    """Write a synthetic, deterministic JSONL corpus (`{"text": ...}` per line) for CPU demos.

    A small invented world, fixed by `seed`: 24 made-up towns, each with a colour, an animal, a
    food and a neighbour. Documents mix templated facts about the towns (the same facts recur, so
    a tiny model can memorise them), additions with answers, and counting runs. Nothing is
    downloaded; no third-party text. `num_docs=2000` gives about 450 KB / 100K GPT-2 tokens.
    """
    if num_docs < 1:
        raise UserError(f"write_demo_corpus: num_docs must be >= 1, got {num_docs}")
    rng = np.random.default_rng(seed)
    towns: list[str] = []
    while len(towns) < 24:
        name = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4)))).capitalize()
        if name not in towns:
            towns.append(name)
    facts = {
        t: {
            "color": str(rng.choice(_COLORS)),
            "animal": str(rng.choice(_ANIMALS)),
            "food": str(rng.choice(_FOODS)),
            "near": towns[(i + 1 + int(rng.integers(0, len(towns) - 1))) % len(towns)],
        }
        for i, t in enumerate(towns)
    }

    def town_sentence(t: str) -> str:
        f = facts[t]
        return str(rng.choice([
            f"The flag of {t} is {f['color']}.",
            f"In {t} the people keep {_ARTICLE[f['animal']]} {f['animal']}.",
            f"The people of {t} like to eat {f['food']}.",
            f"{t} is next to {f['near']}.",
            f"The town of {t} has a {f['color']} flag and {_ARTICLE[f['animal']]} {f['animal']}.",
        ]))

    def sum_sentence() -> str:
        a, b = (int(v) for v in rng.integers(0, 11, size=2))
        return str(rng.choice([
            f"{a} plus {b} is {a + b}.",
            f"{_NUMBER_WORDS[a]} plus {_NUMBER_WORDS[b]} is {_NUMBER_WORDS[a + b]}.",
        ]))

    def count_sentence() -> str:
        start = int(rng.integers(0, 12))
        n = int(rng.integers(3, 9))
        return "Counting: " + ", ".join(_NUMBER_WORDS[start : start + n]) + "."

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for _ in range(num_docs):
        kind = int(rng.integers(0, 3))
        n_sent = int(rng.integers(3, 8))
        if kind == 0:
            t = str(rng.choice(towns))
            sents = [f"A note about {t}."] + [town_sentence(t) for _ in range(n_sent)]
        elif kind == 1:
            sents = ["Some sums."] + [sum_sentence() for _ in range(n_sent)]
        else:
            sents = [count_sentence() if rng.random() < 0.5 else town_sentence(str(rng.choice(towns)))
                     for _ in range(n_sent)]
        lines.append(json.dumps({"text": " ".join(sents)}))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------
# prepare-text
# --------------------------------------------------------------------------------------------


@dataclass
class PrepareTextConfig:
    """`hrm-deeploop prepare-text`: documents -> GPT-2 token shards + meta.json."""

    output_dir: str = MISSING
    # Local inputs: files, folders (searched recursively for the suffixes below) or globs.
    # .txt/.md: one document per file (txt_split=file) or per blank-line paragraph (paragraph);
    # .jsonl/.json (one JSON object per line) and .parquet: one document per row, `text_field`.
    inputs: list[str] = field(default_factory=list)
    text_field: str = "text"
    txt_split: str = "file"  # file | paragraph
    # A Hugging Face dataset instead (needs the `text` extra and the network), streamed.
    hf_dataset: str | None = None  # e.g. HuggingFaceFW/fineweb-edu
    hf_config: str | None = None  # e.g. sample-10BT
    hf_split: str = "train"
    # The bundled synthetic corpus instead (write_demo_corpus): number of documents, 0 = off.
    demo_docs: int = 0
    seed: int = 0
    tokenizer: str = "gpt2"  # gpt2 (50,257 BPE ids) | bytes (UTF-8 bytes + separator, 257 ids)
    shard_size: int = 100_000_000  # tokens per shard (modded-nanogpt's 10^8)
    val_tokens: int = 10_485_760  # the first tokens of the corpus form the val split
    max_tokens: int | None = None  # stop after this many tokens (e.g. to cut a streamed dataset)
    num_workers: int = 0  # tokeniser threads; 0 = all CPUs
    batch_docs: int = 512  # documents per tokenisation batch
    overwrite: bool = False
    progress: bool = True


_TXT_SUFFIXES = (".txt", ".md")
_JSONL_SUFFIXES = (".jsonl", ".json")
_PARQUET_SUFFIXES = (".parquet",)
_SUFFIXES = _TXT_SUFFIXES + _JSONL_SUFFIXES + _PARQUET_SUFFIXES


def _expand_inputs(inputs: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _SUFFIXES)
        elif globlib.has_magic(item):
            found = sorted(Path(f) for f in globlib.glob(item, recursive=True) if Path(f).is_file())
        elif p.is_file():
            found = [p]
        else:
            raise UserError(f"input '{item}' does not exist")
        if not found:
            raise UserError(f"input '{item}' matches no {'/'.join(_SUFFIXES)} file")
        for f in found:
            if f.suffix.lower() not in _SUFFIXES:
                raise UserError(f"input {f}: unsupported file type (expected one of {', '.join(_SUFFIXES)})")
        files.extend(found)
    return files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"input {path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise UserError(f"input {path}: cannot read it ({e.strerror or e})") from None


def _read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, streamed (JSONL files can be many GB)."""
    lineno = 0
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):  # noqa: B007 - lineno used after the loop
                yield lineno, line
    except UnicodeDecodeError as e:
        raise UserError(f"input {path}: not valid UTF-8 after line {lineno} ({e.reason})") from None
    except OSError as e:
        raise UserError(f"input {path}: cannot read it ({e.strerror or e})") from None


def _docs_from_file(path: Path, cfg: PrepareTextConfig) -> Iterator[str]:
    suffix = path.suffix.lower()
    if suffix in _TXT_SUFFIXES:
        text = _read_text(path)
        if cfg.txt_split == "file":
            yield text
        else:
            yield from re.split(r"\n[ \t\r\f\v]*\n", text)
    elif suffix in _JSONL_SUFFIXES:
        for lineno, line in _read_lines(path):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"input {path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(row, dict) or cfg.text_field not in row:
                raise UserError(f"input {path}:{lineno}: no '{cfg.text_field}' field (set text_field=...)")
            if not isinstance(row[cfg.text_field], str):
                raise UserError(f"input {path}:{lineno}: field '{cfg.text_field}' is not a string")
            yield row[cfg.text_field]
    else:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(
                f"input {path}: reading Parquet needs pyarrow; install the text extra: "
                "pip install 'hrm-deeploop[text]'"
            ) from None
        try:
            pf = pq.ParquetFile(path)
        except (OSError, ValueError) as e:
            raise UserError(f"input {path}: cannot read it as Parquet ({e})") from None
        if cfg.text_field not in pf.schema_arrow.names:
            raise UserError(
                f"input {path}: no '{cfg.text_field}' column (columns: {pf.schema_arrow.names}); "
                "set text_field=..."
            )
        for batch in pf.iter_batches(columns=[cfg.text_field], batch_size=4096):
            yield from (t for t in batch.column(0).to_pylist() if t is not None)


def _docs_from_hf(cfg: PrepareTextConfig) -> Iterator[str]:
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"hf_dataset={cfg.hf_dataset} needs the `datasets` library; install the text extra: "
            "pip install 'hrm-deeploop[text]'"
        ) from None
    try:
        ds = datasets.load_dataset(cfg.hf_dataset, name=cfg.hf_config, split=cfg.hf_split, streaming=True)
        it = iter(ds)
        first = next(it, None)
    except Exception as e:  # noqa: BLE001 - network/hub failures come as many types; re-raised as one
        raise UserError(
            f"cannot load Hugging Face dataset '{cfg.hf_dataset}' (config {cfg.hf_config}, split "
            f"{cfg.hf_split}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. "
            "Is the network reachable (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE unset)?"
        ) from e
    if first is None:
        return
    if cfg.text_field not in first:
        raise UserError(f"dataset '{cfg.hf_dataset}': no '{cfg.text_field}' field (fields: {list(first)})")
    yield first[cfg.text_field]
    for row in it:
        yield row[cfg.text_field]


class _ShardWriter:
    """Buffers tokens and writes val shards (first `val_tokens`), then train shards."""

    def __init__(self, folder: Path, shard_size: int, val_tokens: int) -> None:
        self.folder, self.shard_size, self.val_left = folder, shard_size, val_tokens
        self.buf = np.empty(shard_size, dtype=TOKEN_DTYPE)
        self.fill = 0
        self.split = "val" if val_tokens > 0 else "train"
        self.shards: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}

    def _flush(self) -> None:
        if self.fill == 0:
            return
        name = f"{self.split}_{len(self.shards[self.split]):06d}.bin"
        write_shard(self.folder / name, self.buf[: self.fill])
        self.shards[self.split].append({"file": name, "num_tokens": int(self.fill)})
        self.fill = 0

    def add(self, tokens: np.ndarray) -> None:
        while tokens.size:
            room = self.shard_size - self.fill
            if self.split == "val":
                room = min(room, self.val_left)
            take = min(room, tokens.size)
            self.buf[self.fill : self.fill + take] = tokens[:take]
            self.fill += take
            tokens = tokens[take:]
            if self.split == "val":
                self.val_left -= take
                if self.val_left == 0:
                    self._flush()
                    self.split = "train"
                    continue
            if self.fill == self.shard_size:
                self._flush()

    def close(self) -> None:
        self._flush()


def prepare(cfg: PrepareTextConfig) -> dict[str, Any]:
    """Tokenise the configured corpus into `cfg.output_dir`; return the metadata written.

    Each document is prefixed by `<|endoftext|>` (GPT-2's document separator). The output folder
    appears only when complete: shards are written into a temporary sibling folder that is renamed
    into place at the end (and removed on any error).
    """
    from tqdm import tqdm

    from hrm_deeploop.tokenizer import get_tokenizer

    if cfg.shard_size < 1 or cfg.val_tokens < 0 or cfg.batch_docs < 1:
        raise UserError("shard_size and batch_docs must be >= 1 and val_tokens >= 0")
    if cfg.txt_split not in ("file", "paragraph"):
        raise UserError(f"txt_split must be 'file' or 'paragraph', got '{cfg.txt_split}'")
    chosen = [bool(cfg.inputs), cfg.hf_dataset is not None, cfg.demo_docs > 0]
    if sum(chosen) != 1:
        raise UserError("give exactly one corpus: inputs=[...], hf_dataset=NAME, or demo_docs=N")
    out = Path(cfg.output_dir)
    if out.exists() and not cfg.overwrite:
        raise UserError(f"output_dir {out} already exists; pass overwrite=true to replace it")
    tok = get_tokenizer(cfg.tokenizer)
    if tok.n_vocab > np.iinfo(np.uint16).max + 1:
        raise UserError(f"tokenizer '{cfg.tokenizer}' has {tok.n_vocab} ids; uint16 shards hold 65536")

    files = _expand_inputs(cfg.inputs)  # before the temp folder exists, so it is never an input
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        if cfg.demo_docs > 0:
            files = [write_demo_corpus(tmp / "demo_corpus.jsonl", cfg.demo_docs, cfg.seed)]
        sources: list[dict[str, Any]] = []
        if cfg.hf_dataset is not None:
            sources.append({"hf_dataset": cfg.hf_dataset, "config": cfg.hf_config, "split": cfg.hf_split})
            docs: Iterator[str] = _docs_from_hf(cfg)
        else:
            for f in files:
                entry = {"path": str(f if f.parent != tmp else f.name), "sha256": _sha256(f),
                         "bytes": f.stat().st_size}
                sources.append(entry)
            docs = (d for f in files for d in _docs_from_file(f, cfg))

        writer = _ShardWriter(tmp, cfg.shard_size, cfg.val_tokens)
        num_threads = cfg.num_workers or os.cpu_count() or 1
        limit = cfg.max_tokens if cfg.max_tokens is not None else -1
        num_docs = num_tokens = 0
        t0 = time.perf_counter()
        bar = tqdm(unit="tok", unit_scale=True, desc="tokenising", disable=not cfg.progress,
                   file=sys.stderr, total=cfg.max_tokens)
        batch: list[str] = []

        def flush_batch() -> bool:
            nonlocal num_docs, num_tokens
            for ids in tok.encode_batch(batch, num_threads=num_threads):
                arr = np.empty(len(ids) + 1, dtype=TOKEN_DTYPE)
                arr[0] = tok.eot_token
                arr[1:] = ids
                if limit >= 0 and num_tokens + arr.size > limit:
                    arr = arr[: limit - num_tokens]
                writer.add(arr)
                num_docs += 1
                num_tokens += int(arr.size)
                bar.update(int(arr.size))
                if limit >= 0 and num_tokens >= limit:
                    return False
            batch.clear()
            return True

        for doc in docs:
            if doc is None or not doc.strip():
                continue  # missing or blank documents would add nothing but a separator
            batch.append(doc)
            if len(batch) >= cfg.batch_docs and not flush_batch():
                break
        else:
            if batch:
                flush_batch()
        bar.close()
        writer.close()
        seconds = time.perf_counter() - t0

        if num_docs == 0:
            raise UserError("empty corpus: the inputs contain no non-blank document")
        train_tokens = sum(s["num_tokens"] for s in writer.shards["train"])
        val_tokens = sum(s["num_tokens"] for s in writer.shards["val"])
        if train_tokens == 0:
            raise UserError(
                f"the corpus has only {num_tokens} tokens, all taken by the val split "
                f"(val_tokens={cfg.val_tokens}); lower val_tokens"
            )
        from hrm_deeploop.config import to_dict

        meta_path = write_meta(
            tmp,
            cfg.tokenizer,
            num_documents=num_docs,
            num_tokens={"train": train_tokens, "val": val_tokens},
            shards=writer.shards,
            sources=sources,
            config=to_dict(cfg),
            seconds=round(seconds, 3),
        )
        meta = json.loads(meta_path.read_text())
        if out.exists():  # overwrite=true: swap in, then remove the old folder
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rate = num_tokens / max(seconds, 1e-9)
    print(
        f"prepare-text: {num_docs:,} documents -> {num_tokens:,} tokens ({rate:,.0f} tok/s)\n"
        f"  train: {train_tokens:,} tokens in {len(writer.shards['train'])} shard(s)\n"
        f"  val:   {val_tokens:,} tokens in {len(writer.shards['val'])} shard(s)\n"
        f"  tokenizer: {cfg.tokenizer} (vocab {tok.n_vocab}); wrote {out}/"
    )
    return meta


def run_prepare(cfg: DictConfig) -> int:
    """CLI entry point for `hrm-deeploop prepare-text`."""
    from hrm_deeploop.config import typed

    prepare(typed(cfg, PrepareTextConfig))
    return 0
