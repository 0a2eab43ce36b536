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


def _import_numba() -> None:
    """Import numba and the numpy support its CPU target loads before the first kernel runs
    (compiled or cached), without two optional probes of installed packages:

    - BLAS: `numba.np.arraymath` imports `scipy.linalg.cython_blas` at import only to learn whether
      float `np.convolve`/`np.correlate` may call BLAS's dot, and importing scipy.linalg costs
      0.1-0.2 s, a tenth of a whole build-arc. No kernel here uses those two; with the probe refused
      they loop in numba instead. Every other BLAS/LAPACK function (np.dot, np.linalg) imports scipy
      itself when it compiles, as before.
    - CFFI: `numba.core.typing.cffi_utils` imports cffi and pycparser (15-50 ms) when the CPU target
      starts, only to type calls of CFFI functions inside kernels. None of ours makes one, so it is
      imported with cffi refused (numba then declines CFFI functions, as where cffi is not installed).

    A probe whose module, or whose user, this process already imported is left as it is; cffi and
    scipy stay importable by anything else."""
    probes = [name for name, user in (("scipy.linalg.cython_blas", "numba.np.arraymath"),
                                      ("cffi", "numba.core.typing.cffi_utils"))
              if name not in sys.modules and user not in sys.modules]
    for name in probes:
        sys.modules[name] = None  # type: ignore[assignment]  # `import` of a None entry: ImportError
    try:
        import numba.core.typing.cffi_utils  # noqa: F401  # lazy: imported while cffi is refused (above)
        import numba.np.arraymath  # noqa: F401  # lazy: imported while scipy's BLAS entry is refused (above)
    finally:
        for name in probes:
            del sys.modules[name]


_import_numba()

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
