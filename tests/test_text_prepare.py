"""prepare-text end to end through the CLI, the demo corpus, and a tiny model learning from it."""

import json

import numpy as np
import pytest
import torch

from hrm_deeploop.cli import main
from hrm_deeploop.text.corpus import write_demo_corpus
from hrm_deeploop.text.loader import TokenShards, iter_eval_batches
from hrm_deeploop.text.prepare import PrepareTextConfig, prepare
from hrm_deeploop.text.shards import open_shard, read_meta
from hrm_deeploop.text.tokenizer import get_gpt2_tokenizer


def _cli(*args):
    return main(["prepare-text", *args, "progress=false", "num_workers=1"])


def test_txt_and_jsonl_end_to_end(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    docs = ["First document.\n\nStill the first document." * 250, "Second document." * 400, "Third.", "Fourth."]
    (src / "a.txt").write_text(docs[0])
    (src / "b.txt").write_text(docs[1])
    (src / "c.jsonl").write_text(json.dumps({"body": docs[2]}) + "\n\n" + json.dumps({"body": docs[3]}) + "\n")
    out = tmp_path / "out"
    assert _cli(f"inputs=[{src}]", f"output_dir={out}", "text_field=body", "shard_size=1025", "val_tokens=5") == 0
    assert "4 documents" in capsys.readouterr().out
    tok = get_gpt2_tokenizer()
    expected = [t for d in docs for t in [tok.eot_token, *tok.encode(d)]]
    meta = read_meta(out)
    assert meta["tokenizer_id"] == "gpt2" and meta["vocab_size"] == 50257
    assert meta["num_documents"] == 4 and meta["num_tokens"]["val"] == 5
    assert meta["num_tokens"]["train"] == len(expected) - 5
    assert [s["path"].split("/")[-1] for s in meta["sources"]] == ["a.txt", "b.txt", "c.jsonl"]
    assert all(len(s["sha256"]) == 64 for s in meta["sources"])
    names = sorted(p.name for p in out.glob("*.bin"))
    assert names[-1] == "val_000000.bin" and names[0] == "train_000000.bin"
    got = np.concatenate([open_shard(out / "val_000000.bin")] + [open_shard(out / n) for n in names[:-1]])
    assert got.tolist() == expected  # val = the first tokens, then train shards in order
    sizes = [open_shard(out / n).size for n in names[:-1]]
    assert len(sizes) >= 2 and all(n == 1025 for n in sizes[:-1]) and 1025 <= sizes[-1] < 2 * 1025  # short tail merged
    assert not list(tmp_path.glob(".out.tmp*"))


def test_paragraph_split(tmp_path):
    (tmp_path / "a.txt").write_text("One.\n\nTwo.\n  \nThree.")
    out = tmp_path / "out"
    assert _cli(f"inputs=[{tmp_path / 'a.txt'}]", f"output_dir={out}", "txt_split=paragraph", "val_tokens=0") == 0
    assert read_meta(out)["num_documents"] == 3
    tokens = open_shard(out / "train_000000.bin").tolist()
    assert tokens.count(50256) == 3 and tokens[0] == 50256


def test_bad_inputs_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n" + json.dumps({"text": "   "}) + "\n")
    out = tmp_path / "out"
    assert _cli(f"inputs=[{empty}]", f"output_dir={out}") == 2
    assert "empty corpus" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out*"))  # nothing half-written

    good = tmp_path / "good.txt"
    good.write_text("some text here")
    out.mkdir()
    assert _cli(f"inputs=[{good}]", f"output_dir={out}", "val_tokens=0") == 2
    assert "already exists" in capsys.readouterr().err
    assert _cli(f"inputs=[{good}]", f"output_dir={out}", "val_tokens=0", "overwrite=true") == 0
    assert read_meta(out)["num_documents"] == 1

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no field"}\n')
    assert _cli(f"inputs=[{bad}]", f"output_dir={tmp_path / 'o2'}") == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    bad.write_text('{"text": "ok"}\n{"text": \n')
    assert _cli(f"inputs=[{bad}]", f"output_dir={tmp_path / 'o2'}") == 2
    assert "bad.jsonl:2: invalid JSON" in capsys.readouterr().err
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9".encode("latin-1"))
    assert _cli(f"inputs=[{latin}]", f"output_dir={tmp_path / 'o2'}") == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert _cli(f"inputs=[{tmp_path / 'nope.txt'}]", f"output_dir={tmp_path / 'o3'}") == 2
    assert "does not exist" in capsys.readouterr().err
    assert _cli(f"inputs=[{good}]", f"output_dir={tmp_path / 'o4'}", "val_tokens=1000") == 2
    assert "lower val_tokens" in capsys.readouterr().err
    assert _cli(f"inputs=[{good}]", f"output_dir={tmp_path / 'o5'}", "+no_such_key=1") == 2
    assert "no_such_key" in capsys.readouterr().err


def test_parquet_input(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["alpha beta", "gamma", None]}), tmp_path / "d.parquet")
    out = tmp_path / "out"
    assert _cli(f"inputs=[{tmp_path / 'd.parquet'}]", f"output_dir={out}", "val_tokens=0") == 0
    assert read_meta(out)["num_documents"] == 2


