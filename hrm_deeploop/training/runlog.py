"""Run logging: metrics JSONL/CSV in the run folder always, wandb when enabled; the NaN check.

All side effects happen on rank 0. wandb runs offline when no API key is configured (or with
WANDB_MODE=offline/disabled); `logger=none` turns it off. Tests never touch the network.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from hrm_deeploop.errors import TrainingDiverged
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
        if rewind:
            kept = [line for line in jsonl_path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            jsonl_path.write_text("".join(line + "\n" for line in kept))
        mode = "a" if resume else "w"
        self.jsonl = open(self.run_dir / "metrics.jsonl", mode)
        self.csv_path = self.run_dir / "metrics.csv"
        if rewind:
            self._rewrite_csv({})
        elif resume and self.csv_path.exists():
            with open(self.csv_path) as f:
                header = f.readline().strip()
            self._csv_keys = header.split(",") if header else None
        else:
            self.csv_path.write_text("")
        if logger == "wandb":
            self.wandb = _init_wandb(self.run_dir, project, name, config, resume)
        elif logger not in ("none", "csv"):
            raise ValueError(f"logger='{logger}' must be wandb or none")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()
        if self._csv_keys is None or any(k not in self._csv_keys for k in row):
            self._rewrite_csv(row)
        else:
            with open(self.csv_path, "a", newline="") as f:
                csv.writer(f).writerow([row.get(k, "") for k in self._csv_keys])
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def _rewrite_csv(self, row: dict[str, Any]) -> None:
        """A new column appeared: rewrite the CSV from the JSONL log with the union of keys."""
        rows = [json.loads(line) for line in open(self.run_dir / "metrics.jsonl")]
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
        self.jsonl.close()
        if self.wandb is not None:
            self.wandb.finish()


def _init_wandb(run_dir: Path, project: str, name: str | None, config: dict | None, resume: bool):
    import wandb

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
