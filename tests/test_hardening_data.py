"""Hardening, third round (issue 26), the data and eval half: what the environment does to a writer
(a folder appearing mid-build, a full disk or file-size limit, Ctrl-C), tracebacks reachable from
input (requests no machine can serve, nonsense accepted with exit 0 and the smaller cases:
test_hardening_requests.py, which shares this file's `inputs`).

Races and disk faults run the real CLI in a subprocess: `HRM_DEEPLOOP_STOP_AT=publish` makes the
writer stop itself (SIGSTOP) just before publishing, the test changes the file system and sends
SIGCONT; a file-size limit (`RLIMIT_FSIZE`, SIGXFSZ ignored) makes every write past it fail with
EFBIG, as a full disk does with ENOSPC. Each case checks the exit code, one line on stderr naming
the culprit, that the inputs are byte-for-byte unchanged, that nothing appeared outside the output
folder, that no temp file is left and that an earlier good output is intact. The quick cases run
in-process through `hrm_deeploop.cli.main` (`tests.test_bad_inputs.run_bad`).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from arc_data.files.names import temp_name
from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_layout
from tests.test_bad_inputs import run_bad, tree

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}


# ---- helpers -------------------------------------------------------------------------------------


def _limit_file_size(limit: int):
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def cli(args: list[str], fsize: int | None = None, stop_at: str | None = None, cwd: Path | None = None):
    """The CLI in a subprocess: the finished process, or (stop_at) the running one, stopped there."""
    env = dict(ENV, **({"HRM_DEEPLOOP_STOP_AT": stop_at} if stop_at else {}))
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", *args]
    pre = _limit_file_size(fsize) if fsize else None
    if stop_at is None:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=pre, cwd=cwd, timeout=300)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    deadline = time.monotonic() + 240
    while _state(p.pid) != "T":
        if p.poll() is not None:
            raise AssertionError(f"exited ({p.returncode}) before {stop_at}: {p.stderr.read()}")
        assert time.monotonic() < deadline, "never reached the stop point"
        time.sleep(0.05)
    return p


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def resume(p: subprocess.Popen, sig: int | None = None) -> tuple[int, str]:
    if sig is not None:
        p.send_signal(sig)  # pending until the process continues
    p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def one_line(err: str, *words: str) -> str:
    lines = [ln for ln in err.strip().split("\n") if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), (words, lines[0])
    return lines[0]


def plant(out: Path) -> None:
    """A stranger's folder with a file, where a writer is about to publish."""
    out.mkdir()
    (out / "theirs.txt").write_text("a stranger's file")


def assert_untouched(out: Path) -> None:
    assert sorted(os.listdir(out)) == ["theirs.txt"] and (out / "theirs.txt").read_text() == "a stranger's file"


def leftovers(folder: Path) -> list[str]:
    """Temp or set-aside entries a writer may have left in `folder` (and one level down)."""
    found = [p for p in folder.glob(".*") if ".tmp-" in p.name or ".old-" in p.name]
    found += [p for d in folder.iterdir() if d.is_dir() and not d.is_symlink()
              for p in d.glob(".*") if ".tmp-" in p.name or ".old-" in p.name]
    return sorted(str(p) for p in found)


# ---- inputs shared by the tests (built once) ----------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hardening")
    subsets = synthetic_tasks()
    arc = write_layout(root / "arc_src", {"training": subsets["training"], "evaluation": subsets["evaluation"]})
    assert main(["build-arc", f"sources=[{arc}]", "num_aug=3", f"output_dir={root / 'arc_ds'}", "progress=false"]) == 0
    assert main(["generate-puzzles", "size=4", "count_train=200", "count_test=100", f"output_dir={root / 'csv'}",
                 "progress=false"]) == 0
    assert main(["build-puzzles", "task=sudoku", f"source={root / 'csv'}", "num_aug=1",
                 f"output_dir={root / 'sudoku'}", "progress=false"]) == 0
    (root / "text.txt").write_text("A small corpus for the shard writer. " * 200)
    ds = root / "arc_ds" / "test"
    inp, lab = np.load(ds / "all__inputs.npy"), np.load(ds / "all__labels.npy")
    pidx = np.load(ds / "all__puzzle_indices.npy")
    ids = np.repeat(np.load(ds / "all__puzzle_identifiers.npy"), np.diff(pidx))
    from eval.predictions import save_predictions

    save_predictions(root / "preds.npz", ids, inp, lab, np.zeros(len(inp), np.float32))  # the oracle
    return {"root": root, "arc": arc, "arc_ds": root / "arc_ds", "csv": root / "csv", "sudoku": root / "sudoku",
            "text": root / "text.txt", "preds": root / "preds.npz"}


