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
    assert [p.name.startswith(native.NAME) for p in (tmp_path / "cache").iterdir()] == [True]
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
    proc = subprocess.Popen([*cmd, str(tmp_path / "int")], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
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
    assert [p.name.startswith(native.NAME) and p.suffix == ".so" for p in cache.iterdir()] == [True]
    assert _digests(tmp_path / "out0") == _digests(tmp_path / "out1")
