"""Exponential moving average of the weights (TRM's `models/ema.py`), used for evaluation.

After every optimiser step, for every parameter p that trains at that step: shadow <- (1 - rate) * p
+ rate * shadow (rate 0.999 in TRM), starting from the weights at construction. Every parameter has
an average, a frozen one too (`train init_from=... adapt.trains=embeddings|embeddings_then_all`):
while frozen its average is its weight, untouched; once it trains, it is averaged from there (built
over the trainable ones only, an average of a frozen network had no entries and its first update
failed). The puzzle table is a buffer, not
a parameter, so it has no average: evaluation uses its current rows, as TRM's does. Unlike TRM,
which deep-copies the whole train state (puzzle table included) to evaluate, `applied` swaps the
averages into the model and back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from hrm_deeploop.training.fsdp import copy_full_, local_shard


class EMA:
    def __init__(self, model: nn.Module, rate: float = 0.999):
        self.rate = rate
        self.shadow: dict[str, Tensor] = {n: p.detach().clone() for n, p in model.named_parameters()}

    def _pairs(self, model: nn.Module, training: bool = False) -> tuple[list[Tensor], list[Tensor]]:
        """(parameters, averages) in one order (`training`: of the parameters that train now only);
        of a model sharded with FSDP2, this rank's shards (both sharded alike; torch's foreach ops take
        no sharded tensors)."""
        params = dict(model.named_parameters())
        missing = sorted(set(self.shadow) - set(params))
        assert not missing, f"EMA: the model has no parameter(s) {missing[:5]}"
        names = [n for n in self.shadow if params[n].requires_grad or not training]
        return [local_shard(params[n]) for n in names], [local_shard(self.shadow[n]) for n in names]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """shadow <- rate * shadow + (1 - rate) * param: TRM's two products and one sum, rounded the
        same way, so the averages are bit-identical to TRM's EMAHelper."""
        params, shadows = self._pairs(model, training=True)
        if not params:  # a frozen network (adapt.trains=embeddings): nothing trains, nothing moves
            return
        torch._foreach_mul_(shadows, self.rate)
        torch._foreach_add_(shadows, torch._foreach_mul([p.detach() for p in params], 1.0 - self.rate))

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """The model with the averaged weights inside the block, its own weights again after it."""
        params, shadows = self._pairs(model)
        with torch.no_grad():
            saved = [p.detach().clone() for p in params]
            torch._foreach_copy_(params, shadows)
        try:
            yield model
        finally:
            with torch.no_grad():
                torch._foreach_copy_(params, saved)

    def state_dict(self) -> dict[str, object]:
        return {"rate": self.rate, "shadow": dict(self.shadow)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Load full tensors (into the shards of a model sharded with FSDP2: training/fsdp.py)."""
        shadow = state["shadow"]
        assert isinstance(shadow, dict) and set(shadow) == set(self.shadow), \
            f"EMA state names differ from the model's: {sorted(set(shadow) ^ set(self.shadow))[:5]}"
        with torch.no_grad():
            for n, t in shadow.items():
                copy_full_(self.shadow[n], t)
        self.rate = float(state["rate"])
