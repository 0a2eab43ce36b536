"""The plan of a per-task run, torch-free: which tasks this process owns, what is finished, how
much time each task gets, what a task that never trained submits, and the merged submission.

A task is finished when `tasks/<id>/result.json` exists: it is written atomically, last, so a
task killed half-way has none and is redone from scratch on the next run; a finished task is
never recomputed."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from arc_data.files.jsonio import parse_json, save_json
from hrm_deeploop.errors import UserError

RESULT = "result.json"
PLAN = "ttt_plan.json"
# the settings a task's result depends on: a rerun into the same folder must have the same
IDENTITY = ("checkpoint", "challenges", "num_aug", "steps", "batch", "lr", "trains", "train_overrides",
            "eval_overrides", "protocol", "seed", "leave_one_out", "passes", "poe", "views", "official")
# identity keys added since the first runs: an older plan had their defaults (its tasks' results
# hold count-first fields only, which `merge` gives for both rules); `official` counts with
# views=official only
LATER = {"leave_one_out": False, "passes": 10, "poe": True, "views": "build", "official": None}
LOO = "-loo"  # a pseudo-task's id: <task>-loo<i>


def load_challenges(path: str | os.PathLike) -> dict[str, dict]:
    """Task id -> {"train": [...], "test": [...]}, refusing a file with no task or a malformed one."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserError(f"challenges={p}: cannot read it ({e.strerror or e})") from None
    tasks = parse_json(raw, f"challenges={p}")
    if not isinstance(tasks, dict) or not tasks:
        raise UserError(f"challenges={p}: not an object of tasks, or no task in it")
    for tid, t in tasks.items():
        if not isinstance(t, dict) or not isinstance(t.get("train"), list) or not isinstance(t.get("test"), list) \
                or not t["test"] or not all(isinstance(x, dict) and "input" in x for x in t["test"]):
            raise UserError(f"challenges={p}: task {tid}: needs 'train' and a non-empty 'test' list of inputs")
    return tasks


def claim(out: Path, cfg) -> None:
    """Make `out` this run's folder, or check that it is: a folder holding anything else than an
    earlier run of the same set with the same settings (its `ttt_plan.json`) is refused in one line,
    so a resume never mixes two sets of results and never writes into a stranger's folder."""

    marker = out / PLAN
    identity = {k: getattr(cfg, k) for k in IDENTITY}
    identity["official"] = dataclasses.asdict(cfg.official) if cfg.views == "official" else None
    identity["challenges_sha256"] = hashlib.sha256(Path(cfg.challenges).read_bytes()).hexdigest()
    if marker.is_file():
        before = parse_json(marker.read_bytes(), str(marker))
        diff = sorted(k for k in identity if before.get(k, LATER.get(k)) != identity[k])
        if diff:
            raise UserError(f"output_dir={out}: holds a ttt run with other {', '.join(diff)} ({PLAN}); rerun with its "
                            "settings to resume it, or choose another folder")
        return
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"output_dir={out}: not empty and not a ttt run (no {PLAN}): choose a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    save_json(marker, identity)


def shard(ids: list[str], index: int, count: int) -> list[str]:
    """The tasks of shard `index` of `count` (a torchrun rank, a job of the array): every count-th."""
    return ids[index::count]


def task_dir(out: Path, tid: str) -> Path:
    return out / "tasks" / tid


def finished(out: Path, tid: str) -> dict | None:
    """The task's result, or None when it has none (never run, or killed before its end)."""
    f = task_dir(out, tid) / RESULT
    if not f.is_file():
        return None
    return parse_json(f.read_bytes(), str(f))


def write_result(out: Path, tid: str, result: dict) -> None:
    task_dir(out, tid).mkdir(parents=True, exist_ok=True)
    save_json(task_dir(out, tid) / RESULT, result)


