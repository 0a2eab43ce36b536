"""benchmarks/study_pertask_recipe.py: the report joins study_unseen's (c) and (e) with the arms'
scores of every base folder and counts, seed by seed, the tasks solved against each."""

from __future__ import annotations

import json

from benchmarks import study_pertask_recipe as recipe


def _score(solved: list[str], cell: float) -> dict:
    n = 100 * len(solved) / 8
    return {"pass@1": n, "pass@2": n, "arc_prize@2": n, "solved@2": solved, "cell@1": cell}


def test_report_joins_the_study_and_the_arms_of_every_base_and_counts_signs_seed_by_seed(tmp_path):
    # seed 0 pretrained in the main folder, seed 1 in its own (as the study ran them two at a time)
    main, other = tmp_path / "q", tmp_path / "q-s1"
    for folder, seed, c, e in ((main, "0", ["a", "b", "c"], ["d"]), (other, "1", ["a", "b"], ["a", "b", "e"])):
        folder.mkdir()
        runs = {seed: {"c": _score(c, 70.0), "e": _score(e, 60.0), "timing": {}}}
        (folder / "results_loopvit.json").write_text(json.dumps({"runs": runs}))
    for seed, solved in (("0", ["a", "b", "c", "d"]), ("1", ["a"])):
        f = main / "arms" / "e_b1x1600" / f"s{seed}" / "score.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps(_score(solved, 65.0)))
    got = recipe.report(main, [main, other])
    assert set(got["arms"]) == {"c", "e", "e_b1x1600"} and got["protocol"] == "strict"
    assert got["signs"]["e vs c"] == {"seeds": ["0", "1"], "solved_diff": [-2, 1], "cell@1_diff": [-10.0, -10.0]}
    assert got["signs"]["e_b1x1600 vs c"]["solved_diff"] == [1, -1]
    assert got["signs"]["e_b1x1600 vs e"]["solved_diff"] == [3, -2]
    assert json.loads((main / "arms_results.json").read_text()) == got


def test_every_arm_is_matched_to_the_joint_rows_a_task_unless_it_is_about_the_compute():
    """(c): 1,600 steps of batch 8 on eight tasks = 1,600 rows a task; a per-task arm at (e)'s rows
    changes something else; the arms about the compute say so in their name."""
    for arm, (kind, *spec) in recipe.ARMS.items():
        if kind != "ttt" or "views" in spec[0]:
            continue
        opts = {**recipe.BASE_TTT, **spec[0]}
        rows = opts["steps"] * opts["batch"]
        assert rows == 1600 or arm == "e_400", arm
