"""K for `copies=0` / `official.copies=0` from a measured footprint (hrm_deeploop/pertask/sizing.py):
K follows the footprint and the memory (1 when little fits, the cap when much does); the probe
measures a copy at the run's shapes and touches nothing of the run (the start model, torch's
generator); a run with copies=0 gives the results of copies=K for the K it chose."""

import json
import re
from collections import deque

import pytest
import torch

from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.models.loopvit_config import flavour
from hrm_deeploop.pertask import batched, build_lanes, plan, sizing
from hrm_deeploop.pertask.copies import bytes_per_copy, param_bytes, probe_step
from hrm_deeploop.pertask.ttt_config import PerTaskConfig
from tests.test_pertask import pretrained  # noqa: F401 - the module's fixture: pre/ and two unseen tasks
from tests.test_pertask_build_lanes import _cfg, _strip, vit  # noqa: F401 - vit: a tiny LoopViT and four tasks

CPU = torch.device("cpu")
MIB = 2 ** 20
KEYS = ("ranked", "votes", "ranked_poe", "log_lik", "attempts", "attempts_poe", "runs")
LINE = re.compile(r"copies=0: K = (\d+) \(([^)]*)\): ([\d.]+) MiB a copy")


def test_k_follows_the_footprint_and_the_memory(capsys):
    fp = sizing.Footprint(per_copy=100 * MIB, fixed=50 * MIB, how="measured")
    assert sizing.choose(fp, 10 * MIB, 8, 20, CPU, "copies=0") == 1  # not even one fits: still one
    assert sizing.choose(fp, 2 * (50 + 3 * 100) * MIB, 8, 20, CPU, "copies=0") == 3  # half the memory for copies
    assert sizing.choose(fp, 2 * (50 + 3 * 100) * MIB - 1, 8, 20, CPU, "copies=0") == 2
    assert sizing.choose(fp, 1 << 40, 8, 20, CPU, "copies=0") == 8  # the cap
    assert sizing.choose(fp, 1 << 40, 8, 5, CPU, "copies=0") == 5  # the tasks to run
    lines = capsys.readouterr().out.splitlines()
    assert [LINE.search(x).group(2) for x in lines] == ["memory", "memory", "memory", "the cap for cpu", "the tasks to run"]
    assert "100.0 MiB a copy and 50.0 MiB fixed" in lines[0]


def _footprint(model: LoopViT, batch: int) -> sizing.Footprint:
    fp = sizing.measure(lambda k, _: probe_step(model, k, CPU, batch, 3e-4), CPU)
    assert fp is not None, "peak RSS not readable on this Linux machine"
    return fp


def test_the_probe_measures_a_copy_at_the_runs_shapes_and_touches_nothing():
    torch.manual_seed(0)
    m = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, image_size=16, dropout=0.1))
    before = {n: p.clone() for n, p in m.state_dict().items()}
    rng = torch.get_rng_state()
    small, large = _footprint(m, 2), _footprint(m, 32)
    assert torch.equal(torch.get_rng_state(), rng)  # dropout drew from the probe's own generators
    assert all(torch.equal(before[n], p) for n, p in m.state_dict().items())
    assert small.per_copy >= 4 * param_bytes(m)  # weights, gradients, two moments at the least
    assert large.per_copy > 3 * small.per_copy, (small, large)  # 16x the rows: the activations dominate


def test_a_probe_that_runs_out_of_memory_gives_one_copy(capsys):
    """Two copies that do not fit (the step raises MemoryError at K = 2): K = 1, and the line says why."""
    def step_k(k, _):
        if k == 2:
            raise MemoryError("two copies")
        torch.ones(1 << 16).sum()

    fp = sizing.measure(step_k, CPU)
    assert sizing.choose(fp, 1 << 40, 8, 20, CPU, "copies=0") == 1
    assert "K = 2 ran out of memory" in capsys.readouterr().out


