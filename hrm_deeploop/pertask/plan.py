"""The plan of a per-task run, torch-free: which tasks this process owns, what is finished, how
much time each task gets, what a task that never trained submits, and the merged submission.

A task is finished when `tasks/<id>/result.json` exists with a final status (`FINAL`): it is
written atomically, last, so a task killed half-way has none and is redone from scratch on the next
run; a finished task is never recomputed. A result that is not final (`fallback`: the budget was
spent before it ran or while it ran; `error`: it failed for a reason outside itself, a full disk,
memory, a signal) holds the fallback attempts for the merge, and a rerun retries the task."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from arc_data.files.atomic import atomic_file
from arc_data.files.jsonio import parse_json
from arc_data.files.locks import LOCK_FILE
from arc_data.format import MAX_SIDE
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask.challenges import read_challenges

RESULT = "result.json"
PLAN = "ttt_plan.json"
# the settings a task's result depends on: a rerun into the same folder must have the same
IDENTITY = ("checkpoint", "challenges", "num_aug", "steps", "batch", "lr", "trains", "train_overrides",
            "eval_overrides", "protocol", "seed", "leave_one_out", "passes", "poe", "views", "official")
# identity keys added since the first runs: an older plan had their defaults (its tasks' results
# hold count-first fields only, which `merge` gives for both rules); `official` counts with
# views=official only
LATER = {"leave_one_out": False, "passes": 10, "poe": True, "views": "build", "official": None}
# official.* keys added since: an older plan had these (early stop off); `copies` is no identity (a
# task's result is the same with any number of batch-mates: tests/test_pertask_copies.py)
OFFICIAL_LATER = {"stop_after": 0, "stop_fit": "exact", "stop_share": 1.0}
LOO = "-loo"  # a pseudo-task's id: <task>-loo<i>
FINAL = ("trained", "trained-no-grid", "failed")  # statuses of a finished task; any other is retried


def load_challenges(path: str | os.PathLike) -> dict[str, dict]:
    """Task id -> {"train": [...], "test": [...]}, the whole file validated first (`challenges`): a task
    id that is no plain name, a malformed grid or task, a file that is not a regular one is one line."""
    return read_challenges(path)


def identity_of(cfg, challenges: bytes, checkpoint_sha256: str) -> dict:
    """What a set's results depend on (`IDENTITY`), the challenges' and the checkpoint's content included."""
    identity = {k: getattr(cfg, k) for k in IDENTITY}
    identity["official"] = official_identity(dataclasses.asdict(cfg.official)) if cfg.views == "official" else None
    identity["challenges_sha256"] = hashlib.sha256(challenges).hexdigest()
    identity["checkpoint_sha256"] = checkpoint_sha256
    return identity


def official_identity(official: dict | None) -> dict | None:
    """The official.* settings a result depends on: the older plans' missing keys at their defaults
    then, `copies` left out."""
    if official is None:
        return None
    return {k: v for k, v in (OFFICIAL_LATER | official).items() if k != "copies"}


def check_claim(out: Path, identity: dict) -> bool:
    """May this set write into `out`? True when `out` holds an earlier run of the same set with the same
    settings and the same checkpoint content (its `ttt_plan.json`: a resume), False when it is new or
    empty; anything else is refused in one line, so a resume never mixes two sets' or two models'
    results and never writes into a stranger's folder."""
    marker = out / PLAN
    if marker.is_file():
        before = parse_json(marker.read_bytes(), str(marker))
        before["official"] = official_identity(before.get("official"))
        diff = sorted(k for k in identity if before.get(k, LATER.get(k)) != identity[k])
        if "checkpoint_sha256" in diff:
            raise UserError(f"output_dir={out}: its set was trained from other weights (the checkpoint's sha256 "
                            f"differs from the one in {PLAN}, or was not recorded): a resume would merge two models' "
                            "results; choose another folder")
        if diff:
            raise UserError(f"output_dir={out}: holds a ttt run with other {', '.join(diff)} ({PLAN}); rerun with its "
                            "settings to resume it, or choose another folder")
        return True
    if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()):
        raise UserError(f"output_dir={out}: not empty and not a ttt run (no {PLAN}): choose a new or empty folder")
    return False


def claim(out: Path, identity: dict) -> None:
    """Record the set's identity in `out` (after `check_claim`, holding the folder's lock)."""
    if not (out / PLAN).is_file():
        write_json(out / PLAN, identity)


