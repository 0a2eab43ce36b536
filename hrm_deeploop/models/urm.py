"""Universal Reasoning Model (URM, Gao et al. 2025, arXiv 2512.14693) on the shared looped-block core.

- One stack `net` (a `LoopedCore` of `num_layers` = K Post-LN blocks, 4 in the published setups)
  recurs on one latent z over a (B, P + S, D) state, started from a fixed `init_hidden`.
- One pass: C_L = `num_l_cycles` rounds z <- blocks(z + x), x the input embedding scaled by
  sqrt(D) (the core's input injection). An ACT step runs H = `num_h_cycles` passes; the first H-1
  under no_grad, the last on the autograd tape (the paper's truncated back-propagation: C_L*K
  block visits with gradient). The carry leaves a step detached.
- MLP: `core.ConvSwiGLU` (a width-2 depthwise convolution over the positions after the gated
  product); `mlp=swiglu` is the paper's ablation without it.
- ACT (`act.ACTReasoner`, shared with HRM and TRM): Q head on the first prefix position,
  initialised to weight 0, bias -5; in training a slot halts after `halt_max_steps` (the
  reference's `loops`) steps or when Q(halt) > 0, with exploration (probability 0.1: a uniform
  minimum in [2, loops]); Q(continue) is output but never learned (the reference computes no
  target for it). Evaluation runs exactly halt_max_steps steps.
- Residual scaling from any `scaling=` scheme; its N is `scaling.urm_depth` (default the
  gradient-visible N_g = C_L*K; docs/urm.md). `scaling=baseline` is exactly the reference's block.

Names: the reference's blocks are `layers.N` on its inner model; here `net.layers.N`
(`checkpoint.official_urm_key_map` spells out the renaming); everything else keeps the
reference's names (`embed_tokens.embedding_weight`, `puzzle_emb.weights`, `init_hidden`, ...).
The carry's z_L is empty (B, 0, D): URM has one latent. Architecture only: no process group, no
config files, no environment variables.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from hrm_deeploop.models.act import ACTReasoner, Carry, block_config
from hrm_deeploop.models.core import FUSED, LoopedCore
from hrm_deeploop.models.model_config import URMConfig
from hrm_deeploop.models.scaling import ScalingConfig, model_depth, module_residuals


class URM(ACTReasoner):
    """URM with ACT. `forward(carry, batch, generator) -> (carry, outputs)` as `act.ACTReasoner`."""

    q_continue = False  # halt when Q(halt) > 0; no target-Q forward

    def __init__(self, cfg: URMConfig, scaling: ScalingConfig | None = None,
                 dtype: torch.dtype = torch.float32, fused: bool = FUSED):
        """fused: the fused Triton residual-norm kernel for the Post-LN steps on CUDA (`core.BlockConfig`)."""
        super().__init__()
        self.cfg = cfg
        self.scaling = scaling or ScalingConfig()
        self.dtype = dtype  # compute dtype; parameters stay fp32 (cast at use)
        self._build_io(cfg)

        self.depth = model_depth(cfg, self.scaling)  # scaling.urm_depth; refuses per_module
        res = module_residuals(self.scaling, self.depth)["net"]
        self.net = LoopedCore(block_config(cfg, res, fused, conv_kernel=cfg.conv_kernel), cfg.num_layers,
                              num_rounds=cfg.num_l_cycles)
        self.register_buffer("init_hidden", torch.empty(cfg.hidden_size), persistent=True)
        self.init_weights()

    def reasoning_cores(self) -> tuple[LoopedCore, ...]:
        return (self.net,)

    def initial_states(self) -> tuple[Tensor, Tensor]:
        return self.init_hidden, self.init_hidden

    def initial_carry(self, batch: dict[str, Tensor]) -> Carry:
        carry = super().initial_carry(batch)
        # (B, 0, D): one latent, z_L holds nothing. A fresh tensor, not a slice of the full one: its
        # strides then equal those of the z_L a step returns, so a compiled step does not recompile.
        return replace(carry, z_L=carry.z_H.new_zeros(carry.z_H.shape[0], 0, carry.z_H.shape[2]))

    def segment(self, z_H: Tensor, z_L: Tensor, data: dict[str, Tensor],
                track_puzzle_grad: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One ACT step from the latent z_H (B, P+S, D): returns it detached, z_L untouched,
        logits (B, S, V) and q_logits (B, 2) fp32 [halt, continue]. H passes of C_L rounds; only
        the last pass is on the tape."""
        cfg, rope = self.cfg, self._rope()
        x = self.input_embedding(data["inputs"], data["puzzle_identifiers"], track_puzzle_grad)  # (B, P+S, D)
        z = z_H
        with torch.no_grad():
            for _ in range(cfg.num_h_cycles - 1):
                z = self.net(z, x, rope)
        z = self.net(z, x, rope)
        logits = self.lm_head(z)[:, cfg.puzzle_len:]  # (B, S, V)
        q_logits = self.q_head(z[:, 0]).float()  # (B, 2), from the first prefix position
        return z.detach(), z_L, logits, q_logits
