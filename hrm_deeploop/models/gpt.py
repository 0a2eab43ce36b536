"""Looped GPT: token embedding -> RMSNorm -> LoopedCore(causal, K blocks x R rounds) -> tied head.

The paper's language-model backbone (DeepLoop section 5.1): a GPT with multi-head attention and
RoPE whose K physical blocks are applied for R rounds (unrolled depth N = K*R), tied input/output
embeddings and an RMSNorm on the input embedding. Residual scaling comes from any `scaling=`
scheme through `scaling.module_residuals` (baseline alpha=beta=1, DeepLoop alpha=(2N)^(1/2),
beta=(8N)^(-1/2), `power` for p-sweeps, Pre-LN `looped_eps`).

Final norm: with the Post-LN schemes every sublayer ends in RMSNorm(alpha*x + f(x)), so the
stream leaving the core is already normalised (with the last norm's gain); a second RMSNorm
there would only renormalise a unit-RMS vector, so there is none. With the Pre-LN `looped_eps`
scheme `LoopedCore` closes the stack with its own final RMSNorm. Either way the head sees a
normalised stream.

Architecture only: no process group, no config files, no environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.core import (
    FUSED,
    BlockConfig,
    Linear,
    LoopedCore,
    RMSNorm,
    Rotary,
    init_block_,
    mlp_width,
    trunc_normal_,
)
from hrm_deeploop.models.kvcache import KVCache
from hrm_deeploop.models.model_config import EXIT_CRITERIA, GPTConfig
from hrm_deeploop.models.scaling import ScalingConfig, model_depth, module_residuals, residual_for


@dataclass(frozen=True)
class ExitRule:
    """Adaptive exit at inference: a position stops looping once the change between two successive
    rounds falls under `threshold`.

    - kl: KL(p_r || p_{r-1}) of the next-token distributions the head would give after rounds r and
      r-1 (nats; one extra head projection per round);
    - hidden: ||x_r - x_{r-1}|| / ||x_r|| of the stream leaving the round.
    """

    criterion: str = "kl"
    threshold: float = 1e-3

    def __post_init__(self) -> None:
        if self.criterion not in EXIT_CRITERIA:
            raise ValueError(f"exit criterion {self.criterion!r}: must be one of {', '.join(EXIT_CRITERIA)}")
        if not self.threshold > 0:
            raise ValueError(f"exit threshold must be > 0, got {self.threshold}")

    def change(self, cur: Tensor, prev: Tensor) -> Tensor:
        """(B, T) change from prev to cur: log-probabilities (kl) or streams (hidden), (B, T, *)."""
        if self.criterion == "kl":
            return (cur.exp() * (cur - prev)).sum(-1)
        return (cur - prev).norm(dim=-1) / cur.norm(dim=-1).clamp_min(1e-12)


class GPT(nn.Module):
    """Looped causal LM. `forward(idx)` -> logits (B, T, V); `forward(idx, targets)` -> (logits, loss).

    Parameters are stored once: `num_rounds` changes compute, not the parameter count.
    """

    def __init__(self, cfg: GPTConfig, scaling: ScalingConfig | None = None, scaling_rounds: float | None = None,
                 fused: bool = FUSED):
        """scaling_rounds: the R in N = K*R for alpha and beta when training draws R per step
        (`depth.scaling_n`, docs/generation.md); None: model.num_rounds. fused: the fused Triton
        residual-norm kernel for the Post-LN steps on CUDA (`core.BlockConfig`)."""
        super().__init__()
        self.cfg = cfg
        self.scaling = scaling or ScalingConfig()
        if scaling_rounds is None or scaling_rounds == cfg.num_rounds:
            self.residual = module_residuals(self.scaling, model_depth(cfg, self.scaling))["core"]
        else:
            self.residual = residual_for(self.scaling, cfg.num_blocks * scaling_rounds, cfg.num_blocks,
                                         scaling_rounds)
        self.scaling_rounds = cfg.num_rounds if scaling_rounds is None else scaling_rounds
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # (V, D)
        self.embed_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, weight=cfg.norm_weight) if cfg.embed_norm else None
        self.rotary = Rotary(cfg.hidden_size // cfg.num_heads, cfg.seq_len, cfg.rope_theta)
        block = BlockConfig(cfg.hidden_size, cfg.num_heads, cfg.expansion, causal=True, residual=self.residual,
                            norm_eps=cfg.norm_eps, norm_weight=cfg.norm_weight, mlp_multiple=cfg.mlp_multiple,
                            mlp=cfg.mlp, fused=fused)
        self.core = LoopedCore(block, cfg.num_blocks, cfg.num_rounds, checkpoint_rounds=cfg.activation_checkpointing)
        self.lm_head = None if cfg.tie_embeddings else Linear(cfg.hidden_size, cfg.vocab_size)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Every tensor's init, in one place:

        - embed_tokens.weight (V, D), also the output head when tied: N(0, embed_init_std^2)
          truncated at 2 std (GPT-2's 0.02 by default). No beta: the tied embedding is outside
          the M = 2N residual sublayers (paper section 3.3).
        - every block (`core.init_block_`): truncated LeCun normal (std 1/sqrt(fan_in)) on all
          matrices (`model.init=lecun`), or GPT-2's N(0, 0.02^2) with the residual projections
          (o_proj, down_proj) at 0.02 / sqrt(2 K) (`model.init=gpt2`, K physical blocks as GPT-2's
          n_layer); unit norm gains; then beta on the residual-branch matrices only
          (`scaling.beta_targets`, default v, o, up, down; never q, k).
        - norm gains (embedding norm, the Pre-LN final norm): ones.
        - untied lm_head (tie_embeddings=false): truncated LeCun normal, no beta.
        - rotary tables are buffers computed from rope_theta.
        Raises if a parameter is not covered.
        """
        seen: set[int] = set()
        trunc_normal_(self.embed_tokens.weight, std=self.cfg.embed_init_std)
        seen.add(id(self.embed_tokens.weight))
        gpt2 = self.cfg.init == "gpt2"
        std, proj_std = (0.02, 0.02 / (2 * self.cfg.num_blocks) ** 0.5) if gpt2 else (None, None)
        for block in self.core.layers:
            init_block_(block, std, proj_std)
            seen.update(id(p) for p in block.parameters())
        for norm in (self.embed_norm, self.core.final_norm):
            if norm is not None and norm.weight is not None:
                nn.init.ones_(norm.weight)
                seen.add(id(norm.weight))
        if self.lm_head is not None:
            self.lm_head.reset_parameters()
            seen.add(id(self.lm_head.weight))
        missing = [n for n, p in self.named_parameters() if id(p) not in seen]
        assert not missing, f"GPT.init_weights does not initialise {missing}"

    def head_weight(self) -> Tensor:
        """The output projection (V, D): the token embedding when tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, idx: Tensor, targets: Tensor | None = None, num_rounds: int | None = None,
                backprop_rounds: int | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """idx: int64 (B, T) with T <= seq_len; targets: int64 (B, T), -1 = ignore.

        Returns logits (B, T, V) in the compute dtype, or (logits, mean cross-entropy in fp32)
        when targets are given. `num_rounds` overrides R at run time (test-time depth; alpha and
        beta stay as built); `backprop_rounds` keeps only the last k rounds on the autograd tape.
        """
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds model.seq_len {self.cfg.seq_len}")
        x = self.embed_tokens(idx)  # (B, T, D)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        x = self.core(x, rope=self.rotary(T), num_rounds=num_rounds, backprop_rounds=backprop_rounds)  # (B, T, D)
        w = self.head_weight()
        logits = F.linear(x, w.to(x.dtype))  # (B, T, V)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.float().view(B * T, -1), targets.reshape(B * T), ignore_index=-1)
        return logits, loss

    # ---- inference: KV cache and adaptive exit --------------------------------------------------

    def new_cache(self, batch_size: int, num_rounds: int | None = None, share_rounds: bool = False) -> KVCache:
        """An empty KV cache for up to seq_len positions and `num_rounds` rounds (default R)."""
        del batch_size  # slots allocate on first use, at the batch's size
        rounds = self.cfg.num_rounds if num_rounds is None else num_rounds
        return KVCache(self.cfg.num_blocks, rounds, self.cfg.seq_len, share_rounds, self.embed_tokens.weight.device)

    def _logits(self, x: Tensor) -> Tensor:
        if self.core.final_norm is not None:
            x = self.core.final_norm(x)
        return F.linear(x, self.head_weight().to(x.dtype))  # (B, T, V)

    @torch.no_grad()
    def decode(self, idx: Tensor, cache: KVCache | None = None, num_rounds: int | None = None,
               exit: ExitRule | None = None) -> tuple[Tensor, Tensor]:
        """Inference over the T newest tokens idx (B, T), at positions cache.pos... (0 without a cache).

        Returns logits (B, T, V) and the rounds each position ran (B, T), int64. Without a cache and
        without `exit` the logits are `forward`'s. With a cache, earlier positions are read from it
        and these positions' keys and values are written to it. With `exit`, a position stops
        looping after the first round (from the second on) whose change from the previous round is
        under the threshold; its stream is then frozen: later rounds leave it as it is, and the
        keys/values later visits read for it come from the frozen stream. When no position of the
        batch is left looping, the remaining rounds are skipped (their cache slots filled from the
        frozen streams, which costs one projection per slot).
        """
        B, T = idx.shape
        start = cache.pos if cache is not None else 0
        if start + T > self.cfg.seq_len:
            raise ValueError(f"position {start + T - 1} exceeds model.seq_len {self.cfg.seq_len}")
        rounds = self.cfg.num_rounds if num_rounds is None else num_rounds
        x = self.embed_tokens(idx)  # (B, T, D)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        rope = (self.rotary.cos[start:start + T], self.rotary.sin[start:start + T])
        active = torch.ones(B, T, dtype=torch.bool, device=idx.device)
        used = torch.zeros(B, T, dtype=torch.long, device=idx.device)
        prev: Tensor | None = None  # the previous round's exit statistic input (logits or stream)
        for r in range(rounds):
            if exit is not None and not bool(active.any()):
                if cache is not None:
                    for rr in range(r, rounds):
                        for b, block in enumerate(self.core.layers):
                            _, k, v = block.self_attn.qkv(x, rope)
                            cache.slot(b, rr).update(k, v)
                break
            for b, block in enumerate(self.core.layers):
                y = block(x, rope, cache.slot(b, r) if cache is not None else None)
                x = y if exit is None else torch.where(active[..., None], y, x)
            used += active
            if exit is not None:
                cur = self._logits(x).float().log_softmax(-1) if exit.criterion == "kl" else x.float()
                if prev is not None:
                    active &= exit.change(cur, prev) >= exit.threshold
                prev = cur
        if cache is not None:
            cache.advance(T)
        return self._logits(x), used

    # ---- accounting -------------------------------------------------------------------------

    def num_params(self, non_embedding: bool = False) -> int:
        """Stored parameters (each counted once, however many rounds use it). non_embedding drops
        the token embedding (which is also the tied head)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.embed_tokens.weight.numel()
        return n


