"""Puzzle batches for HRM (reference spec 2): seeded, rank-sharded, resumable.

Training (`TrainSampler`): an *iteration* is `epochs_per_iter` concatenated random permutations
of all groups. Walking that order, each group contributes one puzzle chosen uniformly (the
original or any augmentation) and all of that puzzle's examples in random order; a batch is
filled to exactly `global_batch_size` rows (the rest of a truncated puzzle is dropped) and the
final short batch of an iteration is dropped. Every rank builds the same global batch and takes
rows [rank*B, (rank+1)*B).

Differences from HRM, on purpose: explicit `np.random.Generator(Philox(SeedSequence([seed, iteration, stream])))`s
drive the group order (stream 0) and the puzzle choice *and* the example shuffle (stream 1) (HRM draws the example
shuffle from NumPy's unseeded global RNG, so its batches cannot be reproduced), and the sampler
state (iteration, cursor, generator state) is saved in checkpoints for exact resume.

Evaluation (`sequential_batches`): sequential windows of `global_batch_size` examples; rank r takes
its B rows of each window; short or empty slices are padded with blank rows (inputs PAD,
labels -100, puzzle id blank, index -1).

Both the materialised HRM layout and the compact format are read through
`arc_data.dataset.open_split` (`PuzzleSplit.examples(idx) -> (inputs, labels)`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arc_data.dataset import PuzzleSplit
from arc_data.dataset import open_split as _open_split
from arc_data.errors import DatasetError
from arc_data.files.names import why_not_a_folder
from arc_data.format import MANIFEST_FILE
from hrm_deeploop.errors import ConfigError, UserError, os_error
from hrm_deeploop.models.losses import IGNORE_LABEL

DATASET_KEYS = ("vocab_size", "seq_len", "num_puzzle_identifiers")  # what a model takes from its dataset


def open_split(data_dir: str | Path, split: str) -> Any:
    """The dataset split through the data package (materialised or compact format)."""
    return _open_split(data_dir, split)


def open_dataset(data_dir: str | None, split: str) -> Any:
    """`open_split` with one-line errors naming the folder (data_dir unset, missing, unreadable)."""
    if not data_dir:
        raise ConfigError("data_dir is not set (data_dir=PATH to a dataset built by hrm-deeploop build-arc)")
    path = Path(data_dir)
    if not path.is_dir():
        raise UserError(f"data_dir '{path}' {why_not_a_folder(path)}")
    try:
        return open_split(path, split)
    except (UserError, DatasetError):
        raise
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot read dataset split '{path / split}': {e}") from None


IDENTITY_FULL_BYTES = 16 << 20  # files up to this size are hashed whole; larger ones sampled
IDENTITY_SAMPLES, IDENTITY_SAMPLE_BYTES = 256, 64 << 10


def dataset_identity(data_dir: str | Path) -> dict[str, Any]:
    """What identifies a built dataset, so that a resumed run can tell it is fed the same one:
    `{folder: {file: {bytes, sha256}}}` over the top level ('.') and each split folder (train/,
    test/, ...). Files above 16 MiB are hashed on 256 evenly spaced 64 KiB windows plus their last
    one (16 MiB read, not the whole ARC array), enough to tell a rebuilt or different dataset from
    the original. Left out: manifest.json (it records the build's output path, and a moved or
    copied dataset is the same dataset) and hidden files."""
    root = Path(data_dir)
    folders = [root, *sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]
    out: dict[str, Any] = {}
    for folder in folders:
        files = sorted(q for q in folder.iterdir() if q.is_file() and not q.name.startswith(".")
                       and not (folder == root and q.name == MANIFEST_FILE))
        out["." if folder == root else folder.name] = {f.name: file_identity(f) for f in files}
    return out


def file_identity(path: Path) -> dict[str, Any]:
    """{bytes, sha256} of one file, as `dataset_identity` records it."""
    h = hashlib.sha256()
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= IDENTITY_FULL_BYTES:
                h.update(f.read())
            else:
                stride = (size - IDENTITY_SAMPLE_BYTES) // IDENTITY_SAMPLES
                for at in [*(k * stride for k in range(IDENTITY_SAMPLES)), size - IDENTITY_SAMPLE_BYTES]:
                    f.seek(at)
                    h.update(f.read(IDENTITY_SAMPLE_BYTES))
    except OSError as e:
        raise UserError(f"cannot read '{path}': {os_error(e)}") from None
    return {"bytes": size, "sha256": h.hexdigest()}


def fit_to_dataset(model: Any, split: PuzzleSplit, where: str) -> Any:
    """Fill vocab_size / seq_len / num_puzzle_identifiers of a model config from the dataset; a value
    the user set explicitly (not the default) that disagrees with the dataset is an error."""
    defaults = type(model)()
    values = {}
    for key in DATASET_KEYS:
        want, have = int(getattr(split.meta, key)), getattr(model, key)
        if have != getattr(defaults, key) and have != want:
            raise UserError(f"model.{key}={have} does not match the dataset '{where}' ({key}={want})")
        values[key] = want
    return replace(model, **values)


def check_matches(model: Any, split: PuzzleSplit, where: str, what: str = "model") -> None:
    """The dataset must agree with a fixed model (a checkpoint's) on vocab, length and ids."""
    for key in DATASET_KEYS:
        want, have = int(getattr(split.meta, key)), getattr(model, key)
        if have != want:
            raise UserError(f"dataset '{where}' has {key}={want} but the {what} has {key}={have}")


def steps_per_epoch(split: PuzzleSplit, global_batch_size: int) -> float:
    """HRM's epoch: one visit per group, total_groups * mean_puzzle_examples examples."""
    return split.meta.total_groups * split.meta.mean_puzzle_examples / global_batch_size


@dataclass
class Batch:
    """A local batch: tensors for the model plus the global example index of each row (-1 = padding)."""

    tensors: dict[str, torch.Tensor]  # inputs (B, S) int32, labels (B, S) int32, puzzle_identifiers (B,) int32
    index: np.ndarray  # (B,) int64
    num_valid: int  # rows that are not padding


def collate(split: PuzzleSplit, idx: np.ndarray, puzzle_ids: np.ndarray, local_batch_size: int) -> Batch:
    """Load examples `idx` (with their puzzle ids) into int32 tensors; labels 0 -> -100; pad to B rows."""
    n = len(idx)
    seq_len = int(split.meta.seq_len)
    inputs = np.full((local_batch_size, seq_len), split.meta.pad_id, dtype=np.int32)
    labels = np.full((local_batch_size, seq_len), IGNORE_LABEL, dtype=np.int32)
    ids = np.full((local_batch_size,), split.meta.blank_identifier_id, dtype=np.int32)
    index = np.full((local_batch_size,), -1, dtype=np.int64)
    if n:
        x, y = split.examples(np.asarray(idx, dtype=np.int64))
        inputs[:n] = x
        y = np.asarray(y).astype(np.int32)
        y[y == split.meta.ignore_label_id] = IGNORE_LABEL
        labels[:n] = y
        ids[:n] = puzzle_ids
        index[:n] = idx
    t = {"inputs": torch.from_numpy(inputs), "labels": torch.from_numpy(labels),
         "puzzle_identifiers": torch.from_numpy(ids)}
    return Batch(tensors=t, index=index, num_valid=n)


class TrainSampler:
    """Endless global batches of training examples (spec 2), as described in the module docstring."""

    def __init__(self, split: Any, global_batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 epochs_per_iter: int = 1):
        if global_batch_size % world_size:
            raise UserError(f"train.global_batch_size={global_batch_size} is not divisible by the "
                            f"world size {world_size}")
        self.split = split
        self.global_batch_size = global_batch_size
        self.local_batch_size = global_batch_size // world_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epochs_per_iter = max(1, int(epochs_per_iter))
        self.group_indices = np.asarray(split.group_indices, dtype=np.int64)
        self.puzzle_indices = np.asarray(split.puzzle_indices, dtype=np.int64)
        self.puzzle_identifiers = np.asarray(split.puzzle_identifiers, dtype=np.int32)
        self.num_groups = len(self.group_indices) - 1
        if self.num_groups < 1:
            raise UserError("training split has no groups")
        # Fewest examples one sampler pass can yield: every group contributes its smallest puzzle.
        sizes = np.diff(self.puzzle_indices)
        smallest = np.minimum.reduceat(sizes, self.group_indices[:-1]) if len(sizes) else np.zeros(0, np.int64)
        fewest = int(smallest.sum()) * self.epochs_per_iter
        if fewest < global_batch_size:
            raise UserError(
                f"train.global_batch_size={global_batch_size} can never be filled: one sampler iteration of "
                f"{self.epochs_per_iter} epoch(s) over {self.num_groups} groups yields as few as {fewest} "
                f"examples and the short last batch is dropped; lower train.global_batch_size or raise "
                f"train.epochs_per_iter to at least {-(-global_batch_size * self.epochs_per_iter // max(fewest, 1))}")
        self.iteration = 0
        self.cursor = 0
        self._order: np.ndarray | None = None
        self._rng = self._new_rng(0, stream=1)

    def _new_rng(self, iteration: int, stream: int) -> np.random.Generator:
        """stream 0: the group order of an iteration; stream 1: puzzle choice and example shuffle."""
        return np.random.Generator(np.random.Philox(np.random.SeedSequence([self.seed, iteration, stream])))

    def _build_order(self) -> np.ndarray:
        rng = self._new_rng(self.iteration, stream=0)
        return np.concatenate([rng.permutation(self.num_groups) for _ in range(self.epochs_per_iter)])

    def next_global(self) -> tuple[np.ndarray, np.ndarray]:
        """Global example indices (G,) and their puzzle ids (G,) of the next full batch."""
        G = self.global_batch_size
        while True:
            if self._order is None:
                self._order = self._build_order()
            parts, pids, n = [], [], 0
            while n < G and self.cursor < len(self._order):
                g = self._order[self.cursor]
                self.cursor += 1
                p = int(self._rng.integers(self.group_indices[g], self.group_indices[g + 1]))
                start, end = self.puzzle_indices[p], self.puzzle_indices[p + 1]
                ex = start + self._rng.permutation(end - start)
                ex = ex[: G - n]
                parts.append(ex)
                pids.append(np.full(len(ex), self.puzzle_identifiers[p], dtype=np.int32))
                n += len(ex)
            if n == G:
                return np.concatenate(parts), np.concatenate(pids)
            # The iteration ran out: drop the short batch, start the next iteration.
            self.iteration += 1
            self.cursor = 0
            self._order = None
            self._rng = self._new_rng(self.iteration, stream=1)

    def next_batch(self) -> Batch:
        idx, pids = self.next_global()
        B, r = self.local_batch_size, self.rank
        return collate(self.split, idx[r * B:(r + 1) * B], pids[r * B:(r + 1) * B], B)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    # -- exact resume ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Position at a batch boundary. The group order is rebuilt from (seed, iteration); the
        puzzle/example generator's state is saved with its arrays as lists of ints (a checkpoint
        holds plain types only, so it loads without unpickling NumPy objects)."""
        return {"iteration": self.iteration, "cursor": self.cursor, "seed": self.seed,
                "global_batch_size": self.global_batch_size, "epochs_per_iter": self.epochs_per_iter,
                "rng": _plain(self._rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("global_batch_size", "epochs_per_iter"):
            if state[key] != getattr(self, key):
                raise UserError(f"cannot resume the sampler: {key} was {state[key]}, now {getattr(self, key)}")
        self.seed = state["seed"]
        self.iteration, self.cursor = state["iteration"], state["cursor"]
        self._rng = self._new_rng(self.iteration, stream=1)
        self._rng.bit_generator.state = state["rng"]
        self._order = None  # rebuilt lazily from (seed, iteration)


def _plain(state: Any) -> Any:
    """A bit generator's state with its NumPy arrays as lists (numpy's setter takes either)."""
    if isinstance(state, dict):
        return {k: _plain(v) for k, v in state.items()}
    return state.tolist() if isinstance(state, np.ndarray) else state


def rank_windows(total: int, window: int, rank: int = 0, world_size: int = 1,
                 max_windows: int | None = None) -> Iterator[np.ndarray]:
    """Example indices of rank r's share of each sequential window of `window` examples: rows
    [start + r*B, start + (r+1)*B) clipped to the split, B = window / world_size, possibly empty.
    Every evaluation reads a split this way (ARC's padded batches here, the puzzles' chunks of whole
    examples with their test-time copies, LoopViT's canvases), so rank 0 gathering each window's
    shares in rank order has the split in example order (`eval.predict.predict_sharded`)."""
    if window % world_size:
        raise UserError(f"global batch size {window} is not divisible by the world size {world_size}")
    B = window // world_size
    for k, start in enumerate(range(0, total, window)):
        if max_windows is not None and k >= max_windows:
            return
        end = min(start + window, total)
        yield np.arange(min(start + rank * B, end), min(start + (rank + 1) * B, end), dtype=np.int64)


def window_batch(split: Any, idx: np.ndarray, local_batch_size: int) -> Batch:
    """`collate` of examples `idx` with their puzzle ids looked up, padded to the local batch."""
    pi = np.asarray(split.puzzle_indices, dtype=np.int64)
    puzzle = np.searchsorted(pi, idx, side="right") - 1
    return collate(split, idx, np.asarray(split.puzzle_identifiers, dtype=np.int32)[puzzle], local_batch_size)


def sequential_batches(split: Any, global_batch_size: int, rank: int = 0, world_size: int = 1,
                 max_batches: int | None = None) -> Iterator[Batch]:
    """Sequential batches over every example of a split, rank-sharded and padded (spec 2)."""
    B = global_batch_size // world_size
    for idx in rank_windows(int(split.num_examples), global_batch_size, rank, world_size, max_batches):
        yield window_batch(split, idx, B)
