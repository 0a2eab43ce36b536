"""`njit` for every kernel of arc_data (and eval's), plus one console line before the first compile.

numba compiles a `cache=True` kernel the first time it runs on a machine (up to half a minute for a
whole command, before any output) and loads it from its cache (`__pycache__` beside the module, or
`NUMBA_CACHE_DIR`) every time after. numba fires its "numba:compile" event only when it really
compiles (a cache hit fires nothing), so a listener on it says, once per process and only on a
cold cache, why the command is silent.
"""

from __future__ import annotations

import sys

from numba import njit
from numba.core import event

__all__ = ["njit"]

NOTICE = "compiling numba kernels once (up to ~30 s on a first run); they are cached for next time"


class _FirstCompile(event.Listener):
    """Prints NOTICE to stderr at the first compile of the process, then unregisters itself."""

    def __init__(self) -> None:
        self.said = False

    def on_start(self, ev: event.Event) -> None:
        if not self.said:
            self.said = True
            print(NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev: event.Event) -> None:
        pass


_listener = _FirstCompile()
event.register("numba:compile", _listener)
