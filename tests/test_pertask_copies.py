"""Many tasks' copies at once (`ttt views=official official.copies=K`, pertask/copies.py and
batched.py): a copy's dropout masks, its training bit-identical to the one-at-a-time loop (early stop
on and off), its exact rows, isolation between copies, a failing copy, resume after SIGKILL
mid-batch, and the same submission twice."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import torch

from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.errors import UserError
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.models.loopvit_config import flavour
from hrm_deeploop.pertask import plan
from hrm_deeploop.pertask.batched import Engine, Job
from hrm_deeploop.pertask.copies import Copies, CopyDropout, copy_noise
from hrm_deeploop.pertask.official_ttt import run_task
from hrm_deeploop.pertask.official_views import build_views

REPO = Path(__file__).resolve().parents[1]
A = {"train": [{"input": [[1, 2, 0], [3, 3, 0]], "output": [[2, 1], [0, 3], [0, 3]]},
               {"input": [[4, 0], [0, 4]], "output": [[0, 4], [4, 0]]},
               {"input": [[4, 1], [0, 4]], "output": [[0, 4], [4, 1]]}],
     "test": [{"input": [[1, 4], [2, 3]]}, {"input": [[7, 7, 1]]}]}
B = {"train": [{"input": [[5, 5], [0, 0]], "output": [[5]]}], "test": [{"input": [[0, 5], [5, 5]]}]}
TOO_BIG = {"train": [{"input": [[1] * 20] * 20, "output": [[1]]}], "test": [{"input": [[1]]}]}
KW = dict(epochs=2, batch=8, lr=3e-4, runs=2, passes=2, pool=True, poe=True, seed=0)
CPU = torch.device("cpu")


def _start(block="vanilla", perms=0):
    torch.manual_seed(0)
    return LoopViT(flavour("tiny", block=block, num_tasks=1 + 5 * (1 + perms), dropout=0.1))


def _views(job):
    return build_views(job.tid, job.task, 0, 0)


def _engine(model, k, jobs):
    out = {}
    Engine(model, k, CPU, views_of=_views, **KW).run(deque(jobs), lambda j, r, e: out.__setitem__(j.tid, r or e))
    return out


def _same(a, b):
    keys = ("ranked", "votes", "ranked_poe", "log_lik", "attempts", "attempts_poe", "runs")
    return json.dumps({k: a[k] for k in keys}) == json.dumps({k: b[k] for k in keys})


def test_a_copys_dropout_is_torchs_from_its_own_generator():
    x = torch.randn(4, 7, 5)
    torch.manual_seed(11)
    want = torch.nn.functional.dropout(x, 0.1)
    from hrm_deeploop.pertask import copies

    copies.GENERATORS[:] = [torch.Generator().manual_seed(3), torch.Generator().manual_seed(11)]
    d = CopyDropout(0.1)
    d.lane = torch.tensor(1)
    assert torch.equal(d(x), want)
    copies.GENERATORS[1].manual_seed(11)  # under vmap: each copy's noise from its own generator
    got = torch.func.vmap(lambda t, lane: t * copy_noise(t, lane, 0.1))(torch.stack([x, x]), torch.tensor([0, 1]))
    assert torch.equal(got[1], want) and not torch.equal(got[0], want)


def test_per_copy_adamw_and_clipping_are_torchs():
    """One copy of a model stepped by Copies, the same model by torch's AdamW and clip_grad_norm_:
    the same weights, bit for bit (dropout 0: the same batch, two steps, lr 0 then 1e-3)."""
    import copy

    from hrm_deeploop.pertask.official_ttt import train_batches

    torch.manual_seed(1)
    model = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, dropout=0.0))
    b = next(iter(train_batches(build_views("t", A, 0, 0), 16, 8, np.random.default_rng(0))(0)))
    c = Copies(model, 3, CPU, 1e-3)
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=0.0)
    for lr in (0.0, 1e-3, 1e-3):
        opt.param_groups[0]["lr"] = lr
        opt.zero_grad()
        logits = ref(b["canvas"], b["task_ids"], b["mask"]).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, 12), b["target"].reshape(-1), ignore_index=10).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        c.step([b, None, b], [lr, 0.0, lr])  # copy 1 holds still
    for n, p in ref.named_parameters():
        assert torch.equal(c.params[n][0], p) and torch.equal(c.params[n][2], p), n
        assert torch.equal(c.params[n][1], c.start[n]), n
    assert c.steps == [3, 0, 3]


def test_many_copies_train_bit_identically_to_one_at_a_time():
    """A task as one copy of K = 1, and beside a batch-mate of another size (K = 2): the same
    losses, votes, candidates and attempts as the one-at-a-time loop (`run_task`), dropout 0.1."""
    model = _start()
    one = run_task(model, _views(Job("a", A)), A, device=CPU, **KW)
    alone = _engine(model, 1, [Job("a", A)])["a"]
    assert _same(alone, one)
    assert alone["steps"] == sum(r["steps"] for r in one["runs"]) and len(alone["runs"]) == 2


@pytest.mark.parametrize("fit", ["exact", pytest.param("stable", marks=pytest.mark.slow)])
def test_early_stop_in_the_lanes_is_the_lone_loops_bit_for_bit(fit, stop_after=2):
    """official.stop_after on (stop_share 0: every epoch counts as fit, so each run ends after
    `stop_after` epochs of its 0..2): the lanes end each run where `run_task` does, before drawing the
    next epoch, so a task alone and beside batch-mates of other sizes (a lane freed early taken by
    the next task) gives the lone loop's losses, fits, votes and attempts."""
    model = _start()
    kw = {**KW, "stop_after": stop_after, "stop_share": 0.0, "stop_fit": fit}
    one = run_task(model, _views(Job("a", A)), A, device=CPU, **kw)
    assert all(r["stop"] == "fit" and r["epochs"] == stop_after for r in one["runs"])
    assert len(one["runs"][0]["exact"]) == stop_after and one["runs"][0]["rows"] == 18
    out = {}
    Engine(model, 2, CPU, views_of=_views, **kw).run(  # b ends first: a2 takes its lane
        deque([Job("b", B), Job("a", A), Job("a2", A)]), lambda j, r, e: out.__setitem__(j.tid, r or e))
    assert _same(out["a"], one) and _same(out["a2"], one)
    assert out["a"]["steps"] == 2 * stop_after * 3  # 2 runs x stop_after epochs x 3 batches of 18 rows
    assert [r["stop"] for r in out["b"]["runs"]] == ["fit", "fit"]


