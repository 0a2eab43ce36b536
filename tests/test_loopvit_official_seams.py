"""The seams between an official LoopViT file and train-vit / evaluate (issue 58), at tiny size:

- task tokens: an official table is indexed by the official run's sorted task files, ours by puzzle
  identifier (0 = <blank>): mapped by name (`data.official_tasks`) or left fresh / refused, never
  row i for identifier i;
- the warm-up: `optim.schedule=official` runs the official scheduler (update k at lambda(k - 1), the
  first at 0), checked over 20 steps against the formula written out from the official
  `utils/lr_scheduler.py` (constants below) and, with a checkout of the official code, against its
  scheduler object;
- the gate regularisers' weights: from an official file's saved arguments unless the run sets them;
- `train-vit init_from=`: a run folder, a step file, an exported folder and hf://.
"""

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

import tests.test_train_vit as tv
from hrm_deeploop import runtime
from hrm_deeploop.cli import compose
from hrm_deeploop.data import official_tasks
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.training import vision
from hrm_deeploop.training.optim import loopvit_lr_at, lr_at
from hrm_deeploop.training.vision_config import SCRIPT_PENALTIES
from tests.hrm_helpers import make_dataset, read_metrics, use_stand_in

REFERENCE = Path(os.environ.get("LOOPVIT_REFERENCE",
                                Path(__file__).resolve().parents[1] / "benchmarks/out/loopvit-reference"))
NEEDS_REFERENCE = pytest.mark.skipif(not (REFERENCE / "utils/lr_scheduler.py").is_file(),
                                     reason="no checkout of WenjieShu/LoopViT at LOOPVIT_REFERENCE (docs/loopvit.md)")
# the tiny dataset's names: 3 tasks of 2 identifiers each (a task and its augmentation; two RE-ARC tasks of bb)
NAMES = ["<blank>", "cc", "cc_t1_0123456789", "aa", "aa_t3_0123456789", "rearc-bb-0000", "rearc-bb-0001"]
OFFICIAL_ROW = [2, 2, 0, 0, 1, 1]  # identifiers 1..6 -> row of aa, bb, cc in the official (sorted) order
CPU = runtime.Env(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), fused_kernel=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = make_dataset(tmp_path_factory.mktemp("arc"), num_tasks=3, num_aug=1, train_per_puzzle=3,
                        test_per_puzzle=1, side=3)
    (root / "identifiers.json").write_text(json.dumps(NAMES))
    return root


def official_file(path: Path, rows: int, **args) -> torch.Tensor:
    """A tiny official-layout file whose task table's row k is filled with k + 1; `args` join its
    saved arguments (None removes one). Returns the table."""
    tv._official_file(path, "hybrid", num_tasks=rows)
    state = torch.load(path, weights_only=True)
    table = torch.arange(1, rows + 1, dtype=torch.float32)[:, None].expand(rows, 32).clone()
    state["model_state"]["_orig_mod.task_token_embed.weight"] = table
    state["config"].update(args)
    state["config"] = {k: v for k, v in state["config"].items() if v is not None}
    torch.save(state, path)
    return table


def trainer(data, out, *overrides):
    cfg = compose("train-vit", [*tv.BASE, f"data_dir={data}", f"output_dir={out}", *overrides])
    return vision.build(cfg, CPU)


def fresh_table(t) -> torch.Tensor:
    torch.manual_seed(t.cfg.seed)  # VisionTrainer's init
    return LoopViT(t.cfg.model, t.cfg.scaling).task_embed.weight.detach()


# ---- task tokens ---------------------------------------------------------------------------------


def test_official_names_and_their_sort_order(tmp_path):
    """RE-ARC tasks under the ARC-1 task they imitate, augmentations under their task, and the
    official sort: `sorted(glob("*.json"))`, so 'a-b.json' comes before 'a.json'."""
    assert official_tasks.official_name("rearc-007bbfb7-0003") == "007bbfb7"
    assert official_tasks.official_name("007bbfb7") == "007bbfb7"
    (tmp_path / "identifiers.json").write_text(json.dumps(["<blank>", "a", "a-b", "a_t1_0123456789", "rearc-a-b-0002"]))
    order = official_tasks.task_order(2, tmp_path)
    assert order.rows.tolist() == [1, 0, 1, 0] and order.num_ids == 5
    other = official_tasks.task_order(5, tmp_path)
    assert other.rows is None and "its table has 5 rows" in other.why and "2 tasks" in other.why


