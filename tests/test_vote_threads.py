"""eval.arc.threads: the vote's worker threads behave as the ThreadPoolExecutor they replace (values in
submission order, a job's exception raised by its result(), every job done when the block ends), and
a plain vote imports neither concurrent.futures nor subprocess (their import was start-up time)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from eval.arc.threads import Workers


def test_results_in_order_and_kwargs():
    with Workers(2, "t") as pool:
        jobs = [pool.submit(lambda i, scale=1: i * scale, i, scale=3) for i in range(50)]
        assert [j.result() for j in jobs] == [3 * i for i in range(50)]


def test_a_jobs_exception_is_raised_by_its_result_and_spares_the_others():
    def f(i):
        if i == 3:
            raise ValueError("three")
        return i

    with Workers(2, "t") as pool:
        jobs = [pool.submit(f, i) for i in range(6)]
        with pytest.raises(ValueError, match="three"):
            jobs[3].result()
        assert [jobs[i].result() for i in (0, 1, 2, 4, 5)] == [0, 1, 2, 4, 5]


def test_leaving_the_block_waits_for_every_job_and_ends_the_threads():
    done = []
    before = threading.active_count()
    with Workers(2, "t") as pool:
        for i in range(4):
            pool.submit(lambda i: (time.sleep(0.02), done.append(i)), i)
    assert sorted(done) == [0, 1, 2, 3]
    assert threading.active_count() == before


def test_the_block_waits_even_when_its_body_raises():
    done = []
    with pytest.raises(RuntimeError), Workers(1, "t") as pool:
        pool.submit(lambda: (time.sleep(0.05), done.append(1)))
        raise RuntimeError("body")
    assert done == [1]


def test_a_plain_vote_start_imports_no_executor_nor_subprocess():
    code = ("import sys; import eval.arc.vote, eval.arc.report, eval.arc.decode, arc_data.native, "
            "arc_data.files.locks, hrm_deeploop.cli; "
            "print(sorted(m for m in ('concurrent.futures', 'subprocess', 'socket', 'difflib', 'eval.arc.poe') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tasks_json_reads_the_columns_as_the_candidates_give_them():
    """report._top (tasks.json's candidates from the vote's columns, no `Candidate` made) yields the
    values and the Python types the candidates themselves have, for every prefix and past the end."""
    import numpy as np

    from eval.arc.report import _top
    from eval.arc.results import Columns, Ranked

    grid = np.zeros((2, 2), np.uint8)
    col = lambda *v, dt=np.int64: np.array(v, dt)  # noqa: E731
    columns = Columns(col(1, 5, 9, dt=np.uint64), col(2, 6, 2**64 - 1, dt=np.uint64), col(3, 2, 1),
                      col(0.25, 0.5, 0.123456789, dt=np.float64), col(7, 0, 4), col(2, 0, 30, dt=np.uint8),
                      col(2, 0, 1, dt=np.uint8), [grid, None, None])
    for lo, hi in ((0, 3), (1, 3), (2, 2)):
        for n in range(5):
            ranked = Ranked(columns, lo, hi)
            got = list(_top(ranked, n))
            want = [(c.key, c.votes, c.mean_q, c.first_seen, c.shape, c.grid) for c in ranked[:n]]
            assert got == [w[:5] + (w[5],) for w in want] and len(got) == min(n, hi - lo)
            assert [type(v) for g in got for v in (*g[0], g[1], g[2], g[3], *g[4])] == \
                [type(v) for w in want for v in (*w[0], w[1], w[2], w[3], *w[4])]
            assert all(g[5] is w[5] for g, w in zip(got, want))
            assert list(_top(ranked[:], n)) == got  # a plain list of candidates: the same
