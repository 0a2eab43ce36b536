"""`SUB --help`'s settings: every key as composed, each with its one-line description and choices.

The description is the field's own comment in its config dataclass (`lr: float = 1e-4  # ...`),
or the comment block just above the field; a subclass that only changes a default inherits its
parent's comment. The choices are read from the `one_of(...)` / `device_name(...)` checks of the
dataclass's `__post_init__`, the very checks that refuse anything else, so they cannot drift. Both
are read from the source (the `ast` of the class), torch-free, so `--help` stays fast.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
# Fields that mean the same in every command, described here where a dataclass does not say more.
CONVENTIONAL = {
    "output_dir": "the folder this command writes",
    "overwrite": "replace an existing output folder that this command wrote earlier",
    "progress": "progress bars on the console",
    "seed": "the random seed",
    "data_dir": "a built dataset (train/ and test/ inside)",
}
COMMENT_COLUMN = 34  # descriptions start here (or two spaces after a longer `key: value`)


@functools.cache
def _class_notes(cls: type) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(field -> description, field -> choices) declared in `cls` itself (not its bases)."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}, {}
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source).body[0]
    text = source.splitlines()
    docs: dict[str, str] = {}
    choices: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = text[node.end_lineno - 1]
            comment = _trailing_comment(line)
            if comment is None:  # the comment block right above the field
                above, i = [], node.lineno - 2
                while i >= 0 and text[i].strip().startswith("#"):
                    above.insert(0, text[i].strip().lstrip("#").strip())
                    i -= 1
                comment = _first_clause(" ".join(above)) or None
            if comment:
                docs[node.target.id] = comment
        elif isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
            module = sys.modules.get(cls.__module__)
            for call in ast.walk(node):
                name = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
                if name not in ("one_of", "device_name") or len(call.args) < 2:
                    continue
                target = call.args[1]
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    continue
                if name == "device_name":
                    choices[target.attr] = DEVICE_CHOICES
                elif len(call.args) >= 3:
                    try:  # our own module's constant or literal (e.g. LOGGERS, ("none", *EXIT_CRITERIA))
                        value = eval(compile(ast.Expression(call.args[2]), "<choices>", "eval"),  # noqa: S307
                                     dict(vars(module)) if module else {})
                        choices[target.attr] = tuple(str(v) for v in value)
                    except Exception:  # noqa: BLE001 - a computed set of choices: shown without them
                        pass
    return docs, choices


def _first_clause(text: str) -> str:
    """A comment block's first clause (up to its first colon, semicolon or full stop)."""
    for i, ch in enumerate(text):
        if ch in ".:;" and (i + 1 == len(text) or text[i + 1] == " ") and i > 10:
            return text[:i]
    return text


def _trailing_comment(line: str) -> str | None:
    """The `# ...` at the end of a source line, outside any string."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[i + 1:].strip() or None
    return None


def notes(cls: type) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Descriptions and choices of every field of the dataclass `cls`, its bases' included (the
    nearest class that says something about a field wins)."""
    docs: dict[str, str] = {}
    choices: dict[str, tuple[str, ...]] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        d, c = _class_notes(klass)
        docs.update(d)
        choices.update(c)
    return docs, choices


def describe(field: str, docs: dict[str, str], choices: dict[str, tuple[str, ...]]) -> str:
    """The one line shown after a key: its description, and its choices unless the description
    already names every one of them."""
    doc = docs.get(field) or CONVENTIONAL.get(field, "")
    options = choices.get(field)
    if options and not all(o in doc for o in options):
        doc = (doc + "; " if doc else "") + "one of: " + ", ".join(options)
    return doc


def _value(v: Any) -> str:
    if isinstance(v, str) and v == "???":
        return v
    text = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def settings(cfg: Any) -> str:
    """The composed config (a DictConfig) as YAML, each key with its description as a comment."""
    lines: list[str] = []

    def walk(node: Any, indent: str) -> None:
        schema = OmegaConf.get_type(node)
        docs, choices = notes(schema) if dataclasses.is_dataclass(schema) else ({}, {})
        for key in node:
            child = node._get_node(key)
            if OmegaConf.is_dict(child) and child._is_none() is False and dataclasses.is_dataclass(
                    OmegaConf.get_type(child)):
                doc = describe(str(key), docs, choices) or _section_doc(OmegaConf.get_type(child))
                lines.append(_line(f"{indent}{key}:", doc))
                walk(child, indent + "  ")
                continue
            raw = OmegaConf.to_container(node, resolve=False, throw_on_missing=False)[key] \
                if not OmegaConf.is_missing(node, key) else "???"
            lines.append(_line(f"{indent}{key}: {_value(raw)}", describe(str(key), docs, choices)))

    walk(cfg, "")
    return "\n".join(lines)


