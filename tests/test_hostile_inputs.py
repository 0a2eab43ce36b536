"""Issue 47, inputs: every JSON input through one reader, the Hub's references and weights through
one resolver and one loader, loop counts through one estimate, and a signal that stops any command
within seconds. Each case through the CLI (in-process `main`, or a subprocess), one line, exit 2:

- JSON: nesting 100,000 deep, a task id twice (JSON allows it; the reader refuses it naming the key),
  `{}` challenges (build-arc, vote's coverage) and solutions, a task without solution grids;
- Hub: a 3000-character owner, a revision `..`, a cache whose refs/main leads outside the cache;
  model.safetensors with int8 tensors for a float model, NaN weights, a wrong shape, a missing and an
  extra tensor;
- generate: a prompt that is not UTF-8, stdout a closed pipe, stdout past the file-size limit,
  num_rounds=1e8;
- training configs looping 1e9 cycles are refused by their time; 1e6 are announced and a SIGTERM
  stops them within seconds (slow); the held signal's grace in `interrupts.deferred`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_deeploop.cli import main
from tests.arc_synth import synthetic_tasks, write_kaggle
from tests.test_bad_inputs import sudoku_set  # noqa: F401  (a fixture)
from tests.test_hostile_writers import ENV, limited, one_line, refused

DEEP = "[" * 100_000 + "]" * 100_000
SOL = {"a": [[[1]], [[2]]], "b": [[[3, 3]]]}
SUB = {"a": [{"attempt_1": [[1]], "attempt_2": [[0]]}, {"attempt_1": [[2]], "attempt_2": [[2]]}]}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


# ---- JSON: one reader -------------------------------------------------------------------------------

@pytest.mark.parametrize("which, text, expected", [
    ("sub.json", DEEP, "submission 'sub.json': invalid JSON (nested too deeply)"),
    ("sol.json", DEEP, "solutions 'sol.json': invalid JSON (nested too deeply)"),
    ("sol.json", '{"a": [[[1]]], "b": [[[2]]], "a": [[[3]]]}', "the key 'a' appears twice"),
    ("sol.json", "{}", "solutions 'sol.json': holds no tasks"),
    ("sol.json", '{"a": [[[1]]], "b": []}', "task b: no solution grids"),
    ("sub.json", b"{\"a\": \"\xff\"}", "not UTF-8"),
])
def test_score_reads_json_through_the_one_reader(tmp_path, monkeypatch, capsys, which, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub.json").write_text(json.dumps(SUB))
    (tmp_path / "sol.json").write_text(json.dumps(SOL))
    (tmp_path / which).write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(tmp_path, capsys, ["score", "submission=sub.json", "solutions=sol.json"], expected)


def test_score_of_a_fifo_is_refused_not_read(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sol.json").write_text(json.dumps(SOL))
    os.mkfifo(tmp_path / "sub.json")  # a reader would block forever
    refused(tmp_path, capsys, ["score", "submission=sub.json", "solutions=sol.json"],
            "submission 'sub.json' is not a regular file")


@pytest.mark.parametrize("challenges, expected", [
    ("{}", "holds no tasks"),
    ('{"t1": TASK, "t2": TASK, "t1": TASK}', "the key 't1' appears twice"),
])
def test_build_arc_refuses_an_empty_challenges_file_and_a_task_id_twice(tmp_path, monkeypatch, capsys,
                                                                        challenges, expected):
    monkeypatch.chdir(tmp_path)
    task = next(iter(synthetic_tasks()["training"].values()))
    path = write_kaggle(tmp_path, "x", {"t1": task})
    path.write_text(challenges.replace("TASK", json.dumps({"train": task["train"], "test": task["test"]})))
    (tmp_path / "x_solutions.json").unlink()
    refused(tmp_path, capsys, ["build-arc", f"sources=[{path.name}]", "test_labels=optional", "output_dir=out",
                               "progress=false"], "x_challenges.json", expected)


def test_vote_coverage_refuses_empty_challenges():
    from eval.arc.arcprize import cover
    from hrm_deeploop.errors import UserError

    with pytest.raises(UserError, match="c.json: holds no tasks"):
        cover({}, {}, "c.json")
    with pytest.raises(UserError, match="task t: no test inputs"):
        cover({}, {"t": {"train": [], "test": []}}, "c.json")


# ---- a looped GPT, its export, and the Hub ------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> Path:
    """root/gpt (a 2-step looped-GPT run on byte shards) and root/exp (its export)."""
    from tests.test_hardening_runs import GPT, byte_shards

    root = tmp_path_factory.mktemp("gpt")
    byte_shards(root)
    old = os.getcwd()
    os.chdir(root)
    try:
        assert main(["train-gpt", *GPT, "output_dir=gpt", "train.max_steps=2"]) == 0
        assert main(["export", "checkpoint=gpt", "output_dir=exp"]) == 0
    finally:
        os.chdir(old)
    return root


def generate(*extra: str) -> list[str]:
    return ["generate", "device=cpu", "max_new_tokens=4", *extra]


def tampered(src: Path, dst: Path, how: str) -> Path:
    """A copy of the export `src` whose model.safetensors is changed `how`."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    w = load_file(str(dst / "model.safetensors"))
    key = next(k for k, v in w.items() if v.dim() == 2)
    if how == "int8":
        w = {k: v.to(torch.int8) for k, v in w.items()}
    elif how == "nan":
        w[key] = w[key].clone()
        w[key][0, 0] = float("nan")
    elif how == "shape":
        w[key] = w[key][:, :-1].contiguous()
    elif how == "missing":
        del w[key]
    elif how == "extra":
        w["surplus.weight"] = torch.zeros(2)
    save_file(w, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("how, expected", [
    ("int8", "holds int8, the model float32"),
    ("nan", "holds 1 NaN or infinite value(s)"),
    ("shape", "has shape"),
    ("missing", "1 tensor(s) missing"),
    ("extra", "1 tensor(s) the model lacks (e.g. 'surplus.weight')"),
])
def test_exported_weights_are_checked_at_load(gpt, tmp_path, monkeypatch, capsys, how, expected):
    pytest.importorskip("safetensors")
    tampered(gpt / "exp", tmp_path / "bad", how)
    monkeypatch.chdir(tmp_path)
    refused(tmp_path, capsys, generate("checkpoint=bad", "prompt=hi"), "checkpoint '", "model.safetensors",
            expected)


def _hub_cache(cache: Path, repo_id: str, folder: Path) -> Path:
    """huggingface_hub's layout: snapshots/<commit>/<file> (plain copies here) and refs/main."""
    import shutil

    repo = cache / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return repo


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    cache = tmp_path / "hf"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    return cache


@pytest.mark.parametrize("spec, expected", [
    ("hf://" + "o" * 3000 + "/name", "hf://OWNER/NAME[@REVISION][/PATH]"),
    ("hf://me/tiny@..", "hf://OWNER/NAME[@REVISION][/PATH]"),
    ("hf://me/tiny@a..b", "hf://OWNER/NAME[@REVISION][/PATH]"),
    ("hf://me/tiny@.hidden", "hf://OWNER/NAME[@REVISION][/PATH]"),
])
def test_hub_references_that_are_not_names_are_one_line(hub_cache, capsys, spec, expected):
    refused(hub_cache.parent, capsys, generate(f"checkpoint={spec}", "prompt=hi"), expected)


def test_a_cache_ref_leading_outside_the_cache_is_refused(gpt, hub_cache, capsys):
    import shutil

    repo = _hub_cache(hub_cache, "me/tiny", gpt / "exp")
    shutil.copytree(gpt / "exp", hub_cache.parent / "elsewhere" / "snap")
    (repo / "refs" / "main").write_text("../../../elsewhere/snap")  # a hand-edited ref
    refused(hub_cache.parent, capsys, generate("checkpoint=hf://me/tiny", "prompt=hi"), "outside the Hugging Face cache")
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT / "model.safetensors").unlink()
    (repo / "snapshots" / COMMIT / "model.safetensors").symlink_to(hub_cache.parent / "elsewhere/snap/model.safetensors")
    refused(hub_cache.parent, capsys, generate("checkpoint=hf://me/tiny", "prompt=hi"), "outside the Hugging Face cache")


