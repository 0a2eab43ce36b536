"""The one ranking rule of every vote (HRM spec 6.3): ARC's candidates per test input
(`eval.arc.vote`) and the puzzles' test-time copies per example (`eval.puzzles.scoring`).

Candidates rank by most votes, then highest mean sigmoid(q_halt) over their votes, then first seen
(the lowest row of predictions.npz, or the lowest copy: the input as stored first).
"""

from __future__ import annotations

import numpy as np

RULE = "votes desc, then mean sigmoid(q_halt) desc, then first seen"


def sigmoid(x: np.ndarray) -> np.ndarray:
    """float64 sigmoid, written with tanh so that large |x| neither overflows nor warns."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def rank_keys(votes: np.ndarray, mean_q: np.ndarray, first_seen: np.ndarray) -> list[np.ndarray]:
    """`RULE` as `np.lexsort` keys (the last the primary one): keys appended after them group
    candidates first (e.g. by test input) and rank within each group."""
    return [np.broadcast_to(first_seen, np.shape(votes)), -np.asarray(mean_q), -np.asarray(votes)]


def rank_order(votes: np.ndarray, mean_q: np.ndarray, first_seen: np.ndarray,
               valid: np.ndarray | None = None) -> np.ndarray:
    """Indices that sort candidates best first along the last axis, by `RULE`; with `valid`
    (bool, same shape), invalid entries (slots that hold no candidate) go last."""
    keys = rank_keys(votes, mean_q, first_seen)
    if valid is not None:
        keys.append(~np.asarray(valid))
    return np.lexsort(keys, axis=-1)  # the last key is the primary one