def _section_doc(cls: type) -> str:
    """A section's description: the first sentence of the docstring its dataclass (or the nearest
    base) writes (not the signature `dataclass` puts there when none is written)."""
    for klass in [k for k in cls.__mro__ if dataclasses.is_dataclass(k)]:
        doc = klass.__dict__.get("__doc__")
        if doc and not doc.startswith(f"{klass.__name__}("):
            text = " ".join(doc.split())
            return text.split(". ")[0].rstrip(".")
    return ""


def _line(head: str, doc: str) -> str:
    if not doc:
        return head
    return f"{head.ljust(COMMENT_COLUMN)}  # {doc}" if len(head) < COMMENT_COLUMN else f"{head}  # {doc}"


# ---- config groups: what `SUB --help` lists of configs/<group>/*.yaml ------------------------------


def group_choices(root: Path, group: str) -> list[str]:
    """The names a config group offers: configs/<group>/*.yaml, without the `_schema` entries."""
    return sorted(p.stem for p in (root / group).glob("*.yaml") if not p.stem.startswith("_"))


def read_group_file(root: Path, group: str, choice: str) -> tuple[str | None, set[str]]:
    """A `model=` / `experiment=` file read without composing it: the model it selects (a model
    file's `name:`, an experiment's `override /model: X`, followed through the experiments it
    extends; None where it keeps the command's) and the dotted keys it sets."""
    import yaml  # lazy: bare `--help` skips it

    data = yaml.safe_load((root / group / f"{choice}.yaml").read_text()) or {}
    if group == "model":
        return str(data.get("name", "")), set()
    model, keys = None, set()
    for entry in data.pop("defaults", None) or []:
        if isinstance(entry, str):  # another experiment this one extends
            parent_model, parent_keys = read_group_file(root, group, entry)
            model, keys = parent_model or model, keys | parent_keys
        elif isinstance(entry, dict) and "override /model" in entry:
            model = read_group_file(root, "model", entry["override /model"])[0]

    def walk(node: Any, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                keys.add(f"{prefix}{k}")

    walk(data, "")
    return model, keys


_ABSENT = object()
_GROUP_ORDER = ("model", "scaling", "experiment", "preset")


def describe_groups(root: Path, cfg: Any, picked: dict[str, str | None], models: tuple[type, ...] | None = None
                    ) -> list[str]:
    """`SUB --help`'s config-group lines: every choice on disk, the one in use starred; models
    grouped by the model they are (hrm, trm, urm, gpt), experiments likewise, listing only those
    whose keys all exist in this command's config (train's paper setups, not train-gpt's); with
    `models` (the schema's MODELS), only the models of those configs (train offers no GPT)."""
    import textwrap  # lazy: bare `--help` skips it

    from omegaconf import OmegaConf  # lazy: keeps omegaconf off bare `--help`

    from hrm_deeploop.models.model_config import MODEL_CONFIGS  # lazy: omegaconf; bare `--help` skips it

    def fits(keys: set[str]) -> bool:
        return all(k.startswith("model.") or OmegaConf.select(cfg, k, default=_ABSENT) is not _ABSENT for k in keys)

    lines = []
    order = sorted(picked, key=lambda g: (_GROUP_ORDER.index(g) if g in _GROUP_ORDER else len(_GROUP_ORDER), g))
    for group in order:
        current, names = picked[group], group_choices(root, group)
        if group in ("model", "experiment"):
            default_model = OmegaConf.select(cfg, "model.name") if group == "experiment" else None
            in_use = OmegaConf.select(cfg, "model.name")  # its family first: what this command trains
            families = [f for f in MODEL_CONFIGS if models is None or MODEL_CONFIGS[f] in models]
            by: dict[str, list[str]] = {fam: [] for fam in sorted(families, key=lambda f: f != in_use)}
            for n in names:
                model, keys = read_group_file(root, group, n)
                family = model or default_model or "other"
                if (group == "model" or n == current or fits(keys)) and (family in by or family == "other"):
                    by.setdefault(family, []).append(n)
            parts = [f"{fam}: " + ", ".join(n + "*" * (n == current) for n in ns) for fam, ns in by.items() if ns]
        else:
            parts = [", ".join(n + "*" * (n == current) for n in names)]
        if current is None:
            parts.insert(0, "none*")
        lines += textwrap.wrap("; ".join(parts), width=100, initial_indent=f"  {group + '=':<12} ",
                               subsequent_indent=" " * 15, break_on_hyphens=False)
    return lines
