"""The builder's kernels compiled ahead of time (arc_data.native): a build with them imports no
numba and writes the bytes numba's JIT writes; arguments of other types, a machine that cannot
compile them and a changed source all fall back or recompile as documented."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from arc_data import native
from tests.arc_synth import synthetic_tasks, write_layout

REPO = Path(__file__).resolve().parent.parent
CAN_COMPILE = (shutil.which(os.environ.get("CC", "cc")) is not None
               and Path(sysconfig.get_paths()["include"], "Python.h").is_file())

BUILD = """
import sys
from pathlib import Path
import arc_data.native as native
{setup}
from arc_data.arc.build import BuildConfig, build
build(BuildConfig(output_dir=sys.argv[2], sources=[sys.argv[1]], num_aug=3, seed=5, overwrite=True, progress=False))
print("numba imported:", "numba" in sys.modules)
"""


def _build(raw: Path, out: Path, setup: str = "", **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", BUILD.format(setup=setup), str(raw), str(out)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}


@pytest.mark.skipif(not CAN_COMPILE, reason="no C compiler or no Python headers: the JIT runs the kernels")
def test_a_native_build_imports_no_numba_and_writes_the_jit_bytes(tmp_path):
    raw = write_layout(tmp_path / "raw", synthetic_tasks())
    jit = _build(raw, tmp_path / "jit", **{native.ENV: "0"})
    assert "numba imported: True" in jit.stdout
    setup = f"native.folder = lambda: Path({str(tmp_path / 'cache')!r})"
    (tmp_path / "cache").mkdir()
    first = _build(raw, tmp_path / "native", setup)  # compiles the module: none is cached there yet
    again = _build(raw, tmp_path / "again", setup)
    for done in (first, again):
        assert "numba imported: False" in done.stdout, done.stderr
    assert "compiling the builder's kernels" in first.stderr
    assert "arc_data.native" not in again.stderr  # kept from the first
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(kept) == 2 and kept[0].endswith(".so") and kept[1] == kept[0].split(".")[0] + ".sha256"
    size, digest = (tmp_path / "cache" / kept[1]).read_text().split()  # the module's record: size and sha256
    module = (tmp_path / "cache" / kept[0]).read_bytes()
    assert int(size) == len(module) and digest == hashlib.sha256(module).hexdigest()
    assert _digests(tmp_path / "native") == _digests(tmp_path / "jit") == _digests(tmp_path / "again")
    assert len(_digests(tmp_path / "jit")) >= 8


def test_a_machine_that_cannot_compile_says_so_once_and_builds_with_the_jit(tmp_path):
    raw = write_layout(tmp_path / "raw", {"training": synthetic_tasks()["training"]})
    setup = f"native.folder = lambda: Path({str(tmp_path / 'cache')!r})"
    (tmp_path / "cache").mkdir()
    env = {"CC": str(tmp_path / "no-such-compiler"), "PATH": os.environ.get("PATH", "")}
    first = _build(raw, tmp_path / "a", setup, **env)
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("arc_data.native: could not compile")]
    assert len(lines) == 1, first.stderr
    failed = list((tmp_path / "cache").glob("*.failed"))
    assert len(failed) == 1 and failed[0].read_text().strip()
    assert not list((tmp_path / "cache").glob("*.so")) and not list((tmp_path / "cache").glob(".*"))
    second = _build(raw, tmp_path / "b", setup, **env)  # the failure is kept: no second try, no second line
    assert "arc_data.native" not in second.stderr, second.stderr
    assert "numba imported: True" in second.stdout
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")


def test_arguments_are_checked_as_numba_types_them():
    ok = np.zeros(4, np.uint8)
    check = native.Native(print, ("u1/1", "i8/2", "int", "uint64", "bool"))
    good = (ok, np.zeros((2, 3), np.int64), 3, np.uint64(2), True)
    assert check.accepts(good)
    ro = ok.copy()
    ro.flags.writeable = False
    for i, bad in [(0, ok.astype(np.int8)), (0, np.zeros(8, np.uint8)[::2]), (0, ro), (0, np.zeros((2, 2), np.uint8)),
                   (1, np.zeros((3, 2), np.int64).T), (2, True), (2, 3.0), (3, 2), (4, 1), (0, ok.tolist())]:
        args = list(good)
        args[i] = bad
        assert not check.accepts(tuple(args)), (i, bad)
    assert not check.accepts(good[:-1])
    assert native.Native(print, ("u1/1 ro",)).accepts((ro,))
    assert not native.Native(print, ("u1/1 ro",)).accepts((ok,))


def test_every_listed_kernel_exists_with_its_arity_and_the_key_follows_the_sources(tmp_path, monkeypatch):
    import importlib
    import inspect

    for qualname, kinds in native.KERNELS.items():
        mod, _, name = qualname.rpartition(".")
        kernel = getattr(importlib.import_module(mod), name)
        assert len(inspect.signature(kernel.py_func).parameters) == len(kinds), qualname
    import ast

    for rel in native.SOURCES:  # every module of ours a source imports is a source too (its constants compile in)
        tree = ast.parse((REPO / "arc_data" / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("arc_data."):
                dep = node.module.removeprefix("arc_data.").replace(".", "/") + ".py"
                assert dep in native.SOURCES, f"{rel} imports {node.module}, not in native.SOURCES"
    before = native.key()
    copy = tmp_path / "arc_data"
    shutil.copytree(REPO / "arc_data", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(native, "_HERE", copy)
    assert native.key() == before
    kernels = copy / "arc" / "kernels.py"
    kernels.write_text(kernels.read_text() + "\n# changed\n")
    assert native.key() != before


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
@pytest.mark.skipif(not CAN_COMPILE, reason="no C compiler or no Python headers: the JIT runs the kernels")
def test_two_processes_compiling_at_once_and_one_interrupted_leave_one_module(tmp_path):
    import signal

    raw = write_layout(tmp_path / "raw", {"training": synthetic_tasks()["training"]})
    cache = tmp_path / "cache"
    cache.mkdir()
    setup = f"native.folder = lambda: Path({str(cache)!r})"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", BUILD.format(setup=setup), str(raw)]
    # Ctrl-C while the module compiles: nothing is left in the cache, and the next run compiles it
    # Ctrl-C as a terminal sends it, even where this test runs with SIGINT ignored (started in the
    # background by a non-interactive shell, which a child inherits and Python then keeps)
    proc = subprocess.Popen([*cmd, str(tmp_path / "int")], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stderr:
        if "compiling the builder's kernels" in line:
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert list(cache.iterdir()) == [] and not (tmp_path / "int").exists()
    # two at once: both build with the module, one module is kept
    procs = [subprocess.Popen([*cmd, str(tmp_path / f"out{i}")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "numba imported: False" in out, err
    assert sorted(p.suffix for p in cache.iterdir() if p.name.startswith(native.NAME)) == [".sha256", ".so"]
    assert len(list(cache.iterdir())) == 2
    assert _digests(tmp_path / "out0") == _digests(tmp_path / "out1")


# A stray file under the module's name (issue 60): a module cut short used to kill every later build
# with SIGBUS, a FIFO hung it, another library's init code ran. Now the module is verified against
# the size and sha256 recorded when it was built, opened only when it is a regular file, and
# compiled again with one line; where it cannot be, numba's JIT runs the kernels.

FOREIGN = """
#include <Python.h>
#include <stdio.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) {
    FILE *f = fopen("%(marker)s", "w");  /* proof that its init code ran */
    if (f) fclose(f);
    return PyModule_Create(&def);
}
"""


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache folder holding the module as a build compiles it, and the tiny task folder it built."""
    if not CAN_COMPILE:
        pytest.skip("no C compiler or no Python headers: the JIT runs the kernels")
    root = tmp_path_factory.mktemp("native")
    raw = write_layout(root / "raw", {"training": synthetic_tasks()["training"]})
    (root / "cache").mkdir()
    _build(raw, root / "built", f"native.folder = lambda: Path({str(root / 'cache')!r})")
    module = next((root / "cache").glob("*.so"))
    assert (root / "cache" / (module.name.split(".")[0] + ".sha256")).is_file()
    return root


