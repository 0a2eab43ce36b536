"""Many copies at once on CUDA (`ttt views=official official.copies=K`): `copies=0`'s probe reads the
allocator's peak and predicts a larger K's peak; the lanes train what the one-at-a-time loop trains
(dropout 0: the arithmetic alone); a copy's dropout draws the lone `F.dropout`'s masks (on CUDA its
fused kernel's); the whole command with copies=0 on CUDA.
Each test runs on the CPU too (marked slow: the same code, where the lanes are bit-identical), so
that what the GPU runs was run here; benchmarks/gpu_ttt.sh runs the CUDA ones on a lent GPU."""

import json
from collections import deque

import pytest
import torch

from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.models.loopvit_config import flavour
from hrm_deeploop.pertask import sizing
from hrm_deeploop.pertask.batched import AUTO_MAX, Engine, Job
from hrm_deeploop.pertask.copies import probe_step
from hrm_deeploop.pertask.official_ttt import run_task
from tests.test_pertask_copies import A, B, _official_file, _tasks, _views

DEVICES = [pytest.param("cpu", marks=pytest.mark.slow), pytest.param("cuda", marks=pytest.mark.gpu)]


def _start(dropout):
    torch.manual_seed(0)
    return LoopViT(flavour("tiny", block="vanilla", num_tasks=6, dropout=dropout))


@pytest.mark.parametrize("device", DEVICES)
def test_the_probe_reads_the_devices_peak_and_predicts_four_copies(device):
    dev = torch.device(device)
    start = _start(0.1)
    step_k = lambda k, _: probe_step(start, k, dev, 8, 3e-4)  # noqa: E731
    meter = sizing.Meter(dev)
    fp = sizing.measure(step_k, dev, meter)
    assert fp is not None and fp.most is None
    assert ("CUDA allocator peak" if dev.type == "cuda" else "peak RSS") in fp.how
    one, two = fp.peaks
    assert 0 < one < two and fp.per_copy >= two - one
    k = sizing.choose(fp, meter.free, AUTO_MAX[dev.type], 400, dev, "official.copies=0")
    assert 1 <= k <= AUTO_MAX[dev.type]
    if dev.type == "cuda":  # the allocator counts bytes exactly: four copies' peak on the probe's line
        meter.reset()
        step_k(4, None)
        four = meter.peak()
        assert 0.8 * (fp.fixed + 4 * fp.per_copy) <= four <= 1.25 * (fp.fixed + 4 * fp.per_copy), (four, fp)


@pytest.mark.parametrize("device", DEVICES)
def test_the_lanes_train_what_one_at_a_time_trains_at_dropout_0(device):
    """Two tasks of different sizes as batch-mates (K = 2) against each alone: the same step counts and
    losses (CPU: bit for bit; CUDA: batched against single matmuls, within 1e-4 of the first step's
    loss and 1e-2 of the last), the same attempts on the CPU."""
    dev = torch.device(device)
    kw = dict(epochs=2, batch=8, lr=3e-4, runs=2, passes=2, pool=True, poe=True, seed=0)
    model = _start(0.0)
    one = {t: run_task(model, _views(Job(t, task)), task, device=dev, **kw) for t, task in (("a", A), ("b", B))}
    many: dict = {}
    Engine(model, 2, dev, views_of=_views, **kw).run(deque([Job("a", A), Job("b", B)]),
                                                     lambda j, r, e: many.__setitem__(j.tid, r or e))
    for t in ("a", "b"):
        assert isinstance(many[t], dict), many[t]
        for x, y in zip(one[t]["runs"], many[t]["runs"]):
            assert x["steps"] == y["steps"]
            if dev.type == "cpu":
                assert (x["first_loss"], x["last_loss"]) == (y["first_loss"], y["last_loss"])
            else:
                assert x["first_loss"] == pytest.approx(y["first_loss"], rel=1e-4)
                assert x["last_loss"] == pytest.approx(y["last_loss"], rel=1e-2)
        if dev.type == "cpu":
            assert one[t]["attempts"] == many[t]["attempts"]


@pytest.mark.parametrize("device", DEVICES)
def test_ttt_copies_0_on_the_device_sizes_from_its_peak_and_writes_every_task(tmp_path, device, capsys):
    from tests.arc_synth import write_kaggle

    ckpt = _official_file(tmp_path / "loop_vit_base.pt")
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(3), solutions=False)
    out = tmp_path / "o"
    assert run_subcommand("ttt", [f"checkpoint={ckpt}", f"challenges={chal}", f"output_dir={out}", "views=official",
                                  "official.epochs=1", "official.perms=0", "official.copies=0", "passes=2",
                                  "workers=1", "threads=1", f"device={device}", "progress=false",
                                  "protocol=transductive"]) == 0
    said = capsys.readouterr()
    line = [x for x in (said.out + said.err).splitlines() if "official.copies=0: K = " in x]
    assert line and ("CUDA allocator peak" if device == "cuda" else "peak RSS") in line[0], said.out[-2000:]
    assert "K = 3 (the tasks to run)" in line[0]
    for t in ("t00", "t01", "t02"):
        res = json.loads((out / "tasks" / t / "result.json").read_text())
        assert res.get("status", "ok") != "failed" and res["steps"] > 0, res


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("shape", [(8, 37, 64), (3, 5, 7)])
def test_a_copys_dropout_is_the_lone_dropouts_mask_for_mask(device, shape):
    """Three copies under vmap, each its generator seeded as the lone loop seeds the global one:
    copy k's outputs and input gradients of two dropouts in a row are `F.dropout`'s with
    `torch.manual_seed(seeds[k])`, bit for bit (the CPU: bernoulli_; CUDA: the fused kernel)."""
    from torch.func import vmap

    from hrm_deeploop.pertask import copies

    dev, seeds, p = torch.device(device), [3, 11, 3], 0.1
    xs = torch.randn(len(seeds), *shape, generator=torch.Generator().manual_seed(0)).to(dev)
    lone_out, lone_grad = [], []
    for k, s in enumerate(seeds):
        torch.manual_seed(s)
        x = xs[k].clone().requires_grad_(True)
        y = torch.nn.functional.dropout(torch.nn.functional.dropout(x, p, True) * 1.5, p, True)
        y.sum().backward()
        lone_out.append(y.detach())
        lone_grad.append(x.grad)
    copies.GENERATORS[:] = [torch.Generator(device=dev).manual_seed(s) for s in seeds]
    drop = copies.CopyDropout(p)

    def one(x, lane):
        drop.lane = lane
        return drop(drop(x) * 1.5)

    x = xs.clone().requires_grad_(True)
    y = vmap(one, randomness="error")(x, torch.arange(len(seeds), device=dev))
    y.sum().backward()
    for k in range(len(seeds)):
        assert torch.equal(y[k].detach(), lone_out[k]) and torch.equal(x.grad[k], lone_grad[k]), k
    assert torch.equal(y[0].ne(0), y[2].ne(0)) and not torch.equal(y[0].ne(0), y[1].ne(0))  # a mask per seed
