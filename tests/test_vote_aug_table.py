"""The augmentation table's permutation check (`arc_data.originals.all_permutations`, read by every vote):
the sorted-rows rule it replaced, on permutations and on rows that are not (a colour twice, a colour
past 9, negative values, other shapes); and `load_aug_table` refusing such a row in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arc_data import format as fmt
from arc_data.errors import DatasetError
from arc_data.originals import IDENTITY_COLOURS, all_permutations, load_aug_table


def _sorted_rule(cm: np.ndarray) -> bool:
    return bool((np.sort(cm, axis=1) == IDENTITY_COLOURS).all())


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.int32])
def test_the_sorted_rule(dtype):
    rng = np.random.default_rng(0)
    perms = np.stack([rng.permutation(10) for _ in range(200)]).astype(dtype)
    assert all_permutations(perms) and _sorted_rule(perms)
    assert all_permutations(perms[:0])
    for change in range(60):
        bad = perms.copy()
        r, c = rng.integers(0, 200), rng.integers(0, 10)
        value = [int(bad[r, (c + 1) % 10]), 10, 11, 255 if dtype == np.uint8 else -1, 17][change % 5]
        bad[r, c] = value
        assert all_permutations(bad) == _sorted_rule(bad) is False, (change, value)


def test_other_shapes_follow_the_sorted_rule():
    wide = np.tile(np.arange(12, dtype=np.uint8), (3, 1))
    with pytest.raises(ValueError):  # as np.sort(...) == 0..9 raises for rows of 12
        all_permutations(wide)
    floats = np.tile(np.arange(10, dtype=np.float64), (3, 1))
    assert all_permutations(floats) == _sorted_rule(floats) is True


def test_load_aug_table_refuses_a_row_that_is_not_a_permutation(tmp_path):
    names = ["<blank>", "aaaa_t0_0123456789", "aaaa_t3_9876543210", "bbbb_t1_0123456788"]
    (tmp_path / fmt.IDENTIFIERS_FILE).write_text(json.dumps(names))
    with pytest.raises(DatasetError, match="not a permutation of 0..9"):
        load_aug_table(tmp_path)
    (tmp_path / fmt.IDENTIFIERS_FILE).write_text(json.dumps(names[:3]))
    assert len(load_aug_table(tmp_path)) == 3
