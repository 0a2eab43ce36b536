"""`run.py` of an offline bundle (`hrm-deeploop bundle` copies this file into it): a notebook with no
network installs the toolkit from the bundle's wheels and runs `ttt` over its GPUs into a submission.

    python /kaggle/input/BUNDLE/run.py [--challenges FILE] [--output FILE] [--minutes M] [key=value ...]

Standard library only: it runs before anything of ours is installed. In order:
1. reads the challenges file and writes the fallback submission at once (each test input as both
   attempts, `pertask.plan.fallback_attempts`' rule; tests/test_bundle.py checks the two agree), so
   the notebook has a complete submission.json whatever happens after;
2. `pip install --no-index --find-links wheels/ hrm-deeploop==VERSION` (the image's torch, numpy, ...
   are kept: the bundle assumes them, bundle.json says which);
3. counts the GPUs (`torch.cuda.device_count()` in a child process) and runs `hrm-deeploop ttt` on
   `checkpoint/`: one process per GPU under torchrun (ttt pins rank r's workers to GPU r), one
   plain process on a single GPU or none, `--workers` tasks at a time in each; `time_budget` is
   what is left of `--minutes` (default 660: 11 h of the ARC Prize's 12 h, the hour left for the
   notebook's own start), counted from this script's start, less a reserve (5%, at most 15 min);
4. holds the deadline itself: a ttt still running `GRACE_S` before the end of `--minutes` is
   stopped (SIGTERM to its process group; SIGKILL at the end), its finished tasks kept;
5. writes `--output`: ttt's submission (or, when it was stopped, each finished task's attempts from
   its `tasks/<id>/result.json`), with the fallback for any task or test input it lacks.

Exit codes: 0 done; 2 one line on stderr (unreadable challenges, an --output that cannot be written or
is the challenges file, no bundle.json beside this script, a wheel the image cannot take, a Python the
wheels were not built for), the fallback submission kept; otherwise ttt's own code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = "bundle.json"
DEFAULT_CHALLENGES = "/kaggle/input/arc-prize-2025/arc-agi_test_challenges.json"
DEFAULT_OUTPUT = "/kaggle/working/submission.json"
DEFAULT_WORK = "/kaggle/working/ttt"
DEFAULT_MINUTES = 660.0  # 11 h of the 12-hour limit
# ttt keys this script sets itself (from its own arguments); bundle refuses them in ttt_overrides
RESERVED = ("checkpoint", "challenges", "output_dir", "time_budget", "protocol", "workers")
GRACE_S = 20.0  # a ttt still running this long before the deadline is stopped (SIGTERM), killed at the deadline


class Refusal(Exception):
    """One line on stderr and exit code 2."""


def fallback(challenges: dict) -> dict:
    """Each test input as both attempts: what a task that never trained submits."""
    return {tid: [{"attempt_1": t["input"], "attempt_2": t["input"]} for t in task["test"]]
            for tid, task in challenges.items()}


def read_challenges(path: str) -> dict:
    """The challenges file as {task id: {train, test}}, each test input a grid; else a Refusal."""
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as e:
        raise Refusal(f"challenges {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise Refusal(f"challenges {path}: not JSON ({e})") from None
    if not isinstance(data, dict) or not data:
        raise Refusal(f"challenges {path}: not an object of tasks")
    for tid, task in data.items():
        tests = task.get("test") if isinstance(task, dict) else None
        if not isinstance(tests, list) or not tests or not all(isinstance(t, dict) and isinstance(t.get("input"), list)
                                                               for t in tests):
            raise Refusal(f"challenges {path}: task {tid} has no list of test inputs")
    return data


def write_json(path: Path, obj: object) -> None:
    """Written beside `path` and renamed over it: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(21, "a folder, not a file")
        tmp.write_text(json.dumps(obj))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise Refusal(f"output {path}: cannot write it ({e.strerror or e})") from None


def _grid(g: object) -> bool:
    return isinstance(g, list) and bool(g) and all(isinstance(r, list) and r and all(
        isinstance(c, int) and not isinstance(c, bool) for c in r) for r in g)