def _stray(kind: str, module: Path, good: bytes, tmp_path: Path) -> None:
    module.unlink()
    if kind == "cut short":
        module.write_bytes(good[: len(good) // 3])
    elif kind == "FIFO":
        os.mkfifo(module)
    elif kind == "link":
        (tmp_path / "elsewhere.so").write_bytes(good)
        module.symlink_to(tmp_path / "elsewhere.so")
    elif kind == "foreign":  # another extension with the right init name, padded to the recorded size
        name = module.name.split(".")[0]
        src = tmp_path / "foreign.c"
        src.write_text(FOREIGN % {"name": name, "marker": tmp_path / "foreign-init-ran"})
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], str(src), "-o", str(module)],
                       check=True, timeout=120)
        data = module.read_bytes()
        assert len(data) < len(good)
        module.write_bytes(data + b"\0" * (len(good) - len(data)))
    else:  # a flipped byte in the middle: the size is right, the hash is not
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0xFF
        module.write_bytes(bytes(flipped))


STRAYS = ["cut short", "FIFO", "link", "foreign", "one byte"]
LOAD = """
import sys
from pathlib import Path
import arc_data.native as native
native.folder = lambda: Path(sys.argv[1])
print("loaded:", native._load() is not None)
"""


@pytest.mark.parametrize("kind", STRAYS)
def test_a_stray_file_under_the_modules_name_is_never_opened_or_run(built_cache, tmp_path, kind):
    """Found, said in one line naming the file and what is wrong, and not loaded. (A `.failed` file
    from an earlier compile keeps this test from compiling: the next test compiles again.)"""
    cache = tmp_path / "cache"
    shutil.copytree(built_cache / "cache", cache)
    module = next(cache.glob("*.so"))
    _stray(kind, module, module.read_bytes(), tmp_path)
    module.with_name(module.name.split(".")[0] + ".failed").write_text("an earlier compile failed\n")
    done = subprocess.run([sys.executable, "-c", LOAD, str(cache)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)  # a FIFO must not block it
    assert done.returncode == 0 and "loaded: False" in done.stdout, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"arc_data.native: {module} "), done.stderr
    said = {"cut short": "bytes, not the", "FIFO": "is a FIFO", "link": "is a symbolic link",
            "foreign": "does not have the sha256", "one byte": "does not have the sha256"}[kind]
    assert said in lines[0] and "numba's JIT runs" in lines[0]
    assert not (tmp_path / "foreign-init-ran").exists()  # never loaded: its init code did not run


