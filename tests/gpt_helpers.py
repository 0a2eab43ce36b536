"""Tiny looped-GPT configs and an in-memory token stream with TokenShards' batching semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hrm_deeploop.models.model_config import GPTConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.lm import Data, unigram_entropy
from hrm_deeploop.training.train_config import TrainGPTConfig
from hrm_deeploop.typed_config import to_dict, typed

VOCAB = 64


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared, loaded CPU, OpenMP's spinning threads made these tiny
    models ~10x slower (measured: micro sweep 106 s with 2 threads, 9 s with 1)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_model(**kw: Any) -> GPTConfig:
    base = dict(vocab_size=VOCAB, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=1, mlp_multiple=16,
                seq_len=32)
    base.update(kw)
    return GPTConfig(**base)


def patterned_tokens(n: int, seed: int = 0, vocab: int = VOCAB) -> np.ndarray:
    """A learnable stream: repeated short random 'words' with a skewed unigram distribution."""
    rng = np.random.default_rng(seed)
    words = [rng.integers(0, vocab, size=int(rng.integers(2, 6))) for _ in range(24)]
    probs = 1.0 / np.arange(1, len(words) + 1)
    probs /= probs.sum()
    out: list[np.ndarray] = []
    total = 0
    while total < n:
        w = words[int(rng.choice(len(words), p=probs))]
        out.append(w)
        total += len(w)
    return np.concatenate(out)[:n].astype(np.int64)


class ArrayTokens:
    """Windows of T+1 tokens at stride T, shuffled per epoch by (seed, epoch); global batch g is
    windows [g*W*B, (g+1)*W*B) and rank r takes its block of B (as hrm_deeploop.text.loader.TokenShards)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, rank: int = 0, world_size: int = 1,
                 seed: int = 0):
        self.tokens, self.seq_len, self.batch_size = tokens, seq_len, batch_size
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.num_windows = (len(tokens) - 1) // seq_len
        self.epoch, self.position = 0, 0
        self._perm = np.random.default_rng([seed, 0]).permutation(self.num_windows)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.batch_size * self.world_size
        if self.position + g > self.num_windows:
            self.epoch, self.position = self.epoch + 1, 0
            self._perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_windows)
        first = self.position + self.rank * self.batch_size
        idx = self._perm[first:first + self.batch_size]
        buf = torch.from_numpy(np.stack([self.tokens[i * self.seq_len:(i + 1) * self.seq_len + 1] for i in idx]))
        self.position += g
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = state["epoch"]
        self._perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_windows)
        self.position = state["position"]


def array_data(train: np.ndarray, val: np.ndarray | None, seq_len: int, batch_size: int, rank: int = 0,
               world_size: int = 1, seed: int = 0) -> Data:
    def val_batches():
        n = (len(val) - 1) // seq_len
        windows = [val[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)]
        per = batch_size * world_size
        for g in range(n // per):
            chunk = windows[g * per + rank * batch_size: g * per + (rank + 1) * batch_size]
            buf = torch.from_numpy(np.stack(chunk))
            yield buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    return Data(train=ArrayTokens(train, seq_len, batch_size, rank, world_size, seed),
                val=val_batches if val is not None else None, unigram_entropy=unigram_entropy(train))


# flat keyword -> (section, key) in TrainGPTConfig, so tests read as one line
_SECTIONS = {"max_steps": "train", "stop_after": "train", "global_batch_tokens": "train", "micro_batch_size": "train",
             "log_every": "train", "progress": "train", "compile": "train", "eval_every": ("eval", "every"),
             "checkpoint_every": ("checkpoint", "every"), "keep_checkpoints": ("checkpoint", "keep")}


def tiny_train_cfg(out: str, model: GPTConfig | None = None, scaling: ScalingConfig | None = None,
                   **kw: Any) -> TrainGPTConfig:
    """A CPU-sized TrainGPTConfig for `out`; flat keywords (max_steps=, eval_every=, ...) go to their section."""
    values: dict[str, Any] = {"output_dir": out, "device": "cpu", "logger": "none",
                              "model": to_dict(model or tiny_model()), "scaling": to_dict(scaling or ScalingConfig()),
                              "train": {"max_steps": 20, "global_batch_tokens": 4 * 32, "micro_batch_size": 4,
                                        "log_every": 5, "progress": False},
                              "eval": {"every": 10}, "checkpoint": {"every": 10},
                              "optim": {"lr": 1e-2, "warmup_steps": 2}}
    for k, v in kw.items():
        where = _SECTIONS.get(k)
        if where is None:
            values[k] = v
        else:
            section, key = where if isinstance(where, tuple) else (where, k)
            values[section][key] = v
    return typed(values, TrainGPTConfig)


def write_gpt2_shards(root: Path) -> Path:
    """Tiny GPT-2-token shards (train_000000.bin, val_000000.bin, meta.json) of a learnable stream in `root`."""
    from hrm_deeploop.text.shards import write_meta, write_shard

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = [rng.integers(0, 50257, size=int(rng.integers(2, 5))) for _ in range(40)]
    stream = np.concatenate([words[i] for i in rng.integers(0, 40, size=3000)])
    write_shard(root / "train_000000.bin", stream[:7000])
    write_shard(root / "val_000000.bin", stream[7000:7600])
    write_meta(root, tokenizer_id="gpt2")
    return root
