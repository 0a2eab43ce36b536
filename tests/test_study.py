"""`hrm-deeploop study`: cells as real trainer processes (local pool, submitit's local executor), skip
of finished runs, the aggregate tables, the Mann-Whitney U test against scipy, bad input."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from hrm_deeploop.cli import main, run_subcommand
from hrm_deeploop.reports.stats import mann_whitney_u, spread
from tests.gpt_helpers import write_gpt2_shards

GPT_BASE = ("model:gpt_tiny,model.hidden_size:32,model.seq_len:32,model.mlp_multiple:16,device:cpu,logger:none,"
            "train.progress:false,train.micro_batch_size:2,train.global_batch_tokens:64,optim.warmup_steps:1,"
            "data.unigram_tokens:100000,train.max_steps:3")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_gpt2_shards(tmp_path_factory.mktemp("shards"))


def _gpt_base(shards) -> str:
    return "base={" + GPT_BASE + f",data.train:'{shards}/train_*.bin',data.val:{shards}/val_000000.bin" + "}"


def _rows(out) -> list[dict[str, str]]:
    with open(out / "study.csv") as f:
        return list(csv.DictReader(f))


def test_local_pool_runs_cells_skips_finished_and_aggregates(shards, tmp_path, capsys):
    out = tmp_path / "study"
    args = ["study", "trainer=train-gpt", f"output_dir={out}", _gpt_base(shards),
            "grid={scaling:[baseline,deeploop]}", "seeds=[3]", "jobs=2"]
    assert main(args) == 0
    for cell in ("scaling-baseline", "scaling-deeploop"):
        summary = json.loads((out / cell / "s3" / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 3 and summary["seed"] == 3
        assert summary["scaling"]["scheme"] == cell.split("-")[1]
    rows = _rows(out)
    assert [(r["scaling"], r["seed"], r["status"], r["metric"]) for r in rows] == [
        ("baseline", "3", "finished", "final_val_loss"), ("deeploop", "3", "finished", "final_val_loss")]
    vals = {r["scaling"]: float(r["value"]) for r in rows}
    assert vals["baseline"] == json.loads((out / "scaling-baseline" / "s3" / "summary.json").read_text())["final_val_loss"]
    md = (out / "study.md").read_text()
    assert f"| baseline | 1/1 | {vals['baseline']:.4g} | 0 | {vals['baseline']:.4g} | {vals['baseline']:.4g} |" in md
    u, p = mann_whitney_u([vals["deeploop"]], [vals["baseline"]])
    assert f"| deeploop | 1 | 1 | {vals['deeploop'] - vals['baseline']:.4g} | {u:g} | {p:.3g} |" in md
    assert (out / "study.png").stat().st_size > 0
    capsys.readouterr()
    logs = sorted(p.name for p in (out / "logs").iterdir())
    mtime = (out / "scaling-baseline" / "s3" / "summary.json").stat().st_mtime_ns
    assert main(args) == 0  # again: every run is finished, nothing starts
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 2 and "0 to run" in printed
    assert sorted(p.name for p in (out / "logs").iterdir()) == logs
    assert (out / "scaling-baseline" / "s3" / "summary.json").stat().st_mtime_ns == mtime


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_submitit_local_executor_runs_two_hrm_cells(tmp_path):
    pytest.importorskip("submitit")
    data = tmp_path / "sudoku"
    assert run_subcommand("generate-puzzles", ["task=sudoku", "size=4", "count_train=24", "count_test=8",
                                               f"output_dir={tmp_path / 'raw'}", "progress=false"]) == 0
    assert run_subcommand("build-puzzles", ["task=sudoku", f"source={tmp_path / 'raw'}", "num_aug=0",
                                            f"output_dir={data}", "progress=false"]) == 0
    out = tmp_path / "study"
    base = ("base={experiment:hrm_tiny_cpu,model.hidden_size:32,model.num_heads:2,model.num_h_layers:1,"
            f"model.num_l_layers:1,model.halt_max_steps:2,train.global_batch_size:8,train.max_steps:2,eval.every:2,"
            f"train.progress:false,data_dir:{data}" + "}")
    assert main(["study", "trainer=train", f"output_dir={out}", base, "grid={scaling:[baseline,deeploop]}",
                 "launcher=submitit", "submitit.cluster=local", "submitit.timeout_min=5"]) == 0
    rows = _rows(out)
    assert [(r["scaling"], r["status"], r["metric"]) for r in rows] == [
        ("baseline", "finished", "last_eval.eval/exact_accuracy"), ("deeploop", "finished", "last_eval.eval/exact_accuracy")]
    summary = json.loads((out / "scaling-deeploop" / "s0" / "summary.json").read_text())
    assert summary["model"] == "hrm" and summary["scaling"]["scheme"] == "deeploop" and summary["steps"] == 2
    assert len(list((out / "submitit").glob("*/*_result.pkl"))) == 2  # submitit's own record of each job
    assert not (out / "submitit" / "%j").exists()  # the empty folder submitit's local controller made (audit)


def test_mann_whitney_u_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    cases = [([0.74, 0.56, 0.9, 0.8, 0.71], [0.65, 0.14, 0.3, 0.5, 0.6]),  # exact, no ties
             ([1, 2, 2, 3], [2, 3, 4, 4, 5]),  # ties: normal approximation
             (list(rng.normal(size=9)), list(rng.normal(0.5, size=12))),  # both > 8: normal approximation
             ([1.0], [2.0, 3.0]), ([3.0, 3.0], [3.0, 3.0])]
    for x, y in cases:
        ref = stats.mannwhitneyu(x, y)
        u, p = mann_whitney_u(x, y)
        assert u == pytest.approx(float(ref.statistic)) and p == pytest.approx(float(ref.pvalue), rel=1e-9, abs=1e-12), (x, y)


def test_bad_study_input_is_one_line_and_writes_nothing(shards, tmp_path, capsys):
    out = tmp_path / "study"
    cases = [(["grid={optim.lrr:[1e-3]}"], "run optim.lrr-0.001/s0 (train-gpt): unknown config key 'optim.lrr'"),
             (["grid={seed:[1,2]}"], "grid"),
             (["grid={scaling:[]}"], "grid.scaling"),
             (["grid={scaling:[baseline]}", "compare=optim.lr"], "compare"),
             (["base={output_dir:x}"], "base"),
             (["seeds=[1,1]"], "seeds"),
             (["launcher=slurm"], "launcher")]
    for extra, culprit in cases:
        assert main(["study", "trainer=train-gpt", f"output_dir={out}", _gpt_base(shards), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and culprit in err[0], (extra, err)
        assert not out.exists()


def test_multi_process_runs_are_torchrun_with_c10d_rendezvous():
    from hrm_deeploop.study import Launch

    one = Launch("train", ("seed=0",), threads=1, nproc_per_node=1)
    assert one.argv()[1:] == ["-m", "hrm_deeploop.cli", "train", "seed=0"]
    local = Launch("train-gpt", ("seed=1",), threads=2, nproc_per_node=4)
    assert local.argv()[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "-m"]
    assert local.environ()["OMP_NUM_THREADS"] == "2"
    multi = Launch("train-gpt", ("seed=1",), threads=1, nproc_per_node=8, nodes=2, rdzv_port=29555)
    argv = multi.argv(master="node017", job_id="4242")
    assert argv[1:9] == ["-m", "torch.distributed.run", "--nnodes=2", "--rdzv-backend=c10d",
                         "--rdzv-endpoint=node017:29555", "--rdzv-id=4242", "--nproc-per-node=8", "-m"]
    assert argv[9:] == ["hrm_deeploop.cli", "train-gpt", "seed=1"]


def test_spread_is_mean_and_sample_std():
    import statistics

    xs = [0.845, 0.275, 0.5, 0.61]
    sp = spread(xs)
    assert (sp.n, sp.min, sp.max) == (4, 0.275, 0.845)
    assert sp.mean == pytest.approx(statistics.mean(xs)) and sp.std == pytest.approx(statistics.stdev(xs))
    assert spread([2.0]).std == 0.0 and spread([]) is None


def test_accuracies_are_percent_in_table_and_figure_and_the_axis_never_goes_negative(tmp_path):
    """All-zero accuracies: the y-axis starts at 0 (not below), the table and the figure say percent."""
    from hrm_deeploop.reports.study import shown, study_figure, write_reports
    from hrm_deeploop.study import StudyConfig
    from hrm_deeploop.training.sweep import pyplot

    cfg = StudyConfig(trainer="train", grid={"scaling": ["baseline", "deeploop"]}, seeds=[0, 1])
    rows = [{"cell": f"scaling-{s}", "scaling": s, "seed": seed, "status": "finished", "steps": 5,
             "metric": "last_eval.eval/exact_accuracy", "value": v, "wall_time_s": 1.0, "run_dir": "x", "failure": ""}
            for s, v in (("baseline", 0.0), ("deeploop", 0.0)) for seed in (0, 1)]
    fig, ax = study_figure(cfg, shown(rows, cfg.metrics[0]))
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] == 100 and ax.get_ylabel() == "eval/exact_accuracy (%)"
    pyplot().close(fig)
    rows[0]["value"], rows[3]["value"] = 0.25, 0.5
    fig, ax = study_figure(cfg, shown(rows, cfg.metrics[0]))
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] == pytest.approx(54.0)  # 50% at the top, in percent
    pyplot().close(fig)
    write_reports(cfg, rows, tmp_path)
    md = (tmp_path / "study.md").read_text()
    assert "Shown in percent" in md and "| baseline | 2/2 | 12.5 |" in md  # mean of 25% and 0%
    assert "0.25" in (tmp_path / "study.csv").read_text()  # the files keep the stored fraction
    assert (tmp_path / "study.png").stat().st_size > 0


# ---- submitit settings: one check for `study` and `ttt` (training/cluster.py) ---------------------------

SUBMITIT_CASES = [("submitit.cluster=bogus", "submitit.cluster='bogus'"),
                  ("submitit.timeout_min=-1", "submitit.timeout_min=-1"),
                  ("submitit.timeout_min=0", "submitit.timeout_min=0"),
                  ("submitit.gpus_per_node=-1", "submitit.gpus_per_node=-1"),
                  ("submitit.cpus_per_task=0", "submitit.cpus_per_task=0"),
                  ("submitit.array_parallelism=0", "submitit.array_parallelism=0"),
                  ("submitit.partition='gpu #SBATCH --wrap=x'", "submitit.partition")]


@pytest.mark.parametrize("setting, culprit", SUBMITIT_CASES)
def test_bad_submitit_settings_are_one_line_for_study_and_ttt(shards, tmp_path, capsys, setting, culprit):
    """The issue's cases: `submitit.cluster=bogus` was submitit's ValueError traceback, a negative
    time limit was accepted and every shard then failed (exit 1, no line); both commands share the check."""
    out = tmp_path / "out"
    study = ["study", "trainer=train-gpt", f"output_dir={out}", _gpt_base(shards), "launcher=submitit", setting]
    ttt = ["ttt", f"checkpoint={tmp_path / 'ckpt'}", f"challenges={tmp_path / 'c.json'}", f"output_dir={out}",
           "launcher=submitit", setting]
    for argv in (study, ttt):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and culprit in err[0] and "Traceback" not in err[0], (argv, err)
        assert not out.exists()


def test_submitit_slurm_without_slurm_is_one_line_before_anything_is_written(shards, tmp_path, monkeypatch, capsys):
    """`submitit.cluster=slurm` where there is no sbatch / srun: submitit's RuntimeError traceback
    before; one line naming the key now, and the study folder is not created."""
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sbatch, no srun
    out = tmp_path / "study"
    assert main(["study", "trainer=train-gpt", f"output_dir={out}", _gpt_base(shards), "launcher=submitit",
                 "submitit.cluster=slurm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "submitit.cluster=slurm: no sbatch and srun" in err[0], err
    assert not out.exists()
    from hrm_deeploop.training.cluster import resolve

    assert resolve("auto") == "local" and resolve("debug") == "debug"


# ---- a signal stops the study within seconds (study.stop_runs, interrupts.follow_parent) -------------------

HOLDS_SIGTERM = """
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s) if len(got) < {keep} else sys.exit(7))
print("ready", flush=True)
while True:
    time.sleep(0.05)
    if got and {polite}:
        sys.exit(0)  # a trainer between two steps: it saved and leaves
