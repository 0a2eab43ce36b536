"""One `load_model` for every checkpoint the evaluators (`eval/`), export and init_from read: ours (HRM, TRM,
URM, the looped GPT; `<run>/checkpoints/step_N.pt`, or a run folder for its latest checkpoint; a
TRM run trained with `train.ema=true` loads its weight average unless `ema=false`) or an official
one in its release layout, `<dir>/step_N` with `all_config.yaml` beside it: HRM's
(sapientinc/HRM-checkpoint-*) or TRM's (the ARC Prize verification release
arcprize/trm_arc_prize_verification, `arc_v1_public/step_518071`, whose weights are already TRM's
average). `table_rows` maps a dataset's puzzle ids to the rows of a checkpoint that names them.

It sits above the checkpoint formats it reads (`checkpoint.py` ours, `official.py` HRM's and TRM's,
`hub.py` an exported folder, through `checkpoint.resolve`/`load`) and the puzzle-row map
(`data/rows.py`), and below its readers: `eval/`, `training/adapt.py`, `export.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from arc_data.dataset import load_identifiers
from arc_data.errors import DatasetError
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import official, runtime
from hrm_deeploop.data.rows import row_map
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.models.act import ACTReasoner
from hrm_deeploop.models.gpt import GPT
from hrm_deeploop.models.loopvit import LoopViT, load_official
from hrm_deeploop.models.loopvit_config import LoopViTConfig, official_config
from hrm_deeploop.models.model_config import (
    MODEL_CONFIGS,
    GPTConfig,
    HRMConfig,
    ReasonerConfig,
    TRMConfig,
    URMConfig,
)
from hrm_deeploop.models.reasoners import build_reasoner
from hrm_deeploop.models.rounds import scaling_rounds_of
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.typed_config import typed


@dataclass
class LoadedModel:
    model: ACTReasoner | GPT | LoopViT  # HRM, TRM or URM, the looped GPT, or LoopViT (loopvit=True)
    config: HRMConfig | TRMConfig | URMConfig | GPTConfig | LoopViTConfig
    kind: str  # "hrm-deeploop" | "official"
    step: int | None
    path: Path
    weights: str = "raw"  # raw | ema (the weight average of our checkpoint) | official
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    puzzle_names: list[str] | None = None  # name of every puzzle-table row (adapted checkpoints: data/rows.py)
    run_config: dict | None = None  # the resolved config of the run that wrote it (ours), e.g. its data_dir


# the reasoners' config schemas, by model.name: the models' registry (models/model_config.py) less the looped GPT
REASONER_SCHEMAS: dict[str, type] = {n: c for n, c in MODEL_CONFIGS.items() if issubclass(c, ReasonerConfig)}


def load_model(path: str | Path, device: torch.device | str = "cpu", dtype: str = "auto",
               seq_len: int | None = None, ema: bool = True, batch: int = 0, num_rounds: int | None = None,
               gpt: bool | None = None, loopvit: bool = False) -> LoadedModel:
    """Build the model a checkpoint describes and load its weights, in eval mode: ours (HRM, TRM,
    URM or the looped GPT) or an official HRM or TRM one. With `ema`, a checkpoint of ours that
    holds a weight average loads the average. A model this machine cannot hold (with `batch` rows
    per forward, if given) is refused in one line before it is built (runtime.estimate_memory).
    `gpt`: True for a caller that serves only the looped GPT (eval-gpt, generate), False for one
    that serves only the reasoners; another model is refused in one line before it is built.
    `loopvit`: the caller also serves LoopViT (ours from train-vit, or an official `.pt` as its
    scripts write it, `read_loopvit`); without it such a checkpoint is refused in one line.

    An official RoPE checkpoint does not record the sequence length (HRM and TRM take it from the
    dataset): `seq_len` supplies it, default 900 (the ARC format). `num_rounds` (the looped GPT
    only) sets the R it runs by default; `dtype` is the reasoners' (the GPT loads in float32)."""
    p = ckpt.resolve(path)
    device = torch.device(device)
    state = ckpt.load(p, map_location="cpu")
    if not isinstance(state, dict):
        raise UserError(f"checkpoint '{p}' is not a state dict or a train-state file")
    name = ((state.get("config") or {}).get("model") or {}).get("name") if state.get("format") == ckpt.FORMAT else None
    if name == "loopvit" or is_official_loopvit(state):
        if not loopvit or gpt:
            raise UserError(f"checkpoint '{p}' holds LoopViT (train-vit or the official code): this command does not "
                            "serve it (evaluate, ttt and train-vit init_from= do)")
        return _load_loopvit(p, state, device, ema)
    if gpt and name != "gpt":
        raise UserError(f"checkpoint '{p}' is not a looped-GPT train-gpt checkpoint (no model.name=gpt config)")
    if name == "gpt" and gpt is not False:  # gpt=False: refused below as "not a reasoner", before it is built
        return _load_gpt(p, state, device, num_rounds, batch)
    which = (state.get("exported") or {}).get("weights") or "raw"  # an exported folder says what it holds
    if official.is_official(state):
        arch = official.read_official_arch(p)
        name = official.official_kind(arch, str(p))
        if name == "trm":
            values = official.official_trm_model_fields(arch, state, str(p))
        else:
            values = official.official_model_fields(arch, state, str(p))
        values.setdefault("seq_len", seq_len or 900)
        cfg = _model_config(name, values, str(p))
        if name == "trm":
            key_map = official.official_trm_key_map(cfg.num_layers, cfg.pos_encodings, cfg.puzzle_dim > 0, cfg.mixer)
        else:
            key_map = official.official_key_map(cfg.num_h_layers, cfg.num_l_layers, cfg.pos_encodings, cfg.puzzle_dim > 0)
        weights = official.official_state_dict(state, key_map, str(p))
        scaling, kind, which = ScalingConfig(), "official", "official"
        step = int(p.name.split("_")[-1]) if p.name.startswith("step_") and p.name.split("_")[-1].isdigit() else None
    elif state.get("format") == ckpt.FORMAT:
        conf = state.get("config") or {}
        values = dict(conf.get("model") or {})
        cfg = _model_config(values.pop("name", "hrm"), values, str(p))
        scaling = ScalingConfig(**(conf.get("scaling") or {}))
        weights, kind, step = ckpt.strip_prefixes(state["model"]), "hrm-deeploop", int(state["step"])
        if ema and state.get("ema") is not None:
            weights = _with_average(weights, state["ema"]["shadow"], str(p))
            which = "ema"
    else:
        raise UserError(f"checkpoint '{p}' is neither an hrm-deeploop train state nor an official HRM/TRM state dict")
    run_dtype = runtime.compute_dtype(cfg.forward_dtype, device) if dtype == "auto" else runtime.DTYPES.get(dtype)
    if run_dtype is None:
        raise ConfigError(f"dtype='{dtype}' must be auto or one of {sorted(runtime.DTYPES)}")
    est = runtime.estimate_memory(lambda c: build_reasoner(c, scaling, run_dtype), cfg, copies=1, batch=batch,
                            layers=1, dtype=run_dtype)  # the weights alone without `batch` (init_from, export)
    per_forward = f"; at {batch} rows x {cfg.seq_len + cfg.puzzle_len:,} tokens per forward" if batch else ""
    runtime.check_memory(f"checkpoint '{p}' holds model={cfg.name} hidden_size={cfg.hidden_size} ({est.parameters:,} "
                   f"parameters){per_forward}", est, device,
                   fix=("lower global_batch_size, or " if batch else "") + "load it on a machine with more memory")
    model = build_reasoner(cfg, scaling, run_dtype, runtime.env().fused_kernel)
    ckpt.load_weights(model, weights, str(p))
    model.to(device).eval()
    ours = kind == "hrm-deeploop"
    return LoadedModel(model=model, config=cfg, kind=kind, step=step, path=p, weights=which, scaling=scaling,
                       puzzle_names=state.get("puzzle_names") if ours else None,
                       run_config=state.get("config") if ours else None)


