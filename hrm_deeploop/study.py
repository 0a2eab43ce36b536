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
  approximation with tie and continuity correction: scipy's `method='auto'`, computed here).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrm_deeploop.config import at_least, check, one_of, optional_at_least
from hrm_deeploop.errors import ConfigError, UserError

TRAINERS = ("train", "train-gpt")
LAUNCHERS = ("local", "submitit")
CLUSTERS = ("auto", "slurm", "local", "debug")
# summary.json paths tried in order when `metric` is not set
DEFAULT_METRICS = {"train": ["last_eval.eval/exact_accuracy"], "train-gpt": ["final_val_loss", "final_train_loss"]}
# keys the study sets for every run itself
OWN_KEYS = ("output_dir", "seed", "resume")


@dataclass
class SubmititConfig:
    """`submitit.*`: one job per run (AutoExecutor parameters; slurm_* apply on SLURM only)."""

    cluster: str = "auto"  # auto (SLURM if sbatch exists, else local) | slurm | local | debug
    timeout_min: int = 60
    nodes: int = 1  # nodes per run; > 1: multi-node torchrun with c10d rendezvous
    gpus_per_node: int = 0
    cpus_per_task: int | None = None  # None: submitit's default
    mem_gb: int | None = None
    partition: str | None = None  # slurm_partition
    account: str | None = None  # slurm_account
    qos: str | None = None  # slurm_qos
    constraint: str | None = None  # slurm_constraint
    array_parallelism: int = 256  # slurm_array_parallelism: runs in the queue at once
    rdzv_port: int = 29500  # c10d rendezvous port on the first host of a multi-node run

    def __post_init__(self) -> None:
        one_of("submitit.cluster", self.cluster, CLUSTERS)
        at_least("submitit.timeout_min", self.timeout_min, 1)
        at_least("submitit.nodes", self.nodes, 1)
        at_least("submitit.gpus_per_node", self.gpus_per_node, 0)
        optional_at_least("submitit.cpus_per_task", self.cpus_per_task, 1)
        optional_at_least("submitit.mem_gb", self.mem_gb, 1)
        at_least("submitit.array_parallelism", self.array_parallelism, 1)
        check(isinstance(self.rdzv_port, int) and 1 <= self.rdzv_port <= 65535, "submitit.rdzv_port",
              self.rdzv_port, "a port number (1-65535)")


@dataclass
class StudyConfig:
    """`hrm-deeploop study`: a grid over config keys and seeds, each run an ordinary train / train-gpt run.

    Example: hrm-deeploop study trainer=train output_dir=runs/s 'base={experiment:hrm_tiny_cpu,data_dir:DATA}'
    'grid={scaling:[baseline,deeploop],optim.lr:[1e-3,3e-3]}' seeds=[0,1,2,3,4]"""

    trainer: str = "train"  # train (HRM, TRM, ...) | train-gpt
    output_dir: str | None = "runs/study"
    base: Any = None  # {key: value} every run gets (its command line); Any: Hydra replaces it whole
    grid: Any = None  # {key: [values]}; the cells are their product; Any: Hydra replaces it whole
    seeds: list[int] = field(default_factory=lambda: [0])
    metric: list[str] | None = None  # summary.json paths, the first present is used; None: per trainer
    compare: str | None = None  # the grid key whose values are ranked; None: scaling if in grid, else the first key
    launcher: str = "local"  # local | submitit
    jobs: int = 0  # local: runs at once; 0: CPU count // threads
    threads: int = 1  # OMP/MKL threads of each run
    nproc_per_node: int = 1  # processes per node of each run; > 1: torchrun
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
            check(len({_value(v) for v in values}) == len(values), f"grid.{key}", values, "without repeats")
        if self.compare is not None:
            one_of("compare", self.compare, list(self.grid))
        if isinstance(self.submitit, dict):
            from hrm_deeploop.config import typed

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


