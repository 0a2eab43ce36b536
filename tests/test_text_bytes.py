"""The byte-level tokenizer (`tokenizer=bytes`): round trip, separator, prepare-text, train-gpt checks."""

from __future__ import annotations

import json

import numpy as np

from hrm_deeploop.cli import main
from hrm_deeploop.text.shards import open_shard, read_meta
from hrm_deeploop.text.tokenizer import ENDOFTEXT, get_tokenizer
from tests.gpt_helpers import one_thread  # noqa: F401  (autouse)


def test_round_trip_and_eot():
    tok = get_tokenizer("bytes")
    assert tok.tokenizer_id == "bytes" and tok.n_vocab == 257 and tok.eot_token == 256
    text = "Hello, wörld! 3 + 4 = 7 \u2014 caf\u00e9 \U0001f600\n\ttab"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8")) and all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.encode(ENDOFTEXT) == list(ENDOFTEXT.encode())  # never parsed as the separator
    assert tok.decode([*tok.encode("a"), tok.eot_token, *tok.encode("b")]) == f"a{ENDOFTEXT}b"
    assert tok.encode_batch(["ab", "", "é"]) == [[97, 98], [], [0xC3, 0xA9]]
    assert tok.decode([0xC3]) == "\ufffd"  # a cut multi-byte character does not raise


def _prepare(out, *args):
    return main(["prepare-text", f"output_dir={out}", "tokenizer=bytes", "progress=false", "num_workers=1", *args])


def test_prepare_text_bytes_writes_bytes_meta(tmp_path, capsys):
    src = tmp_path / "c.jsonl"
    docs = ["First doc.", "Zweites Dokument: \u00fc."]
    src.write_text("\n".join(json.dumps({"text": d}) for d in docs) + "\n")
    out = tmp_path / "out"
    assert _prepare(out, f"inputs=[{src}]", "val_tokens=4") == 0
    assert "tokenizer: bytes (vocab 257)" in capsys.readouterr().out
    meta = read_meta(out)
    assert meta["tokenizer_id"] == "bytes" and meta["vocab_size"] == 257 and meta["eot_token"] == 256
    expected = [t for d in docs for t in [256, *d.encode("utf-8")]]
    got = np.concatenate([open_shard(out / "val_000000.bin"), open_shard(out / "train_000000.bin")])
    assert got.tolist() == expected


def test_train_gpt_on_bytes_and_mismatch(tmp_path, capsys):
    shards = tmp_path / "bytes"
    assert _prepare(shards, "demo_docs=60", "val_tokens=1000") == 0
    common = ["train-gpt", "model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16",
              "device=cpu", "logger=none", "progress=false", "micro_batch_size=2", "global_batch_tokens=64",
              "optim.warmup_steps=1", "max_steps=2", f"data.train={shards}/train_*.bin",
              f"data.val={shards}/val_000000.bin"]
    # the trainer's default tokenizer is gpt2: bytes shards are refused, nothing is written
    bad = tmp_path / "bad"
    assert main([*common, f"output_dir={bad}"]) == 2
    err = capsys.readouterr().err
    assert "tokenizer mismatch" in err and "'bytes'" in err and "'gpt2'" in err and not bad.exists()
    # matching tokenizer, 257 ids padded to 320
    run = tmp_path / "run"
    assert main([*common, "data.tokenizer_id=bytes", "model.vocab_size=320", f"output_dir={run}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and 0 < summary["unigram_entropy"] < np.log(257)
    # a vocabulary smaller than the shards' is refused
    assert main([*common, "data.tokenizer_id=bytes", "model.vocab_size=200", f"output_dir={tmp_path / 'small'}"]) == 2
    assert "larger than the model's 200" in capsys.readouterr().err
