"""What one `ttt views=build` worker keeps between its tasks' trainers (hrm_deeploop/training/reuse.py):
two tasks trained one after the other in one process, the second on the first's model handed back,
equal two fresh builds bit for bit (results, trained weights, losses), a tiny HRM and a tiny LoopViT
with dropout (torch's generator on its training path: the stream a fresh build leaves must be
restored); and `Reuse` itself: a model handed back is its fresh build, the generators too."""

import json
import math
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.pertask import inprocess, plan, worker
from hrm_deeploop.training.reuse import Reuse
from tests.test_pertask import pretrained  # noqa: F401 - the module's fixture: a tiny HRM and two unseen tasks
from tests.test_pertask_build_inprocess import TIMES, _cfg


def _two_tasks(checkpoint, chal, out: Path, reuse: bool) -> tuple[dict, inprocess.Prepared]:
    """Both tasks in this process, in order; without `reuse` each trainer is a fresh build."""
    cfg = _cfg(checkpoint, chal, out)
    prep = inprocess.prepared(cfg)
    if not reuse:
        prep.reuse = None
    return solve_each(cfg, chal, out, lambda r, work: (r, ckpt.load(ckpt.resolve(work / "run"))["model"],
                                                      json.loads((work / "run" / "summary.json").read_text()))), prep


def solve_each(cfg, chal, out: Path, read) -> dict:
    """Every task of `chal` solved in this process, in order: task id -> read(its result without
    times, its work folder)."""
    tasks = plan.load_challenges(chal)
    got = {}
    for tid in sorted(tasks):
        work = plan.task_dir(out, tid) / worker.WORK
        work.mkdir(parents=True)
        r = worker._solve(cfg, tid, tasks[tid], math.inf, work)
        got[tid] = read({k: v for k, v in r.items() if k not in TIMES}, work)
    return got


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) == 2
    for tid in a:
        (ra, wa, sa), (rb, wb, sb) = a[tid], b[tid]
        assert ra == rb and ra["status"].startswith("trained"), tid
        assert wa.keys() == wb.keys()
        for k in wa:
            assert torch.equal(wa[k], wb[k]), (tid, k)
        assert sa["final_train_loss"] == sb["final_train_loss"] and sa["steps"] == sb["steps"] == 3


def test_hrm_tasks_on_one_model_equal_fresh_builds(pretrained, tmp_path):  # noqa: F811
    root, chal = pretrained
    fresh, _ = _two_tasks(root / "run", chal, tmp_path / "fresh", reuse=False)
    got, prep = _two_tasks(root / "run", chal, tmp_path / "reuse", reuse=True)
    assert (prep.reuse.built, prep.reuse.reused) == (1, 1)  # the second task trained the first's model
    _same(got, fresh)


def test_loopvit_tasks_on_one_model_equal_fresh_builds(pretrained, tmp_path):  # noqa: F811
    """Dropout 0.1, and a task table the checkpoint's rows do not fit (it starts from the random init)."""
    root, chal = pretrained
    vit = tmp_path / "vit"
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1", "train.progress=false",
                                        "optim.warmup_steps=1", "train.global_batch_size=4", "train.max_steps=2",
                                        f"data_dir={root / 'pre'}", f"output_dir={vit}"]) == 0
    fresh, _ = _two_tasks(vit, chal, tmp_path / "fresh", reuse=False)
    got, prep = _two_tasks(vit, chal, tmp_path / "reuse", reuse=True)
    assert (prep.reuse.built, prep.reuse.reused) == (1, 1)
    _same(got, fresh)


def _vit(num_tasks: int) -> LoopViT:
    from hrm_deeploop.models.loopvit_config import LoopViTConfig

    return LoopViT(LoopViTConfig(hidden_size=16, num_heads=2, mlp_dim=16, num_blocks=1, num_loops=2, image_size=8,
                                 num_tasks=num_tasks, dropout=0.1))


def test_a_model_handed_back_is_its_fresh_build():
    reuse = Reuse()
    first = reuse.model(("vit", 5), 3, lambda: _vit(5), "cpu")
    want = {k: v.clone() for k, v in first.state_dict().items()}
    want_rng = torch.get_rng_state()
    with torch.no_grad():  # a task trains it, leaves a gradient and eval mode, draws from the generator
        for p in first.parameters():
            p.add_(1.0)
            p.grad = torch.ones_like(p)
        first.eval()
        torch.rand(7)
    reuse.release(first)
    again = reuse.model(("vit", 5), 3, lambda: pytest.fail("built again"), "cpu")
    assert again is first and (reuse.built, reuse.reused) == (1, 1)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in want.items())
    assert torch.equal(torch.get_rng_state(), want_rng) and again.training
    assert all(p.grad is None for p in again.parameters())
    # lent out: another trainer of the key gets a fresh build; another key (table rows), another build
    torch.manual_seed(3)
    other = _vit(5)
    assert reuse.model(("vit", 5), 3, lambda: _vit(5), "cpu") is not first
    assert torch.equal(torch.get_rng_state(), want_rng)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in want.items())
    assert reuse.model(("vit", 6), 3, lambda: _vit(6), "cpu").task_embed.weight.shape[0] == 6
    assert (reuse.built, reuse.reused) == (3, 1)


