"""`hrm-deeploop ttt` (hrm_deeploop/pertask): one copy of a pretrained tiny HRM per unseen task, the
merged submission, the strict protocol's refusal, resume after a kill, a budget that runs out."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import plan
from tests.arc_synth import write_kaggle
from tests.hrm_helpers import TINY_OVERRIDES

REPO = Path(__file__).resolve().parents[1]
TTT = ["steps=2", "batch=4", "num_aug=1", "workers=1", "threads=1", "device=cpu", "progress=false",
       "train_overrides=['optim.warmup_steps=1']", "eval_overrides=['global_batch_size=4']"]


def _tasks(seed: int, n: int, prefix: str) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    tasks = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = [{"input": (g := rng.integers(0, 10, size=(2, 2))).tolist(), "output": perm[g].tolist()}
                 for _ in range(3)]
        tasks[f"{prefix}{i:02d}"] = {"train": pairs[:2], "test": pairs[2:]}
    return tasks


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny HRM pretrained on three tasks; two unseen tasks as a Kaggle challenges/solutions pair."""
    root = tmp_path_factory.mktemp("ttt")
    pre = write_kaggle(root / "raw", "arc-agi_training", _tasks(0, 3, "pre"), solutions=True)
    build(BuildConfig(sources=[str(pre)], output_dir=str(root / "pre"), num_aug=1, seed=0, progress=False))
    rc = run_subcommand("train", [*TINY_OVERRIDES, "train.global_batch_size=4", "optim.warmup_steps=1",
                                  "model.halt_max_steps=1", f"data_dir={root / 'pre'}", f"output_dir={root / 'run'}",
                                  "train.max_steps=2"])
    assert rc == 0
    unseen = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(1, 2, "new"), solutions=True)
    return root, unseen


def _ttt(root, chal, out, *extra) -> int:
    return run_subcommand("ttt", [f"checkpoint={root / 'run'}", f"challenges={chal}", f"output_dir={out}", *TTT,
                                  *extra])


def test_every_task_trained_alone_and_submitted(pretrained, tmp_path, capsys):
    root, chal = pretrained
    sol = str(chal).replace("_challenges", "_solutions")
    assert _ttt(root, chal, tmp_path / "o", f"solutions={sol}") == 0
    out = capsys.readouterr().out
    sub = json.loads((tmp_path / "o" / "submission.json").read_text())
    assert sorted(sub) == ["new00", "new01"] and all(len(v) == 1 and set(v[0]) == {"attempt_1", "attempt_2"}
                                                     for v in sub.values())
    tasks = plan.load_challenges(chal)
    for tid in sub:
        r = plan.finished(tmp_path / "o", tid)
        assert r["status"] in ("trained", "trained-no-grid") and r["steps"] == 2 and r["attempts"] == sub[tid]
        assert not (tmp_path / "o" / "tasks" / tid / "work").exists()  # keep_work=false
    summary = json.loads((tmp_path / "o" / "ttt_summary.json").read_text())
    assert summary["protocol"] == "strict" and sum(summary["status"].values()) == 2
    assert set(summary["status"]) <= {"trained", "trained-no-grid"}
    assert summary["fallback_attempts"] == sum(plan.finished(tmp_path / "o", t)["fallback_attempts"] for t in sub)
    assert 0 <= summary["overhead_fraction"] < 1 and "pass@2 (ARC Prize rule)" in summary
    assert "scored under protocol strict" in out and "pass@2 (ARC Prize rule)" in out and "[2/2]" in out
    # both scoring rules, on the same predictions: attempts are each rule's top two ranked candidates
    solutions = json.loads(Path(sol).read_text())
    sub_poe = json.loads((tmp_path / "o" / "submission_poe.json").read_text())
    for tid in sub:
        r = plan.finished(tmp_path / "o", tid)
        for sfx, s in (("", sub), ("_poe", sub_poe)):
            ranked = r["ranked" + sfx][0]
            valid = [g for g in ranked if plan.is_grid(g)] + [tasks[tid]["test"][0]["input"]] * 2  # the fallback fills in
            assert [s[tid][0]["attempt_1"], s[tid][0]["attempt_2"]] == valid[:2]
            assert sorted(map(str, ranked)) == sorted(map(str, r["ranked"][0]))
            assert [[0]] not in (s[tid][0]["attempt_1"], s[tid][0]["attempt_2"]) or [[0]] in ranked
    for rule, sfx in (("count-first", ""), ("poe", "_poe")):
        ranked = json.loads((tmp_path / "o" / f"ranked{sfx}.json").read_text())
        expect = {k: 100 * np.mean([solutions[t][0] in ranked[t][0][:k] for t in sub]) for k in (1, 2, 10)}
        assert summary["scores"][rule] == {"pass@2 (ARC Prize rule)": pytest.approx(expect[2]),
                                           **{f"pass@{k}": pytest.approx(v) for k, v in expect.items()}}

    # a rerun finds everything finished and recomputes nothing
    stamps = {t: (tmp_path / "o" / "tasks" / t / "result.json").stat().st_mtime_ns for t in sub}
    assert _ttt(root, chal, tmp_path / "o") == 0
    assert "2 already finished, 0 to run" in capsys.readouterr().out
    assert stamps == {t: (tmp_path / "o" / "tasks" / t / "result.json").stat().st_mtime_ns for t in sub}


