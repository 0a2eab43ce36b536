"""Puzzle evaluation end to end through the CLI: generate-puzzles -> build-puzzles -> train (tiny HRM,
tiny TRM, a few steps) -> evaluate, for Sudoku 4x4 and a 7x7 maze; the per-segment model API; the
ARC vote refusing other tasks; bad inputs as one-line errors."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from arc_data.dataset import open_split
from eval.arc.results import Candidate, rank
from eval.puzzles import tta as T
from eval.ranking import sigmoid
from hrm_deeploop import runtime
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.loading import load_model
from hrm_deeploop.models.model_config import HRMConfig, TRMConfig
from hrm_deeploop.models.reasoners import build_reasoner

TINY = {"hrm": ["experiment=hrm_tiny_cpu", "model.hidden_size=32", "model.num_h_layers=1", "model.num_l_layers=1"],
        "trm": ["experiment=trm_tiny_cpu", "model.hidden_size=32"]}


def _ok(capsys, cmd: str, *args: str) -> str:
    rc = run_subcommand(cmd, list(args))
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def _bad(capsys, cmd: str, *args: str) -> str:
    """Exit code 2 and one line on stderr (no traceback); returns the line."""
    assert run_subcommand(cmd, list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Sudoku 4x4 and maze 7x7 datasets and a tiny HRM and TRM checkpoint on each."""
    root = tmp_path_factory.mktemp("puzeval")
    runs = {}
    for task, size, aug in (("sudoku", 4, 1), ("maze", 7, 7)):
        assert run_subcommand("generate-puzzles", [f"task={task}", f"size={size}", "count_train=48", "count_test=12",
                                                   f"output_dir={root / 'raw' / task}", "progress=false"]) == 0
        assert run_subcommand("build-puzzles", [f"task={task}", f"source={root / 'raw' / task}", f"num_aug={aug}",
                                                f"output_dir={root / task}", "progress=false"]) == 0
        for model in ("hrm", "trm"):
            run = root / f"run_{task}_{model}"
            assert run_subcommand("train", [*TINY[model], f"data_dir={root / task}", f"output_dir={run}",
                                            "train.max_steps=3", "train.global_batch_size=8", "checkpoint.every=3",
                                            "eval.every=0", "train.progress=false", "optim.warmup_steps=1"]) == 0
            runs[task, model] = run
    return root, runs


def _trainer_metrics(run: Path, data: Path) -> dict[str, float]:
    """The trainer's own per-example evaluation (hrm_deeploop.training.reasoner.evaluate) of a checkpoint."""
    from hrm_deeploop.training.reasoner import evaluate

    loaded = load_model(run, "cpu")
    env = runtime.setup("cpu")
    try:
        return evaluate(loaded.model, open_split(data, "test"), env, 5)
    finally:
        runtime.teardown()


