"""Why does one copy per task ((e), `ttt`) solve fewer held-out tasks than the joint fine-tune ((c),
`train-vit init_from=` on the eight together) for the tiny LoopViT (results 4.14/4.15)? Arms of
per-task training at (c)'s compute, from the same pretrained model per seed (protocol strict).

    # first the pretraining, (c) and (e) of results 4.14 (one seed per call; reused when finished):
    OMP_NUM_THREADS=1 nice python benchmarks/study_unseen.py --out runs/vit-quality --model loopvit --seeds 0 \
        --pre-steps 10000 --adapt-steps 1600 --lr 1e-3 --protocols ce
    # then the arms, each into runs/vit-quality/arms/<arm>/s<seed>/ (a finished one is skipped):
    OMP_NUM_THREADS=1 nice python benchmarks/study_pertask_recipe.py --base runs/vit-quality --seeds 0 \
        --arms e_b1x1600 e_400 c_200
    python benchmarks/study_pertask_recipe.py --base runs/vit-quality --report    # the table, every seed

(c) trains 1,600 steps of batch 8 on the eight tasks' rows together (12,800 rows, about 1,600 a task);
(e) trains each task's copy 200 steps of batch 8 (the same 1,600 rows a task). The arms (`ARMS`):
the same rows per task with the learning rate, warm-up, views, leave-one-out pseudo-tasks or the
official loop changed; the same rows in 1,600 steps of batch 1 (as many optimiser steps as (c) gives
the shared weights); twice the steps; and the joint fine-tune cut to (e)'s 200 steps (as many steps as
a copy, an eighth of the rows a task). Every arm is scored on the unseen tasks' test inputs as
`study_unseen` scores (c) and (e): pass@1, pass@2 (HRM's rule), pass@2 (ARC Prize rule), cell@1, the
tasks solved. `--bases` lists other `study_unseen` output folders that hold a seed's pretraining (a
seed pretrained in its own folder, to run two seeds at once).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_unseen as su  # noqa: E402  (benchmarks/ is no package: the study's pieces)

MODEL = "loopvit"
BASE_TTT = {"steps": 200, "batch": 8, "num_aug": 8, "lr": 1e-3}  # (e) of results 4.14
WARMUP = "optim.warmup_steps=5"  # the study's, every train-vit run's
# arm -> ("ttt", ttt options over BASE_TTT, train_overrides) or ("joint", train-vit steps) or ("study", key)
ARMS: dict[str, tuple] = {
    "c": ("study", "c"),  # the joint fine-tune, 1,600 steps of batch 8 (study_unseen's run)
    "e": ("study", "e"),  # one copy per task, 200 steps of batch 8 (study_unseen's run)
    "e_again": ("ttt", {}, [WARMUP]),  # (e) rerun by this script: the same submission as the study's (e)?
    "e_lr3e-4": ("ttt", {"lr": 3e-4}, [WARMUP]),
    "e_lr3e-3": ("ttt", {"lr": 3e-3}, [WARMUP]),
    "e_warm40": ("ttt", {}, ["optim.warmup_steps=40"]),  # a fifth of the steps warming up
    "e_aug32": ("ttt", {"num_aug": 32}, [WARMUP]),
    "e_loo": ("ttt", {"leave_one_out": "true"}, [WARMUP]),
    "e_400": ("ttt", {"steps": 400}, [WARMUP]),  # twice the compute: is (e) under-trained?
    "e_b1x1600": ("ttt", {"steps": 1600, "batch": 1}, [WARMUP]),  # (c)'s optimiser steps, the same rows
    "e_b1x1600_k8": ("ttt", {"steps": 1600, "batch": 1, "copies": 8}, [WARMUP]),  # the same, 8 copies at once
    "e_b2x800": ("ttt", {"steps": 800, "batch": 2}, [WARMUP]),
    # the official loop: 51 views, 2 runs; epochs 0..4 = 5 epochs of ceil(51 x demos / 8) steps, about
    # 100-130 steps a run at 3-4 demonstrations, so about 200-260 a task; dropout 0.1 (its default)
    "e_official": ("ttt", {"views": "official", "official.epochs": 4, "official.runs": 2, "official.lr": 1e-3}, []),
    "c_200": ("joint", 200),  # the joint fine-tune at a copy's 200 steps of batch 8
    "c_again": ("joint", 1600),  # (c) rerun by this script, beside the other arms' code
}


def seed_dir(bases: list[Path], seed: int) -> Path:
    """The study's folder of this seed whose pretraining finished (the first base that has one)."""
    for b in bases:
        r = b / f"{MODEL}_s{seed}"
        if su.finished(r / "pretrain", PRE_STEPS[0]):
            return r
    sys.exit(f"seed {seed}: no finished {PRE_STEPS[0]}-step pretraining under {', '.join(map(str, bases))}")


