"""`hrm-deeploop study`: a grid over any config keys and seeds for any trainer, run locally or on SLURM.

- `trainer=train` (HRM, TRM, any `model=` of train) or `trainer=train-gpt` (the looped GPT);
  `base={key: value, ...}` holds the overrides every cell gets, `grid={key: [values], ...}` the axes (their
  product is the cells), `seeds=[...]` the repeats. A cell x seed is one ordinary trainer run in
  `<output_dir>/<cell>/s<seed>` (resume=true), started as `python -m hrm_deeploop.cli TRAINER ...`.
- Every run's config is composed and checked before anything starts (a misspelled key in `base`
  or `grid` is one line and exit 2, nothing written). A run whose summary.json says finished or
  diverged (or stopped at its `train.stop_after`) is skipped; others resume, so a study is resumed
  by running it again.
- `launcher=local`: a pool of `jobs` concurrent runs (0: the CPU count over `threads`), each a
  process with OMP/MKL threads set to `threads`, logs in `<output_dir>/logs/`.
  `launcher=submitit`: one submitit job per run (`submitit.cluster`: auto = SLURM where `sbatch`
  exists, else local processes; `local` and `debug` are submitit's own executors). A cell with
  `nproc_per_node > 1` or `submitit.nodes > 1` runs under `torchrun` (local: `--standalone`; on
  SLURM, one task per node started by srun, each running torchrun with c10d rendezvous at the
  job's first host).
- The aggregate (`study.md`, `study.csv`, `study.png`): per cell the mean, sample standard
  deviation, min and max of `metric` over seeds; between the values of the `compare` axis (the
  schemes) the two-sided Mann-Whitney U test of each value against the first, at every setting
  of the other axes (exact distribution without ties and either sample <= 8, else the normal
  approximation with tie and continuity correction: scipy's `method='auto'`); the report and its
  statistics are `hrm_deeploop.reports.study` and `reports.stats`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop import interrupts
from hrm_deeploop.cli import compose
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.reports.study import command_value, write_reports
from hrm_deeploop.training.cluster import check_settings, resolve
from hrm_deeploop.typed_config import at_least, check, one_of, typed

TRAINERS = ("train", "train-gpt")
LAUNCHERS = ("local", "submitit")
# summary.json paths tried in order when `metric` is not set
DEFAULT_METRICS = {"train": ["last_eval.eval/exact_accuracy"], "train-gpt": ["final_val_loss", "final_train_loss"]}
# keys the study sets for every run itself
OWN_KEYS = ("output_dir", "seed", "resume")


@dataclass
class SubmititConfig:
    """`submitit.*`: one job per run (AutoExecutor parameters; slurm_* apply on SLURM only)."""

    cluster: str = "auto"  # auto (SLURM if sbatch exists, else local) | slurm | local | debug
    timeout_min: int = 60  # the job's time limit (minutes)
    nodes: int = 1  # nodes per run; > 1: multi-node torchrun with c10d rendezvous
    gpus_per_node: int = 0  # GPUs per node of each run
    cpus_per_task: int | None = None  # None: submitit's default
    mem_gb: int | None = None  # memory per node (GB; None: the cluster's default)
    partition: str | None = None  # slurm_partition
    account: str | None = None  # slurm_account
    qos: str | None = None  # slurm_qos
    constraint: str | None = None  # slurm_constraint
    array_parallelism: int = 256  # slurm_array_parallelism: runs in the queue at once
    rdzv_port: int = 29500  # c10d rendezvous port on the first host of a multi-node run

    def __post_init__(self) -> None:
        check_settings(self)  # the one check of every submitit setting, shared with `ttt`


@dataclass
class StudyConfig:
    """`hrm-deeploop study`: a grid over config keys and seeds, each run an ordinary train / train-gpt run.

    Example: hrm-deeploop study trainer=train output_dir=runs/s 'base={experiment:hrm_tiny_cpu,data_dir:DATA}'
    'grid={scaling:[baseline,deeploop],optim.lr:[1e-3,3e-3]}' seeds=[0,1,2,3,4]"""

    trainer: str = "train"  # train (HRM, TRM, ...) | train-gpt
    output_dir: str | None = "runs/study"  # the study folder: one run folder per cell and seed, the reports
    base: Any = None  # {key: value} every run gets (its command line); Any: Hydra replaces it whole
    grid: Any = None  # {key: [values]}; the cells are their product; Any: Hydra replaces it whole
    seeds: list[int] = field(default_factory=lambda: [0])  # the repeats of every cell
    metric: list[str] | None = None  # summary.json paths, the first present is used; None: per trainer
    compare: str | None = None  # the grid key whose values are ranked; None: scaling if in grid, else the first key
    launcher: str = "local"  # local | submitit
    jobs: int = 0  # local: runs at once; 0: CPU count // threads
    threads: int = 1  # OMP/MKL threads of each run
    nproc_per_node: int = 1  # processes per node of each run; > 1: torchrun
    stop_grace: float = 5.0  # seconds a running run gets after Ctrl-C / SIGTERM to checkpoint and exit
    submitit: SubmititConfig = field(default_factory=SubmititConfig)

    def __post_init__(self) -> None:
        one_of("trainer", self.trainer, TRAINERS)
        self.base = {} if self.base is None else self.base
        self.grid = {} if self.grid is None else self.grid
        check(isinstance(self.base, dict), "base", self.base, "a mapping {key: value, ...}")
        check(isinstance(self.grid, dict), "grid", self.grid, "a mapping {key: [values], ...}")
        one_of("launcher", self.launcher, LAUNCHERS)
        at_least("jobs", self.jobs, 0)
        at_least("threads", self.threads, 1)
        at_least("nproc_per_node", self.nproc_per_node, 1)
        at_least("stop_grace", self.stop_grace, 0)
        check(bool(self.seeds), "seeds", self.seeds, "at least one seed")
        check(len(set(self.seeds)) == len(self.seeds), "seeds", self.seeds, "without repeats")
        for s in self.seeds:
            at_least("seeds", s, 0)
        for key in self.base:
            check(key not in OWN_KEYS, "base", key, f"a key other than {'/'.join(OWN_KEYS)} (the study sets them)")
            check(key not in self.grid, "base", key, "a key that is not also a grid axis")
        for key, values in self.grid.items():
            check(key not in OWN_KEYS, "grid", key, f"a key other than {'/'.join(OWN_KEYS)} (seeds are `seeds`)")
            check(isinstance(values, list) and len(values) > 0, f"grid.{key}", values, "a non-empty list")
            check(len({command_value(v) for v in values}) == len(values), f"grid.{key}", values, "without repeats")
        if self.compare is not None:
            one_of("compare", self.compare, list(self.grid))
        if isinstance(self.submitit, dict):
            self.submitit = typed(self.submitit, SubmititConfig, "submitit.")

    @property
    def compare_key(self) -> str | None:
        if self.compare is not None:
            return self.compare
        return "scaling" if "scaling" in self.grid else next(iter(self.grid), None)

    @property
    def metrics(self) -> list[str]:
        return self.metric or DEFAULT_METRICS[self.trainer]


# ---- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    cell: tuple[tuple[str, str], ...]  # (grid key, value as written on the command line), in grid order
    seed: int
    run_dir: Path
    overrides: tuple[str, ...]  # the trainer's command line after its name
    stop_after: int | None  # the run's train.stop_after (a run stopped there is done)

    @property
    def cell_name(self) -> str:
        return cell_name(self.cell)

    @property
    def name(self) -> str:
        return f"{self.cell_name}/s{self.seed}"


def cell_name(cell: tuple[tuple[str, str], ...]) -> str:
    """Folder name of a cell: key-value pairs joined by '__', other characters replaced by '_'."""
    if not cell:
        return "all"
    return "__".join(re.sub(r"[^A-Za-z0-9._-]", "_", f"{k}-{v}") for k, v in cell)


def plan(cfg: StudyConfig, root: Path) -> list[Run]:
    """Every cell x seed, its config composed and checked (ConfigError names the run)."""
    keys = list(cfg.grid)
    cells = [tuple(zip(keys, (command_value(v) for v in combo))) for combo in itertools.product(*cfg.grid.values())]
    names = [cell_name(c) for c in cells]
    if len(set(names)) != len(names):
        raise ConfigError("grid: two cells map to the same folder name; use values that differ in letters or digits")
    runs = []
    for cell in cells:
        for seed in cfg.seeds:
            run_dir = root / cell_name(cell) / f"s{seed}"
            overrides = (*(f"{k}={command_value(v)}" for k, v in cfg.base.items()), *(f"{k}={v}" for k, v in cell), f"seed={seed}",
                         f"output_dir={command_value(str(run_dir))}", "resume=true")
            try:
                composed = compose(cfg.trainer, list(overrides))
            except UserError as e:
                raise ConfigError(f"run {cell_name(cell)}/s{seed} ({cfg.trainer}): {e}") from None
            runs.append(Run(cell, seed, run_dir, overrides, composed.train.stop_after))
    return runs


def _finished(run: Run) -> bool:
    from hrm_deeploop.training.sweep import read_summary, run_done  # lazy: `study --help` skips it

    return run_done(read_summary(run.run_dir), run.stop_after)


# ---- launching ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """How one run is started: its trainer command line and its process layout (picklable, for submitit)."""

    trainer: str
    overrides: tuple[str, ...]
    threads: int
    nproc_per_node: int
    nodes: int = 1
    rdzv_port: int = 29500

    def argv(self, master: str | None = None, job_id: str = "0") -> list[str]:
        """The command on one node: the trainer, under torchrun when the run has more than one process."""
        cli = ["-m", "hrm_deeploop.cli", self.trainer, *self.overrides]
        if self.nodes == 1 and self.nproc_per_node == 1:
            return [sys.executable, *cli]
        rdzv = (["--standalone"] if self.nodes == 1 else
                [f"--nnodes={self.nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={master}:{self.rdzv_port}",
                 f"--rdzv-id={job_id}"])
        return [sys.executable, "-m", "torch.distributed.run", *rdzv, f"--nproc-per-node={self.nproc_per_node}", *cli]

    def environ(self, follow: bool = False) -> dict[str, str]:
        """The run's environment: its thread counts; with `follow`, this process as the parent the run
        stops with (`interrupts.PARENT_ENV`: killed even by SIGKILL, the study's runs checkpoint and exit)."""
        n = str(self.threads)
        return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
                **({interrupts.PARENT_ENV: str(os.getpid())} if follow else {})}


