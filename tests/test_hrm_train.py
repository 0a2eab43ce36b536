"""`hrm-deeploop train` end to end on tiny synthetic data (CPU): learning, bit-exact resume after a
crash, divergence handling, bad input, 2-process gloo gradients, experiment configs."""

import socket
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from tests.hrm_helpers import ddp_grads_worker, make_dataset, read_metrics, straight_and_resumed, train_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("hrmdata"), num_tasks=4, num_aug=1, train_per_puzzle=3,
                        test_per_puzzle=1, canvas=4)


def test_tiny_run_learns(monkeypatch, tmp_path, data):
    rc = train_cli(monkeypatch, data, tmp_path / "run", "train.max_steps=120", "optim.lr=3e-3",
                   "eval.every=120", "checkpoint.every=0")
    assert rc == 0
    rows = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    first = sum(r["train/lm_loss"] for r in rows[:10]) / 10
    last = sum(r["train/lm_loss"] for r in rows[-10:]) / 10
    assert last < 0.6 * first, (first, last)
    exact_first = sum(r["train/exact_accuracy"] for r in rows[:20])
    exact_last = sum(r["train/exact_accuracy"] for r in rows[-20:]) / 20
    assert exact_first == 0 and exact_last > 0.05, exact_last
    assert ckpt.list_checkpoints(tmp_path / "run")[-1][0] == 120
    assert any("eval/exact_accuracy" in r for r in read_metrics(tmp_path / "run"))


def test_resume_after_crash_is_bit_exact(monkeypatch, tmp_path, data):
    a, b = straight_and_resumed(monkeypatch, data, tmp_path, "model.halt_max_steps=3")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    sa, sb = a["optimizers"]["adam"]["state"], b["optimizers"]["adam"]["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)
    assert a["sampler"]["cursor"] == b["sampler"]["cursor"]
    assert torch.equal(a["local"]["carries"][0]["z_H"], b["local"]["carries"][0]["z_H"])
    # the metrics log of the resumed run has each step once
    steps = [r["step"] for r in read_metrics(tmp_path / "crashed") if "train/loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_non_finite_loss_stops_and_keeps_checkpoint(monkeypatch, tmp_path, data, capsys):
    import hrm_deeploop.training.reasoner as T

    real = T.act_loss
    calls = {"n": 0}

    def poisoned(*a, **kw):
        loss, m = real(*a, **kw)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 3 else loss), m

    monkeypatch.setattr(T, "act_loss", poisoned)
    rc = train_cli(monkeypatch, data, tmp_path / "run", "train.max_steps=5", "checkpoint.every=1")
    assert rc != 0
    assert "step 3" in capsys.readouterr().err
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "run")] == [1, 2]
    ckpt.load(ckpt.step_path(tmp_path / "run", 2))  # intact


def test_bad_input(monkeypatch, tmp_path, data, capsys):
    def err(*overrides, out="run"):
        rc = train_cli(monkeypatch, data, tmp_path / out, "train.max_steps=1", *overrides)
        return rc, capsys.readouterr().err

    rc, e = err("train.max_stepz=3")
    assert rc != 0 and "max_stepz" in e
    rc, e = err("+train.max_stepz=3")
    assert rc != 0 and "max_stepz" in e
    rc, e = err(f"data_dir={tmp_path / 'nowhere'}")
    assert rc == 2 and "nowhere" in e
    rc, e = err("model.vocab_size=13")
    assert rc == 2 and "vocab_size" in e
    # half-written dataset: train/ without its index arrays
    broken = make_dataset(tmp_path / "broken", num_tasks=1, canvas=4)
    (broken / "train" / "all__puzzle_indices.npy").unlink()
    rc, e = err(f"data_dir={broken}")
    assert rc == 2 and "train" in e
    # a finished run: no overwrite without resume; architecture change on resume; corrupt checkpoint
    assert err("checkpoint.every=1", out="done")[0] == 0
    rc, e = err(out="done")
    assert rc == 2 and "resume=true" in e
    rc, e = err("resume=true", "model.hidden_size=64", out="done")
    assert rc == 2 and "model.hidden_size" in e
    path = ckpt.step_path(tmp_path / "done", 1)
    path.write_bytes(path.read_bytes()[:1000])
    rc, e = err("resume=true", "train.max_steps=2", out="done")
    assert rc == 2 and "step_1.pt" in e and "corrupt" in e
    assert path.stat().st_size == 1000 and not ckpt.step_path(tmp_path / "done", 2).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_gradients_equal_one_process(tmp_path, data):
    import torch.multiprocessing as mp

    runs = {"w1": (1, 1), "w1_accum2": (1, 2), "w2": (2, 1)}
    out = {}
    for name, (world, accum) in runs.items():
        f = tmp_path / f"{name}.pt"
        if world == 1:  # in-process: no process group
            ddp_grads_worker(0, 1, 0, str(data), str(f), accum)
        else:
            mp.spawn(ddp_grads_worker, args=(world, _free_port(), str(data), str(f), accum), nprocs=world, join=True)
        out[name] = ckpt.load(f)
    ref = out["w1"]
    for name in ("w1_accum2", "w2"):
        for k, g in ref["grads"].items():
            torch.testing.assert_close(out[name]["grads"][k], g, atol=1e-6, rtol=1e-5, msg=f"{name} {k}")
        assert torch.equal(out[name]["table"], ref["table"])
        torch.testing.assert_close(out[name]["sums"], ref["sums"])