def test_sudoku_hrm_tta_depth_and_report(world, tmp_path, capsys):
    root, runs = world
    data, run, out = root / "sudoku", runs["sudoku", "hrm"], tmp_path / "eval"
    line = _ok(capsys, "evaluate", f"checkpoint={run}", f"data_dir={data}", f"output_dir={out}", "tta=3",
               "halt_max_steps=6", "global_batch_size=8", "report_puzzles=4", "progress=false")
    assert "evaluate: sudoku, 12 examples, 6 segments" in line and "tta=3 vote" in line
    m = json.loads((out / "metrics.json").read_text())
    assert m["segments"] == 6 and m["halt_max_steps_trained"] == 4 and len(m["per_segment"]) == 6
    assert m["tta"]["copies"] == 3 and m["num_examples"] == 12
    # the trainer's per-example metrics after its 4 segments = ours at segment 4, without TTA
    tm = _trainer_metrics(run, data)
    seg4 = m["per_segment"][3]
    assert seg4["exact_accuracy"] == pytest.approx(100 * tm["exact_accuracy"], abs=1e-3)
    assert seg4["token_accuracy"] == pytest.approx(100 * tm["accuracy"], abs=1e-3)  # 16 supervised tokens a board
    # predictions.npz: 12 x (1 + 3) rows, example-major, in the frame the model saw
    z = np.load(out / "predictions.npz")
    assert z["predictions"].shape == (48, 16) and z["example"].tolist() == np.repeat(np.arange(12), 4).tolist()
    assert z["tta_copy"].tolist() == np.tile(np.arange(4), 12).tolist()
    split = open_split(data, "test")
    x, y = split.examples(np.arange(12))
    t = dict(np.load(out / "tta_augmentations.npz"))
    g = T.group_for("sudoku", 16, 6)
    table = {k: t[k] for k in ("digit_map", "transpose", "row_perm", "col_perm")}
    assert np.array_equal(z["inputs"], g.apply(np.repeat(x, 4, axis=0), table))
    assert (z["inputs"][z["tta_copy"] > 0] != np.repeat(x, 3, axis=0)).any()  # really augmented
    # copy 0 rows: the model's own predict() with 6 segments
    loaded = load_model(run, "cpu")
    loaded.model.cfg = type(loaded.config)(**{**loaded.config.__dict__, "halt_max_steps": 6})
    b = {"inputs": torch.from_numpy(x.astype(np.int32)), "labels": torch.full((12, 16), -100, dtype=torch.int32),
         "puzzle_identifiers": torch.zeros(12, dtype=torch.int32)}
    _, o = loaded.model.predict(b)
    assert np.array_equal(z["predictions"][::4], o["logits"].argmax(-1).numpy().astype(np.uint8))
    # the TTA vote recomputed from the files with eval.arc.vote's ranking: same top-1 and pass@2
    back = g.invert(z["predictions"], table)
    top1 = pass2 = tokens = candidates = 0
    for e in range(12):
        rows = list(range(4 * e, 4 * e + 4))
        cands = {}
        for r in rows:
            cands.setdefault(back[r].tobytes(), []).append(r)
        ranked = rank([Candidate(key=(hash(k), 0), votes=len(v), mean_q=float(np.mean(sigmoid(z["q_halt"][v]))),
                                 first_seen=v[0], shape=(4, 4)) for k, v in cands.items()])
        right = [np.array_equal(back[c.first_seen], y[e]) for c in ranked]
        top1, pass2 = top1 + right[0], pass2 + any(right[:2])
        tokens += int((back[ranked[0].first_seen] == y[e]).sum())
        candidates += len(ranked)
    assert m["final"]["tta"]["exact_accuracy"] == pytest.approx(100 * top1 / 12, abs=1e-3)
    assert m["final"]["tta"]["pass@2"] == pytest.approx(100 * pass2 / 12, abs=1e-3)
    assert m["final"]["tta"]["token_accuracy"] == pytest.approx(100 * tokens / (12 * 16), abs=1e-3)
    assert m["final"]["tta"]["mean_candidates"] == pytest.approx(candidates / 12, abs=1e-3)
    # outputs: tables and pictures
    md = (out / "metrics.md").read_text()
    assert "TTA vote over 1 + 3 copies" in md and md.count("\n| ") >= 2 + 4 + 6
    assert len(list((out / "report").glob("example_*.png"))) == 4
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and page.count("pictured: top-1 vote: copy ") == 4
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    # nothing replaced without overwrite; with it, a tta=0 run leaves no stale tta table
    assert "overwrite=true" in _bad(capsys, "evaluate", f"checkpoint={run}", f"data_dir={data}", f"output_dir={out}")
    _ok(capsys, "evaluate", f"checkpoint={run}", f"data_dir={data}", f"output_dir={out}", "overwrite=true",
        "progress=false", "report=false")
    assert not (out / "tta_augmentations.npz").exists() and not (out / "report.html").exists()
    m0 = json.loads((out / "metrics.json").read_text())
    assert m0["per_segment"] == [{k: v for k, v in s.items() if not k.startswith("tta")} for s in m["per_segment"][:4]]


