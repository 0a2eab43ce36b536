"""`ttt launcher=submitit` runs each shard by the engine the config names (`run.any_shard`): with
`copies=K` a job of the array trains its tasks' copies K at once, as the local launcher does, and
gives the same results (submitit's debug executor: the jobs run in this process)."""

import pytest

from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import plan, worker
from tests.test_pertask import _tasks, pretrained  # noqa: F401 - the module's fixture: pre/ and two unseen tasks
from tests.test_pertask_build_lanes import TIMES, vit  # noqa: F401 - a tiny LoopViT with dropout, four tasks

pytest.importorskip("submitit")


def _ttt(checkpoint, chal, out, *extra) -> int:
    return run_subcommand("ttt", [f"checkpoint={checkpoint}", f"challenges={chal}", f"output_dir={out}", "steps=4",
                                  "batch=4", "num_aug=1", "workers=1", "threads=1", "device=cpu", "progress=false",
                                  "keep_work=true", "passes=2", "protocol=transductive",
                                  "train_overrides=['optim.warmup_steps=1']", "eval_overrides=['global_batch_size=4']",
                                  *extra])


@pytest.mark.slow  # two ttt sets (~30 s); run by .ci/run after the default suite
def test_submitit_shards_train_many_copies_at_once(vit, tmp_path, capsys):  # noqa: F811
    checkpoint, chal = vit
    assert _ttt(checkpoint, chal, tmp_path / "local", "copies=2") == 0
    sub = tmp_path / "sub"
    assert _ttt(checkpoint, chal, sub, "copies=2", "launcher=submitit", "submitit.cluster=debug",
                "submitit.shards=2") == 0
    said = capsys.readouterr().out
    # t03 (a grid the canvas cannot hold) is recorded before the jobs start (canvas_fit): the shard that
    # holds it has one task left, trained one at a time; the other job's engine trains its two at once
    assert said.count("2 to run as 2 copies at once") == 1, said[-2000:]
    assert said.count("1 already finished, 1 to run") == 1, said[-2000:]
    tasks = sorted(plan.load_challenges(chal))
    for tid in tasks:
        got, want = plan.finished(sub, tid), plan.finished(tmp_path / "local", tid)
        if "reason" in got:  # names its own log
            got["reason"] = got["reason"].replace(str(sub), str(tmp_path / "local"))
        assert {k: v for k, v in got.items() if k not in TIMES} == {k: v for k, v in want.items() if k not in TIMES}
        if got["status"].startswith("trained"):  # in a lane of its shard's engine, not one at a time
            assert "ttt: trained alone" not in (plan.task_dir(sub, tid) / worker.LOG).read_text()
    assert (sub / "submission.json").read_bytes() == (tmp_path / "local" / "submission.json").read_bytes()
