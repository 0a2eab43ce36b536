"""The demo runs the whole pipeline end to end (micro sizes), and its table comes from that run."""

import json

from hrm_deeploop.cli import main


def test_demo_micro_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", f"output_dir={out}", "preset.puzzle_train=24", "preset.puzzle_test=6",
               "preset.puzzle_steps=3", "preset.puzzle_batch=4", "preset.puzzle_tta=2",
               "preset.puzzle_eval_segments=5",
               "preset.arc_train_tasks=2", "preset.arc_heldout_tasks=[3c9b0459,6150a2bd]",
               "preset.num_aug=2", "preset.hrm_steps=2", "preset.hrm_batch=4", "preset.gpt_steps=4",
               "preset.gpt_rounds=[1,2]", "preset.text_docs=200", "preset.device=cpu"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["puzzles"]) == {"baseline", "deeploop"}
    for r in results["puzzles"].values():
        assert r["num_examples"] == 6 and r["segments"] == 5 and r["segments_trained"] == 4
        assert r["tta_copies"] == 2 and 0 <= r["tta_exact"] <= 100
    assert results["puzzles"]["baseline"]["lr"] == 1e-3 and results["puzzles"]["deeploop"]["lr"] == 2e-3
    assert json.loads((out / "puzzle_deeploop" / "summary.json").read_text())["wall_time_s"] > 0
    cfg = (out / "puzzle_deeploop" / "config.yaml").read_text()
    assert "lr: 0.002" in cfg, cfg
    assert set(results["hrm"]) == {"baseline", "deeploop"}
    assert set(results["gpt"]) == {"R1_baseline", "R1_deeploop", "R2_baseline", "R2_deeploop"}
    for r in results["gpt"].values():
        assert r["steps"] == 4 and r["final_val_loss"] > 0
    table = (out / "table.md").read_text()
    assert "HRM on Sudoku 6x6" in table and "exact, TTA vote" in table
    assert "pass@2" in table and "| 2 |" in table
    assert (out / "loss_curves.png").stat().st_size > 1000
    assert (out / "puzzle_eval_baseline" / "report.html").exists()
    assert list((out / "puzzle_eval_deeploop" / "report").glob("*.png"))
    assert (out / "arc_eval_baseline" / "report.html").exists()
    assert "total wall time" in capsys.readouterr().out
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
