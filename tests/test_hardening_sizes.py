"""Issue 26, the size half of the run checks (split from test_hardening_runs.py, whose helpers and
fixtures it shares): what a request larger than the machine does, through the real CLI.

- a model larger than the machine (train, train-gpt, evaluate, init_from, eval-gpt) is one line with
  the estimate, before anything is allocated or written; a model of many blocks is counted exactly
  without building them; a large request says what it will cost first;
- requests found by the re-probe (segments, grad_accum, a data_dir that is a device or a file, a shard
  buffer, an evaluation batch, a puzzle prefix) are refused before anything is written; an ARC
  evaluation batch is estimated as padded.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import main
from tests.test_bad_inputs import sudoku_set  # noqa: F401  (a fixture of `base`)
from tests.test_hardening_runs import GPT, SHORT, base, cli, files, gpt_run, one_line, train, work  # noqa: F401


def claims_a_huge_model(src: Path, dst: Path, hidden: int) -> Path:
    """A train state whose config says hidden_size=`hidden` (its weights stay tiny)."""
    state = ckpt.load(src)
    state["config"]["model"]["hidden_size"] = hidden
    torch.save(state, dst)
    return dst


@pytest.mark.slow  # .ci/run runs it after the suite (the default suite under 10 minutes)
def test_a_model_larger_than_the_machine_is_refused_before_it_is_allocated(work):  # noqa: F811
    """train, train-gpt and evaluate estimate the model (built on the meta device) before
    allocating it, and so does every reader of a checkpoint (init_from, eval-gpt): a hidden size
    of 200,000 (terabytes of weights) is one line with the estimate and what is available, exit
    2, and nothing is written (before: an allocation traceback)."""
    gpt_run(work)
    claims_a_huge_model(work / "run/checkpoints/step_2.pt", work / "huge.pt", 200_000)
    claims_a_huge_model(ckpt.latest(work / "gpt"), work / "huge_gpt.pt", 200_000)
    before = files(work)
    cases = {
        "train": train(*SHORT, "model.hidden_size=200000", out="big"),
        "train-gpt": ["train-gpt", *GPT, "model.hidden_size=200000", "output_dir=big", "train.max_steps=2"],
        "evaluate": ["evaluate", "checkpoint=huge.pt", "data_dir=ds", "output_dir=big", "device=cpu"],
        "init_from": train(*SHORT, "init_from=huge.pt", out="big"),
        "eval-gpt": ["eval-gpt", "checkpoint=huge_gpt.pt", "data=val_000000.bin", "device=cpu", "output_dir=big"],
    }
    for name, args in cases.items():
        p = cli(work, *args)
        line = one_line(p, 2, f"{args[0]}: ", "hidden_size=200000", "parameters", "TB of memory, more than the",
                        "available; ", "lower " if name.startswith("train") else "machine with more memory")
        assert re.search(r"\(\d{1,3}(,\d{3}){3,} parameters\)", line), line  # counted: 10**9 or more
    assert files(work) == before and not (work / "big").exists()


def test_a_model_of_many_blocks_is_counted_exactly_without_building_them(monkeypatch):
    """Past runtime.EXACT_LAYERS blocks the count comes from builds of 1 and 2 blocks per layer
    field: the same numbers as the whole model built on the meta device (lowered to 2 here so
    the whole model is small enough to build too), and 100,000 blocks are counted at once."""
    from hrm_deeploop import runtime
    from hrm_deeploop.models.gpt import GPT
    from hrm_deeploop.models.model_config import GPTConfig, HRMConfig, TRMConfig, URMConfig
    from hrm_deeploop.models.reasoners import build_reasoner
    from hrm_deeploop.models.scaling import ScalingConfig

    kw = dict(hidden_size=32, num_heads=2, seq_len=16, vocab_size=12, num_puzzle_identifiers=3)
    reasoner = lambda c: build_reasoner(c, ScalingConfig(), torch.float32)  # noqa: E731
    cases = [(reasoner, HRMConfig(**kw, num_h_layers=5, num_l_layers=7)), (reasoner, TRMConfig(**kw, num_layers=6)),
             (reasoner, URMConfig(**kw, num_layers=5)),
             (lambda c: GPT(c, ScalingConfig(scheme="deeploop")),
              GPTConfig(hidden_size=32, num_heads=2, num_blocks=7, num_rounds=3, seq_len=16, vocab_size=300))]
    monkeypatch.setattr(runtime, "EXACT_LAYERS", 2)
    for build, cfg in cases:
        assert runtime.count_model(build, cfg) == runtime._sizes(build, cfg), cfg.name
    monkeypatch.setattr(runtime, "EXACT_LAYERS", 64)
    begun = time.perf_counter()
    params = runtime.count_model(reasoner, HRMConfig(**kw, num_h_layers=100_000))[0]
    assert time.perf_counter() - begun < 10 and params > 100_000 * 4 * 32 * 32


def test_a_large_request_says_what_it_will_cost_first(work, monkeypatch, capsys):  # noqa: F811
    """Above budget.LARGE (1 GB; lowered here so tiny requests count as large) the builders,
    evaluate's tta and train print one line with the estimate before they start, and run."""
    from arc_data import budget

    monkeypatch.setattr(budget, "LARGE", 1)
    monkeypatch.chdir(work)
    runs = {
        "generate-puzzles": ["generate-puzzles", "task=sudoku", "size=4", "count_train=20", "count_test=4",
                             "output_dir=csv", "progress=false"],
        "build-puzzles": ["build-puzzles", "task=sudoku", "source=csv", "output_dir=ds2", "num_aug=3",
                          "progress=false"],
        "tta": ["evaluate", "checkpoint=run", "data_dir=ds", "output_dir=ev", "device=cpu", "tta=2",
                "progress=false"],
        "train": train("train.max_steps=1", "checkpoint.every=0", out="new"),
    }
    expected = {"generate-puzzles": "note: 24 4x4 puzzles: ", "build-puzzles": "note: num_aug=3 over 20 train",
                "tta": "note: tta=2 over ", "train": "note: train: model=hrm "}
    for name, args in runs.items():
        assert main(args) == 0, name
        notes = [ln for ln in capsys.readouterr().err.splitlines() if "a large request: needs about" in ln]
        assert notes and all(ln.startswith("note: ") for ln in notes) and expected[name] in notes[0], (name, notes)
    assert "parameters:" in notes[0] and "of activations (an estimate)" in notes[0]


