"""Run a plan of subcommands as subprocesses, stage after stage: one console line per stage with its
result, a progress bar only while a stage runs (on a terminal), and a time estimate for this
machine that follows from the steps already run (the demo's runner; reusable for any plan).

A `Stage` is a group of independent `Job`s (subcommand arguments) that runs side by side without
oversubscribing the CPUs: at most `cpus // threads` at once, each with OMP_NUM_THREADS =
MKL_NUM_THREADS = `threads` (the user's OMP_NUM_THREADS when set, else the CPUs shared among the
stage's jobs; a job alone gets them all). Each job's output goes to `<logs>/<title>.log` and its
command to `<logs>/commands.sh`, so every step can be re-run by hand.

The estimate: every stage carries `ref_seconds`, its wall time on the reference machine (the one
docs/demo.md was measured on). This machine's speed is the ratio of the time the stages took here
to their reference time, the running stage counted by its progress bars' fraction done (the first
steps of the first training give the first estimate); the time left is that ratio times the
reference time of the stages still to run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hrm_deeploop.errors import UserError

REDRAW_EVERY = 1.0  # seconds between progress-bar redraws while a stage runs (terminal only)
# a tqdm bar's "n/total [elapsed<remaining" (train, evaluate, generate-puzzles)
_BAR = re.compile(r"(\d+)/(\d+) \[(?:[\d:]+)<([\d:?]+)")


@dataclass
class Job:
    """One subcommand run: its arguments, and what to say of it when it has finished (default: the
    last line it printed)."""

    title: str
    args: list[str]
    summary: Callable[[], str] | None = None  # called after a successful exit
    label: str | None = None  # its name in the stage's line (default: the title)


@dataclass
class Stage:
    """Independent jobs run side by side, reported as one console line."""

    title: str
    jobs: list[Job]
    ref_seconds: float = 1.0  # its wall time on the reference machine (for the estimate)
    summary: Callable[[], str] | None = None  # the stage's result; default: each job's summary, joined
    measures: bool = True  # its speed predicts the others' (trainings, evaluations): see Clock


def minutes(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


@dataclass
class Clock:
    """This machine's time estimate: seconds spent here per reference second, over the stages
    that measure speed (trainings and evaluations; the running one by its fraction done). Stages
    that do not (data writing, where a cold numba cache costs a one-off compile) count at their
    reference time."""

    stages: list[Stage]
    started: float = field(default_factory=time.time)
    spent: float = 0.0  # wall seconds of the finished measuring stages
    ref_done: float = 0.0  # their reference seconds

    def ratio(self, running: Stage | None = None, fraction: float = 0.0, elapsed: float = 0.0) -> float | None:
        measuring = running is not None and running.measures and fraction >= 0.05 and elapsed >= 3
        ref = self.ref_done + (running.ref_seconds * fraction if measuring else 0.0)
        if ref <= 0:
            return None  # nothing measured yet
        return (self.spent + (elapsed if measuring else 0.0)) / ref

    def left(self, index: int, running: Stage | None = None, fraction: float = 0.0, elapsed: float = 0.0
             ) -> float | None:
        """Seconds left after stage `index`, plus the unfinished part of `running` (stage `index`)."""
        r = self.ratio(running, fraction, elapsed)
        if r is None:
            return None
        todo = [(s, 1.0) for s in self.stages[index + 1:]] + ([(running, 1 - fraction)] if running else [])
        return sum(s.ref_seconds * part * (r if s.measures else 1.0) for s, part in todo)

    def total(self, r: float) -> float:
        return sum(s.ref_seconds * (r if s.measures else 1.0) for s in self.stages)

    def finish(self, stage: Stage, took: float) -> None:
        if stage.measures:
            self.spent += took
            self.ref_done += stage.ref_seconds


class Pool:
    """Runs stages of jobs as subprocesses (see the module docstring)."""

    def __init__(self, logs: Path, tty: bool | None = None) -> None:
        from hrm_deeploop.runtime import available_cpus  # lazy: keeps torch off `demo --help`

        self.logs = logs
        self.cpus = available_cpus()
        self.user_threads = _int_env("OMP_NUM_THREADS")
        self.steps: list[tuple[str, float]] = []  # (job title, wall seconds), in the order they finished
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.estimate_said = False

    def describe(self) -> str:
        threads = (f"{self.user_threads} thread(s) per step (OMP_NUM_THREADS)" if self.user_threads
                   else "the CPUs shared among the steps that run at once")
        return f"{self.cpus} CPU(s) available; {threads}"

    def threads(self, n_jobs: int) -> int:
        return self.user_threads or max(1, self.cpus // max(1, min(n_jobs, self.cpus)))

    def run_plan(self, stages: list[Stage]) -> Clock:
        """Every stage in order; returns the clock."""
        clock = Clock(stages)
        print(f"{len(stages)} stages; the time it takes on this machine follows from its first training steps",
              flush=True)
        for i, stage in enumerate(stages):
            self.run_stage(stage, i, clock)
        return clock

    def run_stage(self, stage: Stage, index: int, clock: Clock) -> None:
        jobs = stage.jobs
        threads = self.threads(len(jobs))
        width = max(1, self.cpus // threads)
        self.logs.mkdir(parents=True, exist_ok=True)
        waiting, running, done = list(jobs), [], 0
        started = last_draw = time.time()
        try:
            while waiting or running:
                while waiting and len(running) < width:
                    running.append(self._start(waiting.pop(0), threads))
                time.sleep(0.2)
                for item in list(running):
                    job, proc, log, t0 = item
                    if proc.poll() is None:
                        continue
                    running.remove(item)
                    done += 1
                    self.steps.append((job.title, round(time.time() - t0, 1)))
                    if proc.returncode != 0:
                        self._clear()
                        tail = _log_lines(log)[-15:]
                        print("\n".join(f"  | {ln}" for ln in tail), file=sys.stderr)
                        raise UserError(f"step '{job.title}' failed with exit code {proc.returncode} (its output: "
                                        f"{log}; its command: {self.logs / 'commands.sh'})")
                now = time.time()
                fraction = (done + sum(_fraction(log, now - t0) for _, _, log, t0 in running)) / len(jobs)
                if not self.estimate_said and stage.measures and fraction >= 0.1:
                    r = clock.ratio(stage, fraction, now - started)
                    if r is not None:
                        self._clear()
                        print(f"this machine: about {minutes(clock.total(r))} in all (measured from the first "
                              "training steps; updated after every stage)", flush=True)
                        self.estimate_said = True
                if self.tty and now - last_draw >= REDRAW_EVERY:
                    last_draw = now
                    left = clock.left(index, stage, fraction, now - started)
                    self._draw(f"[{index + 1}/{len(clock.stages)}] {stage.title} {_bar(fraction)} "
                               f"{minutes(now - started)}" + (f", about {minutes(left)} left in all" if left else ""))
        finally:
            for _, proc, _, _ in running:  # a failure or Ctrl-C: stop the steps still running
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        took = time.time() - started
        clock.finish(stage, took)
        left = clock.left(index)
        said = stage.summary() if stage.summary else "; ".join(_job_line(j, log, len(jobs) == 1) for j, log in self._logs(jobs))
        self._clear()
        tail = f" [{minutes(time.time() - clock.started)} so far" + (
            f", about {minutes(left)} left]" if left is not None and index + 1 < len(clock.stages) else "]")
        print(f"[{index + 1}/{len(clock.stages)}] {stage.title} ({minutes(took)}): {said}{tail}", flush=True)

    def _logs(self, jobs: list[Job]) -> list[tuple[Job, Path]]:
        return [(j, self.log_path(j)) for j in jobs]

    def log_path(self, job: Job) -> Path:
        return self.logs / (re.sub(r"[^A-Za-z0-9]+", "_", job.title).strip("_") + ".log")

    def _start(self, job: Job, threads: int) -> tuple[Job, subprocess.Popen, Path, float]:
        log = self.log_path(job)
        command = "hrm-deeploop " + " ".join(shlex.quote(str(a)) for a in job.args)
        with open(self.logs / "commands.sh", "a") as f:
            f.write(f"# {job.title}\nOMP_NUM_THREADS={threads} {command}\n")
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled"),
               "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as f:
            f.write(f"$ {command}\n".encode())
            f.flush()
            proc = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *map(str, job.args)], env=env,
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return job, proc, log, time.time()

    def _draw(self, text: str) -> None:
        cols = shutil.get_terminal_size((100, 20)).columns
        sys.stdout.write("\r" + text[: cols - 1].ljust(cols - 1))
        sys.stdout.flush()

    def _clear(self) -> None:
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            sys.stdout.write("\r" + " " * (cols - 1) + "\r")
            sys.stdout.flush()


def _job_line(job: Job, log: Path, alone: bool = False) -> str:
    said = job.summary() if job.summary else (_log_lines(log) or [""])[-1]
    return said if alone else f"{job.label or job.title}: {said}"


def _bar(fraction: float, width: int = 20) -> str:
    n = round(max(0.0, min(1.0, fraction)) * width)
    return f"[{'#' * n}{'.' * (width - n)}] {100 * fraction:3.0f}%"


def _fraction(log: Path, elapsed: float) -> float:
    """How far a running job is in time: `elapsed` over elapsed plus its last progress bar's time
    left (so the start-up before the bar counts as done work); 0 before the first bar."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return 0.0
    found = _BAR.findall(tail)
    if not found:
        return 0.0
    n, total, left = found[-1]
    if "?" in left or int(n) == 0:
        return 0.0
    seconds = sum(int(x) * 60 ** i for i, x in enumerate(reversed(left.split(":"))))
    return elapsed / (elapsed + seconds) if elapsed + seconds > 0 else 0.0


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
