"""LoopViT's lanes for `ttt views=build` (`build_lanes.py`'s contract): K tasks' `train-vit`
trainers stepped at once, each lane one task's copy, its numbers its own.

- The weights: every parameter stacked on a lane axis (K, ...), the forward run once for every
  lane by `torch.func.vmap` over `functional_call` on one template module (`copies.template_of`:
  the convolutions, norms, head and loss through per-lane ops, so a lane's arithmetic is a lone
  module's). A lane's batch is its trainer's own next batch (`VisionTrainer.next_batch`: its
  sampler, its canvases), its learning rate its trainer's schedule at its own step.
- Dropout: `copies.CopyDropout` draws from the lane's own generator, started from torch's global
  state as the lane's trainer left it when it was built (`trainer.start_rng`, the state a lone
  trainer's first step draws from), so a lane's masks are those of the task trained alone.
- The optimiser: `train-vit`'s torch AdamW (decoupled weight decay, then torch's single-tensor
  update order) and its gradient-norm clip (`optim.grad_clip`, the norm over the lane's own
  gradients), per lane; a lane that does not step keeps its weights and moments (`torch.where`).
- A lane whose loss or gradient norm is not finite is reported (`diverged`): its batch-mates'
  numbers do not see it (each lane's loss and gradient are its own under vmap).
- The loss: `train-vit`'s (`vision_loss`): the cross-entropy over the valid pixels plus the exit
  gate's regularisers at their weights.
- `fits(trainer)` says why a trainer cannot take a lane (attention dropout inside SDPA, a weight average, parameters of another shape than the open
  lanes'); the engine then trains that task alone or in a later set of lanes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from hrm_deeploop import runtime
from hrm_deeploop.data.canvas import IGNORE
from hrm_deeploop.models.loopvit_config import NUM_COLORS
from hrm_deeploop.pertask import copies
from hrm_deeploop.pertask.copies import lane_cross_entropy, lane_groups, sdpa_lane_by_lane, template_of
from hrm_deeploop.training.optim import loopvit_lr_at, lr_at
from hrm_deeploop.training.vision import gate_regularisers


def lr_of(trainer, step: int) -> float:
    """`VisionTrainer.train_step`'s learning rate at `step` (1-based)."""
    o = trainer.cfg.optim
    return (loopvit_lr_at if o.schedule == "official" else lr_at)(step, o.lr, o.warmup_steps, trainer.total_steps,
                                                                   o.min_lr_ratio)