@pytest.mark.slow  # the default suite under 10 minutes: run by .ci/run after it
def test_two_process_gloo_compiled_equals_one_process_eager(tmp_path, data):
    """train.compile under DDP (2 gloo ranks) gives the eager single-process gradients. The puzzle
    table after SignSGD is compared loosely: sign() of a row gradient within rounding of 0 may flip
    between compiled and eager kernels."""
    import torch.multiprocessing as mp

    eager, comp = tmp_path / "eager.pt", tmp_path / "compiled.pt"
    ddp_grads_worker(0, 1, 0, str(data), str(eager), 1)
    mp.spawn(ddp_grads_worker, args=(2, _free_port(), str(data), str(comp), 1, True), nprocs=2, join=True)
    ref, out = ckpt.load(eager), ckpt.load(comp)
    for k, g in ref["grads"].items():
        torch.testing.assert_close(out["grads"][k], g, atol=1e-5, rtol=1e-4, msg=k)
    changed = ref["table"] != 0  # rows updated by SignSGD (the table starts at 0)
    assert changed.sum() > 0
    assert (out["table"] != ref["table"]).float().mean() < 1e-3
    torch.testing.assert_close(out["sums"], ref["sums"])


def test_experiment_configs_compose():
    from hrm_deeploop.cli import compose

    runs = (("arc1_hrm_baseline", "baseline", "data/arc-aug-1000"), ("arc1_hrm_deeploop", "deeploop", "data/arc-aug-1000"),
            ("arc2_hrm_baseline", "baseline", "data/arc-2-aug-1000"), ("arc2_hrm_deeploop", "deeploop", "data/arc-2-aug-1000"))
    for name, scheme, data_dir in runs:
        t = compose("train", [f"experiment={name}"])
        m, s = t.model, t.scaling
        assert s.scheme == scheme and t.data_dir == data_dir and m.hidden_size == 512 and m.halt_max_steps == 16 and t.train.compile
        assert t.train.global_batch_size == 768 and t.train.epochs == 100000 and t.train.epochs_per_iter == 10000
        assert t.eval.interval_epochs == 10000 and t.optim.lr == 1e-4 and t.optim.puzzle_emb_lr == 1e-2
        assert (t.optim.beta1, t.optim.beta2, t.optim.weight_decay, t.optim.warmup_steps) == (0.9, 0.95, 0.1, 2000)
        assert (t.optim.min_lr_ratio, t.checkpoint.at_eval, t.run_name) == (1.0, True, name)
    t = compose("train", ["experiment=hrm_tiny_cpu"])
    assert t.model.hidden_size == 64 and t.device == "cpu"


def test_compiled_train_step_matches_eager():
    """train.compile=true compiles forward + ACT loss as one graph: same losses, grads and weights
    as eager over ACT steps that halt and reload slots (fp32 on CPU; tolerance for fused kernels)."""
    from dataclasses import replace

    from benchmarks.bench_hrm import PRESETS
    from benchmarks.reasoner_setup import make_trainer, random_batches
    from hrm_deeploop.models.scaling import ScalingConfig

    cfg = replace(PRESETS["tiny"]["model"], num_puzzle_identifiers=8, seq_len=16)
    batches = random_batches(cfg, 4, 3, torch.device("cpu"), seed=3)
    runs = {}
    for compile_ in (False, True):
        trainer = make_trainer(cfg, ScalingConfig(scheme="deeploop"), torch.device("cpu"), 4, compile_)
        metrics = [trainer.train_step(tensors=b) for b in batches]
        runs[compile_] = (metrics, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
    torch._dynamo.reset()
    (m_eager, sd_eager), (m_comp, sd_comp) = runs[False], runs[True]
    for a, b in zip(m_eager, m_comp):
        for key in ("loss", "lm_loss", "grad_norm", "puzzle_grad_norm", "count", "steps"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    for k in sd_eager:
        torch.testing.assert_close(sd_comp[k], sd_eager[k], rtol=1e-4, atol=1e-5, msg=k)
    assert any(m["count"] > 0 for m in m_eager)  # some slot halted (the ACT reload path ran)


def _rank0_error_worker(rank: int, world: int, port: int, data_dir: str, out_dir: str, result_dir: str) -> None:
    import os

    from tests.hrm_helpers import TINY_OVERRIDES, stand_in_open_split

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), WANDB_MODE="disabled")
    torch.set_num_threads(1)
    import hrm_deeploop.data.batches

    hrm_deeploop.data.batches.open_split = stand_in_open_split
    from hrm_deeploop.cli import run_subcommand

    rc = run_subcommand("train", [*TINY_OVERRIDES, f"data_dir={data_dir}", f"output_dir={out_dir}"])
    Path(result_dir, f"rank{rank}").write_text(str(rc))


def test_run_folder_error_on_rank0_reaches_every_rank(tmp_path, data):
    """A folder that already holds checkpoints (no resume=true): rank 0 refuses it, and rank 1
    prints the same error and exits instead of waiting on a collective."""
    import torch.multiprocessing as mp

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_5.pt").write_bytes(b"x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank0_error_worker, args=(2, port, str(data), str(run), str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["2", "2"]


def test_progress_bar_shows_the_last_real_accuracy():
    """Steps where no sequence halted have no accuracy: the bar keeps the last real one."""
    from hrm_deeploop.training.reasoner import Trainer

    t = Trainer.__new__(Trainer)
    t._shown = {}
    assert t.progress({"loss": 1.0, "count": 0.0, "accuracy": 0.0, "exact_accuracy": 0.0, "steps": 0.0}) == {
        "loss": "1.0000"}
    halted = {"loss": 0.5, "count": 3.0, "accuracy": 0.75, "exact_accuracy": 0.25, "steps": 2.0}
    assert t.progress(halted)["acc"] == "0.750"
    quiet = t.progress({"loss": 0.4, "count": 0.0, "accuracy": 0.0, "exact_accuracy": 0.0, "steps": 0.0})
    assert quiet == {"loss": "0.4000", "acc": "0.750", "exact": "0.250", "steps": "2.0"}
