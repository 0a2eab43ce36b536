"""Test helpers for the HRM tests: tiny synthetic datasets in the HRM layout and a stand-in for
`arc_data.dataset.open_split` (the data package's reader is developed in parallel; the stand-in
follows its documented API: meta, puzzle_identifiers, puzzle_indices, group_indices,
num_examples, examples(idx) -> (inputs, labels))."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from arc_data.dataset import DatasetMeta, read_meta
from arc_data.format import (
    GROUP_INDICES_FILE,
    INPUTS_FILE,
    LABELS_FILE,
    META_FILE,
    PUZZLE_IDS_FILE,
    PUZZLE_INDICES_FILE,
)

COLOUR_OFFSET, EOS = 2, 1


def encode(grid: np.ndarray, canvas: int) -> np.ndarray:
    """arc_data.format.encode_grid on a canvas x canvas board (30 is the ARC format; tests use
    smaller boards so that attention over the sequence is cheap on CPU)."""
    h, w = grid.shape
    c = np.zeros((canvas, canvas), dtype=np.uint8)
    c[:h, :w] = grid + COLOUR_OFFSET
    if h < canvas:
        c[h, :w] = EOS
    if w < canvas:
        c[:h, w] = EOS
    return c.reshape(-1)


@dataclass
class StandInSplit:
    meta: DatasetMeta
    puzzle_identifiers: np.ndarray
    puzzle_indices: np.ndarray
    group_indices: np.ndarray
    inputs: np.ndarray
    labels: np.ndarray

    @property
    def num_examples(self) -> int:
        return int(self.inputs.shape[0])

    def examples(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self.inputs[idx]), np.asarray(self.labels[idx])


def stand_in_open_split(data_dir, split):
    d = Path(data_dir) / split
    if not (d / META_FILE).is_file():
        raise FileNotFoundError(f"{d / META_FILE} is missing")
    meta = read_meta(d / META_FILE)
    load = lambda name, mm=None: np.load(d / name, mmap_mode=mm)
    return StandInSplit(meta=meta, puzzle_identifiers=load(PUZZLE_IDS_FILE), puzzle_indices=load(PUZZLE_INDICES_FILE),
                        group_indices=load(GROUP_INDICES_FILE), inputs=load(INPUTS_FILE, "r"),
                        labels=load(LABELS_FILE, "r"))


def use_stand_in(monkeypatch) -> None:
    import hrm_deeploop.data.batches

    monkeypatch.setattr(hrm_deeploop.data.batches, "open_split", stand_in_open_split)


def _task(rng: np.random.Generator, n: int, side: int = 2):
    """A task whose output is the input with colours shifted by a per-task offset."""
    shift = int(rng.integers(1, 9))
    pairs = []
    for _ in range(n):
        g = rng.integers(1, 10, size=(side, side)).astype(np.uint8)
        pairs.append((g, ((g - 1 + shift) % 9 + 1).astype(np.uint8)))
    return pairs


def make_dataset(root: Path, num_tasks: int = 4, num_aug: int = 1, train_per_puzzle: int = 3,
                 test_per_puzzle: int = 1, side: int = 2, seed: int = 0, canvas: int = 30) -> Path:
    """Write train/ and test/ in the HRM layout. Every task is a group of 1 + num_aug puzzles
    (augmentations = colour permutations), each puzzle id shared between the splits."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    splits = {s: {"inputs": [], "labels": [], "pids": [], "pidx": [0], "gidx": [0]} for s in ("train", "test")}
    next_id = 1
    for _ in range(num_tasks):
        pairs = _task(rng, train_per_puzzle + test_per_puzzle, side)
        for a in range(num_aug + 1):
            perm = np.arange(10, dtype=np.uint8)
            if a:
                perm[1:] = rng.permutation(np.arange(1, 10))
            for s, sel in (("train", pairs[:train_per_puzzle]), ("test", pairs[train_per_puzzle:])):
                if not sel:
                    continue
                d = splits[s]
                for x, y in sel:
                    d["inputs"].append(encode(perm[x], canvas))
                    d["labels"].append(encode(perm[y], canvas))
                d["pids"].append(next_id)
                d["pidx"].append(len(d["inputs"]))
            next_id += 1
        for s in splits:
            splits[s]["gidx"].append(len(splits[s]["pids"]))
    for s, d in splits.items():
        out = root / s
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / INPUTS_FILE, np.stack(d["inputs"]).astype(np.uint8))
        np.save(out / LABELS_FILE, np.stack(d["labels"]).astype(np.uint8))
        np.save(out / PUZZLE_IDS_FILE, np.asarray(d["pids"], dtype=np.int32))
        np.save(out / PUZZLE_INDICES_FILE, np.asarray(d["pidx"], dtype=np.int32))
        np.save(out / GROUP_INDICES_FILE, np.asarray(d["gidx"], dtype=np.int32))
        meta = {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 12, "seq_len": canvas * canvas,
                "num_puzzle_identifiers": next_id, "total_groups": num_tasks,
                "mean_puzzle_examples": len(d["inputs"]) / len(d["pids"]), "sets": ["all"]}
        (out / META_FILE).write_text(json.dumps(meta))
    return root


