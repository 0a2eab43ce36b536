"""Issue 26, the run and checkpoint half: what the environment does to a run, through the real CLI.

Each case runs `python -m hrm_deeploop.cli` in a subprocess (cwd: the test's folder) and checks
the exit code, the one line naming the culprit, that the inputs are byte-for-byte unchanged
(sha256), that no temp file is left and that the earlier good output is intact:

- a checkpoint whose pickle carries a payload is refused and runs nothing (evaluate, a run
  folder's resume, eval-gpt; zip and raw-pickle files); a train state of the older layout loads;
- a second trainer on a folder another one holds is refused naming the holder's PID (train with a
  SIGSTOPped trainer; train-gpt against a lock this test holds); a killed run leaves nothing stuck;
- SIGTERM / SIGINT during training: checkpoint, then exit 143 / 130 with one line naming it, and
  the resumed run is bit-identical to one never interrupted; Ctrl-C during a checkpoint write
  leaves no temp file;
- a full disk (tmpfs), a file-size limit (`ulimit -f`) and a read-only checkpoints/ (tmpfs
  remounted read-only) during the checkpoint write: one line with the path and errno, the
  previous checkpoint intact and resumable;
- what a crash leaves: a torn last line of metrics.jsonl (repaired with a warning), a bad line
  inside it, a truncated config.yaml, stale `*.tmp` files;
- resuming on a different dataset is refused (config.yaml untouched); a copy of the same one is fine;
- eval-gpt never replaces eval.json without overwrite=true, and never writes beside a loose checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import main
from tests.test_bad_inputs import sudoku_set, tree  # noqa: F401  (sudoku_set: a fixture)

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
SHORT = ["train.max_steps=6", "checkpoint.every=2", "optim.warmup_steps=1"]  # no long-warmup warning on stderr
LONG = ["train.max_steps=100000", "checkpoint.every=0"]  # runs until a signal stops it


def train(*extra: str, data: str = "ds", out: str = "run") -> list[str]:
    """`train` of the tiny HRM on `data`, into `out` (paths relative to the test's folder)."""
    return ["train", "model=hrm_tiny", f"data_dir={data}", f"output_dir={out}", "logger=none", "device=cpu",
            "train.global_batch_size=8", "model.puzzle_emb_ndim=0", "train.progress=false", *extra]


def files(root: Path) -> dict[str, str]:
    """sha256 of everything under root but the run folders' lock files (each run writes its PID there)."""
    return {k: v for k, v in tree(root).items() if not k.endswith(ckpt.LOCK_FILE)}


def cli(cwd: Path, *args: str, limit_kib: int | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """The CLI in a fresh process; `limit_kib`: under `ulimit -f` (Python ignores SIGXFSZ, so an
    oversized write raises EFBIG)."""
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", *args]
    if limit_kib is not None:
        cmd = ["bash", "-c", f'ulimit -f {limit_kib}; exec "$@"', "bash", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def one_line(p: subprocess.CompletedProcess, code: int, *expected: str) -> str:
    """Exit code `code` and exactly one stderr line holding every `expected` text; no traceback."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and ": note: " not in ln]
    assert p.returncode == code, (p.returncode, p.stderr[-3000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1, lines
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def no_temp_files(root: Path) -> None:
    left = [str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(".tmp") or ".tmp" in p.name]
    assert not left, left


@pytest.fixture(scope="module")
def base(tmp_path_factory, sudoku_set) -> Path:  # noqa: F811 (the imported fixture)
    """ds/ (a 4x4 Sudoku dataset) and run/ (a run of it stopped at step 2 of 6, checkpoint step_2.pt)."""
    root = tmp_path_factory.mktemp("hardening")
    shutil.copytree(sudoku_set, root / "ds")
    p = cli(root, *train(*SHORT, "train.stop_after=2"))
    assert p.returncode == 0, p.stderr
    assert [s for s, _ in ckpt.list_checkpoints(root / "run")] == [2]
    return root


@pytest.fixture
def work(tmp_path, base) -> Path:
    """A private copy of the base folder (dataset and stopped run)."""
    for name in ("ds", "run"):
        shutil.copytree(base / name, tmp_path / name)
    return tmp_path


def steps_logged(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "train/loss" in r]


# ---- 1. loading a checkpoint runs no code ---------------------------------------------------------

class Payload:
    """Unpickling this object calls os.system(touch MARKER) under weights_only=False."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def write_evil(path: Path, marker: Path, raw: bool) -> Path:
    state = {"format": ckpt.FORMAT, "step": 2, "model": {"w": torch.zeros(2)}, "config": Payload(marker)}
    if raw:  # a bare pickle (protocol 2, which torch.load also reads), without tensors
        with open(path, "wb") as f:
            pickle.dump(state | {"model": {"w": [0.0, 0.0]}}, f, protocol=2)
    else:
        torch.save(state, path)
    return path


@pytest.mark.parametrize("raw", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["zip", "raw-pickle"])
def test_a_checkpoint_with_a_code_payload_is_refused_and_runs_nothing(work, raw):
    marker = work / "MARKER"
    evil = write_evil(work / "evil.pt", marker, raw)
    shutil.copy(evil, work / "run/checkpoints/step_4.pt")  # the latest checkpoint of a run folder
    before = files(work)
    cases = {
        "evaluate": ["evaluate", "checkpoint=evil.pt", "data_dir=ds", "output_dir=ev", "device=cpu"],
        "resume": train(*SHORT, "resume=true"),
        "eval-gpt": ["eval-gpt", "checkpoint=evil.pt", "data=ds", "device=cpu", "output_dir=eg"],
    }
    for name, args in cases.items():
        p = cli(work, *args)
        where = "run/checkpoints/step_4.pt" if name == "resume" else "evil.pt"
        one_line(p, 2, f"checkpoint '{where}' is refused", "posix.system", "could run code")
        assert not marker.exists(), f"{name}: the payload ran"
    assert files(work) == before  # nothing written, nothing changed (no run folder, no eval folder)


def test_a_train_state_of_the_older_layout_still_loads(work):
    """Train states written before 2026-12-01 held the sampler's bit-generator state as NumPy
    arrays: allowed (numeric arrays rebuild without running code), and the resume continues."""
    path = work / "run/checkpoints/step_2.pt"
    state = ckpt.load(path)
    rng = state["sampler"]["rng"]
    rng["state"] = {k: np.asarray(v, dtype=np.uint64) for k, v in rng["state"].items()}
    rng["buffer"] = np.asarray(rng["buffer"], dtype=np.uint64)
    torch.save(state, path)
    assert isinstance(ckpt.load(path)["sampler"]["rng"]["buffer"], np.ndarray)
    p = cli(work, *train(*SHORT, "resume=true"))
    assert p.returncode == 0, p.stderr
    assert [s for s, _ in ckpt.list_checkpoints(work / "run")] == [2, 4, 6]


@pytest.mark.slow
def test_a_numpy_object_array_is_refused(work):
    torch.save({"step": 2, "model": {}, "rng": np.array([print], dtype=object)}, work / "obj.pt")
    p = cli(work, "evaluate", "checkpoint=obj.pt", "data_dir=ds", "output_dir=ev", "device=cpu")
    one_line(p, 2, "checkpoint 'obj.pt' is", "ObjectDType")
    assert not (work / "ev").exists()


# ---- 2. one run per output_dir, and signals ---------------------------------------------------------

def start_training(cwd: Path, *args: str) -> subprocess.Popen:
    """A trainer in the background; returns once it holds the lock and has logged a step."""
    proc = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *args], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock, metrics = cwd / "run" / ckpt.LOCK_FILE, cwd / "run/metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the trainer ended early: {proc.communicate()}")
        if (lock.is_file() and f"PID {proc.pid} " in lock.read_text() and metrics.is_file()
                and metrics.read_text().count("\n") >= 1):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the trainer never started")


def stop(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def interrupt(cwd: Path, sig: int) -> int:
    """Train in the background until `sig`; a second trainer meanwhile (the first SIGSTOPped) is
    refused. Checks the exit code and line of the first; returns the step it saved."""
    a = start_training(cwd, *train(*LONG))
    try:
        os.kill(a.pid, signal.SIGSTOP)  # hold it still while the second one tries
        before = files(cwd)
        b = cli(cwd, *train(*LONG, "resume=true"))
        one_line(b, 2, "output_dir 'run' is in use by another run", f"PID {a.pid} ")
        assert files(cwd) == before  # the second one wrote nothing
        os.kill(a.pid, signal.SIGCONT)
        rc, err = stop(a, sig)
    finally:
        if a.poll() is None:
            a.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 128 + sig, err
    assert len(lines) == 1 and "Traceback" not in err, lines
    by = " by SIGTERM" if sig == signal.SIGTERM else ""
    assert lines[0].startswith(f"hrm-deeploop train: interrupted{by}: saved run/checkpoints/step_"), lines
    assert lines[0].endswith("; resume with resume=true"), lines
    n = int(lines[0].split("step_")[1].split(".pt")[0])
    assert [s for s, _ in ckpt.list_checkpoints(cwd / "run")] == [n]
    no_temp_files(cwd)
    return n


@pytest.mark.slow  # .ci/run runs it after the suite (the default suite under 10 minutes)
def test_a_second_trainer_is_refused_and_sigterm_checkpoints_then_exits(tmp_path, base):
    shutil.copytree(base / "ds", tmp_path / "ds")
    n = interrupt(tmp_path, signal.SIGTERM)
    # the lock died with its process; the run resumes where it was stopped
    p = cli(tmp_path, *train(*LONG, "resume=true", f"train.stop_after={n + 1}"))
    assert p.returncode == 0 and f"resumed run at step {n} from step_{n}.pt" in p.stdout, p.stderr
    assert steps_logged(tmp_path / "run") == list(range(1, n + 2))


@pytest.mark.slow
def test_a_run_resumed_after_sigint_equals_one_never_interrupted(tmp_path, base):
    shutil.copytree(base / "ds", tmp_path / "ds")
    n = interrupt(tmp_path, signal.SIGINT)
    assert cli(tmp_path, *train(*LONG, "resume=true", f"train.stop_after={n + 2}")).returncode == 0
    straight = cli(tmp_path, *train(*LONG, f"train.stop_after={n + 2}", out="straight"))
    assert straight.returncode == 0, straight.stderr
    a, b = ckpt.load(ckpt.step_path(tmp_path / "run", n + 2)), ckpt.load(ckpt.step_path(tmp_path / "straight", n + 2))
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    assert a["sampler"] == b["sampler"] and a["rng"]["torch"].equal(b["rng"]["torch"])
    assert steps_logged(tmp_path / "run") == list(range(1, n + 3))


@pytest.mark.slow
def test_a_killed_trainer_leaves_no_lock_behind(tmp_path, base):
    shutil.copytree(base / "ds", tmp_path / "ds")
    a = start_training(tmp_path, *train(*LONG))
    a.kill()
    a.communicate()
    p = cli(tmp_path, *train("train.max_steps=6", "resume=true"))  # no checkpoint: starts afresh
    assert p.returncode == 0, p.stderr
    assert steps_logged(tmp_path / "run") == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize("name", [ckpt.LOCK_FILE, "metrics.jsonl"])
def test_a_run_folder_file_that_links_elsewhere_is_refused_and_its_target_untouched(tmp_path, base, name):
    """The lock file and the metrics log are opened for writing in place: a symlink planted there
    could make the run truncate anyone's file."""
    shutil.copytree(base / "ds", tmp_path / "ds")
    (tmp_path / "victim").write_text("someone else's file\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).symlink_to("../victim")
    p = cli(tmp_path, *train("train.max_steps=2"))
    one_line(p, 2, f"'run/{name}'", "ELOOP" if name == ckpt.LOCK_FILE else "is not a regular file")
    assert (tmp_path / "victim").read_text() == "someone else's file\n"
    assert not ckpt.list_checkpoints(tmp_path / "run")


def test_train_gpt_is_refused_on_a_locked_folder(tmp_path):
    byte_shards(tmp_path)
    lock = ckpt.RunLock(tmp_path / "gpt")  # this process holds the folder
    try:
        p = cli(tmp_path, "train-gpt", *GPT, "output_dir=gpt", "train.max_steps=2")
    finally:
        lock.release()
    one_line(p, 2, "output_dir 'gpt' is in use by another run", f"PID {os.getpid()} ")
    assert sorted(q.name for q in (tmp_path / "gpt").iterdir()) == [ckpt.LOCK_FILE]


def test_ctrl_c_during_a_checkpoint_write_leaves_no_temp_file(work, monkeypatch, capsys):
    """In-process, so that the interrupt lands inside the write: os.replace of step_4.pt raises."""
    real = os.replace

    def interrupted(src, dst, *a, **k):
        if str(dst).endswith("step_4.pt"):
            raise KeyboardInterrupt
        return real(src, dst, *a, **k)

    monkeypatch.chdir(work)
    monkeypatch.setattr(os, "replace", interrupted)
    good = tree(work / "run/checkpoints")
    assert main(train(*SHORT, "resume=true")) == 130
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["hrm-deeploop train: interrupted: stopped at step 4 without saving it; "
                   "the last checkpoint is run/checkpoints/step_2.pt"]
    assert tree(work / "run/checkpoints") == good
    no_temp_files(work)


# ---- 3. a full disk, a file-size limit, a read-only checkpoints/ ------------------------------------

def check_failed_write(work: Path, p: subprocess.CompletedProcess, errno_name: str, good: dict) -> None:
    one_line(p, 2, "cannot write 'run/checkpoints/step_4.pt'", errno_name,
             "the last checkpoint is run/checkpoints/step_2.pt")
    assert tree(work / "run/checkpoints") == good
    no_temp_files(work)


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_a_file_size_limit_during_the_checkpoint_write(work):
    good = tree(work / "run/checkpoints")
    size_kib = (work / "run/checkpoints/step_2.pt").stat().st_size // 1024
    p = cli(work, *train(*SHORT, "resume=true"), limit_kib=size_kib // 2)
    check_failed_write(work, p, "errno 27, EFBIG", good)
    p = cli(work, *train(*SHORT, "resume=true"))  # room again: it resumes from step 2
    assert p.returncode == 0, p.stderr
    assert [s for s, _ in ckpt.list_checkpoints(work / "run")] == [2, 4, 6]


@contextlib.contextmanager
def tmpfs(at: Path, size: str):
    """A small tmpfs at `at` (root only; skips where mounting is not allowed)."""
    at.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(at)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("fault, errno_name", [("full", "errno 28, ENOSPC"), ("read-only", "errno 30, EROFS")])
def test_a_full_or_read_only_checkpoints_folder(work, fault, errno_name):
    saved = work / "saved"
    shutil.move(work / "run/checkpoints", saved)
    with tmpfs(work / "run/checkpoints", "2m") as mnt:  # room for step_2.pt (1.8 MB), not for step_4.pt
        shutil.copy(saved / "step_2.pt", mnt / "step_2.pt")
        if fault == "read-only":
            if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode != 0:
                pytest.skip("cannot remount read-only here")
        good = tree(mnt)
        check_failed_write(work, cli(work, *train(*SHORT, "resume=true")), errno_name, good)
        shutil.copy(mnt / "step_2.pt", saved / "step_2.pt")
    os.rmdir(work / "run/checkpoints")
    shutil.move(saved, work / "run/checkpoints")
    assert cli(work, *train(*SHORT, "resume=true")).returncode == 0  # the previous checkpoint resumes


# ---- 4. what a crash leaves in the run folder ---------------------------------------------------------

def test_a_torn_last_metrics_line_and_stale_temp_files_are_repaired(work):
    with open(work / "run/metrics.jsonl", "a") as f:
        f.write('{"step": 3, "train/lo')  # killed mid-write
    (work / "run/checkpoints/step_4.pt.tmp").write_bytes(b"half a checkpoint")
    (work / "run/summary.json.tmp").write_text("{")
    p = cli(work, *train(*SHORT, "resume=true"))
    assert p.returncode == 0, p.stderr
    warn = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(warn) == 1 and "warning: 'run/metrics.jsonl': dropped a torn last line" in warn[0], warn
    assert steps_logged(work / "run") == [1, 2, 3, 4, 5, 6]
    no_temp_files(work)


@pytest.mark.slow
def test_a_bad_line_inside_metrics_is_named(work):
    lines = (work / "run/metrics.jsonl").read_text().splitlines()
    lines.insert(1, "not json")
    (work / "run/metrics.jsonl").write_text("\n".join(lines) + "\n")
    before = files(work)
    p = cli(work, *train(*SHORT, "resume=true"))
    one_line(p, 2, "'run/metrics.jsonl' line 2 is not a JSON record")
    assert files(work) == before


@pytest.mark.parametrize("damage", [pytest.param("cut in the model section", marks=pytest.mark.slow),
                                    "cut into invalid YAML", pytest.param("binary", marks=pytest.mark.slow)])
def test_a_truncated_or_invalid_config_yaml_is_one_line(work, damage):
    """A cut that still parses loses architecture keys (named with the file); one that does not
    parse, or bytes that are not text, are named as unreadable."""
    cfg = work / "run/config.yaml"
    text = cfg.read_bytes()
    cfg.write_bytes({"cut in the model section": text[:100], "cut into invalid YAML": text[:100] + b"\n - [",
                     "binary": b"\xff\xfe\x00bad"}[damage])
    before = files(work)
    p = cli(work, *train(*SHORT, "resume=true"))
    one_line(p, 2, "cannot resume 'run'", "'run/config.yaml'")
    assert files(work) == before


# ---- 5. resume with a different dataset ----------------------------------------------------------------

def test_resume_with_a_different_dataset_is_refused(work):
    assert main(["generate-puzzles", "task=sudoku", "size=4", "count_train=40", "count_test=8", "seed=7",
                 f"output_dir={work / 'csv2'}", "progress=false"]) == 0
    assert main(["build-puzzles", "task=sudoku", f"source={work / 'csv2'}", f"output_dir={work / 'other'}",
                 "progress=false"]) == 0
    before = files(work)
    p = cli(work, *train(*SHORT, "resume=true", data="other"))
    one_line(p, 2, "cannot resume 'run': the dataset is not the one the run trained on", "all__inputs.npy changed",
             "'run/data_identity.json'")
    assert files(work) == before  # config.yaml keeps the record of what the run trained on


@pytest.mark.slow
def test_resume_with_a_copy_of_the_dataset_is_fine(work):
    shutil.copytree(work / "ds", work / "copy")  # the same dataset elsewhere is the same dataset
    p = cli(work, *train(*SHORT, "resume=true", data="copy"))
    assert p.returncode == 0, p.stderr
    assert json.loads((work / "run/data_identity.json").read_text())["data_dir"] == "copy"


# ---- 6. eval-gpt's output -------------------------------------------------------------------------------

GPT = ["model=gpt_tiny", "model.hidden_size=32", "model.seq_len=32", "model.mlp_multiple=16", "model.vocab_size=320",
       "device=cpu", "logger=none", "train.progress=false", "train.micro_batch_size=2",
       "train.global_batch_tokens=64", "optim.warmup_steps=1", "data.unigram_tokens=100000",
       "data.train=train_*.bin", "data.val=val_000000.bin", "data.tokenizer_id=bytes"]


def byte_shards(root: Path) -> None:
    from hrm_deeploop.text.shards import write_meta, write_shard

    stream = np.random.default_rng(1).integers(0, 257, size=3000)
    write_shard(root / "train_000000.bin", stream[:2400])
    write_shard(root / "val_000000.bin", stream[2400:])
    write_meta(root, tokenizer_id="bytes")


def gpt_run(root: Path) -> None:
    """Byte-token shards and a 2-step looped-GPT run `gpt/` in root."""
    byte_shards(root)
    p = cli(root, "train-gpt", *GPT, "output_dir=gpt", "train.max_steps=2")
    assert p.returncode == 0, p.stderr


def test_eval_gpt_keeps_an_earlier_eval_json_and_writes_nothing_beside_a_loose_checkpoint(tmp_path, base):
    """Both are decided before the checkpoint is read, so any file stands in for one here (the
    slow test below runs the real thing)."""
    byte_shards(tmp_path)
    (tmp_path / "gpt/checkpoints").mkdir(parents=True)
    shutil.copy(base / "run/checkpoints/step_2.pt", tmp_path / "gpt/checkpoints/step_2.pt")
    (tmp_path / "gpt/eval").mkdir()
    (tmp_path / "gpt/eval/eval.json").write_text('{"num_rounds": 2}\n')  # an earlier evaluation
    ev = ["eval-gpt", "data=val_000000.bin", "device=cpu", "batch_size=2"]
    before = files(tmp_path)
    p = cli(tmp_path, *ev, "checkpoint=gpt", "num_rounds=3")
    one_line(p, 2, "gpt/eval/eval.json' already exists", "overwrite=true")
    assert files(tmp_path) == before
    # a loose checkpoint file: nothing beside it (or at its parent's parent) without output_dir
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(tmp_path / "gpt/checkpoints/step_2.pt", loose / "model.pt")
    before = files(tmp_path)
    p = cli(tmp_path, *ev, "checkpoint=loose/model.pt")
    one_line(p, 2, "checkpoint 'loose/model.pt' is not in a run folder's checkpoints/", "output_dir=")
    assert files(tmp_path) == before


@pytest.mark.slow
def test_eval_gpt_replaces_with_overwrite_and_writes_a_loose_checkpoints_eval_to_output_dir(tmp_path):
    gpt_run(tmp_path)
    ev = ["eval-gpt", "data=val_000000.bin", "device=cpu", "batch_size=2"]
    assert cli(tmp_path, *ev, "checkpoint=gpt").returncode == 0
    first = json.loads((tmp_path / "gpt/eval/eval.json").read_text())
    assert cli(tmp_path, *ev, "checkpoint=gpt", "num_rounds=3", "overwrite=true").returncode == 0
    assert json.loads((tmp_path / "gpt/eval/eval.json").read_text())["num_rounds"] == 3 != first["num_rounds"]
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(ckpt.latest(tmp_path / "gpt"), loose / "model.pt")
    assert cli(tmp_path, *ev, "checkpoint=loose/model.pt", "output_dir=out").returncode == 0
    assert sorted(q.name for q in (tmp_path / "out").iterdir()) == ["eval.json"]
    assert sorted(q.name for q in loose.iterdir()) == ["model.pt"]


# ---- checkpoint paths (a model no machine here can hold: test_hardening_sizes.py) -------------------
@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_a_checkpoint_path_that_is_a_link_loop_a_fifo_or_a_device_is_named_as_such(work):
    """Never opened (a FIFO would block the reader), never 'does not exist'."""
    os.symlink("loop_b.pt", work / "loop_a.pt")
    os.symlink("loop_a.pt", work / "loop_b.pt")
    os.mkfifo(work / "fifo.pt")
    before = files(work)
    cases = [(["evaluate", "checkpoint=loop_a.pt", "data_dir=ds", "output_dir=ev", "device=cpu"],
              "checkpoint 'loop_a.pt' is a loop of symbolic links"),
             (["evaluate", "checkpoint=fifo.pt", "data_dir=ds", "output_dir=ev", "device=cpu"],
              "checkpoint 'fifo.pt' is not a regular file (a device, FIFO or socket)"),
             (train(*SHORT, "init_from=/dev/zero", out="new"),
              "checkpoint '/dev/zero' is not a regular file"),
             (["eval-gpt", "checkpoint=loop_b.pt", "data=ds", "device=cpu", "output_dir=eg"],
              "checkpoint 'loop_b.pt' is a loop of symbolic links")]
    for args, expected in cases:
        one_line(cli(work, *args, timeout=60), 2, expected)
    assert files(work) == before and not (work / "ev").exists() and not (work / "new").exists()
