"""The committed records of results section 4.9's ARC runs (docs/figures/data/same_budget_arc.jsonl): one
JSON object a line, keyed by (model, scheme, lr, seed, steps), read with one-line errors, merged and written
atomically. `same_budget.py --task arc --collect` adds a machine's finished runs; its table and figure read them."""

from __future__ import annotations

import json
from pathlib import Path

RECORDS = Path(__file__).resolve().parent / "data" / "same_budget_arc.jsonl"
RECORD_KEY = ("model", "scheme", "lr", "seed", "steps")


def run_key(record: dict) -> tuple:
    """Which run a record is of: (model, scheme, lr, seed, steps)."""
    return tuple(record[k] for k in RECORD_KEY)


def read_records(path: Path | None = None) -> list[dict]:
    """The committed records of section 4.9's runs (RECORDS), one JSON object a line; a malformed line is a one-line
    error naming the file and the line."""
    path, out = path or RECORDS, []
    for n, line in enumerate(path.read_text().splitlines() if path.is_file() else [], 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{n}: not a JSON object ({e})") from None
        if not isinstance(rec, dict):
            raise SystemExit(f"{path}:{n}: not a JSON object (a {type(rec).__name__})")
        missing = [k for k in (*RECORD_KEY, "exact_copies", "copies", "pass_at_k", "solved", "train_fit", "params")
                   if k not in rec]
        if missing:
            raise SystemExit(f"{path}:{n}: a record without {', '.join(missing)}")
        out.append(rec)
    return out


def merge_records(old: list[dict], new: list[dict]) -> list[dict]:
    """old with every record of new added, a record of the same run (model, scheme, lr, seed, steps) replaced;
    sorted by that key, so the file's order does not depend on when runs finished."""
    by_key = {run_key(r): r for r in [*old, *new]}
    return [by_key[k] for k in sorted(by_key, key=lambda k: (k[0], k[1], float(k[2]), k[3], k[4]))]


def write_records(records: list[dict], path: Path | None = None) -> None:
    from hrm_deeploop.checkpoint import atomic_write_bytes

    path = path or RECORDS
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode())


def machine() -> str:
    """The CPU model and torch release of this machine, for the records it collects."""
    import platform

    import torch

    from hrm_deeploop.runtime import available_cpus

    info = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (info.read_text().splitlines() if info.is_file() else [])
             if line.startswith("model name")]
    cpu = names[0] if names else platform.processor()
    return f"{cpu}, {available_cpus()} cores, torch {torch.__version__}"
