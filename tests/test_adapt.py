"""`train init_from=CKPT` (training/adapt.py) and `train.time_budget`: the grown puzzle table, the
0-step identity, the budget stop, what trains, and the whole round trip on tasks the model never
saw (build unseen -> pretrain -> adapt -> evaluate -> vote -> submission.json scored)."""

import json

import numpy as np
import pytest
import torch

from arc_data.arc.build import BuildConfig, build
from eval.arc.arcprize import arc_prize_score, load_solutions
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.loading import load_model
from hrm_deeploop.training.adapt import grow_table
from tests.arc_synth import write_kaggle
from tests.hrm_helpers import TINY_OVERRIDES, TRM_TINY_OVERRIDES

FAST = ["train.global_batch_size=4", "optim.warmup_steps=1", "model.halt_max_steps=1"]


def test_grown_table_keeps_every_trained_row_bit_identical():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(5, 3, generator=g)
    old_names = ["<blank>", "a", "a_t1_0123456789", "b", "c"]
    new_names = ["<blank>", "x", "b", "y"]
    table, names, rows, kept = grow_table(old, old_names, new_names, "mean", "drop")
    assert names == new_names and rows is None and kept == 2
    assert torch.equal(table[2], old[3]) and torch.equal(table[0], old[0])
    assert torch.equal(table[1], old[1:].mean(0)) and torch.equal(table[3], old[1:].mean(0))
    table, names, rows, kept = grow_table(old, old_names, new_names, "zeros", "keep")
    assert torch.equal(table[:5], old) and names == old_names + ["x", "y"] and kept == 5
    assert rows.tolist() == [0, 5, 3, 6] and not table[5:].any()


def _tasks(seed: int, n: int, prefix: str) -> dict[str, dict]:
    """Per-cell tasks (each a fixed colour permutation), 2x2 grids."""
    rng = np.random.default_rng(seed)
    tasks = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(np.arange(1, 10))])
        pairs = []
        for _ in range(3):
            g = rng.integers(0, 10, size=(2, 2))
            pairs.append({"input": g.tolist(), "output": perm[g].tolist()})
        tasks[f"{prefix}{i:02d}"] = {"train": pairs[:2], "test": pairs[2:]}
    return tasks


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """A pretraining set and an unseen set from one build-arc command (holdout), a pretrained tiny HRM."""
    root = tmp_path_factory.mktemp("adapt")
    tasks = _tasks(0, 3, "pre") | _tasks(1, 2, "new")
    chal = write_kaggle(root / "raw", "arc-agi_evaluation", tasks, solutions=True)
    build(BuildConfig(sources=[str(chal)], output_dir=str(root / "pre"), holdout_tasks=["new00", "new01"],
                      holdout_dir=str(root / "unseen"), num_aug=1, seed=0, progress=False))
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'pre'}", f"output_dir={root / 'run'}",
                                  "train.max_steps=2"])
    assert rc == 0
    return root, chal


def _evaluate(ckpt_path, data, out) -> np.ndarray:
    rc = run_subcommand("evaluate", [f"checkpoint={ckpt_path}", f"data_dir={data}", f"output_dir={out}",
                                     "progress=false", "global_batch_size=4", "device=cpu", "report=false"])
    assert rc == 0
    with np.load(out / "predictions.npz") as z:
        return z["predictions"].copy()


def test_zero_step_adaptation_predicts_what_the_original_predicts_on_known_tasks(setting, tmp_path):
    root, _ = setting
    # old rows kept, the unseen tasks' rows appended; train.time_budget=0 checkpoints before step 1
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'a'}", f"init_from={root / 'run'}",
                                  "adapt.old_rows=keep", "train.time_budget=0", "train.max_steps=5"])
    assert rc == 0
    assert ckpt.latest(tmp_path / "a").name == "step_0.pt"
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["status"] == "stopped"
    before = _evaluate(root / "run", root / "pre", tmp_path / "e0")
    after = _evaluate(tmp_path / "a", root / "pre", tmp_path / "e1")  # mapped by name to the kept rows
    assert np.array_equal(before, after)
    old = load_model(root / "run").model.puzzle_emb.weights
    new = load_model(tmp_path / "a").model.puzzle_emb.weights
    assert torch.equal(new[: old.shape[0]], old) and new.shape[0] > old.shape[0]


def test_time_budget_stops_and_leaves_a_loadable_checkpoint(setting, tmp_path):
    root, _ = setting
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'b'}", f"init_from={root / 'run'}",
                                  "train.time_budget=0.001", "train.max_steps=100000"])  # 0.06 s
    assert rc == 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] < 100000
    loaded = load_model(tmp_path / "b")
    assert loaded.step == summary["steps"] and loaded.puzzle_names is not None
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}", "train.time_budget=x",
                                  f"output_dir={tmp_path / 'c'}"])
    assert rc == 2