TINY_OVERRIDES = [
    "experiment=hrm_tiny_cpu", "logger=none", "device=cpu", "train.progress=false",
    "model.hidden_size=32", "model.num_heads=2", "model.num_h_layers=1", "model.num_l_layers=1",
    "model.halt_max_steps=2", "train.global_batch_size=8", "optim.warmup_steps=5",
]


TRM_TINY_OVERRIDES = [
    "experiment=trm_tiny_cpu", "logger=none", "device=cpu", "train.progress=false",
    "model.hidden_size=32", "model.halt_max_steps=2", "train.global_batch_size=8", "optim.warmup_steps=5",
]


def train_cli(monkeypatch, data_dir, out_dir, *overrides, base=TINY_OVERRIDES) -> int:
    """`hrm-deeploop train` in-process on a stand-in dataset; returns the exit code. `base`: the
    tiny HRM settings (TINY_OVERRIDES) or the tiny TRM ones (TRM_TINY_OVERRIDES)."""
    from hrm_deeploop.cli import run_subcommand

    use_stand_in(monkeypatch)
    try:
        return run_subcommand("train", [*base, f"data_dir={data_dir}", f"output_dir={out_dir}", *overrides])
    except SystemExit as e:
        return int(e.code or 0)


def straight_and_resumed(monkeypatch, data_dir, root: Path, *overrides, base=TINY_OVERRIDES) -> tuple[dict, dict]:
    """A 6-step run (checkpoints every 3) straight through in root/straight, and the same run in
    root/crashed killed after step 4 (Ctrl-C: exit 130, the step-3 checkpoint kept), then resumed:
    the two train-state files of step 6."""
    import hrm_deeploop.training.reasoner as T
    from hrm_deeploop import checkpoint as ckpt

    args = ("train.max_steps=6", "checkpoint.every=3", *overrides)
    assert train_cli(monkeypatch, data_dir, root / "straight", *args, base=base) == 0
    real = T.Trainer.train_step

    def crash_at_5(self, step=None, tensors=None):
        if self.step == 4:
            raise KeyboardInterrupt("simulated kill after step 4")
        return real(self, step, tensors)

    monkeypatch.setattr(T.Trainer, "train_step", crash_at_5)
    assert train_cli(monkeypatch, data_dir, root / "crashed", *args, base=base) == 130
    assert [s for s, _ in ckpt.list_checkpoints(root / "crashed")] == [3]
    monkeypatch.setattr(T.Trainer, "train_step", real)
    assert train_cli(monkeypatch, data_dir, root / "crashed", *args, "resume=true", base=base) == 0
    return tuple(ckpt.load(ckpt.step_path(root / name, 6)) for name in ("straight", "crashed"))


def ddp_grads_worker(rank: int, world: int, port: int, data_dir: str, out_file: str, grad_accum: int,
                     compile_: bool = False) -> None:
    """One rank of a gloo run: one forward/backward on the first global batch; rank 0 saves the
    dense gradients and the puzzle table after the SignSGD step."""
    import os

    import torch

    import hrm_deeploop.data.batches
    from hrm_deeploop import runtime
    from hrm_deeploop.data.batches import fit_to_dataset
    from hrm_deeploop.models.model_config import HRMConfig
    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.training.reasoner import Trainer
    from hrm_deeploop.training.train_config import TrainConfig

    saved_env = dict(os.environ)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    if world > 1:
        torch.set_num_threads(1)
    hrm_deeploop.data.batches.open_split = stand_in_open_split
    env = runtime.setup("cpu")
    try:
        split = stand_in_open_split(data_dir, "train")
        model_cfg = fit_to_dataset(HRMConfig(hidden_size=32, num_heads=2, num_h_layers=1, num_l_layers=1,
                                             expansion=2.0, mlp_multiple=16, halt_max_steps=2,
                                             forward_dtype="float32"), split, data_dir)
        cfg = TrainConfig(model=model_cfg, scaling=ScalingConfig(scheme="deeploop"), data_dir=data_dir,
                          output_dir="unused", logger="none")
        cfg.train.global_batch_size, cfg.train.grad_accum, cfg.train.compile = 8, grad_accum, compile_
        t = Trainer(cfg, env, split, total_steps=10)
        b = t.sampler.next_batch()
        sums = t.forward_backward(b.tensors)
        runtime.all_reduce_(sums)
        grads = {n: p.grad.clone() for n, p in t.model.named_parameters()}
        ids, g = t.model.puzzle_emb.take_grads()
        t.sparse.step(ids, g)
        if rank == 0:
            torch.save({"grads": grads, "table": t.model.puzzle_emb.weights.clone(), "sums": sums}, out_file)
    finally:
        runtime.teardown()
        os.environ.clear()
        os.environ.update(saved_env)
    if world > 1:  # a spawned rank: done, leave without interpreter teardown (an atexit import under load
        os._exit(0)  # once deadlocked a finished rank for 14 minutes); the in-process run returns as usual


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def random_batch(B=4, S=16, seed=0, V=12, num_ids=5) -> dict:
    """A seeded random reasoner batch (second half of each label row ignored), for the model tests."""
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, V, (B, S), generator=g, dtype=torch.int32)
    labels = torch.randint(0, V, (B, S), generator=g, dtype=torch.int32)
    labels[:, S // 2:] = -100
    ids = torch.randint(1, num_ids, (B,), generator=g, dtype=torch.int32)
    return {"inputs": inputs, "labels": labels, "puzzle_identifiers": ids}