@pytest.mark.slow  # each compiles the module again (about 11 s): the FIFO case runs in .ci/run's second step
@pytest.mark.parametrize("kind", STRAYS)
def test_a_stray_file_under_the_modules_name_is_compiled_again_with_one_line(built_cache, tmp_path, kind):
    cache = tmp_path / "cache"
    shutil.copytree(built_cache / "cache", cache)
    module = next(cache.glob("*.so"))
    good = module.read_bytes()
    _stray(kind, module, good, tmp_path)
    setup = f"native.folder = lambda: Path({str(cache)!r})"
    done = _build(built_cache / "raw", tmp_path / "out", setup)  # a timeout, not a hang, if it blocked
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("arc_data.native")]
    assert len(lines) == 1 and "compiling the builder's kernels again" in lines[0], done.stderr
    assert str(module) in lines[0] and "Traceback" not in done.stderr
    assert "numba imported: False" in done.stdout
    assert not (tmp_path / "foreign-init-ran").exists()  # never loaded: its init code did not run
    assert not module.is_symlink() and module.read_bytes() == good  # the same machine compiles the same bytes
    assert _digests(tmp_path / "out") == _digests(built_cache / "built")
    again = _build(built_cache / "raw", tmp_path / "again", setup)
    assert "arc_data.native" not in again.stderr and "numba imported: False" in again.stdout


def test_a_stray_module_that_cannot_be_compiled_again_falls_back_to_the_jit(built_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(built_cache / "cache", cache)
    module = next(cache.glob("*.so"))
    _stray("cut short", module, module.read_bytes(), tmp_path)
    setup = f"native.folder = lambda: Path({str(cache)!r})"
    env = {"CC": str(tmp_path / "no-such-compiler"), "PATH": os.environ.get("PATH", "")}
    done = _build(built_cache / "raw", tmp_path / "out", setup, **env)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("arc_data.native")]
    assert len(lines) == 2 and "compiling the builder's kernels again" in lines[0], done.stderr
    assert "could not compile" in lines[1] and "Traceback" not in done.stderr
    assert "numba imported: True" in done.stdout
    assert _digests(tmp_path / "out") == _digests(built_cache / "built")
    # the failure is kept: the next build says one line (the stray file is still there) and uses the JIT
    again = _build(built_cache / "raw", tmp_path / "again", setup, **env)
    lines = [ln for ln in again.stderr.splitlines() if ln.startswith("arc_data.native")]
    assert len(lines) == 1 and "numba's JIT runs" in lines[0] and "numba imported: True" in again.stdout


def test_a_record_that_is_a_fifo_is_never_opened(built_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(built_cache / "cache", cache)
    record = next(cache.glob("*.sha256"))
    record.unlink()
    os.mkfifo(record)
    module = next(cache.glob("*.so"))
    with pytest.raises(native.Mismatch, match="FIFO"):
        native._open_verified(module, record)
    record.unlink()
    record.write_text("12 " + "0" * 64 + "\n")
    with pytest.raises(native.Mismatch, match="not the 12 recorded"):
        native._open_verified(module, record)
    os.mkfifo(tmp_path / "fifo.so")
    with pytest.raises(native.Mismatch, match="FIFO"):
        native._open_verified(tmp_path / "fifo.so", record)
    with pytest.raises(FileNotFoundError):
        native._open_verified(tmp_path / "none.so", record)
