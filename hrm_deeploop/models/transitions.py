"""Loop transitions: how one residual sublayer f updates the looped stream x. A new transition is
one class here, registered in `TRANSITIONS` by the `Residual.norm` name that selects it.

| name      | update                                                   | schemes (scaling.scheme)                  |
|-----------|----------------------------------------------------------|-------------------------------------------|
| post      | x <- RMSNorm(alpha * x + f(x))                           | baseline, deepnorm, deeploop, power       |
| pre       | x <- x + eps * f(RMSNorm(x))                             | looped_eps                                |
| operloop  | a projected gradient step of the stream (see OperLoop)   | operloop (experimental)                   |

Each sublayer of a block owns one transition (`attn_step`, `mlp_step`), so a transition may have
parameters of its own (OperLoop's step size); post and pre have none, so checkpoints and the official
key maps are unchanged. Transitions whose stream leaves the stack unnormalised (`final_norm = True`)
get a closing RMSNorm from `LoopedCore`.

Also here: RMSNorm and the fused post-norm residual step (the Triton kernel on CUDA).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from hrm_deeploop.models.scaling import Residual

# The fused Triton residual-norm kernel on CUDA tensors. False forces the plain PyTorch path
# (benchmarks, debugging). `runtime.setup` sets it from the environment variable
# HRM_DEEPLOOP_FUSED_RESIDUAL_NORM (0/false/no/off: off), so it holds for a whole run and every
# torchrun rank; this module reads no environment.
USE_FUSED_RESIDUAL_NORM = True


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """RMSNorm over the last dim, computed in (at least) fp32 and cast back to x's dtype."""
    x32 = x.to(torch.promote_types(x.dtype, torch.float32))
    y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(x32.dtype)
    return y.to(x.dtype)


def residual_rms_norm(x: Tensor, f: Tensor, alpha: float, weight: Tensor | None, eps: float) -> Tensor:
    """Post-LN residual step y = RMSNorm(alpha * x + f): the fused Triton kernel on CUDA."""
    if USE_FUSED_RESIDUAL_NORM and x.is_cuda:
        from hrm_deeploop.models.kernels.residual_norm import residual_rms_norm as fused

        return fused(x, f, alpha, weight, eps)
    s = f + x if alpha == 1.0 else alpha * x + f
    return rms_norm(s, weight, eps)


class RMSNorm(nn.Module):
    """RMSNorm with an optional learnable gain (HRM's is weightless, eps 1e-5)."""

    def __init__(self, dim: int, eps: float = 1e-5, weight: bool = False):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if weight else None

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


Sublayer = Callable[[Tensor], Tensor]


class Transition(nn.Module):
    """x -> the stream after sublayer `f` (with its RMSNorm `norm`) has updated it."""

    final_norm = False  # the stream leaving the stack is unnormalised: LoopedCore adds an RMSNorm

    def forward(self, x: Tensor, f: Sublayer, norm: RMSNorm) -> Tensor:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must define forward")

    def reset_parameters(self) -> None:
        """Initialise the transition's own parameters (none for most)."""


class PostNorm(Transition):
    """The DeepNorm family: x <- RMSNorm(alpha * x + f(x)); alpha = 1 is HRM's / GPT-2-style Post-LN.

    x_first: a transposed stream (TRM's token mixing) is summed as x + f, so the sum keeps x's memory
    layout and the norm reduces in the reference's order (bit-identical); never the fused kernel."""

    def __init__(self, alpha: float, x_first: bool = False):
        super().__init__()
        self.alpha, self.x_first = alpha, x_first

    def forward(self, x: Tensor, f: Sublayer, norm: RMSNorm) -> Tensor:
        if self.x_first:
            fx = f(x)
            return rms_norm(x + fx if self.alpha == 1.0 else self.alpha * x + fx, norm.weight, norm.eps)
        return residual_rms_norm(x, f(x), self.alpha, norm.weight, norm.eps)


class PreNorm(Transition):
    """Pre-LN with a branch scale: x <- x + eps * f(RMSNorm(x)) (looped_eps: eps = lambda / (R sqrt(K)))."""

    final_norm = True

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: Tensor, f: Sublayer, norm: RMSNorm) -> Tensor:
        return x + self.eps * f(norm(x))


class OperLoop(Transition):
    """EXPERIMENTAL. OperLoop, designed from its abstract alone (docs/transitions.md states every
    interpretation): the stream is a fast weight, and each sublayer updates it by one projected
    gradient step of a local objective.

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

    def forward(self, x: Tensor, f: Sublayer, norm: RMSNorm) -> Tensor:
        x32 = x.float()
        r = _rms(x32, norm.eps)  # (..., 1)
        z = norm(x)
        t = rms_norm(f(z).float(), None, norm.eps)  # the target, projected like the state
        e = z.float() - t  # gradient of the delta objective
        eta = torch.sigmoid(self.step_logit.float()) / (1 + _rms(e, 0.0))
        u = z.float() - eta * e
        return ((1 - eta * self.decay) * r * u / _rms(u, norm.eps)).to(x.dtype)


def _rms(x: Tensor, eps: float) -> Tensor:
    return x.square().mean(-1, keepdim=True).add(eps).sqrt()


TRANSITIONS: dict[str, Callable[[Residual], Transition]] = {
    "post": lambda r: PostNorm(r.alpha),
    "pre": lambda r: PreNorm(r.eps),
    "operloop": lambda r: OperLoop(r.step, r.decay),
}


def make_transition(residual: Residual, transposed: bool = False) -> Transition:
    """The transition `residual.norm` names; `transposed` marks a sublayer that runs on (B, D, T)."""
    if residual.norm not in TRANSITIONS:
        raise ValueError(f"unknown transition {residual.norm!r}; known: {sorted(TRANSITIONS)}")
    if transposed and residual.norm == "post":
        return PostNorm(residual.alpha, x_first=True)
    return TRANSITIONS[residual.norm](residual)
