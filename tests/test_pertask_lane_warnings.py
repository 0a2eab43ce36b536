"""`ttt views=build copies=K` on a LoopViT whose block calls SDPA (the hybrid block, no dropout):
vmap has no batching rule for CPU SDPA and torch warns on every step ("There is a performance drop
... Please file us an issue on GitHub"). The lanes know (they run it lane by lane, as the reasoners'
do): nothing of it reaches the user's stderr (issue 61's new-user audit found it there)."""

import warnings

from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.pertask import build_lanes
from tests.arc_synth import write_kaggle
from tests.test_pertask import _tasks, pretrained  # noqa: F401 - the module's fixture: pre/ and two unseen tasks
from tests.test_pertask_build_lanes import _cfg


def test_hybrid_lanes_raise_no_batching_rule_warning(pretrained, tmp_path):  # noqa: F811
    root, _ = pretrained
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.block=hybrid", "model.dropout=0.0",
                                        "train.progress=false", "optim.warmup_steps=1", "train.global_batch_size=4",
                                        "train.max_steps=1", f"data_dir={root / 'pre'}",
                                        f"output_dir={tmp_path / 'vit'}"]) == 0
    chal = write_kaggle(tmp_path / "raw", "arc-agi_evaluation", _tasks(2, 2, "t"), solutions=False)
    cfg = _cfg(tmp_path / "vit", chal, tmp_path / "out", copies=2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        counts = build_lanes.run_shard(cfg, 0, 1)
    assert sum(counts.get(k, 0) for k in ("trained", "trained-no-grid")) == 2, counts
    log = (tmp_path / "out" / "tasks" / "t00" / "log.txt").read_text()
    assert "ttt: trained alone" not in log, log[-300:]  # the lanes ran it (the warning's only source)
    batching = [str(w.message) for w in seen if "batching rule" in str(w.message)]
    assert not batching, batching[0]
