"""Generation with the looped GPT: KV caches against the full forward, seeded sampling, adaptive
exit, random depth in training, DeepLoop's N when R varies, and the `generate` command."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hrm_deeploop.models.gpt import GPT, ExitRule
from hrm_deeploop.models.rounds import DepthConfig
from hrm_deeploop.models.scaling import ScalingConfig, alpha_beta
from hrm_deeploop.text.generate import Sampling, generate_tokens, sample_next
from tests.gpt_helpers import one_thread, tiny_model  # noqa: F401 - autouse fixture

DEEPLOOP = ScalingConfig(scheme="deeploop")


def model_r3(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(tiny_model(num_rounds=3, **kw), DEEPLOOP).eval()


def cached_logits(model: GPT, idx: torch.Tensor, prefill: int, share_rounds: bool = False,
                  exit: ExitRule | None = None) -> torch.Tensor:
    """Logits of every position: the first `prefill` in one step, then one token per step."""
    cache = model.new_cache(idx.shape[0], share_rounds=share_rounds)
    outs = [model.decode(idx[:, :prefill], cache, exit=exit)[0]]
    outs += [model.decode(idx[:, t:t + 1], cache, exit=exit)[0] for t in range(prefill, idx.shape[1])]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("scheme", ["baseline", "deeploop", "looped_eps"])
def test_per_round_cache_gives_the_full_forward_logits(scheme):
    torch.manual_seed(0)
    model = GPT(tiny_model(num_rounds=3), ScalingConfig(scheme=scheme)).eval()
    idx = torch.randint(0, 64, (2, 24))
    with torch.no_grad():
        full = model(idx)
    assert torch.equal(model.decode(idx)[0], full)  # no cache, no exit: forward's own computation
    for prefill in (1, 7):
        torch.testing.assert_close(cached_logits(model, idx, prefill), full, rtol=1e-5, atol=1e-5)


def test_shared_cache_is_exact_at_one_round_and_approximate_beyond():
    idx = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    r1 = GPT(tiny_model(num_rounds=1), DEEPLOOP).eval()
    torch.testing.assert_close(cached_logits(r1, idx, 4, share_rounds=True), r1(idx).detach(), rtol=1e-5, atol=1e-5)
    torch.manual_seed(0)
    model = GPT(tiny_model(num_rounds=3), ScalingConfig(scheme="baseline")).eval()  # beta = 1: rounds differ more
    with torch.no_grad():
        full = model(idx)
    shared = cached_logits(model, idx, 4, share_rounds=True)
    torch.testing.assert_close(shared[:, :4], full[:, :4], rtol=1e-5, atol=1e-5)  # the prefill is exact
    assert (shared[:, 4:] - full[:, 4:]).abs().max() > 1e-4  # later tokens read last-round keys
    # memory: one slot per block instead of one per (block, round)
    per_round, one = model.new_cache(2), model.new_cache(2, share_rounds=True)
    model.decode(idx[:, :4], per_round), model.decode(idx[:, :4], one)
    assert per_round.nbytes() == 3 * one.nbytes() > 0


def test_seeded_sampling_is_reproducible_and_the_seed_matters():
    model = model_r3()
    prompt = torch.tensor([[1, 2, 3]])

    def sample(seed, **kw):
        g = torch.Generator().manual_seed(seed)
        return [int(t) for t in generate_tokens(model, prompt, 12, Sampling(1.0, **kw), g)]

    assert sample(5) == sample(5) and sample(5, top_k=8, top_p=0.9) == sample(5, top_k=8, top_p=0.9)
    assert sample(5) != sample(6)
    g = torch.Generator().manual_seed(0)
    cached = [int(t) for t in generate_tokens(model, prompt, 12, Sampling(0.0), g)]
    uncached = [int(t) for t in generate_tokens(model, prompt, 12, Sampling(0.0), g, cache="none")]
    assert cached == uncached  # greedy: the per-round cache changes nothing


def test_top_k_and_top_p_keep_only_the_likeliest_ids():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    assert {int(sample_next(logits, Sampling(1.0, top_k=2), g)) for _ in range(200)} == {1, 2}
    probs = logits.softmax(-1)[0]  # p(1) = 0.64, p(2) = 0.24: top_p 0.7 keeps ids 1 and 2
    assert float(probs[1]) < 0.7 < float(probs[1] + probs[2])
    assert {int(sample_next(logits, Sampling(1.0, top_p=0.7), g)) for _ in range(200)} == {1, 2}
    assert int(sample_next(logits, Sampling(0.0), g)) == 1


@pytest.mark.parametrize("criterion", ["kl", "hidden"])
def test_adaptive_exit_uses_fewer_rounds_and_the_cache_agrees(criterion):
    torch.manual_seed(0)
    model = GPT(tiny_model(num_rounds=3), ScalingConfig(scheme="baseline")).eval()
    idx = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(2))
    tiny = ExitRule(criterion, float(_changes(model, idx, criterion).min()) / 2)
    logits, used = model.decode(idx, exit=tiny)
    torch.testing.assert_close(logits, model(idx).detach(), rtol=1e-5, atol=1e-5)  # nothing exits
    assert int(used.min()) == 3
    loose = ExitRule(criterion, 1e3)  # everything exits after the second round
    logits, used = model.decode(idx, exit=loose)
    assert bool((used == 2).all())
    torch.testing.assert_close(logits, model(idx, num_rounds=2).detach(), rtol=1e-5, atol=1e-5)
    # cached decoding with exit (later rounds' slots filled from the frozen stream) = uncached exit
    mid = ExitRule(criterion, float(torch.quantile(_changes(model, idx, criterion), 0.5)))
    logits, used = model.decode(idx, exit=mid)
    assert 2 <= float(used.float().mean()) < 3
    torch.testing.assert_close(cached_logits(model, idx, 5, exit=mid), logits, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def _changes(model: GPT, idx: torch.Tensor, criterion: str) -> torch.Tensor:
    """The change between rounds 2 and 3 of every position (to pick a threshold in the middle)."""
    rule = ExitRule(criterion, 1.0)
    with torch.no_grad():
        x2, x3 = (model.core(model.embed_norm(model.embed_tokens(idx)), rope=model.rotary(idx.shape[1]),
                             num_rounds=r) for r in (2, 3))
    if criterion == "kl":
        x2, x3 = (model._logits(x).float().log_softmax(-1) for x in (x2, x3))
    return rule.change(x3, x2).flatten()


def test_depth_samplers_are_functions_of_seed_and_step():
    fixed = DepthConfig()
    assert fixed.rounds_at(7, 0, 3) == 3 and not fixed.varies and fixed.scaling_rounds(3) is None
    uni = DepthConfig(sampler="uniform", min_rounds=2, max_rounds=5)
    draws = [uni.rounds_at(s, 0, 3) for s in range(400)]
    assert set(draws) == {2, 3, 4, 5} and draws == [uni.rounds_at(s, 0, 3) for s in range(400)]
    assert draws != [uni.rounds_at(s, 1, 3) for s in range(400)]
    pois = DepthConfig(sampler="lognormal_poisson", mean_rounds=4.0)
    draws = np.array([pois.rounds_at(s, 0, 3) for s in range(4000)])
    assert draws.min() >= 1 and abs(draws.mean() - 4.0) < 0.15 and draws.max() > 8  # heavy tail
    sched = DepthConfig(sampler="schedule", schedule_steps=[0, 10, 20], schedule_rounds=[1, 2, 4])
    assert [sched.rounds_at(s, 0, 3) for s in (1, 9, 10, 25)] == [1, 1, 2, 4]
    assert sched.mean(4, total_steps=40) == pytest.approx((10 * 1 + 10 * 2 + 20 * 4) / 40)


def test_deeploop_n_when_r_varies():
    uni = dict(sampler="uniform", min_rounds=1, max_rounds=5)
    cfg = tiny_model(num_rounds=3)  # K = 2
    for scaling_n, rounds in (("fixed", 3), ("mean", 3.0), ("max", 5)):
        r = DepthConfig(**uni, scaling_n=scaling_n).scaling_rounds(3)
        model = GPT(cfg, DEEPLOOP, scaling_rounds=r)
        assert (model.residual.alpha, model.residual.beta) == pytest.approx(alpha_beta("deeploop", 2 * rounds))
    pois = DepthConfig(sampler="lognormal_poisson", mean_rounds=2.5, scaling_n="mean")
    model = GPT(cfg, DEEPLOOP, scaling_rounds=pois.scaling_rounds(3))
    assert model.residual.alpha == pytest.approx((2 * 2 * 2.5) ** 0.5)  # N = K * E[R] = 5, not an integer R
    with pytest.raises(Exception, match="depth.max_rounds"):
        DepthConfig(sampler="lognormal_poisson", scaling_n="max")


def test_backprop_through_the_last_rounds_only():
    model = model_r3()
    model.train()
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    y = torch.roll(idx, -1, 1)

    def grads(k):
        model.zero_grad()
        model(idx, y, backprop_rounds=k)[1].backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    full, last2, last1 = grads(None), grads(3), grads(1)
    assert all(torch.equal(full[n], last2[n]) for n in full)  # k >= R: the whole loop
    assert "embed_tokens.weight" in last1  # the tied head still learns
    assert "embed_norm.weight" not in last1  # the input path is cut by the no_grad rounds
    differs = [n for n in last1 if not torch.allclose(full[n], last1[n])]
    assert any(n.startswith("core.layers") for n in differs)
    # the truncated gradient is that of the last round fed a detached input
    with torch.no_grad():
        x0 = model.core(model.embed_norm(model.embed_tokens(idx)), rope=model.rotary(16), num_rounds=2)
    model.zero_grad()
    x = model.core(x0, rope=model.rotary(16), num_rounds=1)
    torch.nn.functional.cross_entropy(model._logits(x).flatten(0, 1), y.flatten()).backward()
    for n, p in model.named_parameters():
        if n.startswith("core.layers"):
            torch.testing.assert_close(p.grad, last1[n], rtol=1e-5, atol=1e-6)


def test_depth_in_training_default_unchanged_and_random_r_differs(tmp_path):
    """depth.* at its defaults calls the model as before; a schedule that always gives the model's R
    (the keyword path) yields the same weights bit for bit; a random R gives others, and the metrics
    log each step's R."""
    import json

    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.training import lm as train_gpt
    from tests.gpt_helpers import array_data, patterned_tokens, tiny_train_cfg

    stream = patterned_tokens(12_000, seed=0)

    def run(name, **depth):
        cfg = tiny_train_cfg(str(tmp_path / name), tiny_model(num_rounds=2), DEEPLOOP, max_steps=6,
                             eval_every=6, checkpoint_every=6, depth=depth)
        train_gpt.train(cfg, data=array_data(stream[:10_000], stream[10_000:], 32, 4))
        return ckpt.load(ckpt.step_path(tmp_path / name, 6))["model"], tmp_path / name

    base, _ = run("default")
    same, _ = run("schedule", sampler="schedule", schedule_steps=[0], schedule_rounds=[2])
    assert all(torch.equal(base[k], same[k]) for k in base)
    varied, folder = run("uniform", sampler="uniform", min_rounds=1, max_rounds=4, backprop_rounds=2)
    assert not all(torch.equal(base[k], varied[k]) for k in base)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    logged = [int(r["train/rounds"]) for r in rows if "train/rounds" in r]
    cfg = DepthConfig(sampler="uniform", min_rounds=1, max_rounds=4)
    assert logged == [cfg.rounds_at(r["step"], 0, 2) for r in rows if "train/rounds" in r] and logged


