"""A reasoner lane's sparse (puzzle-table) step updates the rows its ACT carry embedded, as the lone
trainer's does (`PuzzleEmbedding.take_grads`): a slot that did not halt keeps its puzzle from an
earlier step, not the fresh batch's. `tests/test_pertask_reasoner_copies.py` pretrains with
halt_max_steps=1 (every slot halts every step), so it never saw a slot carried over; here the
checkpoint has halt_max_steps=2 and exploration 1.0 (min_halt = 2: every slot carries over once).
Issue 61's audit: `ttt copies=2` on `hrm_pretrain_cpu` (halt_max_steps=2) differed from one task at
a time from step 2, in the puzzle table only."""

import pytest

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask.reasoner_copies import ReasonerCopies
from tests.arc_synth import write_kaggle
from tests.test_adapt import FAST, _tasks
from tests.test_pertask_reasoner_copies import CPU, Recorder, Setting, _base

CARRIED = ["model.halt_max_steps=2", "model.halt_exploration_prob=1.0"]


class Carried(Setting):
    """`Setting`, its checkpoint pretrained with halt_max_steps=2 and exploration 1.0."""

    def __init__(self, root, name: str):
        self.root, self.base = root, _base(name)
        chal = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(0, 3, "pre"), solutions=True)
        build(BuildConfig(sources=[str(chal)], output_dir=str(root / "pre"), num_aug=1, seed=0, progress=False))
        assert run_subcommand("train", [*self.base, *FAST, *CARRIED, f"data_dir={root / 'pre'}",
                                        f"output_dir={root / 'run'}", "train.max_steps=2"]) == 0
        self.tasks = list(_tasks(1, 2, "new").items())
        for i, (tid, task) in enumerate(self.tasks):
            c = write_kaggle(root / f"raw_{tid}", "arc-agi_task", {tid: task}, solutions=False)
            build(BuildConfig(sources=[str(c)], output_dir=str(root / f"data_{tid}"), test_labels="optional",
                              eval_name="task", num_aug=2 + i, seed=0, progress=False))
        self._lone, self._configs = {}, {}


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    return Carried(tmp_path_factory.mktemp("carried"), "hrm")


def test_a_lane_updates_the_rows_its_carry_embedded(carried):
    t = carried.trainer(1)
    t.train_step()
    assert not t.carries[0].halted.any(), "the setting must carry every slot over after its first step"
    lanes = ReasonerCopies(2, CPU)
    rec = Recorder(lanes)
    a, b = carried.trainer(0), carried.trainer(1, 3)
    lanes.open(0, a)
    lanes.open(1, b)
    for _ in range(4):
        rec.step()
    rec.check(0, carried.lone(0, steps=4), a)
    rec.check(1, carried.lone(1, 3, steps=4), b)
