"""Hierarchical Reasoning Model (HRM) on the shared looped-block core.

Two `LoopedCore`s, H (slow) and L (fast), run a nested recurrence over a [B, P + 900, D] state:
the L module takes (z_H + input embedding) as its injection, the H module takes z_L. One forward
segment runs H_cycles x L_cycles L calls and H_cycles H calls; only the last L call and the last
H call are on the autograd tape (HRM's one-step gradient, reference spec 3.4). The ACT wrapper
(`act.ACTReasoner`, shared with TRM and URM) keeps a per-slot carry across calls and learns when to
halt with a Q head read from the puzzle slot (spec 3.5).

Architecture only: no process group, no config files, no environment variables. Residual
scaling (alpha in the forward, beta at init) comes from `scaling.module_residuals`; `scaling=
baseline` is exactly HRM's Post-LN block. Module and buffer names equal HRM's
(`H_level.layers.0.self_attn.qkv_proj.weight`, `embed_tokens.embedding_weight`,
`puzzle_emb.weights`, ...), so an official checkpoint maps onto this model by removing the
`_orig_mod.model.inner.` prefix (see `official.official_key_map`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hrm_deeploop.models.act import ACTReasoner, block_config
from hrm_deeploop.models.core import FUSED, LoopedCore
from hrm_deeploop.models.model_config import HRMConfig
from hrm_deeploop.models.scaling import ScalingConfig, model_depth, module_residuals


class HRM(ACTReasoner):
    """HRM with ACT (`ACTReasoner`): two LoopedCores, H and L, and the one-step gradient."""

    def __init__(self, cfg: HRMConfig, scaling: ScalingConfig | None = None,
                 dtype: torch.dtype = torch.float32, fused: bool = FUSED):
        """fused: the fused Triton residual-norm kernel for the Post-LN steps on CUDA (`core.BlockConfig`)."""
        super().__init__()
        self.cfg = cfg
        self.scaling = scaling or ScalingConfig()
        self.dtype = dtype  # compute dtype; parameters stay fp32 (cast at use, like HRM)
        D = cfg.hidden_size
        self._build_io(cfg)

        self.depth = model_depth(cfg, self.scaling)
        res = module_residuals(self.scaling, self.depth)

        self.H_level = LoopedCore(block_config(cfg, res["H"], fused), cfg.num_h_layers)
        self.L_level = LoopedCore(block_config(cfg, res["L"], fused), cfg.num_l_layers)
        self.register_buffer("H_init", torch.empty(D), persistent=True)
        self.register_buffer("L_init", torch.empty(D), persistent=True)
        self.init_weights()

    # -- init -------------------------------------------------------------------------------------

    def reasoning_cores(self) -> tuple[LoopedCore, ...]:
        return (self.H_level, self.L_level)

    # -- one segment -------------------------------------------------------------------------------

    def segment(self, z_H: Tensor, z_L: Tensor, data: dict[str, Tensor],
                track_puzzle_grad: bool = False, grad_window: str = "one_step"
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One forward segment from (z_H, z_L): returns (z_H, z_L) detached, logits (B, S, V) and
        q_logits (B, 2) fp32 [halt, continue]. The gradient window: "one_step" (HRM's training
        graph) puts only the last L and the last H call on the tape; "last_cycle" (the paper's
        gradient-visible count N_g, eq. 16) puts the whole last H-cycle there, all C_L L calls and
        the H call: what the visit-alignment diagnostic measures (training/kappa.py)."""
        cfg, rope = self.cfg, self._rope()
        on_tape = cfg.num_l_cycles if grad_window == "last_cycle" else 1  # L calls of the last cycle
        x = self.input_embedding(data["inputs"], data["puzzle_identifiers"], track_puzzle_grad)
        with torch.no_grad():
            for h in range(cfg.num_h_cycles):
                for l_step in range(cfg.num_l_cycles):
                    if h == cfg.num_h_cycles - 1 and l_step >= cfg.num_l_cycles - on_tape:
                        break
                    z_L = self.L_level(z_L, z_H + x, rope)
                if h < cfg.num_h_cycles - 1:
                    z_H = self.H_level(z_H, z_L, rope)
        for _ in range(on_tape):  # one-step gradient: by default the last L call only, then the last H call
            z_L = self.L_level(z_L, z_H + x, rope)
        z_H = self.H_level(z_H, z_L, rope)
        P = cfg.puzzle_len
        logits = self.lm_head(z_H)[:, P:]  # (B, S, V)
        q_logits = self.q_head(z_H[:, 0]).float()  # (B, 2), from the puzzle slot
        return z_H.detach(), z_L.detach(), logits, q_logits