def test_init_from_maps_the_official_rows_by_task_name(monkeypatch, data, tmp_path, capsys):
    use_stand_in(monkeypatch)
    table = official_file(tmp_path / "o.pt", rows=3)
    t = trainer(data, tmp_path / "run", f"init_from={tmp_path / 'o.pt'}")
    got = t.model.task_embed.weight.detach()
    assert got.shape[0] == len(NAMES)
    assert torch.equal(got[1:], table[OFFICIAL_ROW])  # identifier i: its task's official row, not row i
    assert torch.equal(got[0], fresh_table(t)[0])  # <blank> gets no official row
    assert "3 rows in the official task order" in capsys.readouterr().out


def test_a_table_as_long_as_the_identifiers_is_not_shifted_onto_them(monkeypatch, data, tmp_path, capsys):
    """The old seam: 7 rows for 7 identifiers were read as row i -> identifier i (every task got
    another's token). The order cannot be established (3 tasks): the table starts fresh, said."""
    use_stand_in(monkeypatch)
    official_file(tmp_path / "o.pt", rows=len(NAMES))
    t = trainer(data, tmp_path / "run", f"init_from={tmp_path / 'o.pt'}")
    assert torch.equal(t.model.task_embed.weight.detach(), fresh_table(t))
    out = capsys.readouterr().out
    assert "a fresh task table" in out and "its table has 7 rows" in out


def test_evaluate_reads_the_official_rows_by_task_name(data, tmp_path):
    """`fit_model` (evaluate's call): identifier i predicts with its task's official row, exactly as
    the file's model does with that row; a table whose order cannot be established is one line."""
    from hrm_deeploop.errors import UserError
    from hrm_deeploop.loading import load_model

    official_file(tmp_path / "o.pt", rows=3)
    loaded = load_model(tmp_path / "o.pt")
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    official_tasks.fit_model(loaded.model, data, "checkpoint 'o.pt'")
    assert loaded.model.cfg.num_tasks == len(NAMES) and loaded.model.task_embed.weight.shape[0] == len(NAMES)
    reference = LoopViT(loaded.model.cfg.__class__(**{**vars(loaded.model.cfg), "num_tasks": 3})).eval()
    reference.load_state_dict(before)
    g = torch.Generator().manual_seed(0)
    canvas, mask = torch.randint(0, 12, (6, 16, 16), generator=g), torch.ones(6, 16, 16, dtype=torch.long)
    with torch.no_grad():
        ours = loaded.model(canvas, torch.arange(1, 7), mask).logits
        theirs = reference(canvas, torch.tensor(OFFICIAL_ROW), mask).logits
    assert torch.equal(ours, theirs)
    official_file(tmp_path / "shifted.pt", rows=len(NAMES))
    with pytest.raises(UserError, match="cannot be established: its table has 7 rows"):
        official_tasks.fit_model(load_model(tmp_path / "shifted.pt").model, data, "checkpoint 'shifted.pt'")


# ---- the warm-up ---------------------------------------------------------------------------------

BASE_LR, WARMUP, TOTAL = 1e-3, 4, 20  # the constants of the 20-step checks


def official_formula(update: int) -> float:
    """`get_cosine_schedule_with_warmup`'s lr_lambda (utils/lr_scheduler.py, num_cycles 0.5) times the
    base rate, as LambdaLR applies it; the scheduler is stepped after each optimiser step
    (offline_train_loop_ARC.py), so update k (from 1) runs at current_step = k - 1."""
    current_step = update - 1
    if current_step < WARMUP:
        return BASE_LR * (current_step / max(1, WARMUP))
    progress = (current_step - WARMUP) / max(1, TOTAL - WARMUP)
    return BASE_LR * max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * progress * 2)))


