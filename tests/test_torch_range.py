"""The torch range of pyproject.toml: its floor is the newest introduction among the torch features
the code uses (docs/development.md#the-torch-range), and the installed torch has each of them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
# feature -> the torch release that introduced it (docs/development.md#the-torch-range)
FEATURES = {
    "F.scaled_dot_product_attention": (2, 0),
    "torch.compile": (2, 0),
    "torch._foreach_copy_": (2, 1),
    "torch.serialization.safe_globals": (2, 5),
    "weights-only build of NumPy dtypes made by an allowlisted callable": (2, 6),
    "torch.distributed.fsdp.fully_shard": (2, 6),
    "torch.distributed.checkpoint.state_dict": (2, 2),
}


def _floor(name: str) -> tuple[int, ...]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{name}\s*[<>=!~]", d))
    m = re.fullmatch(rf"{name}\s*>=\s*([\d.]+)", spec)
    assert m, f"{spec!r}: the project accepts a range (>=), not a pin"
    return tuple(int(x) for x in m.group(1).split("."))


def test_floor_is_the_newest_feature_and_documented():
    assert _floor("torch") == max(FEATURES.values())
    assert _floor("triton") == (3, 2)  # what torch 2.6 ships with
    doc = (ROOT / "docs" / "development.md").read_text()
    assert "`torch>=2.6`" in doc and "`triton>=3.2`" in doc
    pins = (ROOT / "constraints-cpu.txt").read_text()
    assert re.search(r"^torch==[\d.]+$", pins, re.M) and re.search(r"^triton==[\d.]+$", pins, re.M)


def test_installed_torch_has_every_feature(tmp_path):
    from hrm_deeploop import checkpoint

    q = torch.randn(1, 2, 4, 8)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, q, q),
                               torch.softmax(q @ q.transpose(-1, -2) / 8 ** 0.5, -1) @ q)
    assert callable(torch.compile)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: F401
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    dst, src = [torch.zeros(3)], [torch.ones(3)]
    torch._foreach_copy_(dst, src)
    assert dst[0].eq(1).all()
    # safe_globals and weights-only NumPy arrays: what checkpoint.load relies on for older train states
    checkpoint.save(tmp_path / "s.pt", {"state": np.arange(4, dtype=np.uint32)})
    assert checkpoint.load(tmp_path / "s.pt")["state"].tolist() == [0, 1, 2, 3]