@pytest.mark.parametrize("args, expected", [
    (["evaluate", "checkpoint=run", "data_dir=ds", "output_dir=new", "device=cpu", "halt_max_steps=1000000000"],
     "halt_max_steps=1000000000 over 8 examples (8 rows): needs about"),
    (train(*SHORT, "train.grad_accum=3", out="new"), "the per-rank batch (8 rows) is not divisible by train.grad_accum=3"),
    (train(*SHORT, data="/dev/null", out="new"), "data_dir '/dev/null' is not a folder (a device, FIFO or socket)"),
    (["evaluate", "checkpoint=run", "data_dir=ds/train/dataset.json", "output_dir=new", "device=cpu"],
     "data_dir 'ds/train/dataset.json' is a file, not a folder"),
    (["prepare-text", "inputs=[ds/train/dataset.json]", "output_dir=new", "shard_size=1000000000000000",
      "tokenizer=bytes"], "shard_size=1000000000000000: needs about 4.0 PB of memory, more than the"),
    (train(*SHORT, "eval.every=1", "eval.global_batch_size=1000000000000", out="new"),
     "at 1000000000000 rows x 16 tokens per evaluation batch: needs about"),
    ([*train(*SHORT, out="new"), "model.puzzle_emb_ndim=100000000"], "at 8 rows x 1,562,516 tokens per micro-batch"),
], ids=["segments", "grad_accum", "device-data_dir", "file-data_dir", "shard_size", "eval-batch", "puzzle-prefix"])
def test_found_by_the_re_probe_refused_before_anything_is_written(work, monkeypatch, capsys, args, expected):  # noqa: F811,E501
    """Before: evaluate's per-segment scores for 10**9 segments, prepare-text's shard buffer of
    10**15 tokens and train's evaluation batch of 10**12 rows were allocation tracebacks (the last
    after training); a puzzle embedding of 10**8 values (a prefix of 1.6M positions) passed the
    estimate and was killed for memory; a grad_accum that does not divide the batch failed
    at the first step, after the run folder was written; a data_dir that is a device or a file
    'does not exist'."""
    monkeypatch.chdir(work)
    before = files(work)
    assert main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and expected in err[0], err
    assert files(work) == before and not (work / "new").exists()


def test_an_arc_evaluation_batch_is_estimated_as_padded(tmp_path, monkeypatch, capsys):
    """ARC's sequential batches are padded to the global batch: global_batch_size=10**12 on a
    28-example split was an allocation of 10**12 x 900 tokens and a traceback; it is refused
    before the model is built, and an ordinary batch still evaluates."""
    from tests.arc_synth import synthetic_tasks, write_layout

    subsets = synthetic_tasks()
    arc = write_layout(tmp_path / "src", {"training": subsets["training"], "evaluation": subsets["evaluation"]})
    monkeypatch.chdir(tmp_path)
    assert main(["build-arc", f"sources=[{arc}]", "num_aug=1", "output_dir=ds", "progress=false"]) == 0
    assert main(train("train.max_steps=1", "checkpoint.every=1", out="run")) == 0
    capsys.readouterr()
    before = files(tmp_path)
    args = ["evaluate", "checkpoint=run", "data_dir=ds", "output_dir=ev", "device=cpu", "progress=false"]
    assert main([*args, "global_batch_size=1000000000000"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "at 1000000000000 rows x 900 tokens per forward: needs about" in err[0], err
    assert files(tmp_path) == before
    assert main(args) == 0 and (tmp_path / "ev/predictions.npz").is_file()
