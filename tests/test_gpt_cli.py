"""train-gpt / eval-gpt through the CLI on tiny GPT-2-token shards; bad input exits 2 and writes nothing."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from hrm_deeploop.cli import main
from hrm_deeploop.text.shards import write_meta, write_shard
from tests.gpt_helpers import one_thread  # noqa: F401  (autouse)
from tests.lm_eval_helpers import write_tiny_mc_task

MODEL = ["model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16"]
FAST = ["device=cpu", "logger=none", "train.progress=false", "train.micro_batch_size=2", "train.global_batch_tokens=64",
        "optim.warmup_steps=1", "data.unigram_tokens=100000"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    words = [rng.integers(0, 50257, size=int(rng.integers(2, 5))) for _ in range(40)]
    stream = np.concatenate([words[i] for i in rng.integers(0, 40, size=3000)])
    write_shard(root / "train_000000.bin", stream[:4000])
    write_shard(root / "train_000001.bin", stream[4000:7000])
    write_shard(root / "val_000000.bin", stream[7000:7600])
    write_meta(root, tokenizer_id="gpt2")
    return root


def _train(shards, out, *extra):
    return main(["train-gpt", *MODEL, *FAST, f"data.train={shards}/train_*.bin", f"data.val={shards}/val_000000.bin",
                 f"output_dir={out}", *extra])


def test_train_then_eval_cli(shards, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(shards, run, "train.max_steps=4", "eval.every=2", "checkpoint.every=2", "scaling=deeploop",
                  "model.num_rounds=2") == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["tokens"] == 256 and summary["scaling"]["scheme"] == "deeploop"
    assert summary["final_val_loss"] is not None and 0 < summary["unigram_entropy"] < np.log(50257)
    assert (run / "metrics.csv").read_text().startswith("step,")
    assert main(["eval-gpt", f"checkpoint={run}", f"data={shards}/val_000000.bin", "device=cpu",
                 "batch_size=2"]) == 0
    result = json.loads((run / "eval/eval.json").read_text())
    assert result["step"] == 4 and result["num_rounds"] == 2
    # eval-gpt and the trainer's last validation agree (same windows, batch size aside)
    assert result["val_loss"] == pytest.approx(summary["final_val_loss"], rel=1e-4)
    # test-time depth: evaluate the same weights with R=3
    assert main(["eval-gpt", f"checkpoint={run}/checkpoints/step_4.pt", f"data={shards}/val_000000.bin",
                 "device=cpu", "num_rounds=3", f"output_dir={tmp_path / 'r3'}"]) == 0
    assert json.loads((tmp_path / "r3/eval.json").read_text())["num_rounds"] == 3


def _bad(shards, tmp_path, capsys, *args, data=None):
    out = tmp_path / "run"
    code = main(["train-gpt", *MODEL, *FAST, f"output_dir={out}", "train.max_steps=2", *(data or []), *args])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists(), err
    return err


def test_bad_inputs_exit_2_and_write_nothing(shards, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_000000.bin").write_bytes((shards / "train_000000.bin").read_bytes()[:-10])  # truncated
    write_meta(bad, tokenizer_id="gpt2")
    assert "truncated" in _bad(shards, tmp_path, capsys, data=[f"data.train={bad}/train_000000.bin"])

    (bad / "train_000000.bin").write_bytes(b"\x00" * 2048)  # wrong magic
    assert "wrong magic" in _bad(shards, tmp_path, capsys, data=[f"data.train={bad}/train_000000.bin"])

    assert "no token shard matches" in _bad(shards, tmp_path, capsys, data=[f"data.train={tmp_path}/none_*.bin"])
    assert "data.train is empty" in _bad(shards, tmp_path, capsys)

    short = tmp_path / "short"
    short.mkdir()
    write_shard(short / "train_000000.bin", np.arange(20))
    write_meta(short, tokenizer_id="gpt2")
    assert "context longer than a shard" in _bad(shards, tmp_path, capsys, data=[f"data.train={short}/train_*.bin"])

    assert "tokenizer mismatch" in _bad(shards, tmp_path, capsys, "data.tokenizer_id=cl100k_base",
                                        data=[f"data.train={shards}/train_*.bin"])
    assert "larger than the model's 1000" in _bad(shards, tmp_path, capsys, "model.vocab_size=1000",
                                                  data=[f"data.train={shards}/train_*.bin"])
    assert "num_rounds" in _bad(shards, tmp_path, capsys, "model.num_rounds=0",
                                data=[f"data.train={shards}/train_*.bin"])
    assert "unknown_key" in _bad(shards, tmp_path, capsys, "+unknown_key=1",
                                 data=[f"data.train={shards}/train_*.bin"])


def test_eval_gpt_errors(tmp_path, capsys):
    assert main(["eval-gpt", f"checkpoint={tmp_path}", "data=x", "device=cpu"]) == 2
    assert "holds no checkpoints" in capsys.readouterr().err
    assert main(["eval-gpt", "data=x", "device=cpu"]) == 2
    assert "checkpoint= is required" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_gpt_lm_eval_on_a_local_task(shards, tmp_path):
    """The lm-eval path of eval-gpt on a 3-question local task (offline; lm-eval import is slow)."""
    pytest.importorskip("lm_eval")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    run = tmp_path / "run"
    assert _train(shards, run, "train.max_steps=2") == 0
    rows = [{"question": "What colour is the sky?", "choices": [" blue", " green"], "label": 0},
            {"question": "How many legs has a cat?", "choices": [" two", " four"], "label": 1},
            {"question": "Which is a fruit?", "choices": [" apple", " chair"], "label": 0}]
    tasks = write_tiny_mc_task(tmp_path, rows)
    assert main(["eval-gpt", f"checkpoint={run}", "device=cpu", "lm_eval=true", "tasks=[tiny_mc]",
                 f"include_path={tasks}", "include_defaults=false", "lm_eval_batch_size=2"]) == 0
    result = json.loads((run / "eval/eval.json").read_text())
    assert set(result["lm_eval"]["avg"]) == {"0", "1"}
    md = (run / "eval/lm_eval.md").read_text()
    assert "tiny_mc" in md and "Avg" in md


@pytest.mark.slow
def test_eval_gpt_lm_eval_unknown_task_and_uncached_dataset_are_one_line(shards, tmp_path):
    """Offline, a task whose dataset is on the Hub and not cached, and a task name lm-eval does not know:
    both ended in a traceback, exit 1 (new-user audit). One line each, exit 2, no eval.json. In a
    subprocess: `datasets` reads HF_DATASETS_OFFLINE when it is first imported."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("lm_eval")
    run = tmp_path / "run"
    assert _train(shards, run, "train.max_steps=1") == 0
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "hub_only.yaml").write_text("task: hub_only\ndataset_path: nobody/no-such-dataset\ntest_split: test\n"
                                         "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\n"
                                         "doc_to_choice: ['a', 'b']\nmetric_list:\n  - metric: acc\n")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for task, expected in (("nosuch_task", "is not a registered task"), ("hub_only", "run once with network")):
        p = subprocess.run([sys.executable, "-m", "hrm_deeploop.cli", "eval-gpt", f"checkpoint={run}", "device=cpu",
                            f"data={shards}/val_000000.bin", "lm_eval=true", f"tasks=[{task}]", f"include_path={tasks}",
                            "include_defaults=false", f"output_dir={tmp_path / task}"], env=env, capture_output=True,
                           text=True, timeout=300)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip() and "Traceback" not in p.stderr]
        assert p.returncode == 2 and lines and expected in lines[-1] and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert not (tmp_path / task / "eval.json").exists()


