"""`hrm-deeploop scales`: depth accounting (N, M, N_g, M_g) and alpha/beta per module for a model
config and a scaling scheme, as a table or JSON (docs/core.md).

An entry point beside `cli` (which registers it by name): the figures come from `models.scaling`
(`model_depth`, `module_residuals`), the same functions the models build their blocks from. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hrm_deeploop.models.model_config import MODEL_CONFIGS, model_config
from hrm_deeploop.models.scaling import ScalingConfig, model_depth, module_exponents, module_residuals
from hrm_deeploop.typed_config import one_of, typed

# the report's depth-convention keys, one per model that has one (`<Model>Config.depth_option`)
DEPTH_OPTIONS = tuple(c.depth_option for c in MODEL_CONFIGS.values() if getattr(c, "depth_option", None))


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
        **{key: getattr(scaling, key) if key == getattr(model_cfg, "depth_option", None) else None for key in DEPTH_OPTIONS},
        "N": depth.N, "M": depth.M, "N_g": depth.N_g, "M_g": depth.M_g,
        "modules": modules,
    }


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
    """`hrm-deeploop scales`: depth accounting and alpha/beta per module for a model and scheme.
    Defaults as `train`'s (model=hrm, scaling=baseline), so the same overrides print what `train`
    builds; `scaling=deeploop` shows DeepLoop's alpha and beta."""

    model: Any = None
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    format: str = "table"  # table | json

    def __post_init__(self) -> None:
        self.model = model_config(self.model)
        if not isinstance(self.scaling, ScalingConfig):
            self.scaling = typed(self.scaling, ScalingConfig, "scaling.")
        one_of("format", self.format, ("table", "json"))


def run(cfg: ScalesConfig) -> int:
    report = describe(cfg.model, cfg.scaling)
    print(json.dumps(report, indent=2) if cfg.format == "json" else format_table(report))
    return 0
