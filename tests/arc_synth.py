"""Small synthetic ARC sources for the arc_data tests (no /work/shared, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def random_grid(rng: np.random.Generator, h: int, w: int, colours: list[int]) -> list[list[int]]:
    return rng.choice(colours, size=(h, w)).tolist()


def random_task(rng: np.random.Generator, n_train: int = 3, n_test: int = 1, max_side: int = 8,
                colours: list[int] | None = None) -> dict:
    colours = colours if colours is not None else list(range(10))

    def pair() -> dict:
        h, w = rng.integers(1, max_side + 1, size=2)
        h2, w2 = rng.integers(1, max_side + 1, size=2)
        return {"input": random_grid(rng, h, w, colours), "output": random_grid(rng, h2, w2, colours)}

    return {"train": [pair() for _ in range(n_train)], "test": [pair() for _ in range(n_test)]}


def synthetic_tasks(seed: int = 0) -> dict[str, dict[str, dict]]:
    """subset -> task name -> task. Includes edge cases: 30x30 grids, a 1x1 all-black task (no
    distinct augmentation exists), a one-colour symmetric task (few), two test inputs."""
    rng = np.random.default_rng(seed)
    training = {f"tr{i:02d}": random_task(rng, n_train=int(rng.integers(2, 5))) for i in range(5)}
    training["big30"] = {
        "train": [{"input": random_grid(rng, 30, 30, list(range(10))), "output": random_grid(rng, 30, 2, [0, 3])}],
        "test": [{"input": random_grid(rng, 2, 30, [1, 2]), "output": random_grid(rng, 30, 30, [5, 6])}],
    }
    training["black1"] = {"train": [{"input": [[0]], "output": [[0]]}], "test": [{"input": [[0]], "output": [[0]]}]}
    evaluation = {f"ev{i:02d}": random_task(rng, n_test=1 + (i % 2)) for i in range(4)}
    evaluation["sym"] = {
        "train": [{"input": [[0, 0, 0], [0, 4, 0], [0, 0, 0]], "output": [[4]]}],
        "test": [{"input": [[4, 4], [4, 4]], "output": [[0, 4, 0], [4, 4, 4], [0, 4, 0]]}],
    }
    concept = {f"Concept{i}": random_task(rng, n_test=3) for i in range(3)}
    return {"training": training, "evaluation": evaluation, "Concept": concept}


def write_layout(root: Path, subsets: dict[str, dict[str, dict]], reverse: bool = False) -> Path:
    """Write `root/<subset>/<name>.json` (in reverse name order if asked); return root."""
    for subset, tasks in subsets.items():
        d = root / subset
        d.mkdir(parents=True, exist_ok=True)
        for name in sorted(tasks, reverse=reverse):
            (d / f"{name}.json").write_text(json.dumps(tasks[name]))
    return root


def write_kaggle(folder: Path, prefix: str, tasks: dict[str, dict], solutions: bool = True) -> Path:
    """Kaggle-style `<prefix>_challenges.json` (+ `_solutions.json`); returns the challenges path."""
    folder.mkdir(parents=True, exist_ok=True)
    chal = {n: {"train": t["train"], "test": [{"input": p["input"]} for p in t["test"]]} for n, t in tasks.items()}
    path = folder / f"{prefix}_challenges.json"
    path.write_text(json.dumps(chal))
    if solutions:
        sol = {n: [p["output"] for p in t["test"]] for n, t in tasks.items()}
        (folder / f"{prefix}_solutions.json").write_text(json.dumps(sol))
    return path