def test_embeddings_only_leaves_the_network_untouched(setting, tmp_path):
    root, _ = setting
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'e'}", f"init_from={root / 'run'}",
                                  "adapt.trains=embeddings", "adapt.new_rows=zeros", "train.max_steps=2"])
    assert rc == 0
    a, b = load_model(root / "run").model.state_dict(), load_model(tmp_path / "e").model.state_dict()
    for k in a:
        if k != "puzzle_emb.weights":
            assert torch.equal(a[k], b[k]), k
    assert b["puzzle_emb.weights"][1:].abs().sum() > 0  # the zero-initialised new rows trained


def test_round_trip_unseen_tasks_submission_scored(setting, tmp_path):
    """build unseen -> adapt (embeddings, then all) -> evaluate -> vote -> submission.json scored."""
    root, chal = setting
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}",
                                  f"output_dir={tmp_path / 'r'}", f"init_from={root / 'run'}",
                                  "adapt.trains=embeddings_then_all", "adapt.embedding_steps=1",
                                  "train.max_steps=2", "train.time_budget=5"])
    assert rc == 0
    _evaluate(tmp_path / "r", root / "unseen", tmp_path / "ev")
    sub = json.loads((tmp_path / "ev" / "submission.json").read_text())
    assert sorted(sub) == ["new00", "new01"] and all(len(v) == 1 for v in sub.values())
    sol = {k: v for k, v in load_solutions(str(chal).replace("_challenges", "_solutions")).items() if k in sub}
    ours = json.loads((tmp_path / "ev" / "pass_at_k.json").read_text())
    assert ours["arc_prize"]["2"] == pytest.approx(arc_prize_score(sub, sol).percent)


@pytest.mark.parametrize("name", ["trm", "urm"])
def test_trm_and_urm_checkpoints_adapt(tmp_path, setting, name):
    from tests.test_urm_model import URM_TINY_OVERRIDES

    root, _ = setting
    base = [*(TRM_TINY_OVERRIDES if name == "trm" else URM_TINY_OVERRIDES), *FAST]
    assert run_subcommand("train", [*base, f"data_dir={root / 'pre'}", f"output_dir={tmp_path / 't'}",
                                    "train.max_steps=1", "train.ema=true"]) == 0
    assert run_subcommand("train", [*base, f"data_dir={root / 'unseen'}", f"output_dir={tmp_path / 'ta'}",
                                    f"init_from={tmp_path / 't'}", "train.max_steps=1"]) == 0
    adapted = load_model(tmp_path / "ta")
    assert adapted.config.name == name and adapted.puzzle_names is not None


def test_bad_adapt_options(setting, tmp_path):
    root, _ = setting
    base = [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}", f"output_dir={tmp_path / 'x'}"]
    assert run_subcommand("train", [*base, "adapt.trains=embeddings_then_all"]) == 2  # needs embedding_steps
    assert run_subcommand("train", [*base, "adapt.new_rows=random"]) == 2
    assert run_subcommand("train", [*base, f"init_from={tmp_path / 'nope'}"]) == 2
    assert not (tmp_path / "x" / "checkpoints").exists()


def test_every_checkpoint_scored_on_a_validation_build(setting, tmp_path):
    """Checkpoint choice without the test inputs: adapt on the validation build (each task's last
    demonstration as its test pair), score every checkpoint, pass@K against the step."""
    root, chal = setting
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "pre"), holdout_tasks=["new00", "new01"],
                      holdout_dir=str(tmp_path / "unseen"), validation_dir=str(tmp_path / "val"), num_aug=1, seed=0,
                      progress=False))
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={tmp_path / 'val'}", f"output_dir={tmp_path / 'r'}",
                                  f"init_from={root / 'run'}", "train.max_steps=2", "checkpoint.every=1",
                                  "train.epochs_per_iter=4"])
    assert rc == 0
    rc = run_subcommand("evaluate", [f"checkpoint={tmp_path / 'r'}", f"data_dir={tmp_path / 'val'}",
                                     f"output_dir={tmp_path / 'curve'}", "all_checkpoints=true", "progress=false",
                                     "global_batch_size=4", "device=cpu", "report=false"])
    assert rc == 0
    rows = json.loads((tmp_path / "curve" / "curve.json").read_text())
    assert [r["step"] for r in rows] == [1, 2] and all(r["hrm@2"] is not None for r in rows)
    assert (tmp_path / "curve" / "curve.png").stat().st_size > 0
    assert (tmp_path / "curve" / "step_1" / "submission.json").is_file()


