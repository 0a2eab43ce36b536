"""Optimisers and schedules: AdamATan2 (CUDA kernel or pure torch), Muon (training/muon.py) as the
other dense choice, sparse SignSGD, warmup+cosine."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from hrm_deeploop.errors import UserError
from hrm_deeploop.training.muon import make_muon


class AdamATan2(torch.optim.Optimizer):
    """Adam with atan2 instead of division (no epsilon), the update of imoneoi/adam-atan2:

        p <- p * (1 - lr * wd)
        m <- b1 * m + (1 - b1) * g ;  v <- b2 * v + (1 - b2) * g^2
        p <- p - lr / (1 - b1^t) * atan2(m, sqrt(v) / sqrt(1 - b2^t))

    Pure PyTorch, any device; `make_adam_atan2` uses the CUDA kernel when it imports. With
    `compiled=True` (a GPU speed switch, off by default) each group's update is one
    `torch.compile`d function over all its tensors (a few fused kernels instead of ~9 per
    parameter); the rule is the same, the last bits are the compiler's (atan2 and sqrt in Triton).
    """

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.95), weight_decay: float = 0.1,
                 compiled: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        self.compiled = compiled

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
            if self.compiled:
                self._compiled_group_step(group, lr, b1, b2, wd)
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._stepped(p)
                t = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * wd)
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = v.sqrt() / math.sqrt(1 - b2**t)
                p.add_(torch.atan2(m, denom), alpha=-lr / (1 - b1**t))
        return loss

    def _stepped(self, p: Tensor) -> dict:
        """p's state (created at its first step: step 0, zero moments), its step count advanced."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        return state

    def _compiled_group_step(self, group: dict, lr: float, b1: float, b2: float, wd: float) -> None:
        """The same update for every parameter of `group` with a gradient, in one compiled call;
        the per-step scalars travel as one small tensor (no recompilation as lr and t change)."""
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        for p in params:
            self._stepped(p)
        t = float(self.state[params[0]]["step"])  # every parameter of a group steps together here
        scalars = torch.tensor([lr, 1 - b1**t, math.sqrt(1 - b2**t)], dtype=torch.float32)
        if params[0].is_cuda:
            scalars = scalars.pin_memory().to(params[0].device, non_blocking=True)
        _adam_atan2_update(params, [p.grad for p in params], [self.state[p]["exp_avg"] for p in params],
                           [self.state[p]["exp_avg_sq"] for p in params], scalars, b1, b2, wd)


@torch.compile(dynamic=False)
def _adam_atan2_update(params: list[Tensor], grads: list[Tensor], ms: list[Tensor], vs: list[Tensor],
                       scalars: Tensor, b1: float, b2: float, wd: float) -> None:
    """AdamATan2's rule over lists of tensors; scalars = (lr, 1 - b1^t, sqrt(1 - b2^t))."""
    lr, bc1, bc2_sqrt = scalars[0], scalars[1], scalars[2]
    for p, g, m, v in zip(params, grads, ms, vs):
        p.mul_(1 - lr * wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        p.sub_(torch.atan2(m, v.sqrt() / bc2_sqrt) * (lr / bc1))


def make_adam_atan2(params, lr: float, betas: tuple[float, float], weight_decay: float,
                    device: torch.device) -> torch.optim.Optimizer:
    """The adam-atan2 CUDA kernel on CUDA when it imports; the pure-PyTorch port elsewhere."""
    params = list(params)
    if device.type == "cuda":
        try:
            from adam_atan2 import AdamATan2 as CudaAdamATan2  # lazy: optional; needs the CUDA build
        except ImportError:
            CudaAdamATan2 = None  # not installed, or built without CUDA: use the torch port below
        if CudaAdamATan2 is not None:
            return CudaAdamATan2(params, lr=lr, betas=betas, weight_decay=weight_decay)
    return AdamATan2(params, lr=lr, betas=betas, weight_decay=weight_decay)


# optim.name -> the key of its state in a checkpoint's "optimizers" (AdamATan2's was always "adam")
DENSE_STATE_KEYS = {"adam_atan2": "adam", "muon": "muon"}


def make_dense(name: str, params, lr: float, betas: tuple[float, float], weight_decay: float,
               device: torch.device) -> torch.optim.Optimizer:
    """The optimiser `optim.name` names over the network's parameters: AdamATan2 on all of them, or
    Muon on the matrices with AdamW on the rest (training/muon.py)."""
    if name == "adam_atan2":
        return make_adam_atan2(params, lr=lr, betas=betas, weight_decay=weight_decay, device=device)
    if name == "muon":
        return make_muon(params, lr=lr, betas=betas, weight_decay=weight_decay)
    raise ValueError(f"optim.name={name!r}: not one of {sorted(DENSE_STATE_KEYS)}")


def dense_state(optimizers: dict, name: str, where: str) -> dict:
    """The dense optimiser's state in a checkpoint's "optimizers", for a run with optim.name=`name`
    (`where` names the checkpoint in the error)."""
    key = DENSE_STATE_KEYS[name]
    if key not in optimizers:
        other = next((n for n, k in DENSE_STATE_KEYS.items() if k in optimizers), None)
        raise UserError(f"{where}: trained with optim.name={other}, this run has optim.name={name}" if other
                        else f"{where}: holds no dense optimiser state")
    return optimizers[key]


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float = 1.0) -> float:
    """HRM's schedule: linear warmup to base, then cosine down to base*min_ratio (1.0 = constant).
    `step` counts from 1 for the first update."""
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return base_lr * (min_ratio + max(0.0, (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))))