@pytest.mark.parametrize("task,model,args", [
    ("sudoku", "trm", ["tta=2"]),
    ("maze", "hrm", ["tta=7"]),
    ("maze", "trm", ["halt_max_steps=2"]),
])
def test_tasks_and_models_evaluate(world, tmp_path, capsys, task, model, args):
    root, runs = world
    out = tmp_path / "eval"
    _ok(capsys, "evaluate", f"checkpoint={runs[task, model]}", f"data_dir={root / task}", f"output_dir={out}",
        "progress=false", "global_batch_size=16", *args)
    m = json.loads((out / "metrics.json").read_text())
    assert m["task"] == task and m["model"] == model and m["num_examples"] == 12
    assert m["cells_to_solve"] == {"sudoku": "the blank cells of the input", "maze": "the cells of the true path ('o')"}[task]
    assert len(m["per_segment"]) == (2 if "halt_max_steps=2" in args else 4)
    if task == "maze" and model == "hrm":
        assert m["tta"]["group"].startswith("maze 7x7") and "tta" in m["final"]
        z = np.load(out / "predictions.npz")
        d = np.load(out / "tta_augmentations.npz")["dihedral"].reshape(12, 8)
        assert (d[:, 0] == 0).all() and all(sorted(r[1:]) == list(range(1, 8)) for r in d)
        assert z["inputs"].shape == (96, 49)
    if model == "trm" and task == "sudoku":
        tm = _trainer_metrics(runs[task, model], root / task)
        assert m["final"]["no_tta"]["exact_accuracy"] == pytest.approx(100 * tm["exact_accuracy"], abs=1e-3)
    assert len(list((out / "report").glob("*.png"))) == 6


def test_predict_steps_is_predict_one_segment_at_a_time():
    torch.manual_seed(0)
    for cfg in (HRMConfig(hidden_size=32, num_heads=2, num_h_layers=1, num_l_layers=1, seq_len=16, vocab_size=6,
                          num_puzzle_identifiers=1, halt_max_steps=3),
                TRMConfig(hidden_size=32, num_heads=2, seq_len=16, vocab_size=6, num_puzzle_identifiers=1,
                          halt_max_steps=3, puzzle_emb_len=2)):
        model = build_reasoner(cfg).eval()
        b = {"inputs": torch.randint(0, 6, (5, 16), dtype=torch.int32),
             "labels": torch.full((5, 16), -100, dtype=torch.int32), "puzzle_identifiers": torch.zeros(5, dtype=torch.int32)}
        carry, out = model.predict(b)
        steps = list(model.predict_steps(b))
        assert len(steps) == 3
        for k in ("logits", "q_halt_logits", "q_continue_logits"):
            assert torch.equal(steps[-1][1][k], out[k]), k
        assert torch.equal(steps[-1][0].z_H, carry.z_H)
        # deeper than trained: segment 5 equals predict() of the same weights with halt_max_steps=5
        deep = list(model.predict_steps(b, 5))
        for s in range(3):
            assert torch.equal(deep[s][1]["logits"], steps[s][1]["logits"])
        model.cfg = type(cfg)(**{**cfg.__dict__, "halt_max_steps": 5})
        _, out5 = model.predict(b)
        assert torch.equal(deep[-1][1]["logits"], out5["logits"])
        assert not torch.equal(deep[-1][1]["logits"], deep[0][1]["logits"])  # no reset to a fresh carry
        halts = model.q_halts(out5)
        q = out5["q_halt_logits"]
        assert torch.equal(halts, q > out5["q_continue_logits"] if model.q_continue else q > 0)


def test_arc_vote_refuses_other_tasks_and_foreign_predictions(world, tmp_path, capsys):
    root, runs = world
    out = tmp_path / "e"
    _ok(capsys, "evaluate", f"checkpoint={runs['sudoku', 'hrm']}", f"data_dir={root / 'sudoku'}", f"output_dir={out}",
        "progress=false", "report=false")
    line = _bad(capsys, "vote", f"predictions={out / 'predictions.npz'}", f"data_dir={root / 'sudoku'}",
                f"output_dir={tmp_path / 'v'}")
    assert "is ARC's" in line and "a sudoku dataset (seq_len 16" in line and "hrm-deeploop evaluate" in line
    assert not (tmp_path / "v").exists()
    # Sudoku-shaped predictions against an ARC dataset: the row length is checked against its dataset.json
    from tests.vote_helpers import make_split, random_grid

    rng = np.random.default_rng(0)
    make_split(tmp_path / "arc", {"aaaa": [(random_grid(rng), random_grid(rng))]}, num_aug=1)
    line = _bad(capsys, "vote", f"predictions={out / 'predictions.npz'}", f"data_dir={tmp_path / 'arc'}",
                f"output_dir={tmp_path / 'v2'}")
    assert "rows hold 16 tokens, but the dataset has seq_len 900" in line
    # tta on an ARC dataset
    line = _bad(capsys, "evaluate", f"checkpoint={runs['sudoku', 'hrm']}", f"data_dir={tmp_path / 'arc'}",
                f"output_dir={tmp_path / 'v3'}", "tta=2")
    assert "tta=2: an ARC test split holds its augmented copies" in line