def test_no_peak_reading_falls_back_to_the_estimate(monkeypatch, capsys):
    """Where /proc/self/clear_refs cannot be written, official.copies=0 says so and uses the estimate."""
    monkeypatch.setattr(sizing.Meter, "_clear", staticmethod(lambda: (_ for _ in ()).throw(OSError("no"))))
    m = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, dropout=0.1))
    cfg = PerTaskConfig(checkpoint="x", challenges="y", output_dir="z", views="official")
    monkeypatch.setattr(sizing, "available_cpu", lambda: 64 * MIB)
    want = int(32 * MIB // bytes_per_copy(m, cfg.official.batch))  # half of 64 MiB over the estimate
    assert 1 < want < 8 and batched.lanes_for(cfg, m, 20, CPU) == want
    out = capsys.readouterr().out
    assert "cannot be read here" in out and "estimated" in out


def _official_file(path):
    from tests.test_train_vit import _official_file as make

    make(path, "vanilla", num_tasks=400)
    return path


def _official(ckpt, chal, out, copies):
    from hrm_deeploop.cli import run_subcommand

    assert run_subcommand("ttt", [f"checkpoint={ckpt}", f"challenges={chal}", f"output_dir={out}", "views=official",
                                  "official.epochs=1", "official.perms=0", f"official.copies={copies}",
                                  "official.dropout=0.3", "passes=1", "workers=1", "threads=1", "device=cpu",
                                  "progress=false", "protocol=transductive"]) == 0
    return {t: plan.finished(out, t) for t in plan.load_challenges(chal)}


@pytest.mark.slow  # three runs of ttt (~30 s)
def test_official_copies_0_gives_the_results_of_the_k_it_chose(tmp_path, capsys, monkeypatch):
    """official.copies=0 on three tasks chooses K = 3 (the tasks to run): the same results as
    official.copies=3; with a fake small memory it chooses K = 1 (the lone loop): the same again."""
    from tests.arc_synth import write_kaggle
    from tests.test_pertask_copies import _tasks

    ckpt = _official_file(tmp_path / "loop_vit_base.pt")
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(3), solutions=False)
    auto = _official(ckpt, chal, tmp_path / "auto", 0)
    got = LINE.search(capsys.readouterr().out)
    assert got and got.group(1) == "3" and got.group(2) == "the tasks to run", got
    three = _official(ckpt, chal, tmp_path / "three", 3)
    for t in auto:
        assert json.dumps({k: auto[t][k] for k in KEYS}) == json.dumps({k: three[t][k] for k in KEYS}), t
    monkeypatch.setattr(sizing, "available_cpu", lambda: 1 * MIB)
    tight = _official(ckpt, chal, tmp_path / "tight", 0)
    got = LINE.search(capsys.readouterr().out)
    assert got and got.group(1) == "1" and got.group(2) == "memory", got
    for t in auto:
        assert json.dumps({k: auto[t][k] for k in KEYS}) == json.dumps({k: tight[t][k] for k in KEYS}), t


@pytest.mark.slow  # two sets of lanes and a probe (~40 s)
def test_build_copies_0_gives_the_results_of_the_k_it_chose(vit, tmp_path, capsys):  # noqa: F811
    """copies=0 over four tiny LoopViT tasks (one failing at its build): the probe's line, K = 4 (the
    cap on the CPU and the tasks to run), and every result equal to copies=4's; the probe's folder gone."""
    checkpoint, chal = vit
    counts = build_lanes.run_shard(_cfg(checkpoint, chal, tmp_path / "auto", copies=0), 0, 1)
    said = capsys.readouterr().out
    got = LINE.search(said)
    assert got and got.group(1) == "4", said
    assert counts.get("failed") == 1 and sum(counts.values()) == 4, said
    assert not list((tmp_path / "auto").glob(".probe-*"))
    build_lanes.run_shard(_cfg(checkpoint, chal, tmp_path / "four", copies=4), 0, 1)
    for tid in plan.load_challenges(chal):
        a, b = plan.finished(tmp_path / "auto", tid), plan.finished(tmp_path / "four", tid)
        if a["status"] == "failed":  # its reason names its own folder
            a, b = ({k: v for k, v in r.items() if k != "reason"} for r in (a, b))
        assert _strip(a) == _strip(b), tid


