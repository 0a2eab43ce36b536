"""The ACT reasoner HRM, TRM and URM share: input embeddings, heads, the per-slot carry and the
adaptive-computation-time step around a model-specific `segment`.

- `Embedding` (HRM's CastedEmbedding) and `PuzzleEmbedding` (the sparse per-puzzle table, trained by
  `optim.SparseSignSGD`), the token / puzzle / position embedding of a (B, P + S, D) state;
- `Carry`: the ACT state of B slots (z_H, z_L, steps, halted, the rows each slot works on) and
  `carry_to` / `carry_state` / `carry_from_state` (device moves, checkpoint tensors);
- `ACTReasoner`: one segment per call; halted slots restart on their new row, the Q head learns
  when to halt (HRM spec 3.5), `predict` runs exactly halt_max_steps segments as the references.

A model is a subclass with `segment` and `reasoning_cores` (models/hrm.py, trm.py, urm.py).
Architecture only: no process group, no config files, no environment variables.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.core import BlockConfig, Linear, LoopedCore, Rotary, init_block_, trunc_normal_
from hrm_deeploop.models.model_config import ReasonerConfig
from hrm_deeploop.models.scaling import Residual

DATA_KEYS = ("inputs", "labels", "puzzle_identifiers")


def block_config(cfg: ReasonerConfig, residual: Residual, fused: bool, **fields) -> BlockConfig:
    """The blocks of a reasoner's looped network: non-causal, at the config's width, heads, norms
    and MLP; `fields` set the rest (TRM's mixer, URM's convolution width)."""
    return BlockConfig(cfg.hidden_size, cfg.num_heads, cfg.expansion, causal=False, residual=residual,
                       norm_eps=cfg.rms_norm_eps, norm_weight=cfg.norm_weight, mlp_multiple=cfg.mlp_multiple,
                       mlp=cfg.mlp, fused=fused, **fields)


# ---- embeddings ---------------------------------------------------------------------------------

class Embedding(nn.Module):
    """HRM's CastedEmbedding: fp32 table `embedding_weight`, looked up in the compute dtype."""

    def __init__(self, num: int, dim: int):
        super().__init__()
        self.embedding_weight = nn.Parameter(torch.empty(num, dim))

    def forward(self, ids: Tensor, dtype: torch.dtype) -> Tensor:
        # F.embedding, not weight[ids]: the backward of advanced indexing (index_put_ with
        # accumulate) sums duplicate ids in a thread-dependent order on CPU, which broke bit-exact
        # reproducibility across processes; embedding's backward is deterministic.
        return F.embedding(ids, self.embedding_weight.to(dtype))


class PuzzleEmbedding(nn.Module):
    """Sparse per-puzzle embedding: a zero-initialised fp32 buffer `weights` [num_ids, dim].

    The table is a buffer, not a Parameter: the dense optimiser never sees it. In training the
    looked-up rows get a fresh leaf tensor with requires_grad (HRM's `local_weights`); after
    backward, `take_grads()` hands (ids, row grads) to `optim.SparseSignSGD`. Unlike HRM the leaf
    is created per call, so the batch size is not fixed at construction and several calls
    (gradient accumulation micro-batches) can be collected before one optimiser step.

    `prepare(rows)` makes that leaf ahead of the call, as a zero offset added to the rows (their
    gradient is the offset's): a leaf created inside a torch.compile'd region breaks its graph
    (four breaks per ACT step), one made outside is just an input. Without `prepare` the leaf is
    the looked-up rows themselves (eager callers, tests).
    """

    def __init__(self, num_ids: int, dim: int):
        super().__init__()
        self.register_buffer("weights", torch.zeros(num_ids, dim), persistent=True)
        self._pending: list[tuple[Tensor, Tensor]] = []
        self._next: Tensor | None = None

    def prepare(self, rows: int) -> None:
        """A zero leaf (rows, dim) for the next tracked lookup of `rows` ids."""
        self._next = torch.zeros(rows, self.weights.shape[1], device=self.weights.device, requires_grad=True)

    def forward(self, ids: Tensor, dtype: torch.dtype, track_grad: bool) -> Tensor:
        if not track_grad:
            return self.weights[ids].to(dtype)
        local, self._next = self._next, None
        if local is not None and local.shape[0] == ids.shape[0]:
            self._pending.append((ids.detach(), local))
            return (self.weights[ids] + local).to(dtype)  # (B, dim); x + 0 is x: the rows, bit for bit
        local = self.weights[ids].detach().clone().requires_grad_(True)  # (B, dim) leaf
        self._pending.append((ids.detach(), local))
        return local.to(dtype)

    def take_grads(self) -> tuple[Tensor, Tensor] | None:
        """(ids (N,), grads (N, dim)) of every tracked lookup since the last call; clears them."""
        pending, self._pending = self._pending, []
        pairs = [(i, w.grad if w.grad is not None else torch.zeros_like(w)) for i, w in pending]
        if not pairs:
            return None
        return torch.cat([i for i, _ in pairs]), torch.cat([g for _, g in pairs])

    def clear(self) -> None:
        self._pending, self._next = [], None


