"""`ttt views=build`'s evaluations on a model kept between tasks (`training.reuse.Reuse.loaded`, handed to
`evaluate`'s library function through `checkpoint.held(load=...)`): every file in each task's eval/ and
every result equal to evaluations that build their own model per task (a tiny HRM; a tiny LoopViT whose
trainer keeps a weight average, which evaluate reads); the model handed over equals the family's fresh
load of each state (not the previous task's, not the untrained start); the trainer's model is left as
it was (values, modes, requires_grad) and, on a kept model, torch's generators too; outside
`checkpoint.held` a load is the family's own."""

import json
import math
from pathlib import Path

import pytest
import torch

from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import families, runtime
from hrm_deeploop.cli import run_subcommand
from hrm_deeploop.families.spec import LoadOptions
from hrm_deeploop.loading import load_model
from hrm_deeploop.pertask import inprocess, plan, worker
from hrm_deeploop.training.reuse import Reuse
from tests.test_pertask import pretrained  # noqa: F401 - the module's fixture: a tiny HRM and two unseen tasks
from tests.test_pertask_build_inprocess import _cfg
from tests.test_pertask_build_reuse import solve_each


@pytest.fixture(scope="module")
def vit(pretrained):  # noqa: F811
    """A tiny LoopViT (dropout 0.1) pretrained for 2 steps on the fixture's pretraining set."""
    root, _ = pretrained
    out = root / "vit-eval-reuse"
    assert run_subcommand("train-vit", ["experiment=loopvit_tiny_cpu", "model.dropout=0.1", "train.progress=false",
                                        "optim.warmup_steps=1", "train.global_batch_size=4", "train.max_steps=2",
                                        f"data_dir={root / 'pre'}", f"output_dir={out}"]) == 0
    return out


def _tasks(checkpoint, chal, out: Path, keep: bool, **kw) -> tuple[dict, inprocess.Prepared]:
    """Both tasks in this process, in order (`keep`: evaluate's model kept between them): per task,
    its result without times and the bytes of every file under its eval/."""
    cfg = _cfg(checkpoint, chal, out, **kw)
    prep = inprocess.prepared(cfg)
    prep.evaluations = keep
    return solve_each(cfg, chal, out, lambda r, work: (r, {str(f.relative_to(work / "eval")): _content(f, out)
                                                          for f in sorted((work / "eval").rglob("*")) if f.is_file()})), prep


def _content(f: Path, out: Path) -> object:
    """A file's bytes; a JSON file's values without the vote's timings (`seconds_*`) and with the
    run's own folder named alike (its config names the folders it read)."""
    if f.suffix != ".json":
        return f.read_bytes()

    def plain(x: object) -> object:
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items() if not k.startswith("seconds")}
        if isinstance(x, list):
            return [plain(v) for v in x]
        return x.replace(str(out), "OUT") if isinstance(x, str) else x

    return plain(json.loads(f.read_text()))


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) == 2
    for tid in a:
        (ra, fa), (rb, fb) = a[tid], b[tid]
        assert ra == rb and ra["status"].startswith("trained"), tid
        assert fa.keys() == fb.keys() and {"predictions.npz", "log_probs.npy", "submission.json"} <= fa.keys(), tid
        for name in fa:
            assert fa[name] == fb[name], (tid, name)


def test_hrm_evaluations_on_a_kept_model_equal_fresh_ones(pretrained, tmp_path):  # noqa: F811
    root, chal = pretrained
    fresh, prep = _tasks(root / "run", chal, tmp_path / "fresh", keep=False)
    assert (prep.reuse.eval_built, prep.reuse.eval_reused) == (0, 0)  # the family's loader each time
    got, prep = _tasks(root / "run", chal, tmp_path / "kept", keep=True)
    assert (prep.reuse.eval_built, prep.reuse.eval_reused) == (1, 1)  # the second task's evaluation kept the first's
    _same(got, fresh)


