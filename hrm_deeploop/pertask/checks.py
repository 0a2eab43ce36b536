"""Everything `ttt` checks before its first task starts, so that a mistake is one line (exit 2)
before anything is written or deleted, never a set of failed tasks:

- the challenges file (`challenges.py`): a regular file under its size cap (a FIFO or /dev/zero is
  named, never read), every task id a plain name (`arc_data.files.names.check_task_name`, the one
  door from a name to a path: no `/`, no `..`, not empty), every task valid by build-arc's own
  rules (`arc_data.arc.sources.parse_task`: lists of lists of ints 0..9, rectangular, sides 1..30,
  at least one demonstration with its output, at least one test input);
- `solutions` (read and parsed: each task a list of grids);
- the checkpoint: resolved and read once by the safe loader (`hrm_deeploop.checkpoint.load`), its
  sha256 (a resumed set is bound to it) and its parameter count (the presets);
- the options: `train_overrides` / `eval_overrides` composed once into the very `train` / `evaluate`
  configs the workers will run (an unknown key is one line), keys ttt sets itself refused, and
  num_aug within what exists and what `workers` copies fit in memory;
- the tasks the checkpoint cannot hold (`Family.grid_room`, `canvas_fit`): named in one line, not
  refused: they get the fallback attempts without training.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arc_data.budget import check_count, check_fits
from arc_data.errors import DatasetError
from arc_data.files.jsonio import read_json
from arc_data.files.names import check_task_name
from hrm_deeploop import families
from hrm_deeploop.errors import UserError
from hrm_deeploop.pertask import canvas_fit, challenges
from hrm_deeploop.pertask.challenges import as_ours

MAX_DISTINCT_AUG = 8 * 362_880 - 1  # build-arc's: 8 dihedral transforms x 9! colour permutations, less the identity
# keys ttt sets itself in every task's `train` / `evaluate`: set them through ttt's own options
OWN = "each task's own, under output_dir"
OWN_TRAIN_KEYS = {"init_from": "checkpoint=", "data_dir": OWN, "output_dir": OWN, "train.max_steps": "steps=",
                  "train.global_batch_size": "batch=", "train.time_budget": "time_budget=", "seed": "seed=",
                  "device": "device=", "optim.lr": "lr=", "adapt.trains": "trains=", "resume": "a task always starts fresh"}
OWN_EVAL_KEYS = {"checkpoint": "the task's own copy", "data_dir": OWN, "output_dir": OWN, "challenges": OWN,
                 "device": "device=", "poe": "poe=", "passes": "passes=", "tta_seed": "seed="}
# memory of one view of one task in a worker, beyond the model: its embedding row with gradient and
# Adam's two moments (up to 1,024 floats x 4 copies), its examples (two 900-token rows), and at
# prediction its log-probabilities (float16 [900, 12]) and predictions per test row
VIEW_BYTES, EXAMPLE_BYTES, TEST_ROW_BYTES = 16 * 1024, 2 * 900 * 8, 900 * 12 * 2 + 900 * 16


def before_the_first_task(cfg) -> tuple[dict[str, dict], Path, dict, dict[str, str]]:
    """Every check of the module docstring, in order, nothing written; then the preset's sizes set on
    `cfg` (one line says what it chose). Returns the tasks, the output folder, the set's identity and
    the tasks the checkpoint cannot hold (id -> why; one line names them)."""
    from arc_data.files.guard import check_output_dir  # lazy: only the command's entry checks its folder
    from hrm_deeploop.pertask import inprocess, plan, presets, worker  # lazy: plan reads challenges here
    from hrm_deeploop.pertask.strict import check_protocol  # lazy: the strict record reads runs' files

    if not cfg.checkpoint:
        raise UserError("checkpoint: required (the pretrained run folder or checkpoints/step_N.pt)")
    if not cfg.challenges:
        raise UserError("challenges: required (an ARC challenges JSON file)")
    data = challenges.read_regular(Path(cfg.challenges), "challenges", challenges.MAX_CHALLENGES_BYTES)
    tasks = challenges.read_challenges(cfg.challenges)
    if cfg.leave_one_out:
        check_pseudo_task_names(tasks, cfg.challenges)
    out = check_output_dir(cfg.output_dir, [cfg.challenges, cfg.checkpoint, cfg.solutions or None])
    if cfg.solutions:
        sol = read_solutions(cfg.solutions)
        if not set(sol) & set(tasks):
            raise UserError(f"solutions={cfg.solutions}: none of its {len(sol)} task(s) is among the challenges' "
                            f"(e.g. {next(iter(sol))}): the solutions of another set?")
    ckpt = read_checkpoint(cfg.checkpoint)  # first: a checkpoint that is not there is named as such, not by the protocol
    check_protocol(cfg, list(tasks))
    fam = families.of_checkpoint(cfg.checkpoint)
    families.require(fam, "ttt", f"checkpoint '{cfg.checkpoint}'")
    if cfg.views == "official" and not fam.official_loop:
        loops = ", ".join(f.title for f in families.FAMILIES.values() if f.official_loop)
        raise UserError(f"views=official runs the official per-task loop of {loops}; {cfg.checkpoint} holds a "
                        f"{fam.title} model (views=build trains it)")
    chosen = presets.choose(cfg.preset, cfg.device, ckpt.parameters,
                            {k: getattr(cfg, k) for k in presets.SIZES["gpu"]}, cfg.train_overrides, cfg.threads)
    for k, v in chosen.sizes.items():
        setattr(cfg, k, v)
    if chosen.threads is not None:
        cfg.threads = chosen.threads
    cfg.train_overrides = ([f"optim.warmup_steps={chosen.warmup}"] if chosen.warmup is not None else []) \
        + (["checkpoint.every=0"] if chosen.checkpoint_every == 0 else []) + list(cfg.train_overrides)
    check_views(tasks, cfg.num_aug, cfg.workers, ckpt, cfg.leave_one_out)
    trainer = None  # the task trainer's config as composed (views=build)
    if cfg.views == "build":
        tid = next(iter(tasks))
        work = out / "tasks" / tid / worker.WORK
        group = {tid: tasks[tid]} | (plan.leave_one_out(tid, tasks[tid]) if cfg.leave_one_out else {})
        name, train, evaluate = inprocess.commands(cfg, work, 1.0, group, work / "raw" / "challenges.json")
        user = len(cfg.train_overrides)
        trainer = check_overrides([(name, train[:len(train) - user], train[len(train) - user:]),
                                   ("evaluate", evaluate[:len(evaluate) - len(cfg.eval_overrides)],
                                    list(cfg.eval_overrides))])[0]
    room = fam.grid_room(ckpt.file, ckpt.state, trainer, cfg.views) if fam.grid_room else None
    misfits = canvas_fit.misfits(tasks, room, cfg.leave_one_out)
    identity = plan.identity_of(cfg, data, ckpt.sha256)
    plan.check_claim(out, identity)
    print(presets.line(chosen, cfg.views), flush=True)
    if misfits:
        print(canvas_fit.line(misfits, tasks, room, cfg.leave_one_out), flush=True)
    return tasks, out, identity, misfits


def check_pseudo_task_names(tasks: dict[str, dict], where: str) -> None:
    """`leave_one_out=true` names each task's pseudo-tasks `<id>-loo<i>`: each a plain name too (an id
    at the length limit is refused here, not in its worker)."""
    from hrm_deeploop.pertask.plan import leave_one_out  # lazy: as the entry check's `plan` above

    for tid, t in tasks.items():
        for name in leave_one_out(tid, t):
            try:
                check_task_name(name, f"challenges={where}")
            except DatasetError as e:
                raise UserError(f"leave_one_out=true: {e} (a pseudo-task named after its task: shorten "
                                "the task id, or leave leave_one_out off)") from None


def read_solutions(path: str) -> dict[str, list]:
    """`solutions`, read and checked before any task: an object of task id -> list of grids."""
    from arc_data.arc.sources import parse_grid  # lazy: numpy, only where a file is checked

    with as_ours():
        sol = read_json(path, "solutions")
    if not isinstance(sol, dict) or not sol:
        raise UserError(f"solutions={path}: not an object of task ids and their lists of grids, or empty")
    for tid, grids in sol.items():
        if not isinstance(grids, list) or not grids:
            raise UserError(f"solutions={path}: task {tid}: not a non-empty list of grids")
        for i, g in enumerate(grids):
            with as_ours():
                parse_grid(g, f"solutions={path}", tid, f"solution[{i}]")
    return sol


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint as read once before the first task."""

    file: Path  # the resolved weights file (a run folder's latest checkpoints/step_N.pt)
    sha256: str  # of that file's bytes: a resumed set is bound to it
    parameters: int  # tensors' elements in its weights (the presets size from it)
    size: int  # bytes on disk
    state: Any = field(default=None, repr=False, compare=False)  # as the safe loader read it (the family's grid room)


