"""The conformance matrix, generated from the family registry (`hrm_deeploop.families.FAMILIES`):
every family x every command that serves it, at its tiny size (`Family.tiny`):

- its trainer trains it; its evaluator scores the run folder;
- `export` writes a Hub folder, and the evaluator reads it back as `hf://OWNER/NAME` (offline,
  HRM_DEEPLOOP_HUB_DIR) with the same predictions, byte for byte;
- its trainer starts from the run folder (`init_from=RUN`) where the trainer takes init_from, and
  inherits the run's settings (one line);
- `ttt protocol=strict` (where ttt serves it) trains every task, with no placeholder attempt (an
  attempt is a predicted grid or the test input, never an empty grid or [[0]]).

A family registered tomorrow is run through each of these the day it is added: only its tiny
overrides and the sizes of its trainer below are needed."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import COMMANDS, resolve, run_subcommand
from hrm_deeploop.families import FAMILIES, Family, of_checkpoint
from tests.arc_synth import write_kaggle
from tests.gpt_helpers import write_gpt2_shards

pytest.importorskip("safetensors")

# each trainer's tiny run: a couple of steps, small batches, no logger (the family's own flavour first)
SIZES = {
    "train": ["model.hidden_size=32", "model.halt_max_steps=1", "train.global_batch_size=4", "optim.warmup_steps=1",
              "train.max_steps=2", "checkpoint.every=2", "eval.every=2", "train.progress=false", "logger=none"],
    "train-vit": ["train.global_batch_size=4", "optim.warmup_steps=1", "train.max_steps=2", "train.progress=false",
                  "logger=none", "eval.max_batches=1"],
    "train-gpt": ["model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16", "device=cpu",
                  "logger=none", "train.progress=false", "train.micro_batch_size=2", "train.global_batch_tokens=64",
                  "optim.warmup_steps=1", "data.unigram_tokens=100000", "train.max_steps=2"],
}
EVALUATE = {"evaluate": ["global_batch_size=4", "passes=1", "progress=false", "report=false"],
            "eval-gpt": ["batch_size=2", "max_batches=2"]}
TTT = ["steps=1", "batch=4", "num_aug=1", "workers=1", "threads=1", "device=cpu", "progress=false", "passes=1",
       "eval_overrides=['global_batch_size=4']"]


def _tasks(seed: int, n: int, prefix: str, side: int) -> dict[str, dict]:
    """Colour-permutation tasks on side x side grids (8 x 8 does not fit a 16-cell canvas at scale 2:
    a LoopViT copy must carry its run's evaluation scale 1)."""
    rng = np.random.default_rng(seed)
    tasks = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = [{"input": (g := rng.integers(0, 10, size=(side, side))).tolist(), "output": perm[g].tolist()}
                 for _ in range(3)]
        tasks[f"{prefix}{i:02d}"] = {"train": pairs[:2], "test": pairs[2:]}
    return tasks


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """ARC data (three pretraining tasks and two held-out ones for the evaluators' test split; two
    unseen ones as Kaggle challenges/solutions for ttt) and GPT shards."""
    root = tmp_path_factory.mktemp("families")
    pre = write_kaggle(root / "raw", "arc-agi_training", _tasks(0, 3, "pre", 3), solutions=True)
    held = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(2, 2, "val", 3), solutions=True)
    build(BuildConfig(sources=[str(pre), str(held)], output_dir=str(root / "arc"), num_aug=1, seed=0,
                      progress=False))
    unseen = write_kaggle(root / "unseen", "arc-agi_evaluation", _tasks(1, 1, "new", 8), solutions=True)
    write_gpt2_shards(root / "shards")
    return root, unseen


def _data(fam: Family, root: Path) -> list[str]:
    if fam.predictor == "text":
        return [f"data.train={root}/shards/train_*.bin", f"data.val={root}/shards/val_000000.bin"]
    return [f"data_dir={root / 'arc'}"]


def _evaluate(fam: Family, checkpoint: str, root: Path, out: Path) -> bytes:
    """The evaluator on `checkpoint`; the bytes that must not change between a run and its export."""
    extra = [f"data={root}/shards/val_000000.bin"] if fam.evaluator == "eval-gpt" else [f"data_dir={root / 'arc'}"]
    assert run_subcommand(fam.evaluator, [f"checkpoint={checkpoint}", f"output_dir={out}", *extra,
                                          *EVALUATE[fam.evaluator]]) == 0
    if fam.evaluator == "evaluate":
        return (out / "predictions.npz").read_bytes()
    result = json.loads(next(out.glob("*.json")).read_text())
    return json.dumps({k: v for k, v in result.items() if "loss" in k or "ppl" in k or "perplexity" in k},
                      sort_keys=True).encode()


