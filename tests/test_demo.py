"""The demo runs the whole pipeline end to end (micro sizes), and its table comes from that run;
the toolkit's CPU thread count follows the CPUs a process may use."""

import json
import re

import pytest
import torch

from hrm_deeploop import runtime
from hrm_deeploop.cli import main


def test_demo_micro_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", f"output_dir={out}", "preset.puzzle_train=24", "preset.puzzle_test=6",
               "preset.puzzle_steps=3", "preset.puzzle_batch=4", "preset.puzzle_tta=2", "preset.puzzle_seeds=2",
               "preset.puzzle_eval_segments=5",
               "preset.arc_train_tasks=2", "preset.arc_heldout_tasks=[3c9b0459,6150a2bd]",
               "preset.num_aug=2", "preset.hrm_steps=2", "preset.hrm_batch=4", "preset.gpt_steps=4",
               "preset.gpt_rounds=[1,2]", "preset.text_docs=200", "preset.device=cpu"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["puzzles"]) == {"baseline", "deeploop"}
    for r in results["puzzles"].values():
        assert r["seeds"] == [0, 1] and len(r["runs"]) == 2
        for run in r["runs"]:
            assert run["num_examples"] == 6 and run["segments"] == 5 and run["segments_trained"] == 4
            assert run["tta_copies"] == 2 and 0 <= run["tta_exact"] <= 100
    assert results["puzzles"]["baseline"]["lr"] == 1e-3 and results["puzzles"]["deeploop"]["lr"] == 2e-3
    assert json.loads((out / "puzzle_deeploop_s1" / "summary.json").read_text())["wall_time_s"] > 0
    cfg = (out / "puzzle_deeploop_s1" / "config.yaml").read_text()
    assert "lr: 0.002" in cfg and "seed: 1" in cfg, cfg
    assert set(results["hrm"]) == {"baseline", "deeploop"}
    assert set(results["gpt"]) == {"R1_baseline", "R1_deeploop", "R2_baseline", "R2_deeploop"}
    for r in results["gpt"].values():
        assert r["steps"] == 4 and r["final_val_loss"] > 0
    table = (out / "table.md").read_text()
    assert "HRM on Sudoku 6x6" in table and "exact, TTA vote" in table and "2 training seeds" in table
    row = next(line for line in table.splitlines() if line.startswith("| deeploop | 0.002 |"))
    mean, lo, hi = map(float, re.search(r"\| ([\d.]+) \[([\d.]+), ([\d.]+)\] \|", row).groups())
    exact = [x["exact_trained_depth"] for x in results["puzzles"]["deeploop"]["runs"]]
    assert (lo, hi) == (round(min(exact), 1), round(max(exact), 1)) and lo <= mean <= hi
    assert "pass@2" in table and "| 2 |" in table
    assert (out / "loss_curves.png").stat().st_size > 1000
    assert (out / "puzzle_eval_baseline_s0" / "report.html").exists()
    assert list((out / "puzzle_eval_deeploop_s1" / "report").glob("*.png"))
    assert (out / "arc_eval_baseline" / "report.html").exists()
    printed = capsys.readouterr().out
    assert "total wall time" in printed
    # one console line per stage with its result; every step's command in commands.sh, its output in a log
    stages = re.findall(r"^\[(\d)/9\] (.+?) \([\d.]+ s|^\[(\d)/9\] (.+?) \(\d+ min", printed, re.M)
    assert [int(a or c) for a, _, c, _ in stages] == list(range(1, 10)), printed
    assert re.search(r"^\[3/9\] train HRM on Sudoku 6x6 \(.*\): baseline s0: train loss [\d.]+; baseline s1: .*"
                     r"deeploop s1: train loss [\d.]+ \[.* so far, about .* left\]$", printed, re.M), printed
    assert re.search(r"^\[7/9\] evaluate and vote on ARC \(.*\): baseline: pass@1 [\d.]+%, pass@2 ", printed, re.M)
    assert "this run has" in printed and "not compared" in printed  # micro sizes: no documented ranges
    titles = [t for t, _ in results["steps"]]
    assert len(titles) == 2 + 4 + 4 + 1 + 2 + 2 + 1 + 4 and len(set(titles)) == len(titles)
    commands = (out / "logs" / "commands.sh").read_text()
    assert all(f"# {t}\n" in commands for t in titles) and commands.count("hrm-deeploop ") == len(titles)
    assert len(list((out / "logs").glob("*.log"))) == len(titles)
    # refuses to overwrite
    assert main(["demo", f"output_dir={out}"]) == 2


def test_default_arc_subset_is_the_studied_one(tmp_path):
    """The CPU preset's ARC part uses the eight tasks of docs/results.md section 4.7 as evaluation
    tasks (their demonstrations trained on, their test inputs held out), never also as training tasks."""
    from hrm_deeploop.demo import DemoPreset, write_arc_subset

    p = DemoPreset()
    assert p.arc_heldout_tasks == ["0d3d703e", "b1948b0a", "c8f0f002", "d511f180",
                                   "f76d97a5", "25ff71a9", "a79310a0", "5582e5ca"]
    data = write_arc_subset(tmp_path, p)
    evaluation = sorted(f.stem for f in (data / "evaluation").glob("*.json"))
    training = sorted(f.stem for f in (data / "training").glob("*.json"))
    assert evaluation == sorted(p.arc_heldout_tasks)
    assert len(training) == p.arc_train_tasks and not set(training) & set(evaluation)
    task = json.loads((data / "evaluation" / "25ff71a9.json").read_text())
    assert len(task["test"]) == 2 and all("output" in t for t in task["test"])


def test_cpu_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    cpus = runtime.available_cpus()
    assert 1 <= cpus <= 3
    saved = torch.get_num_threads()
    try:
        for var in runtime.THREAD_VARIABLES:
            monkeypatch.delenv(var, raising=False)
        torch.set_num_threads(cpus + 4)
        assert runtime.set_cpu_threads() == cpus  # lowered to the CPUs available
        torch.set_num_threads(1)
        assert runtime.set_cpu_threads() == 1  # never raised
        monkeypatch.setenv("OMP_NUM_THREADS", str(cpus + 4))
        torch.set_num_threads(cpus + 4)
        assert runtime.set_cpu_threads() == cpus + 4  # the user's setting stands
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("omp, cpus, group, threads", [
    (None, 2, 6, 1), (None, 2, 1, 2), (None, 4, 2, 2), (None, 1, 6, 1), ("2", 2, 6, 2), ("1", 2, 1, 1)])
def test_demo_steps_share_the_cpus(monkeypatch, tmp_path, omp, cpus, group, threads):
    """A group of independent steps never runs more threads than CPUs, unless OMP_NUM_THREADS says so."""
    from hrm_deeploop import steps

    monkeypatch.setattr(runtime, "available_cpus", lambda: cpus)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    pool = steps.Pool(tmp_path)
    assert pool.threads(group) == threads
    if omp is None:
        assert min(group, cpus // threads) * threads <= cpus