def test_a_copy_counts_its_exact_rows_as_the_lone_forward():
    """Copies.step's `exact`: the rows whose argmax is the target on every cell the loss sees, from
    the copy's own training forward; a batch whose targets are the model's own predictions on 5 of
    its 8 rows counts 5 (dropout 0), beside a copy with another batch and one holding still."""
    from hrm_deeploop.pertask.official_ttt import exact_rows, train_batches

    torch.manual_seed(1)
    model = LoopViT(flavour("tiny", block="vanilla", num_tasks=6, dropout=0.0))
    b = next(iter(train_batches(build_views("t", A, 0, 0), 16, 8, np.random.default_rng(0))(0)))
    with torch.no_grad():
        pred = model(b["canvas"], b["task_ids"], b["mask"]).logits.argmax(-1)
    own = dict(b, target=torch.where(b["target"] == 10, b["target"], pred))
    own["target"][5:] = b["target"][5:]
    assert int(exact_rows(model(b["canvas"], b["task_ids"], b["mask"]).logits, own["target"])) == 5
    c = Copies(model, 3, CPU, 1e-3)
    c.step([own, None, b], [1e-3, 0.0, 1e-3])
    assert c.exact == [5, None, 0]
    assert torch.equal(c.preds[0], pred) and torch.equal(c.preds[2], pred) and c.preds[1] is None  # its argmax canvases


