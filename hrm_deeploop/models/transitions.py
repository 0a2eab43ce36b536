"""Loop transitions: the alternatives to the Post-LN step x <- RMSNorm(alpha * x + f(x)) that
`core.Block` writes out. A new transition is one class here, registered in `TRANSITIONS` by the
`Residual.norm` name that selects it.

| name      | update                                                   | schemes (scaling.scheme)                  |
|-----------|----------------------------------------------------------|-------------------------------------------|
| post      | x <- RMSNorm(alpha * x + f(x)), in `core.Block.forward`  | baseline, deepnorm, deeploop, power       |
| pre       | x <- x + eps * f(RMSNorm(x))                             | looped_eps                                |
| operloop  | a projected gradient step of the stream (see OperLoop)   | operloop (experimental)                   |

Each sublayer of a block owns one transition (`attn_step`, `mlp_step`), so a transition may have
parameters of its own (OperLoop's step size). Transitions whose stream leaves the stack
unnormalised (`final_norm = True`) get a closing RMSNorm from `core.LoopedCore`. A transition is
handed the sublayer f and the sublayer's `core.RMSNorm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from hrm_deeploop.models.scaling import Residual

Sublayer = Callable[[Tensor], Tensor]


class Transition(nn.Module):
    """x -> the stream after sublayer `f` (with its RMSNorm `norm`) has updated it."""

    final_norm = False  # the stream leaving the stack is unnormalised: LoopedCore adds an RMSNorm

    def forward(self, x: Tensor, f: Sublayer, norm: nn.Module) -> Tensor:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must define forward")

    def reset_parameters(self) -> None:
        """Initialise the transition's own parameters (none for most)."""


class PreNorm(Transition):
    """Pre-LN with a branch scale: x <- x + eps * f(RMSNorm(x)) (looped_eps: eps = lambda / (R sqrt(K)))."""

    final_norm = True

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: Tensor, f: Sublayer, norm: nn.Module) -> Tensor:
        return x + self.eps * f(norm(x))


class OperLoop(Transition):
    """EXPERIMENTAL. OperLoop, designed from its abstract alone (docs/alignment.md, "Loop
    transitions", states every interpretation): the stream is a fast weight, and each sublayer
    updates it by one projected gradient step of a local objective.

    - projection: the state lives on the sphere of its own RMS r = RMS(x); the sublayer reads
      z = RMSNorm(x), and its prediction is projected the same way ("aligned input maps"):
      t = f(z) / RMS(f(z)), the implicit target;
    - delta objective L(z) = 1/2 ||z - t||^2, gradient e = z - t (a plain residual step is the
      linear objective -<x, f>, gradient -f);
    - adaptive step size eta = eta_max / (1 + RMS(e)), eta_max = sigmoid(step_logit) learned per
      sublayer (initialised to `step`): smaller steps where the prediction disagrees most;
    - explicit weight decay lam: x <- (1 - eta lam) * r * u / RMS(u), u = z - eta e (the step, then
      the projection back onto the sphere, shrunk by the decay).
    """

    final_norm = True

    def __init__(self, step: float, decay: float):
        super().__init__()
        self.step, self.decay = step, decay
        self.step_logit = nn.Parameter(torch.empty(()))  # eta_max = sigmoid(step_logit)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.step_logit.fill_(math.log(self.step / (1 - self.step)))

    def forward(self, x: Tensor, f: Sublayer, norm: nn.Module) -> Tensor:
        x32 = x.float()
        r = _rms(x32, norm.eps)  # (..., 1)
        z = norm(x)
        fz = f(z).float()
        t = fz * torch.rsqrt(fz.square().mean(-1, keepdim=True) + norm.eps)  # the target, projected like the state
        e = z.float() - t  # gradient of the delta objective
        eta = torch.sigmoid(self.step_logit.float()) / (1 + _rms(e, 0.0))
        u = z.float() - eta * e
        return ((1 - eta * self.decay) * r * u / _rms(u, norm.eps)).to(x.dtype)


def _rms(x: Tensor, eps: float) -> Tensor:
    return x.square().mean(-1, keepdim=True).add(eps).sqrt()


TRANSITIONS: dict[str, Callable[[Residual], Transition]] = {
    "pre": lambda r: PreNorm(r.eps),
    "operloop": lambda r: OperLoop(r.step, r.decay),
}


def make_transition(residual: Residual) -> Transition:
    """The transition `residual.norm` names (any but `post`, which `core.Block` applies itself)."""
    if residual.norm not in TRANSITIONS:
        raise ValueError(f"unknown transition {residual.norm!r}; known: post, {', '.join(sorted(TRANSITIONS))}")
    return TRANSITIONS[residual.norm](residual)
