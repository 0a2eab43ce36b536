"""runtime.keep_freed_memory: glibc's thresholds set (ttt's processes call it), off by the variable,
and the same arithmetic: a copy's training step gives the same bits with it as without it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys
from hrm_deeploop import runtime
got = runtime.keep_freed_memory()
import torch
torch.manual_seed(0)
x = torch.randn(4096, 2048)  # 32 MiB: above glibc's own mmap ceiling
w = torch.randn(2048, 64, requires_grad=True)
(x @ w).square().sum().backward()
sys.stdout.write(f"{got} {w.grad.double().sum().item()!r}")
"""


def _probe(flag: str) -> tuple[str, str]:
    env = {**os.environ, "HRM_DEEPLOOP_KEEP_FREED": flag, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout
    got, value = out.split()
    return got, value


def _glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc only")
def test_glibc_thresholds_set_unless_turned_off_and_the_numbers_unchanged():
    on, with_it = _probe("1")
    off, without = _probe("0")
    assert (on, off) == ("True", "False")
    assert with_it == without
