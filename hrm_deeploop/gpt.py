"""Looped GPT: token embedding -> RMSNorm -> LoopedCore(causal, K blocks x R rounds) -> tied head.

(Config only for now; the model lands with the looped-GPT issue.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GPTConfig:
    name: str = "gpt"
    vocab_size: int = 50304  # GPT-2's 50257 padded to a multiple of 128
    hidden_size: int = 768
    num_heads: int = 12
    num_blocks: int = 12  # K physical blocks
    num_rounds: int = 1  # R loop rounds
    expansion: float = 4.0
    mlp_multiple: int = 256
    seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    norm_weight: bool = True
    embed_norm: bool = True  # RMSNorm on the input embedding (paper's baseline has it)
    tie_embeddings: bool = True
    activation_checkpointing: bool = False  # per-round checkpointing, for large R
