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
