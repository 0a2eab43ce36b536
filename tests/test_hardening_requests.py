"""Hardening, third round (issue 26), the data and eval half, continued (split from
test_hardening_data.py, whose `inputs` fixture it shares): requests no machine can serve, refused up
front; nonsense accepted with exit 0; the smaller cases. In-process through `hrm_deeploop.cli.main`
(`tests.test_bad_inputs.run_bad`) where they can be, the real CLI in a subprocess where a progress bar
or the terminal matters.
"""

from __future__ import annotations

import json
import time

import pytest

from hrm_deeploop.cli import main
from tests.test_bad_inputs import run_bad
from tests.test_hardening_data import BUILDERS, cli, inputs  # noqa: F401  (inputs: the shared fixture)

# ---- item 10: requests no machine can serve, refused up front --------------------------------------------


@pytest.mark.parametrize("args,expected", [
    (["build-arc", "sources=[ARC]", "num_aug=1000000000", "output_dir=o"], "at most 2,903,039 exist"),
    (["build-puzzles", "task=sudoku", "source=CSV", "num_aug=1000000000", "output_dir=o", "progress=false"],
     "num_aug=1000000000 over 200 train puzzles (200,000,000,200 rows): needs about"),
    (["generate-puzzles", "size=4", "count_train=1000000000", "output_dir=o"], "at most 18,874,368 exist"),
    (["generate-puzzles", "size=9", "count_train=10000000000", "output_dir=o"], "needs about"),
    (["viz-arc", "sources=[ARC]", "cell=100000", "output_dir=o"], "cell=100000: needs about"),
    (["viz-arc", "sources=[ARC]", "num_aug=1000000000", "output_dir=o"], "at most 2,903,039 exist"),
    (["viz-arc", "data_dir=DS", "cell=100000", "output_dir=o"], "cell=100000: needs about"),
    (["evaluate", "checkpoint=missing.pt", "data_dir=SUDOKU", "tta=1000000000", "output_dir=o", "device=cpu"],
     "tta=1000000000 over 100 examples"),
])
def test_requests_no_machine_can_serve(tmp_path, capsys, inputs, args, expected):  # noqa: F811
    for token, key in (("SUDOKU", "sudoku"), ("ARC", "arc"), ("CSV", "csv"), ("DS", "arc_ds")):
        args = [a.replace(token, str(inputs[key])) for a in args]
    t0 = time.perf_counter()
    run_bad(tmp_path, capsys, args, expected)
    assert time.perf_counter() - t0 < 30  # refused up front, not after the work


@pytest.mark.slow  # about 20 s: it generates until the space is exhausted
def test_generate_puzzles_stops_when_no_new_puzzle_turns_up(tmp_path, capsys):
    # 4x4 Sudokus with exactly 4 givens: the generator finds about 25,700 distinct ones, then no more
    run_bad(tmp_path, capsys, ["generate-puzzles", "size=4", "givens=4", "count_train=60000", "output_dir=o",
                               "progress=false"], "attempts found no new one")


# ---- item 11: nonsense accepted with exit 0 -----------------------------------------------------------------


@pytest.mark.parametrize("args,expected", [
    (["sweep", "rounds=[]", "output_dir=o"], "rounds=[]: must be a non-empty list for kind=rounds"),
    (["sweep", "kind=both", "p_seeds=[]", "output_dir=o"], "p_seeds=[]: must be a non-empty list"),
    (["prepare-text", "shard_size=1", "demo_docs=10", "output_dir=o"], "shard_size=1: must be >= 1025"),
    (["vote", "ks=[1,1]", "predictions=p", "data_dir=d", "output_dir=o"], "ks=[1, 1]: lists a K twice"),
    (["build-puzzles", "task=sudoku", "source=CSV", "subsample_size=1000", "output_dir=o", "progress=false"],
     "subsample_size=1000: "),
    (["demo", "skip_gpt=true", "skip_hrm=true", "skip_puzzles=true", "output_dir=o"], "every part is skipped"),
])
def test_nonsense_is_refused(tmp_path, capsys, inputs, args, expected):  # noqa: F811
    args = [a.replace("CSV", str(inputs["csv"])) for a in args]
    run_bad(tmp_path, capsys, args, expected)


def test_a_short_last_shard_joins_the_one_before(tmp_path, inputs):  # noqa: F811
    out = tmp_path / "t"
    assert main(["prepare-text", f"inputs=[{inputs['text']}]", "tokenizer=bytes", "shard_size=1025",
                 "val_tokens=0", f"output_dir={out}", "progress=false", "num_workers=1"]) == 0
    shards = json.loads((out / "meta.json").read_text())["shards"]["train"]
    sizes = [s["num_tokens"] for s in shards]
    assert sum(sizes) == 7401 and sizes[:-1] == [1025] * (len(sizes) - 1) and sizes[-1] >= 1025  # 7 x 1025 + 226


# ---- item 12: smaller ---------------------------------------------------------------------------------------


def test_non_ascii_paths(tmp_path, inputs):  # noqa: F811
    out = tmp_path / "dé jà" / "ü"
    assert main(BUILDERS["generate-puzzles"](inputs, out)) == 0 and (out / "train.csv").is_file()
    text = tmp_path / "ñandú.txt"
    text.write_text("ünïcödé " * 300)
    assert main(["prepare-text", f"inputs=[{text}, {inputs['text']}]", "tokenizer=bytes", "shard_size=2000",
                 "val_tokens=1025", f"output_dir={tmp_path / 'tëxt'}", "progress=false", "num_workers=1"]) == 0


def test_the_error_line_is_not_glued_to_a_progress_bar(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text((json.dumps({"text": "a document"}) + "\n") * 3000 + '{"no_text": 1}\n')
    res = cli(["prepare-text", f"inputs=[{bad}]", f"output_dir={tmp_path / 'o'}", "tokenizer=bytes",
               "batch_docs=1", "num_workers=1", "progress=true"])
    assert res.returncode == 2
    last = res.stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith("hrm-deeploop prepare-text: error: input "), repr(last[-200:])


def test_dev_zero_is_not_a_regular_file(tmp_path, capsys, inputs):  # noqa: F811
    run_bad(tmp_path, capsys, ["prepare-text", "inputs=[/dev/zero]", "output_dir=o"],
            "input '/dev/zero' is not a regular file")
    run_bad(tmp_path, capsys, ["vote", "predictions=/dev/zero", f"data_dir={inputs['arc_ds']}", "output_dir=v"],
            "/dev/zero: predictions file is not a regular file")