def test_strict_protocol_refuses_a_task_seen_in_pretraining(pretrained, tmp_path, capsys):
    root, _ = pretrained
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(0, 1, "pre") | _tasks(1, 1, "new"),
                        solutions=False)
    assert _ttt(root, chal, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "protocol=strict" in err and "pre00" in err and not (tmp_path / "o").exists()
    assert _ttt(root, chal, tmp_path / "o", "protocol=transductive", "time_budget=0") == 0
    assert json.loads((tmp_path / "o" / "ttt_summary.json").read_text())["protocol"] == "transductive"


def test_budget_spent_every_task_falls_back_and_the_submission_is_complete(pretrained, tmp_path):
    root, chal = pretrained
    assert _ttt(root, chal, tmp_path / "o", "time_budget=0") == 0
    sub = json.loads((tmp_path / "o" / "submission.json").read_text())
    tasks = plan.load_challenges(chal)
    assert sub == {t: plan.fallback_attempts(tasks[t]) for t in tasks}
    assert json.loads((tmp_path / "o" / "ttt_summary.json").read_text())["status"] == {"fallback": 2}


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_sigkill_mid_set_then_rerun_redoes_only_the_unfinished(pretrained, tmp_path):
    """Killed (SIGKILL, the whole process group) once the first task has finished: the rerun keeps
    that task's result untouched and finishes the other, whatever it had half-written."""
    root, chal = pretrained
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={root / 'run'}", f"challenges={chal}",
           f"output_dir={out}", *TTT, "keep_work=true"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    first = out / "tasks" / "new00" / "result.json"
    while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert first.exists()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stamp = first.stat().st_mtime_ns
    second = out / "tasks" / "new01"
    (second / "work").mkdir(parents=True, exist_ok=True)  # a half-done task's leftovers (if the kill missed it)
    (second / "work" / "junk").write_text("half-written")
    assert plan.finished(out, "new01") is None or plan.finished(out, "new01")["status"].startswith("trained")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "1 already finished, 1 to run" in r.stdout or "2 already finished" in r.stdout
    assert first.stat().st_mtime_ns == stamp
    assert plan.finished(out, "new01")["status"].startswith("trained") and not (second / "work" / "junk").exists()


def test_plan_pieces():
    assert plan.shard(list("abcdefg"), 1, 3) == ["b", "e"]
    assert plan.is_grid([[1, 2], [3, 4]]) and not any(plan.is_grid(g) for g in (
        [], [[]], [[1], [1, 2]], [[10]], [[-1]], [["1"]], [[True]], [[1.0]], [[0] * 31], [[0]] * 31))


def test_hostile_outputs_and_inputs_are_one_line_refusals(pretrained, tmp_path, capsys):
    """A folder ttt did not write, a resume with other settings, the challenges' own folder, a
    challenges file with no task or a repeated key: each refused in one line, exit 2, nothing written."""
    root, chal = pretrained
    stranger = tmp_path / "theirs"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("keep me")
    assert _ttt(root, chal, stranger, "time_budget=0") == 2
    assert "not empty and not a ttt run" in capsys.readouterr().err and (stranger / "notes.txt").read_text() == "keep me"
    assert _ttt(root, chal, tmp_path / "o", "time_budget=0") == 0
    assert _ttt(root, chal, tmp_path / "o", "time_budget=0", "num_aug=3") == 2
    assert "other num_aug" in capsys.readouterr().err
    assert _ttt(root, chal, chal.parent, "time_budget=0") == 2  # would write beside (around) its own input
    assert "contains the input" in capsys.readouterr().err
    for bad in ("{}", '{"a": {"train": [], "test": [{"input": [[1]]}]}, "a": {}}', "[" * 100000):
        f = tmp_path / "bad_challenges.json"
        f.write_text(bad)
        assert _ttt(root, f, tmp_path / "b", "time_budget=0") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "bad_challenges.json" in err and "Traceback" not in err
        assert not (tmp_path / "b").exists()


def test_leave_one_out_pseudo_tasks(pretrained, tmp_path):
    """leave_one_out=true: each demonstration once the target of the others, built and trained
    beside the task under its own rows, its held-out demonstration scored by both rules."""
    assert plan.leave_one_out("t", {"train": [{"input": [[1]]}], "test": []}) == {}
    demos = [{"input": [[i]], "output": [[i + 1]]} for i in range(3)]
    loo = plan.leave_one_out("t", {"train": demos, "test": [{"input": [[9]]}]})
    assert list(loo) == ["t-loo0", "t-loo1", "t-loo2"]
    assert loo["t-loo1"] == {"train": [demos[0], demos[2]], "test": [demos[1]]}

    root, chal = pretrained
    out = tmp_path / "o"
    assert _ttt(root, chal, out, "leave_one_out=true", "keep_work=true") == 0
    r = plan.finished(out, "new00")
    built = json.loads((out / "tasks" / "new00" / "work" / "data" / "identifiers.json").read_text())
    assert {"new00", "new00-loo0", "new00-loo1"} <= set(built)
    tasks_json = json.loads((out / "tasks" / "new00" / "work" / "eval" / "tasks.json").read_text())
    solved = [tasks_json["tasks"][f"new00-loo{i}"]["correct"]["2"] for i in range(2)]
    assert tasks_json["tasks"]["new00"]["correct"]["2"] is None  # the real task: unlabelled, never scored
    assert r["leave_one_out"]["pseudo_tasks"] == 2
    assert r["leave_one_out"]["count-first"]["pass@2"] == pytest.approx(100 * np.mean(solved))
    assert set(r["leave_one_out"]) == {"pseudo_tasks", "count-first", "poe"}
    summary = json.loads((out / "ttt_summary.json").read_text())
    assert set(summary["leave_one_out"]) == {"count-first", "poe"}
    assert _ttt(root, chal, out) == 2  # a resume without the option: other settings, refused


@pytest.mark.slow  # .ci/run runs it after the suite (the default suite under 10 minutes)
def test_a_loopvit_checkpoint_each_task_trained_on_its_canvas_views(pretrained, tmp_path):
    """A train-vit checkpoint: each task's copy by train-vit init_from (a fresh task table), its
    copies predicted through `passes` random canvas views each, voted count-first only."""
    root, chal = pretrained
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "train.progress=false", "optim.warmup_steps=1",
                                        "train.global_batch_size=4", "train.max_steps=2", f"data_dir={root / 'pre'}",
                                        f"output_dir={tmp_path / 'vit'}"]) == 0
    out = tmp_path / "o"
    sol = str(chal).replace("_challenges", "_solutions")
    assert run_subcommand("ttt", [f"checkpoint={tmp_path / 'vit'}", f"challenges={chal}", f"output_dir={out}", *TTT,
                                  "passes=3", "keep_work=true", f"solutions={sol}"]) == 0
    summary = json.loads((out / "ttt_summary.json").read_text())
    assert summary["model"] == "loopvit" and sum(summary["status"].values()) == 2
    assert set(summary["status"]) <= {"trained", "trained-no-grid"}
    assert list(summary["scores"]) == ["count-first", "poe"]  # both rules on the same canvas predictions
    sub_poe = json.loads((out / "submission_poe.json").read_text())
    assert set(sub_poe) == {"new00", "new01"} and all(len(t[0]) == 2 for t in sub_poe.values())
    for tid in ("new00", "new01"):
        work = out / "tasks" / tid / "work"
        assert "a fresh task table" in (out / "tasks" / tid / "log.txt").read_text()
        assert json.loads((work / "run" / "summary.json").read_text())["model"] == "loopvit"
        with np.load(work / "eval" / "predictions.npz") as z:
            assert len(z["q_halt"]) == 2 * 3  # (the test input + num_aug=1 copy) x 3 passes
        assert plan.finished(out, tid)["status"].startswith("trained")