def test_kaggle_setting_challenges_alone(setting, tmp_path, capsys):
    """The hidden-test setting: a challenges file without solutions -> unlabelled build -> adapt (its
    evaluation has nothing to score) -> evaluate -> a submission over every task of the file."""
    root, _ = setting
    tasks = _tasks(1, 2, "new")
    chal = write_kaggle(tmp_path / "k", "arc-agi_test", tasks, solutions=False)
    build(BuildConfig(sources=[str(chal)], output_dir=str(tmp_path / "u"), test_labels="optional", num_aug=1,
                      seed=0, progress=False))
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={tmp_path / 'u'}", f"output_dir={tmp_path / 'r'}",
                                  f"init_from={root / 'run'}", "train.max_steps=1", "eval.every=1"])
    assert rc == 0 and "no labelled examples; nothing to score" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["last_eval"] is None
    rc = run_subcommand("evaluate", [f"checkpoint={tmp_path / 'r'}", f"data_dir={tmp_path / 'u'}",
                                     f"output_dir={tmp_path / 'e'}", f"challenges={chal}", "progress=false",
                                     "global_batch_size=4", "device=cpu", "report=false"])
    assert rc == 0
    sub = json.loads((tmp_path / "e" / "submission.json").read_text())
    assert list(sub) == list(tasks) and all(len(sub[k]) == len(t["test"]) for k, t in tasks.items())


def test_official_hrm_checkpoint_adapts_by_the_names_given(setting, tmp_path):
    """An official HRM step_N (+ all_config.yaml) records no names: adapt.identifiers gives them."""
    from tests.test_hrm_checkpoint import ARCH, write_official

    root, _ = setting
    names = json.loads((root / "pre" / "identifiers.json").read_text())
    path, model = write_official(tmp_path, arch=dict(ARCH, forward_dtype="float32"), seq_len=900, num_ids=len(names))
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'pre'}", f"output_dir={tmp_path / 'o'}",
                                  f"init_from={path}", f"adapt.identifiers={root / 'pre' / 'identifiers.json'}",
                                  "train.time_budget=0", "train.max_steps=3"])
    assert rc == 0
    adapted = load_model(tmp_path / "o").model.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(adapted[k], v), k  # every weight, every table row (all names known)


def test_optimizer_state_carried_only_when_asked(setting, tmp_path):
    root, _ = setting
    base = [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}", f"init_from={root / 'run'}", "train.time_budget=0"]
    assert run_subcommand("train", [*base, f"output_dir={tmp_path / 'n'}"]) == 0
    assert run_subcommand("train", [*base, f"output_dir={tmp_path / 'y'}", "adapt.optimizer_state=true"]) == 0
    pre = ckpt.load(ckpt.latest(root / "run"))["optimizers"]["adam"]["state"]
    assert ckpt.load(ckpt.latest(tmp_path / "n"))["optimizers"]["adam"]["state"] == {}
    carried = ckpt.load(ckpt.latest(tmp_path / "y"))["optimizers"]["adam"]["state"]
    assert pre and set(carried) == set(pre)
    assert all(torch.equal(carried[k][n], pre[k][n]) for k in pre for n in pre[k] if torch.is_tensor(pre[k][n]))


def test_an_adapted_run_resumes(setting, tmp_path):
    """Everything else is the normal trainer: stop_after, then resume=true continues to the end."""
    root, _ = setting
    base = [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}", f"output_dir={tmp_path / 'r'}",
            f"init_from={root / 'run'}", "adapt.old_rows=keep", "train.max_steps=2"]
    assert run_subcommand("train", [*base, "train.stop_after=1"]) == 0
    assert run_subcommand("train", [*base, "resume=true"]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert load_model(tmp_path / "r").puzzle_names == load_model(tmp_path / "r" / "checkpoints" / "step_1.pt").puzzle_names


@pytest.mark.parametrize("trains", ["embeddings", "embeddings_then_all"])
def test_a_weight_average_over_a_frozen_network(setting, tmp_path, trains):
    """train.ema with a network frozen at the start (adapt.trains=embeddings: it stays frozen;
    embeddings_then_all: it trains after embedding_steps): the run trains (the average of a frozen
    network had no entries and its first update failed); a frozen weight's average is the weight,
    one that trains later is averaged from then on."""
    root, _ = setting
    extra = ["adapt.embedding_steps=1"] if trains == "embeddings_then_all" else []
    rc = run_subcommand("train", [*TINY_OVERRIDES, *FAST, f"data_dir={root / 'unseen'}", f"output_dir={tmp_path / 'e'}",
                                  f"init_from={root / 'run'}", f"adapt.trains={trains}", *extra, "train.ema=true",
                                  "train.max_steps=3"])
    assert rc == 0
    start = load_model(root / "run").model.state_dict()
    state = ckpt.load(ckpt.latest(tmp_path / "e"))
    shadow, weights = state["ema"]["shadow"], state["model"]
    dense = [n for n in shadow if n in start and n != "puzzle_emb.weights"]
    assert dense and set(shadow) >= set(dense)
    moved = [n for n in dense if not torch.equal(shadow[n], start[n])]
    if trains == "embeddings":
        assert not moved  # frozen throughout: the average is the start's weight, bit for bit
    else:
        assert moved and all(not torch.equal(shadow[n], weights[n]) for n in moved)  # averaged, not copied
