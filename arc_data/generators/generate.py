"""`hrm-deeploop generate-arc`: procedural ARC tasks of our own families, seeded, as ARC JSON.

    hrm-deeploop generate-arc output_dir=data/raw/generated tasks_per_family=100 holdout_families=[gravity,tile]

Writes `<output_dir>/training/<task>.json` (`layout=files`, the ARC-AGI `data/` layout) or
`<output_dir>/generated_training_{challenges,solutions}.json` (`layout=kaggle`); the tasks of the
held-out families go to `evaluation/` (or `generated_evaluation_*.json`), so `build-arc` treats
them as evaluation tasks and `holdout_pool=evaluation holdout_fraction=1` splits them off whole.
Each task file also names its `family`; `generated.json` lists every task with its family, its
rule parameters and its counts. The output depends only on the options (same options, same bytes).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from arc_data.budget import check_fits
from arc_data.errors import ArcError, raised_as
from arc_data.files.guard import checked_output_dir
from arc_data.files.publish import atomic_dir
from arc_data.generators.base import DIFFICULTIES, MAX_SIDE, SIDES, Grid
from arc_data.generators.registry import FAMILIES, GeneratedTask, family_named, make_task, task_rng
from arc_data.progress import package_version, progress_bar

MANIFEST = "generated.json"  # marks a folder generate-arc wrote (overwrite=true replaces only those)
LAYOUTS = ("files", "kaggle")
KAGGLE_PREFIX = "generated"
# every name generate-arc puts in its folder, either layout (overwrite=true replaces a folder of these alone)
OUTPUTS = (MANIFEST, "training", "evaluation",
           *(f"{KAGGLE_PREFIX}_{s}_{k}.json" for s in ("training", "evaluation") for k in ("challenges", "solutions")))


@dataclass
class GenerateArcConfig:
    """`hrm-deeploop generate-arc`: procedural ARC tasks (a rule per family, drawn with parameters),
    seeded, written in the ARC JSON layout for `build-arc` and `viz-arc`."""

    output_dir: str = ""
    families: list[str] = field(default_factory=list)  # [] = every family (`generate-arc --help` lists them)
    holdout_families: list[str] = field(default_factory=list)  # their tasks go to evaluation/ (unseen families)
    tasks_per_family: int = 20
    min_demos: int = 2  # demonstrations per task, drawn in [min_demos, max_demos]
    max_demos: int = 4
    num_tests: int = 1  # test pairs per task
    difficulty: int = 1  # 1, 2 or 3: grid sizes, object and colour counts
    max_side: int = MAX_SIDE  # no grid side over this (a pair that has one is drawn again; e.g. 14 for a 16 canvas)
    seed: int = 0
    layout: str = "files"  # files: <split>/<task>.json | kaggle: generated_<split>_{challenges,solutions}.json
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if not str(self.output_dir):
            raise ArcError("output_dir: required (the folder that receives the task files)")
        for name in [*self.families, *self.holdout_families]:
            if name not in FAMILIES:
                raise ArcError(f"family {name!r}: unknown (known: {', '.join(FAMILIES)})")
        chosen = list(self.families) or list(FAMILIES)
        outside = [f for f in self.holdout_families if f not in chosen]
        if outside:
            raise ArcError(f"holdout_families: {outside[0]} is not among families={chosen}")
        if len(set(self.families)) != len(self.families):
            raise ArcError("families: a family is named twice")
        if self.tasks_per_family < 1:
            raise ArcError(f"tasks_per_family={self.tasks_per_family}: must be >= 1")
        if not 1 <= self.min_demos <= self.max_demos <= 10:
            raise ArcError(f"min_demos={self.min_demos}, max_demos={self.max_demos}: "
                           "need 1 <= min_demos <= max_demos <= 10")
        if not 1 <= self.num_tests <= 5:
            raise ArcError(f"num_tests={self.num_tests}: must be in 1..5")
        if self.difficulty not in DIFFICULTIES:
            raise ArcError(f"difficulty={self.difficulty}: must be one of {DIFFICULTIES}")
        if not 1 <= self.max_side <= MAX_SIDE:
            raise ArcError(f"max_side={self.max_side}: must be in 1..{MAX_SIDE}")
        if self.seed < 0:
            raise ArcError(f"seed={self.seed}: must be >= 0")
        if self.layout not in LAYOUTS:
            raise ArcError(f"layout={self.layout!r}: must be one of {', '.join(LAYOUTS)}")


GenerateArcConfig.__doc__ = (f"{GenerateArcConfig.__doc__.rstrip()}\n\n    families: {', '.join(FAMILIES)} "
                             "(docs/generated-tasks.md).")


def task_name(seed: int, family: str, index: int) -> str:
    """`g<seed>-<family>-<index>`: the seed keeps two generations' tasks apart in one build."""
    return f"g{seed}-{family}-{index:05d}"