# ---- generate: prompt, stdout, loop counts -----------------------------------------------------------

def test_generate_refuses_a_prompt_that_is_not_utf8(gpt, capsys):
    refused(gpt, capsys, generate("checkpoint=gpt", "prompt=ab" + b"\xff".decode("utf-8", "surrogateescape")),
            "prompt is not UTF-8 text (byte 0xff at character 2)")


def test_generate_num_rounds_beyond_reason_is_refused_before_sampling(gpt, capsys):
    refused(gpt, capsys, generate("checkpoint=gpt", "prompt=hi", "num_rounds=100000000"),
            "1,000,000,000 block calls for the generation", "refused; lower num_rounds")


def test_generate_into_a_closed_pipe_is_one_line(gpt):
    p = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *generate("checkpoint=gpt", "prompt=hello",
                                                                               "max_new_tokens=20", "stop_at_eot=false")],
                         cwd=gpt, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader goes away (`| head -c 0`)
    err = p.stderr.read()
    assert p.wait(timeout=120) == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "a pipe whose reader has gone" in lines[0], err


def test_generate_past_the_file_size_limit_is_one_line(gpt):
    with open(gpt / "text.out", "w") as out:
        code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (3, 3)); "
                "from hrm_deeploop.cli import main; sys.exit(main(sys.argv[1:]))")
        p = subprocess.run([sys.executable, "-c", code, *generate("checkpoint=gpt", "prompt=hello", "stop_at_eot=false")],
                           cwd=gpt, env=ENV, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120)
    one_line(p, "cannot write the text to stdout", "EFBIG")


