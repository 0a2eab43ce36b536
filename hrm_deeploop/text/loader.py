"""Loaders over token shards: shuffled training batches (`TokenShards`) and fixed validation
batches (`iter_eval_batches`), each rank-sharded and resumable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrm_deeploop.errors import UserError
from hrm_deeploop.text.shards import PathLike, check_meta, expand_shards, open_shard, read_shard_header

if TYPE_CHECKING:
    import torch


def _to_xy(windows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    import torch  # lazy: torch only where windows become tensors

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
        self.vocab_size = vocab_size
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

    def _locate(self, item: int) -> tuple[int, int]:
        """(shard index, first token) of stream item `item` of this epoch."""
        slot = int(np.searchsorted(self._cum, item, side="right")) - 1
        shard = int(self._order[slot])
        if self._perm_cache is None or self._perm_cache[0] != shard:
            n = int(self._cum[slot + 1] - self._cum[slot])
            rng = np.random.default_rng([self.seed, self.epoch, 1 + shard])
            self._perm_cache = (shard, rng.permutation(n))
        return shard, int(self._offsets[shard]) + int(self._perm_cache[1][item - self._cum[slot]]) * self.seq_len

    def _window(self, item: int) -> np.ndarray:
        shard, start = self._locate(item)
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
        if self.vocab_size is not None:
            _check_ids(windows, self.vocab_size, lambda i: self._where(first + i))
        self.position += self.global_batch
        return _to_xy(windows)

    def _where(self, item: int) -> str:
        shard, start = self._locate(item)
        return f"{self.paths[shard]} at token {start}"

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
        if vocab_size is not None:
            _check_ids(windows, vocab_size, lambda k, f=first: f"{paths[index[f + k][0]]} at token {index[f + k][1]}")
        yield _to_xy(windows)


def _check_ids(windows: list[np.ndarray], vocab_size: int, where) -> None:
    """Every token id must be < vocab_size (the model's embedding rows); name the first bad window."""
    if max(int(w.max()) for w in windows) < vocab_size:
        return
    k = next(i for i, w in enumerate(windows) if int(w.max()) >= vocab_size)
    raise UserError(f"token shard {where(k)}: token id {int(windows[k].max())} is outside the model's vocabulary "
                    f"(model.vocab_size={vocab_size}); the shards were written with another tokenizer?")
