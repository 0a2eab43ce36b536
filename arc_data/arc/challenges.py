"""`hrm-deeploop make-challenges`: ARC tasks as the ARC Prize's `challenges.json` / `solutions.json`.

The pair the ARC Prize workflow and `score` take (Kaggle's layout and names,
`<prefix>_challenges.json` / `<prefix>_solutions.json`, so `build-arc sources=[...]` reads the pair
back too): the challenges map each task to its demonstrations and its test inputs (`{"train":
[{"input", "output"}, ...], "test": [{"input"}, ...]}`), the solutions map it to its test outputs
(`[grid, ...]`, in test order).

`source=` is either
- a dataset built by `build-arc` (a folder with manifest.json): the tasks of that build (every
  evaluation task of it: for the `holdout_dir` of a task-level split, the held-out tasks; for a
  `validation_dir`, the leave-last-demonstration-out tasks it was built from), re-read from the
  sources its manifest records, which must still hold the bytes the build read (their sha256 is
  compared); or
- any `build-arc` source spec (a folder of task JSON files, the original `data/` layout, a
  `*_challenges.json`, `arc1`, `arc2`, `concept`): its evaluation tasks, or every task when it has
  none (a plain folder of tasks).

`tasks=[...]` keeps only the tasks named. A test input without an output is allowed
(the challenges file alone is written then, and the line says so). Both files are written to
`output_dir` together (a folder written beside it and renamed into place).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from arc_data import format as fmt
from arc_data.arc.generated import GeneratedSourceConfig, loader, split_spec
from arc_data.arc.sources import EVAL_SUBSET, Task, load_sources
from arc_data.arc.spill import Spill, folder_beside
from arc_data.arc.tasklist import load_tasks
from arc_data.arc.tasksplit import validation_tasks
from arc_data.errors import ArcError
from arc_data.files.guard import checked_output_dir
from arc_data.files.jsonio import parse_json
from arc_data.files.publish import atomic_dir
from arc_data.originals import load_aug_table

CHALLENGES = "challenges.json"  # the files are <prefix>_challenges.json and <prefix>_solutions.json
SOLUTIONS = "solutions.json"


@dataclass
class ChallengesConfig:
    """`hrm-deeploop make-challenges`: ARC tasks (a build-arc dataset, or a folder / file of tasks) as
    the challenges.json / solutions.json pair that `score` and the ARC Prize workflow take."""

    source: str | None = None  # a build-arc dataset (its manifest's tasks) or a source spec (folder, *_challenges.json, arc1)
    output_dir: str | None = None  # the folder that gets challenges.json and solutions.json
    tasks: list[str] = field(default_factory=list)  # keep only these tasks (default: all of the source's, see above)
    prefix: str = "arc-agi_evaluation"  # the files' names: PREFIX_challenges.json, PREFIX_solutions.json (Kaggle's)
    overwrite: bool = False  # replace a folder this command wrote earlier


def _from_build(folder: Path, spill_dir: Path) -> tuple[list[Task], str]:
    """The tasks of a build-arc dataset, from the sources its manifest records (a generated source
    grouped again as the build grouped it: its `generated.*` options and seed, read from the
    manifest; its pairs held in a spill in `spill_dir` while they are read, as the build holds them)."""
    manifest = parse_json((folder / fmt.MANIFEST_FILE).read_bytes(), str(folder / fmt.MANIFEST_FILE))
    if not isinstance(manifest, dict) or manifest.get("task") not in (None, "arc") or not manifest.get("sources"):
        raise ArcError(f"{folder}: its {fmt.MANIFEST_FILE} is not a build-arc manifest (no ARC sources recorded)")
    recorded = manifest["sources"]
    specs = [s["spec"] for s in recorded]
    eval_name = _eval_name(manifest)
    in_build = set(load_aug_table(folder).task_names)
    spill = Spill(spill_dir) if any(split_spec(s) for s in specs) else None
    try:
        tasks, infos = load_tasks(specs, eval_name, False, load=loader(*_grouping(folder, manifest), spill))
        for was, now in zip(recorded, infos):
            if was.get("sha256") and was["sha256"] != now.sha256:
                raise ArcError(f"{folder}: source {was['spec']} ({now.path}) has changed since the build (sha256 "
                               f"{now.sha256[:12]}..., the build read {was['sha256'][:12]}...); rebuild, or give the "
                               "tasks' files as source=")
        # a generated task's grids stay readable once the spill is closed: its map lives on with them
        base = [tasks[i] for i, name in enumerate(tasks.names()) if name in in_build]
    finally:
        if spill is not None:
            spill.close()
    if len(base) != len(in_build):  # a generated source grouped otherwise than the build did, or renamed files
        gone = sorted(in_build - {t.name for t in base})
        raise ArcError(f"{folder}: {len(gone)} of its tasks ({', '.join(gone[:3])}) are not among the tasks its "
                       "sources give now; rebuild, or give the tasks' files as source=")
    split = manifest.get("task_split") or {}
    role = str(split.get("role", "all"))
    if role == "unseen":  # every held-out task is an evaluation task there
        chosen = base
    elif role.startswith("validation"):  # each task's last demonstration as its test pair, as built
        chosen, _ = validation_tasks([dataclasses.replace(t, is_eval=True) for t in base])
    else:  # its evaluation tasks: those with test inputs in its test split
        chosen = [t for t in base if t.is_eval]
    return chosen, (f"the {role.split(' ')[0]} build {folder}" if role != "all" else f"the build {folder}")


def _grouping(folder: Path, manifest: dict) -> tuple[GeneratedSourceConfig, int]:
    """The `generated.*` options and the seed the build grouped its generated sources with."""
    options = manifest.get("options")
    if not isinstance(options, dict):  # a manifest from before generated sources: none to group
        return GeneratedSourceConfig(), 0
    given = options.get("generated") if isinstance(options.get("generated"), dict) else {}
    known = {f.name for f in dataclasses.fields(GeneratedSourceConfig)}
    seed = options.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ArcError(f"{folder}: its {fmt.MANIFEST_FILE} records seed={seed!r}, not an integer")
    return GeneratedSourceConfig(**{k: v for k, v in given.items() if k in known}), seed


def _eval_name(manifest: dict) -> str:
    options = manifest.get("options")
    if isinstance(options, dict):
        return str(options.get("eval_name", EVAL_SUBSET))
    if isinstance(options, str) and "'eval_name': '" in options:  # recorded as repr
        return options.split("'eval_name': '", 1)[1].split("'", 1)[0]
    return EVAL_SUBSET


def select(source: str, names: list[str], spill_dir: str | Path = ".") -> tuple[list[Task], str]:
    """The tasks `source` stands for (see the module docstring), restricted to `names` if given;
    `spill_dir`: where a build's generated sources are held while they are read again."""
    folder = Path(source).expanduser()
    a_build = folder.is_dir() and (folder / fmt.MANIFEST_FILE).is_file()
    if a_build:
        tasks, what = _from_build(folder, Path(spill_dir))
    else:
        every, _ = load_sources([source], require_outputs=False)
        evaluation = [t for t in every if t.is_eval]
        tasks, what = (evaluation, f"the evaluation tasks of {source}") if evaluation else (every, source)
    hint = ("; a build offers its evaluation tasks (those with test inputs; a holdout_dir's: the held-out "
            "ones), not the tasks it trained on: give those as a folder of task files or a "
            "*_challenges.json (source=FILE)") if a_build else ""
    if names:
        by_name = {t.name: t for t in tasks}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ArcError(f"tasks: {', '.join(missing[:5])} {'is' if len(missing) == 1 else 'are'} not among "
                           f"the {len(tasks)} task(s) of {what}{hint}")
        tasks = [by_name[n] for n in names]
    if not tasks:
        raise ArcError(f"source={source}: no tasks to write ({what} has {'no evaluation task' if a_build else 'none'}{hint})")
    return sorted(tasks, key=lambda t: t.name), what


