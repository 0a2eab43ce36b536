"""SIGINT and SIGTERM, handled once: both become `Interrupted`, a KeyboardInterrupt.

`scancel`, `docker stop`, `timeout` and SLURM's preemption send SIGTERM; a terminal sends SIGINT.
The CLI installs one handler for both (`handled`), so every cleanup path written for Ctrl-C (an
`except KeyboardInterrupt`, a `finally`, the builders' temp folders, the atomic writes' temp files)
runs for SIGTERM too, and the CLI exits 128 + the signal number (130, 143) with one line.

A trainer cannot stop in the middle of an optimiser step and save a consistent state, so it asks
for the signal to be held back while it works (`deferred`): the first signal is recorded and the
trainer polls it between steps, checkpoints and exits; a second one raises at once (the run stops
without saving, the previous checkpoint stays). A signal nobody polls within the block's grace
(a step that loops a million cycles) is raised anyway once the grace is over: any command stops
within seconds of a SIGTERM. Torch-free, so `--help` and the builders stay light.

A launcher that starts our commands as child processes (`study`) names itself in `PARENT_ENV`:
the child then watches that parent and sends itself a SIGTERM when it is gone, so a launcher
killed even by SIGKILL leaves no run training on (each checkpoints and exits as for any SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
PARENT_ENV = "HRM_DEEPLOOP_PARENT_PID"  # set by a launcher for its children: the pid they stop with
PARENT_POLL_S = 0.5  # how often a child looks for its parent


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM as an exception; `signum` decides the exit code (128 + signum)."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


_held: list[int] | None = None  # None: not deferring; else the signals received meanwhile
_grace: Callable[[], float] | None = None  # seconds a held signal waits to be polled
_timer: threading.Timer | None = None


def _on_signal(signum: int, frame: object) -> None:
    global _timer
    if _held is not None and not _held:
        _held.append(signum)
        if _grace is not None:  # not polled in time: the same signal again, which raises at once
            _timer = threading.Timer(_grace(), os.kill, (os.getpid(), signum))
            _timer.daemon = True
            _timer.start()
        return
    raise Interrupted(signum)


def _polled() -> None:
    global _timer
    if _timer is not None:
        _timer.cancel()
        _timer = None


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Install the handler for SIGINT and SIGTERM for the duration (the CLI's entry point); the
    previous handlers come back afterwards. Outside the main thread (signals cannot be handled
    there) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    follow_parent()
    try:
        yield
    finally:
        for s, h in previous.items():
            if h is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(s, h)


def follow_parent() -> None:
    """Where `PARENT_ENV` names this process's parent, a daemon thread sends this process a SIGTERM
    once that parent is gone (re-parented: killed, even by SIGKILL). A value naming another process
    (inherited by a grandchild, e.g. a torchrun rank) is ignored."""
    raw = os.environ.get(PARENT_ENV, "")
    if not raw.isdigit() or int(raw) != os.getppid():
        return
    parent = int(raw)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()


@contextlib.contextmanager
def deferred(grace: Callable[[], float] | None = None) -> Iterator[Callable[[], int | None]]:
    """Hold back the first SIGINT/SIGTERM while the block runs; yields a poll that returns the
    signal received (or None). A second signal raises `Interrupted` at once, and so does the first
    when `grace()` seconds pass without a poll that sees it. Only effective where `handled`
    installed the handler (elsewhere Python's own SIGINT handler raises at once)."""
    global _held, _grace
    outer, _held = _held, []
    outer_grace, _grace = _grace, grace
    held = _held

    def poll() -> int | None:
        if held:
            _polled()
            return held[0]
        return None

    try:
        yield poll
    finally:
        _polled()
        _held, _grace = outer, outer_grace
