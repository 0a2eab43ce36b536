"""The looped GPT's entry (`models/gpt.py`, `GPTConfig`; trained by `train-gpt`, scored by
`eval-gpt`, sampled by `generate`; docs/looped-gpt.md). Its checkpoints record the R its alpha and
beta were derived from (`scaling_rounds`); `opts.num_rounds` sets the R it runs by default
(parameters do not depend on R). An export carries the tokenizer's id beside the weights.
"""

from __future__ import annotations

from pathlib import Path

from hrm_deeploop.families.spec import Family, LoadedModel, LoadOptions
from hrm_deeploop.models.model_config import MODEL_CONFIGS, GPTConfig
from hrm_deeploop.models.rounds import scaling_rounds_of
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.typed_config import typed


def load(path: Path, state: dict, opts: LoadOptions) -> LoadedModel:
    import torch  # lazy: --help reads the registry without torch

    from hrm_deeploop import checkpoint as ckpt  # lazy: torch
    from hrm_deeploop import runtime  # lazy: torch
    from hrm_deeploop.models.gpt import GPT  # lazy: torch

    config = state.get("config") or {}
    model_cfg = typed(config["model"], GPTConfig, "model.")
    scaling = typed(config.get("scaling"), ScalingConfig, "scaling.")
    # the R of its alpha/beta, as the run resolved it; re-derived from the saved schedule only for
    # checkpoints written before train-gpt stored it
    scaling_rounds = state.get("scaling_rounds")
    if scaling_rounds is None:
        scaling_rounds = scaling_rounds_of(config, model_cfg.num_rounds)
    if opts.num_rounds is not None:
        model_cfg.num_rounds = opts.num_rounds
    device, batch = torch.device(opts.device), opts.batch
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


def describe(model: dict, params: int | None) -> str:
    return (f"A looped GPT language model (R = {model.get('num_rounds')} rounds of {model.get('num_layers')} "
            f"layers, width {model.get('hidden_size')})")


FAMILY = Family(
    name="gpt", title="looped GPT", config=MODEL_CONFIGS["gpt"], trainer="train-gpt", evaluator="eval-gpt", predictor="text",
    commands=("train-gpt", "eval-gpt", "generate", "export"), load=load, metadata="tokenizer", describe=describe,
    figures=("loss", "perplexity"), tiny=())
