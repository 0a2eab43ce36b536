"""`evaluate` on a puzzle dataset whose puzzles are named, with a checkpoint whose puzzle-embedding
rows are in another order (an adapted checkpoint, `puzzle_names`): every dataset id must reach the
row of its name, as in the ARC path (`hrm_deeploop.data.rows`). The same table in the dataset's
order and permuted (with its names) must predict the same, bit for bit."""

import json
import shutil

import numpy as np
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import run_subcommand
from tests.hrm_helpers import TINY_OVERRIDES

NAMES = ["<blank>", "p0", "p1", "p2", "p3"]


def _named_generic_dataset(root):
    """A Sudoku 4x4 build turned into a generic dataset (no manifest) of four named puzzles."""
    assert run_subcommand("generate-puzzles", ["task=sudoku", "size=4", "count_train=16", "count_test=8",
                                               f"output_dir={root / 'raw'}", "progress=false"]) == 0
    assert run_subcommand("build-puzzles", ["task=sudoku", f"source={root / 'raw'}", "num_aug=0",
                                            f"output_dir={root / 'data'}", "progress=false"]) == 0
    data = root / "data"
    (data / "manifest.json").unlink()
    (data / "identifiers.json").write_text(json.dumps(NAMES))
    for split in ("train", "test"):
        path = data / split / "all__puzzle_identifiers.npy"
        ids = np.load(path)
        np.save(path, (1 + np.arange(len(ids)) % 4).astype(ids.dtype))
        meta = json.loads((data / split / "dataset.json").read_text())
        (data / split / "dataset.json").write_text(json.dumps({**meta, "num_puzzle_identifiers": len(NAMES)}))
    return data


def _with_table(src, dst, table, names):
    """The checkpoint `src` with its puzzle table replaced, and (names) the name of every row."""
    state = ckpt.load(src)
    key = next(k for k in state["model"] if k.endswith("puzzle_emb.weights"))
    state["model"][key] = table
    state["ema"], state["puzzle_names"] = None, names
    ckpt.save(ckpt.step_path(dst, state["step"]), state)
    return dst


def _predictions(run, data, out):
    assert run_subcommand("evaluate", [f"checkpoint={run}", f"data_dir={data}", f"output_dir={out}",
                                       "global_batch_size=8", "progress=false", "report=false"]) == 0
    with np.load(out / "predictions.npz") as z:
        return z["predictions"].copy(), z["q_halt"].copy(), z["puzzle_identifiers"].copy()


def test_puzzle_evaluation_maps_dataset_ids_to_the_rows_the_checkpoint_names(tmp_path):
    data = _named_generic_dataset(tmp_path)
    assert run_subcommand("train", [*TINY_OVERRIDES, f"data_dir={data}", f"output_dir={tmp_path / 'run'}",
                                    "train.max_steps=1", "train.global_batch_size=8", "eval.every=0",
                                    "train.progress=false"]) == 0
    src = ckpt.latest(tmp_path / "run")
    width = ckpt.load(src)["model"]["puzzle_emb.weights"].shape[1]
    table = torch.randn(len(NAMES), width, generator=torch.Generator().manual_seed(0))
    order = [0, 3, 1, 4, 2]  # row r of the permuted table holds the puzzle NAMES[order[r]]
    plain = _with_table(src, tmp_path / "plain", table, None)
    permuted = _with_table(src, tmp_path / "permuted", table[order], [NAMES[i] for i in order])
    a = _predictions(plain, data, tmp_path / "eval_plain")
    b = _predictions(permuted, data, tmp_path / "eval_permuted")
    assert a[2].tolist() == b[2].tolist() and sorted(set(a[2].tolist())) == [1, 2, 3, 4]  # the dataset's ids kept
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # and the rows matter: the permuted table read without its names predicts otherwise
    shutil.rmtree(tmp_path / "permuted")
    unnamed = _with_table(src, tmp_path / "unnamed", table[order], None)
    c = _predictions(unnamed, data, tmp_path / "eval_unnamed")
    assert not np.array_equal(a[1], c[1])
