"""Hierarchical Reasoning Model (HRM) on the shared looped-block core.

(Config only for now; the model lands with the HRM issue.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HRMConfig:
    """HRM architecture (reference spec 3.1 defaults). Keys mirror HRM's `arch` section."""

    name: str = "hrm"
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    num_h_layers: int = 4  # K_H
    num_l_layers: int = 4  # K_L
    num_h_cycles: int = 2  # C
    num_l_cycles: int = 2  # C_L
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    puzzle_emb_ndim: int | None = None  # None -> hidden_size; 0 disables the puzzle embedding
    pos_encodings: str = "rope"  # rope | learned
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    norm_weight: bool = False  # HRM's RMSNorm has no gain
    mlp_multiple: int = 256
    forward_dtype: str = "bfloat16"  # compute dtype on CUDA; CPU runs use float32
    loss_type: str = "stablemax_cross_entropy"  # or softmax_cross_entropy
    stablemax_dtype: str = "float64"  # float64 as the reference; float32 is faster on consumer GPUs
    vocab_size: int = 12
    seq_len: int = 900
    num_puzzle_identifiers: int = 1  # filled in from the dataset