def test_hf_dataset_offline_is_a_clear_error(tmp_path, capsys, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    rc = _cli("hf_dataset=HuggingFaceFW/fineweb-edu", "hf_config=sample-10BT", f"output_dir={tmp_path / 'o'}")
    assert rc == 2
    assert "cannot load Hugging Face dataset 'HuggingFaceFW/fineweb-edu'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_demo_corpus_deterministic_and_learnable(tmp_path):
    a = write_demo_corpus(tmp_path / "a.jsonl", num_docs=300, seed=7)
    b = write_demo_corpus(tmp_path / "b.jsonl", num_docs=300, seed=7)
    c = write_demo_corpus(tmp_path / "c.jsonl", num_docs=300, seed=8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()

    out = tmp_path / "demo"
    assert _cli("demo_docs=600", f"output_dir={out}", "shard_size=8000", "val_tokens=2048") == 0
    # A bigram model (embedding -> logits) learns the templated text quickly; the held-out split
    # agrees. Ids are remapped to the corpus's few hundred distinct tokens to keep this fast.
    used = np.unique(np.concatenate([open_shard(p) for p in sorted(out.glob("*.bin"))]))
    remap = torch.full((50257,), -1, dtype=torch.long)
    remap[torch.from_numpy(used.astype(np.int64))] = torch.arange(len(used))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(len(used), 32), torch.nn.Linear(32, len(used)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)

    def loss_of(x, y):
        return torch.nn.functional.cross_entropy(model(remap[x]).flatten(0, 1), remap[y].flatten())

    loader = TokenShards(str(out / "train_*.bin"), seq_len=32, batch_size=16, seed=0)
    for _ in range(150):
        loss = loss_of(*loader.next_batch())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val = [loss_of(x, y) for x, y in iter_eval_batches(out / "val_000000.bin", seq_len=32, batch_size=16)]
    uniform = float(np.log(len(used)))
    assert float(torch.stack(val).mean()) < 0.5 * uniform, (float(torch.stack(val).mean()), uniform)


def test_stale_temp_folder_of_a_killed_run_is_removed(tmp_path):
    """A killed prepare-text leaves `.<name>.tmp-<pid>`; the next successful run removes it (pid gone),
    and never a temp folder of a process that is still alive."""
    import os
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".out.tmp-{dead.pid}"
    stale.mkdir()
    (stale / "train_000000.bin").write_bytes(b"partial")
    alive = tmp_path / f".out.tmp-{os.getpid()}x"  # not a pid: left alone
    alive.mkdir()
    prepare(PrepareTextConfig(output_dir=str(tmp_path / "out"), demo_docs=20, val_tokens=100, progress=False))
    assert not stale.exists() and alive.exists() and (tmp_path / "out" / "meta.json").exists()
