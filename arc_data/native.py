"""The builder's hot kernels compiled ahead of time into one extension module, so that `build-arc`
of task folders never imports numba: its import and CPU-target start-up (about 0.25 s) were a fifth
of an ARC-1 build at num_aug 200 (docs/benchmarks.md). The vote's kernels (`eval.arc.decode`, the
report's labels in `eval.arc.labels`) are in it too: `vote` starts without numba as well.

The module is numba's own code generation (`numba.pycc`) of the same Python functions, with the
argument types in KERNELS; it is compiled once per machine, in a child process, at the first call
of one of its kernels that finds none (a few seconds; a C compiler and Python's headers needed),
and kept beside numba's cache under a name that hashes the kernels' sources, numba's, numpy's and
Python's versions (any change compiles a new one). Its size and sha256 are recorded beside it when it
is built (a `.sha256` file, written after it), and it is loaded only when it is a regular file with
those: a module cut short, a FIFO, a link or another library under its name is compiled again with
one line on stderr, never opened or run. A call whose arguments are not exactly those
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
import stat
import sys
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
    # the vote's (`hrm-deeploop vote`: no numba at start-up either): decode, and its report's labels
    "eval.arc.decode._decode_keys": ("u1/2 ro", "i8/1 ro", "i8/1 ro", "u1/1 ro", "u1/2 ro", "u8/2", "u1/2", "u1/1"),
    "eval.arc.decode._decode_grids": ("u1/2 ro", "i8/1 ro", "i8/1 ro", "u1/1 ro", "u1/2 ro", "u1/2 ro", "i8/1 ro",
                                      "u1/1"),
    "eval.arc.labels.measure_labels": ("i8/1 ro", "f8/1 ro", "i8/1 ro", "i8/1 ro", "int", "i8/2"),
    "eval.arc.labels.paint_labels": ("u1/3 ro", "i8/1 ro", "f8/1 ro", "i8/1 ro", "i8/1 ro", "i8/2 ro", "i8/1 ro", "int",
                                     "int", "int", "u1/1", "i8/2"),
    # the report's pictures and tasks.json's grids (`eval.arc.paint`)
    "eval.arc.paint.paint_picture": ("u1/2", "int", "int", "u1/1 ro", "i8/2 ro", "i8/2 ro"),
    "eval.arc.paint.grid_texts": ("u1/1 ro", "i8/1 ro", "i8/2 ro", "u1/1", "i8/1"),
    # the report's pictures painted and deflated in one call, and its encoder alone (`eval.arc.deflate`)
    "eval.arc.paint.paint_png": ("int", "int", "int", "int", "u1/1 ro", "i8/2 ro", "i8/2 ro", "u1/1 ro", "i8/2 ro",
                                 "i8/2 ro", "i8/2 ro", "i8/1 ro", "u1/2", "i4/1", "u1/1", "i8/1"),
    "eval.arc.deflate.deflate_rows": ("u1/2 ro", "b1/1 ro", "i8/2 ro", "i8/2 ro", "i8/1 ro", "i4/1", "u1/1", "i8/1"),
    # the vote's groupings of rows by equal keys (`eval.arc.grouping`)
    "eval.arc.grouping._group_rows": ("i8/1 ro", "u8/2 ro", "i8/1", "i8/1", "i8/1"),
}
# Every file whose code or constants the kernels compile in (and this one: the types above), in
# arc_data; and the vote's, beside it (relative to the folder holding arc_data).
SOURCES = ("native.py", "jit.py", "format.py", "compact.py", "arc/kernels.py", "arc/taskscan.py", "arc/pairscan.py",
           "grid_key.py")
VOTE_SOURCES = ("eval/arc/decode.py", "eval/arc/labels.py", "eval/arc/paint.py", "eval/arc/deflate.py",
                "eval/arc/grouping.py")

UNRESOLVED = object()  # a listed kernel's export, not looked up yet
_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
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
    for rel in VOTE_SOURCES:
        h.update((_ROOT / rel).read_bytes())
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
    """The module, loaded (compiled first when there is none, or when the file under its name is not
    the one recorded when it was built); None where it cannot be had."""
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
    try:
        fd = _open_verified(path, where / (name + ".sha256"))
    except FileNotFoundError:
        fd, problem = None, None
    except (Mismatch, OSError) as e:
        fd, problem = None, f"{path} {e}"
    if fd is not None:
        try:
            return _exec(name, path, f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else str(path))
        finally:
            os.close(fd)
    if failed.exists():  # a compile failed here before: said then (and now, when a stray file is there)
        if problem is not None:
            _say(f"{problem}; numba's JIT runs the builder's kernels (not compiled again: {failed} says why "
                 "it failed before; delete both to try again)")
        return None
    if problem is None:
        _say("compiling the builder's kernels ahead of time (once per machine, a few seconds)")
    else:
        _say(f"{problem}; compiling the builder's kernels again (a few seconds)")
    reason, module = _compile(where, name, path)
    if reason is not None:
        _say(f"could not compile the builder's kernels ahead of time ({reason}); numba's JIT runs them "
             f"(about 0.25 s more start-up a command; the reason is kept in {failed}: delete it to try again)")
        with contextlib.suppress(OSError):  # said above; if it cannot be kept, tried again next time
            _write_atomic(failed, reason.encode() + b"\n", 0o644)
    return module


class Mismatch(Exception):
    """The file under the module's name is not the module built here (the message says how)."""


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return what
    return "not a regular file"


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of `path` and its stat, when it is a regular file: anything else is
    refused from its lstat, before any open (a FIFO would block the open, a link point anywhere);
    FileNotFoundError when nothing is there."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Mismatch(f"is {_kind(st.st_mode)}, not a regular file")
    # O_NOFOLLOW | O_NONBLOCK: whatever replaced it since the lstat is neither followed nor waited on
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Mismatch(f"is {_kind(st.st_mode)}, not a regular file")
    return fd, st