def as_kaggle(tasks: list[Task]) -> tuple[dict, dict | None]:
    """(challenges, solutions) as the ARC Prize files hold them; solutions None when a test
    input has no output."""
    challenges, solutions = {}, {}
    for t in tasks:
        challenges[t.name] = {"train": [{"input": x.tolist(), "output": y.tolist()} for x, y in t.train],
                              "test": [{"input": x.tolist()} for x, _ in t.test]}
        solutions[t.name] = [None if y is None else y.tolist() for _, y in t.test]
    complete = all(y is not None for outs in solutions.values() for y in outs)
    return challenges, (solutions if complete else None)


def _marker(out: Path, default: str) -> str:
    """The file marking `out` as a folder make-challenges wrote (overwrite=true replaces the whole folder):
    its one `<P>_challenges.json`, when the folder holds nothing but that and `<P>_solutions.json`, whatever
    prefix P wrote it. Anything else in it (Kaggle's own data folder: training, evaluation and test pairs and
    sample_submission.json) is refused here, never replaced."""
    if out.is_symlink() or not out.is_dir():
        return default  # checked_output_dir says what it is
    try:
        entries = sorted(p.name for p in out.iterdir())
    except OSError:
        return default  # checked_output_dir says why it cannot be read
    pairs = [e for e in entries if e.endswith(f"_{CHALLENGES}")]
    first = pairs[0] if len(pairs) == 1 else default
    mine = {first, first.removesuffix(CHALLENGES) + SOLUTIONS}
    others = [e for e in entries if e not in mine]
    if others:
        raise ArcError(f"output_dir={out} holds files make-challenges does not write ({', '.join(others[:3])}"
                       f"{', ...' if len(others) > 3 else ''}); refusing to replace it with overwrite=true: choose "
                       "another folder or remove it yourself")
    return first


def run(cfg: ChallengesConfig) -> int:
    if not cfg.source:
        raise ArcError("source= is required (a build-arc dataset, a folder of task files, a *_challenges.json)")
    if not cfg.output_dir:
        raise ArcError("output_dir= is required (the folder for challenges.json and solutions.json)")
    if not cfg.prefix or "/" in cfg.prefix or cfg.prefix.startswith("."):
        raise ArcError(f"prefix={cfg.prefix!r}: must be a plain file-name prefix (e.g. arc-agi_evaluation)")
    names = f"{cfg.prefix}_{CHALLENGES}", f"{cfg.prefix}_{SOLUTIONS}"
    marker = _marker(Path(cfg.output_dir).expanduser(), names[0]) if cfg.overwrite else names[0]
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, [cfg.source], marker=marker, writer="make-challenges")
    tasks, what = select(cfg.source, list(cfg.tasks), folder_beside(cfg.output_dir))
    challenges, solutions = as_kaggle(tasks)
    with atomic_dir(target) as tmp:
        (tmp / names[0]).write_text(json.dumps(challenges, separators=(",", ":")) + "\n")
        if solutions is not None:
            (tmp / names[1]).write_text(json.dumps(solutions, separators=(",", ":")) + "\n")
    inputs = sum(len(t.test) for t in tasks)
    written = f"{names[0]} and {names[1]}" if solutions is not None else (
        f"{names[0]} only (some test inputs have no output, so there is no {names[1]})")
    print(f"make-challenges: {len(tasks)} task(s), {inputs} test input(s) from {what}: wrote {written} in "
          f"{target.path}")
    return 0