def test_export_past_the_file_size_limit_is_one_line(gpt):
    p = limited(gpt, ["export", "checkpoint=gpt", "output_dir=exp_big"], 10_000)
    one_line(p, "File too large (EFBIG); nothing was published")
    assert not (gpt / "exp_big").exists() and not list(gpt.glob(".exp_big*"))


# ---- training loop counts, and signals -----------------------------------------------------------------

TRM = ["train", "model=trm_tiny", "data_dir=ds", "output_dir=run", "logger=none", "device=cpu",
       "train.global_batch_size=8", "model.puzzle_emb_ndim=0", "train.progress=false"]


def test_training_that_loops_a_billion_cycles_is_refused_by_its_time(sudoku_set, tmp_path, monkeypatch, capsys):  # noqa: F811
    import shutil

    shutil.copytree(sudoku_set, tmp_path / "ds")
    monkeypatch.chdir(tmp_path)
    refused(tmp_path, capsys, [*TRM, "model.num_h_cycles=1000000000"], "num_h_cycles=1000000000",
            "block calls per step", "refused; lower the cycle or layer counts")


def test_a_held_signal_not_polled_within_its_grace_is_raised():
    """`deferred(grace)`: the first SIGTERM is held; a step that never returns to the poll is stopped anyway."""
    from hrm_deeploop import interrupts

    with interrupts.handled():
        t0 = time.monotonic()
        with pytest.raises(interrupts.Interrupted) as e:
            with interrupts.deferred(lambda: 0.3) as pending:
                os.kill(os.getpid(), signal.SIGTERM)
                while time.monotonic() - t0 < 20:  # a step of a million cycles
                    pass
        assert e.value.signum == signal.SIGTERM and time.monotonic() - t0 < 5
        with interrupts.deferred(lambda: 0.3) as pending:  # polled in time: held, not raised
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert pending() == signal.SIGTERM
            time.sleep(0.6)


@pytest.mark.slow
def test_sigterm_stops_a_million_cycle_training_within_seconds(sudoku_set, tmp_path):  # noqa: F811
    import shutil

    shutil.copytree(sudoku_set, tmp_path / "ds")
    p = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *TRM, "model.num_h_cycles=1000000"],
                         cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    note = p.stderr.readline()
    assert "note: train: model=trm" in note and "block calls per step: at least" in note, note
    time.sleep(2)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert time.monotonic() - t0 < 20 and p.returncode == 143, err  # the grace is 10 s before the first step
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "hrm-deeploop train: interrupted by SIGTERM" in lines[0], err  # in the step or before


def test_a_collective_that_lost_its_peer_is_one_line_per_rank(monkeypatch):
    """Under torchrun (WORLD_SIZE > 1) gloo's error when another rank dies becomes one line naming this rank and
    the peer's address (measured on two gloo ranks, one kill -9ed: docs/robustness.md); anything else stays."""
    import torch.distributed  # noqa: F401  (imported, as under any trainer)

    from hrm_deeploop.cli import lost_peer

    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:42386: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")
    assert lost_peer(gloo) is None  # a single process: not a distributed failure
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert lost_peer(gloo) == ("rank 0 of 2: lost its peer at 127.0.0.1:42386 in a collective (another rank died: "
                               "see its own output); this rank stops too")
    assert lost_peer(RuntimeError("shape mismatch")) is None  # a bug stays a traceback


# ---- ttt: the whole challenges file checked before anything is written (issue 60) ------------------

