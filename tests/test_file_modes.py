"""Every output file gets the same permissions: what open() gives (0666 less the umask), whichever
writer made it. predictions.npz used to be written through mkstemp, which makes 0600 files."""

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from arc_data.files.atomic import atomic_file
from arc_data.files.jsonio import save_json
from eval.predictions import save_predictions
from hrm_deeploop.checkpoint import atomic_write_bytes
from hrm_deeploop.text.shards import write_shard


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=["022", "002"])
def test_every_writer_gives_the_mode_open_gives(tmp_path, umask):
    old = os.umask(umask)
    try:
        n = 3
        z = np.zeros((n, 4), np.uint8)
        save_predictions(tmp_path / "predictions.npz", np.arange(n), z, z + 1, np.zeros(n))
        atomic_write_bytes(tmp_path / "summary.json", b"{}\n")
        save_json(tmp_path / "plain.json", {})
        write_shard(tmp_path / "tokens.bin", [1, 2, 3])
    finally:
        os.umask(old)
    modes = {p.name: mode(p) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["predictions.npz", "summary.json", "plain.json", "tokens.bin"], 0o666 & ~umask)


def test_atomic_file_leaves_the_old_file_on_failure(tmp_path):
    path = tmp_path / "predictions.npz"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write(b"half of the new")
        raise RuntimeError("stopped mid-write")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["predictions.npz"]
    with atomic_file(path) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["predictions.npz"]