PRE_STEPS = [10000]


def run_cli(args: list[str], log: dict, label: str) -> None:
    """`hrm-deeploop ARGS` in its own process, one thread: wall seconds, CPU seconds (user + sys of
    the process and its children, `os.wait4`), peak RSS and the load average at its start."""
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled",
               PYTHONPATH=str(su.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo:
        proc = subprocess.Popen([sys.executable, "-m", "hrm_deeploop.cli", *args], env=env, stdout=fo,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        fo.seek(0)
        text = fo.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(args[:3])} ... failed:\n{text[-3000:]}")
    log[label] = {"seconds": round(time.perf_counter() - t0, 1), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
                  "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_at_start": round(load, 2)}
    print(f"  {label}: {log[label]}", flush=True)


def run_arm(arm: str, seed: int, r: Path, out: Path, passes: int, quick: bool = False) -> dict | None:
    kind, *spec = ARMS[arm]
    if quick:  # a smoke run of the arm's commands: a few steps, no epoch of the official loop but its first
        official = {"official.epochs": 0} if kind == "ttt" and "views" in spec[0] else {}
        spec = [{**spec[0], "steps": 2, **official}, spec[1]] if kind == "ttt" else [2]
    if kind == "study":
        return None
    folder = out / "arms" / arm / f"s{seed}"
    if (folder / "score.json").is_file():
        print(f"  {arm} s{seed}: done before", flush=True)
        return json.loads((folder / "score.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    log: dict = {}
    start = (r / "pretrain").resolve()
    if kind == "ttt":
        opts, overrides = {**BASE_TTT, **spec[0]}, spec[1]
        chal = Path(r).parent / "raw" / "unseen_challenges.json"
        if not chal.is_file():
            su.write_unseen_challenges(chal, su.UNSEEN)
        args = ["ttt", f"checkpoint={start}", f"challenges={chal}", f"output_dir={folder / 'ttt'}", f"seed={seed}",
                "workers=1", "threads=1", "device=cpu", "progress=false", f"passes={passes}", "keep_work=true",
                *(f"{k}={v}" for k, v in opts.items())]
        if overrides:
            args.append("train_overrides=[" + ",".join(f"'{o}'" for o in [*overrides, "checkpoint.every=0"]) + "]")
        run_cli(args, log, f"ttt ({arm})")
        score = su.submission_scores(folder / "ttt" / "submission.json", chal)
        summary = json.loads((folder / "ttt" / "ttt_summary.json").read_text())
        score["protocol"] = summary.get("protocol")
        steps = [json.loads(p.read_text()).get("steps") for p in sorted((folder / "ttt" / "tasks").glob("*/result.json"))]
        score["steps_per_task"] = steps
        losses = {p.parts[-4]: json.loads(p.read_text()).get("final_train_loss")  # keep_work: each copy's run
                  for p in sorted((folder / "ttt" / "tasks").glob("*/work/run/summary.json"))}
        score["final_train_loss"] = losses  # the mean of its last 50 steps' loss, per task
        if (folder / "ttt" / "submission_poe.json").is_file():
            score["poe"] = su.submission_scores(folder / "ttt" / "submission_poe.json", chal)
    else:  # the joint fine-tune, as study_unseen's (c), at `steps`
        from hrm_deeploop.checkpoint import resolve

        common = ["logger=none", "device=cpu", "train.progress=false", "train.global_batch_size=8", WARMUP,
                  "optim.lr=1e-3", "checkpoint.every=0", *su.MODELS[MODEL]]
        run_cli(["train-vit", *common, f"seed={seed}", f"data_dir={r / 'unseen'}", f"output_dir={folder / 'run'}",
                 f"init_from={resolve(start)}", "train.epochs_per_iter=4", f"train.max_steps={spec[0]}"], log,
                f"train-vit ({arm})")
        run_cli(["evaluate", f"checkpoint={folder / 'run'}", f"data_dir={r / 'unseen'}", f"output_dir={folder / 'eval'}",
                 "device=cpu", "progress=false", "report=false", f"passes={passes}", f"tta_seed={seed}"], log,
                f"evaluate ({arm})")
        score = su.scores(folder / "eval")
        score["final_train_loss"] = json.loads((folder / "run" / "summary.json").read_text()).get("final_train_loss")
        score["protocol"] = "strict"  # the unseen set was held out of the pretraining build (study_unseen)
    score["timing"] = log
    (folder / "score.json").write_text(json.dumps(score, indent=1) + "\n")
    return score


def study_runs(bases: list[Path]) -> dict:
    """seed -> study_unseen's runs (its (c) and (e)) from every base."""
    runs: dict = {}
    for b in bases:
        f = b / f"results_{MODEL}.json"
        if f.is_file():
            for seed, run in json.loads(f.read_text())["runs"].items():
                runs.setdefault(seed, {}).update({k: v for k, v in run.items() if k in ("c", "e")})
    return runs


def report(out: Path, bases: list[Path]) -> dict:
    """Every arm's scores per seed (those finished), and the signs against (c) and (e)."""
    table: dict = {}
    study = study_runs(bases)
    for arm, (kind, *_) in ARMS.items():
        for seed in sorted({*study, *(p.name[1:] for p in (out / "arms" / arm).glob("s*"))}, key=int):
            f = out / "arms" / arm / f"s{seed}" / "score.json"
            s = study.get(seed, {}).get(arm) if kind == "study" else (json.loads(f.read_text()) if f.is_file() else None)
            if s:
                table.setdefault(arm, {})[seed] = s
    lines = ["| arm | seed | pass@1 | pass@2 | ARC Prize pass@2 | cell@1 | solved (pass@2) |", "|---|---|---|---|---|---|---|"]
    for arm, per in table.items():
        for seed, s in per.items():
            lines.append(f"| {arm} | {seed} | {s['pass@1']:.1f} | {s['pass@2']:.1f} | {s['arc_prize@2']:.1f} | "
                         f"{s['cell@1']:.1f} | {len(s['solved@2'])} {', '.join(s['solved@2'])} |")
    signs: dict = {}
    for arm, per in table.items():
        for ref in ("c", "e"):
            if arm == ref or ref not in table:
                continue
            common = [sd for sd in per if sd in table[ref]]
            d = [len(per[sd]["solved@2"]) - len(table[ref][sd]["solved@2"]) for sd in common]
            dc = [per[sd]["cell@1"] - table[ref][sd]["cell@1"] for sd in common]
            signs[f"{arm} vs {ref}"] = {"seeds": common, "solved_diff": d, "cell@1_diff": [round(x, 1) for x in dc]}
    print("\n".join(lines))
    for k, v in signs.items():
        print(f"{k}: tasks solved {v['solved_diff']}, cell@1 {v['cell@1_diff']} (seeds {v['seeds']})")
    result = {"protocol": "strict", "arms": table, "signs": signs}
    (out / "arms_results.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="study_unseen's --out (arms are written under it, in arms/)")
    ap.add_argument("--bases", nargs="*", default=[], help="more study_unseen folders holding a seed's pretraining")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--arms", nargs="+", default=[], choices=sorted(ARMS))
    ap.add_argument("--pre-steps", type=int, default=10000)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="each arm at 2 steps (a smoke run of its commands)")
    ap.add_argument("--report", action="store_true", help="print and write arms_results.json from what is finished")
    args = ap.parse_args(argv)
    PRE_STEPS[0] = args.pre_steps
    out = Path(args.base)
    bases = [out, *map(Path, args.bases)]
    for seed in args.seeds if args.arms else []:
        r = seed_dir(bases, seed)
        print(f"seed {seed} ({r})", flush=True)
        for arm in args.arms:
            s = run_arm(arm, seed, r, out, args.passes, args.quick)
            if s:
                print(f"  {arm} s{seed}: pass@1 {s['pass@1']:.1f} pass@2 {s['pass@2']:.1f} ARC Prize "
                      f"{s['arc_prize@2']:.1f} cell@1 {s['cell@1']:.1f} solved {s['solved@2']}", flush=True)
    if args.report:
        report(out, bases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