BUILDERS = {
    "build-arc": lambda i, out: ["build-arc", f"sources=[{i['arc']}]", "num_aug=3", f"output_dir={out}",
                                 "progress=false"],
    "build-puzzles": lambda i, out: ["build-puzzles", "task=sudoku", f"source={i['csv']}", "num_aug=2",
                                     f"output_dir={out}", "progress=false"],
    "generate-puzzles": lambda i, out: ["generate-puzzles", "size=4", "count_train=200", "count_test=20",
                                        f"output_dir={out}", "progress=false"],
    "prepare-text": lambda i, out: ["prepare-text", f"inputs=[{i['text']}]", "tokenizer=bytes", "shard_size=2000",
                                    "val_tokens=1025", f"output_dir={out}", "progress=false", "num_workers=1"],
}
FILE_LIMIT = {"build-arc": 50_000, "build-puzzles": 4096, "generate-puzzles": 4096, "prepare-text": 2048}


# ---- item 2: publishing never replaces what it did not check ------------------------------------------


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_a_folder_appearing_during_the_build_is_left_untouched(tmp_path, inputs, builder):
    before = tree(inputs["root"])
    out = tmp_path / "out"
    p = cli(BUILDERS[builder](inputs, out), stop_at="publish")
    plant(out)
    rc, err = resume(p)
    assert rc == 2
    one_line(err, str(out), "appeared while", "left it untouched")
    assert_untouched(out)
    assert sorted(os.listdir(tmp_path)) == ["out"] and not leftovers(tmp_path)
    assert tree(inputs["root"]) == before


@pytest.mark.parametrize("taken", ["pretrain", "unseen"])
def test_two_datasets_of_one_build_are_published_together_or_not_at_all(tmp_path, inputs, taken):
    """build-arc holdout_dir=: a folder appearing at either output publishes neither (one already
    published is taken back)."""
    p = cli(["build-arc", f"sources=[{inputs['arc']}]", "num_aug=2", f"output_dir={tmp_path / 'pretrain'}",
             "holdout_tasks=[ev00]", f"holdout_dir={tmp_path / 'unseen'}", "progress=false"], stop_at="publish")
    plant(tmp_path / taken)
    rc, err = resume(p)
    assert rc == 2
    one_line(err, str(tmp_path / taken), "appeared while")
    assert_untouched(tmp_path / taken)
    assert sorted(os.listdir(tmp_path)) == [taken] and not leftovers(tmp_path)


def test_overwrite_replaces_only_the_folder_it_checked(tmp_path, inputs):
    out = tmp_path / "out"
    args = BUILDERS["generate-puzzles"](inputs, out)
    assert main(args) == 0
    ours = tree(out)
    p = cli([*args, "overwrite=true", "seed=1"], stop_at="publish")
    out.rename(tmp_path / "moved")  # meanwhile someone moves the checked folder away and puts their own there
    plant(out)
    rc, err = resume(p)
    assert rc == 2
    one_line(err, str(out), "replaced by another folder", "left it untouched")
    assert_untouched(out)
    assert tree(tmp_path / "moved") == ours and sorted(os.listdir(tmp_path)) == ["moved", "out"]
    # and without interference, overwrite=true replaces the folder it checked
    shutil.rmtree(out)
    (tmp_path / "moved").rename(out)
    p = cli([*args, "overwrite=true", "seed=1"], stop_at="publish")
    rc, err = resume(p)
    assert rc == 0, err
    assert tree(out) != ours and sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("native", [True, False])
