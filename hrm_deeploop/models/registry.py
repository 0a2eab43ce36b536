"""The explicit model registry: config name -> (config dataclass, model class)."""

from __future__ import annotations

from typing import Any

from hrm_deeploop.config import typed
from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.gpt import GPTConfig
from hrm_deeploop.models.hrm import HRMConfig

MODEL_CONFIGS: dict[str, type] = {"hrm": HRMConfig, "gpt": GPTConfig}


def model_config(cfg: Any) -> HRMConfig | GPTConfig:
    """Typed model config from the `model` section; `model.name` selects the schema."""
    if cfg is None:
        raise ConfigError("config section 'model' is missing (choose model=hrm or model=gpt)")
    name = cfg.get("name")
    if name not in MODEL_CONFIGS:
        raise ConfigError(f"model.name='{name}' is not one of {sorted(MODEL_CONFIGS)}")
    return typed(cfg, MODEL_CONFIGS[name], "model.")
