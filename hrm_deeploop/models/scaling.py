"""Depth accounting and residual-scaling schemes (DeepLoop paper sections 2-4).

One module, used by every model. A scheme turns an unrolled depth N into a `Residual` policy
for the blocks of one module:

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

import json
import math
from dataclasses import dataclass, field
from typing import Any

from hrm_deeploop.config import at_least, check, one_of, positive
from hrm_deeploop.errors import ConfigError

SCHEMES = ("baseline", "deepnorm", "deeploop", "power", "looped_eps", "operloop")
POST_LN = ("baseline", "deepnorm", "deeploop", "power")
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
        return {"baseline": 0.0, "deepnorm": 0.25, "deeploop": 0.5, "power": self.p}.get(self.scheme)


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


def loop_depth(num_blocks: int, num_rounds: int) -> Depth:
    """Single looped core: K blocks applied for R rounds."""
    _positive(num_blocks=num_blocks, num_rounds=num_rounds)
    n = num_blocks * num_rounds
    return Depth(N=n, M=2 * n, N_g=None, M_g=None, modules={"core": {"K": num_blocks, "R": num_rounds, "N": n}})


def hrm_depth(num_h_layers: int, num_l_layers: int, num_h_cycles: int, num_l_cycles: int,
              convention: str = "paper", per_module: bool = False) -> Depth:
    """HRM's two-module loop (paper eq. 15-16), with the chosen gradient-visible convention."""
    _positive(num_h_layers=num_h_layers, num_l_layers=num_l_layers,
              num_h_cycles=num_h_cycles, num_l_cycles=num_l_cycles)
    k_h, k_l, c, c_l = num_h_layers, num_l_layers, num_h_cycles, num_l_cycles
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


def trm_depth(num_layers: int, num_h_cycles: int, num_l_cycles: int, convention: str = "gradient") -> Depth:
    """TRM's one network of K blocks: per deep-recursion step n+1 calls of the network (n latent
    updates, one answer update), T steps per segment, the last one on the tape (docs/trm.md)."""
    _positive(num_layers=num_layers, num_h_cycles=num_h_cycles, num_l_cycles=num_l_cycles)
    k, t, n = num_layers, num_h_cycles, num_l_cycles
    visits = {"gradient": n + 1, "forward": t * (n + 1), "physical": 1}  # R: visits of each block counted
    if convention not in visits:
        raise ConfigError(f"scaling.trm_depth='{convention}' must be one of {', '.join(TRM_DEPTHS)}")
    n_fwd, n_g = t * (n + 1) * k, (n + 1) * k
    r = visits[convention]
    return Depth(N=n_fwd, M=2 * n_fwd, N_g=n_g, M_g=2 * n_g, modules={"net": {"K": k, "R": r, "N": k * r}})


def urm_depth(num_layers: int, num_h_cycles: int, num_l_cycles: int, convention: str = "gradient") -> Depth:
    """URM's one stack of K blocks: C_L rounds per pass, H passes per ACT step, the last pass on
    the tape (truncated back-propagation; docs/urm.md)."""
    _positive(num_layers=num_layers, num_h_cycles=num_h_cycles, num_l_cycles=num_l_cycles)
    k, h, c = num_layers, num_h_cycles, num_l_cycles
    visits = {"gradient": c, "forward": h * c, "physical": 1}  # R: visits of each block counted
    if convention not in visits:
        raise ConfigError(f"scaling.urm_depth='{convention}' must be one of {', '.join(TRM_DEPTHS)}")
    r = visits[convention]
    return Depth(N=h * c * k, M=2 * h * c * k, N_g=c * k, M_g=2 * c * k, modules={"net": {"K": k, "R": r, "N": k * r}})


def alpha_beta(scheme: str, n: int, p: float | None = None) -> tuple[float, float]:
    """(alpha, beta) of a Post-LN scheme for unrolled depth n."""
    exponent = {"baseline": 0.0, "deepnorm": 0.25, "deeploop": 0.5, "power": p}.get(scheme)
    if exponent is None:
        raise ConfigError(f"no (alpha, beta) for scheme '{scheme}'" + (" without p" if scheme == "power" else ""))
    if exponent == 0.0:
        return 1.0, 1.0
    return (2 * n) ** exponent, (8 * n) ** (-exponent)


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


# ---- `hrm-deeploop scales` -------------------------------------------------------------------

def describe(model_cfg: Any, scaling: ScalingConfig) -> dict:
    """JSON-able report: N, M, N_g, M_g and {alpha, beta} (or eps) per module."""
    depth = model_depth(model_cfg, scaling)
    res = module_residuals(scaling, depth)
    modules = {}
    for name, r in res.items():
        entry: dict[str, Any] = dict(depth.modules[name])
        entry.update(alpha=r.alpha, beta=r.beta, norm=r.norm,
                     p=module_exponents(scaling).get(name) if module_exponents(scaling).get(name) is not None
                     else scaling.exponent)
        if r.norm == "pre":
            entry["eps"] = r.eps
        modules[name] = entry
    return {
        "model": model_cfg.name,
        "scheme": scaling.scheme,
        "exponent": scaling.exponent,
        "hrm_depth": scaling.hrm_depth if model_cfg.name == "hrm" else None,
        "trm_depth": scaling.trm_depth if model_cfg.name == "trm" else None,
        "urm_depth": scaling.urm_depth if model_cfg.name == "urm" else None,
        "N": depth.N, "M": depth.M, "N_g": depth.N_g, "M_g": depth.M_g,
        "modules": modules,
    }


