"""Measure the visit-alignment coefficient kappa_R of DeepLoop (paper eq. 10), per physical sublayer.

The paper bounds the first-order effect of one optimiser step on a looped model by
    ||dF|| <= eta * sum_j ||sum_r U_rj|| * ||sum_r G_rj||,
where j runs over the physical residual sublayers (attention, MLP of each block), r over the R visits
of sublayer j inside the gradient window, G_rj is the update visit (r, j) would get if it had its own
(untied) parameters, and U_rj is the linearised map from a parameter change at that visit to the
output. kappa_R = max_j ||sum_r U_rj|| ||sum_r G_rj|| / (R C_U C_G (beta/alpha)^2) is O(1) when visits
decorrelate and R when they align. The paper never measures it; this module does, with these
first-order estimators:

- Per-visit objects come from untied copies. While `untied_visits` is active, every call of a block
  uses fresh leaf copies of its parameters, so one backward pass gives each visit's own gradient
  (their sum is the tied gradient, exactly: tested).
- G_rj = P * g_rj: the visit's loss gradient g_rj = dL/dphi_j^(r), preconditioned as the optimiser
  would (P = 1 / (sqrt(v_hat) + eps) from Adam's second-moment state; P = 1 before the first step
  or for an optimiser without one): the visit-wise *effective update* direction.
- U_rj: the Jacobian of the output F (the logits) w.r.t. phi_j^(r), probed with random directions:
  u_rj = d<v, F>/dphi_j^(r) for v ~ N(0, I)/sqrt(dim F). E ||sum_r u_rj||^2 = ||sum_r U_rj||_F^2 / dim F,
  so `probes` directions estimate Frobenius norms (the operator norm itself is out of reach).
- The bound constants are the largest per-visit norms actually seen: C_U beta/alpha := max_r ||U_rj||,
  C_G beta/alpha := max_r ||G_rj||, so
      kappa_j = ||sum_r u_rj|| * ||sum_r G_rj|| / (R * max_r ||u_rj|| * max_r ||G_rj||)  in [0, R]
  (triangle inequality); identical visits give exactly R, orthogonal visits of equal size give 1.
  With R = 1, kappa_j = 1 by definition.
- The simpler alignment: `cos_j`, the mean cosine between the raw per-visit gradients g_rj, g_tj
  over visit pairs r < t (1 for aligned visits, about 0 for decorrelated ones; undefined at R = 1).

Norms are over all of a sublayer's parameters together (attention: the fused QKV and output
projections, and the attention norm's gain if learned; MLP: gate/up and down, and its norm's gain).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class SublayerAlignment:
    name: str  # e.g. "core.layers.0.attn"
    visits: int  # R: calls of the block inside the gradient window
    kappa: float
    cos: float | None  # mean pairwise cosine of the per-visit loss gradients; None at R = 1


def sublayer_of(param_name: str) -> str:
    """The residual sublayer a block parameter belongs to ('attn' or 'mlp')."""
    head = param_name.split(".", 1)[0]
    return "attn" if head in ("self_attn", "attn_norm") else "mlp"


@contextlib.contextmanager
def untied_visits(blocks: dict[str, nn.Module]) -> Iterator[dict[str, list[dict[str, Tensor]]]]:
    """While active, each call of each named block runs on fresh leaf copies of its parameters.

    Yields `visits`: block name -> one {parameter name: leaf copy} per call, in call order. The
    shared parameters are untouched; gradients land on the copies (`.grad` after backward).
    """
    visits: dict[str, list[dict[str, Tensor]]] = {name: [] for name in blocks}
    originals: dict[str, Callable] = {}

    def patched(name: str, block: nn.Module, forward: Callable) -> Callable:
        def call(*args, **kwargs):
            if not torch.is_grad_enabled():  # calls outside the gradient window are not visits
                return forward(*args, **kwargs)
            owners = [(mod, pname) for mod in block.modules() for pname in list(mod._parameters)
                      if mod._parameters[pname] is not None]
            saved = [mod._parameters[pname] for mod, pname in owners]
            copies = {}
            for (mod, pname), p in zip(owners, saved):
                leaf = p.detach().clone().requires_grad_(True)
                mod._parameters[pname] = leaf  # the stateless swap functional_call does
                copies[_qualified(block, mod, pname)] = leaf
            try:
                return forward(*args, **kwargs)
            finally:
                for (mod, pname), p in zip(owners, saved):
                    mod._parameters[pname] = p
                visits[name].append(copies)
        return call

    try:
        for name, block in blocks.items():
            originals[name] = block.forward
            block.forward = patched(name, block, block.forward)
        yield visits
    finally:
        for name, block in blocks.items():
            if name in originals:
                block.forward = originals[name]


def _qualified(root: nn.Module, mod: nn.Module, pname: str) -> str:
    for prefix, m in root.named_modules():
        if m is mod:
            return f"{prefix}.{pname}" if prefix else pname
    raise AssertionError("module not under its block")


def kappa(u: list[Tensor], g: list[Tensor]) -> float:
    """||sum u|| ||sum g|| / (R max||u|| max||g||) over R visits (flattened vectors), in [0, R]."""
    R = len(u)
    assert R == len(g) and R > 0, "one u and one g per visit"
    max_u = max(float(x.norm()) for x in u)
    max_g = max(float(x.norm()) for x in g)
    if max_u == 0.0 or max_g == 0.0:
        return 0.0
    return float(torch.stack(u).sum(0).norm()) * float(torch.stack(g).sum(0).norm()) / (R * max_u * max_g)


def mean_pairwise_cos(g: list[Tensor]) -> float | None:
    """Mean cosine between distinct visits' vectors; None with fewer than two visits."""
    if len(g) < 2:
        return None
    G = torch.stack([x / x.norm().clamp_min(1e-30) for x in g])  # (R, P)
    c = G @ G.T
    R = len(g)
    return float((c.sum() - c.diagonal().sum()) / (R * (R - 1)))