def read_checkpoint(checkpoint: str) -> Checkpoint:
    """Resolve and read the checkpoint with the safe loader (a folder without a step file, a corrupt,
    truncated or pickle-payload file: one line), its content hash and its parameter count."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: torch, only once the cheap checks passed

    file = ckpt.resolve(checkpoint)
    state = ckpt.load(file)
    digest = hashlib.sha256()
    try:
        with open(file, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    except OSError as e:
        raise UserError(f"checkpoint={checkpoint}: cannot read {file} ({e.strerror})") from None
    return Checkpoint(file, digest.hexdigest(), count_parameters(state), file.stat().st_size, state)


def count_parameters(state: object) -> int:
    """Elements of the tensors among a checkpoint's weights (ours: `model`; official LoopViT:
    `model_state`; an official HRM/TRM file or an export: the state dict itself)."""
    weights = state.get("model", state.get("model_state", state)) if isinstance(state, dict) else {}
    return int(sum(v.numel() for v in weights.values() if hasattr(v, "numel"))) if isinstance(weights, dict) else 0


def check_overrides(commands: list[tuple[str, list[str], list[str]]]) -> list[Any]:
    """Compose each (command, ttt's own arguments, the user's overrides) once, as a worker will: an
    unknown key, a bad value, or a key ttt sets itself is one line before any task runs. Returns the
    composed configs, in order."""
    from hrm_deeploop.cli import compose, prepare  # lazy: the CLI's command table imports this package

    composed = []
    for name, own, extra in commands:
        option = "eval_overrides" if name == "evaluate" else "train_overrides"
        keys = OWN_EVAL_KEYS if name == "evaluate" else OWN_TRAIN_KEYS
        for item in extra:
            key = str(item).partition("=")[0].lstrip("+~")
            if key in keys:
                raise UserError(f"{option}: '{item}': ttt sets {key} itself for every task ("
                                + (f"use ttt's {keys[key]}" if keys[key].endswith("=") else keys[key]) + ")")
        with contextlib.redirect_stderr(io.StringIO()):  # `train init_from=`'s note on what it inherits
            try:
                composed.append(compose(name, prepare(name, own + list(extra))))
            except UserError as e:
                raise UserError(f"{option}: {e}") from None
    return composed


def check_views(tasks: dict[str, dict], num_aug: int, workers: int, checkpoint: Checkpoint, leave_one_out: bool) -> None:
    """num_aug within the views that exist, and `workers` copies of the largest task's views (its
    examples, embedding rows, predictions) beside the model in memory."""
    with as_ours():
        check_count("num_aug", num_aug, MAX_DISTINCT_AUG, "8 dihedral transforms x 9! colour permutations per task",
                    "lower num_aug")
    worst = 0
    for t in tasks.values():
        demos, tests = len(t["train"]), len(t["test"])
        groups = 1 + (demos if leave_one_out and demos > 1 else 0)
        examples = demos * groups + tests + (demos if leave_one_out else 0)
        per_view = groups * VIEW_BYTES + examples * EXAMPLE_BYTES + (tests + (demos if leave_one_out else 0)) * TEST_ROW_BYTES
        worst = max(worst, (num_aug + 1) * per_view)
    model = 6 * checkpoint.size  # the file, the copy, its gradient and Adam's two moments, the evaluated copy
    with as_ours():
        check_fits(f"num_aug={num_aug} x workers={workers}", memory=workers * (model + worst),
                   fix="lower num_aug or workers", say=None)
