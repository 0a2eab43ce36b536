"""`ttt views=official` side by side with the official LoopViT test-time training, at a tiny size on CPU.

Needs a checkout of the official code, which this project does not ship:

    git clone https://github.com/WenjieShu/LoopViT benchmarks/out/loopvit-reference
    python benchmarks/compare_reference_ttt.py --reference benchmarks/out/loopvit-reference

What runs: three random tasks as an evaluation directory, with their test outputs (the official
loader needs them: an evaluation example without one raises KeyError); the compared one is the
second (file index 1); ours never reads a test output. A tiny LoopViT (canvas 16, d 32,
2 heads, 2 blocks x 3 loops, `--block`) is built by the official `LoopARCViT` and saved as its
offline script saves it (`{model_state, config}`); both sides start from that file.

1. Views: VARC's `utils/data_augmentation.augment_raw_data_split_per_task` (what its
   `augment_data.py` calls: 9 permutations, only_basic) writes the task's view files; ours are
   `pertask.official_views.build_views`. Compared per file: the name (so the task-token order), the
   train pairs, the test inputs and the colour map with its key order.
2. Training: the official `test_time_train_ARC.train` runs in-process (`--ttt-num-each --runs`, epochs
   0..`--epochs`, batch 8, lr 3e-4, dropout 0.1, `--num-attempts --passes`). Recorded from it: its
   fresh task table, every training batch its DataLoader yields (its shuffle and its random.Random(42)
   scale and corner draws), the global torch RNG state before each training forward (the dropout
   masks), each step's loss and learning rate, each run's trained weights, every prediction batch.
   Ours (`pertask.official_ttt.train_run`) then trains a copy of the same start (the official task
   table copied in: its values come from the official model's construction order) on those batches,
   the RNG state set alike before each forward. Compared: the learning rate of every step (ours from
   `official_views.epoch_lr_factor`), the loss of every step, every weight after each run.
3. Prediction: ours (`official_ttt.predict`) on the official prediction batches (the same scales and
   corners), each run's own trained model. Compared: per test input the list of un-augmented grids
   before the vote (the official `<id>_predictions.json`), the vote (its `get_majority_vote`: grids
   and counts in order; ours ranks the valid grids only, so compared on those) and the two attempts,
   for each run and for the two runs pooled.

Our own sampler (numpy draws of order, scale and corner) is not compared: the official draws are a
Python random.Random whose number of calls depends on the grid sizes (spec section 7). Exit 1 when
anything differs beyond `--tol` (0: bit-identical).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import io
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import rel_diff  # noqa: E402
from benchmarks.compare_reference_loopvit import _STUBBED, build_reference, stub_modules  # noqa: E402
from benchmarks.refcheck import reference_modules  # noqa: E402
from hrm_deeploop.models.loopvit import official_key_map  # noqa: E402
from hrm_deeploop.models.loopvit_config import flavour  # noqa: E402
from hrm_deeploop.pertask import official_ttt as ours  # noqa: E402
from hrm_deeploop.pertask.official_views import build_views, view_json  # noqa: E402
from hrm_deeploop.pertask.plan import is_grid  # noqa: E402

TOPS = ("src", "utils", "test_time_train_ARC")
TASKS = ("00aa0001", "11bb0002", "22cc0003")  # no "_": the official resolver splits a view's name at its first one
COMPARED = 1
SPLIT = "eval_color_permute_ttt_9"


def import_official(ref_dir: Path) -> tuple[types.SimpleNamespace, list[str]]:
    if not (ref_dir / "test_time_train_ARC.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no test_time_train_ARC.py there (a checkout of "
                         "https://github.com/WenjieShu/LoopViT is expected)")
    stubbed = stub_modules()
    modules: dict = {}
    sys.modules.setdefault("wandb", types.ModuleType("wandb"))
    with reference_modules(ref_dir, modules, TOPS):
        try:
            ns = types.SimpleNamespace(ttt=importlib.import_module("test_time_train_ARC"),
                                       aug=importlib.import_module("utils.data_augmentation"),
                                       evu=importlib.import_module("utils.eval_utils_ttt"),
                                       loop=importlib.import_module("src.ARC_LoopViT"),
                                       vit=importlib.import_module("src.ARC_ViT"),
                                       vit1=importlib.import_module("src.ARC_ViT1"), dir=ref_dir, modules=modules)
        except ImportError as e:
            raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs einops, tqdm, PIL)") from None
        finally:
            for name in _STUBBED:
                sys.modules.pop(name, None)
            _STUBBED.clear()
    ns.Model, ns.layers = ns.loop.LoopARCViT, {"vanilla": ns.vit.ARCTransformerEncoderLayer,
                                               "hybrid": ns.vit1.ARCTransformerEncoderLayer}
    return ns, stubbed


def random_tasks(rng: np.random.Generator, tests: int) -> dict[str, dict]:
    """Small grids (sides 2-6: scales 1 or 2 on a 16 canvas), an output a colour map of the input
    (so of its shape), the test outputs' colours among the demonstrations' (the official builder reads
    them, ttt cannot: with them inside, its colour maps are the ones drawn without them)."""
    out = {}
    for tid in TASKS:
        while True:
            perm = np.concatenate([[0], rng.permutation(9) + 1])
            pairs = []
            for _ in range(3 + tests):
                g = rng.integers(0, 6, size=tuple(rng.integers(2, 7, size=2)))
                pairs.append({"input": g.tolist(), "output": perm[g].tolist()})
            seen = {c for p in pairs[:3] for k in ("input", "output") for c in np.ravel(p[k])}
            if {c for p in pairs[3:] for c in np.ravel(p["output"])} <= seen:
                break
        out[tid] = {"train": pairs[:3], "test": pairs[3:]}
    return out


class Recorded:
    """A DataLoader that logs every batch it yields (tensors cloned); `dataset` passes through."""

    def __init__(self, loader, log: list, on_batch=None):
        self.loader, self.log, self.on_batch, self.dataset = loader, log, on_batch, loader.dataset

    def __iter__(self):
        for b in self.loader:
            self.log.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()})
            if self.on_batch is not None:
                self.on_batch()
            yield b

    def __len__(self) -> int:
        return len(self.loader)


def run_official(ref, root: Path, ckpt: Path, tid: str, a) -> dict:
    """The official TTT of task `tid` in-process, with what section 2 of the docstring records."""
    rec: dict = {"train": [], "eval": [], "lrs": [], "losses": [], "rng": [], "final": []}
    t = ref.ttt
    orig = {k: getattr(t, k) for k in ("build_dataloaders", "load_optimizer", "load_model_only",
                                       "generate_predictions", "F")}

    def loaders(*args, **kw):
        tr_ds, tr, ev_ds, ev, s1, s2 = orig["build_dataloaders"](*args, **kw)
        return tr_ds, Recorded(tr, rec["train"], lambda: rec["lrs"].append(rec["opt"].param_groups[0]["lr"])), \
            ev_ds, Recorded(ev, rec["eval"]), s1, s2

    def optimizer(*args, **kw):
        opt, scaler, sched = orig["load_optimizer"](*args, **kw)
        rec["opt"] = opt
        return opt, scaler, sched

    def model_only(*args, **kw):
        m = orig["load_model_only"](*args, **kw)
        rec["table"] = m.task_token_embed.weight.detach().clone()
        m.register_forward_pre_hook(lambda mod, inp: rec["rng"].append(torch.get_rng_state()) if mod.training else None)
        return m

    def predictions(model, *args, **kw):
        rec["final"].append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return orig["generate_predictions"](model, *args, **kw)

    class Functional:
        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)

        def cross_entropy(self, *args, **kw):
            loss = torch.nn.functional.cross_entropy(*args, **kw)
            rec["losses"].append(loss.item())
            return loss

    argv = ["--epochs", str(a.epochs), "--batch-size", "8", "--image-size", "16", "--patch-size", "2",
            "--learning-rate", "3e-4", "--weight-decay", "0", "--embed-dim", "32", "--mlp-dim", "48", "--num-heads", "2",
            "--num-colors", "12", "--loop-core-depth", "2", "--max-loop-steps", "3", "--min-loop-steps", "3",
            "--resume-checkpoint", str(ckpt), "--lr-scheduler", "cosine", "--train-split", f"{SPLIT}/{tid}",
            "--data-root", str(root / "raw_data" / "ARC-AGI"), "--eval-split", f"{SPLIT}/{tid}",
            "--resume-skip-task-token", "--architecture", "loop_vit" if a.block == "vanilla" else "loop_vit1",
            "--eval-save-name", "ttt_results", "--no-compile", "--num-attempts", str(a.passes),
            "--ttt-num-each", str(a.runs), "--num-workers", "0"]
    saved_argv, cwd = sys.argv, os.getcwd()
    t.build_dataloaders, t.load_optimizer, t.load_model_only, t.generate_predictions = \
        loaders, optimizer, model_only, predictions
    t.F = Functional()
    ref.evu.analyze_data = lambda *args, **kw: None  # it prints scores from a hard-coded ground-truth path
    try:
        sys.argv = ["test_time_train_ARC.py", *argv]
        args = t.parse_args()
        args.exit_on_entropy_stable, args.entropy_patience, args.entropy_threshold_pct = False, 2, 0.05
        args.runtime_max_steps = None
        t.args = args
        os.chdir(root)
        with reference_modules(ref.dir, ref.modules, TOPS), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            t.train(args)
        rec["predictions"] = [json.loads((root / "outputs" / f"ttt_results_attempt_{k}" / f"{tid}_predictions.json")
                                         .read_text()) for k in range(a.runs)]
    finally:
        sys.argv = saved_argv
        os.chdir(cwd)
        for k, v in orig.items():
            setattr(t, k, v)
    return rec


def official_vote(ref, grids: list) -> list[tuple]:
    return [(e["prediction"], e["votes"]) for e in ref.evu.get_majority_vote(grids)]


def official_views(ref, root: Path, tasks: dict[str, dict], solutions: dict[str, list] | None = None) -> Path:
    """`tasks` written in the official layout (root/raw_data/ARC-AGI/data/evaluation/<task>.json; the
    official loader reads the test outputs: `solutions` fills them in when the tasks hold none) and the
    official augment_data's views made beside them (data/SPLIT/<task>/*.json). Returns the ARC-AGI folder."""
    arc = root / "raw_data" / "ARC-AGI"
    src = arc / "data" / "evaluation"
    src.mkdir(parents=True)
    for k, t in tasks.items():
        if solutions is not None:
            t = {"train": t["train"], "test": [{"input": x["input"], "output": o} for x, o in zip(t["test"], solutions[k])]}
        (src / f"{k}.json").write_text(json.dumps(t))
    with reference_modules(ref.dir, ref.modules, TOPS), contextlib.redirect_stdout(io.StringIO()):
        ref.aug.augment_raw_data_split_per_task(arc, "evaluation", output_subdir=SPLIT, num_permuate=9, only_basic=True,
                                                verbose=False)
    return arc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/WenjieShu/LoopViT")
    p.add_argument("--epochs", type=int, default=4, help="epochs 0..N (the official 100)")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--passes", type=int, default=2, help="prediction passes (the official 10)")
    p.add_argument("--tests", type=int, default=2, help="test inputs of each task")
    p.add_argument("--block", choices=["vanilla", "hybrid"], default="vanilla", help="vanilla: the shipped scripts' loop_vit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tol", type=float, default=0.0, help="largest relative difference of losses and weights (0: bit-identical)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    ref, stubbed = import_official(a.reference.resolve())
    rng = np.random.default_rng(a.seed)
    tasks = random_tasks(rng, a.tests)
    tid = TASKS[COMPARED]
    root = Path(tempfile.mkdtemp(prefix="ttt-ref-"))
    print(f"# ttt views=official vs the official test-time training ({a.reference}); stand-ins: {stubbed or ['none']}")
    print(f"# task {tid} (file index {COMPARED}), {len(tasks[tid]['train'])} demonstrations, {a.tests} test inputs; "
          f"{a.block} block, canvas 16, d 32, 2 blocks x 3 loops; epochs 0..{a.epochs}, {a.runs} runs, {a.passes} passes")
    failed = False

    # 1. the views
    official_views(ref, root, tasks)
    files = sorted((root / "raw_data" / "ARC-AGI" / "data" / SPLIT / tid).glob("*.json"))
    strict = {"train": tasks[tid]["train"], "test": [{"input": x["input"]} for x in tasks[tid]["test"]]}
    views = build_views(tid, strict, COMPARED)  # ttt never reads a test output
    same = 0
    for f, v in zip(files, views):
        d = json.loads(f.read_text())
        theirs = {"train": d["train"], "test": [x["input"] for x in d["test"]]}
        if "augmentation" in d:
            theirs["color_map"] = d["augmentation"]["color_map"]
        mine = view_json(v)
        same += f.stem == v.name and json.dumps(theirs) == json.dumps(mine)  # key order of the map included
    ok = same == len(files) == len(views)
    failed |= not ok
    print(f"\n## views: {len(files)} official files, {len(views)} ours; identical (name, train pairs, test inputs, "
          f"colour map in order): {same}  {'ok' if ok else 'DIFFER'}")

    # 2. training, side by side on the official batches
    cfg = flavour("tiny", block=a.block, num_tasks=400, dropout=0.1)
    torch.manual_seed(a.seed)
    model = build_reference(types.SimpleNamespace(Model=ref.Model, layers=ref.layers), cfg)
    ckpt = root / "loop_vit_base.pt"
    conf = {"architecture": "loop_vit" if a.block == "vanilla" else "loop_vit1", "embed_dim": 32, "num_heads": 2,
            "mlp_dim": 48, "loop_core_depth": 2, "max_loop_steps": 3, "min_loop_steps": 3, "image_size": 16,
            "patch_size": 2, "dropout": 0.1, "num_colors": 12, "num_task_tokens": 1}
    torch.save({"model_state": model.state_dict(), "config": conf}, ckpt)
    rec = run_official(ref, root, ckpt, tid, a)
    start = ours.start_model(str(ckpt), len(views), a.seed, 0.1)
    with torch.no_grad():
        start.task_embed.weight.copy_(rec["table"])
    per_epoch = len(rec["train"]) // (a.runs * (a.epochs + 1))
    per_pass = len(rec["eval"]) // (a.runs * a.passes)
    kmap = {o: k for k, o in official_key_map(start.cfg).items() if o is not None}
    rows, runs_preds = [], []
    for k in range(a.runs):
        model = copy.deepcopy(start)
        base = k * (a.epochs + 1) * per_epoch

        def batches(epoch, base=base):
            for b in rec["train"][base + epoch * per_epoch: base + (epoch + 1) * per_epoch]:
                yield {"canvas": b["inputs"], "mask": b["attention_mask"], "target": b["targets"],
                       "task_ids": b["task_ids"]}

        r = ours.train_run(model, batches, a.epochs, 3e-4, torch.device("cpu"),
                           before_step=lambda i, base=base: torch.set_rng_state(rec["rng"][base + i]))
        n = len(r["losses"])
        lr_same = r["lrs"] == rec["lrs"][base:base + n]
        loss_diff = max(rel_diff(torch.tensor(r["losses"], dtype=torch.float64),
                                 torch.tensor(rec["losses"][base:base + n], dtype=torch.float64)), 0.0)
        final = rec["final"][k]
        w_diff = max(rel_diff(v, final[kmap[name]]) for name, v in model.state_dict().items() if name in kmap)
        ok = lr_same and loss_diff <= a.tol and w_diff <= a.tol and n == (a.epochs + 1) * per_epoch
        failed |= not ok
        rows.append(f"run {k}: {n} steps ({a.epochs + 1} epochs x {per_epoch}); learning rates "
                    f"{'identical' if lr_same else 'DIFFER'} ({', '.join(f'{x:.3g}' for x in r['lrs'][::per_epoch])} per "
                    f"epoch); losses max rel diff {loss_diff:.3g} ({r['losses'][0]:.6f} -> {r['losses'][-1]:.6f}); "
                    f"weights after the run max rel diff {w_diff:.3g}  {'ok' if ok else 'DIFFER'}")
        ev = rec["eval"][k * a.passes * per_pass:(k + 1) * a.passes * per_pass]
        eb = ({"canvas": b["inputs"], "mask": b["attention_mask"], "task_ids": b["task_ids"],
               "views": torch.stack([b["scale_factors"], b["offset"][:, 0], b["offset"][:, 1]], 1),
               "test_index": b["example_indices"]} for b in ev)
        runs_preds.append(ours.predict(model, eb, views, torch.device("cpu"), keep_log_probs=False))
    print("\n## training on the official batches (its dropout RNG state set alike before each forward)")
    print("\n".join(rows))

    # 3. predictions before the vote, the vote, the attempts
    print("\n## prediction on the official batches: per test input")
    print("scope     test  predictions  same grids  vote same  attempts same")
    scopes = [(f"run {k}", [k]) for k in range(a.runs)] + ([("pooled", list(range(a.runs)))] if a.runs > 1 else [])
    for name, ks in scopes:
        for j in range(a.tests):
            theirs = [g for k in ks for g in rec["predictions"][k][str(j)]]
            mine = [r["grid"] for k in ks for r in runs_preds[k] if r["test"] == j]
            same = sum(x == y for x, y in zip(theirs, mine))
            ref_vote = [(g, c) for g, c in official_vote(ref, theirs) if is_grid(g)]
            our_vote = [(g, c) for g, c in ours.vote(mine) if is_grid(g)]
            attempts_same = [g for g, _ in ref_vote[:2]] == [g for g, _ in our_vote[:2]]
            ok = same == len(theirs) == len(mine) and ref_vote == our_vote and attempts_same
            failed |= not ok
            print(f"{name:<8}  {j:>4}  {len(theirs):>11}  {same:>10}  {'yes' if ref_vote == our_vote else 'NO':>9}  "
                  f"{'yes' if attempts_same else 'NO':>13}")
    print("\n(votes compared on valid grids: the official list also ranks grids holding 10 or 11, or empty, ours "
          "keeps them out of the candidates)")
    print(f"# {'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