# ---- through the CLI: a byte-level run with random depth, then eval-gpt exit= and generate -------------

@pytest.fixture(scope="module")
def byte_run(tmp_path_factory):
    from hrm_deeploop.cli import main
    from hrm_deeploop.text.shards import write_meta, write_shard

    root = tmp_path_factory.mktemp("bytes")
    text = ("the cat sat on the mat. the dog sat on the log. " * 80).encode()
    stream = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    write_shard(root / "train_000000.bin", stream[:3200])
    write_shard(root / "val_000000.bin", stream[3200:])
    write_meta(root, tokenizer_id="bytes")
    run = root / "run"
    assert main(["train-gpt", "model=gpt_tiny", "model.hidden_size=32", "model.seq_len=64", "model.mlp_multiple=16",
                 "model.vocab_size=320", "model.num_rounds=2", "scaling=deeploop", "device=cpu", "logger=none",
                 "train.progress=false", "train.micro_batch_size=4", "train.global_batch_tokens=256",
                 "optim.warmup_steps=1", "optim.lr=3e-3", "train.max_steps=6", "eval.every=6", "checkpoint.every=6",
                 f"data.train={root}/train_*.bin", f"data.val={root}/val_000000.bin", "data.tokenizer_id=bytes",
                 "depth.sampler=uniform", "depth.min_rounds=1", "depth.max_rounds=3", "depth.scaling_n=max",
                 "depth.backprop_rounds=2", f"output_dir={run}"]) == 0
    return root, run


