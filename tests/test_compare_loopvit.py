"""compare_reference_loopvit.py end to end at its tiny preset, when a checkout of the official
LoopViT code is at LOOPVIT_REFERENCE (default benchmarks/out/loopvit-reference; not shipped):
both blocks bit-identical, canvases identical. Needs einops (its utils/pos_embed.py)."""

import os
from pathlib import Path

import pytest

REFERENCE = Path(os.environ.get("LOOPVIT_REFERENCE",
                                Path(__file__).resolve().parents[1] / "benchmarks/out/loopvit-reference"))


@pytest.mark.skipif(not (REFERENCE / "src/ARC_LoopViT.py").is_file(),
                    reason="no checkout of WenjieShu/LoopViT at LOOPVIT_REFERENCE (not shipped; docs/loopvit.md)")
def test_compare_reference_loopvit_is_bit_identical(capsys):
    pytest.importorskip("einops")
    from benchmarks import compare_reference_loopvit

    rc = compare_reference_loopvit.main(["--reference", str(REFERENCE), "--preset", "tiny", "--check-steps", "2",
                                         "--canvas-pairs", "50", "--steps", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "# equivalence (hybrid): ok" in out and "# equivalence (vanilla): ok" in out
    assert "50 random pairs" in out and ": 0 differ" in out and "ratio" in out


@pytest.mark.skipif(not (REFERENCE / "src/ARC_LoopViT.py").is_file(),
                    reason="no checkout of WenjieShu/LoopViT at LOOPVIT_REFERENCE (not shipped; docs/loopvit.md)")
def test_compare_reference_loopvit_with_dropout_is_bit_identical(capsys):
    """The official dropout 0.1, the global RNG seeded alike: the same masks in the same places."""
    pytest.importorskip("einops")
    from benchmarks import compare_reference_loopvit

    rc = compare_reference_loopvit.main(["--reference", str(REFERENCE), "--preset", "tiny", "--check-steps", "2",
                                         "--canvas-pairs", "10", "--skip-speed", "--dropout", "0.1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "dropout 0.1" in out and "# equivalence (hybrid): ok" in out and "# equivalence (vanilla): ok" in out