def _open_verified(path: Path, record: Path) -> int:
    """A descriptor of the module at `path` whose bytes have the size and sha256 in `record` (written
    when it was built); Mismatch saying how it differs otherwise, FileNotFoundError when there is
    no module."""
    fd, st = _open_regular(path)
    try:
        try:
            rfd, rst = _open_regular(record)
        except FileNotFoundError:
            raise Mismatch(f"has no record of its size and hash ({record.name} is missing)") from None
        except Mismatch as e:
            raise Mismatch(f"has no readable record of its size and hash ({record.name} {e})") from None
        with os.fdopen(rfd, "rb") as f:
            fields = f.read(200).split() if rst.st_size <= 200 else []
        if len(fields) != 2 or not fields[0].isdigit() or len(fields[1]) != 64:
            raise Mismatch(f"has no readable record of its size and hash ({record.name})")
        size, digest = int(fields[0]), fields[1].decode("ascii", "replace")
        if st.st_size != size:
            raise Mismatch(f"is {st.st_size} bytes, not the {size} recorded when it was built")
        h = hashlib.sha256()
        with os.fdopen(os.dup(fd), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != digest:
            raise Mismatch("does not have the sha256 recorded when it was built")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _exec(name: str, path: Path, load_from: str):
    """The extension module in `load_from` (the verified file: its descriptor's path, so that the
    bytes hashed are the bytes loaded), with every export; None after one line where it fails."""
    try:
        loader = importlib.machinery.ExtensionFileLoader(name, load_from)
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
        loader.exec_module(module)
    except (ImportError, OSError) as e:
        _say(f"could not load {path} ({e}); numba's JIT runs the builder's kernels")
        return None
    missing = [_export(q) for q in KERNELS if not hasattr(module, _export(q))]
    if missing:
        _say(f"{path} lacks the export(s) {', '.join(missing)}; numba's JIT runs the builder's kernels")
        return None
    return module


def _say(line: str) -> None:
    print(f"arc_data.native: {line}", file=sys.stderr, flush=True)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """`data` at `path`, whole or not at all. Not `files.atomic.atomic_file`: its one `<path>.tmp`
    would be shared by two processes compiling at once (one could load the other's half-written
    module), and importing its module costs about 50 ms on the start-up this file exists to cut."""
    import tempfile  # lazy: only where a module is written (a start that loads one skips it)

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a power cut leaves the old name or the whole module, never a torn one
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _compile(where: Path, name: str, path: Path) -> tuple[str | None, object]:
    """Compile in a child process (numba stays out of this one), publish the module at `path` and its
    size and sha256 beside it, and load it from the bytes compiled; (None, module), or (the reason
    it failed, None). An interrupted compile leaves nothing and is tried again next time."""
    import subprocess  # lazy: only to compile (a start that loads the module skips it, 2-3 ms)
    import tempfile  # lazy: as subprocess

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    with tempfile.TemporaryDirectory(prefix="arc-native-") as tmp:
        code = (f"import sys; sys.path.insert(0, {str(_HERE.parent)!r}); "
                "from arc_data.jit import dispatchers; from arc_data.native import compile_into; "
                f"sys.exit(compile_into({tmp!r}, {name!r}, dispatchers))")
        env = dict(os.environ, **{ENV: "0"})
        try:
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return "the compile took over 10 minutes", None
        built = Path(tmp) / (name + suffix)
        if done.returncode != 0 or not built.is_file():
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            return (lines[-1].strip() if lines else f"exit status {done.returncode}"), None
        data = built.read_bytes()
        record = where / (name + ".sha256")
        try:
            _write_atomic(path, data, 0o755)
        except OSError as e:  # a full disk, a folder gone read-only, a folder under its name: the JIT this time
            return f"cannot write {path}: {e.strerror or e}", None
        try:
            _write_atomic(record, f"{len(data)} {hashlib.sha256(data).hexdigest()}\n".encode(), 0o644)
        except OSError as e:  # a module without its record would only be compiled again
            with contextlib.suppress(OSError):
                path.unlink()
            return f"cannot write {record}: {e.strerror or e}", None
        # the bytes just compiled, not what is at `path` now (another process may have replaced it since)
        return None, _exec(name, path, str(built))


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