def test_bad_evaluate_inputs_are_one_line(world, tmp_path, capsys):
    root, runs = world
    ckpt = f"checkpoint={runs['sudoku', 'hrm']}"
    generic = tmp_path / "generic"  # the same set without our manifest: what HRM's own builder writes
    shutil.copytree(root / "sudoku", generic)
    (generic / "manifest.json").unlink()
    line = _bad(capsys, "evaluate", ckpt, f"data_dir={generic}", f"output_dir={tmp_path / 'o1'}", "tta=2")
    assert "task 'generic' has no invertible augmentation group" in line and "tta=0" in line
    assert not (tmp_path / "o1" / "predictions.npz").exists()
    # naming the task makes TTA possible on such a set
    _ok(capsys, "evaluate", ckpt, f"data_dir={generic}", f"output_dir={tmp_path / 'o2'}", "tta=2", "task=sudoku",
        "progress=false", "report=false")
    assert json.loads((tmp_path / "o2" / "metrics.json").read_text())["tta"]["copies"] == 2
    # a task that contradicts the dataset's own
    assert "is a sudoku dataset" in _bad(capsys, "evaluate", ckpt, f"data_dir={root / 'sudoku'}",
                                         f"output_dir={tmp_path / 'o3'}", "task=maze")
    # maze: 7 non-identity transforms at most
    assert "tta <= 7" in _bad(capsys, "evaluate", f"checkpoint={runs['maze', 'hrm']}", f"data_dir={root / 'maze'}",
                              f"output_dir={tmp_path / 'o4'}", "tta=8", "progress=false")
    assert not (tmp_path / "o4" / "predictions.npz").exists()
    for arg, message in (("halt_max_steps=0", "halt_max_steps=0: must be >= 1"), ("tta=-1", "tta=-1: must be >= 0"),
                         ("task=arc", "task='arc': must be one of auto, sudoku, maze, generic")):
        assert message in _bad(capsys, "evaluate", ckpt, f"data_dir={root / 'sudoku'}", f"output_dir={tmp_path / 'o5'}", arg)
    # a checkpoint trained on another board size
    assert "seq_len" in _bad(capsys, "evaluate", f"checkpoint={runs['maze', 'hrm']}", f"data_dir={root / 'sudoku'}",
                             f"output_dir={tmp_path / 'o6'}")


def test_arc_path_runs_more_segments_with_halt_max_steps(monkeypatch, tmp_path, capsys):
    """ARC datasets keep the predict -> vote path; halt_max_steps= runs more segments there too."""
    from tests.hrm_helpers import make_dataset, stand_in_open_split, use_stand_in
    from tests.test_hrm_checkpoint import write_official

    data = make_dataset(tmp_path / "data", num_tasks=2, num_aug=1, test_per_puzzle=1, canvas=30)
    split = stand_in_open_split(data, "test")
    path, ref = write_official(tmp_path, seq_len=900, num_ids=split.meta.num_puzzle_identifiers)
    use_stand_in(monkeypatch)
    deeper = ref.cfg.halt_max_steps + 2
    _ok(capsys, "evaluate", f"checkpoint={path}", f"data_dir={data}", f"output_dir={tmp_path / 'out'}", "vote=false",
        "progress=false", f"halt_max_steps={deeper}")
    z = np.load(tmp_path / "out" / "predictions.npz")
    assert "example" not in z.files  # ARC's predictions.npz, not the puzzle evaluation's
    n = split.num_examples
    b = {"inputs": torch.from_numpy(np.asarray(split.inputs).astype(np.int32)),
         "labels": torch.full((n, 900), -100, dtype=torch.int32), "puzzle_identifiers": torch.from_numpy(z["puzzle_identifiers"])}
    *_, (_, o) = ref.predict_steps(b, deeper)
    np.testing.assert_allclose(z["q_halt"], o["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-5)
    _, o_trained = ref.predict(b)
    assert not np.allclose(z["q_halt"], o_trained["q_halt_logits"].numpy(), rtol=1e-5, atol=1e-5)
