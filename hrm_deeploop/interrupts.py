"""SIGINT and SIGTERM, handled once: both become `Interrupted`, a KeyboardInterrupt.

`scancel`, `docker stop`, `timeout` and SLURM's preemption send SIGTERM; a terminal sends SIGINT.
The CLI installs one handler for both (`handled`), so every cleanup path written for Ctrl-C (an
`except KeyboardInterrupt`, a `finally`, the builders' temp folders, the atomic writes' temp files)
runs for SIGTERM too, and the CLI exits 128 + the signal number (130, 143) with one line.

A trainer cannot stop in the middle of an optimiser step and save a consistent state, so it asks
for the signal to be held back while it works (`deferred`): the first signal is recorded and the
trainer polls it between steps, checkpoints and exits; a second one raises at once (the run stops
without saving, the previous checkpoint stays). Torch-free, so `--help` and the builders stay light.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM as an exception; `signum` decides the exit code (128 + signum)."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


_held: list[int] | None = None  # None: not deferring; else the signals received meanwhile


def _on_signal(signum: int, frame: object) -> None:
    if _held is not None and not _held:
        _held.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Install the handler for SIGINT and SIGTERM for the duration (the CLI's entry point); the
    previous handlers come back afterwards. Outside the main thread (signals cannot be handled
    there) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            if h is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(s, h)


@contextlib.contextmanager
def deferred() -> Iterator[Callable[[], int | None]]:
    """Hold back the first SIGINT/SIGTERM while the block runs; yields a poll that returns the
    signal received (or None). A second signal raises `Interrupted` at once. Only effective where
    `handled` installed the handler (elsewhere Python's own SIGINT handler raises at once)."""
    global _held
    outer, _held = _held, []
    held = _held
    try:
        yield lambda: held[0] if held else None
    finally:
        _held = outer
