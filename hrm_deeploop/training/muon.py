"""Muon on the matrices, AdamW on the rest: the dense optimiser of URM's ARC-AGI-2 setup
(`optim.name=muon`; the reference's `use_muon=True`, its `models/muon.py` and the parameter split
of its `pretrain.create_model`).

- Matrices (every 2-D parameter): SGD momentum (Nesterov), the update's orthogonal polar factor
  approximated by a quintic Newton-Schulz iteration (`msign`), scaled to match AdamW's update RMS
  (Moonlight's rule: lr * 0.2 * sqrt(max(rows, cols))), decoupled weight decay lr * wd.
- Everything else (biases, the convolutions' 3-D kernels): AdamW with epsilon outside the square
  root, the reference's variant.
- Numerics as the reference's: fp32 momentum, the Newton-Schulz input rounded to bf16 (its
  `g.bfloat16()`) and the iteration itself in fp32. Plain eager torch: the reference wraps
  `msign` in `torch.compile`, which this needs on no device.
- Single process or DDP (each rank steps on the same all-reduced gradients, so every rank computes
  the same update); not sharded parameters (FSDP2: refused by the config, `optim.name`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

# (a, b, c) of X <- a X + (b A + c A^2) X, A = X X^T, for the first eight steps; later steps
# repeat the last triple. Each step maps every singular value s to a s + b s^3 + c s^5. After all
# eight, s in [1e-3, 1] (of the Frobenius norm) lands in [0.9993, 1.0004]; after the five the
# reference runs (its ns_steps default), in [0.45, 1.84]: U S' V^T rather than U V^T.
NS_COEFFICIENTS = (
    (7.2086, -15.5131, 9.0178),
    (3.9623, -2.5813, 0.4542),
    (3.9466, -2.5765, 0.4544),
    (3.8991, -2.5671, 0.4566),
    (3.7186, -2.5308, 0.4653),
    (3.1390, -2.3073, 0.4733),
    (2.1715, -1.5246, 0.3885),
    (1.8648, -1.2224, 0.3577),
)


def msign(G: Tensor, steps: int = 5) -> Tensor:
    """Approximate orthogonal polar factor of the matrix G (m, n), in fp32: G scaled to Frobenius
    norm 1 (so every singular value is <= 1), then `steps` Newton-Schulz steps on the wide
    orientation (m <= n, so that A = X X^T is the smaller Gram matrix)."""
    if G.ndim != 2:
        raise ValueError(f"msign: a matrix is expected, got shape {tuple(G.shape)}")
    X = G.float()
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.mT  # (n, m), n < m
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-7)
    for i in range(steps):
        a, b, c = NS_COEFFICIENTS[min(i, len(NS_COEFFICIENTS) - 1)]
        A = X @ X.mT  # (rows, rows)
        B = torch.addmm(A, A, A, beta=b, alpha=c)  # b A + c A^2
        X = torch.addmm(X, B, X, beta=a, alpha=1.0)  # a X + B X
    return X.mT if tall else X


class Muon(torch.optim.Optimizer):
    """Muon on `matrices`, AdamW on `others`: two parameter groups (`muon` True / False) sharing
    lr and weight_decay, which the schedule sets on both each step.

    Matrix W with gradient g, momentum buffer m:
        m <- mu m + g ;  u = g + mu m (nesterov) or m
        W <- W (1 - lr wd) - lr * rms * sqrt(max(rows, cols)) * msign(bf16(u))
    Any other parameter p, AdamW with the step count t:
        m1 <- lerp(m1, g, 1 - b1) ;  m2 <- lerp(m2, g^2, 1 - b2)
        p <- p (1 - lr wd) - lr sqrt(1 - b2^t) / (1 - b1^t) * m1 / (eps + sqrt(m2))
    """

    def __init__(self, matrices: Iterable[torch.nn.Parameter], others: Iterable[torch.nn.Parameter],
                 lr: float = 1e-4, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
                 matched_adamw_rms: float = 0.2):
        matrices, others = list(matrices), list(others)
        bad = [tuple(p.shape) for p in matrices if p.ndim != 2]
        if bad:
            raise ValueError(f"Muon: the orthogonalised group takes matrices only, got shapes {bad}")
        groups = [dict(params=ps, muon=flag) for ps, flag in ((matrices, True), (others, False)) if ps]
        super().__init__(groups, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps, matched_adamw_rms=matched_adamw_rms))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            (self._muon if group["muon"] else self._adamw)(group)
        return loss

    def _muon(self, group: dict) -> None:
        lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["momentum_buffer"] = torch.zeros_like(p.grad)
            buf = state["momentum_buffer"]
            buf.mul_(mu).add_(p.grad)
            u = p.grad.add(buf, alpha=mu) if group["nesterov"] else buf
            update = msign(u.bfloat16(), group["ns_steps"])
            scale = math.sqrt(max(p.shape)) * group["matched_adamw_rms"]
            p.mul_(1 - lr * wd)
            p.add_(update, alpha=-(lr * scale))

    def _adamw(self, group: dict) -> None:
        lr, wd, (b1, b2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p.grad)
                state["exp_avg_sq"] = torch.zeros_like(p.grad)
            state["step"] += 1
            t = state["step"]
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.lerp_(p.grad, 1 - b1)
            v.lerp_(p.grad.square(), 1 - b2)
            direction = m / (eps + v.sqrt())
            scale = (1 - b1**t) / (1 - b2**t) ** 0.5
            p.mul_(1 - lr * wd)
            p.add_(direction, alpha=-lr / scale)


def make_muon(params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float],
              weight_decay: float) -> Muon:
    """The reference's split (pretrain.create_model with use_muon): Muon on every 2-D parameter,
    AdamW on the rest, one weight decay for both."""
    params = list(params)
    return Muon([p for p in params if p.ndim == 2], [p for p in params if p.ndim != 2], lr=lr,
                weight_decay=weight_decay, betas=betas)
