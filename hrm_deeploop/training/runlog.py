"""Run logging: metrics JSONL/CSV in the run folder always, wandb when enabled; the NaN check.

All side effects happen on rank 0. wandb runs offline when no API key is configured (or with
WANDB_MODE=offline/disabled); `logger=none` turns it off. Tests never touch the network.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from hrm_deeploop.checkpoint import atomic_write_bytes
from hrm_deeploop.errors import TrainingDiverged, UserError, os_error
from hrm_deeploop.runtime import is_main


class RunLogger:
    def __init__(self, run_dir: str | Path, logger: str = "wandb", project: str = "hrm-deeploop",
                 name: str | None = None, config: dict | None = None, resume: bool = False,
                 resume_step: int | None = None):
        """resume_step: on resume, drop logged rows past this step (the steps a killed run logged
        after its last checkpoint are re-run and would otherwise appear twice)."""
        self.run_dir = Path(run_dir)
        self.enabled = is_main()
        self.wandb = None
        self._csv_keys: list[str] | None = None
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        jsonl_path = self.run_dir / "metrics.jsonl"
        rewind = resume and resume_step is not None and jsonl_path.exists()
        self.csv_path = self.run_dir / "metrics.csv"
        for path in (jsonl_path, self.csv_path):  # opened for writing: a link could point at anyone's file
            if path.is_symlink() or (path.exists() and not path.is_file()):
                raise UserError(f"'{path}' is not a regular file (a symlink or other); the metrics log is written "
                                "only to a file of the run folder")
        try:
            if rewind:
                kept = [json.dumps(r) for r in read_rows(jsonl_path) if r.get("step", 0) <= resume_step]
                atomic_write_bytes(jsonl_path, "".join(line + "\n" for line in kept).encode())
            mode = "a" if resume else "w"
            self.jsonl = open(self.run_dir / "metrics.jsonl", mode)
            if rewind:
                self._rewrite_csv({})
            elif resume and self.csv_path.exists():
                with open(self.csv_path) as f:
                    header = f.readline().strip()
                self._csv_keys = header.split(",") if header else None
            else:
                self.csv_path.write_text("")
        except OSError as e:
            raise UserError(f"cannot write the metrics log in '{self.run_dir}': {os_error(e)}") from None
        if logger == "wandb":
            self.wandb = _init_wandb(self.run_dir, project, name, config, resume)
        elif logger not in ("none", "csv"):
            raise ValueError(f"logger='{logger}' must be wandb or none")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        try:
            self.jsonl.write(json.dumps(row) + "\n")
            self.jsonl.flush()
            if self._csv_keys is None or any(k not in self._csv_keys for k in row):
                self._rewrite_csv(row)
            else:
                with open(self.csv_path, "a", newline="") as f:
                    csv.writer(f).writerow([row.get(k, "") for k in self._csv_keys])
        except OSError as e:  # a full disk: a torn last line is what the next resume repairs
            raise UserError(f"cannot write the metrics log in '{self.run_dir}': {os_error(e)}") from None
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def _rewrite_csv(self, row: dict[str, Any]) -> None:
        """A new column appeared: rewrite the CSV from the JSONL log with the union of keys."""
        rows = read_rows(self.run_dir / "metrics.jsonl", warn=False)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        self._csv_keys = keys
        with open(self.csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(keys)
            for r in rows:
                w.writerow([r.get(k, "") for k in keys])

    def close(self) -> None:
        if not self.enabled:
            return
        try:
            self.jsonl.close()
        except OSError:  # its last write already failed and said so
            pass
        if self.wandb is not None:
            self.wandb.finish()


def read_rows(path: Path, warn: bool = True) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl. A torn last line (a run killed or out of disk mid-write) is
    dropped, with a warning line on stderr; a bad line elsewhere is an error naming the file and line."""
    lines = path.read_text(errors="replace").splitlines()
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"a {type(row).__name__}, not an object")
        except ValueError as e:
            if all(not rest.strip() for rest in lines[i:]):
                if warn:
                    print(f"warning: '{path}': dropped a torn last line {i} ({len(line)} characters) that an "
                          "interrupted run left", file=sys.stderr)
                break
            raise UserError(f"'{path}' line {i} is not a JSON record ({e}); fix or remove that line to resume") from None
        rows.append(row)
    return rows


def _init_wandb(run_dir: Path, project: str, name: str | None, config: dict | None, resume: bool):
    import wandb  # lazy: wandb only with wandb logging

    if os.environ.get("WANDB_MODE") is None and not (os.environ.get("WANDB_API_KEY") or _has_netrc()):
        os.environ["WANDB_MODE"] = "offline"
    return wandb.init(project=project, name=name, config=config, dir=str(run_dir),
                      resume="allow" if resume else None, settings=wandb.Settings(x_disable_stats=True))


def _has_netrc() -> bool:
    return (Path.home() / ".netrc").exists()


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v


def check_finite(step: int, **values: float) -> None:
    """Raise TrainingDiverged naming the step and the quantity if any value is NaN/inf."""
    for k, v in values.items():
        if not math.isfinite(float(v)):
            raise TrainingDiverged(f"non-finite {k} ({v}) at step {step}")