@pytest.fixture(scope="module")
def runs(world):
    """Each family's tiny run, trained once for the module."""
    root, _ = world
    out = {}
    for fam in FAMILIES.values():
        run = root / f"run_{fam.name}"
        assert run_subcommand(fam.trainer, [*fam.tiny, *SIZES[fam.trainer], *_data(fam, root),
                                            f"output_dir={run}"]) == 0, fam.name
        out[fam.name] = run
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_train_evaluate_export_and_the_hub_give_the_same_predictions(name, world, runs, tmp_path, monkeypatch):
    fam = FAMILIES[name]
    root, _ = world
    assert of_checkpoint(runs[name]) is fam  # the registry finds the family from the run, no weights read
    assert fam.serves("export") and fam.serves(fam.evaluator) and fam.serves(fam.trainer)
    ours = _evaluate(fam, str(runs[name]), root, tmp_path / "eval_run")
    hub = tmp_path / "hub"
    assert run_subcommand("export", [f"checkpoint={runs[name]}", f"output_dir={hub / 'me' / f'tiny-{name}'}",
                                     f"repo_id=me/tiny-{name}"]) == 0
    card = (hub / "me" / f"tiny-{name}" / "README.md").read_text()
    assert fam.title in card and f"hrm-deeploop {fam.evaluator} checkpoint=hf://me/tiny-{name}" in card
    monkeypatch.setenv("HRM_DEEPLOOP_HUB_DIR", str(hub))
    assert of_checkpoint(f"hf://me/tiny-{name}") is fam
    theirs = _evaluate(fam, f"hf://me/tiny-{name}", root, tmp_path / "eval_hub")
    assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest()
    from hrm_deeploop.training.inherit import inherit

    taken = inherit([f"init_from=hf://me/tiny-{name}", *_data(fam, root)], command=fam.trainer)
    for section in ("optim", *fam.carried):  # what a run from the Hub copy inherits, as from the run folder
        assert any(o.startswith(f"{section}.") for o in taken), (section, taken)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_init_from_a_run_folder_inherits_its_settings(name, world, runs, tmp_path, capsys):
    fam = FAMILIES[name]
    schema = resolve(COMMANDS[fam.trainer].schema)
    if "init_from" not in {f.name for f in fields(schema)}:
        pytest.skip(f"{fam.trainer} takes no init_from")
    root, _ = world
    sizes = [o for o in SIZES[fam.trainer] if not o.startswith(("optim.", "train.global_batch_size"))]
    assert run_subcommand(fam.trainer, [*sizes, *_data(fam, root), f"output_dir={tmp_path / 'again'}",
                                        f"init_from={runs[name]}"]) == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if "init_from: inherited from" in ln)
    assert "optim.warmup_steps=1" in line and "train.global_batch_size=4" in line, line
    for section in fam.carried:
        assert f" {section}." in line, line


@pytest.mark.parametrize("name", [f.name for f in FAMILIES.values() if f.serves("ttt")])
def test_ttt_strict_trains_every_task_without_a_placeholder(name, world, runs, tmp_path):
    root, chal = world
    out = tmp_path / "ttt"
    assert run_subcommand("ttt", [f"checkpoint={runs[name]}", f"challenges={chal}", f"output_dir={out}",
                                  "protocol=strict", *TTT]) == 0
    summary = json.loads((out / "ttt_summary.json").read_text())
    assert set(summary["status"]) <= {"trained", "trained-no-grid"}, summary["status"]
    tasks = json.loads(Path(chal).read_text())
    sub = json.loads((out / "submission.json").read_text())
    for tid, task in tasks.items():
        for test, attempts in zip(task["test"], sub[tid]):
            for grid in attempts.values():
                assert grid and grid != [[0]] and all(row for row in grid), (tid, grid)
                assert grid == test["input"] or len(grid) <= 30


def test_the_registry_is_the_models_registry_and_every_entry_is_complete():
    """One owner per fact: the families' config classes are the model configs by name
    (models.model_config.MODEL_CONFIGS); each entry names commands that exist, a trainer and an
    evaluator it serves, a predictor `evaluate` knows and metadata `export` writes."""
    from eval.evaluate import PREDICTORS
    from hrm_deeploop.families.spec import METADATA
    from hrm_deeploop.models.model_config import MODEL_CONFIGS

    assert {n: f.config for n, f in FAMILIES.items()} == MODEL_CONFIGS
    for fam in FAMILIES.values():
        assert set(fam.commands) <= set(COMMANDS), fam.name
        assert fam.serves(fam.trainer) and fam.serves(fam.evaluator) and fam.serves("export"), fam.name
        assert fam.metadata in METADATA and (fam.predictor in PREDICTORS or not fam.serves("evaluate")), fam.name
        assert fam.trainer in SIZES, f"{fam.trainer}: give the conformance test its tiny sizes"
        for section in fam.carried:
            assert section in {f.name for f in fields(resolve(COMMANDS[fam.trainer].schema))}, (fam.name, section)
