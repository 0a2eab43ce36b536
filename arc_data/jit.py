"""`njit` for every kernel of arc_data (and eval's): numba is imported when a kernel first runs, not
when its module is imported; one console line before the first compile; and the builder's hot
kernels run from their ahead-of-time module when it is there (`arc_data.native`), so that a warm
`build-arc` never imports numba (its import and CPU-target start-up are about a quarter second).

`njit(...)` gives a `Kernel`: a stand-in that forwards every call. At the first call that needs
numba (any kernel without a native export, or a call whose argument types the export was not
compiled for), every kernel made so far becomes its numba dispatcher at once, and each module
global that named a stand-in is rebound to the dispatcher, so that numba, compiling one kernel,
finds the others as dispatchers (and inlines the `inline="always"` ones) exactly as with plain
`numba.njit`. Kernels decorated after that are numba dispatchers from the start.

numba compiles a `cache=True` kernel the first time it runs on a machine (up to half a minute for a
whole command, before any output) and loads it from its cache (`__pycache__` beside the module, or
`NUMBA_CACHE_DIR`) every time after. numba fires its "numba:compile" event only when it really
compiles (a cache hit fires nothing), so a listener on it says, once per process and only on a
cold cache, why the command is silent.
"""

from __future__ import annotations

import sys
import threading

from arc_data import native

__all__ = ["Kernel", "dispatchers", "njit"]

NOTICE = "compiling numba kernels once (up to ~30 s on a first run); they are cached for next time"

_made: list[Kernel] = []  # every stand-in, in the order made
_numba_njit = None  # numba.njit once imported
_lock = threading.RLock()


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


def _say_first_compile() -> None:
    """Print NOTICE to stderr at the first compile of the process (a listener on numba's event)."""
    from numba.core import event  # lazy: numba is imported by now

    class FirstCompile(event.Listener):
        said = False

        def on_start(self, ev) -> None:
            if not self.said:
                self.said = True
                print(NOTICE, file=sys.stderr, flush=True)

        def on_end(self, ev) -> None:
            """Nothing at a compile's end (numba's Listener asks for both)."""

    event.register("numba:compile", FirstCompile())


def dispatchers() -> None:
    """Import numba (once) and turn every stand-in into its dispatcher."""
    global _numba_njit
    with _lock:
        if _numba_njit is not None:
            return
        _import_numba()
        from numba import njit as numba_njit  # lazy: numba only when a kernel needs it
        _say_first_compile()
        for k in _made:
            k._dispatcher = numba_njit(**k.options)(k.py_func)
        by_id = {id(k): k._dispatcher for k in _made}
        for mod in list(sys.modules.values()):  # every global naming a stand-in: its dispatcher
            names = getattr(mod, "__dict__", None)
            if not isinstance(names, dict):
                continue
            for name, value in list(names.items()):
                if type(value) is Kernel:
                    names[name] = by_id[id(value)]
        _numba_njit = numba_njit


class Kernel:
    """A numba kernel not compiled yet: calls go to its native export (`arc_data.native`) when it
    has one for these argument types, else to its numba dispatcher (made on first need)."""

    def __init__(self, func, options: dict) -> None:
        self.py_func = func
        self.options = options
        self._dispatcher = None
        self._native = native.UNRESOLVED if native.listed(func) else None
        self.__name__, self.__qualname__ = func.__name__, func.__qualname__
        self.__module__, self.__doc__, self.__wrapped__ = func.__module__, func.__doc__, func

    @property
    def dispatcher(self):
        if self._dispatcher is None:
            dispatchers()
        return self._dispatcher

    def __call__(self, *args, **kwargs):
        fn = self._native
        if fn is native.UNRESOLVED:
            fn = self._native = native.function(self.py_func)
        if fn is not None and not kwargs and fn.accepts(args):
            return fn(*args)
        return self.dispatcher(*args, **kwargs)

    def __getattr__(self, name):  # the dispatcher's own attributes (signatures, overloads, ...)
        if name.startswith("_"):  # this object's own (and a half-made one's): never the dispatcher's
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        return f"<kernel {self.__module__}.{self.__qualname__}>"


def njit(*args, **options):
    """`numba.njit`, deferred: `@njit(cache=True, ...)` (or bare `@njit`) gives a `Kernel`, or the
    numba dispatcher itself once numba is imported."""
    if args and callable(args[0]) and len(args) == 1 and not options:
        return njit()(args[0])

    def wrap(func):
        with _lock:
            if _numba_njit is not None:
                return _numba_njit(**options)(func)
            k = Kernel(func, options)
            _made.append(k)
            return k

    return wrap