# ---- carry ----------------------------------------------------------------------------------------

@dataclass
class Carry:
    """ACT state of B slots. z_H, z_L: (B, P+S, D) detached; steps: (B,) int32; halted: (B,) bool;
    data: the rows each slot is working on (inputs (B, S), labels (B, S), puzzle_identifiers (B,))."""

    z_H: Tensor
    z_L: Tensor
    steps: Tensor
    halted: Tensor
    data: dict[str, Tensor] = field(default_factory=dict)


# ---- the ACT wrapper shared by HRM, TRM and URM -----------------------------------------------------

class ACTReasoner(nn.Module, metaclass=abc.ABCMeta):
    """What HRM, TRM and URM share: the input embedding (tokens, puzzle prefix, positions), the output
    heads, the learned initial states and the ACT wrapper around a model-specific `segment`.

    `forward(carry, batch, generator) -> (carry, outputs)`, one segment per call. outputs: logits
    (B, S, V), q_halt_logits (B,) fp32, q_continue_logits (B,) fp32, and in training with
    halt_max_steps > 1 and `q_continue` also target_q_continue (B,) fp32.

    Subclasses build the shared modules with `_build_io`, then their reasoning modules and the
    `H_init` / `L_init` buffers, and implement `segment` and `reasoning_cores`.
    """

    cfg: ReasonerConfig  # the fields read here are the shared base's
    dtype: torch.dtype
    q_continue: bool = True  # halt when Q(halt) > Q(continue) and learn Q(continue) (HRM); else halt when Q(halt) > 0

    def _build_io(self, cfg: ReasonerConfig) -> None:
        """Token, puzzle and position embeddings, LM and Q heads, for a (P + seq_len)-token state."""
        D, P = cfg.hidden_size, cfg.puzzle_len
        self.total_len = P + cfg.seq_len
        self.embed_scale = math.sqrt(D)

        self.embed_tokens = Embedding(cfg.vocab_size, D)
        self.lm_head = Linear(D, cfg.vocab_size)
        self.q_head = Linear(D, 2, bias=True)
        self.puzzle_emb = PuzzleEmbedding(cfg.num_puzzle_identifiers, cfg.puzzle_dim) if cfg.puzzle_dim > 0 else None
        self.rotary_emb = Rotary(D // cfg.num_heads, self.total_len, cfg.rope_theta) \
            if cfg.pos_encodings == "rope" else None
        self.embed_pos = Embedding(self.total_len, D) if cfg.pos_encodings == "learned" else None

    def num_params(self) -> int:
        """Trainable parameters (the puzzle table is a buffer and is not counted, as in HRM)."""
        return sum(p.numel() for p in self.parameters())

    def _rope(self) -> tuple[Tensor, Tensor] | None:
        return self.rotary_emb(self.total_len) if self.rotary_emb is not None else None

    def input_embedding(self, inputs: Tensor, puzzle_ids: Tensor, track_puzzle_grad: bool) -> Tensor:
        """inputs (B, S) int, puzzle_ids (B,) -> scaled embedding (B, P+S, D) in the compute dtype."""
        cfg, dt = self.cfg, self.dtype
        x = self.embed_tokens(inputs.long(), dt)  # (B, S, D)
        if self.puzzle_emb is not None:
            pe = self.puzzle_emb(puzzle_ids.long(), dt, track_puzzle_grad)  # (B, ndim)
            pad = cfg.puzzle_len * cfg.hidden_size - pe.shape[-1]
            if pad > 0:
                pe = nn.functional.pad(pe, (0, pad))
            x = torch.cat((pe.view(-1, cfg.puzzle_len, cfg.hidden_size), x), dim=-2)  # (B, P+S, D)
        if self.embed_pos is not None:
            x = 0.707106781 * (x + self.embed_pos.embedding_weight.to(dt))
        return self.embed_scale * x

    @abc.abstractmethod
    def segment(self, z_H: Tensor, z_L: Tensor, data: dict[str, Tensor],
                track_puzzle_grad: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One forward segment: (z_H, z_L) detached, logits (B, S, V), q_logits (B, 2) fp32."""

    def initial_states(self) -> tuple[Tensor, Tensor]:
        """The fixed (D,) states a halted slot restarts z_H and z_L from (URM: its one `init_hidden`)."""
        return self.H_init, self.L_init

    @abc.abstractmethod
    def reasoning_cores(self) -> tuple[LoopedCore, ...]:
        """The model's looped cores, in initialisation order (HRM: H_level, L_level; TRM: net)."""

    def init_weights(self) -> None:
        """Initialise every tensor, once, and fail on any this list misses (HRM spec 3.6; TRM's
        reference does the same):

        - embed_tokens.embedding_weight, embed_pos.embedding_weight: trunc normal std 1/sqrt(D)
        - the blocks of `reasoning_cores()`: trunc LeCun normal (std 1/sqrt(fan_in)) on every
          matrix, then the scheme's beta gain on the residual-branch rows (`core.init_block_`);
          RMSNorm gains (if enabled) 1; a Pre-LN final norm's gain 1
        - lm_head.weight: trunc LeCun normal, std 1/sqrt(D)
        - q_head: weight 0, bias -5 (halting starts almost never, sigmoid(-5) = 0.0067)
        - puzzle_emb.weights: 0 (buffer, trained by SignSGD)
        - H_init, L_init: fixed trunc normal std 1 (buffers, never trained)

        The order of random draws is the references' (embeddings, blocks, head, initial states).
        """
        D = self.cfg.hidden_size
        done: set[int] = set()

        def mark(*ts: Tensor) -> None:
            done.update(id(t) for t in ts)

        trunc_normal_(self.embed_tokens.embedding_weight, std=1.0 / math.sqrt(D))
        mark(self.embed_tokens.embedding_weight)
        if self.embed_pos is not None:
            trunc_normal_(self.embed_pos.embedding_weight, std=1.0 / math.sqrt(D))
            mark(self.embed_pos.embedding_weight)
        for core in self.reasoning_cores():
            for block in core.layers:
                init_block_(block)
                mark(*block.parameters())
            if core.final_norm is not None and core.final_norm.weight is not None:
                nn.init.ones_(core.final_norm.weight)
                mark(core.final_norm.weight)
        self.lm_head.reset_parameters()
        mark(self.lm_head.weight)
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)
        mark(self.q_head.weight, self.q_head.bias)
        if self.puzzle_emb is not None:
            self.puzzle_emb.weights.zero_()
            mark(self.puzzle_emb.weights)
        for state in {id(t): t for t in self.initial_states()}.values():  # URM's one state serves both
            trunc_normal_(state, std=1.0)
            mark(state)
        if self.rotary_emb is not None:  # deterministic tables, rebuilt from the config
            mark(*self.rotary_emb.buffers())
        missed = [n for n, t in [*self.named_parameters(), *self.named_buffers()] if id(t) not in done]
        assert not missed, f"{type(self).__name__}.init_weights does not initialise {missed}"

    def initial_carry(self, batch: dict[str, Tensor]) -> Carry:
        """Every slot halted, so the first call loads every row of its batch."""
        B, device = batch["inputs"].shape[0], batch["inputs"].device
        z = torch.zeros(B, self.total_len, self.cfg.hidden_size, dtype=self.dtype, device=device)
        return Carry(z_H=z, z_L=z.clone(), steps=torch.zeros(B, dtype=torch.int32, device=device),
                     halted=torch.ones(B, dtype=torch.bool, device=device),
                     data={k: torch.zeros_like(batch[k]) for k in DATA_KEYS})

    def exploration(self, batch_size: int, generator: torch.Generator | None = None) -> Tensor | None:
        """Exploration's minimum segment count per slot, (B,) int64: with probability
        halt_exploration_prob a uniform draw in [2, halt_max_steps], else 0. None where the ACT
        step does not explore (eval mode, halt_max_steps 1). Two draws from `generator`, in HRM's
        order (uniforms, then integers)."""
        if not (self.training and self.cfg.halt_max_steps > 1):
            return None
        gen_dev = generator.device if generator is not None else torch.device("cpu")
        explore = torch.rand(batch_size, generator=generator, device=gen_dev) < self.cfg.halt_exploration_prob
        return explore * torch.randint(2, self.cfg.halt_max_steps + 1, (batch_size,), generator=generator,
                                       device=gen_dev)

    def forward(self, carry: Carry, batch: dict[str, Tensor], generator: torch.Generator | None = None,
                min_halt: Tensor | None = None) -> tuple[Carry, dict[str, Tensor]]:
        """One ACT step. Halted slots restart from H_init/L_init on their row of `batch`; the rows of
        `batch` at non-halted slots are dropped (HRM semantics). Exploration: `min_halt` from
        `exploration()` (drawn outside a compiled region: a generator inside one breaks its graph),
        else drawn here from `generator`."""
        cfg = self.cfg
        reset = carry.halted  # (B,)
        r3 = reset.view(-1, 1, 1)
        h0, l0 = self.initial_states()
        z_H = torch.where(r3, h0.to(self.dtype), carry.z_H)
        z_L = torch.where(r3, l0.to(self.dtype), carry.z_L)
        steps = torch.where(reset, torch.zeros_like(carry.steps), carry.steps)
        data = {k: torch.where(reset.view((-1,) + (1,) * (batch[k].ndim - 1)), batch[k], carry.data[k])
                for k in DATA_KEYS}

        z_H, z_L, logits, q = self.segment(z_H, z_L, data, track_puzzle_grad=self.training)
        out = {"logits": logits, "q_halt_logits": q[:, 0], "q_continue_logits": q[:, 1]}

        with torch.no_grad():
            steps = steps + 1
            is_last = steps >= cfg.halt_max_steps
            halted = is_last
            if self.training and cfg.halt_max_steps > 1:
                halted = halted | self.q_halts(out)
                if min_halt is None:
                    min_halt = self.exploration(steps.shape[0], generator)
                halted = halted & (steps >= min_halt.to(steps.device))
                if self.q_continue:
                    # Target Q: one more segment from the new carry on the same data (no replay buffer).
                    _, _, _, q_next = self.segment(z_H, z_L, data)
                    out["target_q_continue"] = torch.sigmoid(
                        torch.where(is_last, q_next[:, 0], torch.maximum(q_next[:, 0], q_next[:, 1])))
        return Carry(z_H=z_H, z_L=z_L, steps=steps.to(torch.int32), halted=halted, data=data), out

    @torch.no_grad()
    def predict(self, batch: dict[str, Tensor]) -> tuple[Carry, dict[str, Tensor]]:
        """Evaluation as the reference: a fresh carry, exactly halt_max_steps segments (Q is not
        consulted), outputs of the last segment. Call in eval mode."""
        assert not self.training, f"{type(self).__name__}.predict runs in eval mode (model.eval())"
        carry = self.initial_carry(batch)
        out: dict[str, Tensor] = {}
        for _ in range(self.cfg.halt_max_steps):
            carry, out = self(carry, batch)
        return carry, out

    @torch.no_grad()
    def predict_steps(self, batch: dict[str, Tensor], num_steps: int | None = None
                      ) -> Iterator[tuple[Carry, dict[str, Tensor]]]:
        """`predict` one segment at a time: yields (carry, outputs) after each of `num_steps`
        segments (default halt_max_steps; more runs the model deeper than it was trained, every
        slot staying on its row). With the default, the last yield is `predict`'s result, bit for
        bit. Call in eval mode."""
        assert not self.training, f"{type(self).__name__}.predict_steps runs in eval mode (model.eval())"
        carry = self.initial_carry(batch)
        for s in range(self.cfg.halt_max_steps if num_steps is None else num_steps):
            if s:  # past halt_max_steps every slot reports halted; without this the next call would reset it
                carry = replace(carry, halted=torch.zeros_like(carry.halted))
            carry, out = self(carry, batch)
            yield carry, out

    def q_halts(self, out: dict[str, Tensor]) -> Tensor:
        """(B,) bool: the Q head says halt after this segment (the training-time rule, exploration
        aside): Q(halt) > Q(continue) with `q_continue` (HRM), else Q(halt) > 0 (TRM's default)."""
        q = out["q_halt_logits"]
        return q > out["q_continue_logits"] if self.q_continue else q > 0


def carry_to(carry: Carry, device: torch.device | str) -> Carry:
    return replace(carry, z_H=carry.z_H.to(device), z_L=carry.z_L.to(device), steps=carry.steps.to(device),
                   halted=carry.halted.to(device), data={k: v.to(device) for k, v in carry.data.items()})


def carry_state(carry: Carry) -> dict[str, Tensor]:
    """A plain tensor dict (for checkpoints)."""
    return {"z_H": carry.z_H, "z_L": carry.z_L, "steps": carry.steps, "halted": carry.halted,
            **{f"data.{k}": v for k, v in carry.data.items()}}


def carry_from_state(state: dict[str, Tensor]) -> Carry:
    return Carry(z_H=state["z_H"], z_L=state["z_L"], steps=state["steps"], halted=state["halted"],
                 data={k[5:]: v for k, v in state.items() if k.startswith("data.")})