def model_depth(model_cfg: Any, scaling: ScalingConfig) -> Depth:
    if model_cfg.name == "hrm":
        return hrm_depth(model_cfg.num_h_layers, model_cfg.num_l_layers, model_cfg.num_h_cycles,
                         model_cfg.num_l_cycles, scaling.hrm_depth, scaling.per_module)
    if model_cfg.name != "hrm" and (scaling.p_h is not None or scaling.p_l is not None):
        raise ConfigError(f"scaling.p_h / scaling.p_l are HRM's per-module exponents; model={model_cfg.name} "
                          "has one looped network (TRM's two roles share its blocks, so one beta per matrix)")
    if model_cfg.name in ("trm", "urm") and scaling.per_module:
        raise ConfigError(f"scaling.per_module=true applies to HRM's two modules; {model_cfg.name.upper()} has one "
                          "network")
    if model_cfg.name == "trm":
        return trm_depth(model_cfg.num_layers, model_cfg.num_h_cycles, model_cfg.num_l_cycles, scaling.trm_depth)
    if model_cfg.name == "urm":
        return urm_depth(model_cfg.num_layers, model_cfg.num_h_cycles, model_cfg.num_l_cycles, scaling.urm_depth)
    if model_cfg.name == "gpt":
        return loop_depth(model_cfg.num_blocks, model_cfg.num_rounds)
    raise ConfigError(f"model.name='{model_cfg.name}' is not 'hrm', 'trm', 'urm' or 'gpt'")


def tape_layers(model_cfg: Any, tape_rounds: int | None = None) -> int:
    """Block applications one backward keeps activations for (the memory estimate's depth): HRM's
    one-step gradient K_H + K_L (the last H and L updates), TRM's last recursion (n+1)K, URM's
    last pass C_L K, the looped GPT's K x (rounds on the tape; `tape_rounds`, default R)."""
    name = model_cfg.name
    if name == "hrm":
        return hrm_depth(model_cfg.num_h_layers, model_cfg.num_l_layers, model_cfg.num_h_cycles,
                         model_cfg.num_l_cycles, "autograd").N_g
    if name == "trm":
        return trm_depth(model_cfg.num_layers, model_cfg.num_h_cycles, model_cfg.num_l_cycles).N_g
    if name == "urm":
        return urm_depth(model_cfg.num_layers, model_cfg.num_h_cycles, model_cfg.num_l_cycles).N_g
    if name == "gpt":
        return model_cfg.num_blocks * (tape_rounds or model_cfg.num_rounds)
    raise ConfigError(f"model.name='{name}' is not 'hrm', 'trm', 'urm' or 'gpt'")


def format_table(report: dict) -> str:
    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:.6f}" if isinstance(v, float) else str(v)

    head = [f"model={report['model']}  scheme={report['scheme']}"
            + (f"  p={report['exponent']}" if report["exponent"] is not None else "")
            + (f"  hrm_depth={report['hrm_depth']}" if report["hrm_depth"] else "")
            + (f"  trm_depth={report['trm_depth']}" if report.get("trm_depth") else "")
            + (f"  urm_depth={report['urm_depth']}" if report.get("urm_depth") else "")]
    head.append("  ".join(f"{k}={fmt(report[k])}" for k in ("N", "M", "N_g", "M_g")))
    cols = ["module", "K", "R", "N used", "norm", "p", "alpha", "beta", "eps"]
    rows = [[name, m["K"], m["R"], m["N"], m["norm"], m.get("p"), m["alpha"], m["beta"], m.get("eps")]
            for name, m in report["modules"].items()]
    cells = [cols] + [[fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(head + [""] + lines)


@dataclass
class ScalesConfig:
    """`hrm-deeploop scales`: depth accounting and alpha/beta per module for a model and scheme."""

    model: Any = None
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    format: str = "table"  # table | json

    def __post_init__(self) -> None:
        from hrm_deeploop.config import typed
        from hrm_deeploop.models.config import model_config

        self.model = model_config(self.model)
        if not isinstance(self.scaling, ScalingConfig):
            self.scaling = typed(self.scaling, ScalingConfig, "scaling.")
        one_of("format", self.format, ("table", "json"))


def run(cfg: ScalesConfig) -> int:
    report = describe(cfg.model, cfg.scaling)
    print(json.dumps(report, indent=2) if cfg.format == "json" else format_table(report))
    return 0