def flops_per_token(cfg: GPTConfig, seq_len: int | None = None, training: bool = True) -> float:
    """Model FLOPs per token for one training step (forward + backward), counting the unrolled depth.

    Per token, a matmul with P weights costs 2P FLOPs forward and 4P backward (6P in all).
    - Block matrices (qkv, o, gate_up, down) run once per round: 6 * R * P_block_matrices.
    - Attention scores and values: per layer visit 2 * 2 * T * D forward (QK^T and AV, causal
      masking not discounted, as in PaLM's MFU), so 6 * 2 * T * D * K * R for fwd+bwd.
      (PaLM's 12 * L * H * Q * T with L = K*R, H*Q = D.)
    - Output head (V x D, tied or not): 6 * V * D, once.
    Norm/RoPE/activation elementwise work and the embedding lookup are not counted.
    With training=False the forward-only cost (one third) is returned.
    """

    T = seq_len or cfg.seq_len
    D, K, R, V = cfg.hidden_size, cfg.num_blocks, cfg.num_rounds, cfg.vocab_size
    inner = mlp_width(cfg.mlp, D, cfg.expansion, cfg.mlp_multiple)
    mlp_matrices = D * 2 * inner + inner * D if cfg.mlp == "swiglu" else 2 * D * inner  # gate_up + down / up + down
    block_matrices = 3 * D * D + D * D + mlp_matrices  # qkv, o, the MLP
    total = 6 * R * block_matrices * K + 12 * K * R * T * D + 6 * V * D
    return total if training else total / 3