@pytest.mark.slow
def test_sweep_cli_with_torchrun_launcher(shards, tmp_path):
    """`sweep launcher=torchrun`: each run is `torchrun -m hrm_deeploop.cli train-gpt <overrides>`."""
    out = tmp_path / "sweep"
    assert main(["sweep", *MODEL, "kind=rounds", "methods=[deeploop]", "rounds=[2]", f"output_dir={out}",
                 "launcher=torchrun", "nproc_per_node=1", f"train.data.train={shards}/train_*.bin",
                 f"train.data.val={shards}/val_000000.bin", "train.max_steps=2", "train.global_batch_tokens=64",
                 "train.micro_batch_size=2", "train.logger=none", "train.progress=false", "train.device=cpu",
                 "train.data.unigram_tokens=100000"]) == 0
    summary = json.loads((out / "rounds/deeploop_R2_s0/summary.json").read_text())
    assert summary["status"] == "finished" and summary["model"]["num_rounds"] == 2
    assert "deeploop" in (out / "table.md").read_text()


def test_eval_gpt_reads_the_tokenizer_from_the_checkpoint(tmp_path, capsys):
    """A byte-tokenizer run evaluates without tokenizer_id=bytes: the checkpoint records it."""
    root = tmp_path / "bytes"
    root.mkdir()
    rng = np.random.default_rng(1)
    stream = rng.integers(0, 257, size=3000)
    write_shard(root / "train_000000.bin", stream[:2400])
    write_shard(root / "val_000000.bin", stream[2400:])
    write_meta(root, tokenizer_id="bytes")
    run = tmp_path / "run"
    assert main(["train-gpt", *MODEL, "model.vocab_size=320", *FAST, f"data.train={root}/train_*.bin",
                 f"data.val={root}/val_000000.bin", "data.tokenizer_id=bytes", f"output_dir={run}",
                 "train.max_steps=2"]) == 0
    assert main(["eval-gpt", f"checkpoint={run}", f"data={root}/val_000000.bin", "device=cpu", "batch_size=2"]) == 0
    assert json.loads((run / "eval/eval.json").read_text())["val_loss"] > 0
    # an explicit wrong tokenizer is still refused, naming both
    assert main(["eval-gpt", f"checkpoint={run}", f"data={root}/val_000000.bin", "device=cpu", "tokenizer_id=gpt2",
                 f"output_dir={tmp_path / 'e2'}"]) == 2
    assert "written with tokenizer 'bytes' but the model uses 'gpt2'" in capsys.readouterr().err