def test_a_copy_does_not_depend_on_its_batch_mates_and_a_failing_one_fails_alone():
    model = _start()
    alone = _engine(model, 1, [Job("a", A)])["a"]
    mates = _engine(model, 2, [Job("b", B), Job("a", A)])
    three = _engine(model, 2, [Job("big", TOO_BIG), Job("b", B), Job("a", A)])
    assert _same(mates["a"], alone) and _same(three["a"], alone)  # gradients, moments, masks: its own
    assert _same(three["b"], mates["b"])
    assert isinstance(three["big"], UserError) and "does not fit" in str(three["big"])


def _official_file(path):
    from tests.test_train_vit import _official_file as make

    make(path, "vanilla", num_tasks=400)
    return path


def _tasks(n):
    rng = np.random.default_rng(5)
    out = {}
    for i in range(n):
        perm = np.concatenate([[0], rng.permutation(9) + 1])
        pairs = [{"input": (g := rng.integers(0, 5, size=(2, 3))).tolist(), "output": perm[g].tolist()}
                 for _ in range(2 + i + 1)]
        out[f"t{i:02d}"] = {"train": pairs[:-1], "test": [{"input": pairs[-1]["input"]}]}
    return out


@pytest.mark.slow
def test_the_same_command_gives_the_same_submission(tmp_path):
    """views=official, many copies (copies=0) and one per worker (copies=1): two runs, the same bytes."""
    from tests.arc_synth import write_kaggle

    ckpt = _official_file(tmp_path / "loop_vit_base.pt")
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(3), solutions=False)
    for copies in (0, 1):
        subs = []
        for rep in range(2):
            out = tmp_path / f"o{copies}{rep}"
            assert run_subcommand("ttt", [f"checkpoint={ckpt}", f"challenges={chal}", f"output_dir={out}",
                                          "views=official", "official.epochs=2", "official.perms=0",
                                          f"official.copies={copies}", "official.dropout=0.3", "passes=2",
                                          "workers=1", "threads=1", "device=cpu", "progress=false",
                                          "protocol=transductive"]) == 0
            subs.append((out / "submission.json").read_bytes() + (out / "submission_poe.json").read_bytes())
            votes = json.loads((out / "tasks" / "t00" / "result.json").read_text())["votes"]
        assert subs[0] == subs[1], f"official.copies={copies}: two runs differ"
        assert votes and sum(votes[0]) > 0


@pytest.mark.slow
def test_sigkill_mid_batch_then_rerun_keeps_the_finished_and_redoes_the_rest(tmp_path):
    """Four tasks of different sizes as two copies at once; SIGKILL once the first has finished (the
    others mid-training); the rerun keeps the finished results byte for byte and finishes the rest,
    as a run never killed would (the same result bytes but the timings)."""
    from tests.arc_synth import write_kaggle

    ckpt = _official_file(tmp_path / "loop_vit_base.pt")
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(4), solutions=False)

    def cmd(out):
        return [sys.executable, "-m", "hrm_deeploop.cli", "ttt", f"checkpoint={ckpt}", f"challenges={chal}",
                f"output_dir={out}", "views=official", "official.epochs=25", "official.perms=0", "official.copies=2",
                "passes=1", "threads=1", "device=cpu", "progress=false", "protocol=transductive"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "o"
    proc = subprocess.Popen(cmd(out), env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(out.glob("tasks/*/result.json")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {p.parent.name: p.read_bytes() for p in out.glob("tasks/*/result.json")}
    assert 1 <= len(done) < 4, f"the kill came after {len(done)} tasks"
    r = subprocess.run(cmd(out), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(done)} already finished, {4 - len(done)} to run" in r.stdout
    assert all((out / "tasks" / t / "result.json").read_bytes() == b for t, b in done.items())
    assert all(plan.finished(out, t)["status"] == "trained" for t in _tasks(4))
    clean = tmp_path / "clean"
    assert subprocess.run(cmd(clean), env=env, capture_output=True, timeout=300).returncode == 0

    def votes(folder, t):
        r = json.loads((folder / "tasks" / t / "result.json").read_text())
        return r["ranked"], r["votes"], r["runs"]
    assert all(votes(out, t) == votes(clean, t) for t in _tasks(4))
