"""Every evaluation output folder's one rule: refuse before any work when outputs exist and
overwrite is off, then stage every file in a hidden folder and publish them together
(`arc_data.files.publish.staged_outputs`), so a crash, a full disk or Ctrl-C never leaves half-written
outputs and an earlier good set stays. The task rooms name their files and write them into the stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from arc_data.files.publish import staged_outputs
from hrm_deeploop.errors import UserError


def check_outputs(output_dir: str | Path, names: Sequence[str], overwrite: bool, what: str) -> None:
    """One line, before any work, if output_dir holds any of `names` ("<what> outputs") and overwrite is off."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise UserError(f"output_dir {output_dir} exists and is not a folder")
    existing = [n for n in names if (output_dir / n).exists()]
    if existing and not overwrite:
        raise UserError(f"{output_dir} already holds {what} outputs {existing}; pass overwrite=true to replace them")


def write_outputs(output_dir: str | Path, names: Sequence[str], overwrite: bool, what: str, command: str,
                  write: Callable[[Path], object]) -> list[Path]:
    """`write(stage)` writes the files into a hidden stage; `names` are then published together (an
    existing one the stage lacks is removed with overwrite, so a folder never mixes two runs).
    Returns the paths written."""
    output_dir = Path(output_dir)
    check_outputs(output_dir, names, overwrite, what)
    with staged_outputs(output_dir, names, overwrite, command) as stage:
        write(stage)
        written = [n for n in names if (stage / n).exists()]
    return [output_dir / n for n in written]