def leave_one_out(tid: str, task: dict) -> dict[str, dict]:
    """The task's pseudo-tasks: for each demonstration i (when there are two or more), `<tid>-loo<i>`
    with the other demonstrations as its own and demonstration i, its output given, as its test."""
    demos = task["train"]
    if len(demos) < 2:
        return {}
    return {f"{tid}{LOO}{i}": {"train": demos[:i] + demos[i + 1:], "test": [demos[i]]} for i in range(len(demos))}


def run_model(checkpoint: str) -> str | None:
    """The model a run folder (or its checkpoints/step_N.pt) trained (`loopvit` for train-vit, `hrm`,
    `trm`, `urm`, ...), from the run's config (`training.inherit.run_config`, torch-free, no weights
    read); for a file with no run around it, `loopvit` when the safe loader reads it as an official
    LoopViT checkpoint (`{model_state, config}`); None otherwise."""
    from hrm_deeploop.training.inherit import run_config  # lazy: plan stays light (ttt's resume checks)

    found = run_config(str(checkpoint))
    if not found and Path(checkpoint).is_file():
        from hrm_deeploop import checkpoint as ckpt  # lazy: torch only for a bare checkpoint file
        from hrm_deeploop.loading import is_official_loopvit  # lazy: torch only for a bare checkpoint file

        state = ckpt.load(Path(checkpoint))
        return "loopvit" if isinstance(state, dict) and is_official_loopvit(state) else None
    model = found[1].get("model") if found else None
    return model.get("name") if isinstance(model, dict) else None


def fallback_attempts(task: dict) -> list[dict]:
    """What a task that never trained submits: its test input as both attempts (the identity is
    right on some ARC tasks; an empty answer never is), so the submission is always complete."""
    return [{"attempt_1": t["input"], "attempt_2": t["input"]} for t in task["test"]]


@dataclass
class Budget:
    """Shares of a whole-set time budget. `share(left_tasks)`: minutes for the next task's training,
    the time left spread over the rounds of `workers` tasks still to run, less what each task
    spends outside training (build, start-up, prediction), estimated from the tasks finished."""

    total_min: float | None
    workers: int
    start: float  # time.monotonic() at the start
    overhead_s: float = 0.0  # mean seconds outside training per finished task
    _seen: int = 0

    def left_min(self, now: float) -> float:
        return math.inf if self.total_min is None else self.total_min - (now - self.start) / 60

    def share(self, left_tasks: int, now: float) -> float:
        if self.total_min is None:
            return math.inf
        rounds = math.ceil(max(left_tasks, 1) / self.workers)
        return self.left_min(now) / rounds - self.overhead_s / 60

    def record(self, total_s: float, train_s: float) -> None:
        self._seen += 1
        self.overhead_s += (max(total_s - train_s, 0.0) - self.overhead_s) / self._seen


def merge(out: Path, tasks: dict[str, dict], suffix: str = "") -> tuple[dict, dict, dict[str, int]]:
    """By one scoring rule (`suffix`: "" count-first, "_poe" the product of experts; a result
    without that rule's fields gives its count-first ones): the submission over every task of
    `tasks`, the ranked candidates, both with fallbacks for tasks that never trained, and the count
    of tasks by status."""
    sub, ranked, counts = {}, {}, {}
    for tid, task in tasks.items():
        r = finished(out, tid)
        status = r["status"] if r else "missing"
        attempts = r.get("attempts" + suffix, r["attempts"]) if r else fallback_attempts(task)
        sub[tid] = attempts
        ranked[tid] = (r.get("ranked" + suffix, r.get("ranked")) if r else None) \
            or [[a["attempt_1"]] for a in attempts]
        counts[status] = counts.get(status, 0) + 1
    return sub, ranked, counts


AUGMENTED = re.compile(r"^(.*)_t\d+_\d{10}$")  # <task>_t<dihedral>_<10 colour digits> (arc_data.originals)


def seen_in_pretraining(names: list[str], ids: list[str]) -> list[str]:
    """The task ids among `ids` named (as themselves or as an augmentation `<id>_t<d>_<colours>`)
    among the checkpoint's trained puzzle names."""
    base = {m.group(1) if (m := AUGMENTED.match(n)) else n for n in names}
    return [t for t in ids if t in base]
