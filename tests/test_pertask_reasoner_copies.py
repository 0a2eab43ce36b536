"""`pertask.reasoner_copies.ReasonerCopies`: K tasks' copies of a reasoner (HRM, TRM, URM) trained
at once, each lane equal bit for bit to its task's lone `Trainer` stepped alone (losses, gradients,
puzzle-row gradients, final weights, puzzle table, optimiser moments, weight average), whatever its
batch-mates, whenever lanes open and close; padding rows of the stacked table never change."""

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from arc_data.arc.build import BuildConfig, build
from hrm_deeploop import runtime
from hrm_deeploop.cli import compose, prepare, run_subcommand
from hrm_deeploop.pertask.reasoner_copies import TABLE, ReasonerCopies, Unsupported
from hrm_deeploop.training import reasoner
from tests.arc_synth import write_kaggle
from tests.hrm_helpers import TINY_OVERRIDES, TRM_TINY_OVERRIDES
from tests.test_adapt import FAST, _tasks

STEPS = 4
CPU = torch.device("cpu")


def _base(name: str) -> list[str]:
    if name == "urm":
        from tests.test_urm_model import URM_TINY_OVERRIDES

        return URM_TINY_OVERRIDES
    return TINY_OVERRIDES if name == "hrm" else TRM_TINY_OVERRIDES


class Setting:
    """A pretrained tiny checkpoint and three one-task datasets with 2, 3 and 4 views (tables of 3,
    4 and 5 rows), as `ttt` builds a task's; lone trainers built in-process as `train` builds them."""

    def __init__(self, root: Path, name: str):
        self.root, self.base = root, _base(name)
        chal = write_kaggle(root / "raw", "arc-agi_evaluation", _tasks(0, 3, "pre"), solutions=True)
        build(BuildConfig(sources=[str(chal)], output_dir=str(root / "pre"), num_aug=1, seed=0, progress=False))
        assert run_subcommand("train", [*self.base, *FAST, f"data_dir={root / 'pre'}", f"output_dir={root / 'run'}",
                                        "train.max_steps=2", "train.ema=true"]) == 0
        self.tasks = list(_tasks(1, 3, "new").items())
        for i, (tid, task) in enumerate(self.tasks):
            c = write_kaggle(root / f"raw_{tid}", "arc-agi_task", {tid: task}, solutions=False)
            build(BuildConfig(sources=[str(c)], output_dir=str(root / f"data_{tid}"), test_labels="optional",
                              eval_name="task", num_aug=1 + i, seed=0, progress=False))
        self._lone: dict = {}
        self._configs: dict = {}

    def trainer(self, task: int, seed: int = 0, *extra: str) -> reasoner.Trainer:
        tid = self.tasks[task][0]
        ov = [*self.base, f"init_from={self.root / 'run'}", f"data_dir={self.root / f'data_{tid}'}",
              f"output_dir={self.root / 'unused'}", f"train.max_steps={3 * STEPS}", "train.global_batch_size=4",
              "adapt.trains=all", "optim.warmup_steps=2", "train.epochs_per_iter=4", *extra]
        if (task, extra) not in self._configs:  # composed once (Hydra takes most of a second)
            self._configs[task, extra] = compose("train", prepare("train", ov))
        cfg = copy.deepcopy(self._configs[task, extra])
        cfg.seed = seed
        env = runtime.Env(rank=0, local_rank=0, world_size=1, device=CPU, fused_kernel=False)
        return reasoner.build(cfg, env)

    def lone(self, task: int, seed: int = 0, *extra: str, steps: int = STEPS) -> dict:
        """The lone trainer's losses, dense and row gradients per step, and its state after `steps`."""
        key = (task, seed, extra, steps)
        if key not in self._lone:
            t = self.trainer(task, seed, *extra)
            grads, rows = [], []
            dense_step, sparse_step = t.dense.step, t.sparse.step
            t.dense.step = lambda: (grads.append({n: p.grad.clone() for n, p in t.model.named_parameters()
                                                  if p.grad is not None}), dense_step())
            t.sparse.step = lambda ids, g: (rows.append(g.clone()), sparse_step(ids, g))
            losses = [t.train_step()["loss"] for _ in range(steps)]
            self._lone[key] = {"losses": losses, "grads": grads, "rows": rows, "state": _state(t)}
        return self._lone[key]


def _state(t: reasoner.Trainer) -> dict:
    s = t.state_dict()
    out = {f"model.{k}": v.clone() for k, v in s["model"].items()}
    for p, (n, _) in zip(t.model.parameters(), t.model.named_parameters()):
        st = t.dense.state.get(p, {})
        out |= {f"adam.{n}.{k}": v.clone() for k, v in st.items()}
    if t.ema is not None:
        out |= {f"ema.{k}": v.clone() for k, v in t.ema.shadow.items()}
    return out | {"step": t.step}


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]) if k == "step" else torch.equal(a[k], b[k]), k