def test_an_official_loopvit_file_is_trained_per_task(pretrained, tmp_path):
    """An official LoopViT `.pt` (no run beside it): ttt recognises it (`families.of_checkpoint`), each task's
    copy starts from it by train-vit init_from (the architecture from the file, a fresh task
    table); strict refuses it (nothing says what it was trained on), transductive runs it."""
    from tests.test_train_vit import _official_file

    root, chal = pretrained
    _official_file(tmp_path / "loop_vit_base.pt", "hybrid", num_tasks=400)
    from hrm_deeploop.families import of_checkpoint

    assert of_checkpoint(str(tmp_path / "loop_vit_base.pt")).official_loop
    args = [f"checkpoint={tmp_path / 'loop_vit_base.pt'}", f"challenges={chal}", *TTT, "passes=2"]
    assert run_subcommand("ttt", [*args, f"output_dir={tmp_path / 's'}"]) == 2
    out = tmp_path / "o"
    assert run_subcommand("ttt", [*args, f"output_dir={out}", "protocol=transductive", "keep_work=true"]) == 0
    summary = json.loads((out / "ttt_summary.json").read_text())
    assert summary["model"] == "loopvit" and sum(summary["status"].values()) == 2
    assert set(summary["status"]) <= {"trained", "trained-no-grid"}
    for tid in ("new00", "new01"):
        assert json.loads((out / "tasks" / tid / "work" / "run" / "summary.json").read_text())["model"] == "loopvit"


