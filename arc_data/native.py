"""The builder's hot kernels compiled ahead of time into one extension module, so that `build-arc`
of task folders never imports numba: its import and CPU-target start-up (about 0.25 s) were a fifth
of an ARC-1 build at num_aug 200 (docs/benchmarks.md).

The module is numba's own code generation (`numba.pycc`) of the same Python functions, with the
argument types in KERNELS; it is compiled once per machine, in a child process, at the first call
of one of its kernels that finds none (a few seconds; a C compiler and Python's headers needed),
and kept beside numba's cache under a name that hashes the kernels' sources, numba's, numpy's and
Python's versions (any change compiles a new one). A call whose arguments are not exactly those
types, a machine where it cannot be compiled (the reason is kept in a `.failed` file beside it and
said once), or `HRM_DEEPLOOP_NATIVE=0` run the kernel through numba's JIT, as every other kernel.
The bytes written are the same either way (tests/test_native.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

ENV = "HRM_DEEPLOOP_NATIVE"  # "0": every kernel through numba's JIT
NAME = "_arc_native"

# The kernels a build of task folders runs, with the types it calls them with. An array is
# "<dtype>/<ndim>" (C-contiguous, aligned, writable; " ro" when read-only), a scalar "int"
# (a Python or numpy int64), "uint64" (numpy's) or "bool".
KERNELS: dict[str, tuple[str, ...]] = {
    "arc_data.arc.taskscan.scan_task_bytes": ("u1/1 ro", "u1/1", "i8/1", "i8/2", "u1/1"),
    "arc_data.arc.kernels.augment_tasks": ("u1/1", "i8/1", "i8/2", "i8/2", "i8/1", "u1/2", "u1/3", "int"),
    "arc_data.arc.kernels._shuffle_rows": ("u8/1", "bool", "uint64", "u1/2"),
    "arc_data.arc.kernels.example_sides": ("i4/1", "i8/1", "i4/1", "i8/1", "i8/1", "i8/2", "i8/2", "u1/1", "b1/1"),
    "arc_data.compact.encode_examples": ("u1/1", "i8/1", "i8/2", "i8/2", "i8/1", "i8/1", "u1/1", "u1/2", "u1/2",
                                         "u1/2", "u1/2"),
}
# Every file whose code or constants the kernels compile in (and this one: the types above).
SOURCES = ("native.py", "jit.py", "format.py", "compact.py", "arc/kernels.py", "arc/taskscan.py", "arc/pairscan.py")

UNRESOLVED = object()  # a listed kernel's export, not looked up yet
_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_module = UNRESOLVED


def listed(func) -> bool:
    return f"{func.__module__}.{func.__name__}" in KERNELS


def _check(kind: str):
    """A test of one argument against its kind, as numba would type it."""
    if kind == "int":
        return lambda a: type(a) is int or type(a) is np.int64
    if kind == "uint64":
        return lambda a: type(a) is np.uint64
    if kind == "bool":
        return lambda a: type(a) is bool or type(a) is np.bool_
    spec, _, ro = kind.partition(" ")
    code, nd = spec.split("/")
    dtype, ndim, writable = np.dtype(code), int(nd), ro != "ro"
    return lambda a: (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous
                      and a.flags.aligned and a.flags.writeable == writable)


class Native:
    """One export of the module, with the test of its arguments."""

    def __init__(self, fn, kinds: tuple[str, ...]) -> None:
        self.fn = fn
        self.checks = [_check(k) for k in kinds]

    def accepts(self, args) -> bool:
        return len(args) == len(self.checks) and all(c(a) for c, a in zip(self.checks, args))

    def __call__(self, *args):
        return self.fn(*args)


def _export(qualname: str) -> str:
    return f"k{list(KERNELS).index(qualname)}"


def function(func) -> Native | None:
    """The native export of kernel `func`, or None (then numba's JIT runs it)."""
    global _module
    with _lock:
        if _module is UNRESOLVED:
            _module = _load()
    if _module is None:
        return None
    qualname = f"{func.__module__}.{func.__name__}"
    return Native(getattr(_module, _export(qualname)), KERNELS[qualname])


def key() -> str:
    """The hash of what the module is compiled from: the sources, numba, numpy and Python."""
    h = hashlib.sha256()
    for rel in SOURCES:
        h.update((_HERE / rel).read_bytes())
    spec = importlib.util.find_spec("numba")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("numba is not installed")
    h.update(Path(next(iter(spec.submodule_search_locations)), "_version.py").read_bytes())
    h.update(f"{np.__version__} {sys.version} {sys.platform} {importlib.machinery.EXTENSION_SUFFIXES[0]}".encode())
    return h.hexdigest()[:20]


def folder() -> Path | None:
    """Where the module is kept: numba's cache folder (NUMBA_CACHE_DIR), else `__pycache__` beside
    this file, else the user's cache; None when none is writable."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for place in ([Path(env) / "arc_data_native"] if env else [_HERE / "__pycache__", cache_home / "hrm-deeploop"]):
        try:
            place.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(place, os.W_OK | os.X_OK):
            return place
    return None


def _load():
    """The module, loaded (compiled first when there is none); None where it cannot be had."""
    if os.environ.get(ENV, "1") == "0":
        return None
    try:
        k, where = key(), folder()
    except (OSError, ImportError):
        return None
    if where is None:
        return None
    name = f"{NAME}_{k}"
    path = where / (name + importlib.machinery.EXTENSION_SUFFIXES[0])
    failed = where / (name + ".failed")
    if not path.exists():
        if failed.exists():
            return None
        reason = _compile(where, name, path)
        if reason is not None:
            _say(f"could not compile the builder's kernels ahead of time ({reason}); numba's JIT runs them "
                 f"(about 0.25 s more start-up a command; the reason is kept in {failed}: delete it to try again)")
            with contextlib.suppress(OSError):  # said above; if it cannot be kept, tried again next time
                _write_atomic(failed, reason.encode() + b"\n")
            return None
    try:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
        loader.exec_module(module)
        return module
    except (ImportError, OSError) as e:
        _say(f"could not load {path} ({e}); numba's JIT runs the builder's kernels")
        return None


def _say(line: str) -> None:
    print(f"arc_data.native: {line}", file=sys.stderr, flush=True)


def _write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all. Not `files.atomic.atomic_file`: its one `<path>.tmp`
    would be shared by two processes compiling at once (one could load the other's half-written
    module), and importing its module costs about 50 ms on the start-up this file exists to cut."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a power cut leaves the old name or the whole module, never a torn one
        os.chmod(tmp, 0o755 if path.suffix != ".failed" else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _compile(where: Path, name: str, path: Path) -> str | None:
    """Compile in a child process (numba stays out of this one) and publish the module at `path`;
    None, or the reason it failed. An interrupted compile leaves nothing and is tried again next time."""
    _say("compiling the builder's kernels ahead of time (once per machine, a few seconds)")
    with tempfile.TemporaryDirectory(prefix="arc-native-") as tmp:
        code = (f"import sys; sys.path.insert(0, {str(_HERE.parent)!r}); "
                "from arc_data.jit import dispatchers; from arc_data.native import compile_into; "
                f"sys.exit(compile_into({tmp!r}, {name!r}, dispatchers))")
        env = dict(os.environ, **{ENV: "0"})
        try:
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return "the compile took over 10 minutes"
        built = Path(tmp) / (name + importlib.machinery.EXTENSION_SUFFIXES[0])
        if done.returncode != 0 or not built.is_file():
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            return lines[-1].strip() if lines else f"exit status {done.returncode}"
        try:
            _write_atomic(path, built.read_bytes())
        except OSError as e:  # a full disk, a folder gone read-only: the JIT runs them this time
            return f"cannot write {path}: {e.strerror or e}"
    return None


def compile_into(out_dir: str, name: str, dispatchers) -> int:
    """(In the child process.) numba.pycc's module of KERNELS into out_dir; 0, or 1 after one line
    on stderr saying why not. `dispatchers`: arc_data.jit's (this module is below it)."""
    try:
        _compile_into(out_dir, name, dispatchers)
        return 0
    except Exception as e:  # the child's one job: any failure is the reason, on one line
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "").split(". ")[0]
        print(f"{type(e).__name__}: {first}", file=sys.stderr)
        return 1