def test_generate_cli_streams_seeded_text(byte_run, capsys):
    from hrm_deeploop.cli import main

    _, run = byte_run
    args = ["generate", f"checkpoint={run}", "prompt=the cat", "max_new_tokens=20", "temperature=1.0", "top_k=20",
            "top_p=0.95", "seed=3", "device=cpu", "stop_at_eot=false"]
    outs = []
    for extra in ([], [], ["cache=none"], ["seed=4"]):
        assert main(args + extra) == 0
        cap = capsys.readouterr()
        outs.append(cap.out)
        assert "tokens/s" in cap.err and "mean rounds 2.00" in cap.err
    assert outs[0].startswith("the cat") and len(outs[0].encode()) >= len("the cat") + 1
    assert outs[0] == outs[1] == outs[2]  # seeded; the cache changes nothing
    assert outs[3] != outs[0]
    assert main(args + ["exit=hidden", "exit_threshold=1e9", "num_rounds=3"]) == 0
    assert "R=3, mean rounds 2.00" in capsys.readouterr().err  # everything exits after round 2


def test_random_depth_checkpoint_keeps_its_alpha_and_eval_gpt_exit(byte_run, capsys):
    import json

    from hrm_deeploop.cli import main
    from hrm_deeploop.loading import load_model

    root, run = byte_run
    model = load_model(run / "checkpoints/step_6.pt", num_rounds=5).model
    assert model.residual.alpha == pytest.approx((2 * 2 * 3) ** 0.5)  # scaling_n=max: N = K * 3, whatever R runs
    assert main(["eval-gpt", f"checkpoint={run}", f"data={root}/val_000000.bin", "device=cpu", "exit=kl",
                 "exit_threshold=1e9", f"output_dir={root / 'ev'}"]) == 0
    result = json.loads((root / "ev/eval.json").read_text())
    assert result["mean_rounds"] == 2.0 and result["exit"] == {"criterion": "kl", "threshold": 1e9}
    assert main(["eval-gpt", f"checkpoint={run}", f"data={root}/val_000000.bin", "device=cpu",
                 f"output_dir={root / 'ev2'}"]) == 0
    plain = json.loads((root / "ev2/eval.json").read_text())
    assert result["val_loss"] == pytest.approx(plain["val_loss"], rel=1e-5)  # 2 rounds either way
    assert main(["eval-gpt", f"checkpoint={run}", f"data={root}/val_000000.bin", "device=cpu", "exit=hidden",
                 "exit_threshold=1e-12", "num_rounds=3", f"output_dir={root / 'ev3'}"]) == 0
    assert json.loads((root / "ev3/eval.json").read_text())["mean_rounds"] == 3.0  # nothing exits
    capsys.readouterr()


