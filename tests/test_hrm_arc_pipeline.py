"""HRM on datasets written by the real builder (`arc_data.arc.build`), read by `arc_data.dataset`:
the same batches from the materialised and compact layouts, and build -> train -> evaluate -> vote."""

import json

import numpy as np
import pytest

from arc_data.arc.build import BuildConfig, build
from arc_data.dataset import open_split
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.data.batches import TrainSampler, sequential_batches
from tests.hrm_helpers import TINY_OVERRIDES


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("arcbuild")
    rng = np.random.default_rng(0)
    for subset, names in (("training", ["aaaa0001", "aaaa0002"]), ("evaluation", ["bbbb0001"])):
        (root / "raw" / subset).mkdir(parents=True)
        for n in names:
            pairs = []
            for _ in range(3):
                g = rng.integers(0, 4, size=(2, 3))
                pairs.append({"input": g.tolist(), "output": g[::-1].tolist()})
            (root / "raw" / subset / f"{n}.json").write_text(json.dumps({"train": pairs[:2], "test": pairs[2:]}))
    for layout, mat in (("mat", True), ("compact", False)):
        build(BuildConfig(sources=[str(root / "raw")], output_dir=str(root / layout), num_aug=3, seed=0,
                          materialize=mat, progress=False))
    return root


def test_both_layouts_give_the_same_batches(built):
    mat, compact = open_split(built / "mat", "train"), open_split(built / "compact", "train")
    a, b = TrainSampler(mat, 8, seed=0), TrainSampler(compact, 8, seed=0)
    for _ in range(5):
        x, y = a.next_batch(), b.next_batch()
        for k in x.tensors:
            assert np.array_equal(x.tensors[k].numpy(), y.tensors[k].numpy()), k
    test = open_split(built / "compact", "test")
    rows = [bb for bb in sequential_batches(test, 3)]
    assert sum(bb.num_valid for bb in rows) == test.num_examples


# cpu: slow (2 s on an idle machine, ~20 s when the 2 cores are shared: 900-token sequences);
# cuda: bf16 on the GPU (skipped without one).
@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_build_train_evaluate_vote(built, tmp_path, capsys, device):
    data = built / "mat"
    overrides = [o for o in TINY_OVERRIDES if not o.startswith("device=")] + [f"device={device}"]
    if device == "cuda":
        overrides.append("model.forward_dtype=bfloat16")
    rc = run_subcommand("train", [*overrides, f"data_dir={data}", f"output_dir={tmp_path / 'run'}",
                                  "train.max_steps=2", "train.global_batch_size=4"])
    assert rc == 0, capsys.readouterr().err
    out = tmp_path / "eval"
    rc = run_subcommand("evaluate", [f"checkpoint={tmp_path / 'run'}", f"data_dir={data}", f"output_dir={out}",
                                     "progress=false", "global_batch_size=4", f"device={device}"])
    assert rc == 0, capsys.readouterr().err
    z = np.load(out / "predictions.npz")
    assert z["predictions"].shape == (open_split(data, "test").num_examples, 900)
    scores = json.loads((out / "pass_at_k.json").read_text())
    assert set(scores["hrm"]) == {"1", "2", "10", "100", "1000"}
