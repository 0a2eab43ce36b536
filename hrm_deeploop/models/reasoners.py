"""The recurrent reasoners by `model.name`: one explicit registry for the trainer and the evaluator.

| name | config (models.config) | model                           |
|------|------------------------|---------------------------------|
| hrm  | HRMConfig              | hrm_deeploop.models.hrm.HRM     |
| trm  | TRMConfig              | hrm_deeploop.models.trm.TRM     |
| urm  | URMConfig              | hrm_deeploop.models.urm.URM     |

All are `act.ACTReasoner`s: the same carry, ACT step, `predict` and outputs, so one trainer
(`training.reasoner`) and one evaluator (`eval.evaluate`) serve them all.
"""

from __future__ import annotations

import torch

from hrm_deeploop.models.act import ACTReasoner
from hrm_deeploop.models.core import FUSED
from hrm_deeploop.models.hrm import HRM
from hrm_deeploop.models.model_config import ReasonerConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.models.trm import TRM
from hrm_deeploop.models.urm import URM

REASONERS: dict[str, type[ACTReasoner]] = {"hrm": HRM, "trm": TRM, "urm": URM}


def build_reasoner(cfg: ReasonerConfig, scaling: ScalingConfig | None = None,
                   dtype: torch.dtype = torch.float32, fused: bool = FUSED) -> ACTReasoner:
    """The model `cfg.name` names, initialised (call under torch.manual_seed for a fixed init);
    `fused`: the fused residual-norm kernel on CUDA (the trainers pass `runtime.Env.fused_kernel`)."""
    return REASONERS[cfg.name](cfg, scaling, dtype, fused)