def test_the_resolved_scaling_rounds_are_stored_and_read_back(byte_run, tmp_path):
    """train-gpt stores the R its alpha/beta came from; a reader takes it rather than re-deriving it
    from the saved schedule (a checkpoint without it, from before, is still re-derived)."""
    import torch

    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.loading import load_model

    _, run = byte_run
    state = ckpt.load(run / "checkpoints/step_6.pt")
    assert state["scaling_rounds"] == 3  # depth.scaling_n=max of uniform 1..3
    state["config"]["depth"]["scaling_n"] = "fixed"  # a schedule that would now derive R = num_rounds = 2
    torch.save(state, tmp_path / "stored.pt")
    assert load_model(tmp_path / "stored.pt").model.residual.alpha == pytest.approx((2 * 2 * 3) ** 0.5)
    del state["scaling_rounds"]  # as written before: derived from the schedule
    torch.save(state, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").model.residual.alpha == pytest.approx((2 * 2 * 2) ** 0.5)


@pytest.mark.parametrize("args, culprit", [
    (["max_new_tokens=100"], "exceeds the model's context"),
    (["top_p=1.5"], "top_p"),
    (["cache=paged"], "cache"),
    (["exit=entropy"], "exit"),
])
def test_generate_cli_bad_input(byte_run, capsys, args, culprit):
    from hrm_deeploop.cli import main

    _, run = byte_run
    assert main(["generate", f"checkpoint={run}", "prompt=the cat", "device=cpu", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and culprit in err[0]


def test_bench_generate_runs(capsys):
    from benchmarks import bench_generate

    assert bench_generate.main(["--preset", "tiny", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cache=rounds" in out and "x none" in out and "shared (batch 2)" in out


RANDOM_DEPTH = {"sampler": "uniform", "min_rounds": 1, "max_rounds": 4, "backprop_rounds": 2}


def _depth_ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    import os

    from hrm_deeploop.training import lm as train_gpt
    from tests.gpt_helpers import array_data, patterned_tokens, tiny_train_cfg

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), WANDB_MODE="disabled")
    torch.set_num_threads(1)
    stream = patterned_tokens(12_000, seed=0)
    cfg = tiny_train_cfg(out, tiny_model(num_rounds=2), DEEPLOOP, max_steps=4, micro_batch_size=2, depth=RANDOM_DEPTH)
    train_gpt.train(cfg, data=array_data(stream, None, 32, 2, rank=rank, world_size=world))


def test_random_depth_under_ddp_matches_one_process(tmp_path):
    """2 gloo ranks x 2 sequences with R drawn per step (uniform 1..4, last 2 rounds on the tape) give
    the weights of 1 process x 4 sequences: every rank draws the same R from (seed, step)."""
    import socket

    import torch.multiprocessing as mp

    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.training import lm as train_gpt
    from tests.gpt_helpers import array_data, patterned_tokens, tiny_train_cfg

    stream = patterned_tokens(12_000, seed=0)
    single = tiny_train_cfg(str(tmp_path / "single"), tiny_model(num_rounds=2), DEEPLOOP, max_steps=4,
                            micro_batch_size=4, depth=RANDOM_DEPTH)
    train_gpt.train(single, data=array_data(stream, None, 32, 4))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_depth_ddp_worker, args=(2, port, str(tmp_path / "ddp")), nprocs=2, join=True,
                       start_method="spawn")
    a, b = (ckpt.load(ckpt.step_path(tmp_path / name, 4))["model"] for name in ("single", "ddp"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    assert {DepthConfig(**RANDOM_DEPTH).rounds_at(s, 0, 2) for s in range(1, 5)} != {2}  # R did vary