_GOOD = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}


@pytest.mark.parametrize("challenges, expected", [
    ({"/abs/victim": _GOOD}, "task name '/abs/victim' is not a plain name"),
    ({"../../victim2": _GOOD}, "task name '../../victim2' is not a plain name"),
    ({"": _GOOD}, "task name '' is not a plain name"),
    ({"a b": _GOOD}, "task name 'a b' is not a plain name"),
    ({"a": {"train": [], "test": _GOOD["test"]}}, "task a: 'train' is empty"),
    ({"a": {"train": _GOOD["train"], "test": []}}, "task a: 'test' is empty"),
    ({"a": {"train": [{"input": [[1]]}], "test": _GOOD["test"]}}, "train[0] has no 'output'"),
    ({"a": {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": _GOOD["test"]}}, "rows of unequal length"),
    ({"a": {"train": [{"input": [[10]], "output": [[1]]}], "test": _GOOD["test"]}}, "value 10 at (0,0) is outside 0..9"),
    ({"a": {"train": [{"input": [[-1]], "output": [[1]]}], "test": _GOOD["test"]}}, "value -1 at (0,0)"),
    ({"a": {"train": [{"input": [["1"]], "output": [[1]]}], "test": _GOOD["test"]}}, "value '1' at (0,0) is not an integer"),
    ({"a": {"train": [{"input": [[0] * 31], "output": [[1]]}], "test": _GOOD["test"]}}, "a side is over 30"),
    ({"a": {"train": _GOOD["train"], "test": [{"input": []}]}}, "test[0].input: empty grid"),
])
def test_ttt_refuses_a_bad_challenges_file_before_writing(tmp_path, capsys, challenges, expected):
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "log.txt").write_text("keep me")
    text = json.dumps(challenges).replace("/abs/victim", str(tmp_path / "victim"))
    (tmp_path / "c.json").write_text(text)
    expected = expected.replace("/abs/victim", str(tmp_path / "victim"))
    refused(tmp_path, capsys, ["ttt", "checkpoint=run", "challenges=c.json", "output_dir=out"], "c.json", expected)
    assert (tmp_path / "victim" / "log.txt").read_text() == "keep me"


def test_ttt_leave_one_out_names_checked_before_writing(tmp_path, capsys):
    """An id of 200 characters is a plain name, but its pseudo-task `<id>-loo0` is not: refused
    before anything is written (it used to fail in the worker, the task `failed`, exit 0)."""
    two = {"train": _GOOD["train"] * 2, "test": _GOOD["test"]}
    (tmp_path / "c.json").write_text(json.dumps({"a" * 200: two}))
    refused(tmp_path, capsys, ["ttt", "checkpoint=run", "challenges=c.json", "output_dir=out", "leave_one_out=true"],
            "c.json", "leave_one_out=true", f"'{'a' * 200}-loo0'")


@pytest.mark.parametrize("checkpoint, expected", [
    ("nowhere", "'nowhere' does not exist"),
    ("hf://me/nosuch", "has no folder"),
    ("hf://../x", "a Hub checkpoint is hf://OWNER/NAME"),
])
def test_ttt_a_checkpoint_that_is_not_there_is_named_as_such_under_strict(tmp_path, capsys, monkeypatch, checkpoint,
                                                                         expected):
    """protocol=strict (the default) used to answer a missing checkpoint with `protocol=strict: cannot
    tell which tasks X was trained on (...); protocol=transductive runs it`, which it does not: the
    checkpoint is read before the protocol asks its record."""
    monkeypatch.setenv("HRM_DEEPLOOP_HUB_DIR", str(tmp_path / "hub"))
    (tmp_path / "hub").mkdir()
    (tmp_path / "c.json").write_text(json.dumps({"a": _GOOD}))
    line = refused(tmp_path, capsys, ["ttt", f"checkpoint={checkpoint}", "challenges=c.json", "output_dir=out"],
                   expected)
    assert "protocol" not in line, line


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-big"])
def test_ttt_challenges_that_is_no_regular_file_or_too_big(tmp_path, capsys, monkeypatch, kind):
    """A FIFO is never opened for a blocking read (no hang), /dev/zero never read (no MemoryError)."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "c.json")
    elif kind == "dev-zero":
        (tmp_path / "c.json").symlink_to("/dev/zero")
    else:
        from hrm_deeploop.pertask import challenges

        monkeypatch.setattr(challenges, "MAX_CHALLENGES_BYTES", 100)
        (tmp_path / "c.json").write_text(json.dumps({"a": _GOOD, "b": _GOOD}))
    expected = "more than the 100 a challenges file may be" if kind == "too-big" else "is not a regular file"
    refused(tmp_path, capsys, ["ttt", "checkpoint=run", "challenges=c.json", "output_dir=out"], expected)


def test_an_empty_checkpoint_file_says_it_is_empty(tmp_path):
    """A 0-byte step file (a copy cut short) ended `... is corrupt or unreadable: EOFError: ` (issue 61's audit)."""
    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.errors import UserError

    (tmp_path / "step_1.pt").write_bytes(b"")
    with pytest.raises(UserError) as e:
        ckpt.load(tmp_path / "step_1.pt")
    assert str(e.value).endswith("is corrupt or unreadable: it is empty (0 bytes)"), str(e.value)


def test_ttt_solutions_for_none_of_the_tasks_refused_before_the_first_task(tmp_path, capsys):
    """A solutions file that shares no task with the challenges (the wrong file) was found out only at the
    end, every task trained, `0.00% over the 0 tasks submitted` (issue 61's audit)."""
    (tmp_path / "c.json").write_text(json.dumps({"a": _GOOD, "b": _GOOD}))
    (tmp_path / "s.json").write_text(json.dumps({"x": [[[1]]], "y": [[[2]]]}))
    refused(tmp_path, capsys, ["ttt", "checkpoint=run", "challenges=c.json", "output_dir=out", "solutions=s.json"],
            "solutions=s.json", "none of its 2 task(s)", "e.g. x")


@pytest.mark.parametrize("text, expected", [
    (None, "challenges 'c.json' does not exist"),
    ('{"a": [', "challenges 'c.json': invalid JSON"),
    ("{}", "c.json: holds no tasks"),
])
def test_evaluate_reads_its_challenges_before_the_checkpoint_and_the_predictions(tmp_path, capsys, text, expected):
    """A mistyped or malformed `challenges=` was found only after every test copy was predicted (the vote
    reads it), and the whole prediction was thrown away (new-user audit: 11 s of 13 on a small run). It is
    read with the other checks before the checkpoint: here a checkpoint that is not one is never reached."""
    from arc_data.arc.build import BuildConfig, build

    tasks = synthetic_tasks()["training"]
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", {k: tasks[k] for k in ("tr00", "tr01")})
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "ds"), num_aug=1, seed=0, progress=False))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "step_1.pt").write_bytes(b"not a checkpoint: never read")
    if text is not None:
        (tmp_path / "c.json").write_text(text)
    refused(tmp_path, capsys, ["evaluate", "checkpoint=run", "data_dir=ds", "output_dir=out", "challenges=c.json"],
            expected)