class Recorder:
    """Each lane's losses, dense and row gradients per step, beside a ReasonerCopies."""

    def __init__(self, lanes: ReasonerCopies):
        self.lanes = lanes
        self.losses: dict[int, list[float]] = {}
        self.grads: dict[int, list[dict]] = {}
        self.rows: dict[int, list] = {}

    def step(self) -> None:
        got = self.lanes.step()
        for lane, loss in got.items():
            self.losses.setdefault(lane, []).append(loss)
            self.grads.setdefault(lane, []).append({n: p.grad[lane].clone() for n, p in self.lanes.params.items()})
            self.rows.setdefault(lane, []).append(self.lanes.row_grads[lane].clone())

    def check(self, lane: int, want: dict, trainer: reasoner.Trainer) -> None:
        assert self.losses.pop(lane) == want["losses"]
        for got, ref in zip(self.grads.pop(lane), want["grads"], strict=True):
            for n, g in ref.items():
                assert torch.equal(got[n], g), n
        for got, ref in zip(self.rows.pop(lane), want["rows"], strict=True):
            assert torch.equal(got, ref)
        self.lanes.close(lane)
        _assert_same_state(_state(trainer), want["state"])


@pytest.fixture(scope="module")
def hrm(tmp_path_factory):
    return Setting(tmp_path_factory.mktemp("hrm"), "hrm")


@pytest.fixture(scope="module", params=["hrm", "trm", "urm"])
def setting(request, tmp_path_factory, hrm):
    return hrm if request.param == "hrm" else Setting(tmp_path_factory.mktemp(request.param), request.param)


def test_two_hrm_lanes_one_opened_later_equal_their_lone_trainers(hrm):
    """The default suite's check (a few seconds): slot 1 empty, slot 2 opened a step later, slot 0
    closed while slot 2 trains on."""
    lanes = ReasonerCopies(3, CPU)
    rec = Recorder(lanes)
    a, b = hrm.trainer(0), hrm.trainer(2, 5)
    lanes.open(0, a)
    rec.step()
    lanes.open(2, b)
    for _ in range(2):
        rec.step()
    rec.check(0, hrm.lone(0, steps=3), a)
    rec.step()
    rec.check(2, hrm.lone(2, 5, steps=3), b)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 3])
def test_each_lane_equals_its_lone_trainer(setting, k):
    lanes = ReasonerCopies(k, CPU)
    trainers = [setting.trainer(i, seed=i) for i in range(k)]
    for i, t in enumerate(trainers):
        lanes.open(i, t)
    rec = Recorder(lanes)
    for _ in range(STEPS):
        rec.step()
    for i, t in enumerate(trainers):
        rec.check(i, setting.lone(i, seed=i), t)


@pytest.mark.slow
def test_lanes_open_and_close_at_different_times(setting):
    """Slot 1 stays empty for two steps; slot 0's task closes after its steps and the slot takes
    another task (its network frozen for its first 2 steps: adapt.trains=embeddings_then_all) while
    slot 2's trains on; the stacked table is padded to the largest lane's rows, and those padding
    rows never change."""
    lanes = ReasonerCopies(3, CPU)
    rec = Recorder(lanes)
    # train.ema=false: the lone Trainer with the weight average on and the network frozen at its
    # first step fails there (EMA.update over an empty list; reported, training/ema.py)
    late = ("adapt.trains=embeddings_then_all", "adapt.embedding_steps=2", "train.ema=false")
    a, b, c, d = setting.trainer(0), setting.trainer(2, 5), setting.trainer(1, 3), setting.trainer(1, 7, *late)
    lanes.open(0, a)
    lanes.open(2, b)
    for _ in range(2):
        rec.step()
    lanes.open(1, c)
    for _ in range(STEPS - 2):
        rec.step()
    rec.check(0, setting.lone(0), a)
    lanes.open(0, d)
    for _ in range(2):
        rec.step()
    rec.check(2, setting.lone(2, 5, steps=STEPS + 2), b)
    rec.check(1, setting.lone(1, 3), c)
    table = lanes.buffers[TABLE]
    assert table.shape[1] == 5 and not table[0, 4:].any()  # task 1's 4 rows, padded to task 2's 5
    for _ in range(STEPS - 2):
        rec.step()
    rec.check(0, setting.lone(1, 7, *late), d)


def test_a_trainer_the_lanes_cannot_step_is_refused(hrm):
    """Muon (or the CUDA AdamATan2, gradient accumulation, train.compile): `Unsupported`, nothing opened."""
    lanes = ReasonerCopies(2, CPU)
    with pytest.raises(Unsupported, match="Muon"):
        lanes.open(0, hrm.trainer(0, 0, "optim.name=muon"))
    assert not lanes.lanes


def test_a_model_of_another_shape_is_refused(hrm):
    """A lane's model must be the first lane's architecture (but its puzzle table). Trainers from
    one checkpoint always are (init_from takes its architecture): another is made by hand."""
    lanes = ReasonerCopies(2, CPU)
    lanes.open(0, hrm.trainer(0))
    other = hrm.trainer(1)
    other.model.cfg = replace(other.model.cfg, num_h_cycles=1)
    with pytest.raises(Unsupported, match="config"):
        lanes.open(1, other)
    assert list(lanes.lanes) == [0]