def is_official_loopvit(state: dict[str, Any]) -> bool:
    """An official LoopViT file: {model_state, config (its argparse values as a dict), ...}."""
    return "model_state" in state and isinstance(state.get("config"), dict)


def read_loopvit(path: str | Path, state: dict[str, Any], ema: bool = True
                 ) -> tuple[LoopViTConfig, ScalingConfig, dict[str, Any], str]:
    """(model config, scaling, weights, which) of a LoopViT checkpoint already read by the safe
    loader: an official one (the architecture from its saved arguments, the weights in the official
    key layout, `_orig_mod.` stripped; scaling baseline; which = "official") or a train-vit one (its
    model and scaling configs; its weight average with `ema` when it holds one)."""
    if is_official_loopvit(state):
        weights = {k.removeprefix("_orig_mod."): v for k, v in state["model_state"].items()}
        rows = weights.get("task_token_embed.weight")
        cfg = official_config(state["config"], num_tasks=int(rows.shape[0]) if rows is not None else 1)
        return cfg, ScalingConfig(), weights, "official"
    conf = state.get("config") if isinstance(state.get("config"), dict) else {}
    model = conf.get("model")
    if "model" not in state or not isinstance(model, dict) or model.get("name") != "loopvit":
        raise UserError(f"checkpoint '{path}' is neither an official LoopViT checkpoint nor a train-vit one")
    cfg = typed(model, LoopViTConfig, "checkpoint model.")
    scaling = typed(conf.get("scaling"), ScalingConfig, "checkpoint scaling.")
    weights, which = ckpt.strip_prefixes(state["model"]), "raw"
    if ema and state.get("ema") is not None:
        weights, which = _with_average(weights, state["ema"]["shadow"], str(path)), "ema"
    return cfg, scaling, weights, which