def test_rename_noreplace_never_replaces(tmp_path, monkeypatch, native):
    """renameat2(RENAME_NOREPLACE), and the fallback where it is missing: an empty folder or a file at
    the target is refused (plain rename(2) would replace both)."""
    from arc_data.files import atomic as fsio

    if not native:
        monkeypatch.setattr(fsio, "_RENAMEAT2", None)
    elif fsio._RENAMEAT2 is None:
        pytest.skip("no renameat2 here")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("ours")
    for target in (tmp_path / "empty", tmp_path / "file"):
        target.mkdir() if target.name == "empty" else target.write_text("theirs")
        with pytest.raises(FileExistsError):
            fsio.rename_noreplace(src, target)
        assert (src / "a").read_text() == "ours"
    fsio.rename_noreplace(src, tmp_path / "new")
    assert (tmp_path / "new" / "a").read_text() == "ours" and not src.exists()


def test_a_vote_output_appearing_meanwhile_stops_the_whole_publication(tmp_path, inputs):
    before = tree(inputs["root"])
    out = tmp_path / "votes"
    p = cli(["vote", f"predictions={inputs['preds']}", f"data_dir={inputs['arc_ds']}", f"output_dir={out}"],
            stop_at="publish")
    (out / "tasks.json").write_text("theirs")
    rc, err = resume(p)
    assert rc == 2
    one_line(err, str(out / "tasks.json"), "appeared while vote ran")
    assert sorted(os.listdir(out)) == ["tasks.json"] and (out / "tasks.json").read_text() == "theirs"
    assert tree(inputs["root"]) == before


# ---- item 5: full disk / file-size limit, Ctrl-C --------------------------------------------------------


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_a_file_size_limit_is_one_line_and_keeps_the_earlier_output(tmp_path, inputs, builder):
    out = tmp_path / "out"
    args = BUILDERS[builder](inputs, out)
    assert main(args) == 0
    good = tree(out)
    res = cli([*args, "overwrite=true", "seed=3"], fsize=FILE_LIMIT[builder])
    assert res.returncode == 2, res.stderr
    one_line(res.stderr, "File too large (EFBIG)", "nothing was published", str(out))
    assert tree(out) == good and sorted(os.listdir(tmp_path)) == ["out"] and not leftovers(tmp_path)


@pytest.mark.parametrize("writer", ["vote", "viz-arc"])
def test_vote_and_viz_under_a_file_size_limit_keep_the_earlier_outputs(tmp_path, inputs, writer):
    out = tmp_path / "out"
    args = {"vote": ["vote", f"predictions={inputs['preds']}", f"data_dir={inputs['arc_ds']}", f"output_dir={out}"],
            "viz-arc": ["viz-arc", f"sources=[{inputs['arc']}]", f"output_dir={out}", "max_tasks=3"]}[writer]
    assert main(args) == 0
    good = tree(out)
    res = cli([*args, "overwrite=true" if writer == "vote" else "cell=20"], fsize=2000)
    assert res.returncode == 2, res.stderr
    one_line(res.stderr, "EFBIG", "published nothing")  # all files or none: never a partial gallery
    assert tree(out) == good and not leftovers(tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs (root only, where the sandbox allows mounting): a real full disk."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or the sandbox forbids it); the file-size limit tests cover it")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_is_one_line_and_frees_the_space(tmp_path, inputs, small_disk):
    out = small_disk / "text"
    args = ["prepare-text", "tokenizer=bytes", "shard_size=100000", "val_tokens=1025", f"output_dir={out}",
            "progress=false", "num_workers=1"]
    assert main([*args, f"inputs=[{inputs['text']}]"]) == 0
    good = tree(out)
    big = tmp_path / "big.txt"
    big.write_text("x" * 600_000)  # 1.2 MB of uint16 tokens: more than the disk holds
    res = cli([*args, f"inputs=[{big}]", "overwrite=true"])
    assert res.returncode == 2, res.stderr
    one_line(res.stderr, "No space left on device (ENOSPC)", "nothing was published")
    assert tree(out) == good and sorted(os.listdir(small_disk)) == ["text"]
    assert shutil.disk_usage(small_disk).used < 100_000  # the partial shards are gone


