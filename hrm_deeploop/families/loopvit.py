"""LoopViT's entry (`models/loopvit.py`, `models/loopvit_config.py`; trained by `train-vit`,
docs/loopvit.md): its checkpoints, ours (`train-vit` runs, exports) and the official ones (a `.pt`
of `WenjieShu/LoopViT`'s scripts: `{model_state, config}`), read by the one safe loader; predicted
by `evaluate` through canvas views (`eval.arc.canvas_views`). What a checkpoint needs to run beyond
its weights is its canvas (`canvas.*`: the evaluation scale a 16 x 16 model was trained with), so
`init_from` and `ttt` carry that section from its run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hrm_deeploop.errors import UserError
from hrm_deeploop.families.spec import Family, GridRoom, LoadedModel, LoadOptions
from hrm_deeploop.models.loopvit_config import LoopViTConfig, official_config
from hrm_deeploop.models.model_config import MODEL_CONFIGS
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.typed_config import typed

NAME = "loopvit"  # model.name in its configs and checkpoints


def is_official(state: dict[str, Any]) -> bool:
    """An official LoopViT file: {model_state, config (its argparse values as a dict), ...}."""
    return "model_state" in state and isinstance(state.get("config"), dict)


def read(path: str | Path, state: dict[str, Any], ema: bool = True) -> tuple[LoopViTConfig, Any, dict[str, Any], str]:
    """(model config, scaling, weights, which) of a LoopViT checkpoint already read by the safe
    loader: an official one (the architecture from its saved arguments, the weights in the official
    key layout, `_orig_mod.` stripped; scaling baseline; which = "official") or a train-vit one (its
    model and scaling configs; its weight average with `ema` when it holds one)."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch
    from hrm_deeploop.families.weights import with_average  # lazy: torch

    if is_official(state):
        weights = {k.removeprefix("_orig_mod."): v for k, v in state["model_state"].items()}
        rows = weights.get("task_token_embed.weight")
        cfg = official_config(state["config"], num_tasks=int(rows.shape[0]) if rows is not None else 1)
        return cfg, ScalingConfig(), weights, "official"
    conf = state.get("config") if isinstance(state.get("config"), dict) else {}
    model = conf.get("model")
    if "model" not in state or not isinstance(model, dict) or model.get("name") != NAME:
        raise UserError(f"checkpoint '{path}' is neither an official LoopViT checkpoint nor a train-vit one")
    cfg = typed(model, LoopViTConfig, "checkpoint model.")
    scaling = typed(conf.get("scaling"), ScalingConfig, "checkpoint scaling.")
    weights, which = ckpt.strip_prefixes(state["model"]), (state.get("exported") or {}).get("weights") or "raw"
    if ema and state.get("ema") is not None:
        weights, which = with_average(weights, state["ema"]["shadow"], str(path)), "ema"
    return cfg, scaling, weights, which


def load(path: Path, state: dict, opts: LoadOptions) -> LoadedModel:
    import torch  # lazy: --help and the per-task plan read the registry without torch

    from hrm_deeploop import checkpoint as ckpt  # lazy: torch
    from hrm_deeploop.families.weights import check_tensors  # lazy: torch
    from hrm_deeploop.models.loopvit import LoopViT, load_official  # lazy: torch

    cfg, scaling, weights, which = read(path, state, opts.ema)
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
    return LoadedModel(model=model.to(torch.device(opts.device)).eval(), config=cfg,
                       kind="hrm-deeploop" if ours else "official", step=state.get("step") if ours else None,
                       path=path, weights=which, scaling=scaling, run_config=state.get("config") if ours else None)


def grid_room(path: Path, state: dict, trainer: Any, views: str) -> GridRoom:
    """The sides a checkpoint's canvas holds (`data.canvas.draw_view`: S - 2 on an S x S canvas, a
    border row and column kept for the output's edge). views=official draws every pair at a random
    scale from 1 up; views=build trains so too, but the trainer also evaluates its test split at
    `canvas.eval_scale` from corner (1, 1) (`training.vision.check_sizes`): its test inputs (and
    held-out demonstrations) up to (S - 2) // eval_scale. A test output is never known before it is
    predicted: its room is not checked."""
    size = read(path, state, ema=False)[0].image_size
    room = size - 2
    holds, fix = f"its {size} x {size} canvas holds sides up to {room}", "a checkpoint with a larger canvas"
    scale = trainer.canvas.eval_scale if views == "build" and trainer is not None else 1
    if scale == 1:
        return GridRoom(room, room, holds, fix)
    return GridRoom(room, room // scale, f"{holds}, test inputs up to {room // scale} at canvas.eval_scale={scale}",
                    fix, f"train_overrides=['canvas.eval_scale=1'] (test inputs up to {room})")


def describe(model: dict, params: int | None) -> str:
    return (f"A LoopViT ({model.get('block')} block, width {model.get('hidden_size')}, {model.get('num_blocks')} "
            f"weight-tied blocks x {model.get('num_loops')} loops, {model.get('image_size')} x "
            f"{model.get('image_size')} canvas)")


FAMILY = Family(
    name=NAME, title="LoopViT", config=MODEL_CONFIGS[NAME], trainer="train-vit", evaluator="evaluate",
    predictor="canvas", commands=("train-vit", "evaluate", "export", "ttt", "vote"), load=load, metadata="dataset",
    describe=describe, official=lambda path, state: is_official(state),
    official_source="WenjieShu/LoopViT's scripts (a .pt of {model_state, config})",
    adapts=False, official_loop=True, lanes="hrm_deeploop.pertask.vision_lanes:VisionCopies", halts=False, carried=("canvas",), figures=("pixel accuracy", "exact accuracy"),
    tiny=("experiment=loopvit_tiny_cpu",), grid_room=grid_room)
