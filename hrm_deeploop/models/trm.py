"""Tiny Recursive Model (TRM, Jolicoeur-Martineau 2025) on the shared looped-block core.

- One network `net` (a `LoopedCore` of `num_layers` = K blocks, 2 by default) updates both
  latents over a (B, P + S, D) state: z_H (TRM's answer y) and z_L (TRM's latent z).
- One deep-recursion step: n = `num_l_cycles` latent updates z_L <- net(z_L, z_H + x), then one
  answer update z_H <- net(z_H, z_L). A segment runs T = `num_h_cycles` steps; the first T-1
  under no_grad, the last one fully on the autograd tape (back-propagation through the whole last
  recursion, (n+1)*K block visits: not HRM's one-step gradient). The carry leaves a segment
  detached.
- Puzzle prefix: `puzzle_emb_len` = 16 positions; the puzzle embedding (puzzle_emb_ndim = D
  values) fills the first and the other 15 are zeros, as the reference pads it (seq 916 on ARC).
- ACT (`act.ACTReasoner`, shared with HRM and URM): Q head on the first prefix position; by default
  (`act_continue=false`, the reference's no_ACT_continue) a slot halts when Q(halt) > 0 and no
  second forward is run; `act_continue=true` is HRM's rule with the target-Q forward (the
  reference crashes there: it unpacks five values from its inner model's three). Exploration as
  HRM. Evaluation runs exactly halt_max_steps segments.
- `mixer=mlp` (the reference's mlp_t, for Sudoku): `core.SeqMLPBlock`, a SwiGLU across the
  sequence axis in place of attention.
- Residual scaling from any `scaling=` scheme; its N is `scaling.trm_depth` (default the
  gradient-visible N_g = (n+1)*K; see models/scaling.py and docs/trm.md). `scaling=baseline` is
  exactly the reference's Post-LN block.

Names: the reference keeps the one network as `L_level` (which also updates z_H); here it is
`net`, and `official.official_trm_key_map` spells out the renaming. Everything else keeps the
reference's names (`embed_tokens.embedding_weight`, `puzzle_emb.weights`, `q_head`, `H_init`, ...).
Architecture only: no process group, no config files, no environment variables.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hrm_deeploop.models.act import ACTReasoner, block_config
from hrm_deeploop.models.core import FUSED, LoopedCore
from hrm_deeploop.models.model_config import TRMConfig
from hrm_deeploop.models.scaling import ScalingConfig, model_depth, module_residuals


class TRM(ACTReasoner):
    """TRM with ACT. `forward(carry, batch, generator) -> (carry, outputs)` as `act.ACTReasoner`."""

    def __init__(self, cfg: TRMConfig, scaling: ScalingConfig | None = None,
                 dtype: torch.dtype = torch.float32, fused: bool = FUSED):
        """fused: the fused Triton residual-norm kernel for the Post-LN steps on CUDA (`core.BlockConfig`)."""
        super().__init__()
        self.cfg = cfg
        self.scaling = scaling or ScalingConfig()
        self.dtype = dtype  # compute dtype; parameters stay fp32 (cast at use, like the reference)
        self.q_continue = cfg.act_continue
        D = cfg.hidden_size
        self._build_io(cfg)

        self.depth = model_depth(cfg, self.scaling)  # scaling.trm_depth; refuses per_module
        res = module_residuals(self.scaling, self.depth)["net"]
        self.net = LoopedCore(block_config(cfg, res, fused, mixer=cfg.mixer, seq_len=self.total_len), cfg.num_layers)
        self.register_buffer("H_init", torch.empty(D), persistent=True)
        self.register_buffer("L_init", torch.empty(D), persistent=True)
        self.init_weights()

    def reasoning_cores(self) -> tuple[LoopedCore, ...]:
        return (self.net,)

    def segment(self, z_H: Tensor, z_L: Tensor, data: dict[str, Tensor],
                track_puzzle_grad: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One forward segment from (z_H, z_L), each (B, P+S, D): returns (z_H, z_L) detached,
        logits (B, S, V) and q_logits (B, 2) fp32 [halt, continue]. T deep-recursion steps; only
        the last is on the tape, all of it."""
        cfg, rope = self.cfg, self._rope()
        x = self.input_embedding(data["inputs"], data["puzzle_identifiers"], track_puzzle_grad)  # (B, P+S, D)
        with torch.no_grad():
            for _ in range(cfg.num_h_cycles - 1):
                z_H, z_L = self._recursion(z_H, z_L, x, rope)
        z_H, z_L = self._recursion(z_H, z_L, x, rope)
        logits = self.lm_head(z_H)[:, cfg.puzzle_len:]  # (B, S, V)
        q_logits = self.q_head(z_H[:, 0]).float()  # (B, 2), from the first prefix position
        return z_H.detach(), z_L.detach(), logits, q_logits

    def _recursion(self, z_H: Tensor, z_L: Tensor, x: Tensor, rope: tuple[Tensor, Tensor] | None
                   ) -> tuple[Tensor, Tensor]:
        """One deep-recursion step: n latent updates from (answer + input), then one answer update."""
        for _ in range(self.cfg.num_l_cycles):
            z_L = self.net(z_L, z_H + x, rope)
        z_H = self.net(z_H, z_L, rope)
        return z_H, z_L