@pytest.fixture
def read_only(tmp_path):
    """A folder made immutable (chattr +i holds even for root), skipped where chattr cannot."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "votes").mkdir()
    if subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    yield ro
    subprocess.run(["chattr", "-i", str(ro)], check=True)


def test_a_read_only_output_is_refused_before_any_work(tmp_path, capsys, inputs, read_only):
    run_bad(tmp_path, capsys, BUILDERS["generate-puzzles"](inputs, read_only / "new"), f"{read_only} is not writable")
    subprocess.run(["chattr", "+i", str(read_only / "votes")], check=True)
    try:
        run_bad(tmp_path, capsys, ["vote", f"predictions={inputs['preds']}", f"data_dir={inputs['arc_ds']}",
                                   f"output_dir={read_only / 'votes'}"], f"{read_only / 'votes'} is not writable")
    finally:
        subprocess.run(["chattr", "-i", str(read_only / "votes")], check=True)


@pytest.mark.parametrize("builder,sig", [("build-arc", signal.SIGINT), ("prepare-text", signal.SIGINT),
                                         ("generate-puzzles", signal.SIGTERM)])
def test_ctrl_c_or_sigterm_before_publishing_removes_the_temp_folder(tmp_path, inputs, builder, sig):
    out = tmp_path / "out"
    p = cli(BUILDERS[builder](inputs, out), stop_at="publish")
    assert [q.name for q in tmp_path.iterdir()] == [temp_name(out, pid=p.pid)]  # the build, staged
    rc, err = resume(p, sig)
    assert rc == 128 + sig
    one_line(err, "interrupted")
    assert not os.listdir(tmp_path)


@pytest.fixture(scope="module")
def sudoku_run(inputs):
    run = inputs["root"] / "run"
    assert main(["train", "experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_h_layers=1",
                 "model.num_l_layers=1", f"data_dir={inputs['sudoku']}", f"output_dir={run}", "train.max_steps=2",
                 "train.global_batch_size=8", "checkpoint.every=2", "eval.every=0", "train.progress=false",
                 "optim.warmup_steps=1"]) == 0
    return run


EVAL_LIMIT = 12_000  # bytes: above predictions.npz (about 8 kB here), below report.html (tens of kB)


def test_evaluate_publishes_predictions_only_with_the_rest(tmp_path, inputs, sudoku_run):
    out = tmp_path / "eval"
    args = ["evaluate", f"checkpoint={sudoku_run}", f"data_dir={inputs['sudoku']}", f"output_dir={out}",
            "progress=false", "device=cpu"]
    res = cli(args, fsize=EVAL_LIMIT)  # predictions.npz fits, the report does not
    assert res.returncode == 2, res.stderr
    one_line(res.stderr, "EFBIG", "published nothing")
    assert not out.exists()  # no predictions.npz without its metrics; the folder evaluate made, taken back
    assert main(args) == 0
    good = tree(out)
    assert "predictions.npz" in good and "metrics.json" in good
    res = cli([*args, "overwrite=true"], fsize=EVAL_LIMIT)
    assert res.returncode == 2 and tree(out) == good and not leftovers(tmp_path)


# ---- item 9: tracebacks reachable from input --------------------------------------------------------------


def _truncated_copy(src: Path, dst: Path, member: str) -> Path:
    shutil.copytree(src, dst)
    p = dst / member
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size // 2)
    return dst


@pytest.mark.parametrize("member", ["augmentations.npz", "test/all__inputs.npy"])
def test_truncated_dataset_files_are_refused(tmp_path, capsys, inputs, member):
    _truncated_copy(inputs["arc_ds"], tmp_path / "ds", member)
    for args in (["vote", f"predictions={inputs['preds']}", "data_dir=ds", "output_dir=out"],
                 ["viz-arc", "data_dir=ds", "output_dir=out"],
                 # refused before the checkpoint is even opened (there is none)
                 ["evaluate", "checkpoint=missing.pt", "data_dir=ds", "output_dir=out", "device=cpu"]):
        line = run_bad(tmp_path, capsys, args, f"ds/{member}: ", output_dir="out")
        assert "truncated" in line, line


def test_a_fifo_inside_a_dataset_is_never_opened(tmp_path, inputs):
    ds = tmp_path / "ds"
    shutil.copytree(inputs["arc_ds"], ds)
    (ds / "test" / "all__inputs.npy").unlink()
    os.mkfifo(ds / "test" / "all__inputs.npy")  # opening it would block the reader forever
    for args in (["vote", f"predictions={inputs['preds']}"], ["viz-arc"], ["evaluate", "checkpoint=missing.pt"]):
        res = cli([*args, f"data_dir={ds}", f"output_dir={tmp_path / 'out'}"])
        assert res.returncode == 2, res.stderr
        one_line(res.stderr, "all__inputs.npy: is not a regular file")


def test_symlink_loops_in_path_arguments(tmp_path, capsys, inputs):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    run_bad(tmp_path, capsys, ["build-arc", "sources=[a]", "output_dir=o", "num_aug=1"], "is a loop of symbolic links")
    run_bad(tmp_path, capsys, ["build-arc", f"sources=[{inputs['arc']}]", "output_dir=a/x", "num_aug=1"],
            "output_dir=a/x: is a loop of symbolic links")
    run_bad(tmp_path, capsys, ["vote", "predictions=a", f"data_dir={inputs['arc_ds']}", "output_dir=v"],
            "predictions file is a loop of symbolic links")
    run_bad(tmp_path, capsys, ["prepare-text", "inputs=[a]", "output_dir=t"], "is a loop of symbolic links")
    run_bad(tmp_path, capsys, ["build-puzzles", "task=sudoku", "source=a", "output_dir=p"],
            "is a loop of symbolic links")


def test_a_250_character_folder_name_builds(tmp_path, inputs):
    name = "d" * 250
    assert len(temp_name(tmp_path / ("x" * 255), "old", pid=2**22).encode()) <= 255
    for builder in ("generate-puzzles", "prepare-text"):
        out = tmp_path / builder / name
        out.parent.mkdir()
        assert main(BUILDERS[builder](inputs, out)) == 0 and out.is_dir() and not leftovers(out.parent)
    assert main([*BUILDERS["generate-puzzles"](inputs, tmp_path / "generate-puzzles" / name), "overwrite=true"]) == 0


def test_json_with_a_huge_integer_or_deep_nesting(tmp_path, capsys):
    big, deep = tmp_path / "big" / "training", tmp_path / "deep" / "training"
    big.mkdir(parents=True)
    deep.mkdir(parents=True)
    (big / "t.json").write_text('{"train": [{"input": [[' + "9" * 5000 + ']], "output": [[1]]}], "test": []}')
    (deep / "t.json").write_text('{"train": ' + "[" * 100_000 + "]" * 100_000 + ', "test": []}')
    run_bad(tmp_path, capsys, ["build-arc", "sources=[big]", "output_dir=o", "num_aug=1"],
            "big/training/t.json: task t: invalid JSON (an integer too long to read)")
    run_bad(tmp_path, capsys, ["viz-arc", "sources=[deep]", "output_dir=z"],
            "deep/training/t.json: task t: invalid JSON (nested too deeply)")
    (tmp_path / "big.jsonl").write_text('{"text": ' + "9" * 5000 + "}\n")
    run_bad(tmp_path, capsys, ["prepare-text", "inputs=[big.jsonl]", "output_dir=t", "progress=false"],
            "big.jsonl:1: invalid JSON (an integer too long to read)")


@pytest.mark.parametrize("args,expected", [
    (["generate-puzzles", "seed=" + str(10**30), "output_dir=o"], f"seed={10**30}: must fit a signed 64-bit"),
    (["build-arc", "seed=" + "9" * 5000, "output_dir=o"], "seed=<an integer of more than 4300 digits>"),
    (["train", "train.max_steps=" + str(10**30), "data_dir=d", "output_dir=o"], "train.max_steps="),
    (["evaluate", "tta_seed=" + str(2**63), "output_dir=o"], "tta_seed=9223372036854775808: must fit"),
    (["prepare-text", f"max_tokens={-2**63 - 1}", "demo_docs=1", "output_dir=o"], "max_tokens="),
])
def test_integers_beyond_int64_are_one_rule(tmp_path, capsys, args, expected):
    run_bad(tmp_path, capsys, args, expected)