def loopvit_lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """LoopViT's official schedule (`utils/lr_scheduler.py:get_cosine_schedule_with_warmup`, a
    LambdaLR that `offline_train_loop_ARC.py` steps after each optimiser step): update `step` (from
    1) runs at base_lr * lambda(step - 1), lambda(s) = s / max(1, W) while s < W, then
    max(0, 0.5 (1 + cos(pi * 0.5 * progress * 2))), progress = (s - W) / max(1, N - W). The first
    update is at 0, one behind `lr_at`. `min_ratio` > 0 lifts the cosine's floor as `lr_at` does;
    0 (the official) computes the official expression, operation for operation."""
    s = step - 1
    if s < warmup_steps:
        return base_lr * (s / max(1, warmup_steps))
    progress = (s - warmup_steps) / max(1, total_steps - warmup_steps)
    factor = max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * progress * 2)))
    return base_lr * (min_ratio + (1 - min_ratio) * factor if min_ratio else factor)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr


class SparseSignSGD:
    """SignSGD with decoupled weight decay on the rows of an embedding table seen in a batch.

    Per step: gather (ids, grads) from every rank, sum the grads of duplicate ids, then for those
    rows only: w <- w * (1 - lr * wd) - lr * sign(g). Rows not in the batch are untouched.
    The table is a buffer (not a Parameter), updated in place identically on every rank.
    """

    def __init__(self, table: Tensor, lr: float = 1e-2, weight_decay: float = 0.1):
        self.table = table
        self.lr = lr
        self.weight_decay = weight_decay

    @torch.no_grad()
    def step(self, ids: Tensor, grads: Tensor) -> None:
        """ids: (B,) int; grads: (B, D) gradient w.r.t. the looked-up rows."""
        if dist.is_initialized() and dist.get_world_size() > 1:
            world = dist.get_world_size()
            all_ids = torch.empty(world * ids.numel(), dtype=ids.dtype, device=ids.device)
            all_grads = torch.empty(world * grads.shape[0], grads.shape[1], dtype=grads.dtype, device=grads.device)
            # all_gather_single is the torch >= 2.13 name of all_gather_into_tensor
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            gather(all_ids, ids.contiguous())
            gather(all_grads, grads.contiguous())
            ids, grads = all_ids, all_grads
        uniq, inverse = torch.unique(ids.long(), return_inverse=True)
        summed = torch.zeros(uniq.numel(), grads.shape[1], dtype=grads.dtype, device=grads.device)
        summed.index_add_(0, inverse, grads)
        rows = self.table[uniq]
        rows.mul_(1 - self.lr * self.weight_decay).add_(torch.sign(summed).to(rows.dtype), alpha=-self.lr)
        self.table[uniq] = rows

    def state_dict(self) -> dict:
        return {"lr": self.lr, "weight_decay": self.weight_decay}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.weight_decay = state["lr"], state["weight_decay"]