def write_json(path: Path, obj: object) -> None:
    """`path` written atomically (`arc_data.files.atomic.atomic_file`): whole or not at all."""
    with atomic_file(path) as f:
        f.write((json.dumps(obj, indent=2) + "\n").encode())


def shard(ids: list[str], index: int, count: int) -> list[str]:
    """The tasks of shard `index` of `count` (a torchrun rank, a job of the array): every count-th."""
    return ids[index::count]


def task_dir(out: Path, tid: str) -> Path:
    return out / "tasks" / tid


def result(out: Path, tid: str) -> dict | None:
    """The task's result, final or not, or None when it has none (never run, or killed before its end)."""
    f = task_dir(out, tid) / RESULT
    if not f.is_file():
        return None
    return parse_json(f.read_bytes(), str(f))


def finished(out: Path, tid: str) -> dict | None:
    """The task's result when it is final (`FINAL`): None for a task to run (again)."""
    r = result(out, tid)
    return r if r is not None and r.get("status") in FINAL else None


def write_result(out: Path, tid: str, result: dict) -> None:
    task_dir(out, tid).mkdir(parents=True, exist_ok=True)
    write_json(task_dir(out, tid) / RESULT, result)


def leave_one_out(tid: str, task: dict) -> dict[str, dict]:
    """The task's pseudo-tasks: for each demonstration i (when there are two or more), `<tid>-loo<i>`
    with the other demonstrations as its own and demonstration i, its output given, as its test."""
    demos = task["train"]
    if len(demos) < 2:
        return {}
    return {f"{tid}{LOO}{i}": {"train": demos[:i] + demos[i + 1:], "test": [demos[i]]} for i in range(len(demos))}


def is_grid(g: object) -> bool:
    """A grid an ARC answer can be: a non-empty rectangular list of lists of ints 0..9, sides up to 30."""
    return (isinstance(g, list) and 0 < len(g) <= MAX_SIDE and isinstance(g[0], list) and 0 < len(g[0]) <= MAX_SIDE
            and all(isinstance(r, list) and len(r) == len(g[0])
                    and all(type(x) is int and 0 <= x <= 9 for x in r) for r in g))


def fallback_attempts(task: dict) -> list[dict]:
    """What a task that never trained submits: its test input as both attempts (the identity is
    right on some ARC tasks; an empty answer never is), so the submission is always complete."""
    return [{"attempt_1": t["input"], "attempt_2": t["input"]} for t in task["test"]]


def merge(out: Path, tasks: dict[str, dict], suffix: str = "") -> tuple[dict, dict, dict[str, int]]:
    """By one scoring rule (`suffix`: "" count-first, "_poe" the product of experts; a result
    without that rule's fields gives its count-first ones): the submission over every task of
    `tasks`, the ranked candidates, both with fallbacks for tasks that never trained, and the count
    of tasks by status."""
    sub, ranked, counts = {}, {}, {}
    for tid, task in tasks.items():
        r = result(out, tid)
        status = r["status"] if r else "missing"
        attempts = r.get("attempts" + suffix, r["attempts"]) if r else fallback_attempts(task)
        sub[tid] = attempts
        ranked[tid] = (r.get("ranked" + suffix, r.get("ranked")) if r else None) \
            or [[a["attempt_1"]] for a in attempts]
        counts[status] = counts.get(status, 0) + 1
    return sub, ranked, counts


def clip(text: str, most: int) -> str:
    """`text` cut to about `most` characters, marked `...`; a trailing `(log: PATH)` kept whole (the
    log is what the user opens next)."""
    if len(text) <= most:
        return text
    head, sep, log = text.rpartition(" (log: ")
    if sep and log.endswith(")") and "\n" not in log:
        return head[:max(most - len(sep) - len(log) - 3, 40)] + "..." + sep + log
    return text[:most - 3] + "..."


def fallback_note(res: dict) -> str:
    """The attempts the test inputs filled in, on the console: `fallback_attempts` counts both rankings'
    (a task of one test input with no grid at all fills 2 + 2), so the line says so."""
    n = res.get("fallback_attempts")
    both = " over both rankings" if "attempts_poe" in res else ""
    return f", {n} attempt(s) from the fallback{both}" if n else ""


def task_note(res: dict) -> str:
    """A trained task's console note, the same for the pool and both kinds of lanes: its status, steps,
    seconds and the attempts the fallback filled in."""
    return (f"{res['status']}, {res['steps']} steps, {res['seconds']:.1f} s ({res['train_seconds']:.1f} s "
            f"training){fallback_note(res)}")
