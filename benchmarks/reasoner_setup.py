"""The real reasoner trainer around random batches, for benchmarks, reference comparisons and tests:
`make_trainer` (`training.reasoner.Trainer` in one process, no logger, over a stub dataset split)
and `random_batches`. Imported by benchlib and bench_hrm alike (neither imports the other for it)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from hrm_deeploop import runtime
from hrm_deeploop.models.model_config import HRMConfig, TRMConfig
from hrm_deeploop.models.scaling import ScalingConfig
from hrm_deeploop.training.reasoner import Trainer
from hrm_deeploop.training.train_config import ReasonerLoop, ReasonerOptim, TrainConfig


def fake_split(num_ids: int, examples: int = 1) -> SimpleNamespace:
    """What `TrainSampler.__init__` reads from a dataset split (never sampled here): one group of
    one puzzle with `examples` examples."""
    return SimpleNamespace(group_indices=np.array([0, 1]), puzzle_indices=np.array([0, examples]),
                           puzzle_identifiers=np.array([0], dtype=np.int32), num_examples=examples,
                           meta=SimpleNamespace(total_groups=1, mean_puzzle_examples=examples))


def random_batches(cfg: HRMConfig | TRMConfig, batch: int, n: int, device: torch.device, seed: int = 0) -> list[dict]:
    """n random batches: tokens in [2, V) (0 pad, 1 end-of-row in ARC), about half the labels
    ignored (ARC pads grids to 30x30), random puzzle ids."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        inputs = torch.randint(2, cfg.vocab_size, (batch, cfg.seq_len), generator=g, dtype=torch.int32)
        labels = torch.randint(2, cfg.vocab_size, (batch, cfg.seq_len), generator=g, dtype=torch.int32)
        labels[torch.rand(batch, cfg.seq_len, generator=g) < 0.5] = -100
        ids = torch.randint(0, cfg.num_puzzle_identifiers, (batch,), generator=g, dtype=torch.int32)
        out.append({k: v.to(device) for k, v in
                    {"inputs": inputs, "labels": labels, "puzzle_identifiers": ids}.items()})
    return out


def make_trainer(model_cfg: HRMConfig | TRMConfig, scaling: ScalingConfig, device: torch.device, batch: int,
                 compile_: bool = False, optim: ReasonerOptim | None = None, ema: bool = False,
                 fused: bool = True) -> Trainer:
    """The real `training.reasoner.Trainer` (one process, no logger) around a stub dataset split,
    for random batches given to `train_step(tensors=...)` (benchmarks, reference comparisons, tests)."""
    tcfg = TrainConfig(model=model_cfg, scaling=scaling, logger="none", device=device.type,
                       optim=optim or ReasonerOptim(),
                       train=ReasonerLoop(global_batch_size=batch, compile=compile_, progress=False, ema=ema))
    env = runtime.Env(rank=0, local_rank=0, world_size=1, device=device, fused_kernel=fused)
    return Trainer(tcfg, env, fake_split(model_cfg.num_puzzle_identifiers, batch), total_steps=10**6)
