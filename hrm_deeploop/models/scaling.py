"""Depth accounting and residual-scaling schemes (DeepLoop paper sections 2-4).

One module, used by every model. Each model's config declares its own depth accounting
(`<Model>Config.depth`, models/model_config.py) on the helpers here (`two_module_depth`,
`one_network_depth`, `loop_depth`); `model_depth` asks it. A scheme turns an unrolled depth N into
a `Residual` policy for the blocks of one module:

| scheme       | norm | alpha           | beta             |
|--------------|------|-----------------|------------------|
| baseline     | post | 1               | 1                |
| deepnorm     | post | (2N)^(1/4)      | (8N)^(-1/4)      |
| deeploop     | post | (2N)^(1/2)      | (8N)^(-1/2)      |
| power        | post | (2N)^p          | (8N)^(-p)        |
| looped_eps   | pre  | h <- h + eps*f(RMSNorm(h)), eps = lambda / (R * sqrt(K)) |
| operloop     | operloop | experimental: a local gradient step of the stream (models/transitions.py) |

Per-module exponents (HRM, paper eq. 18): `scaling.p_h` / `scaling.p_l` replace the scheme's
exponent for the H / L module (the Post-LN family only): section 4.3 derives p >= 1/4 for H and
p >= 1/2 for L, e.g. `scaling=power scaling.p=0.5 scaling.p_h=0.25`.

Depth: a single loop of K blocks for R rounds has N = K*R, M = 2N sublayer visits. The
hierarchical H/L reasoner (C outer cycles, C_L inner L iterations, K_H and K_L blocks) has
forward M = 2*C*(K_H + C_L*K_L) and gradient-visible M_g = 2*(K_H + C_L*K_L), N_g = M_g/2
(paper eq. 15-16). HRM scales every block from N_g (12 at defaults).

Conventions for HRM's N (config `scaling.hrm_depth`):
- `paper` (default): N_g = K_H + C_L*K_L, the whole last H-cycle counted as gradient visible.
- `autograd`: the visits the one-step gradient really back-propagates through: one L call and one
  H call, N = K_H + K_L (8 blocks = 16 sublayers at defaults; reference spec section 8).
Per-module assignment (`scaling.per_module=true`, paper eq. 18): H uses N_H = K_H (it is
gradient-visited once), L uses N_L = C_L*K_L (`paper`) or K_L (`autograd`), each with the
scheme's exponent. Default: one shared N_g for both modules, as in the paper's experiments.

TRM (one network of K blocks; T deep-recursion steps of n latent updates and one answer update,
only the last step on the tape): forward N = T*(n+1)*K. Conventions (`scaling.trm_depth`, derived
in docs/trm.md):
- `gradient` (default): the last recursion, every block revisited n+1 times inside the gradient
  window (the aligned regime of paper section 3.4): N_g = (n+1)*K, R = n+1 (10 blocks on ARC, 14 on
  Sudoku).
- `forward`: every recursion of a segment, as if nothing were truncated: N = T*(n+1)*K, R = T*(n+1).
- `physical`: the untied count of one pass, N = K, R = 1 (plain DeepNorm depth of the network).

URM (one stack of K blocks; H outer passes of C_L rounds z <- blocks(z + x), the first H-1 passes
without grad): forward N = H*C_L*K. Conventions (`scaling.urm_depth`, the same three names,
derived in docs/urm.md): `gradient` (default) N_g = C_L*K, R = C_L (24 at the published setups);
`forward` N = H*C_L*K; `physical` N = K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.typed_config import at_least, check, one_of, positive

SCHEMES = ("baseline", "deepnorm", "deeploop", "power", "looped_eps", "operloop")
POST_LN = ("baseline", "deepnorm", "deeploop", "power")
EXPONENTS = {"baseline": 0.0, "deepnorm": 0.25, "deeploop": 0.5}  # and `power`: scaling.p
# Residual-branch matrices that receive the beta init gain. "gate" (SwiGLU gate) is excluded by
# default: with both the up and the down projections scaled, each branch carries beta^2, the same
# for attention (v, o) and MLP (up, down). Add "gate" to scale all three MLP matrices.
DEFAULT_BETA_TARGETS = ("v", "o", "up", "down")
BETA_TARGET_CHOICES = ("v", "o", "up", "down", "gate")
TRM_DEPTHS = ("gradient", "forward", "physical")


@dataclass
class ScalingConfig:
    scheme: str = "baseline"
    p: float | None = None  # exponent for `power`
    eps_lambda: float = 1.0  # lambda for `looped_eps`
    hrm_depth: str = "paper"  # paper | autograd
    trm_depth: str = "gradient"  # gradient | forward | physical
    urm_depth: str = "gradient"  # gradient | forward | physical
    per_module: bool = False
    p_h: float | None = None  # HRM: the H module's exponent instead of the scheme's (Post-LN schemes)
    p_l: float | None = None  # HRM: the L module's exponent instead of the scheme's
    beta_targets: list[str] = field(default_factory=lambda: list(DEFAULT_BETA_TARGETS))
    operloop_step: float = 0.5  # operloop: initial largest step size eta_max, in (0, 1)
    operloop_decay: float = 0.05  # operloop: weight decay lambda on the stream

    def __post_init__(self) -> None:
        one_of("scaling.scheme", self.scheme, SCHEMES)
        check(self.scheme != "power" or self.p is not None, "scaling.p", self.p, "set for scheme=power")
        for key in ("p", "p_h", "p_l"):
            if getattr(self, key) is not None:
                at_least(f"scaling.{key}", getattr(self, key), 0.0)
                check(key == "p" or self.scheme in POST_LN, f"scaling.{key}", getattr(self, key),
                      f"used with a Post-LN scheme ({', '.join(POST_LN)}), not {self.scheme}")
        positive("scaling.eps_lambda", self.eps_lambda)
        check(0 < self.operloop_step < 1, "scaling.operloop_step", self.operloop_step, "in (0, 1)")
        at_least("scaling.operloop_decay", self.operloop_decay, 0.0)
        one_of("scaling.hrm_depth", self.hrm_depth, ("paper", "autograd"))
        one_of("scaling.trm_depth", self.trm_depth, TRM_DEPTHS)
        one_of("scaling.urm_depth", self.urm_depth, TRM_DEPTHS)
        for t in self.beta_targets:
            one_of("scaling.beta_targets", t, BETA_TARGET_CHOICES)

    @property
    def exponent(self) -> float | None:
        return exponent(self.scheme, self.p)


@dataclass(frozen=True)
class Residual:
    """How one block combines its residual stream x with a sublayer output f(x)."""

    norm: str = "post"  # the transition (models/transitions.py): post | pre | operloop
    alpha: float = 1.0
    beta: float = 1.0  # init gain on the residual-branch matrices (applied once, at init)
    eps: float = 1.0  # pre-LN branch scale
    beta_targets: tuple[str, ...] = DEFAULT_BETA_TARGETS
    step: float = 0.5  # operloop: initial eta_max
    decay: float = 0.0  # operloop: weight decay on the stream


@dataclass(frozen=True)
class Depth:
    """Depth figures for one model; None where not applicable."""

    N: int
    M: int
    N_g: int | None
    M_g: int | None
    modules: dict[str, dict[str, int]]  # per module: the loop geometry (K, R) and the N used for scaling


def model_depth(model_cfg: Any, scaling: ScalingConfig | None = None) -> Depth:
    """The one depth function: N, M, N_g, M_g and each module's (K, R, N used for scaling) of a model
    config under `scaling`'s conventions. Each model's config declares its own accounting next to
    its dataclass (`<Model>Config.depth`, models/model_config.py, on the helpers below) and refuses the
    options it has no use for (per-module settings on one-network models)."""
    return model_cfg.depth(scaling or ScalingConfig())


def tape_layers(model_cfg: Any, tape_rounds: int | None = None) -> int:
    """Block applications one backward keeps activations for (the memory estimate's depth): HRM's
    one-step gradient K_H + K_L (the last H and L updates; N_g under `hrm_depth=autograd`), TRM's
    last recursion (n+1)K, URM's last pass C_L K (their N_g), the looped GPT's K x (rounds on the
    tape; `tape_rounds`, default R). Declared by each model config (`tape_layers`)."""
    return model_cfg.tape_layers(tape_rounds)


def refuse_module_exponents(name: str, scaling: ScalingConfig) -> None:
    """p_h / p_l are the per-module exponents of a two-module model (HRM): refused for one network."""
    if scaling.p_h is not None or scaling.p_l is not None:
        raise ConfigError(f"scaling.p_h / scaling.p_l are HRM's per-module exponents; model={name} "
                          "has one looped network (TRM's two roles share its blocks, so one beta per matrix)")


def two_module_depth(k_h: int, k_l: int, c: int, c_l: int, convention: str, per_module: bool) -> Depth:
    """HRM's two-module loop (paper eq. 15-16): K_H, K_L blocks, C cycles of C_L L calls and one H call."""
    _positive(num_h_layers=k_h, num_l_layers=k_l, num_h_cycles=c, num_l_cycles=c_l)
    m = 2 * c * (k_h + c_l * k_l)
    if convention == "paper":
        m_g = 2 * (k_h + c_l * k_l)
        n_h, n_l = k_h, c_l * k_l
    elif convention == "autograd":
        m_g = 2 * (k_h + k_l)
        n_h, n_l = k_h, k_l
    else:
        raise ConfigError(f"scaling.hrm_depth='{convention}' must be 'paper' or 'autograd'")
    n_g = m_g // 2
    if not per_module:
        n_h = n_l = n_g
    return Depth(
        N=m // 2, M=m, N_g=n_g, M_g=m_g,
        modules={"H": {"K": k_h, "R": 1, "N": n_h}, "L": {"K": k_l, "R": c_l, "N": n_l}},
    )


def one_network_depth(name: str, scaling: ScalingConfig, k: int, passes: int, visits: int, key: str,
                      **sizes: int) -> Depth:
    """One network of K blocks (TRM, URM): `visits` calls of each block per pass, `passes` passes per
    segment, the last on the tape; `key` names the ScalingConfig field of its convention, `sizes`
    the config fields checked >= 1. R counted: gradient = visits, forward = passes x visits, physical 1."""
    refuse_module_exponents(name, scaling)
    if scaling.per_module:
        raise ConfigError(f"scaling.per_module=true applies to HRM's two modules; {name.upper()} has one network")
    _positive(**sizes)
    convention = getattr(scaling, key)
    rounds = {"gradient": visits, "forward": passes * visits, "physical": 1}
    if convention not in rounds:
        raise ConfigError(f"scaling.{key}='{convention}' must be one of {', '.join(TRM_DEPTHS)}")
    r = rounds[convention]
    return Depth(N=passes * visits * k, M=2 * passes * visits * k, N_g=visits * k, M_g=2 * visits * k,
                 modules={"net": {"K": k, "R": r, "N": k * r}})


def loop_depth(name: str, scaling: ScalingConfig, k: int, r: int, **sizes: int) -> Depth:
    """One loop of K blocks for R rounds (the looped GPT): N = K*R, every round on the tape."""
    refuse_module_exponents(name, scaling)
    _positive(**sizes)
    return Depth(N=k * r, M=2 * k * r, N_g=None, M_g=None, modules={"core": {"K": k, "R": r, "N": k * r}})


def exponent(scheme: str, p: float | None = None) -> float | None:
    """The Post-LN schemes' exponent: alpha = (2N)^p, beta = (8N)^-p (None: not a Post-LN scheme, or
    `power` without p)."""
    return p if scheme == "power" else EXPONENTS.get(scheme)


def alpha_beta(scheme: str, n: float, p: float | None = None) -> tuple[float, float]:
    """(alpha, beta) of a Post-LN scheme for unrolled depth n."""
    e = exponent(scheme, p)
    if e is None:
        raise ConfigError(f"no (alpha, beta) for scheme '{scheme}'" + (" without p" if scheme == "power" else ""))
    if e == 0.0:
        return 1.0, 1.0
    return (2 * n) ** e, (8 * n) ** (-e)


def residual_for(cfg: ScalingConfig, n: int, num_blocks: int, num_rounds: int,
                 exponent: float | None = None) -> Residual:
    """The residual policy for one module with depth n (K blocks, R rounds); `exponent` replaces
    the scheme's p (per-module exponents)."""
    targets = tuple(cfg.beta_targets)
    if cfg.scheme == "looped_eps":
        return Residual(norm="pre", eps=cfg.eps_lambda / (num_rounds * math.sqrt(num_blocks)), beta_targets=targets)
    if cfg.scheme == "operloop":
        return Residual(norm="operloop", step=cfg.operloop_step, decay=cfg.operloop_decay, beta_targets=targets)
    if exponent is not None:
        alpha, beta = alpha_beta("power", n, exponent)
    else:
        alpha, beta = alpha_beta(cfg.scheme, n, cfg.p)
    return Residual(norm="post", alpha=alpha, beta=beta, beta_targets=targets)


def module_exponents(cfg: ScalingConfig) -> dict[str, float | None]:
    """Per-module exponent overrides: HRM's H and L (p_h, p_l); None: the scheme's."""
    return {"H": cfg.p_h, "L": cfg.p_l}


def module_residuals(cfg: ScalingConfig, depth: Depth) -> dict[str, Residual]:
    over = module_exponents(cfg)
    return {name: residual_for(cfg, m["N"], m["K"], m["R"], over.get(name)) for name, m in depth.modules.items()}


def _positive(**values: int) -> None:
    for k, v in values.items():
        if int(v) < 1:
            raise ConfigError(f"model.{k} must be >= 1, got {v}")
