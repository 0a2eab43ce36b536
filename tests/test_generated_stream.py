"""`build-arc` over a generated source streams: grids in a temporary file (read back a chunk at a
time, their pages handed back), trials, augmentation and translation drawn a chunk of tasks or
examples at a time from the same RNG stream. The output is byte-identical to the build before
streaming existed (digests recorded from commit 70ff0c2, the in-memory plan, on the fixture below),
whatever the chunk sizes."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc import plan as arc_plan
from arc_data.arc.build import BuildConfig, build
from tests.arc_synth import synthetic_tasks, write_layout
from tests.test_arc_generated_sources import write_barc, write_rearc


def _sources(root: Path) -> list[str]:
    arc = write_layout(root / "arc", synthetic_tasks(3))
    rearc = write_rearc(root / "re_arc", {"0a1b2c3d": 23, "ev01": 9, "11aa22bb": 14}, seed=5)
    barc = write_barc(root / "barc" / "data.jsonl", [(7, ["0a1b2c3d.py"]), (5, ["ev02_x.py"]), (9, [])], seed=6)
    return [str(arc), f"rearc:{rearc}", f"barc:{barc}"]


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file but manifest.json (it names versions and paths); an .npz by its arrays
    (the zip entries carry the time of writing)."""
    out = {}
    for p in sorted(q for q in folder.rglob("*") if q.is_file() and q.name != "manifest.json"):
        rel = str(p.relative_to(folder))
        if p.suffix == ".npz":
            with np.load(p) as z:
                for k in sorted(z.files):
                    a = z[k]
                    out[f"{rel}:{k}"] = hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode()
                                                       + a.tobytes()).hexdigest()[:16]
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def _build(tmp_path: Path, materialize: bool) -> dict[str, dict[str, str]]:
    cfg = BuildConfig(sources=_sources(tmp_path / "src"), output_dir=str(tmp_path / "out"), num_aug=3, seed=7,
                      materialize=materialize, holdout_tasks=["ev01", "tr02"], holdout_dir=str(tmp_path / "held"),
                      progress=False)
    build(cfg)
    return {"out": digests(tmp_path / "out"), "held": digests(tmp_path / "held")}


def test_print_digests(tmp_path):  # `pytest -s -k print_digests`: the figures the test below holds
    print(json.dumps({m: _build(tmp_path / str(m), m) for m in (True, False)}, indent=1, sort_keys=True))


RECORDED = json.loads((Path(__file__).parent / "generated_stream_digests.json").read_text())


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("chunks", [None, (4, 5, 64)])
def test_streamed_build_is_byte_identical(tmp_path, monkeypatch, materialize, chunks):
    """The generated sources' build equals, file by file, the in-memory build of commit 70ff0c2;
    also with tiny chunks (4 tasks, 5 examples, 64 bytes of compact grids between two releases of
    the spill's pages), so that chunking and releasing pages change nothing."""
    if chunks:
        from arc_data.arc import build as arc_build
        from arc_data.arc import spill

        monkeypatch.setattr(arc_plan, "TASK_CHUNK", chunks[0])
        monkeypatch.setattr(arc_plan, "EXAMPLE_CHUNK", chunks[1])
        monkeypatch.setattr(spill, "SAVE_CHUNK", chunks[2])
        monkeypatch.setattr(arc_build, "ENCODE_CHUNK", 8)
    assert _build(tmp_path, materialize) == RECORDED[str(materialize).lower()]
