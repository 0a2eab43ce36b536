"""`ttt views=official` with copies (pertask/batched.py) under `time_budget`: a task's share is wall
time, and its lanes step together, so each run's deadline is set from the wall time the task has
spent, not from its share of the steps (`Lane.train_s`, a K-th of the wall at K lanes). Issue 61's
audit: 4 tasks in 4 lanes, `time_budget=0.6` (36 s), ended at 44 s; one at a time held it (32.7 s)."""

from collections import deque

from hrm_deeploop.pertask.batched import Engine, Job
from tests.test_pertask_copies import CPU, KW, A, B, _start, _views

SHARE = 1.0  # seconds of training a task is given


def test_a_tasks_runs_end_within_its_wall_share_in_the_lanes(monkeypatch):
    model = _start()
    engine = Engine(model, 2, CPU, views_of=_views, **{**KW, "epochs": 10_000, "passes": 1})
    spans: list[tuple[str, int, float]] = []
    start_run = engine._start_run

    def recorded(i, lane):
        start_run(i, lane)
        spans.append((lane.job.tid, lane.run, lane.run_deadline - lane.started))

    monkeypatch.setattr(engine, "_start_run", recorded)
    out = {}
    engine.run(deque([Job("a", A), Job("b", B)]), lambda j, r, e: out.__setitem__(j.tid, r or e),
               share=lambda job, busy: SHARE)
    assert set(out) == {"a", "b"} and all(isinstance(r, dict) for r in out.values()), out
    assert {run for _, run, _ in spans} == {0, 1}, spans  # both runs of each task started
    late = [(t, run, round(s, 3)) for t, run, s in spans if s > SHARE + 1e-3]
    assert not late, f"a run's deadline past its task's wall share of {SHARE} s: {late}"
    assert all(r["runs"][1]["stop"] == "deadline" for r in out.values())
