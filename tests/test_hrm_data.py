"""HRM batching (spec 2): full global batches, one puzzle per group per epoch, all of a puzzle's
examples, rank sharding, exact resume, padded sequential test batches."""

import numpy as np
import pytest

from hrm_deeploop.data.batches import TrainSampler, collate, sequential_batches
from tests.hrm_helpers import make_dataset, stand_in_open_split


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = make_dataset(tmp_path_factory.mktemp("data"), num_tasks=6, num_aug=2, train_per_puzzle=3,
                        test_per_puzzle=2, canvas=4)
    return stand_in_open_split(root, "train"), stand_in_open_split(root, "test")


def _puzzle_of(split, idx):
    return np.searchsorted(np.asarray(split.puzzle_indices), idx, side="right") - 1


def test_train_batches_follow_the_spec(split):
    train, _ = split
    gi = np.asarray(train.group_indices)
    s = TrainSampler(train, global_batch_size=5, seed=0, epochs_per_iter=1)
    seen_groups: dict[int, set] = {}
    for _ in range(12):
        idx, pids = s.next_global()
        it = s.iteration  # a batch never spans iterations (the short one is dropped)
        assert len(idx) == 5
        puzzles = _puzzle_of(train, idx)
        assert np.array_equal(np.asarray(train.puzzle_identifiers)[puzzles], pids)
        # consecutive runs from one puzzle, each a new group visit (a truncated puzzle's rest is
        # dropped, never continued); every run but the last is the puzzle's complete example set
        runs = np.split(puzzles, np.flatnonzero(np.diff(puzzles)) + 1)
        seen = seen_groups.setdefault(it, set())
        for k, r in enumerate(runs):
            p = r[0]
            size = train.puzzle_indices[p + 1] - train.puzzle_indices[p]
            assert len(r) == size or k == len(runs) - 1
            assert len(np.unique(idx[puzzles == p])) == len(r)
            g = int(np.searchsorted(gi, p, side="right") - 1)
            assert g not in seen, "a group visited twice in one epoch"
            seen.add(g)
    assert s.iteration >= 1  # 6 groups x 3 examples = 18 rows -> 3 batches of 5 per iteration


def test_rank_sharding_and_collate(split):
    train, _ = split
    whole = TrainSampler(train, 6, seed=3, rank=0, world_size=1).next_batch()
    parts = [TrainSampler(train, 6, seed=3, rank=r, world_size=2).next_batch() for r in range(2)]
    for k in ("inputs", "labels", "puzzle_identifiers"):
        joined = np.concatenate([p.tensors[k].numpy() for p in parts])
        assert np.array_equal(joined, whole.tensors[k].numpy())
    t = whole.tensors
    assert all(str(v.dtype) == "torch.int32" for v in t.values())
    assert (t["labels"] == 0).sum() == 0
    assert (t["labels"] == -100).any()


def test_seeded_and_resumable(split):
    train, _ = split
    a = TrainSampler(train, 4, seed=1)
    first = [a.next_global()[0] for _ in range(7)]
    b = TrainSampler(train, 4, seed=1)
    for _ in range(3):
        b.next_global()
    state = b.state_dict()
    c = TrainSampler(train, 4, seed=1)
    c.load_state_dict(state)
    for k in range(3, 7):
        assert np.array_equal(c.next_global()[0], first[k])
    other = [TrainSampler(train, 4, seed=2).next_global()[0] for _ in range(1)]
    assert not np.array_equal(other[0], first[0])


def test_test_batches_padded_and_complete(split):
    _, test = split
    n = test.num_examples
    rows = []
    for r in range(2):
        for b in sequential_batches(test, 8, rank=r, world_size=2):
            assert b.tensors["inputs"].shape[0] == 4
            pad = b.index < 0
            assert np.all(b.tensors["puzzle_identifiers"].numpy()[pad] == 0)
            assert np.all(b.tensors["labels"].numpy()[pad] == -100)
            assert b.num_valid == int((~pad).sum())
            rows += list(b.index[~pad])
    assert sorted(rows) == list(range(n))
    b = collate(test, np.array([0]), np.array([7], dtype=np.int32), 2)
    assert b.num_valid == 1 and b.tensors["puzzle_identifiers"].tolist() == [7, 0]
