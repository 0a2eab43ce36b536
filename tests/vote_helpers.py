"""Helpers for the vote tests: tiny synthetic splits and predictions built from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arc_data import format as fmt
from eval.predictions import Predictions
from tests.vote_synthetic import SyntheticSplit, encode_augmented, random_colour_map, write_split


def grid(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.uint8)


def random_grid(rng: np.random.Generator, lo: int = 1, hi: int = 12) -> np.ndarray:
    h, w = rng.integers(lo, hi, size=2)
    return rng.integers(0, 10, size=(h, w)).astype(np.uint8)


def make_split(
    root: Path, tasks: dict[str, list[tuple[np.ndarray, np.ndarray]]], num_aug: int, seed: int = 0
) -> SyntheticSplit:
    """Every task gets num_aug distinct (dihedral, colour map) augmentations."""
    rng = np.random.default_rng(seed)
    augs = {}
    for name in tasks:
        seen = {(0, tuple(range(10)))}
        lst = []
        while len(lst) < num_aug:
            t, c = int(rng.integers(0, 8)), random_colour_map(rng)
            if (t, tuple(c)) not in seen:
                seen.add((t, tuple(c)))
                lst.append((t, c))
        augs[name] = lst
    return write_split(root, tasks, augs)


def predict(split: SyntheticSplit, rows: np.ndarray, grids_orig: list[np.ndarray], q: list[float]) -> Predictions:
    """Predictions for example rows `rows` of the split: row i predicts grids_orig[i] (original
    frame), augmented the same way as its example."""
    preds = []
    for e, g in zip(rows, grids_orig):
        pid = split.example_puzzle_id[e]
        if g is None:  # no grid at all
            preds.append(np.zeros(fmt.SEQ_LEN, np.uint8))
        else:
            preds.append(encode_augmented(g, np.array([split.dihedral[pid]]), split.colour_map[pid][None])[0])
    return Predictions(
        puzzle_identifiers=split.example_puzzle_id[rows].astype(np.int32),
        inputs=split.inputs[rows].copy(),
        predictions=np.stack(preds).astype(np.uint8),
        q_halt=np.array(q, dtype=np.float32),
    )
