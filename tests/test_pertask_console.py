"""The console line and `result.json` reason of a failed task (`pertask/pool.py`): a long reason is cut,
but its trailing `(log: PATH)` stays whole, since the log is what the user opens next (issue 61's
new-user audit: a canvas error cut at 200 characters printed `(log: out_t/; 0 left`)."""

from hrm_deeploop.pertask import plan, pool

LOG = "out/tasks/" + "a" * 200 + "/log.txt"


def test_a_long_reason_keeps_its_log_path_whole():
    why = "hrm-deeploop train-vit: error: " + "the grid is off the canvas " * 12 + f"(log: {LOG})"
    line = pool.first_line(RuntimeError(why + "\nTraceback (most recent call last): ..."))
    assert line.endswith(f"(log: {LOG})") and line.startswith("hrm-deeploop train-vit: error: the grid"), line
    assert "..." in line and len(line) < len(why) and "\n" not in line
    assert plan.clip(why, 300).endswith(f"(log: {LOG})")


def test_a_short_reason_or_one_without_a_log_is_as_before():
    assert pool.first_line(RuntimeError("short (log: x/log.txt)\nmore")) == "short (log: x/log.txt)"
    assert pool.first_line(RuntimeError("b" * 500)) == "b" * 197 + "..."
    assert pool.first_line(RuntimeError()) == "RuntimeError"


def test_the_preset_line_of_views_official_names_only_what_applies():
    """views=official trains by the official loop's epochs, 51 views and batch: the preset line used to print
    `steps=25 batch=8 num_aug=8 passes=1, warm-up 3 step(s), no checkpoint before the last step` there."""
    from hrm_deeploop.pertask import presets

    c = presets.choose("auto", "cpu", 20_000, {"passes": 1}, [])
    official = presets.line(c, views="official")
    assert "passes=1" in official and "1 torch thread" in official, official
    assert not any(w in official for w in ("steps=", "batch=", "num_aug=", "warm-up", "no checkpoint before", "workers=N")), official
    build = presets.line(c)
    assert "steps=25 batch=8 num_aug=8 passes=1, warm-up 3 step(s)" in build and "workers=N" in build, build


def test_the_fallback_count_says_it_spans_both_rankings():
    """A task of one test input and no valid grid fills 2 attempts by each rule: the console said
    `4 attempt(s) from the fallback` for a task whose submission holds 2."""
    from hrm_deeploop.pertask import plan, worker

    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}
    res = {"status": "trained", "ranked": [[[]]], "ranked_poe": [[[]]]}
    worker.fill_attempts(res, task)
    assert res["status"] == "trained-no-grid" and res["fallback_attempts"] == 4
    assert plan.fallback_note(res) == ", 4 attempt(s) from the fallback over both rankings"
    alone = {"status": "trained", "ranked": [[[[5]]]]}
    worker.fill_attempts(alone, task)
    assert plan.fallback_note(alone) == ", 1 attempt(s) from the fallback" and plan.is_grid([[5]])
    assert plan.fallback_note({"fallback_attempts": 0}) == ""


def test_the_lanes_record_keeps_a_failed_tasks_log_path_whole(tmp_path):
    """`ttt views=build copies=K` writes a failed task's result through `build_lanes.Engine.record`; its
    reason was cut at 300 characters, so a long task folder lost the end of its `(log: PATH)`."""
    from hrm_deeploop.pertask import build_lanes

    tid = "t" * 120
    log = plan.task_dir(tmp_path, tid) / "log.txt"
    why = "train-vit: error: " + "the grid is off the canvas " * 8 + f"(log: {log})"
    engine = build_lanes.Engine.__new__(build_lanes.Engine)  # only what `record` reads
    engine.out, engine.said = tmp_path, lambda tid, res: None
    engine.tasks = {tid: {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}}
    engine.record(tid, "failed", why)
    reason = plan.finished(tmp_path, tid)["reason"]
    assert len(why) > 300 and reason.endswith(f"(log: {log})") and "..." in reason, reason


def test_workers_beside_copies_is_said_unused(capsys, monkeypatch):
    """`workers=N` with `copies=K` (or `official.copies=K`) was silently unused: one process steps the
    lanes. The engine is stood in for (what it runs is not this test's); the line comes first."""
    from hrm_deeploop.pertask import batched, build_lanes, run
    from hrm_deeploop.pertask.ttt_config import PerTaskConfig, PerTaskOfficial

    for mod in (batched, build_lanes):
        monkeypatch.setattr(mod, "run_shard", lambda *a, **k: {})
    for cfg, name in ((PerTaskConfig(workers=2, copies=2), "copies=2"),
                      (PerTaskConfig(workers=2, views="official", official=PerTaskOfficial(copies=0)), "official.copies=0")):
        run.any_shard(cfg, 0, 1, {})
        assert f"ttt: workers=2 is not used with {name}" in capsys.readouterr().out
    run.any_shard(PerTaskConfig(workers=1, copies=2), 0, 1, {})
    assert "workers" not in capsys.readouterr().out