def _value(v: Any) -> str:
    """A grid value as a command-line value: bare where Hydra reads it back unchanged."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_./+-]+", v):
        return v
    from hrm_deeploop.training.sweep import hydra_value

    return hydra_value(v)


def cell_name(cell: tuple[tuple[str, str], ...]) -> str:
    """Folder name of a cell: key-value pairs joined by '__', other characters replaced by '_'."""
    if not cell:
        return "all"
    return "__".join(re.sub(r"[^A-Za-z0-9._-]", "_", f"{k}-{v}") for k, v in cell)


def plan(cfg: StudyConfig, root: Path) -> list[Run]:
    """Every cell x seed, its config composed and checked (ConfigError names the run)."""
    from hrm_deeploop.cli import compose

    keys = list(cfg.grid)
    cells = [tuple(zip(keys, (_value(v) for v in combo))) for combo in itertools.product(*cfg.grid.values())]
    names = [cell_name(c) for c in cells]
    if len(set(names)) != len(names):
        raise ConfigError("grid: two cells map to the same folder name; use values that differ in letters or digits")
    runs = []
    for cell in cells:
        for seed in cfg.seeds:
            run_dir = root / cell_name(cell) / f"s{seed}"
            overrides = (*(f"{k}={_value(v)}" for k, v in cfg.base.items()), *(f"{k}={v}" for k, v in cell), f"seed={seed}",
                         f"output_dir={_value(str(run_dir))}", "resume=true")
            try:
                composed = compose(cfg.trainer, list(overrides))
            except UserError as e:
                raise ConfigError(f"run {cell_name(cell)}/s{seed} ({cfg.trainer}): {e}") from None
            runs.append(Run(cell, seed, run_dir, overrides, composed.train.stop_after))
    return runs


def _finished(run: Run) -> bool:
    from hrm_deeploop.training.sweep import read_summary, run_done

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

    def environ(self) -> dict[str, str]:
        n = str(self.threads)
        return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def run_in_job(launch: Launch) -> int:
    """The submitit job's function, on every node of the run: start the trainer (or torchrun) there."""
    import submitit

    job = submitit.JobEnvironment()
    argv = launch.argv(master=job.hostnames[0], job_id=str(job.job_id))
    code = subprocess.run(argv, env=launch.environ()).returncode
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... exited {code}")
    return code


def _launch(cfg: StudyConfig, run: Run) -> Launch:
    return Launch(cfg.trainer, run.overrides, cfg.threads, cfg.nproc_per_node, cfg.submitit.nodes,
                  cfg.submitit.rdzv_port)