def test_loopvit_evaluations_on_a_kept_model_read_the_weight_average(pretrained, vit, tmp_path):  # noqa: F811
    """train.ema=true: the trained state holds the average, which evaluate reads (ema=true)."""
    _, chal = pretrained
    ema = ["optim.warmup_steps=1", "train.ema=true", "train.ema_rate=0.5"]
    fresh, _ = _tasks(vit, chal, tmp_path / "fresh", keep=False, train_overrides=ema)
    got, prep = _tasks(vit, chal, tmp_path / "kept", keep=True, train_overrides=ema)
    assert (prep.reuse.eval_built, prep.reuse.eval_reused) == (1, 1)
    _same(got, fresh)


def _state(checkpoint: Path, shift: float, ema: bool) -> tuple[Path, dict]:
    """The checkpoint's state as a trained one: every float weight moved by `shift` (and a weight
    average, another shift, with `ema`), at a step path of its own."""
    src = ckpt.load(ckpt.resolve(checkpoint))
    model = {k: v + shift if v.is_floating_point() else v.clone() for k, v in src["model"].items()}
    state = {**src, "model": model, "step": 7,
             "ema": {"rate": 0.5, "shadow": {k: v + 2 * shift for k, v in model.items() if v.is_floating_point()}}
             if ema else None}
    return ckpt.step_path(checkpoint / f"shifted-{shift}", 7), state


def _equal(a, b) -> None:
    """Two LoadedModels alike: every field, and the model's tensors, dtypes, devices, modes, requires_grad."""
    assert (a.config, a.kind, a.step, a.path, a.weights, a.scaling, a.puzzle_names, a.run_config, a.family) == \
           (b.config, b.kind, b.step, b.path, b.weights, b.scaling, b.puzzle_names, b.run_config, b.family)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and sa[k].device == sb[k].device and torch.equal(sa[k], sb[k]), k
    for (na, ta), (nb, tb) in zip(a.model.named_buffers(), b.model.named_buffers()):  # non-persistent ones too
        assert na == nb and torch.equal(ta, tb), na
    assert [m.training for m in a.model.modules()] == [m.training for m in b.model.modules()] == \
           [False] * len(list(a.model.modules()))
    assert [p.requires_grad for p in a.model.parameters()] == [p.requires_grad for p in b.model.parameters()]


@pytest.mark.parametrize("which", ["hrm", "vit"])
def test_the_kept_model_holds_each_state_s_weights(pretrained, vit, which):  # noqa: F811
    """A second state of the key gets the first's model with its own weights (average or raw, as
    asked): equal to the family's fresh load of that state, and unlike the first state's or the start's."""
    root, _ = pretrained
    checkpoint = root / "run" if which == "hrm" else vit
    start = load_model(checkpoint, "cpu", command="evaluate")
    reuse, kept = Reuse(), {}
    for ema in (True, False):
        for shift in (0.25, -0.5):
            path, state = _state(checkpoint, shift, ema=True)
            fam = families.of_state(path, state)
            opts = LoadOptions(device="cpu", ema=ema)
            got = reuse.loaded(fam, path, state, opts)
            fresh = fam.load(path, state, opts)
            fresh.family = fam
            got.family = fam
            _equal(got, fresh)
            assert got.weights == ("ema" if ema else "raw")
            moved = next(k for k, v in start.model.state_dict().items() if v.is_floating_point())
            want = start.model.state_dict()[moved] + (shift + 2 * shift if ema else shift)
            assert torch.allclose(got.model.state_dict()[moved], want), "not this state's weights"
            assert not torch.equal(got.model.state_dict()[moved], start.model.state_dict()[moved])
            assert kept.setdefault(ema, got.model) is got.model  # the first state's model, kept for the second
    assert (reuse.eval_built, reuse.eval_reused) == (2, 2)  # one model per key (ema asked or not), kept


