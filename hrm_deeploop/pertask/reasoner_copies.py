"""K tasks' copies of an ACT reasoner (HRM, TRM, URM) trained together in one process (issue 61;
docs/notebook/2026-12-06-reasoner-copies.md).

A lane holds one task's copy: `open(lane, trainer)` takes a lone `training.reasoner.Trainer` built
for the task (its model with the task's grown puzzle table, its optimisers, sampler, generator and
schedule) and moves its weights and optimiser state into the lane's slot of the stacked copies;
`step()` makes one optimiser step of every open lane, each on its own trainer's next batch;
`close(lane)` writes the lane's weights, puzzle table, optimiser state, step, carry and weight
average back into its trainer (whose `state_dict` is then a checkpoint as after its own steps).

- The weights: every parameter and buffer stacked on a leading slot axis (K, ...); the forward runs
  once for the open lanes by `torch.func.vmap` over `functional_call` on one template module (the
  first trainer's model, copied). The losses of the lanes are summed, each scaled as the lone step
  scales its own (1 / global batch), so a lane's gradient is its own loss's alone.
- The puzzle table: stacked too, padded to the largest lane's row count; a lane's rows are only
  ever looked up by its own batches (its trainer's row map), so a padding row or another task's row
  is never read, gets no gradient and is never updated. The lone table's gradient leaf (`prepare`,
  a zero offset added to the looked-up rows) is here an input of the vmapped forward (`LaneTable`),
  its gradient the lane's row gradients for `SparseSignSGD`, run per lane on the lane's own slice.
- Data-dependent Python in the lone step, done per lane outside the vmap exactly as the trainer does
  it: the sampler's next batch and the row map, the exploration draws from the trainer's own
  generator, the fresh carry, `adapt.trains` (whether the network trains at this step), the
  learning rates at the lane's own step count. Inside the model nothing branches on data (the ACT
  step is `torch.where`s), so the model files are unchanged.
- Rounding: the few ops whose batched form rounds differently from the lone one (the q head, the Q
  losses' BCE, URM's depthwise convolution) run one lane at a time inside the vmap (custom ops with
  per-lane vmap rules, `reasoner_ops`); CPU SDPA has no batching rule and runs lane by lane anyway.
  On CPU a lane is bit-identical to its lone trainer (tests/test_pertask_reasoner_copies.py).
- The dense optimiser: AdamATan2 written out per lane on the lane's slices, in the order of
  `optim.AdamATan2.step` (its atan2 and fused multiply-adds round by position in a tensor, so a
  lane's update runs on its own contiguous slice, never on the stacked tensor). The weight average
  (`train.ema`) is updated per lane likewise.
- A slot without a lane holds still (it is not in the vmap); a lane whose loss is not finite is not
  stepped (the lone trainer stops there): its loss is reported as it is, the caller closes it.

Not supported (refused at `open` with `Unsupported`, nothing changed): Muon, gradient accumulation,
torchrun, `train.compile`, lanes of different architectures (all lanes share the first lane's model
config but the puzzle table's rows).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from hrm_deeploop.data.rows import map_rows
from hrm_deeploop.models.act import DATA_KEYS, ACTReasoner, Carry, carry_to
from hrm_deeploop.pertask.reasoner_ops import lane_loss, lane_template
from hrm_deeploop.training.adapt import dense_trainable
from hrm_deeploop.training.optim import AdamATan2, SparseSignSGD
from hrm_deeploop.training.reasoner import Trainer

TABLE = "puzzle_emb.weights"
LOSS_KEYS = ("lm_loss", "q_halt_loss", "q_continue_loss")
PER_LANE = ("q_head",)  # the Linears run one lane at a time under vmap (reasoner_ops: rounding)


class Unsupported(ValueError):
    """A trainer whose step the lanes do not reproduce (the caller trains it alone)."""


def check_trainer(trainer: Trainer) -> None:
    """Raise `Unsupported` for what the lanes do not do: another dense optimiser than the torch
    AdamATan2 (Muon, the CUDA kernel), gradient accumulation, several processes, train.compile."""
    cfg = trainer.cfg
    if type(trainer.dense) is not AdamATan2 or trainer.dense.compiled:
        raise Unsupported(f"the dense optimiser is {type(trainer.dense).__name__}: the lanes step the torch AdamATan2")
    if cfg.train.grad_accum != 1 or trainer.env.world_size != 1 or cfg.train.compile:
        raise Unsupported("the lanes step one process, without train.grad_accum or train.compile")


@dataclass
class Lane:
    """One open lane: its trainer, step count, dense optimiser step count and ACT carry."""

    trainer: Trainer
    step: int
    adam_step: int
    carry: Carry | None
    ema_names: list[str] = field(default_factory=list)


class ReasonerCopies:
    """K slots of stacked reasoner copies; a lane is a slot with a task's trainer (module docstring)."""

    def __init__(self, k: int, device: torch.device, per_lane: tuple[str, ...] = PER_LANE):
        assert k >= 1, "ReasonerCopies: k >= 1"
        self.k, self.device, self.per_lane = k, torch.device(device), per_lane
        self.lanes: dict[int, Lane] = {}
        self.template: ACTReasoner | None = None
        self.params: dict[str, Tensor] = {}  # name -> (K, ...) leaf
        self.buffers: dict[str, Tensor] = {}  # name -> (K, ...); the puzzle table padded
        self.exp_avg: dict[str, Tensor] = {}
        self.exp_avg_sq: dict[str, Tensor] = {}
        self.ema: dict[str, Tensor] = {}  # name -> (K, ...) weight averages (lanes with train.ema)
        self._fn = None
        self.row_grads: dict[int, Tensor] = {}  # lane -> its puzzle rows' gradient at the last step

    # -- lanes ----------------------------------------------------------------------------------

    def open(self, lane: int, trainer: Trainer) -> None:
        """Lane `lane` takes `trainer`'s copy: weights, puzzle table, optimiser state, weight average."""
        assert 0 <= lane < self.k and lane not in self.lanes, f"ReasonerCopies.open: lane {lane} is not free"
        check_trainer(trainer)
        model = trainer.model
        if self.template is None:
            self._start(model)
        self._check_fits(model)
        with torch.no_grad():
            for n, p in model.named_parameters():
                self.params[n][lane].copy_(p.detach())
            for n, b in model.named_buffers():
                if n == TABLE:
                    self._fit_table(b.shape[0])
                    self.buffers[n][lane].zero_()
                    self.buffers[n][lane, :b.shape[0]].copy_(b)
                else:
                    self.buffers[n][lane].copy_(b)
            steps = set()
            for n, p in model.named_parameters():
                st = trainer.dense.state.get(p, {})
                self.exp_avg[n][lane].copy_(st["exp_avg"] if st else torch.zeros_like(p))
                self.exp_avg_sq[n][lane].copy_(st["exp_avg_sq"] if st else torch.zeros_like(p))
                steps.add(int(st["step"]) if st else 0)
            assert len(steps) == 1, f"ReasonerCopies: the trainer's parameters have different Adam steps {steps}"
            names: list[str] = []
            if trainer.ema is not None:
                names = list(trainer.ema.shadow)
                for n in names:
                    if n not in self.ema:
                        self.ema[n] = torch.zeros_like(self.params[n])
                    self.ema[n][lane].copy_(trainer.ema.shadow[n])
        carry = trainer.carries[0]
        self.lanes[lane] = Lane(trainer, trainer.step, steps.pop(), None if carry is None else carry_to(carry, self.device),
                                names)

    def close(self, lane: int) -> None:
        """Lane `lane`'s copy written back into its trainer (weights, table, optimiser state, step,
        carry, weight average); the slot freed."""
        ln = self.lanes.pop(lane)
        t, model = ln.trainer, ln.trainer.model
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(self.params[n][lane])
                if ln.adam_step:
                    st = t.dense.state[p]
                    if not st:
                        st["exp_avg"], st["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                    st["step"] = torch.tensor(float(ln.adam_step), dtype=torch.float32)
                    st["exp_avg"].copy_(self.exp_avg[n][lane])
                    st["exp_avg_sq"].copy_(self.exp_avg_sq[n][lane])
            for n, b in model.named_buffers():
                b.copy_(self.buffers[n][lane, :b.shape[0]] if n == TABLE else self.buffers[n][lane])
            for n in ln.ema_names:
                t.ema.shadow[n].copy_(self.ema[n][lane])
        t.step, t.carries[0] = ln.step, ln.carry

    # -- one step -------------------------------------------------------------------------------

    def step(self) -> dict[int, float]:
        """One optimiser step of every open lane on its trainer's next batch; each lane's loss as
        `Trainer.train_step` reports it."""
        assert self.lanes, "ReasonerCopies.step: no lane is open"
        work = {lane: self._prepare(ln) for lane, ln in self.lanes.items()}
        groups: dict[int, list[int]] = {}  # rows per batch -> lanes (stacked only with their like)
        for lane, w in work.items():
            groups.setdefault(w["batch"]["inputs"].shape[0], []).append(lane)
        for p in self.params.values():
            p.grad = None
        total, outs = None, {}
        for idx in groups.values():
            got = self._forward(idx, [work[i] for i in idx])
            scale = torch.tensor([work[i]["scale"] for i in idx], dtype=got["loss"].dtype, device=self.device)
            part = (got["loss"] * scale).sum()
            total = part if total is None else total + part
            outs.update({lane: (j, got) for j, lane in enumerate(idx)})
        total.backward()
        losses: dict[int, float] = {}
        with torch.no_grad():
            parts = {id(got): torch.stack([got[key].to(torch.float64) for key in LOSS_KEYS], 1).tolist()
                     for _, got in outs.values()}  # one host sync per group
            for lane, (j, got) in outs.items():
                ln, w = self.lanes[lane], work[lane]
                sums = dict(zip(LOSS_KEYS, parts[id(got)][j]))
                G = ln.trainer.cfg.train.global_batch_size
                losses[lane] = (sums["lm_loss"] + 0.5 * (sums["q_halt_loss"] + sums["q_continue_loss"])) / G
                ln.carry = Carry(z_H=got["z_H"][j], z_L=got["z_L"][j], steps=got["steps"][j],
                                 halted=got["halted"][j], data={k: got["data"][k][j] for k in DATA_KEYS})
                if not math.isfinite(losses[lane]):
                    continue  # the lone trainer stops before its optimiser step: weights hold
                if got["offset"] is not None:
                    self.row_grads[lane] = got["offset"].grad[j]
                    self._sparse(lane, w, got["data"]["puzzle_identifiers"][j], got["offset"].grad[j])
                if w["dense_on"]:
                    self._adam_atan2(lane, w["lr"])
                    self._ema(lane)
        return losses  # the gradients stay until the next step (tests compare them with the lone ones)

    def _prepare(self, ln: Lane) -> dict[str, Any]:
        """What the lone `train_step` does before its forward, for one lane: the step count, the
        sampler's batch mapped to table rows, the learning rates, the carry, the exploration draws."""
        t = ln.trainer
        ln.step += 1
        tensors = map_rows(t.sampler.next_batch().tensors, t.rows)
        batch = {k: tensors[k].to(self.device) for k in DATA_KEYS}
        a = t.cfg.adapt
        dense_on = dense_trainable(a.trains, a.embedding_steps, ln.step) if t.start is not None else True
        lr, lr_puzzle = t.lrs(ln.step)
        if ln.carry is None:
            ln.carry = t.model.initial_carry(batch)
        rows = batch["inputs"].shape[0]
        min_halt = t.model.exploration(rows, t.generator)
        if min_halt is None:  # the step does not explore (halt_max_steps 1): never read
            min_halt = torch.zeros(rows, dtype=torch.int64)
        return {"batch": batch, "dense_on": dense_on, "lr": lr, "lr_puzzle": lr_puzzle,
                "min_halt": min_halt.to(self.device), "scale": t.env.world_size / t.cfg.train.global_batch_size}

    def _forward(self, idx: list[int], work: list[dict[str, Any]]) -> dict[str, Any]:
        """The vmapped ACT step and loss of lanes `idx` (their batches of equal rows)."""
        at = torch.tensor(idx, device=self.device)
        whole = idx == list(range(self.k))
        params = self.params if whole else {n: p.index_select(0, at) for n, p in self.params.items()}
        buffers = self.buffers if whole else {n: b.index_select(0, at) for n, b in self.buffers.items()}
        carries = [self.lanes[i].carry for i in idx]
        carry = {"z_H": torch.stack([c.z_H for c in carries]), "z_L": torch.stack([c.z_L for c in carries]),
                 "steps": torch.stack([c.steps for c in carries]), "halted": torch.stack([c.halted for c in carries]),
                 "data": {k: torch.stack([c.data[k] for c in carries]) for k in DATA_KEYS}}
        batch = {k: torch.stack([w["batch"][k] for w in work]) for k in DATA_KEYS}
        min_halt = torch.stack([w["min_halt"] for w in work])
        offset = None
        if TABLE in self.buffers:  # the lone `puzzle_emb.prepare(rows)`: a zero leaf per lane
            dim = self.buffers[TABLE].shape[-1]
            offset = torch.zeros(len(idx), min_halt.shape[1], dim, device=self.device, requires_grad=True)
        with warnings.catch_warnings():  # CPU SDPA has no batching rule: vmap runs it lane by lane
            warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented "
                                    "the batching rule for aten::_scaled_dot_product")
            out = self._fn(params, buffers, carry, batch, min_halt, offset)
        return {**out, "offset": offset}

    # -- optimisers -----------------------------------------------------------------------------

    def _sparse(self, lane: int, w: dict[str, Any], ids: Tensor, grads: Tensor) -> None:
        """The lone SparseSignSGD step on the lane's own table slice (its rows only): `ids` the rows the
        step embedded (the carry's: a slot that did not halt keeps its earlier puzzle), as the lone
        `PuzzleEmbedding.take_grads` hands them, not the fresh batch's."""
        t = self.lanes[lane].trainer
        sgd = SparseSignSGD(self.buffers[TABLE][lane], w["lr_puzzle"], t.sparse.weight_decay)
        sgd.step(ids, grads)

    def _adam_atan2(self, lane: int, lr: float) -> None:
        """`optim.AdamATan2.step` on the lane's slices, op for op."""
        t = self.lanes[lane].trainer
        group = t.dense.param_groups[0]
        (b1, b2), wd = group["betas"], group["weight_decay"]
        ln = self.lanes[lane]
        ln.adam_step += 1
        step = float(torch.tensor(float(ln.adam_step), dtype=torch.float32))
        for n, P in self.params.items():
            if P.grad is None:
                continue
            p, g = P.detach()[lane], P.grad[lane]
            m, v = self.exp_avg[n][lane], self.exp_avg_sq[n][lane]
            p.mul_(1 - lr * wd)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = v.sqrt() / math.sqrt(1 - b2 ** step)
            p.add_(torch.atan2(m, denom), alpha=-lr / (1 - b1 ** step))

    def _ema(self, lane: int) -> None:
        """`training.ema.EMA.update` on the lane's slices."""
        names = self.lanes[lane].ema_names
        if not names:
            return
        rate = self.lanes[lane].trainer.ema.rate
        shadows = [self.ema[n][lane] for n in names]
        torch._foreach_mul_(shadows, rate)
        torch._foreach_add_(shadows, torch._foreach_mul([self.params[n].detach()[lane] for n in names], 1.0 - rate))

    # -- the stacked tensors ----------------------------------------------------------------------

    def _start(self, model: ACTReasoner) -> None:
        """The template (the first lane's model, its table's lookup made per lane) and the zero slots."""
        self.template = lane_template(model, self.per_lane).to(self.device).train()
        K = self.k
        self.params = {n: torch.zeros(K, *p.shape, dtype=p.dtype, device=self.device).requires_grad_(True)
                       for n, p in model.named_parameters()}
        self.buffers = {n: torch.zeros(K, *b.shape, dtype=b.dtype, device=self.device)
                        for n, b in model.named_buffers()}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self._fn = vmap(self._one, randomness="error")

    def _check_fits(self, model: ACTReasoner) -> None:
        """Raise `Unsupported` for a model of another architecture than the first lane's."""
        a, b = self.template.cfg, model.cfg
        if type(model) is not type(self.template) or a.__class__ is not b.__class__:
            raise Unsupported(f"a {type(model).__name__} beside {type(self.template).__name__} lanes")
        if replace(a, num_puzzle_identifiers=1) != replace(b, num_puzzle_identifiers=1):
            raise Unsupported("every lane's model must have the first lane's config (but the puzzle table's rows)")
        for n, p in model.named_parameters():
            if self.params[n].shape[1:] != p.shape:
                raise Unsupported(f"{n} has shape {tuple(p.shape)}, the lanes' {tuple(self.params[n].shape[1:])}")

    def _fit_table(self, rows: int) -> None:
        """The stacked table padded (with zero rows no lane reads) to hold `rows` rows."""
        T = self.buffers[TABLE]
        if rows > T.shape[1]:
            pad = torch.zeros(T.shape[0], rows - T.shape[1], T.shape[2], dtype=T.dtype, device=T.device)
            self.buffers[TABLE] = torch.cat([T, pad], dim=1)

    def _one(self, params: dict[str, Tensor], buffers: dict[str, Tensor], carry: dict[str, Any],
             batch: dict[str, Tensor], min_halt: Tensor, offset: Tensor | None) -> dict[str, Any]:
        """One lane's ACT step and loss (under vmap): the lone `Trainer._forward_loss`."""
        tpl = self.template
        if tpl.puzzle_emb is not None:
            tpl.puzzle_emb.offset = offset
        c = Carry(z_H=carry["z_H"], z_L=carry["z_L"], steps=carry["steps"], halted=carry["halted"],
                  data=carry["data"])
        c, out = functional_call(tpl, (params, buffers), (c, batch, None, min_halt))
        losses = lane_loss(out, c.data["labels"], tpl.cfg.loss_type, tpl.cfg.stablemax_dtype)
        return {**losses, "z_H": c.z_H, "z_L": c.z_L, "steps": c.steps,
                "halted": c.halted, "data": c.data}