def adam_preconditioner(optimizer: torch.optim.Optimizer | None) -> Callable[[nn.Parameter], Tensor | float]:
    """p -> 1 / (sqrt(v_hat) + eps) from an Adam-family optimiser's second moments (1 without state)."""
    def precond(p: nn.Parameter) -> Tensor | float:
        if optimizer is None:
            return 1.0
        state = optimizer.state.get(p, {})
        v = state.get("exp_avg_sq")
        if v is None:
            return 1.0
        group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
        beta2 = group["betas"][1]
        step = float(state.get("step", 1))
        eps = group.get("eps", 1e-8)
        return 1.0 / ((v / (1 - beta2 ** max(step, 1.0))).sqrt() + eps)
    return precond


def measure(blocks: dict[str, nn.Module], forward: Callable[[], tuple[Tensor, Tensor]],
            precond: Callable[[nn.Parameter], Tensor | float] | None = None, probes: int = 2,
            generator: torch.Generator | None = None) -> list[SublayerAlignment]:
    """kappa and cos for every sublayer of `blocks` from one diagnostic pass.

    `forward()` runs the model's gradient window once and returns (loss, output); it must call each
    block once per visit with autograd on. Parameters are not changed and no `.grad` is left behind.
    """
    with untied_visits(blocks) as visits:
        loss, output = forward()
    leaves = [t for calls in visits.values() for copies in calls for t in copies.values()]
    if not leaves:
        raise ValueError("the diagnostic forward called none of the blocks")
    g_all = torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True)
    u_all = []
    out = output.detach()
    for k in range(probes):
        v = torch.randn(out.shape, generator=generator, device=out.device if generator is None else "cpu")
        v = (v / math.sqrt(v.numel())).to(output.device, output.dtype)
        u_all.append(torch.autograd.grad((output * v).sum(), leaves, retain_graph=k < probes - 1, allow_unused=True))
    index = {id(t): i for i, t in enumerate(leaves)}
    results = []
    for name, calls in visits.items():
        if not calls:
            continue
        shared = dict(blocks[name].named_parameters())
        for sub in ("attn", "mlp"):
            pnames = [p for p in calls[0] if sublayer_of(p) == sub]
            if not pnames:
                continue

            def vec(grads, copies, scale=None, pnames=pnames, shared=shared):
                """One visit's gradient over the sublayer's parameters, flattened (fp64)."""
                parts = []
                for p in pnames:
                    x = grads[index[id(copies[p])]]
                    x = torch.zeros_like(copies[p]) if x is None else x
                    parts.append((x if scale is None else x * scale(shared[p])).reshape(-1).double())
                return torch.cat(parts)

            g = [vec(g_all, c) for c in calls]
            G = [vec(g_all, c, precond) for c in calls] if precond is not None else g
            u = [torch.stack([vec(u_k, c) for c in calls]) for u_k in u_all]  # per probe: (R, P)
            # Frobenius estimates summed over probes: ||sum_r U_r|| and max_r ||U_r||
            sum_u = math.sqrt(sum(float(x.sum(0).square().sum()) for x in u))
            max_u = math.sqrt(max(float(sum(x[r].square().sum() for x in u)) for r in range(len(calls))))
            max_G = max(float(x.norm()) for x in G)
            R = len(calls)
            k_val = 0.0 if max_u == 0 or max_G == 0 else sum_u * float(torch.stack(G).sum(0).norm()) / (R * max_u * max_G)
            results.append(SublayerAlignment(f"{name}.{sub}", R, k_val, mean_pairwise_cos(g)))
    return results


def summarize(results: list[SublayerAlignment], prefix: str = "kappa") -> dict[str, float]:
    """Flat metrics: per sublayer kappa and cos, their max / mean, and per module (the first part
    of a block name: H, L, net, core) the max, for the metrics log and wandb."""
    out: dict[str, float] = {}
    modules: dict[str, list[float]] = {}
    for r in results:
        modules.setdefault(r.name.split(".", 1)[0], []).append(r.kappa)
    if len(modules) > 1:
        for m, ks in modules.items():
            out[f"{prefix}/{m}/max"] = max(ks)
    for r in results:
        out[f"{prefix}/{r.name}"] = r.kappa
        if r.cos is not None:
            out[f"{prefix}_cos/{r.name}"] = r.cos
    if results:
        out[f"{prefix}/max"] = max(r.kappa for r in results)
        out[f"{prefix}/mean"] = sum(r.kappa for r in results) / len(results)
        cos = [r.cos for r in results if r.cos is not None]
        if cos:
            out[f"{prefix}_cos/mean"] = sum(cos) / len(cos)
        out[f"{prefix}/visits"] = float(max(r.visits for r in results))
    return out