def check_tensors(weights: dict[str, Any], where: str) -> None:
    """`checkpoint.load_weights`'s per-tensor checks for weights in another key layout (an official
    LoopViT file); `where` names the file in the message: a value that is not a tensor, an integer tensor where a weight is, NaN or
    infinity: one line naming it."""
    for key, t in weights.items():
        if not isinstance(t, torch.Tensor):
            raise UserError(f"{where}: '{key}' is a {type(t).__name__}, not a tensor")
        if not t.dtype.is_floating_point and key.rsplit(".", 1)[-1] in ("weight", "bias"):
            raise UserError(f"{where}: tensor '{key}' holds {str(t.dtype).removeprefix('torch.')}, a "
                            "floating-point weight is expected (loading would change its values)")
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            raise UserError(f"{where}: tensor '{key}' holds {int((~torch.isfinite(t)).sum()):,} NaN or "
                            "infinite value(s)")


def _load_loopvit(path: Path, state: dict[str, Any], device: torch.device, ema: bool) -> LoadedModel:
    cfg, scaling, weights, which = read_loopvit(path, state, ema)
    model = LoopViT(cfg, scaling)
    if which == "official":
        check_tensors(weights, f"checkpoint '{path}'")
        try:
            load_official(model, weights)
        except ValueError as e:
            raise UserError(f"checkpoint '{path}': {e}") from None
    else:
        ckpt.load_weights(model, weights, str(path))
    ours = which != "official"
    return LoadedModel(model=model.to(device).eval(), config=cfg, kind="hrm-deeploop" if ours else "official",
                       step=state.get("step") if ours else None, path=path, weights=which, scaling=scaling,
                       run_config=state.get("config") if ours else None)


def _with_average(weights: dict[str, Any], shadow: dict[str, Any], where: str) -> dict[str, Any]:
    """The state dict with every trainable parameter replaced by its average (buffers kept)."""
    unknown = sorted(set(shadow) - set(weights))
    if unknown:
        raise UserError(f"checkpoint '{where}': its weight average has key(s) the model lacks: {unknown[:5]}")
    return {**weights, **shadow}


def _model_config(name: str, values: dict[str, Any], where: str) -> HRMConfig | TRMConfig | URMConfig:
    if name not in REASONER_SCHEMAS:
        raise UserError(f"{where}: model '{name}' is not a reasoner ({', '.join(REASONER_SCHEMAS)})")
    schema = REASONER_SCHEMAS[name]
    known = {f.name for f in fields(schema)} - {"name"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{where}: unknown model config key(s) {unknown}")
    return schema(**values)


def _load_gpt(path: Path, state: dict[str, Any], device: torch.device, num_rounds: int | None,
              batch: int) -> LoadedModel:
    """The looped GPT of a train-gpt checkpoint. `num_rounds` sets the R the model runs by default
    (parameters do not depend on R); alpha and beta stay those it was trained with (N from the
    trained R, or `depth.scaling_n`'s). `batch`: rows of seq_len tokens per forward."""
    config = state.get("config") or {}
    model_cfg = typed(config["model"], GPTConfig, "model.")
    scaling = typed(config.get("scaling"), ScalingConfig, "scaling.")
    # the R of its alpha/beta, as the run resolved it; re-derived from the saved schedule only for
    # checkpoints written before train-gpt stored it
    scaling_rounds = state.get("scaling_rounds")
    if scaling_rounds is None:
        scaling_rounds = scaling_rounds_of(config, model_cfg.num_rounds)
    if num_rounds is not None:
        model_cfg.num_rounds = num_rounds
    est = runtime.estimate_memory(lambda c: GPT(c, scaling, scaling_rounds=scaling_rounds), model_cfg, copies=1,
                                batch=batch, layers=1, dtype=torch.float32, head_values=model_cfg.vocab_size)
    per_forward = f"; at {batch} x {model_cfg.seq_len} tokens per forward" if batch else ""
    runtime.check_memory(f"checkpoint '{path}' holds a looped GPT of hidden_size={model_cfg.hidden_size} "
                       f"({est.parameters:,} parameters){per_forward}", est, device,
                       fix=("lower batch_size, or " if batch else "") + "load it on a machine with more memory")
    model = GPT(model_cfg, scaling, scaling_rounds=scaling_rounds, fused=runtime.env().fused_kernel)
    ckpt.load_weights(model, ckpt.strip_prefixes(state["model"]), str(path))
    return LoadedModel(model=model.to(device).eval(), config=model_cfg, kind="hrm-deeploop", step=state.get("step"),
                       path=path, scaling=scaling, run_config=config)


def table_rows(loaded: LoadedModel, data_dir: str) -> torch.Tensor | None:
    """Dataset id -> puzzle-table row for a checkpoint that names its rows (None: ids are rows)."""
    if loaded.puzzle_names is None:
        return None
    try:
        names = load_identifiers(data_dir)
    except DatasetError as e:
        raise UserError(f"checkpoint '{loaded.path}' names its puzzle rows, and {e}") from None
    return row_map(loaded.puzzle_names, names, f"checkpoint '{loaded.path}' on '{data_dir}'")
