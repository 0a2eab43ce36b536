"""The demo runs the whole pipeline end to end (micro sizes), and its table comes from that run;
the toolkit's CPU thread count follows the CPUs a process may use."""

import json
import re

import pytest
import torch

from hrm_deeploop import runtime
from hrm_deeploop.cli import main


@pytest.mark.slow  # about 40 s: .ci/run runs it after the default suite (which stays under 10 minutes)
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


LABELS = {"sudoku.baseline.exact_trained_depth": "Sudoku, baseline, exact at 4 segments (%)",
          "sudoku.baseline.exact": "Sudoku, baseline, exact at 8 segments (%)",
          "sudoku.baseline.tta_exact": "Sudoku, baseline, exact with the vote (%)",
          "sudoku.deeploop.exact_trained_depth": "Sudoku, DeepLoop, exact at 4 segments (%)",
          "sudoku.deeploop.exact": "Sudoku, DeepLoop, exact at 8 segments (%)",
          "sudoku.deeploop.tta_exact": "Sudoku, DeepLoop, exact with the vote (%)",
          "gpt.R1.baseline.val_loss": "GPT R = 1, baseline, val loss", "gpt.R1.deeploop.val_loss": "GPT R = 1, DeepLoop, val loss",
          "gpt.R3.baseline.val_loss": "GPT R = 3, baseline, val loss", "gpt.R3.deeploop.val_loss": "GPT R = 3, DeepLoop, val loss"}


def test_docs_state_the_documented_ranges():
    """docs/demo.md's range table is reports.demo.EXPECTED, figure for figure, for both CPU presets."""
    from pathlib import Path

    from hrm_deeploop.reports.demo import EXPECTED

    page = (Path(__file__).resolve().parent.parent / "docs" / "demo.md").read_text()
    for name, label in LABELS.items():
        m = re.search(rf"^\| {re.escape(label)} \| ([\d.]+) - ([\d.]+) \| ([\d.]+) - ([\d.]+) \|$", page, re.M)
        assert m, label
        for preset, (lo, hi) in (("cpu", m.groups()[:2]), ("full", m.groups()[2:])):
            assert EXPECTED[preset].ranges[name] == (float(lo), float(hi)), (preset, name)
    assert set(EXPECTED["cpu"].ranges) == set(EXPECTED["full"].ranges) == set(LABELS)


def _results(b_exact: float, d_exact: float, tta: float, r1: tuple[float, float]) -> dict:
    """One run per scheme: exact at 4 segments, 3 points more at 8; the baseline's vote `tta`, DeepLoop's 90."""
    return {"puzzles": {"baseline": {"runs": [{"exact_trained_depth": b_exact, "exact": b_exact + 3, "tta_exact": tta}]},
                        "deeploop": {"runs": [{"exact_trained_depth": d_exact, "exact": d_exact + 3, "tta_exact": 90.0}]}},
            "gpt": {"R1_baseline": {"final_val_loss": r1[0]}, "R1_deeploop": {"final_val_loss": r1[1]}}}


def test_figures_beside_ranges_flag_the_outside_and_check_what_holds():
    import dataclasses

    from hrm_deeploop.cli import compose
    from hrm_deeploop.reports.demo import beside_ranges

    tour = compose("demo", []).preset  # preset=cpu, the default
    assert tour.name == "cpu" and tour.puzzle_seeds == 1 and compose("demo", ["preset=full"]).preset.puzzle_seeds == 3

    lines, outside = beside_ranges(_results(80.0, 30.0, 97.0, (0.95, 1.70)), tour)
    text = "\n".join(lines)
    assert outside == 0 and "OUTSIDE" not in text and "DOES NOT HOLD" not in text, text
    assert "sudoku.baseline.exact_trained_depth: 80.0  [documented 75.5 - 83.0]" in text
    lines, outside = beside_ranges(_results(90.0, 30.0, 50.0, (1.20, 1.10)), tour)
    text = "\n".join(lines)
    # baseline exact 90 (4 and 8 seg) and vote 50 are outside, as are both GPT losses
    assert outside == 5 and text.count("OUTSIDE (1 of 1)") == 5, text
    assert "the vote solves at least as many puzzles as one pass: 1 of 2 run(s)  DOES NOT HOLD here" in text
    assert "DeepLoop loss above the baseline's: 0 of 1 loop count(s)  DOES NOT HOLD here" in text
    lines, outside = beside_ranges(_results(80.0, 30.0, 97.0, (0.95, 1.70)), dataclasses.replace(tour, puzzle_steps=500))
    assert outside == 0 and "preset.puzzle_steps=1000, this run has 500" in lines[0] and "not compared" in lines[0]


def test_time_estimate_scales_the_reference_by_the_measured_speed():
    from hrm_deeploop.steps import Clock, Stage

    stages = [Stage("write", [], 10.0, measures=False), Stage("train", [], 100.0), Stage("eval", [], 50.0)]
    clock = Clock(stages)
    assert clock.ratio() is None and clock.left(0) is None  # nothing measured yet
    clock.finish(stages[0], 40.0)  # a cold compile: does not set the speed
    assert clock.ratio() is None
    r = clock.ratio(stages[1], fraction=0.25, elapsed=50.0)  # 25 reference seconds took 50 here
    assert r == 2.0 and clock.left(1, stages[1], 0.25, 50.0) == 2.0 * (75.0 + 50.0)
    assert clock.total(r) == 10.0 + 2.0 * 150.0
    clock.finish(stages[1], 300.0)  # the whole stage: 3x
    assert clock.ratio() == 3.0 and clock.left(1) == 150.0 and clock.left(2) == 0.0