def test_eval_gpt_on_shards_without_meta_names_a_switch_that_works(gpt, tmp_path, capsys):
    """The line said `pass tokenizer_id=None`: on the command line that is the string 'None', which
    skips nothing (the same line again; new-user audit). The switch it names now does what it says."""
    import shutil

    (tmp_path / "loose").mkdir()
    shutil.copy(gpt / "val_000000.bin", tmp_path / "loose" / "val_000000.bin")
    args = ["eval-gpt", f"checkpoint={gpt / 'gpt'}", "data=loose/val_000000.bin", "output_dir=ev"]
    line = refused(tmp_path, capsys, args, "loose/meta.json is missing", "tokenizer_id=null (eval-gpt)")
    switch = line.split("or skip the check: ")[1].split(" (eval-gpt)")[0]
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main([*args, switch]) == 0
    finally:
        os.chdir(old)
    assert (tmp_path / "ev" / "eval.json").is_file()


def test_evaluate_all_checkpoints_on_a_puzzle_dataset_is_one_line(sudoku_set, tmp_path, capsys):  # noqa: F811
    """The curve is ARC's pass@K: on a Sudoku build every step was evaluated into OUT/step_N, then a
    traceback (FileNotFoundError: step_N/pass_at_k.json) left the first step's folder (new-user audit).
    Refused before any checkpoint is read (here a step file that is not one)."""
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "step_1.pt").write_bytes(b"not a checkpoint: never read")
    refused(tmp_path, capsys, ["evaluate", "checkpoint=run", f"data_dir={sudoku_set}", "output_dir=out",
                               "all_checkpoints=true", "progress=false"],
            "all_checkpoints=true draws ARC's pass@K", "holds sudoku")
