"""Test helpers for the HRM tests: tiny synthetic datasets in the HRM layout and a stand-in for
`arc_data.dataset.open_split` (the data package's reader is developed in parallel; the stand-in
follows its documented API: meta, puzzle_identifiers, puzzle_indices, group_indices,
num_examples, examples(idx) -> (inputs, labels))."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
    meta: dict
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
    meta = json.loads((d / META_FILE).read_text())
    load = lambda name, mm=None: np.load(d / name, mmap_mode=mm)
    return StandInSplit(meta=meta, puzzle_identifiers=load(PUZZLE_IDS_FILE), puzzle_indices=load(PUZZLE_INDICES_FILE),
                        group_indices=load(GROUP_INDICES_FILE), inputs=load(INPUTS_FILE, "r"),
                        labels=load(LABELS_FILE, "r"))


def use_stand_in(monkeypatch) -> None:
    import hrm_deeploop.data

    monkeypatch.setattr(hrm_deeploop.data, "open_split", stand_in_open_split)


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
