"""build-puzzles against HRM's (and TRM's) own Sudoku/Maze builders, when a checkout is present."""

import os
from pathlib import Path

import pytest

REFERENCE = Path(os.environ.get("HRM_REFERENCE", Path(__file__).resolve().parents[1] / "benchmarks/out/hrm-reference"))


@pytest.mark.skipif(not (REFERENCE / "dataset/build_sudoku_dataset.py").is_file(),
                    reason="no checkout of sapientinc/HRM at HRM_REFERENCE (not shipped; see docs/puzzles.md)")
def test_compare_reference_puzzles_quick(capsys):
    from benchmarks import compare_reference_puzzles

    rc = compare_reference_puzzles.main(["--reference", str(REFERENCE), "--quick"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "DIFF" not in out and "sudoku 9x9, num_aug=0: HRM byte-identical" in out
    assert "maze 30x30, aug (num_aug=7): HRM byte-identical" in out
    assert "every marked path is a shortest S->G path" in out and "speed-up" in out