def _compile_into(out_dir: str, name: str, dispatchers) -> None:
    """The Python wrappers release the GIL as the JIT kernels' `nogil=True` does (the builder
    encodes while its writer threads write)."""
    from numba import from_dtype, types  # lazy: the compile is the one place numba is needed here
    from numba.core.compiler import Flags  # lazy: as above
    from numba.pycc import CC, compiler  # lazy: as above

    class NoGilFlags(Flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    def numba_type(kind: str):
        scalar = {"int": types.int64, "uint64": types.uint64, "bool": types.boolean}
        if kind in scalar:
            return scalar[kind]
        spec, _, ro = kind.partition(" ")
        code, nd = spec.split("/")
        return types.Array(from_dtype(np.dtype(code)), int(nd), "C", readonly=ro == "ro")

    modules = {q.rpartition(".")[0] for q in KERNELS}
    for m in sorted(modules):
        importlib.import_module(m)
    dispatchers()  # every kernel a numba dispatcher, so that their calls to each other compile
    cc = CC(name)
    cc.output_dir = out_dir
    for qualname, kinds in KERNELS.items():
        mod, _, fn = qualname.rpartition(".")
        py_func = getattr(sys.modules[mod], fn).py_func
        cc.export(_export(qualname), tuple(numba_type(k) for k in kinds))(py_func)
    compiler.Flags = NoGilFlags  # read by numba.pycc.compiler when it compiles the exports
    cc.compile()