class VisionCopies:
    """K lanes of LoopViT trainers (module docstring; the contract in `build_lanes.py`)."""

    def __init__(self, k: int, device: torch.device):
        self.k, self.device = k, torch.device(device)
        self.trainers: list = [None] * k
        self.steps = [0] * k
        self.template = None
        self.diverged: dict[int, str] = {}  # lane -> why, after the last step

    def fits(self, trainer) -> str | None:
        """None when `trainer` can take a lane of this set; else why not."""
        m = trainer.model
        if trainer.ema is not None:
            return "train.ema (a weight average per lane is not kept)"
        if any(hasattr(x, "explicit") and not x.explicit and x.dropout > 0 for x in m.modules()):
            return "attention dropout inside SDPA (not drawn per lane)"
        if self.template is not None:
            shapes = {n: p.shape for n, p in m.named_parameters()}
            if shapes != {n: p.shape[1:] for n, p in self.params.items()}:
                return "parameters of another shape than the open lanes' (another task-table size)"
        return None

    def _build(self, trainer) -> None:
        o = trainer.cfg.optim
        self.betas, self.eps, self.wd = (o.beta1, o.beta2), 1e-8, o.weight_decay
        self.clip = o.grad_clip if o.grad_clip > 0 else float("inf")
        self.gate_weights, self.num_loops = (o.gate_entropy_weight, o.loop_penalty_weight), trainer.cfg.model.num_loops
        self.template, self.drops = template_of(trainer.model)
        self.template.to(self.device).train()
        self.buffers = {n: b.to(self.device) for n, b in self.template.named_buffers()}
        self.params = {n: torch.zeros(self.k, *p.shape, dtype=p.dtype, device=self.device, requires_grad=True)
                       for n, p in self.template.named_parameters()}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.lanes = torch.arange(self.k, device=self.device)
        copies.GENERATORS[:] = [torch.Generator(device=self.device) for _ in range(self.k)]
        self.dtype = trainer.dtype
        self._loss = vmap(self._one_loss, in_dims=(0, 0, 0, 0, 0, 0), randomness="error")

    def open(self, lane: int, trainer) -> None:
        """`trainer` (built, not stepped) takes `lane`: its weights, fresh moments, its dropout stream."""
        why = self.fits(trainer)
        assert why is None, f"VisionCopies.open: {why}"
        if self.template is None:
            self._build(trainer)
        with torch.no_grad():
            for n, p in trainer.model.named_parameters():
                self.params[n][lane].copy_(p)
                self.exp_avg[n][lane].zero_()
                self.exp_avg_sq[n][lane].zero_()
        rng = getattr(trainer, "start_rng", None) or {"cpu": torch.get_rng_state(), "cuda": None}
        copies.GENERATORS[lane].set_state(rng["cuda"] if self.device.type == "cuda" else rng["cpu"])
        self.trainers[lane], self.steps[lane] = trainer, 0

    def _one_loss(self, params, lane, canvas, task_ids, mask, target) -> Tensor:
        for d in self.drops:
            d.lane = lane
        out = functional_call(self.template, (params, self.buffers), (canvas, task_ids, mask))
        loss = lane_cross_entropy(out.logits.reshape(-1, NUM_COLORS), target.reshape(-1).long(), IGNORE)  # (B,S,S,C) in
        neg_entropy, penalty = gate_regularisers(out.gate_probs, None, self.num_loops)  # train-vit's `vision_loss`
        if self.gate_weights[0] > 0:
            loss = loss + self.gate_weights[0] * neg_entropy
        if self.gate_weights[1] > 0:
            loss = loss + self.gate_weights[1] * penalty
        return loss

    def step(self) -> dict[int, float]:
        """One optimiser step of every open lane on its trainer's next batch; each lane's loss."""
        open_ = [i for i, t in enumerate(self.trainers) if t is not None]
        assert open_, "VisionCopies.step: no lane is open"
        batches = {}
        for i in open_:
            self.steps[i] += 1
            self.trainers[i].step = self.steps[i]
            batches[i] = self.trainers[i].next_batch(self.steps[i])
        for p in self.params.values():
            p.grad = None
        losses: dict[int, float] = {}
        total = None
        with sdpa_lane_by_lane():
            with runtime.autocast(self.device, self.dtype):  # a no-op on CPU and for float32, as train-vit's step
                for idx, params, lanes, stacked in lane_groups(self.params, self.lanes, batches):
                    got = self._loss(params, lanes, *stacked)  # (len(idx),)
                    total = got.sum() if total is None else total + got.sum()
                    losses |= dict(zip(idx, got.detach().cpu().tolist()))
            total.backward()
        active = [i in losses for i in range(self.k)]
        with torch.no_grad():
            norms = self._clip(active)
            self._adamw(active, [lr_of(self.trainers[i], self.steps[i]) if a else 0.0 for i, a in enumerate(active)])
        self.diverged = {i: f"step {self.steps[i]}: loss {losses[i]}, grad_norm {norms[i]}" for i in losses
                         if not (math.isfinite(losses[i]) and math.isfinite(norms[i]))}
        return losses

    def _clip(self, active: list[bool]) -> list[float]:
        """torch.nn.utils.clip_grad_norm_ per lane; returns each lane's total norm (before clipping)."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        norms = torch._foreach_norm([g[k] for k in range(self.k) for g in grads], 2)
        total = torch.stack([torch.linalg.vector_norm(torch.stack(norms[k * len(grads):(k + 1) * len(grads)]), 2)
                             for k in range(self.k)])  # (K,)
        coef = torch.clamp(self.clip / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
        return [float(x) for x in total.tolist()]

    def _adamw(self, active: list[bool], lrs: list[float]) -> None:
        """torch's single-tensor AdamW per lane: decay, moments, bias corrections, the update."""
        b1, b2 = self.betas
        steps = [max(s, 1) for s in self.steps]
        shape1 = (self.k,)
        on = torch.tensor(active, device=self.device)
        decay = torch.tensor([1 - lr * self.wd for lr in lrs], dtype=torch.float32, device=self.device)
        ns = torch.tensor([-(lr / (1 - b1 ** s)) for lr, s in zip(lrs, steps)], dtype=torch.float32,
                          device=self.device)
        bs = torch.tensor([math.sqrt(1 - b2 ** s) for s in steps], dtype=torch.float32, device=self.device)
        assert ns.shape == shape1
        for n, p in self.params.items():
            if p.grad is None:  # as torch's AdamW: a parameter without a gradient is not stepped
                continue
            shape = (-1, *[1] * (p.dim() - 1))
            g, m, v = p.grad, self.exp_avg[n], self.exp_avg_sq[n]
            w = p.detach() * decay.view(shape) if self.wd else p.detach()
            m_new = m.lerp(g, 1 - b1)
            v_new = v.mul(b2).addcmul_(g, g, value=1 - b2)
            denom = (v_new.sqrt() / bs.view(shape)).add_(self.eps)
            p_new = w + (ns.view(shape) * m_new) / denom
            keep = on.view(shape)
            m.copy_(torch.where(keep, m_new, m))
            v.copy_(torch.where(keep, v_new, v))
            p.detach().copy_(torch.where(keep, p_new, p.detach()))

    def close(self, lane: int) -> None:
        """The lane's weights written back into its trainer's model; the lane freed."""
        trainer = self.trainers[lane]
        with torch.no_grad():
            for n, p in trainer.model.named_parameters():
                p.copy_(self.params[n][lane])
        trainer.step = self.steps[lane]
        self.trainers[lane] = None
