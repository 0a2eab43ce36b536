"""What a process that builds one trainer after another from one checkpoint keeps between them (`ttt
views=build`, pertask/inprocess.py). Everything it hands back equals what a fresh build computes, so
a trainer built with it is the trainer built without it, bit for bit (tests/test_pertask_build_reuse.py);
the `train` / `train-vit` commands build without it (`reuse=None`: every call below computes afresh).

- `once(key, make)`: a value that is a function of `key` alone, computed the first time (the
  checkpoint's start as its family's reader makes it from the held state; the parameter counts of the
  memory checks, which build the model on the meta device). Callers never write into what it returns.
- `model(key, seed, make)`: the trainer's model. The first of a key (its architecture, table rows
  included, dtype, device, seed) is built as the trainers build it: torch's generators seeded with
  `seed`, then `make()`; what that build left is recorded: each parameter's and buffer's value,
  `requires_grad`, each module's mode, and torch's generator states, the stream the first step's
  dropout draws from (the random init's draws decide it). A model handed back after its task ended
  well (`release`) is handed out again for its key with the recorded values copied in and the
  generators set to the recorded states: what a fresh build leaves, without constructing the modules
  or drawing the init. Its modules are the same objects, so a graph compiled on them is reused.
  A model whose task failed is never handed back (whatever state a half-done step left on it goes
  with it). `KEEP` keys are kept, the least recently used dropped first.
- `loaded(family, path, state, options)`: `evaluate`'s model for a trained state held in memory
  (`checkpoint.held(load=...)`, which `loading.load_model` asks instead of the family's loader). The
  first of a key (the family, the state's model and scaling configs, its tensors' names, shapes and
  dtypes, whether it holds a weight average and puzzle names, the load options, the fused kernel) is
  the family's own load; a later state of the key gets that model, kept in eval mode where it is,
  with the state's weights copied in by the one safe loader (`checkpoint.load_weights`: its
  checks, then a strict `load_state_dict`; the weight average where the family's loader takes it).
  Every tensor the model holds is then the state's or one its construction computes from the
  config, so the model equals the family's fresh load of that state (tests/test_pertask_build_reuse.py),
  without constructing it, drawing its init, or counting it for the memory check (the model it
  sizes is already held). It is a model of its own, never the trainer's. Only our own train states
  (not an export, not an official file) are kept; any other goes to the family's loader.

What it keeps between tasks is bounded (`most_kept`, which `copies=0` counts before choosing K,
pertask/build_lanes.py): at most `KEEP` keys' fresh records, idle models and evaluation models. A
model lent to a trainer is known only while something else holds it (a weak reference): the lanes
of `copies=K` and a failed task never hand theirs back, and nothing here keeps it alive.
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

KEEP = 4  # architectures (keys) whose fresh state and idle model are kept


@dataclass
class _Fresh:
    """A model as its fresh build left it, and torch's generators then."""

    values: dict[str, torch.Tensor]  # parameters and buffers (named_parameters / named_buffers)
    requires_grad: dict[str, bool]
    training: dict[str, bool]  # each module's mode
    device: torch.device  # where `make()` put it
    rng_cpu: torch.Tensor
    rng_cuda: torch.Tensor | None  # the model's CUDA device's generator (None off CUDA)


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(model.named_parameters()), **{f"buffer:{n}": b for n, b in model.named_buffers()}}


