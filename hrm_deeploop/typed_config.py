"""Typed configs: Hydra composes YAML + overrides, the CLI converts once to dataclasses.

Library code never sees a DictConfig. Each subcommand's dataclass is the single source of its
defaults (YAML files hold only what differs) and validates its own values in `__post_init__`
with the helpers below, so a nonsensical value is a one-line `ConfigError` naming the key before
anything is read or written. Unknown keys raise naming the key (HRM's pydantic setup silently
drops misspelled keys).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hrm_deeploop.errors import ConfigError

T = TypeVar("T")


def typed(cfg: DictConfig | dict | None, schema: type[T], where: str = "") -> T:
    """Validate `cfg` against the dataclass `schema` and return an instance of it.

    Unknown keys, wrong types and missing required values raise ConfigError naming the key path
    (prefixed by `where`, e.g. "model."); range checks in the schema's `__post_init__` raise it too.
    """
    if cfg is None:
        cfg = {}
    if isinstance(cfg, schema):
        return cfg
    if dataclasses.is_dataclass(cfg):
        cfg = to_dict(cfg)
    try:
        base = OmegaConf.structured(schema)
        merged = OmegaConf.merge(base, cfg)
        check_int64(OmegaConf.to_container(merged), where)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        cause = e.__cause__ if isinstance(e.__cause__, ConfigError) else None
        if cause is not None:  # a __post_init__ check, raised while OmegaConf built the object
            raise ConfigError(_prefixed(str(cause), where)) from None
        key = getattr(e, "full_key", None) or ""
        msg = str(e).splitlines()[0]
        raise ConfigError(f"config key '{where}{key}': {msg}") from None
    except ConfigError as e:
        raise ConfigError(_prefixed(str(e), where)) from None


def _prefixed(msg: str, where: str) -> str:
    return msg if not where or msg.startswith(where) else f"{where}{msg}"


def to_dict(obj: Any) -> Any:
    """Dataclass (possibly nested) -> plain dict, for logging and checkpoints."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


# ---- range checks, one place per field (called from each schema's __post_init__) ---------------

INT64_MAX = 2**63 - 1


def check_int64(node: Any, where: str = "") -> None:
    """Every integer of a composed config (nested dicts and lists) fits a signed 64-bit integer,
    the widest numpy and torch take: one rule for every int field of every subcommand (a seed of
    10**30 or train.max_steps=10**30 is a one-line error, not an overflow deep inside numpy)."""
    if isinstance(node, dict):
        for k, v in node.items():
            check_int64(v, f"{where}{k}.")
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            check_int64(v, f"{where[:-1]}[{i}].")
    elif isinstance(node, int) and not isinstance(node, bool) and not -INT64_MAX - 1 <= node <= INT64_MAX:
        shown = node if node.bit_length() <= 100 else f"<an integer of {node.bit_length()} bits>"
        raise ConfigError(f"{where[:-1]}={shown}: must fit a signed 64-bit integer (|value| < 2**63)")

def check(ok: bool, key: str, value: Any, rule: str) -> None:
    """Raise ConfigError "key=value: must be rule" unless ok."""
    if not ok:
        raise ConfigError(f"{key}={value!r}: must be {rule}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def positive(key: str, v: Any) -> None:
    check(_number(v) and v > 0, key, v, "> 0")


def at_least(key: str, v: Any, lo: float) -> None:
    check(_number(v) and v >= lo, key, v, f">= {lo}")


def optional_at_least(key: str, v: Any, lo: float) -> None:
    if v is not None:
        at_least(key, v, lo)


def in_range(key: str, v: Any, lo: float, hi: float) -> None:
    check(_number(v) and lo <= v <= hi, key, v, f"in [{lo}, {hi}]")


def one_of(key: str, v: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    check(v in choices, key, v, "one of " + ", ".join(map(str, choices)))


def device_name(key: str, v: Any) -> None:
    """A `device=` value: auto, cpu, cuda or cuda:N (checked without touching the hardware)."""
    ok = isinstance(v, str) and (v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()))
    check(ok, key, v, "auto, cpu, cuda or cuda:N")
