"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for every trainer: `train.fsdp=true` under torchrun
(the looped GPT in `training/lm.py`; HRM, TRM and URM in `training/reasoner.py`).

- `shard`: every block of the looped core(s) is its own FSDP unit (parameters all-gathered for its
  forward/backward, gradients reduce-scattered), the rest (embeddings, heads, norms) is the root
  unit. Parameters, gradients and the optimiser's state (AdamW; AdamATan2 and the weight average
  for the reasoners) then live sharded, 1/world_size per rank. Buffers (the reasoners' puzzle
  table, trained by SignSGD identically on every rank) stay whole on every rank.
- Checkpoints stay in the plain single-process format: the model's full state dict and the
  optimizer's full state in torch's own layout (parameters numbered in param-group order), gathered
  with `torch.distributed.checkpoint.state_dict` (a collective: every rank calls it, rank 0 gets the
  tensors). So a checkpoint written at one world size, sharded or not, resumes at any other and
  loads in `evaluate`, `eval-gpt`, `generate` and `export` unchanged.

Lazy imports: each import inside a function here is torch.distributed's FSDP or DCP (+600 modules,
sympy among them), loaded only by a run with train.fsdp=true.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch


def shard(model: torch.nn.Module, blocks: Iterable[torch.nn.Module]) -> torch.nn.Module:
    """Apply fully_shard to each block, then to the model (in place); returns the model."""
    from torch.distributed.fsdp import fully_shard

    # The reasoners return views (q[:, 0], ...) that nothing modifies in place; the warning against
    # in-place ops on them would print every step. Their gradients equal the 1-rank run's (tests).
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor", category=UserWarning)
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict on rank 0, on CPU ({} on the other ranks). Collective."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=True))


def load_full_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load an unsharded state dict (every rank passes it) into the sharded model. Collective."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state, options=_options())


def full_optim_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's full state in `opt.state_dict()`'s layout (integer ids in param-group order),
    on rank 0 ({} on the others). Collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    named = get_optimizer_state_dict(model, opt, options=_options(cpu_offload=True))
    if not named:
        return {}
    ids = {name: i for i, name in enumerate(n for g in named["param_groups"] for n in g["params"])}
    return {"state": {ids[name]: s for name, s in named["state"].items()},
            "param_groups": [{**g, "params": [ids[n] for n in g["params"]]} for g in named["param_groups"]]}


def load_full_optim_state(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load `opt.state_dict()`-layout state (every rank passes it) into the sharded optimizer. Collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    # the parameter names in param-group order, from the optimizer itself (its state may be empty)
    order = [n for g in get_optimizer_state_dict(model, opt, options=_options())["param_groups"] for n in g["params"]]
    named = {"state": {order[i]: s for i, s in state["state"].items()},
             "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]}
    set_optimizer_state_dict(model, opt, named, options=_options())


def local_value(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a (replicated) DTensor result such as clip_grad_norm_'s total norm."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded DTensor (a plain tensor as it is)."""
    return t.to_local() if hasattr(t, "to_local") else t


def full_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Unsharded copies on CPU of (possibly sharded) tensors, e.g. a weight average. Collective."""
    return {n: local_value(t).detach().cpu() for n, t in tensors.items()}


@torch.no_grad()
def copy_full_(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src, where dst may be a sharded DTensor and src is the full tensor (every rank passes
    the same one): each rank keeps its own shard."""
    if hasattr(dst, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        src = distribute_tensor(src.to(dst.device, dst.dtype), dst.device_mesh, dst.placements)
    dst.copy_(src)
