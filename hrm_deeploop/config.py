"""Typed configs: Hydra composes YAML + overrides, we convert once to dataclasses at the entry point.

Library code never sees a DictConfig. Unknown keys raise a ConfigError that names the key
(HRM's pydantic setup silently drops misspelled keys).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hrm_deeploop.errors import ConfigError

T = TypeVar("T")


def typed(cfg: DictConfig | dict | None, schema: type[T], where: str = "") -> T:
    """Validate `cfg` against the dataclass `schema` and return an instance of it.

    Unknown keys, wrong types and missing required values raise ConfigError naming the key path
    (prefixed by `where`, e.g. "model.").
    """
    if cfg is None:
        cfg = {}
    try:
        base = OmegaConf.structured(schema)
        merged = OmegaConf.merge(base, cfg)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or ""
        msg = str(e).splitlines()[0]
        raise ConfigError(f"config key '{where}{key}': {msg}") from None


def to_dict(obj: Any) -> Any:
    """Dataclass (possibly nested) -> plain dict, for logging and checkpoints."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def section(cfg: DictConfig, key: str) -> DictConfig:
    """cfg[key] with a clear error when the section is missing."""
    if key not in cfg:
        raise ConfigError(f"config section '{key}' is missing")
    return cfg[key]
