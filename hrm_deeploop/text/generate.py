"""Sampling text from the looped GPT: cached decoding, temperature / top-k / top-p, seeded draws.

`generate_tokens` prefills the prompt in one step and then decodes one token per step, with a KV
cache per (block, round) (`cache="rounds"`: the logits of the full forward), one per block shared
across rounds (`cache="shared"`, MELT / Mixture-of-Recursions style: R times less cache memory, not
the full forward's logits), or none (`cache="none"`: the whole sequence again every step, the
reference the cache is measured against). `exit` stops a position's loop early
(`models.gpt.ExitRule`).

Draws come from the caller's `torch.Generator` on the CPU (probabilities are moved there, in
float32), so a seed gives the same text on any device and in any process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from hrm_deeploop.models.gpt import GPT, ExitRule

CACHES = ("rounds", "shared", "none")


@dataclass(frozen=True)
class Sampling:
    """temperature 0: greedy (argmax). top_k: keep the k likeliest ids; top_p: the smallest set whose
    probability reaches p (nucleus), both after the temperature."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def sample_next(logits_BV: Tensor, sampling: Sampling, generator: torch.Generator | None) -> Tensor:
    """One id per row (B,) int64 on the CPU."""
    logits = logits_BV.float().cpu()
    if sampling.temperature == 0:
        return logits.argmax(-1)
    logits = logits / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= sampling.top_p  # mass before this id already reaches p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@dataclass
class GenerationStats:
    """What a generation cost: tokens produced and the rounds their positions ran."""

    new_tokens: int = 0
    rounds: list[float] = field(default_factory=list)  # mean rounds per decoding step (prompt included)

    @property
    def mean_rounds(self) -> float:
        return sum(self.rounds) / len(self.rounds) if self.rounds else 0.0


@torch.no_grad()
def generate_tokens(model: GPT, prompt_BT: Tensor, max_new_tokens: int, sampling: Sampling = Sampling(),
                    generator: torch.Generator | None = None, cache: str = "rounds", num_rounds: int | None = None,
                    exit: ExitRule | None = None, vocab_limit: int | None = None,
                    stats: GenerationStats | None = None) -> Iterator[Tensor]:
    """Yield the next token of every row (B,) int64 (CPU), `max_new_tokens` times (the caller may stop
    early). `prompt_BT` (B, T >= 1) int64; prompt + new tokens must fit model.seq_len. `vocab_limit`
    keeps draws below the tokenizer's vocabulary (the model's is padded)."""
    if cache not in CACHES:
        raise ValueError(f"cache {cache!r}: must be one of {', '.join(CACHES)}")
    B, T = prompt_BT.shape
    if T < 1:
        raise ValueError("the prompt needs at least one token")
    if T + max_new_tokens > model.cfg.seq_len:
        raise ValueError(f"prompt ({T} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                         f"context model.seq_len={model.cfg.seq_len}")
    device = model.embed_tokens.weight.device
    kv = None if cache == "none" else model.new_cache(B, num_rounds, share_rounds=cache == "shared")
    seq = prompt_BT.to(device)
    step_in = seq
    for _ in range(max_new_tokens):
        logits, used = model.decode(step_in if kv is not None else seq, kv, num_rounds, exit)
        if stats is not None:
            stats.rounds.append(float(used[:, -1].float().mean()) if kv is None else float(used.float().mean()))
        last = logits[:, -1]
        if vocab_limit is not None and vocab_limit < last.shape[-1]:
            last = last[:, :vocab_limit]
        nxt = sample_next(last, sampling, generator)
        if stats is not None:
            stats.new_tokens += 1
        yield nxt
        step_in = nxt.to(device)[:, None]
        seq = torch.cat([seq, step_in], dim=1)