def test_a_held_loader_serves_only_its_path_and_only_while_held(pretrained):  # noqa: F811
    """`evaluate` from the command line holds nothing: load_model is the family's own load."""
    root, _ = pretrained
    path, state = _state(root / "run", 0.25, ema=False)
    asked = []

    def loader(fam, p, s, opts):
        asked.append(p)
        return fam.load(p, s, opts)

    with ckpt.held(path, state, load=loader):
        load_model(path, "cpu", command="evaluate")
        load_model(root / "run", "cpu", command="evaluate")  # another checkpoint: its family's load
    assert asked == [path] and ckpt.held_loader(path) is None


def _snapshot(model: torch.nn.Module) -> tuple:
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()],
            [p.grad is None for p in model.parameters()])


def test_the_evaluation_leaves_the_trainer_s_model_as_it_was(pretrained, vit, tmp_path):  # noqa: F811
    """Each task: its trainer's model after the evaluation as before it (weights, each module's mode,
    requires_grad, gradients), never the model evaluate predicts with; on a kept model (the second
    task) torch's generator is not drawn from either. The first task's model, handed back, then trains
    the second (Reuse.model)."""
    _, chal = pretrained
    cfg = _cfg(vit, chal, tmp_path / "o")
    prep = inprocess.prepared(cfg)
    tasks = plan.load_challenges(chal)
    for n, tid in enumerate(sorted(tasks)):
        work = plan.task_dir(Path(cfg.output_dir), tid) / worker.WORK
        work.mkdir(parents=True)
        group, chal_file = inprocess.build_task(cfg, tid, tasks[tid], work)
        train_cfg, eval_cfg = prep.task_configs(work, math.inf, group, chal_file, inprocess.eval_batch)
        env = runtime.setup(train_cfg.device)
        try:
            trainer = inprocess.build_trainer(prep, train_cfg, env)
            steps = inprocess.train_alone(trainer, train_cfg)["steps"]
        finally:
            runtime.teardown()
        before, rng = _snapshot(trainer.model), torch.get_rng_state()
        inprocess.evaluate_trained(prep, trainer, steps, eval_cfg, work, False)
        after = _snapshot(trainer.model)
        assert before[1:] == after[1:] and before[1] == [True] * len(before[1]), tid  # still training, grads as left
        assert all(torch.equal(before[0][k], after[0][k]) for k in before[0]), tid
        kept = next(iter(prep.reuse._evaluated.values())).model
        assert kept is not trainer.model
        if n:  # a kept model: no construction, no init drawn
            assert torch.equal(torch.get_rng_state(), rng)
        prep.reuse.release(trainer.model)
    assert (prep.reuse.built, prep.reuse.reused, prep.reuse.eval_built, prep.reuse.eval_reused) == (1, 1, 1, 1)


def test_a_kept_model_never_skips_a_memory_check_its_task_would_fail(pretrained):  # noqa: F811
    """The family's load refuses a model and batch this machine cannot hold (the reasoners' memory
    check, at evaluate's rows per forward). Everything that check reads (the state's model and
    scaling configs, the dtype, the device, the batch) is in the kept model's key: a later task of
    the same model whose own batch would not fit gets no kept model but the family's load, refused
    in one line; the kept model then still serves its key."""
    from arc_data.errors import DatasetError  # what the memory check raises (the CLI's one line)

    root, _ = pretrained
    path, state = _state(root / "run", 0.25, ema=False)
    reuse = Reuse()
    with ckpt.held(path, state, load=reuse.loaded):
        first = load_model(path, "cpu", batch=4, command="evaluate")
        with pytest.raises(DatasetError) as refused:
            load_model(path, "cpu", batch=10 ** 12, command="evaluate")
        again = load_model(path, "cpu", batch=4, command="evaluate")
    line = str(refused.value)
    assert "\n" not in line and "global_batch_size" in line and "at 1000000000000 rows" in line, line
    with pytest.raises(DatasetError) as fresh:  # the family's own load says the same
        families.of_state(path, state).load(path, state, LoadOptions(device="cpu", batch=10 ** 12))
    assert str(fresh.value) == line
    assert again.model is first.model and (reuse.eval_built, reuse.eval_reused) == (1, 1)
