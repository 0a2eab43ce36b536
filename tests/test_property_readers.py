"""Property-based tests (hypothesis) of every reader that takes a user's file: any generated input
either loads or is refused with the project's own error type (DatasetError / UserError), never
another exception, and never a hang."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arc_data.arc.sources import load_source
from arc_data.errors import DatasetError
from eval.predictions import load_predictions
from hrm_deeploop.errors import UserError
from hrm_deeploop.text.loader import TokenShards
from hrm_deeploop.text.shards import HEADER_INTS, SHARD_MAGIC, SHARD_VERSION, read_shard_header

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=False, width=32),
                         st.text(max_size=4))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=4)), max_leaves=20)
cells = st.one_of(st.integers(0, 9), st.integers(-2, 12), json_scalars)
rows = st.lists(cells, min_size=0, max_size=4)
grids = st.one_of(st.lists(rows, min_size=0, max_size=4), json_values)
pairs = st.one_of(st.fixed_dictionaries({"input": grids, "output": grids}),
                  st.fixed_dictionaries({"input": grids}), json_values)
tasks = st.one_of(st.fixed_dictionaries({"train": st.lists(pairs, max_size=3), "test": st.lists(pairs, max_size=2)}),
                  st.fixed_dictionaries({"train": st.lists(pairs, max_size=3), "test": st.lists(pairs, max_size=2),
                                         "name": json_scalars}),
                  json_values)
names = st.one_of(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), st.text(max_size=8))


def _only_ours(fn) -> None:
    """The reader either accepts the input or refuses it with the project's own error; any other
    exception propagates and fails the test."""
    try:
        fn()
    except (DatasetError, UserError):
        return


@SETTINGS
@given(task=tasks, raw=st.one_of(st.none(), st.binary(max_size=40)))
def test_task_files_in_the_original_layout(task, raw):
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "data" / "training"
        folder.mkdir(parents=True)
        (folder / "t1.json").write_bytes(raw if raw is not None else json.dumps(task).encode())
        _only_ours(lambda: load_source(str(Path(d) / "data")))


@SETTINGS
@given(challenges=st.one_of(st.dictionaries(names, tasks, max_size=3), json_values),
       solutions=st.one_of(st.none(), st.dictionaries(names, st.lists(grids, max_size=2), max_size=3), json_values))
def test_kaggle_challenges_and_solutions(challenges, solutions):
    with tempfile.TemporaryDirectory() as d:
        chal = Path(d) / "x_evaluation_challenges.json"
        chal.write_text(json.dumps(challenges))
        if solutions is not None:
            (Path(d) / "x_evaluation_solutions.json").write_text(json.dumps(solutions))
        _only_ours(lambda: load_source(str(chal)))


dtypes = st.sampled_from([np.int32, np.int64, np.uint8, np.float32, np.float64, np.bool_, np.int8])
arrays = st.builds(lambda dt, shape, seed: (np.random.default_rng(seed).integers(-3, 20, size=shape)).astype(dt),
                   dtypes, st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple), st.integers(0, 1000))


@SETTINGS
@given(fields=st.dictionaries(st.sampled_from(["puzzle_identifiers", "inputs", "predictions", "q_halt", "extra"]),
                              arrays, max_size=5),
       raw=st.one_of(st.none(), st.binary(max_size=64)))
def test_predictions_files(fields, raw):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.npz"
        if raw is not None:
            path.write_bytes(raw)
        else:
            np.savez(path, **fields)
        _only_ours(lambda: load_predictions(path))


@SETTINGS
@given(magic=st.sampled_from([SHARD_MAGIC, 0, 12345]), version=st.sampled_from([SHARD_VERSION, 2]),
       count=st.integers(-5, 300), tokens=st.integers(0, 300), top=st.integers(1, 70000),
       junk=st.one_of(st.none(), st.binary(max_size=2000)), vocab=st.sampled_from([None, 64, 50304]))
def test_token_shards(magic, version, count, tokens, top, junk, vocab):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "train_000000.bin"
        if junk is not None:
            path.write_bytes(junk)
        else:
            header = np.zeros(HEADER_INTS, dtype="<i4")
            header[:3] = magic, version, count
            body = np.random.default_rng(count + 5 + tokens).integers(0, top, size=tokens).astype("<u2")
            path.write_bytes(header.tobytes() + body.tobytes())

        def read():
            read_shard_header(path)
            loader = TokenShards(path, seq_len=8, batch_size=2, tokenizer_id=None, vocab_size=vocab)
            for _ in range(5):
                loader.next_batch()

        _only_ours(read)


meta_values = st.one_of(st.integers(-3, 40), st.none(), st.text(max_size=3), st.floats(allow_nan=False, width=32))


@SETTINGS
@given(seq_len=st.integers(0, 12), rows=st.integers(0, 6), top=st.integers(0, 30),
       fields=st.dictionaries(st.sampled_from(["pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size",
                                               "seq_len", "num_puzzle_identifiers", "total_groups",
                                               "mean_puzzle_examples", "sets"]), meta_values, max_size=4),
       drop=st.sampled_from([None, "dataset.json", "all__inputs.npy", "all__puzzle_indices.npy"]),
       pidx=st.lists(st.integers(-1, 8), min_size=0, max_size=5), dtype=st.sampled_from(["uint8", "int32", "float32"]))
def test_dataset_splits(seq_len, rows, top, fields, drop, pidx, dtype):
    """A dataset folder with random arrays and a dataset.json with random fields either opens and
    reads its examples, or is refused with DatasetError."""
    from arc_data.dataset import open_split

    with tempfile.TemporaryDirectory() as d:
        split = Path(d) / "train"
        split.mkdir()
        rng = np.random.default_rng(rows * 100 + seq_len)
        tokens = rng.integers(0, top + 1, size=(rows, seq_len))
        np.save(split / "all__inputs.npy", tokens.astype(dtype))
        np.save(split / "all__labels.npy", tokens.astype(dtype))
        np.save(split / "all__puzzle_identifiers.npy", np.zeros(max(len(pidx) - 1, 0), np.int32))
        np.save(split / "all__puzzle_indices.npy", np.asarray(pidx, np.int32))
        np.save(split / "all__group_indices.npy", np.asarray([0, max(len(pidx) - 1, 0)], np.int32))
        meta = {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 12, "seq_len": seq_len,
                "num_puzzle_identifiers": 1, "total_groups": 1, "mean_puzzle_examples": 1.0, "sets": ["all"]}
        (split / "dataset.json").write_text(json.dumps(meta | fields))
        (Path(d) / "identifiers.json").write_text(json.dumps(["<blank>"]))
        if drop is not None:
            (split / drop).unlink()

        def read():
            s = open_split(d, "train")
            s.examples(np.arange(s.num_examples))

        _only_ours(read)
