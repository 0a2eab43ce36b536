"""What the CLI skips to start and end quickly (issue 46: `build-arc` against HRM's builder).

- `plain_config`: a subcommand whose YAML sets nothing (only `defaults: [_schema_<config>, _self_]`),
  called with overrides of the plainest form (`num_aug=200`, `output_dir=/data/x`, `sources=[a,b]`,
  `ks=[1,2]`, `generated.examples=8`), gets its dataclass built directly from them, without importing Hydra and
  OmegaConf or composing (0.2-0.3 s of a 1.5 s `build-arc`). Anything else (a quoted or escaped
  value, an interpolation, a value Hydra would read as a number, bool or null where a string is
  expected, an unknown or deprecated key, `+`/`~`, a group choice) returns None, and Hydra composes
  as before, so it alone decides every config error and every non-trivial value
  (tests/test_cli_fast.py checks both paths give the same config, or the same error line).
- `selects_groups`: Hydra's group schemas (the model configs: 20-40 ms to import and convert) are
  registered only for a subcommand whose YAML picks a config group (`- model: hrm` in its
  defaults list); only then can a group's file, and so its schema, be composed.
- `exit_now`: a subcommand marked `exit_fast` in `cli.COMMANDS` ends its process without the
  interpreter's teardown (freeing every object of Hydra, numba and the data: 0.2-0.3 s of a 2 s
  `build-arc`) once it has returned, when `cli.main` is the process's entry (argv None: the
  console script, `python -m hrm_deeploop.cli`), never in-process. Its outputs are then closed,
  fsynced and published and its threads joined; atexit handlers still run and stdio is flushed.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import os
import re
import sys
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# A string Hydra reads as itself: only these characters (no quote, escape, `$`, `~`, space, comma,
# bracket, `=`), and never one token that Hydra types (an int, float, bool, null, inf or nan).
_PLAIN = re.compile(r"[A-Za-z0-9_./:+@-]+")
_NUMBERISH = re.compile(r"[+-]?[0-9_.]*(?:[eE][+-]?[0-9_]*)?")
_TYPED_WORDS = {"true", "false", "null", "inf", "+inf", "-inf", "nan", "+nan", "-nan"}
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")  # fits int64 (check_int64 has nothing to refuse)
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")


def _plain_str(text: str) -> str | None:
    if not _PLAIN.fullmatch(text) or _NUMBERISH.fullmatch(text) or text.lower() in _TYPED_WORDS:
        return None
    return text


def _value(kind: Any, text: str) -> tuple[bool, Any]:
    """(True, the value Hydra + OmegaConf give `text` for a field of type `kind`), or (False, None)
    where it is not of the plain form this path takes."""
    if kind is bool:
        return (True, text == "true") if text in ("true", "false") else (False, None)
    if kind is int:
        return (True, int(text)) if _INT.fullmatch(text) else (False, None)
    if kind is float:
        return (True, float(text)) if _FLOAT.fullmatch(text) else (False, None)
    if kind in (str, str | None):
        s = _plain_str(text)
        return (s is not None, s)
    if kind == list[str] and text.startswith("[") and text.endswith("]"):
        items = [_plain_str(t) for t in text[1:-1].split(",")] if text != "[]" else []
        return (None not in items, items)
    if kind == list[int] and text.startswith("[") and text.endswith("]"):  # vote's ks=[1,2]
        texts = text[1:-1].split(",") if text != "[]" else []
        return (True, [int(t) for t in texts]) if all(_INT.fullmatch(t) for t in texts) else (False, None)
    return False, None


def _hints(cls: type) -> dict[str, Any] | None:
    """The dataclass's field types, or None where an annotation cannot be evaluated here."""
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):
        return None


def _kept(kind: Any, default: Any) -> bool:
    """Whether OmegaConf keeps `default` of a field of type `kind` as it is (so the dataclass's own
    default is what Hydra would give): a bool, int, float, str (or None where allowed) of exactly that
    type, a list of str, or a nested config whose fields are all kept; never Hydra's `???` (missing)."""
    if dataclasses.is_dataclass(kind):
        hints = _hints(kind)
        return hints is not None and type(default) is kind and all(
            f.init and _kept(hints[f.name], getattr(default, f.name)) for f in dataclasses.fields(kind))
    if kind == str | None and default is None:
        return True
    if kind == list[str]:
        return type(default) is list and all(type(v) is str and v != "???" for v in default)
    if kind == list[int]:
        return type(default) is list and all(type(v) is int for v in default)
    base = str if kind == str | None else kind
    return base in (bool, int, float, str) and type(default) is base and default != "???"