def test_the_official_schedule_is_the_official_formula_over_20_steps():
    ours = [loopvit_lr_at(k, BASE_LR, WARMUP, TOTAL) for k in range(1, TOTAL + 1)]
    assert ours == [official_formula(k) for k in range(1, TOTAL + 1)]  # bit for bit
    assert ours[:5] == pytest.approx([0.0, 0.25e-3, 0.5e-3, 0.75e-3, 1e-3], abs=0, rel=1e-15)
    assert ours[-1] == pytest.approx(BASE_LR * 0.5 * (1 + math.cos(math.pi * 15 / 16)))  # the last > 0
    # the reasoners' schedule (optim.schedule=hrm) runs one update ahead: lr x [0.25, 0.5, 0.75, 1, ...]
    ahead = [lr_at(k, BASE_LR, WARMUP, TOTAL, 0.0) for k in range(1, TOTAL + 1)]
    assert ahead[:4] == pytest.approx([0.25e-3, 0.5e-3, 0.75e-3, 1e-3])
    assert ours[1:5] == pytest.approx(ahead[:4])


@pytest.fixture(scope="module")
def twenty_steps(data, tmp_path_factory):
    """The learning rate of each of 20 train-vit updates, for both schedules."""
    import hrm_deeploop.data.batches
    from tests.hrm_helpers import stand_in_open_split

    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hrm_deeploop.data.batches, "open_split", stand_in_open_split)
        for schedule in ("official", "hrm"):
            run = tmp_path_factory.mktemp(schedule)
            assert tv.train_vit(mp, data, run, f"train.max_steps={TOTAL}", f"optim.lr={BASE_LR}",
                                f"optim.warmup_steps={WARMUP}", f"optim.schedule={schedule}") == 0
            out[schedule] = [r["train/lr"] for r in read_metrics(run) if "train/lr" in r]
    return out


def test_train_vit_runs_the_official_schedule_over_20_steps(twenty_steps):
    assert twenty_steps["official"] == [official_formula(k) for k in range(1, TOTAL + 1)]
    assert twenty_steps["hrm"] == [lr_at(k, BASE_LR, WARMUP, TOTAL, 0.0) for k in range(1, TOTAL + 1)]
    assert compose("train-vit", ["model=loopvit_tiny"]).optim.schedule == "official"  # the default


@NEEDS_REFERENCE
def test_the_official_scheduler_object_gives_the_same_20_rates(twenty_steps):
    """The official scheduler, built from the reference checkout and stepped as its offline loop
    steps it (after each optimiser step): the rate each update ran at equals train-vit's, bit for bit."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("loopvit_lr_scheduler", REFERENCE / "utils/lr_scheduler.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=BASE_LR, weight_decay=0.0)
    sched = mod.get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=TOTAL)
    rates = []
    for _ in range(TOTAL):
        rates.append(opt.param_groups[0]["lr"])  # what this update runs at
        opt.step()
        sched.step()
    assert rates == twenty_steps["official"]
    assert rates == [loopvit_lr_at(k, BASE_LR, WARMUP, TOTAL) for k in range(1, TOTAL + 1)]


# ---- the gate regularisers' weights --------------------------------------------------------------


def test_the_weights_come_from_an_official_file_unless_the_run_sets_them(monkeypatch, data, tmp_path, capsys):
    use_stand_in(monkeypatch)
    official_file(tmp_path / "parser.pt", rows=3, gate_entropy_weight=1e-3, loop_penalty_weight=5e-4)
    t = trainer(data, tmp_path / "a", f"init_from={tmp_path / 'parser.pt'}")
    assert (t.cfg.optim.gate_entropy_weight, t.cfg.optim.loop_penalty_weight) == (1e-3, 5e-4)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "gate regularisers" in ln)
    assert "optim.gate_entropy_weight=0.001 (the file's saved --gate-entropy-weight)" in line
    assert "optim.loop_penalty_weight=0.0005 (the file's saved --loop-penalty-weight)" in line
    t = trainer(data, tmp_path / "b", f"init_from={tmp_path / 'parser.pt'}", "optim.gate_entropy_weight=0.002")
    assert (t.cfg.optim.gate_entropy_weight, t.cfg.optim.loop_penalty_weight) == (0.002, 5e-4)
    assert "optim.gate_entropy_weight=0.002 (set by this run's config)" in capsys.readouterr().out
    official_file(tmp_path / "bare.pt", rows=3)  # saved without them (e.g. the TTT parser's arguments)
    t = trainer(data, tmp_path / "c", f"init_from={tmp_path / 'bare.pt'}")
    assert (t.cfg.optim.gate_entropy_weight, t.cfg.optim.loop_penalty_weight) == (5e-4, 1e-3)
    assert "the file saves no --gate-entropy-weight" in capsys.readouterr().out
    t = trainer(data, tmp_path / "d")  # no init_from: the shipped script's, nothing said
    assert (t.cfg.optim.gate_entropy_weight, t.cfg.optim.loop_penalty_weight) == (5e-4, 1e-3)
    assert "gate regularisers" not in capsys.readouterr().out
    assert json.loads(json.dumps(t.config))["optim"]["gate_entropy_weight"] == 5e-4  # the run records the value
    official_file(tmp_path / "bad.pt", rows=3, gate_entropy_weight="lots")
    assert tv.train_vit(monkeypatch, data, tmp_path / "e", "train.max_steps=1", f"init_from={tmp_path / 'bad.pt'}") == 2
    err = capsys.readouterr().err
    assert "--gate-entropy-weight is 'lots'" in err and len(err.strip().splitlines()) == 1


@NEEDS_REFERENCE
def test_the_script_and_the_parser_disagree_as_documented():
    """The shipped script passes 5e-4 / 1e-3 (SCRIPT_PENALTIES); the offline parser's defaults are 1e-3 / 5e-4."""
    parser = (REFERENCE / "offline_train_loop_ARC.py").read_text()
    script = (REFERENCE / "script/offline_train_loop_VARC_ViT.sh").read_text()
    for key, theirs in (("gate_entropy_weight", 1e-3), ("loop_penalty_weight", 5e-4)):
        flag = "--" + key.replace("_", "-")
        assert float(re.search(rf'"{flag}", type=float, default=([0-9.e-]+)', parser).group(1)) == theirs
        assert float(re.search(rf"{flag} ([0-9.e-]+)", script).group(1)) == SCRIPT_PENALTIES[key]


