"""KV caches for the looped GPT's generation: one slot per (physical block, round), or one per block.

A looped model visits each physical block R times per token, and each visit attends with its own
keys and values (round r's attention reads the earlier tokens' round-r keys). `KVCache` therefore
keeps K x R slots by default (`share_rounds=False`): cached decoding then computes exactly what the
full forward computes. With `share_rounds=True` (MELT / Mixture-of-Recursions style KV sharing) a
block keeps one slot for all its rounds: every round of a new token attends to the earlier tokens'
*last-round* keys and values, plus its own current-round ones; memory falls by R, and the logits
are no longer those of the full forward (the quality cost is measured in docs/generation.md).

A slot is a preallocated (B, H, max_len, D) buffer for keys and one for values; `update` writes the
T newest positions at [pos, pos + T) and returns everything up to pos + T. Every visit of a step
writes at the same positions, so in a shared slot the last round's keys overwrite the earlier
rounds' and remain. `KVCache.advance(T)` moves pos on once the step's rounds are done.

Architecture only: torch, no process group, no config files.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVSlot:
    """Keys and values of one attention visit (or, shared, of all rounds of one block)."""

    def __init__(self, cache: KVCache):
        self.cache = cache
        self.k: Tensor | None = None  # (B, H, max_len, D)
        self.v: Tensor | None = None

    def update(self, k_BHTD: Tensor, v_BHTD: Tensor) -> tuple[Tensor, Tensor]:
        """Store the T newest keys/values at [pos, pos + T); return keys and values (B, H, pos + T, D)."""
        B, H, T, D = k_BHTD.shape
        pos, end = self.cache.pos, self.cache.pos + T
        if end > self.cache.max_len:
            raise ValueError(f"KV cache of {self.cache.max_len} positions cannot take position {end - 1}")
        if self.k is None:
            shape = (B, H, self.cache.max_len, D)
            self.k = k_BHTD.new_empty(shape)
            self.v = v_BHTD.new_empty(shape)
        assert self.v is not None and self.k.shape[0] == B, "a KV cache serves one batch size"
        self.k[:, :, pos:end] = k_BHTD
        self.v[:, :, pos:end] = v_BHTD
        return self.k[:, :, :end], self.v[:, :, :end]

    def mask(self, T: int, S: int) -> Tensor | None:
        """Causal mask (T, S) of the T newest queries over S = pos + T keys; None when one query
        (it may see every key)."""
        if T == 1:
            return None
        return torch.ones(T, S, dtype=torch.bool, device=self.cache.device).tril(diagonal=S - T)

    def nbytes(self) -> int:
        return 0 if self.k is None or self.v is None else self.k.nbytes + self.v.nbytes


class KVCache:
    """K x R slots (`share_rounds=False`), or K slots each serving all R rounds (`share_rounds=True`).

    `num_rounds` is the most rounds a step may run; `max_len` the most positions (the model's
    seq_len: the rotary tables end there)."""

    def __init__(self, num_blocks: int, num_rounds: int, max_len: int, share_rounds: bool = False,
                 device: torch.device | str = "cpu"):
        self.num_blocks, self.num_rounds, self.max_len = num_blocks, num_rounds, max_len
        self.share_rounds = share_rounds
        self.device = torch.device(device)
        self.pos = 0
        per_block = 1 if share_rounds else num_rounds
        self.slots = [[KVSlot(self) for _ in range(per_block)] for _ in range(num_blocks)]

    def slot(self, block: int, round_: int) -> KVSlot:
        if round_ >= self.num_rounds:
            raise ValueError(f"KV cache built for {self.num_rounds} rounds, asked for round {round_ + 1}")
        return self.slots[block][0 if self.share_rounds else round_]

    def advance(self, num_tokens: int) -> None:
        self.pos += num_tokens

    def nbytes(self) -> int:
        """Bytes held by the key and value buffers (allocated at max_len on first use)."""
        return sum(s.nbytes() for per_block in self.slots for s in per_block)