def generate_tasks(cfg: GenerateArcConfig, bar=None) -> list[GeneratedTask]:
    """Every task, family by family (in `families` order), index by index."""
    tasks = []
    for fam_name in cfg.families or list(FAMILIES):
        family = family_named(fam_name)
        for i in range(cfg.tasks_per_family):
            rng = task_rng(cfg.seed, fam_name, i)
            num_demos = int(rng.integers(cfg.min_demos, cfg.max_demos + 1))
            tasks.append(make_task(family, task_name(cfg.seed, fam_name, i), rng, cfg.difficulty, num_demos,
                                   cfg.num_tests, cfg.max_side))
            if bar is not None:
                bar.update(1)
    return tasks


def _grid(g: Grid) -> list[list[int]]:
    return g.tolist()


def task_json(t: GeneratedTask) -> dict:
    """The ARC task dict (plus its family's name, which readers of ARC files ignore)."""
    return {"train": [{"input": _grid(i), "output": _grid(o)} for i, o in t.train],
            "test": [{"input": _grid(i), "output": _grid(o)} for i, o in t.test],
            "family": t.family}


def _dump(obj: object) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def write_tasks(tasks: list[GeneratedTask], held: set[str], tmp: Path, layout: str) -> dict[str, int]:
    """Write the tasks into `tmp` in `layout`; returns the task count per split."""
    splits = {"training": [t for t in tasks if t.family not in held],
              "evaluation": [t for t in tasks if t.family in held]}
    for split, group in splits.items():
        if not group:
            continue
        if layout == "files":
            (tmp / split).mkdir()
            for t in group:
                (tmp / split / f"{t.name}.json").write_bytes(_dump(task_json(t)))
        else:
            chal = {t.name: {"train": task_json(t)["train"], "test": [{"input": _grid(i)} for i, _ in t.test]}
                    for t in group}
            sol = {t.name: [_grid(o) for _, o in t.test] for t in group}
            (tmp / f"{KAGGLE_PREFIX}_{split}_challenges.json").write_bytes(_dump(chal))
            (tmp / f"{KAGGLE_PREFIX}_{split}_solutions.json").write_bytes(_dump(sol))
    return {k: len(v) for k, v in splits.items()}


def check_generate_request(cfg: GenerateArcConfig, out: Path) -> None:
    """Refuse, before drawing, a request this machine cannot hold or write: every task is held until
    written. Per pair about two grids of the difficulty's largest side plus 200 bytes of objects in
    memory, 3 bytes a cell of JSON on disk; the kaggle layout also holds its two files' JSON objects
    (about 10 bytes a cell). An estimate (tile and scale_up outputs can be larger)."""
    tasks = len(cfg.families or FAMILIES) * cfg.tasks_per_family
    pairs = tasks * (cfg.max_demos + cfg.num_tests)
    cells = 2 * SIDES[cfg.difficulty][1] ** 2
    memory = pairs * (cells + 200) + tasks * 1000 + (pairs * cells * 10 if cfg.layout == "kaggle" else 0)
    check_fits(f"{tasks:,} tasks ({pairs:,} pairs at most)", memory=memory, disk=pairs * (3 * cells + 40),
               at=out.parent, fix="lower tasks_per_family")


def generate(cfg: GenerateArcConfig) -> dict:
    """Draw and write every task (atomically); returns the manifest written as generated.json."""
    with raised_as(ArcError):
        return _generate(cfg)


def _generate(cfg: GenerateArcConfig) -> dict:
    t0 = time.perf_counter()
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, marker=MANIFEST, writer="generate-arc",
                                outputs=OUTPUTS)
    families = list(cfg.families) or list(FAMILIES)
    total = len(families) * cfg.tasks_per_family
    check_generate_request(cfg, target.path)
    with progress_bar(cfg.progress, "generate-arc")(total, "tasks", "task") as bar:
        tasks = generate_tasks(cfg, bar)
    held = set(cfg.holdout_families)
    manifest = {
        "format": "generated-arc", "format_version": 1,
        "package": {"name": "hrm-deeploop", "version": package_version()},
        "options": {k: v for k, v in asdict(cfg).items() if k not in ("output_dir", "overwrite", "progress")},
        "rng": "numpy.random.Generator(PCG64([seed, crc32(family), index])) per task",
        "families": {f: {"summary": FAMILIES[f].summary, "held_out": f in held} for f in families},
        "max_side": cfg.max_side,
        "tasks": [{"name": t.name, "family": t.family, "split": "evaluation" if t.family in held else "training",
                   "demos": len(t.train), "tests": len(t.test), "params": t.params} for t in tasks],
    }
    with atomic_dir(target) as tmp:
        counts = write_tasks(tasks, held, tmp, cfg.layout)
        manifest["counts"] = counts
        (tmp / MANIFEST).write_bytes((json.dumps(manifest, indent=1) + "\n").encode())
    print(f"generate-arc: wrote {total:,} tasks of {len(families)} families to {target.path} ({cfg.layout} layout, "
          f"{counts['training']:,} training, {counts['evaluation']:,} evaluation) in {time.perf_counter() - t0:.1f} s")
    return manifest


def run(cfg: GenerateArcConfig) -> int:
    """CLI entry (`hrm-deeploop generate-arc`)."""
    generate(cfg)
    return 0