def run_in_job(launch: Launch) -> int:
    """The submitit job's function, on every node of the run: start the trainer (or torchrun) there."""
    import submitit  # lazy: submitit only for Slurm runs

    job = submitit.JobEnvironment()
    argv = launch.argv(master=job.hostnames[0], job_id=str(job.job_id))
    code = subprocess.run(argv, env=launch.environ(follow=True)).returncode
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... exited {code}")
    return code


def _launch(cfg: StudyConfig, run: Run) -> Launch:
    return Launch(cfg.trainer, run.overrides, cfg.threads, cfg.nproc_per_node, cfg.submitit.nodes,
                  cfg.submitit.rdzv_port)


def launch_local(cfg: StudyConfig, runs: list[Run], root: Path) -> dict[str, str]:
    """Run each in its own process, `jobs` at once; returns run name -> failure text. Ctrl-C or
    SIGTERM stops the study within seconds: no queued run starts, and every running one is stopped
    by `stop_runs` (it checkpoints and exits within `stop_grace` seconds, else stops without saving:
    a rerun resumes it from its last checkpoint and skips the finished ones). Each run is a process
    group of its own, so a terminal's Ctrl-C reaches it once, through the study."""
    jobs = cfg.jobs or max(1, (os.cpu_count() or 1) // (cfg.threads * cfg.nproc_per_node))
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    live: dict[str, subprocess.Popen] = {}
    guard, stopping = threading.Lock(), threading.Event()

    def one(run: Run) -> tuple[str, str | None]:
        log = logs / (run.name.replace("/", "__") + ".log")
        launch = _launch(cfg, run)
        with guard:
            if stopping.is_set():
                return run.name, "not started: the study was interrupted"
            with open(log, "ab") as f:
                print(f"study: {run.name} started (log {log})", flush=True)
                live[run.name] = proc = subprocess.Popen(launch.argv(), env=launch.environ(follow=True), stdout=f,
                                                         stderr=subprocess.STDOUT, start_new_session=True)
        code = proc.wait()
        with guard:
            live.pop(run.name, None)
        print(f"study: {run.name} exited {code}", flush=True)
        return run.name, (None if code == 0 else f"exit {code}, see {log}")

    pool = ThreadPoolExecutor(max_workers=jobs)  # each worker waits on its own process
    try:
        results = list(pool.map(one, runs))
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (interrupts.Interrupted)
        with guard:
            stopping.set()
            running = list(live.items())
        unsaved = stop_runs([proc for _, proc in running], cfg.stop_grace)
        pool.shutdown(wait=True, cancel_futures=True)
        names = ", ".join(name for name, _ in running) or "none"
        how = (f"; {unsaved} of them did not checkpoint within stop_grace={cfg.stop_grace:g} s and resume from "
               "their last checkpoint" if unsaved else "")
        raise interrupts.Interrupted(getattr(e, "signum", signal.SIGINT),
                                     f"stopped the running run(s) ({names}) and started no more{how}; run the study "
                                     "again to resume them (finished runs are skipped)") from None
    pool.shutdown()
    return {name: err for name, err in results if err}


LAST_WORD_S = 5.0  # after the second SIGTERM, seconds before SIGKILL


def stop_runs(procs: list[subprocess.Popen], grace: float, last_word: float = LAST_WORD_S) -> int:
    """Stop the runs' processes, in rounds: SIGTERM (a trainer saves a checkpoint after its current
    step and exits), wait up to `grace` s; a second SIGTERM to those still there (a trainer stops at
    once without saving: its last checkpoint stays, its atomic writes leave nothing half-written),
    wait up to `last_word` s; then SIGKILL. Another Ctrl-C / SIGTERM to the study skips a wait.
    Returns how many needed more than the first SIGTERM."""
    rounds = ((signal.SIGTERM, grace), (signal.SIGTERM, last_word), (signal.SIGKILL, None))
    late = 0
    for k, (signum, wait_s) in enumerate(rounds):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            break
        if k == 1:
            late = len(alive)
        for p in alive:
            with contextlib.suppress(OSError):
                p.send_signal(signum)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        try:
            for p in alive:
                p.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # the user insists: on to the next round at once
            continue
    return late


def submitit_executor(cfg: StudyConfig, root: Path) -> Any:
    """The submitit executor for one job per run, with the parameters of `cfg.submitit`."""
    try:
        import submitit  # lazy: submitit only for Slurm runs
    except ImportError:
        raise UserError("launcher=submitit needs submitit: pip install 'hrm-deeploop[cluster]'") from None
    s = cfg.submitit
    cluster = resolve(s.cluster)
    executor = submitit.AutoExecutor(folder=root / "submitit" / "%j", cluster=cluster)
    params: dict[str, Any] = {"timeout_min": s.timeout_min, "nodes": s.nodes, "tasks_per_node": 1,
                              "gpus_per_node": s.gpus_per_node, "name": f"study-{root.name}"}
    if s.cpus_per_task is not None:
        params["cpus_per_task"] = s.cpus_per_task
    if s.mem_gb is not None:
        params["mem_gb"] = s.mem_gb
    if cluster == "slurm":
        params["slurm_array_parallelism"] = s.array_parallelism
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(s, key) is not None:
                params[f"slurm_{key}"] = getattr(s, key)
    executor.update_parameters(**params)
    return executor


def launch_submitit(cfg: StudyConfig, runs: list[Run], root: Path) -> dict[str, str]:
    """One submitit job per run (a job array on SLURM); waits for all; returns run name -> failure text."""
    executor = submitit_executor(cfg, root)
    with executor.batch():
        pending = [(run, executor.submit(run_in_job, _launch(cfg, run))) for run in runs]
    for run, job in pending:
        print(f"study: {run.name} submitted as job {job.job_id}", flush=True)
    failed = {}
    try:
        for run, job in pending:
            try:
                job.result()
                print(f"study: {run.name} (job {job.job_id}) done", flush=True)
            except Exception as e:  # noqa: BLE001 - submitit re-raises the job's error, of any type
                failed[run.name] = f"job {job.job_id}: {str(e).strip().splitlines()[-1] if str(e).strip() else e!r}"
                print(f"study: {run.name} (job {job.job_id}) failed", flush=True)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: cancel what is queued or running (SLURM: scancel)
        left = [(run, job) for run, job in pending if not job.done()]
        for _, job in left:
            with contextlib.suppress(Exception):  # a job that ended meanwhile, or a scheduler that said no
                job.cancel(check=False)
        names = ", ".join(run.name for run, _ in left) or "none"
        raise interrupts.Interrupted(getattr(e, "signum", signal.SIGINT),
                                     f"cancelled the job(s) not done ({names}); run the study again to resume "
                                     "them (finished runs are skipped)") from None
    finally:  # submitit's local controller makes the folder pattern itself (`submitit/%j`), left empty
        with contextlib.suppress(OSError):  # not there (SLURM), or not empty: left as it is
            (root / "submitit" / "%j").rmdir()
    return failed


# ---- the study ---------------------------------------------------------------------------------


def study(cfg: StudyConfig) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Plan, run what is not done, aggregate. Returns the per-run rows and the failures."""
    from arc_data.files.guard import check_output_dir  # lazy: `study --help` skips it

    if not cfg.output_dir:
        raise ConfigError("output_dir is not set")
    root = check_output_dir(cfg.output_dir)
    runs = plan(cfg, root)
    if cfg.launcher == "submitit":
        resolve(cfg.submitit.cluster)  # slurm on a machine without it: one line before anything is written
    todo = [r for r in runs if not _finished(r)]
    for r in runs:
        if r not in todo:
            print(f"study: {r.name} done, skipped", flush=True)
    print(f"study: {len(runs)} runs ({len(runs) - len(todo)} done), {len(todo)} to run via {cfg.launcher}", flush=True)
    failed = {}
    if todo:
        failed = (launch_local if cfg.launcher == "local" else launch_submitit)(cfg, todo, root)
    rows = [_row(cfg, r, failed.get(r.name)) for r in runs]
    write_reports(cfg, rows, root)
    return rows, failed


def run(cfg: StudyConfig) -> int:
    rows, failed = study(cfg)
    print(f"study: {len(rows)} runs, {len(failed)} failed; study.md, study.csv, study.png in {cfg.output_dir}")
    done = [r for r in rows if r["status"] in ("finished", "stopped")]
    if done and all(r["value"] is None for r in done):  # tables of dashes: say why
        why = ("; `train` evaluates only with eval.every > 0 (or eval.interval_epochs): add it to base"
               if cfg.trainer == "train" else "")
        print(f"warning: none of the {len(done)} finished run(s) has {' or '.join(cfg.metrics)} in its summary.json, "
              f"so the tables hold no value{why}", file=sys.stderr)
    if failed:
        first = next(iter(failed.items()))
        raise UserError(f"{len(failed)} of {len(rows)} runs failed (first: {first[0]}: {first[1]})")
    return 0


def _lookup(summary: dict[str, Any], path: str) -> Any:
    node: Any = summary
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _row(cfg: StudyConfig, run: Run, failure: str | None) -> dict[str, Any]:
    from hrm_deeploop.training.sweep import read_summary  # lazy: `study --help` skips it

    s = read_summary(run.run_dir) or {}
    metric, value = None, None
    for path in cfg.metrics:
        v = _lookup(s, path)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            metric, value = path, float(v)
            break
    status = s.get("status", "failed" if failure else "missing")
    return {"cell": run.cell_name, **dict(run.cell), "seed": run.seed, "status": status, "steps": s.get("steps"),
            "metric": metric, "value": value if status in ("finished", "stopped") else None,
            "wall_time_s": s.get("wall_time_s"), "run_dir": str(run.run_dir), "failure": failure or ""}
