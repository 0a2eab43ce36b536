"""The ACT reasoners' entries: HRM, TRM and URM (`models/hrm.py`, `trm.py`, `urm.py` on the shared
core; configs in `models/model_config.py`). One reader serves the three: ours (`train`'s
`<run>/checkpoints/step_N.pt`, a run folder, an export; with a TRM weight average unless
`ema=false`) and the official release layouts, `<dir>/step_N` with `all_config.yaml` beside it:
HRM's (sapientinc/HRM-checkpoint-*) and TRM's (arcprize/trm_arc_prize_verification, whose weights
are already TRM's average). URM has no official checkpoint reader. Torch is imported when a
checkpoint is read, not when this module is.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.families.spec import Family, LoadedModel, LoadOptions
from hrm_deeploop.models.model_config import MODEL_CONFIGS
from hrm_deeploop.models.scaling import ScalingConfig

# the official release's reader of each reasoner that has one: (arch fields, key map) from hrm_deeploop.official
OFFICIAL_READERS = {
    "hrm": ("official_model_fields", lambda o, c: o.official_key_map(c.num_h_layers, c.num_l_layers, c.pos_encodings,
                                                                      c.puzzle_dim > 0)),
    "trm": ("official_trm_model_fields", lambda o, c: o.official_trm_key_map(c.num_layers, c.pos_encodings,
                                                                             c.puzzle_dim > 0, c.mixer)),
}


def _official_name(path: Path, state: dict) -> str | None:
    from hrm_deeploop import official  # lazy: omegaconf and torch only to read a checkpoint

    if not official.is_official(state):
        return None
    return official.official_kind(official.read_official_arch(path), str(path))


def _config(schema: type, values: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(schema)} - {"name"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{where}: unknown model config key(s) {unknown}")
    return schema(**values)


def load(path: Path, state: dict, opts: LoadOptions) -> LoadedModel:
    """A reasoner checkpoint (ours or an official one) built and loaded, in eval mode. A model this
    machine cannot hold (with `opts.batch` rows per forward, if given) is refused in one line before
    it is built (runtime.estimate_memory)."""
    import torch  # lazy: --help and the per-task plan read the registry without torch

    from hrm_deeploop import checkpoint as ckpt  # lazy: torch
    from hrm_deeploop import official, runtime  # lazy: torch
    from hrm_deeploop.families.weights import with_average  # lazy: torch
    from hrm_deeploop.models.reasoners import build_reasoner  # lazy: torch

    which = (state.get("exported") or {}).get("weights") or "raw"  # an exported folder says what it holds
    kind_name = _official_name(path, state)
    if kind_name is not None:
        arch = official.read_official_arch(path)
        reader, key_map = OFFICIAL_READERS[kind_name]
        values = getattr(official, reader)(arch, state, str(path))
        values.setdefault("seq_len", opts.seq_len or 900)
        cfg = _config(SCHEMAS[kind_name], values, str(path))
        weights = official.official_state_dict(state, key_map(official, cfg), str(path))
        scaling, kind, which = ScalingConfig(), "official", "official"
        step = int(path.name.split("_")[-1]) if path.name.startswith("step_") and path.name.split("_")[-1].isdigit() \
            else None
    else:
        conf = state.get("config") or {}
        values = dict(conf.get("model") or {})
        name = values.pop("name", "hrm")
        if name not in SCHEMAS:
            raise UserError(f"{path}: model '{name}' is not a reasoner ({', '.join(SCHEMAS)})")
        cfg = _config(SCHEMAS[name], values, str(path))
        scaling = ScalingConfig(**(conf.get("scaling") or {}))
        weights, kind, step = ckpt.strip_prefixes(state["model"]), "hrm-deeploop", int(state["step"])
        if opts.ema and state.get("ema") is not None:
            weights, which = with_average(weights, state["ema"]["shadow"], str(path)), "ema"
    device = torch.device(opts.device)
    run_dtype = runtime.compute_dtype(cfg.forward_dtype, device) if opts.dtype == "auto" else runtime.DTYPES.get(opts.dtype)
    if run_dtype is None:
        raise ConfigError(f"dtype='{opts.dtype}' must be auto or one of {sorted(runtime.DTYPES)}")
    batch = opts.batch
    est = runtime.estimate_memory(lambda c: build_reasoner(c, scaling, run_dtype), cfg, copies=1, batch=batch,
                                  layers=1, dtype=run_dtype)  # the weights alone without `batch` (init_from, export)
    per_forward = f"; at {batch} rows x {cfg.seq_len + cfg.puzzle_len:,} tokens per forward" if batch else ""
    runtime.check_memory(f"checkpoint '{path}' holds model={cfg.name} hidden_size={cfg.hidden_size} "
                         f"({est.parameters:,} parameters){per_forward}", est, device,
                         fix=("lower global_batch_size, or " if batch else "") + "load it on a machine with more memory")
    model = build_reasoner(cfg, scaling, run_dtype, runtime.env().fused_kernel)
    ckpt.load_weights(model, weights, str(path))
    model.to(device).eval()
    ours = kind == "hrm-deeploop"
    return LoadedModel(model=model, config=cfg, kind=kind, step=step, path=path, weights=which, scaling=scaling,
                       puzzle_names=state.get("puzzle_names") if ours else None,
                       run_config=state.get("config") if ours else None)


def describe(model: dict, params: int | None) -> str:
    return f"A {model['name'].upper()} reasoner (width {model.get('hidden_size')}, up to {model.get('halt_max_steps')} " \
           "ACT segments)"


SCHEMAS: dict[str, type] = {n: MODEL_CONFIGS[n] for n in ("hrm", "trm", "urm")}  # the configs' one owner
SOURCES = {"hrm": "sapientinc/HRM-checkpoint-* (`step_N` + all_config.yaml)",
           "trm": "arcprize/trm_arc_prize_verification (`step_N` + all_config.yaml)"}


def _entry(name: str, title: str) -> Family:
    reads_official = name in OFFICIAL_READERS
    return Family(
        name=name, title=title, config=SCHEMAS[name], trainer="train", evaluator="evaluate", predictor="sequence",
        commands=("train", "evaluate", "export", "ttt", "vote"), load=load, metadata="dataset", describe=describe,
        official=(lambda path, state: _official_name(path, state) == name) if reads_official else None,
        official_source=SOURCES.get(name, ""), adapts=True, halts=True, lanes="hrm_deeploop.pertask.reasoner_copies:ReasonerCopies",
        carried=(), figures=(), tiny=(f"experiment={name}_tiny_cpu",))


FAMILIES = (_entry("hrm", "HRM"), _entry("trm", "TRM"), _entry("urm", "URM"))