"""


def _child(keep: int, polite: bool):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", HOLDS_SIGTERM.format(keep=keep, polite=polite)],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_stop_runs_escalates_from_sigterm_to_a_second_sigterm_to_sigkill():
    """The issue: a run that holds its SIGTERM (a long step or evaluation) kept the study waiting
    (10 s later it was still there). A run that leaves on the first SIGTERM gets only that one; one that
    holds it gets a second after `stop_grace` (a trainer then stops at once, unsaved); one that ignores
    both is killed; the whole stop takes about grace + last_word at most."""
    import signal
    import time

    from hrm_deeploop import study

    polite, stubborn, deaf = _child(1, True), _child(1, False), _child(99, False)
    t0 = time.monotonic()
    late = study.stop_runs([polite, stubborn, deaf], grace=1.0, last_word=1.0)
    took = time.monotonic() - t0
    assert polite.returncode == 0  # it left on the first SIGTERM, which it kept: no second one
    assert stubborn.returncode == 7  # the second SIGTERM ended it
    assert deaf.returncode == -signal.SIGKILL
    assert late == 2 and took < 1.0 + 1.0 + 3, took


def test_a_run_stops_when_its_study_is_killed(tmp_path):
    """A study killed by SIGKILL cannot stop its runs: each run watches the parent named in
    interrupts.PARENT_ENV and sends itself a SIGTERM when it is gone (the trainer then checkpoints)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from hrm_deeploop import interrupts

    marker = tmp_path / "stopped"
    child = ("import time, pathlib\nfrom hrm_deeploop import interrupts\nwith interrupts.handled():\n"
             "    try:\n        time.sleep(60)\n    except KeyboardInterrupt as e:\n"
             f"        pathlib.Path({str(marker)!r}).write_text(str(e.signum))\n")
    parent = ("import os, subprocess, sys, time\n"
              f"env = {{**os.environ, {interrupts.PARENT_ENV!r}: str(os.getpid())}}\n"
              f"subprocess.Popen([sys.executable, '-c', {child!r}], env=env)\n"
              "print('started', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(1.0)  # the child is in its `handled` block
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 15
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists() and marker.read_text() == str(int(signal.SIGTERM))


@pytest.mark.slow  # 15 s; the two tests above hold the mechanism in the default suite
def test_sigterm_stops_a_study_within_its_grace_and_starts_no_queued_seed(shards, tmp_path):
    """End to end, with `stop_grace=0` (a run that does not leave at once is stopped unsaved): exit 143
    within seconds, one line, the queued seeds never started, no temporary file left in the run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    base = _gpt_base(shards).replace("train.max_steps:3", "train.max_steps:100000,checkpoint.every:1")
    argv = [sys.executable, "-m", "hrm_deeploop.cli", "study", "trainer=train-gpt", f"output_dir={tmp_path / 'st'}",
            base, "grid={scaling:[baseline]}", "seeds=[0,1,2]", "jobs=1", "stop_grace=0"]
    p = subprocess.Popen(argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    run = tmp_path / "st" / "scaling-baseline"
    deadline = time.monotonic() + 120
    while not list((run / "s0" / "checkpoints").glob("step_*.pt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 143 and took < 8, (took, err[-2000:])
    assert len(lines) == 1 and "interrupted by SIGTERM: stopped the running run(s) (scaling-baseline/s0)" in lines[0]
    assert not (run / "s1").exists() and not (run / "s2").exists()
    assert not [q for q in run.rglob("*") if q.name.startswith(".") or q.suffix == ".tmp"]


def test_a_study_whose_runs_hold_no_metric_says_why(tmp_path, capsys):
    """trainer=train without eval.every in base: every run finished, study.md all dashes and no word
    (new-user audit); a warning now names the metric and the setting. The run below is finished already
    (its summary.json as `train` writes it without an evaluation), so the study only aggregates."""
    data = tmp_path / "sudoku"
    assert main(["generate-puzzles", "task=sudoku", "size=4", "count_train=8", "count_test=2",
                 f"output_dir={tmp_path / 'raw'}", "progress=false"]) == 0
    assert main(["build-puzzles", "task=sudoku", f"source={tmp_path / 'raw'}", f"output_dir={data}",
                 "progress=false"]) == 0
    out = tmp_path / "study"
    run = out / "scaling-baseline" / "s0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished", "steps": 3, "last_eval": None}))
    capsys.readouterr()
    args = ["study", "trainer=train", f"output_dir={out}", "grid={scaling:[baseline]}",
            "base={experiment:hrm_tiny_cpu,train.max_steps:3,data_dir:" + str(data) + "}"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "none of the 1 finished run(s) has last_eval.eval/exact_accuracy" in err and "eval.every > 0" in err, err
    (run / "summary.json").write_text(json.dumps({"status": "finished", "steps": 3,
                                                   "last_eval": {"eval/exact_accuracy": 0.5}}))
    assert main(args) == 0 and "none of the" not in capsys.readouterr().err
