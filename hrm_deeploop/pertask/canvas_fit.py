"""The tasks a checkpoint cannot hold, known before the first task trains (torch-free).

A family may bound the grids its model takes (`Family.grid_room`: LoopViT's canvas, S - 2 cells a
side, fewer at an evaluation scale). A task with a larger grid would fail in its worker or lane
after its share of the time had been planned for it, with the trainer's hint (`raise
model.image_size`) that a ttt user cannot follow for a pretrained checkpoint. Instead `ttt` names
those tasks in one line before the first task (`line`), writes each the result a task that failed
writes (`failed`, final, its fallback attempts, the reason naming its side and the checkpoint's
room: `record`) and trains only the others, so the submission still covers every task, the time
budget is shared by the tasks that train, and a rerun of the same command skips them.
"""

from __future__ import annotations

from pathlib import Path

from hrm_deeploop.pertask import plan

SHOWN = 5  # task ids named in the line, then a count


def sides(task: dict, leave_one_out: bool) -> tuple[int, int]:
    """(the longest side of its demonstrations, inputs and outputs; the longest of what is predicted:
    its test inputs, and with leave_one_out its held-out demonstrations, outputs included)."""

    def longest(grids) -> int:
        return max((max(len(g), len(g[0]) if g else 0) for g in grids), default=0)

    demos = longest([g for p in task["train"] for g in (p["input"], p["output"])])
    tested = longest([t["input"] for t in task["test"]])
    if leave_one_out and len(task["train"]) > 1:
        tested = max(tested, demos)
    return demos, tested


def misfits(tasks: dict[str, dict], room, leave_one_out: bool) -> dict[str, str]:
    """Task id -> why the checkpoint cannot hold it (`room`: a `families.spec.GridRoom`; None: every
    task fits), in the challenges' order."""
    if room is None:
        return {}
    out = {}
    for tid, task in tasks.items():
        demos, tested = sides(task, leave_one_out)
        over = [f"a {what} side of {n}" for what, n, most in (("demonstration", demos, room.train),
                                                              ("test input", tested, room.test)) if n > most]
        if over:
            fix = room.fix + (f", or {room.test_fix}" if room.test_fix and demos <= room.train else "")
            out[tid] = (f"not trained: {' and '.join(over)}, more than the checkpoint holds ({room.holds}); "
                        f"fallback attempts submitted (to train it: {fix})")
    return out


def line(found: dict[str, str], tasks: dict[str, dict], room, leave_one_out: bool) -> str:
    """The one console line naming the tasks that will not train (up to `SHOWN` ids, then a count)."""
    named = ", ".join(f"{tid} (side {max(sides(tasks[tid], leave_one_out))})" for tid in list(found)[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    which = f"every task ({len(found)})" if len(found) == len(tasks) else f"{len(found)} of {len(tasks)} task(s)"
    then = ": the submission is the fallback attempts alone" if len(found) == len(tasks) else \
        "; the time budget goes to the others"
    test_only = room.test_fix and any(sides(tasks[tid], leave_one_out)[0] <= room.train for tid in found)
    fix = room.fix + (f", or where a test input is over: {room.test_fix}" if test_only else "")
    return (f"ttt: {which} too large for the checkpoint ({room.holds}): {named}{more}: fallback attempts, "
            f"not trained{then} (to train them: {fix})")


def record(out: Path, tasks: dict[str, dict], found: dict[str, str]) -> None:
    """Each task of `found` without a final result gets one: `failed` with its fallback attempts, as a
    task that failed in its worker (pool.py), so the merge takes it and a rerun skips it."""
    for tid, why in found.items():
        if plan.finished(out, tid) is None:
            plan.write_result(out, tid, {"task": tid, "status": "failed", "reason": plan.clip(why, 300),
                                         "attempts": plan.fallback_attempts(tasks[tid])})