# ---- init_from's forms ---------------------------------------------------------------------------


def export_folder(run: Path, folder: Path) -> None:
    """The run's latest checkpoint as an exported folder (hub.read_export's layout), written by hand."""
    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop import hub

    state = ckpt.load(ckpt.latest(run))
    folder.mkdir(parents=True)
    hub.write_weights(folder / hub.WEIGHTS, state["model"], {})
    conf = state["config"]
    (folder / hub.CONFIG).write_text(json.dumps({"format": hub.EXPORT_FORMAT, "model": conf["model"],
                                                 "scaling": conf["scaling"], "config": conf, "step": state["step"],
                                                 "weights": "raw"}))


def test_init_from_takes_a_run_folder_a_step_file_an_export_and_hf(monkeypatch, data, tmp_path, capsys):
    from hrm_deeploop import checkpoint as ckpt
    from hrm_deeploop.hub import LOCAL_ENV

    use_stand_in(monkeypatch)
    assert tv.train_vit(monkeypatch, data, tmp_path / "pre", "train.max_steps=2", "model.num_loops=2") == 0
    want = ckpt.load(tmp_path / "pre" / "checkpoints" / "step_2.pt")["model"]
    export_folder(tmp_path / "pre", tmp_path / "hub" / "me" / "vit")
    monkeypatch.setenv(LOCAL_ENV, str(tmp_path / "hub"))
    for start in (tmp_path / "pre", tmp_path / "pre" / "checkpoints" / "step_2.pt", tmp_path / "hub" / "me" / "vit",
                  "hf://me/vit"):
        t = trainer(data, tmp_path / "run", f"init_from={start}")
        got = t.model.state_dict()
        assert t.cfg.model.num_loops == 2 and all(torch.equal(got[k], want[k]) for k in want), start
    capsys.readouterr()
    (tmp_path / "empty").mkdir()
    assert tv.train_vit(monkeypatch, data, tmp_path / "r2", "train.max_steps=1", f"init_from={tmp_path / 'empty'}") == 2
    err = capsys.readouterr().err
    assert "holds no checkpoints/step_N.pt" in err and len(err.strip().splitlines()) == 1
