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


def test_spilled_units_read_back_the_same_pairs(tmp_path):
    """With a spill, each unit's cells go to the temporary file as it is read (its tasks hold a range
    of the unit's pairs, re-ordered as grouped), and every task reads back the pairs the in-memory
    load gives, in the same order."""
    from arc_data.arc.generated import GeneratedSourceConfig, SpilledPacked, loader
    from arc_data.arc.sources import load_sources
    from arc_data.arc.spill import Spill

    specs = _sources(tmp_path)[1:]
    plain = load_sources(specs, load=loader(GeneratedSourceConfig(pairs_per_task=3), 9))[0]
    spill = Spill(tmp_path)
    spilled = load_sources(specs, load=loader(GeneratedSourceConfig(pairs_per_task=3), 9, spill))[0]
    assert [t.name for t in spilled] == [t.name for t in plain] and len(plain) > 10
    for a, b in zip(plain, spilled):
        assert isinstance(b.train.unit, SpilledPacked) and isinstance(b.train.idx, range)
        assert b.train == a.train and b.test == a.test and b.imitates == a.imitates
    cells = sum(x.size + y.size for t in plain for x, y in t.train + t.test)
    assert spill.size >= cells  # every kept pair's cells are in the file
    spill.close()


if __name__ == "__main__":  # `python -m tests.test_generated_stream`: the digests RECORDED holds (run on 70ff0c2)
    import contextlib
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        got = {m: _build(Path(tmp) / str(m), m) for m in (True, False)}
    print(json.dumps(got, indent=1, sort_keys=True))
