"""`benchmarks/study_unseen.py --fit`: the pretrained model is scored on its own pretraining tasks,
through a second build of the same sources whose tasks are all evaluation tasks. That build must
give the pretraining set's identifiers (else the checkpoint's task embeddings would be read for
other tasks), and the batches scored must cover the ARC-1 tasks, which come first."""

import sys
from pathlib import Path

import numpy as np

from arc_data.arc.build import BuildConfig, build
from arc_data.generators.generate import GenerateArcConfig, generate
from tests.arc_synth import synthetic_tasks, write_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_unseen  # noqa: E402


def test_fit_build_has_the_pretraining_identifiers_and_its_batches_cover_the_arc_tasks(tmp_path):
    tasks = synthetic_tasks(3)
    arc = write_layout(tmp_path / "raw" / "tasks", {"training": {**tasks["training"], **tasks["evaluation"]}})
    generate(GenerateArcConfig(output_dir=str(tmp_path / "gen"), families=["tile", "hollow"], tasks_per_family=3,
                               progress=False))
    held = sorted(tasks["evaluation"])[:1]
    sources = [arc, tmp_path / "gen" / "training"]
    build(BuildConfig(sources=[str(s) for s in sources], output_dir=str(tmp_path / "pre"), num_aug=3, seed=5,
                      holdout_tasks=held, holdout_dir=str(tmp_path / "unseen"), progress=False))
    fit = study_unseen.write_fit_sources(tmp_path / "fit-raw", sources, held)
    build(BuildConfig(sources=[str(s) for s in fit], output_dir=str(tmp_path / "fit"), num_aug=3, seed=5,
                      progress=False))
    assert (tmp_path / "fit" / "identifiers.json").read_bytes() == (tmp_path / "pre" / "identifiers.json").read_bytes()
    arc_ids = sorted(p.stem for p in (arc / "training").glob("*.json") if p.stem not in held)
    with np.load(tmp_path / "fit" / "augmentations.npz") as z:
        names = list(z["task_names"])
    assert names[:len(arc_ids)] == arc_ids and len(names) == len(arc_ids) + 6  # ARC-1 first, then generated
    pi = np.load(tmp_path / "fit" / "test" / "all__puzzle_indices.npy")
    gi = np.load(tmp_path / "fit" / "test" / "all__group_indices.npy")
    assert len(gi) - 1 == len(names)  # every pretraining task is an evaluation task there
    rows = int(pi[gi[len(arc_ids)]])
    batches = study_unseen.fit_batches(tmp_path / "fit", len(arc_ids), batch=4)
    assert (batches - 1) * 4 < rows <= batches * 4