def _vit_with_dropout(root, tmp_path):
    """A tiny LoopViT with dropout: torch's generator is on the copies' training path."""
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1", "train.progress=false",
                                        "optim.warmup_steps=1", "train.global_batch_size=4", "train.max_steps=2",
                                        f"data_dir={root / 'pre'}", f"output_dir={tmp_path / 'vit'}"]) == 0
    return tmp_path / "vit"


STARTS = {"hrm": lambda root, tmp_path: root / "run", "loopvit": _vit_with_dropout}  # the checkpoint each run starts from


@pytest.mark.slow
@pytest.mark.parametrize("start", list(STARTS.values()), ids=list(STARTS))
def test_the_same_command_gives_the_same_submission(pretrained, tmp_path, start):
    """views=build is reproducible: every generator a task draws from is seeded (the build's views,
    the trainer's batches, dropout and canvas views, evaluate's passes), so two runs of the same
    command write the same submissions, byte for byte (issue 61)."""
    root, chal = pretrained
    checkpoint = start(root, tmp_path)
    for name in ("a", "b"):
        assert run_subcommand("ttt", [f"checkpoint={checkpoint}", f"challenges={chal}",
                                      f"output_dir={tmp_path / name}", *TTT, "passes=2"]) == 0
    for f in ("submission.json", "submission_poe.json", "ranked.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_an_interrupted_run_says_what_is_kept_and_how_to_go_on(pretrained, tmp_path, capsys, monkeypatch):
    """Ctrl-C (or SIGTERM) during `ttt` printed `hrm-deeploop ttt: interrupted` and no more: the line now
    counts the finished tasks, which the same command does not run again, and says so. Counted from the
    results on disk: 0 of 2 in a fresh folder, 2 of 2 after a run that finished."""
    from hrm_deeploop.pertask import run

    root, chal = pretrained
    real = run.any_shard

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    for out, done in ((tmp_path / "fresh", 0), (tmp_path / "ran", 2)):
        if done:
            assert _ttt(root, chal, out) == 0  # both tasks trained (two steps each)
        monkeypatch.setattr(run, "any_shard", interrupted)
        capsys.readouterr()
        assert _ttt(root, chal, out) == 130
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (f"hrm-deeploop ttt: interrupted: {done} of 2 task(s) finished and kept; the same command "
                           "goes on from there"), err
        monkeypatch.setattr(run, "any_shard", real)
    assert _ttt(root, chal, tmp_path / "fresh", "time_budget=0") == 0  # the folder is free again
