"""`eval.arc.grouping.group_rows`: the same groups, each with its rows in the same (ascending) order, as the
stable lexsort the vote used before (`_lexsort_groups` below), keys equal in one part and not the others
included; the ahead-of-time export writes what numba's JIT writes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from arc_data import native
from eval.arc import grouping
from eval.arc.grouping import group_rows


def _lexsort_groups(a: np.ndarray, keys: np.ndarray) -> list[list[int]]:
    """The vote's grouping before: a stable sort by (a, k1, k2), runs of equal keys (rows ascending)."""
    order = np.lexsort((keys[:, 1], keys[:, 0], a))
    change = np.zeros(len(order), bool)
    change[:1] = True
    for c in (a, keys[:, 0], keys[:, 1]):
        s = c[order]
        change[1:] |= s[1:] != s[:-1]
    starts = np.flatnonzero(change).tolist() + [len(order)]
    return [order[s:e].tolist() for s, e in zip(starts[:-1], starts[1:])]


def _groups(order: np.ndarray, starts: np.ndarray) -> list[list[int]]:
    bounds = starts.tolist() + [len(order)]
    return [order[s:e].tolist() for s, e in zip(bounds[:-1], bounds[1:])]


def _keys(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n rows drawn from few distinct keys, some equal in k1 only, in k2 only, or in (k1, k2) but not a."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**63, size=(max(n // 5, 1), 2), dtype=np.int64).astype(np.uint64)
    pick = rng.integers(0, len(base), size=n)
    keys = base[pick].copy()
    twist = rng.random(n)
    keys[twist < 0.1, 1] ^= np.uint64(1)  # the same k1, another k2
    keys[(twist >= 0.1) & (twist < 0.2), 0] ^= np.uint64(1 << 40)  # the same k2, another k1
    a = rng.integers(0, 4, size=n).astype(np.int64)  # the same (k1, k2) under another a
    return a, keys


@pytest.mark.parametrize("seed, n", [(0, 0), (1, 1), (2, 2), (3, 50), (4, 1000), (5, 4096)])
def test_groups_are_the_stable_sorts(seed, n):
    a, keys = _keys(seed, n)
    order, starts = group_rows(a, keys)
    got = _groups(order, starts)
    want = _lexsort_groups(a, keys)
    assert sorted(got) == sorted(want)  # the same groups, rows ascending in each
    assert [g[0] for g in got] == sorted(g[0] for g in got)  # groups by their first rows
    assert sorted(order.tolist()) == list(range(n))


def test_all_rows_one_key_and_all_distinct():
    n = 300
    same = group_rows(np.zeros(n, np.int64), np.zeros((n, 2), np.uint64))
    assert _groups(*same) == [list(range(n))]
    keys = np.stack([np.arange(n), np.arange(n)[::-1]], axis=1).astype(np.uint64)
    distinct = group_rows(np.full(n, 7, np.int64), keys)
    assert _groups(*distinct) == [[i] for i in range(n)]


def test_the_export_is_the_jit():
    if os.environ.get(native.ENV, "1") == "0" or native.function(grouping._group_rows.py_func) is None:
        pytest.skip("no ahead-of-time module here (no C compiler, or HRM_DEEPLOOP_NATIVE=0)")
    export = native.function(grouping._group_rows.py_func)
    kernel = grouping._group_rows  # a stand-in, or numba's dispatcher once any kernel went through numba
    jit = kernel.dispatcher if hasattr(kernel, "dispatcher") else kernel
    a, keys = _keys(9, 777)
    a.flags.writeable = False
    keys.flags.writeable = False
    results = []
    for fn in (export, jit):
        out = (np.empty(777, np.int64), np.empty(777, np.int64), np.zeros(1, np.int64))
        assert fn is jit or fn.accepts((a, keys, *out))
        fn(a, keys, *out)
        results.append(out)
    (order, starts, count), (order_jit, starts_jit, count_jit) = results
    assert count[0] == count_jit[0] and np.array_equal(order, order_jit)
    assert np.array_equal(starts[:count[0]], starts_jit[:count[0]])  # past the groups: not written