def model_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers (each storage once)."""
    return _storage_bytes(list(_tensors(model).values()))


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        if t.device.type == "meta":
            continue
        s = t.untyped_storage()
        seen[(str(t.device), s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def _rng(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


class Reuse:
    def __init__(self) -> None:
        self._memo: dict[str, Any] = {}
        self._fresh: OrderedDict[str, _Fresh] = OrderedDict()
        self._idle: dict[str, nn.Module] = {}  # one model per key, handed back
        # model -> its key, while a trainer holds it; weak: one never handed back is not kept alive here
        self._lent: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._evaluated: OrderedDict[str, Any] = OrderedDict()  # key -> evaluate's first LoadedModel of it
        self.built = self.reused = 0
        self.eval_built = self.eval_reused = 0

    def once(self, key: Any, make: Callable[[], Any]) -> Any:
        k = repr(key)
        if k not in self._memo:
            self._memo[k] = make()
        return self._memo[k]

    def model(self, key: Any, seed: int, make: Callable[[], nn.Module], device: torch.device | str) -> nn.Module:
        device = torch.device(device)
        k = repr((key, seed, device))
        fresh, model = self._fresh.get(k), self._idle.pop(k, None)
        if fresh is not None and model is not None:
            self._fresh.move_to_end(k)
            _restore(model, fresh, device)
            self.reused += 1
        else:
            torch.manual_seed(seed)
            model = make()
            self.built += 1
            if fresh is None:
                self._fresh[k] = _record(model, device)
                while len(self._fresh) > KEEP:
                    old, _ = self._fresh.popitem(last=False)
                    self._idle.pop(old, None)
        self._lent[model] = k
        return model

    def release(self, model: nn.Module) -> None:
        """`model`'s task ended well: it may serve the next trainer of its key."""
        k = self._lent.pop(model, None)
        if k is not None and k in self._fresh:
            self._idle[k] = model

    def held_bytes(self) -> int:
        """Bytes of the tensors kept between tasks: the fresh records, the idle models and the
        evaluation models (each storage once)."""
        tensors = [t for f in self._fresh.values() for t in f.values.values()]
        modules = [*self._idle.values(), *(loaded.model for loaded in self._evaluated.values())]
        tensors += [t for m in modules for t in _tensors(m).values()]
        return _storage_bytes(tensors)

    @staticmethod
    def most_kept(model_bytes: int, tasks: int, handed_back: bool) -> int:
        """The most `held_bytes` can reach over `tasks` tasks whose models take `model_bytes` each (at
        most `KEEP` keys, one a task): per key a fresh record and an evaluation model, and the idle
        model where trainers hand theirs back (one task at a time; the lanes of `copies=K` do not)."""
        return min(KEEP, max(tasks, 0)) * (3 if handed_back else 2) * max(model_bytes, 0)

    def loaded(self, family: Any, path: Path, state: dict, opts: Any) -> Any:
        """`evaluate`'s model for the trained state held at `path` (module docstring): a `LoadedModel`
        equal to `family.load(path, state, opts)`'s."""
        k = _evaluation_key(state, family, opts)
        first = self._evaluated.get(k) if k is not None else None
        if first is None:
            loaded = family.load(path, state, opts)
            self.eval_built += 1
            if k is not None:
                self._evaluated[k] = loaded
                while len(self._evaluated) > KEEP:
                    self._evaluated.popitem(last=False)
            return loaded
        from hrm_deeploop import checkpoint as ckpt  # lazy: the layer below, read only here
        from hrm_deeploop.families.weights import with_average  # lazy: as above

        del self._evaluated[k]  # a load that fails part-way leaves the model for no one
        weights = ckpt.strip_prefixes(state["model"])
        if opts.ema and state.get("ema") is not None:  # as the families' loaders take it
            weights = with_average(weights, state["ema"]["shadow"], str(path))
        ckpt.load_weights(first.model, weights, str(path))
        self._evaluated[k] = first
        self.eval_reused += 1
        step = state.get("step")
        return replace(first, config=copy.copy(first.config), step=None if step is None else int(step), path=path,
                       puzzle_names=None if first.puzzle_names is None else state.get("puzzle_names"),
                       run_config=state.get("config"))


def _evaluation_key(state: dict, family: Any, opts: Any) -> str | None:
    """What decides the model `family.load` builds for `state` and the fields it reads from it besides
    the weights, step, path, puzzle names and run config (`Reuse.loaded`); None: not our own train state."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: the layer below
    from hrm_deeploop import runtime  # lazy: as above

    conf, model = state.get("config"), state.get("model")
    if state.get("format") != ckpt.FORMAT or "exported" in state or not isinstance(conf, dict) or \
            not isinstance(model, dict) or not isinstance(conf.get("model"), dict):
        return None
    ema = state.get("ema")
    shadow = ema.get("shadow") if isinstance(ema, dict) else None
    tensors = [(n, tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else (n, type(t).__name__)
               for n, t in {**model, **{f"ema:{n}": t for n, t in (shadow or {}).items()}}.items()]
    return repr((family.name, conf.get("model"), conf.get("scaling"), tensors, ema is not None,
                 state.get("puzzle_names") is None, opts, runtime.env().fused_kernel))


def _record(model: nn.Module, device: torch.device) -> _Fresh:
    tensors = _tensors(model)
    first = next(iter(tensors.values()), None)
    rng_cpu, rng_cuda = _rng(device)
    return _Fresh(values={n: t.detach().clone() for n, t in tensors.items()},
                  requires_grad={n: p.requires_grad for n, p in model.named_parameters()},
                  training={n: m.training for n, m in model.named_modules()},
                  device=first.device if first is not None else torch.device("cpu"), rng_cpu=rng_cpu, rng_cuda=rng_cuda)


@torch.no_grad()
def _restore(model: nn.Module, fresh: _Fresh, device: torch.device) -> None:
    """`model` as its key's fresh build left it, torch's generators too."""
    tensors = _tensors(model)
    if any(t.device != fresh.device for t in tensors.values()):  # the trainer moved it after `make()`
        model.to(fresh.device)
        tensors = _tensors(model)
    for n, t in tensors.items():
        t.copy_(fresh.values[n])
    for n, p in model.named_parameters():
        p.grad = None
        p.requires_grad_(fresh.requires_grad[n])
    for n, m in model.named_modules():
        m.training = fresh.training[n]
    torch.set_rng_state(fresh.rng_cpu)
    if fresh.rng_cuda is not None:
        torch.cuda.set_rng_state(fresh.rng_cuda, device)


def built_model(reuse: Reuse | None, key: Any, seed: int, make: Callable[[], nn.Module],
                device: torch.device | str) -> nn.Module:
    """The trainer's model: `make()` under torch's generators seeded with `seed`, or the same from `reuse`."""
    if reuse is None:
        torch.manual_seed(seed)
        return make()
    return reuse.model(key, seed, make, device)


def remembered(reuse: Reuse | None, key: Any, make: Callable[[], Any]) -> Any:
    """`make()`, or the same value computed once by `reuse` (`Reuse.once`)."""
    return make() if reuse is None else reuse.once(key, make)
