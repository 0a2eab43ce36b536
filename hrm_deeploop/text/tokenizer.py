"""GPT-2 BPE tokenizer that works offline.

tiktoken's `get_encoding("gpt2")` downloads OpenAI's `vocab.bpe` / `encoder.json` on first use.
We vendor the same ranks instead (`assets/gpt2.tiktoken.gz`, 50,256 byte-level merges in
tiktoken's "base64 rank" format; see assets/README.md for provenance) and build the identical
`tiktoken.Encoding`: same regex, same ranks, `<|endoftext|>` = 50256. Ids are GPT-2's.

Token shards record `tokenizer_id` in their `meta.json` so a model trained on one vocabulary is
not fed shards of another.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from hrm_deeploop.errors import UserError

GPT2_ASSET = Path(__file__).resolve().parent / "assets" / "gpt2.tiktoken.gz"
# sha256 of the uncompressed ranks file; equals tiktoken's published hash of r50k_base.tiktoken
# (GPT-2's ranks), so a corrupted or edited asset is caught on load.
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
# GPT-2's pre-tokenisation regex (tiktoken's r50k_pat_str).
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
GPT2_EOT_ID = 50256
GPT2_VOCAB_SIZE = 50257


def _load_ranks(path: Path = GPT2_ASSET) -> dict[bytes, int]:
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as e:
        raise UserError(f"cannot read the vendored GPT-2 BPE ranks {path}: {e}") from None
    if hashlib.sha256(raw).hexdigest() != GPT2_RANKS_SHA256:
        raise UserError(f"the vendored GPT-2 BPE ranks {path} are corrupted (sha256 mismatch)")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


class Tokenizer:
    """A thin wrapper over `tiktoken.Encoding` with the names the rest of the code uses.

    `encode` never parses special tokens in the text (a literal "<|endoftext|>" in a document is
    encoded as ordinary text); documents are separated by `eot_token`, added explicitly.
    """

    def __init__(self, encoding, tokenizer_id: str) -> None:
        self.encoding = encoding
        self.tokenizer_id = tokenizer_id
        self.eot_token: int = encoding.eot_token
        self.n_vocab: int = encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 8) -> list[list[int]]:
        """Encode many texts on tiktoken's thread pool (the Rust core releases the GIL)."""
        return self.encoding.encode_ordinary_batch(list(texts), num_threads=num_threads)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.encoding.decode(list(tokens))

    def __repr__(self) -> str:
        return f"Tokenizer({self.tokenizer_id!r}, n_vocab={self.n_vocab})"


@lru_cache(maxsize=1)
def get_gpt2_tokenizer() -> Tokenizer:
    """GPT-2's tokenizer (50,257 ids, `<|endoftext|>` = 50256), built from the vendored ranks."""
    import tiktoken  # lazy: tiktoken only for the GPT-2 tokenizer

    enc = tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=_load_ranks(),
        special_tokens={ENDOFTEXT: GPT2_EOT_ID},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )
    return Tokenizer(enc, tokenizer_id="gpt2")


BYTES_EOT_ID = 256
BYTES_VOCAB_SIZE = 257


class ByteTokenizer:
    """Byte-level tokenizer: ids 0..255 are the UTF-8 bytes of the text, 256 is the document
    separator (`eot_token`). Same interface as `Tokenizer`. With 257 ids the tied embedding/head of
    a tiny model is ~200x smaller than GPT-2's 50,257, which is what makes CPU-scale LM runs
    affordable; pad `model.vocab_size` (e.g. 320) for aligned matmuls.
    """

    tokenizer_id = "bytes"
    eot_token = BYTES_EOT_ID
    n_vocab = BYTES_VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: Sequence[str], num_threads: int = 8) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, tokens: Sequence[int]) -> str:
        """Bytes -> text; the separator (and any id > 255) decodes as "<|endoftext|>"; invalid UTF-8
        sequences become U+FFFD."""
        out, run = [], bytearray()
        for t in tokens:
            t = int(t)
            if 0 <= t < 256:
                run.append(t)
            else:
                out.append(run.decode("utf-8", errors="replace"))
                run = bytearray()
                out.append(ENDOFTEXT)
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def __repr__(self) -> str:
        return f"ByteTokenizer(n_vocab={self.n_vocab})"


@lru_cache(maxsize=1)
def get_bytes_tokenizer() -> ByteTokenizer:
    """UTF-8 bytes (ids 0..255) plus a document separator 256: 257 ids."""
    return ByteTokenizer()


# Registry of tokenizers by the id written into shard metadata (explicit, greppable).
TOKENIZERS = {"gpt2": get_gpt2_tokenizer, "bytes": get_bytes_tokenizer}


def get_tokenizer(tokenizer_id: str) -> Tokenizer | ByteTokenizer:
    if tokenizer_id not in TOKENIZERS:
        raise UserError(f"unknown tokenizer '{tokenizer_id}'; known: {sorted(TOKENIZERS)}")
    return TOKENIZERS[tokenizer_id]()
