"""The console line and `result.json` reason of a failed task (`pertask/pool.py`): a long reason is cut,
but its trailing `(log: PATH)` stays whole, since the log is what the user opens next (issue 61's
new-user audit: a canvas error cut at 200 characters printed `(log: out_t/; 0 left`)."""

from hrm_deeploop.pertask import pool

LOG = "out/tasks/" + "a" * 200 + "/log.txt"


def test_a_long_reason_keeps_its_log_path_whole():
    why = "hrm-deeploop train-vit: error: " + "the grid is off the canvas " * 12 + f"(log: {LOG})"
    line = pool.first_line(RuntimeError(why + "\nTraceback (most recent call last): ..."))
    assert line.endswith(f"(log: {LOG})") and line.startswith("hrm-deeploop train-vit: error: the grid"), line
    assert "..." in line and len(line) < len(why) and "\n" not in line
    assert pool.clip(why, 300).endswith(f"(log: {LOG})")


def test_a_short_reason_or_one_without_a_log_is_as_before():
    assert pool.first_line(RuntimeError("short (log: x/log.txt)\nmore")) == "short (log: x/log.txt)"
    assert pool.first_line(RuntimeError("b" * 500)) == "b" * 197 + "..."
    assert pool.first_line(RuntimeError()) == "RuntimeError"