def test_a_model_not_handed_back_is_never_reused():
    """A task that failed keeps its model (whatever a half-done step left on it): the next is built."""
    reuse = Reuse()
    first = reuse.model("k", 0, lambda: _vit(4), "cpu")
    assert reuse.model("k", 0, lambda: _vit(4), "cpu") is not first
    assert reuse.once("x", lambda: [1]) is reuse.once("x", lambda: pytest.fail("computed again"))


def test_a_model_not_handed_back_is_not_kept_alive():
    """The lanes of copies=K and a failed task never hand their model back: `Reuse` does not keep it
    (nor its gradients) alive; what it keeps between tasks is its records, within `most_kept`."""
    import gc

    from hrm_deeploop.training.reuse import model_bytes

    reuse = Reuse()
    for rows in (4, 5, 6):
        m = reuse.model(("vit", rows), 0, lambda rows=rows: _vit(rows), "cpu")
        for p in m.parameters():
            p.grad = torch.ones_like(p)
    del m
    gc.collect()
    assert len(reuse._lent) == 0
    assert 0 < reuse.held_bytes() <= Reuse.most_kept(model_bytes(_vit(6)), 3, handed_back=False)


def _rows_tasks() -> dict[str, dict]:
    """Three tasks with 2, 3 and 2 demonstrations: with leave_one_out their tables have 2 row counts."""
    def pair(i: int) -> dict:
        g = [[i % 9 + 1, (i * 3) % 9 + 1], [(i * 5) % 9 + 1, (i * 7) % 9 + 1]]
        return {"input": g, "output": [row[::-1] for row in g]}

    return {f"r{n}": {"train": [pair(10 * n + i) for i in range(k)], "test": [pair(10 * n + 9)]}
            for n, k in enumerate((2, 3, 2))}


@pytest.mark.slow  # a LoopViT pretrained and six tasks trained (~8 s)
def test_tasks_of_other_table_sizes_on_one_worker_equal_fresh_builds(pretrained, tmp_path):  # noqa: F811
    """leave_one_out=true over tasks of 2, 3 and 2 demonstrations (two table sizes) in one worker: the
    second size is built and recorded beside the first, the third task trains the first's model again,
    and every result, trained weight and loss equals fresh builds (a tiny LoopViT with dropout)."""
    from tests.arc_synth import write_kaggle

    root, _ = pretrained
    vit = tmp_path / "vit"
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1", "train.progress=false",
                                        "optim.warmup_steps=1", "train.global_batch_size=4", "train.max_steps=2",
                                        f"data_dir={root / 'pre'}", f"output_dir={vit}"]) == 0
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _rows_tasks(), solutions=False)
    runs = {}
    for reuse in (False, True):
        cfg = _cfg(vit, chal, tmp_path / f"reuse-{reuse}", leave_one_out=True)
        prep = inprocess.prepared(cfg)
        if not reuse:
            prep.reuse = None
        runs[reuse] = solve_each(cfg, chal, Path(cfg.output_dir), lambda r, work: (
            r, ckpt.load(ckpt.resolve(work / "run"))["model"], json.loads((work / "run" / "summary.json").read_text())))
    tables = {tid: w["task_embed.weight"].shape[0] for tid, (_, w, _) in runs[True].items()}
    assert tables["r0"] == tables["r2"] != tables["r1"], tables
    assert (prep.reuse.built, prep.reuse.reused) == (2, 1)  # r2 trained r0's model, handed back across r1's
    counts = [k for k in prep.reuse._memo if "count_model" in k]
    assert len(counts) == 2  # the memory check counted each table size once
    for tid, (r, w, s) in runs[True].items():
        rf, wf, sf = runs[False][tid]
        assert r == rf and r["status"].startswith("trained"), tid
        assert w.keys() == wf.keys() and all(torch.equal(w[k], wf[k]) for k in w), tid
        assert s["losses"] == sf["losses"] if "losses" in s else s["final_train_loss"] == sf["final_train_loss"], tid