def complete(submission: object, challenges: dict) -> tuple[dict, int]:
    """ttt's submission with the fallback wherever an entry is missing or malformed; and how many
    tasks kept ttt's attempts."""
    base = fallback(challenges)
    got = submission if isinstance(submission, dict) else {}
    kept = 0
    for tid, entries in base.items():
        theirs = got.get(tid)
        if (isinstance(theirs, list) and len(theirs) == len(entries)
                and all(isinstance(e, dict) and _grid(e.get("attempt_1")) and _grid(e.get("attempt_2")) for e in theirs)):
            base[tid] = theirs
            kept += 1
    return base, kept


def finished_results(work: Path, challenges: dict) -> dict:
    """The attempts of every task ttt finished (`tasks/<id>/result.json`, pertask.plan's layout)."""
    found = {}
    for tid in challenges:
        try:
            r = json.loads((work / "tasks" / tid / "result.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and "attempts" in r:
            found[tid] = r["attempts"]
    return found


def run_until(cmd: list[str], env: dict, deadline: float, grace: float) -> int | None:
    """Run `cmd` in its own process group; stop the group (SIGTERM) `grace` seconds before
    `deadline` and kill what is left at it. Its exit code, or None when it was stopped."""
    p = subprocess.Popen(cmd, env=env, start_new_session=True)
    code: int | None = None
    try:
        code = p.wait(timeout=max(0.0, deadline - grace - time.monotonic()))
    except subprocess.TimeoutExpired:
        print("run.py: the deadline is near: stopping ttt (SIGTERM); its finished tasks are kept", flush=True)
        _signal_group(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            p.wait()
    finally:
        if p.poll() is None:  # this script itself interrupted: take ttt down with it
            _signal_group(p.pid, signal.SIGKILL)
            p.wait()
        _signal_group(p.pid, signal.SIGKILL)  # a worker left behind by its stopped parent
    return code


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already: nothing to stop
        os.killpg(pgid, sig)


def gpu_count(python: str) -> int:
    """torch.cuda.device_count() in a child process (this one never initialises CUDA)."""
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True,
                       text=True)
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else 0


def install(python: str, manifest: dict) -> None:
    """Our wheel and its bundled dependencies, from wheels/ alone."""
    want = manifest.get("python")
    have = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if want and want != have:
        raise Refusal(f"the bundle's wheels are for Python {want}; this is Python {have}: rebuild it with "
                      f"`hrm-deeploop bundle python_version={have} ...`")
    pin = f"hrm-deeploop=={manifest['version']}"
    r = subprocess.run([python, "-m", "pip", "install", "--no-index", "--find-links", str(HERE / "wheels"), pin],
                       capture_output=True, text=True)
    if r.returncode != 0:
        text = r.stdout + r.stderr
        missing = re.findall(r"No matching distribution found for (\S+)", text)
        if missing:
            raise Refusal(f"pip install {pin} from wheels/: {missing[0]} is neither in the bundle nor in this image "
                          "(or its version does not fit): rebuild the bundle with it left out of image_has")
        last = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise Refusal(f"pip install {pin} from wheels/ failed: {last[0].strip()}")
    print(f"run.py: installed {pin} from {HERE / 'wheels'}", flush=True)


def ttt_command(python: str, nproc: int, overrides: list[str]) -> list[str]:
    """`hrm-deeploop ttt`: torchrun with one rank per GPU when there are several, else one process."""
    cli = ["-m", "hrm_deeploop.cli", "ttt", *overrides]
    if nproc > 1:
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *cli]
    return [python, *cli]


def processes(gpus: int, asked: int | None, env: dict) -> int:
    """One process per visible GPU (at least one). ttt pins rank r to GPU r only where
    CUDA_VISIBLE_DEVICES is unset: a setting of exactly 0..N-1 is dropped; any other keeps one process."""
    n = asked or max(gpus, 1)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if n > 1 and visible is not None:
        if visible.replace(" ", "") == ",".join(str(i) for i in range(gpus)):
            env.pop("CUDA_VISIBLE_DEVICES")
        else:
            print(f"run.py: CUDA_VISIBLE_DEVICES={visible} is not 0..{gpus - 1}: ttt cannot pin one GPU per rank, so "
                  "it runs as one process", flush=True)
            n = 1
    return n


def parse(argv: list[str] | None, manifest: dict) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run.py", description="Install the bundle offline and run `hrm-deeploop ttt` "
                                 "into a complete submission.json.")
    ap.add_argument("--challenges", default=manifest.get("challenges") or DEFAULT_CHALLENGES,
                    help="the challenges file (default: %(default)s)")
    ap.add_argument("--output", default=DEFAULT_OUTPUT, help="the submission to write (default: %(default)s)")
    ap.add_argument("--work-dir", default=DEFAULT_WORK, help="ttt's output_dir (default: %(default)s)")
    ap.add_argument("--minutes", type=float, default=manifest.get("minutes", DEFAULT_MINUTES),
                    help="wall clock for this whole script, install included (default: %(default)s)")
    ap.add_argument("--nproc", type=int, default=None, help="ttt processes (default: one per GPU, at least one)")
    ap.add_argument("--workers", type=int, default=1, help="tasks at once in each process (default: 1)")
    ap.add_argument("--protocol", default=manifest.get("protocol", "strict"), choices=("strict", "transductive"),
                    help="ttt's protocol (default: %(default)s)")
    ap.add_argument("--no-install", action="store_true", help="skip pip (the toolkit is installed already)")
    ap.add_argument("overrides", nargs="*", help="more ttt key=value settings (after the bundle's own)")
    args = ap.parse_args(argv)
    taken = [o for o in args.overrides if o.partition("=")[0] in RESERVED]
    if taken:
        ap.error(f"{taken[0]}: set by this script's own arguments (--challenges, --work-dir, --minutes, --protocol, "
                 "--workers)")
    if args.nproc is not None and args.nproc < 1 or args.workers < 1 or args.minutes < 0:
        ap.error("--nproc and --workers are at least 1, --minutes at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    try:
        manifest = json.loads((HERE / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        print(f"run.py: error: {HERE / MANIFEST}: cannot read it ({getattr(e, 'strerror', None) or e}); run the "
              "run.py of a folder `hrm-deeploop bundle` wrote, beside its bundle.json", file=sys.stderr)
        return 2
    args = parse(argv, manifest)
    python = sys.executable
    try:
        challenges = read_challenges(args.challenges)
        out = Path(args.output)
        if out.resolve() == Path(args.challenges).resolve():
            raise Refusal(f"--output {out} is the challenges file itself; write the submission elsewhere")
        write_json(out, fallback(challenges))
        print(f"run.py: {len(challenges)} tasks; fallback submission written to {out}", flush=True)
        if not args.no_install:
            install(python, manifest)
    except Refusal as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "disabled")  # no network: a run that logged to wandb must not try
    gpus = gpu_count(python)
    nproc = processes(gpus, args.nproc, env)
    threads = max(1, (os.cpu_count() or 1) // (nproc * args.workers))
    deadline = start + args.minutes * 60
    left = (deadline - time.monotonic()) / 60
    budget = left - min(0.05 * left, 15.0)
    if budget <= 0:
        print(f"run.py: no time left of {args.minutes:g} min: the fallback submission stands", flush=True)
        return 0
    work = Path(args.work_dir)
    overrides = [f"checkpoint={HERE / 'checkpoint'}", f"challenges={args.challenges}", f"output_dir={work}",
                 f"workers={args.workers}", f"threads={threads}", f"time_budget={budget:.3f}",
                 f"protocol={args.protocol}", "progress=false", *manifest.get("ttt_overrides", []), *args.overrides]
    cmd = ttt_command(python, nproc, overrides)
    print(f"run.py: {gpus} GPU(s): {nproc} ttt process(es) x {args.workers} worker(s) x {threads} thread(s), "
          f"{left:.1f} min left, ttt's time_budget {budget:.2f} min: {' '.join(cmd[1:])}", flush=True)
    rc = run_until(cmd, env, deadline, min(GRACE_S, 0.1 * args.minutes * 60))
    theirs: object = None
    if rc is not None:
        try:
            theirs = json.loads((work / "submission.json").read_bytes())
        except (OSError, ValueError):
            theirs = None
    if not isinstance(theirs, dict):  # stopped at the deadline, or ended without a submission
        theirs = finished_results(work, challenges)
    merged, kept = complete(theirs, challenges)
    try:
        write_json(out, merged)
    except Refusal as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    how = "stopped at the deadline" if rc is None else f"exit {rc}"
    print(f"run.py: wrote {out}: {len(merged)} tasks, {kept} from ttt's results, {len(merged) - kept} fallback "
          f"(ttt {how}); {time.monotonic() - start:.0f} s of {args.minutes * 60:.0f} s", flush=True)
    return 0 if rc is None else rc


if __name__ == "__main__":
    sys.exit(main())