@pytest.mark.slow  # a probe on the tiny HRM (~15 s)
def test_build_probe_measures_the_reasoner_lanes(pretrained, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The HRM lanes' probe (ReasonerCopies opened twice on one probe trainer): a footprint; a fake
    small memory gives K = 1, a large one the CPU cap."""
    from hrm_deeploop import families, runtime

    root, chal = pretrained
    cfg = _cfg(root / "run", chal, tmp_path / "o", copies=0)
    assert build_lanes.lanes_for(cfg, 2) == 0
    tasks = plan.load_challenges(chal)
    cls = build_lanes.lanes_class(families.family("hrm"))
    env = runtime.setup("cpu")
    try:
        monkeypatch.setattr(sizing, "available_cpu", lambda: 1 * MIB)
        assert build_lanes.measured_lanes(cfg, tasks, deque(sorted(tasks) * 5), cls, env) == 1
        monkeypatch.setattr(sizing, "available_cpu", lambda: 1 << 40)
        assert build_lanes.measured_lanes(cfg, tasks, deque(sorted(tasks) * 5), cls, env) == build_lanes.AUTO_MAX["cpu"]
    finally:
        runtime.teardown()
    lines = [LINE.search(x) for x in capsys.readouterr().out.splitlines() if LINE.search(x)]
    assert [x.group(2) for x in lines] == ["memory", "the cap for cpu"] and float(lines[0].group(3)) > 1.0


@pytest.mark.slow  # a hybrid LoopViT trained (~10 s) and its probe
def test_build_copies_0_for_a_model_no_lane_holds_runs_one_at_a_time(pretrained, vit, tmp_path, capsys):  # noqa: F811
    """A hybrid LoopViT with dropout (inside SDPA: no lane draws it) takes no lane whatever its task:
    copies=0 says so and picks K = 1 (the pool's one task at a time), not a K whose lanes would each
    train alone."""
    from hrm_deeploop import families, runtime
    from tests.test_pertask_build_lanes import _vit

    hybrid = _vit(pretrained[0], tmp_path / "hybrid", "hybrid")
    chal = vit[1]
    cfg = _cfg(hybrid, chal, tmp_path / "o", copies=0)
    tasks = plan.load_challenges(chal)
    env = runtime.setup("cpu")
    try:
        lanes = build_lanes.lanes_class(families.of_checkpoint(cfg.checkpoint))  # as `ttt` finds them
        k = build_lanes.measured_lanes(cfg, tasks, deque(sorted(tasks)), lanes, env)
    finally:
        runtime.teardown()
    said = capsys.readouterr().out
    assert k == 1, said
    assert "copies=0: K = 1: this model takes no lane (attention dropout inside SDPA" in said, said
    assert not list((tmp_path / "o").glob(".probe-*"))


def test_what_the_worker_keeps_lowers_k(capsys):
    """copies=0 sets aside what the worker keeps between tasks whatever K (views=build's evaluation
    models and fresh records, `Reuse.most_kept` of the model's bytes): K is one less where those
    bytes take a copy's room; a real Reuse holding models of that size stays within them."""
    from hrm_deeploop.training.reuse import Reuse, model_bytes

    def model(rows: int) -> LoopViT:
        return LoopViT(flavour("tiny", block="vanilla", num_tasks=rows, image_size=16, dropout=0.1))

    one = model_bytes(model(12))
    assert one == 4 * sum(t.numel() for t in [*model(12).parameters(), *model(12).buffers()])  # float32
    reuse = Reuse()
    for rows in (12, 11, 12, 10, 9, 12, 8):  # keys of several table sizes, models handed back (more than KEEP)
        reuse.release(reuse.model(("vit", rows), 0, lambda rows=rows: model(rows), "cpu"))
    assert one < reuse.held_bytes() <= Reuse.most_kept(one, 7, handed_back=True)
    kept = Reuse.most_kept(one, 20, handed_back=False)
    fp = sizing.Footprint(per_copy=kept, fixed=3 * MIB, how="measured", kept=kept)
    room = 2 * (fp.fixed + 5 * fp.per_copy)  # five copies in half of it, with nothing kept
    assert sizing.choose(sizing.Footprint(kept, 3 * MIB, "measured"), room, 8, 20, CPU, "copies=0") == 5
    assert sizing.choose(fp, room, 8, 20, CPU, "copies=0") == 4
    assert f"{kept / MIB:.1f} MiB kept between tasks" in capsys.readouterr().out


@pytest.mark.slow  # a probe and two lanes over four tiny LoopViT tasks (~15 s)
def test_the_probe_counts_what_the_worker_keeps(vit, tmp_path):  # noqa: F811
    """The views=build probe's footprint sets aside the bytes the worker's Reuse keeps between tasks
    (its evaluation model, its fresh records); after a copies=2 run over four tasks the Reuse holds
    something (the evaluation model), never more than that, and no trainer's model is kept alive by
    it (the lanes never hand theirs back)."""
    import gc

    from hrm_deeploop import families, runtime
    from hrm_deeploop.pertask import inprocess

    checkpoint, chal = vit
    cfg = _cfg(checkpoint, chal, tmp_path / "o", copies=2)
    tasks = plan.load_challenges(chal)
    env = runtime.setup("cpu")
    try:
        lanes = build_lanes.lanes_class(families.of_checkpoint(cfg.checkpoint))  # as `ttt` finds them
        fp, why = build_lanes.probe(cfg, tasks, deque(sorted(tasks)), lanes, env, sizing.Meter(env.device))
    finally:
        runtime.teardown()
    assert fp is not None and fp.kept > 0, why
    counts = build_lanes.run_shard(cfg, 0, 1)
    assert counts.get("failed") == 1 and sum(counts.values()) == 4, counts
    reuse = inprocess.prepared(cfg).reuse
    gc.collect()
    assert reuse.eval_built >= 1 and 0 < reuse.held_bytes() <= fp.kept
    assert len(reuse._lent) == 0
