"""`hrm-deeploop evaluate` on a LoopViT checkpoint (ours from train-vit, or an official `.pt`): the test
canvases decoded to grids (`eval.arc.canvas`) feed the one ARC vote. An oracle in the model's place
(it paints the right answer of an identity task on every augmented copy) scores 100%: the canvas
placement, the decode, the token row and the vote's un-augmentation agree."""

import json

import numpy as np
import pytest
import torch

from arc_data.arc.build import BuildConfig, build
from arc_data.format import encode_grid
from eval.arc.canvas import prediction_row
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.data.canvas import View, place
from hrm_deeploop.models import loopvit as lv
from tests.test_train_vit import _official_file

TRAIN = ["experiment=loopvit_tiny_cpu", "train.progress=false", "train.global_batch_size=4", "optim.warmup_steps=1",
         "train.max_steps=2", "eval.max_batches=1"]


@pytest.fixture(scope="module")
def identity_arc(tmp_path_factory):
    """Three ARC tasks whose output is the input (two of them evaluation tasks), built by the real
    builder with augmentations."""
    root = tmp_path_factory.mktemp("arc")
    rng = np.random.default_rng(0)
    for subset in ("training", "evaluation"):  # the evaluation tasks' test inputs form the test split
        (root / "raw" / subset).mkdir(parents=True)
    for n, subset in (("aaaa0001", "training"), ("bbbb0001", "evaluation"), ("bbbb0002", "evaluation")):
        pairs = [rng.integers(0, 10, size=(int(rng.integers(2, 6)), int(rng.integers(2, 6)))).tolist()
                 for _ in range(3)]
        task = {"train": [{"input": g, "output": g} for g in pairs[:2]], "test": [{"input": pairs[2], "output": pairs[2]}]}
        (root / "raw" / subset / f"{n}.json").write_text(json.dumps(task))
    build(BuildConfig(sources=[str(root / "raw")], output_dir=str(root / "data"), num_aug=3, seed=0, progress=False))
    return root / "data"


def _oracle(self, canvas, task_ids, attention_mask=None, num_loops=None, **_):
    """The right canvas of the identity task: the input's cells, the border right of and below them."""
    target = torch.full_like(canvas, 10, dtype=torch.long)
    for b in range(canvas.shape[0]):
        ys, xs = torch.nonzero(attention_mask[b], as_tuple=True)
        y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
        target[b, y0:y1, x0:x1] = canvas[b, y0:y1, x0:x1].long()
        target[b, y0:y1, x1] = 11
        target[b, y1, x0:x1 + 1] = 11
    return lv.LoopViTOutput(torch.nn.functional.one_hot(target, 12).float(), None, None)


def _evaluate(data, ckpt_path, out, *extra):
    return run_subcommand("evaluate", [f"checkpoint={ckpt_path}", f"data_dir={data}", f"output_dir={out}",
                                       "progress=false", "global_batch_size=8", "device=cpu", *extra])


def _pass_at(out) -> dict:
    return json.loads((out / "pass_at_k.json").read_text())["hrm"]


def test_prediction_row_by_hand():
    grid = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8)
    canvas, _, target = place(grid, grid, 16, View(2, 1, 1))
    assert np.array_equal(prediction_row(target, View(2, 1, 1)), encode_grid(grid))
    target[3:5, 3:5] = 11  # border colour on grid cell (1, 1): PAD there, so the vote's crop stops before it
    row = prediction_row(target, View(2, 1, 1)).reshape(30, 30)
    assert row[1, 1] == 0 and row[1, 0] == 4 + 2 and row[0, 1] == 2 + 2 and row[0, 3] == 1  # EOS after the grid


def test_a_trained_checkpoint_and_an_oracle_through_the_vote(identity_arc, tmp_path, monkeypatch, capsys):
    """(and the exit study's script runs on the trained checkpoint)"""
    assert run_subcommand("train-vit", [*TRAIN, f"data_dir={identity_arc}", f"output_dir={tmp_path / 'run'}"]) == 0
    assert _evaluate(identity_arc, tmp_path / "run", tmp_path / "eval") == 0
    preds = np.load(tmp_path / "eval" / "predictions.npz")
    from arc_data.dataset import open_split

    assert preds["predictions"].shape == (open_split(identity_arc, "test").num_examples, 900)
    assert set(_pass_at(tmp_path / "eval")) == {"1", "2", "10", "100", "1000"}
    from benchmarks import study_loopvit_exit

    capsys.readouterr()
    study_loopvit_exit.main(["--checkpoint", str(tmp_path / "run"), "--data", str(identity_arc), "--split", "train",
                             "--taus", "0.05", "--batch", "4"])
    lines = {ln.split("  ")[0].strip(): ln for ln in capsys.readouterr().out.splitlines()}
    assert " 3.00 " in lines["fixed depth"] and "plateau (code: 5%, 2 loops)" in lines  # T = 3 loops each
    monkeypatch.setattr(lv.LoopViT, "forward", _oracle)
    assert _evaluate(identity_arc, tmp_path / "run", tmp_path / "oracle") == 0
    assert _pass_at(tmp_path / "oracle")["1"] == pytest.approx(100.0)


@pytest.mark.parametrize("block", ["hybrid", "vanilla"])
def test_an_official_checkpoint_is_evaluated_without_training(identity_arc, tmp_path, monkeypatch, block):
    src = _official_file(tmp_path / "loop_vit_base.pt", block, num_tasks=400)
    seen = {}
    real = lv.LoopViT.forward

    def recording(self, *a, **kw):
        seen.update(self.state_dict())
        return real(self, *a, **kw)

    monkeypatch.setattr(lv.LoopViT, "forward", recording)
    assert _evaluate(identity_arc, tmp_path / "loop_vit_base.pt", tmp_path / "eval", "vote=false") == 0
    assert all(torch.equal(seen[k], v) for k, v in src.state_dict().items())  # the official weights, mapped
    assert np.load(tmp_path / "eval" / "predictions.npz")["predictions"].shape[1] == 900


def test_refusals(identity_arc, tmp_path, capsys):
    _official_file(tmp_path / "small.pt", "hybrid", num_tasks=2)  # fewer task rows than the dataset's puzzle ids
    assert _evaluate(identity_arc, tmp_path / "small.pt", tmp_path / "eval") == 2
    err = capsys.readouterr().err
    assert "task-table rows" in err and len(err.strip().splitlines()) == 1, err
    from hrm_deeploop.errors import UserError
    from hrm_deeploop.loading import load_model

    _official_file(tmp_path / "ok.pt", "hybrid", num_tasks=400)
    with pytest.raises(UserError, match="LoopViT"):  # a command that serves the reasoners only
        load_model(tmp_path / "ok.pt", gpt=False)
