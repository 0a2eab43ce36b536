"""`hrm-deeploop prepare-text`: documents (txt / JSONL / Parquet / a Hugging Face dataset / the
bundled corpus) -> token shards + meta.json, written atomically."""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import MISSING

from arc_data.budget import check_fits
from arc_data.files.guard import checked_output_dir
from arc_data.files.jsonio import parse_json
from arc_data.files.names import why_not_a_file
from arc_data.files.publish import atomic_dir
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.model_config import GPTConfig
from hrm_deeploop.text.corpus import write_demo_corpus
from hrm_deeploop.text.shards import META_NAME, TOKEN_DTYPE, open_shard, write_meta, write_shard
from hrm_deeploop.text.tokenizer import TOKENIZERS, get_tokenizer
from hrm_deeploop.typed_config import at_least, one_of, optional_at_least, to_dict

# The smallest shard: one window of the looped GPT's default context (seq_len + 1 tokens), the least
# train-gpt's loader reads from a shard. Smaller shards (shard_size=1: one token each) are refused, and
# a short last shard of a split is appended to the one before it.
MIN_SHARD_TOKENS = GPTConfig.seq_len + 1
DEMO_CORPUS = "demo_corpus.jsonl"  # demo_docs=N: the bundled corpus, written beside its shards
# every name prepare-text writes (shards as `_ShardWriter` names them): overwrite=true replaces a folder
# holding its meta.json and nothing else (arc_data.files.guard.check_replaceable)
OUTPUTS = (META_NAME, DEMO_CORPUS, "train_[0-9][0-9][0-9][0-9][0-9][0-9]*.bin", "val_[0-9][0-9][0-9][0-9][0-9][0-9]*.bin")


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

    def __post_init__(self) -> None:
        at_least("shard_size", self.shard_size, MIN_SHARD_TOKENS)
        at_least("val_tokens", self.val_tokens, 0)
        at_least("batch_docs", self.batch_docs, 1)
        at_least("demo_docs", self.demo_docs, 0)
        at_least("num_workers", self.num_workers, 0)
        at_least("seed", self.seed, 0)
        optional_at_least("max_tokens", self.max_tokens, 1)
        one_of("txt_split", self.txt_split, ("file", "paragraph"))
        one_of("tokenizer", self.tokenizer, TOKENIZERS)


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
            raise UserError(f"input '{item}' {why_not_a_file(p)}")
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
            row = parse_json(line, f"input {path}:{lineno}")
            if not isinstance(row, dict) or cfg.text_field not in row:
                raise UserError(f"input {path}:{lineno}: no '{cfg.text_field}' field (set text_field=...)")
            if not isinstance(row[cfg.text_field], str):
                raise UserError(f"input {path}:{lineno}: field '{cfg.text_field}' is not a string")
            yield row[cfg.text_field]
    else:
        try:
            import pyarrow.parquet as pq  # lazy: pyarrow only for Parquet input
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
        import datasets  # lazy: `datasets` only for Hub input
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

    def _flush(self, last: bool = False) -> None:
        if self.fill == 0:
            return
        done = self.shards[self.split]
        if last and self.fill < MIN_SHARD_TOKENS and done:
            # a short last shard is one no train-gpt context fits in (it refuses the whole folder):
            # its tokens go to the end of the split's previous shard instead
            prev = self.folder / done[-1]["file"]
            write_shard(prev, np.concatenate([open_shard(prev), self.buf[: self.fill]]))
            done[-1]["num_tokens"] += int(self.fill)
        else:
            name = f"{self.split}_{len(done):06d}.bin"
            write_shard(self.folder / name, self.buf[: self.fill])
            done.append({"file": name, "num_tokens": int(self.fill)})
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
                    self._flush(last=True)
                    self.split = "train"
                    continue
            if self.fill == self.shard_size:
                self._flush()

    def close(self) -> None:
        self._flush(last=True)


def prepare(cfg: PrepareTextConfig) -> dict[str, Any]:
    """Tokenise the configured corpus into `cfg.output_dir`; return the metadata written.

    Each document is prefixed by `<|endoftext|>` (GPT-2's document separator). The output folder
    appears only when complete: shards are written into a temporary sibling folder that is renamed
    into place at the end (and removed on any error).
    """
    from tqdm import tqdm  # lazy: keeps tqdm off `prepare-text --help`

    chosen = [bool(cfg.inputs), cfg.hf_dataset is not None, cfg.demo_docs > 0]
    if sum(chosen) != 1:
        raise UserError("give exactly one corpus: inputs=[...], hf_dataset=NAME, or demo_docs=N")
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, cfg.inputs, marker=META_NAME, writer="prepare-text",
                                outputs=OUTPUTS)
    out = target.path
    tok = get_tokenizer(cfg.tokenizer)
    if tok.n_vocab > np.iinfo(np.uint16).max + 1:
        raise UserError(f"tokenizer '{cfg.tokenizer}' has {tok.n_vocab} ids; uint16 shards hold 65536")

    files = _expand_inputs(cfg.inputs)  # before the temp folder exists, so it is never an input
    # the writer holds one shard of tokens, and a short last shard's merge copies one more
    check_fits(f"shard_size={cfg.shard_size}", memory=2 * cfg.shard_size * np.dtype(TOKEN_DTYPE).itemsize,
               fix="lower shard_size (tokens per shard; the default is 10**8)")
    with atomic_dir(target) as tmp:
        if cfg.demo_docs > 0:
            files = [write_demo_corpus(tmp / DEMO_CORPUS, cfg.demo_docs, cfg.seed)]
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

    rate = num_tokens / max(seconds, 1e-9)
    print(
        f"prepare-text: {num_docs:,} documents -> {num_tokens:,} tokens ({rate:,.0f} tok/s)\n"
        f"  train: {train_tokens:,} tokens in {len(writer.shards['train'])} shard(s)\n"
        f"  val:   {val_tokens:,} tokens in {len(writer.shards['val'])} shard(s)\n"
        f"  tokenizer: {cfg.tokenizer} (vocab {tok.n_vocab}); wrote {out}/"
    )
    return meta


def run(cfg: PrepareTextConfig) -> int:
    """CLI entry point for `hrm-deeploop prepare-text`."""
    prepare(cfg)
    return 0
