"""The first numba compile of a process says so on the console, once, and only on a cold cache."""

import os
import subprocess
import sys
from pathlib import Path

from arc_data.jit import NOTICE

KERNEL = '''
from arc_data.jit import njit

@njit(cache=True)
def add(a, b):
    return a + b

@njit(cache=True)
def mul(a, b):
    return a * b
'''


def _run(folder: Path, cache: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(folder), str(Path(__file__).resolve().parent.parent)])}
    code = "import kern; print(kern.add(1, 2), kern.mul(2, 3))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "6"]
    return done.stderr


def test_notice_once_on_a_cold_cache_and_never_on_a_warm_one(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    cold = _run(tmp_path, tmp_path / "cache")
    assert cold.count(NOTICE) == 1, cold  # two kernels compiled, one line
    assert any((tmp_path / "cache").rglob("*.nbi"))
    warm = _run(tmp_path, tmp_path / "cache")
    assert NOTICE not in warm, warm