def launch_local(cfg: StudyConfig, runs: list[Run], root: Path) -> dict[str, str]:
    """Run each in its own process, `jobs` at once; returns run name -> failure text. Ctrl-C or
    SIGTERM stops the study: no queued run starts, every running one gets a SIGTERM (it checkpoints
    and exits: a rerun resumes it, and skips the finished ones) and is waited for."""
    import signal
    import threading

    from hrm_deeploop import interrupts

    jobs = cfg.jobs or max(1, (os.cpu_count() or 1) // (cfg.threads * cfg.nproc_per_node))
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    live: dict[str, subprocess.Popen] = {}
    guard, stopping = threading.Lock(), threading.Event()

    def one(run: Run) -> tuple[str, str | None]:
        log = logs / (run.name.replace("/", "__") + ".log")
        launch = _launch(cfg, run)
        with open(log, "ab") as f:
            with guard:
                if stopping.is_set():
                    return run.name, "not started: the study was interrupted"
                print(f"study: {run.name} started (log {log})", flush=True)
                live[run.name] = proc = subprocess.Popen(launch.argv(), env=launch.environ(), stdout=f,
                                                         stderr=subprocess.STDOUT)
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
        for _, proc in running:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        for _, proc in running:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        names = ", ".join(name for name, _ in running) or "none"
        raise interrupts.Interrupted(getattr(e, "signum", signal.SIGINT),
                                     f"stopped the running run(s) ({names}) and started no more; run the study "
                                     "again to resume them (finished runs are skipped)") from None
    pool.shutdown()
    return {name: err for name, err in results if err}


def submitit_executor(cfg: StudyConfig, root: Path) -> Any:
    """The submitit executor for one job per run, with the parameters of `cfg.submitit`."""
    try:
        import submitit
    except ImportError:
        raise UserError("launcher=submitit needs submitit: pip install 'hrm-deeploop[cluster]'") from None
    s = cfg.submitit
    cluster = s.cluster if s.cluster != "auto" else ("slurm" if shutil.which("sbatch") else "local")
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
    for run, job in pending:
        try:
            job.result()
            print(f"study: {run.name} (job {job.job_id}) done", flush=True)
        except Exception as e:  # noqa: BLE001 - submitit re-raises the job's error, of any type
            failed[run.name] = f"job {job.job_id}: {str(e).strip().splitlines()[-1] if str(e).strip() else e!r}"
            print(f"study: {run.name} (job {job.job_id}) failed", flush=True)
    return failed


# ---- the study ---------------------------------------------------------------------------------


def study(cfg: StudyConfig) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Plan, run what is not done, aggregate. Returns the per-run rows and the failures."""
    from arc_data.files.guard import check_output_dir

    if not cfg.output_dir:
        raise ConfigError("output_dir is not set")
    root = check_output_dir(cfg.output_dir)
    runs = plan(cfg, root)
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
    from hrm_deeploop.training.sweep import read_summary

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


# ---- statistics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one value
    min: float
    max: float


def spread(xs: list[float]) -> Spread | None:
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return Spread(len(xs), mean, math.sqrt(var), min(xs), max(xs))


def _ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of arrangements with U = u, u = 0 .. n1*n2, of two samples without ties."""
    # f[m][k][u]: arrangements of m and k items with statistic u; f(m,k,u) = f(m-1,k,u-k) + f(m,k-1,u)
    table = {(0, k): [1] for k in range(n2 + 1)} | {(m, 0): [1] for m in range(n1 + 1)}
    for m in range(1, n1 + 1):
        for k in range(1, n2 + 1):
            a, b = table[m - 1, k], table[m, k - 1]
            out = [0] * (m * k + 1)
            for u, c in enumerate(a):
                out[u + k] += c
            for u, c in enumerate(b):
                out[u] += c
            table[m, k] = out
    return table[n1, n2]


def mann_whitney_u(x: list[float], y: list[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: (U of x, p-value), as scipy.stats.mannwhitneyu(x, y) (method auto)."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    ranks = _ranks(list(x) + list(y))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    ties = len(set(ranks)) < len(ranks)
    if not (n1 > 8 and n2 > 8) and not ties:
        counts = _u_counts(n1, n2)
        p = 2 * sum(counts[int(u):]) / sum(counts)
    else:
        n = n1 + n2
        sizes: dict[float, int] = {}
        for r in ranks:
            sizes[r] = sizes.get(r, 0) + 1
        tie_term = sum(t ** 3 - t for t in sizes.values())
        s = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        numerator = u - n1 * n2 / 2 - 0.5  # continuity correction
        z = numerator / s if s > 0 else math.copysign(math.inf, numerator)  # s = 0: every value tied
        p = 2 * 0.5 * math.erfc(z / math.sqrt(2))
    return u1, min(1.0, p)


# ---- reports -------------------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def cell_table(cfg: StudyConfig, rows: list[dict[str, Any]]) -> str:
    keys = list(cfg.grid)
    head = ["| " + " | ".join([*keys, "runs", "mean", "std", "min", "max", "per seed"]) + " |",
            "|" + "---|" * (len(keys) + 6)]
    for group in _by(rows, "cell").values():
        sp = spread([r["value"] for r in group if r["value"] is not None])
        per = ", ".join(f"s{r['seed']}: " + (_fmt(r["value"]) if r["value"] is not None else r["status"]) for r in group)
        done = sum(r["value"] is not None for r in group)
        head.append("| " + " | ".join([*(str(group[0][k]) for k in keys), f"{done}/{len(group)}",
                                       *(["-"] * 4 if sp is None else [_fmt(sp.mean), _fmt(sp.std), _fmt(sp.min),
                                                                        _fmt(sp.max)]), per]) + " |")
    return "\n".join(head)


def compare_table(cfg: StudyConfig, rows: list[dict[str, Any]]) -> str:
    key = cfg.compare_key
    if key is None or len(cfg.grid[key]) < 2:
        return ""
    others = [k for k in cfg.grid if k != key]
    ref = _value(cfg.grid[key][0])
    lines = [f"Two-sided Mann-Whitney U of each `{key}` against `{key}={ref}` (U of the first sample; "
             "Δ = difference of means)", "",
             "| " + " | ".join([*others, key, "n", f"n ({ref})", "Δ mean", "U", "p"]) + " |",
             "|" + "---|" * (len(others) + 6)]
    for setting, group in _by(rows, *others).items():
        by_value = _by(group, key)
        base = [r["value"] for r in by_value.get((ref,), []) if r["value"] is not None]
        for value, rs in by_value.items():
            if value == (ref,):
                continue
            xs = [r["value"] for r in rs if r["value"] is not None]
            if xs and base:
                u, p = mann_whitney_u(xs, base)
                stats = [_fmt(spread(xs).mean - spread(base).mean), f"{u:g}", f"{p:.3g}"]
            else:
                stats = ["-", "-", "-"]
            lines.append("| " + " | ".join([*setting, value[0], str(len(xs)), str(len(base)), *stats]) + " |")
    return "\n".join(lines)


def _by(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(str(r[k]) for k in keys), []).append(r)
    return out


def write_reports(cfg: StudyConfig, rows: list[dict[str, Any]], root: Path) -> dict[str, Path]:
    from hrm_deeploop.checkpoint import atomic_write_bytes

    metric = ", else ".join(f"`{m}`" for m in cfg.metrics)
    parts = [f"# Study: {cfg.trainer}, {len(rows)} runs", "",
             f"Metric: {metric} from each run's summary.json (finished or stopped runs).", "",
             "Base overrides: " + (" ".join(f"`{k}={_value(v)}`" for k, v in cfg.base.items()) or "none"), "", cell_table(cfg, rows)]
    comparison = compare_table(cfg, rows)
    if comparison:
        parts += ["", comparison]
    out = {"study.md": root / "study.md", "study.csv": root / "study.csv"}
    atomic_write_bytes(out["study.md"], ("\n".join(parts) + "\n").encode())
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(out["study.csv"], buf.getvalue().encode())
    atomic_write_bytes(root / "study.json", (json.dumps({"trainer": cfg.trainer, "metric": cfg.metrics,
                                                         "rows": rows}, indent=1) + "\n").encode())
    tmp = root / ".study.tmp.png"  # drawn beside it, then renamed: never a half-written picture
    try:
        plot(cfg, rows, tmp)
        os.replace(tmp, root / "study.png")
    except OSError as e:
        from hrm_deeploop.errors import os_error

        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write '{root / 'study.png'}': {os_error(e)}") from None
    out["study.png"] = root / "study.png"
    return out


def plot(cfg: StudyConfig, rows: list[dict[str, Any]], path: Path) -> Path:
    """One dot per seed and the mean per cell; cells grouped by the other axes, coloured by `compare`."""
    from hrm_deeploop.training.sweep import pyplot

    plt = pyplot()
    key = cfg.compare_key
    others = [k for k in cfg.grid if k != key]
    groups = list(_by(rows, *others))
    values = [_value(v) for v in cfg.grid[key]] if key else [""]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(groups) * max(1, len(values)) ** 0.5 + 2), 3.6), dpi=120)
    width = 0.8 / len(values)
    for j, value in enumerate(values):
        xs_mean, ys_mean = [], []
        for i, g in enumerate(groups):
            rs = [r for r in rows if tuple(str(r[k]) for k in others) == g and (not key or str(r[key]) == value)]
            ys = [r["value"] for r in rs if r["value"] is not None]
            x = i + (j - (len(values) - 1) / 2) * width
            ax.scatter([x] * len(ys), ys, color=f"C{j}", alpha=0.6, s=14)
            if ys:
                xs_mean.append(x)
                ys_mean.append(sum(ys) / len(ys))
        ax.scatter(xs_mean, ys_mean, color=f"C{j}", marker="_", s=400, label=f"{key}={value}" if key else "mean")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([", ".join(f"{k}={v}" for k, v in zip(others, g)) or "all" for g in groups], fontsize=7)
    ax.set_ylabel(cfg.metrics[0].split(".")[-1])
    ax.set_title(f"study: {cfg.trainer}, {len(cfg.seeds)} seed(s) per cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