def _build(cls: type, base: Any, values: dict[str, str]) -> tuple[bool, Any]:
    """(True, a `cls` holding `values` (dotted keys under it -> their text) over the defaults: the
    class's own, or those of `base`, the default instance of a nested config), or (False, None)."""
    hints = _hints(cls)
    if hints is None:
        return False, None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    nested: dict[str, dict[str, str]] = {}
    kwargs: dict[str, Any] = {}
    for key, text in values.items():
        head, dot, rest = key.partition(".")
        if head not in fields:
            return False, None
        if dot:
            nested.setdefault(head, {})[rest] = text
            continue
        ok, kwargs[head] = _value(hints[head], text)
        if not ok:
            return False, None
    for name, f in fields.items():
        if name in kwargs:
            continue
        if base is not None:
            default = getattr(base, name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            return False, None
        if not f.init or not _kept(hints[name], default):
            return False, None
        if name in nested:  # built first, as OmegaConf.to_object builds nested configs first
            if not dataclasses.is_dataclass(hints[name]):
                return False, None
            ok, kwargs[name] = _build(hints[name], default, nested[name])
            if not ok:
                return False, None
    try:
        return True, (cls(**kwargs) if base is None else dataclasses.replace(base, **kwargs))
    except TypeError:  # OmegaConf words this one itself ("Could not create instance of ..."): Hydra's path
        return False, None


def plain_config(cmd: Any, config_dir: Path, overrides: list[str], deprecated: dict[str, str]) -> Any:
    """The config of subcommand `cmd` (a `cli.Command`: its schema dataclass and YAML name), built
    without Hydra where Hydra would give exactly this; None where Hydra must compose it (see the
    module's docstring). `deprecated`: its old key spellings, left to Hydra's path (which says so)."""
    config_file = config_dir / f"{cmd.config}.yaml"
    try:
        lines = [ln for ln in config_file.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError:
        return None
    if lines != ["defaults:", f"  - _schema_{config_file.stem}", "  - _self_"]:
        return None
    values: dict[str, str] = {}
    for o in overrides:
        key, eq, text = o.partition("=")
        if not eq or not _KEY.fullmatch(key) or key in deprecated or key.split(".")[0] == "hydra":
            return None
        values.pop(key, None)
        values[key] = text  # the last of a key's overrides wins, as in Hydra
    module, _, attr = cmd.schema.partition(":")
    ok, cfg = _build(getattr(importlib.import_module(module), attr), None, values)
    return cfg if ok else None


@contextmanager
def quick_start(ends_process: bool) -> Iterator[None]:
    """For a command that ends its process itself (`exit_now`): its config is built (its modules
    imported: numba's 100,000 objects for build-arc) with the cyclic garbage collector off, and what
    exists then is frozen (`gc.freeze`) before the collector goes back on: the ~100 collections
    that would walk those long-lived objects again and again (0.04 s of CPU) find nothing to free.
    Objects made later are collected as usual. A no-op in-process (`cli.main([...])`)."""
    if not ends_process:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def selects_groups(config_file: Path) -> bool:
    """Whether a subcommand's YAML picks a config group (a `group: choice` entry in its defaults)."""
    import yaml  # lazy: only when a subcommand's YAML must be read (the fast path loads 2 modules)

    data = yaml.safe_load(config_file.read_text()) or {}
    return any(isinstance(entry, dict) for entry in data.get("defaults") or [])


def exit_now(code: int) -> typing.NoReturn:
    """End the process as `sys.exit(code)` would, less the interpreter's teardown of its objects:
    atexit handlers run, stdout and stderr are flushed, then `os._exit`."""
    import atexit  # lazy: the fast path imports nothing it may not use

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what sys.exit would have met too
            pass
    os._exit(code)
