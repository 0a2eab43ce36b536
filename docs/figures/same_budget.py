"""The same-budget tables of docs/results.md sections 4.8 (6x6 Sudoku) and 4.9 (4.7's ARC tasks):
HRM, TRM (attention and MLP mixer) and URM.

    PYTHONPATH=. python docs/figures/same_budget.py [root]     # default /work/runs/study3
    PYTHONPATH=. python docs/figures/same_budget.py --speed    # CPU time per step, the four interleaved
    PYTHONPATH=. python docs/figures/same_budget.py --flops    # FLOPs per example, counted by torch
    PYTHONPATH=. python docs/figures/same_budget.py --plot docs/figures/same_budget_sudoku6.png   # table + figure
    PYTHONPATH=. python docs/figures/same_budget.py --task arc [--speed | --flops] [--plot docs/figures/same_budget_arc.png]

Reads <root>/<model>/sudoku6/lr<LR>/<scheme>_s<seed>/ (metrics.jsonl, summary.json), as the loop
in section 4.8 writes them (model in hrm, trm, trm_mlp, urm; scheme baseline or deeploop), and
prints one markdown row per (model, scheme, lr): parameters, final exact
accuracy on the 200 held-out puzzles per seed and their mean [min, max], the median time per
training step (from the trainer's examples/s: wall time, so the machine's load is in it) and the
wall time per run, and the best rate of each (model, scheme) by the mean over seeds 0-2.
`--speed` times one training step of each tiny model at the study's shapes (batch 32, 36 cells,
vocabulary 8, EMA off) in one process, the four taking turns, as the CPU time of the process
(which other processes' load does not inflate): the fairer time per step. `--flops` counts, with
`torch.utils.flop_counter.FlopCounterMode` (matrix products, convolutions and attention, the CPU attention kernel given torch's formulas for
the CUDA ones; norms and pointwise ops are not counted), the FLOPs of one training step (one ACT segment forward and backward,
HRM's extra Q-target forward included) and of one evaluation forward (all `halt_max_steps`
segments), per example.

`--task arc` does the same for section 4.9 from the committed records of its runs,
docs/figures/data/same_budget_arc.jsonl (one JSON object a run: model, scheme, lr, seed, steps, the share of single
augmented test copies exactly right, the voted pass@K by the HRM protocol, the tasks solved at pass@2, how well the
run fits its demonstrations, time per step, the machine and where the record came from): the table per
(model, scheme, lr, steps), the best rate by the sweep's rule, then the two-sided Mann-Whitney U test on single copies
of every pair of cells with at least three seeds (`hrm_deeploop.study.mann_whitney_u`), at the best rates and at
equal CPU time; `--speed` and `--flops` at 4.7's shapes (batch 8, the 30x30 canvas, vocabulary 12, 82 puzzle
identifiers, halt_max_steps 2, HRM with 1 H + 1 L layer).

    PYTHONPATH=. python docs/figures/same_budget.py --task arc --collect [root]   # record the finished runs

`--collect` adds a record of every finished run under <root>/arc/<model>/lr<LR>/<scheme>_s<seed>/ (and
<root>/arc_wall/..., the equal-CPU-time runs) with its `evaluate` folder beside it (eval_<scheme>_s<seed>/) to the
records file, replacing an older record of the same run. Run folders live on the machine that ran them; commit the
records as runs finish. The first 45 records were transcribed from the table this script printed before the records
existed (their `source` says so; their run folders were lost with that machine).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from hrm_deeploop.training.runlog import read_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the figures' sibling scripts, run or loaded from a file
from budget_records import (  # noqa: E402  (the committed run records of section 4.9)
    RECORD_KEY,
    RECORDS,
    machine,
    merge_records,
    read_records,
    run_key,
    write_records,
)

_PLOT = sys.argv[sys.argv.index("--plot") + 1] if "--plot" in sys.argv else None
TASK = sys.argv[sys.argv.index("--task") + 1] if "--task" in sys.argv else "sudoku6"
ROOT = Path(next((a for a in sys.argv[1:] if not a.startswith("--") and a not in (_PLOT, TASK)), "/work/runs/study3"))
if TASK not in ("sudoku6", "arc"):
    raise SystemExit(f"--task {TASK}: expected sudoku6 or arc")


def run_figures(run: Path) -> tuple[float, float, float, int, float] | None:
    """(final exact %, median ms per step, wall s, params, training rows exact % over the last 100 steps)
    of a finished run, else None."""
    summary = run / "summary.json"
    if not summary.is_file():
        return None
    s = json.loads(summary.read_text())
    rows = read_rows(run / "metrics.jsonl")
    batch = rows[0]["examples"]  # examples seen after step 1 = the global batch
    per_step = [1e3 * batch / r["perf/examples_per_s"] for r in rows if r.get("perf/examples_per_s")]
    return (100 * s["last_eval"]["eval/exact_accuracy"], statistics.median(per_step), s["wall_time_s"], s["params"],
            train_fit(rows))


def train_fit(rows: list[dict], last: int = 100) -> float:
    """% of the training rows that halted in the last `last` steps that were exactly right: how well the
    model fits the demonstrations (the trainer logs exact accuracy over the rows that halted)."""
    rows = [r for r in rows if "train/exact_accuracy" in r][-last:]
    halted = sum(r["train/count"] for r in rows)
    return 100 * sum(r["train/exact_accuracy"] * r["train/count"] for r in rows) / halted if halted else 0.0


MODELS = ("hrm", "trm", "trm_mlp", "urm")
BATCH = 32 if TASK == "sudoku6" else 8


def lr_dirs(model: str) -> list[Path]:
    """The Sudoku study's lr<LR> folders of one model, by rate (section 4.9 reads its records instead)."""
    return sorted((ROOT / model / "sudoku6").glob("lr*"), key=lambda d: float(d.name[2:]))


def label(model: str) -> str:
    return {"trm": "TRM, attention", "trm_mlp": "TRM, MLP mixer"}.get(model, model.upper())


def study_model(model: str):  # noqa: ANN201 - the composed model config of the study's run
    from hrm_deeploop.cli import compose

    name, mixer = ("trm", ["model.mixer=mlp"]) if model == "trm_mlp" else (model, [])
    if TASK == "sudoku6":
        return compose("train", [f"experiment={name}_tiny_cpu", "model.vocab_size=8", "model.seq_len=36",
                                 "model.num_puzzle_identifiers=1", *mixer]).model
    hrm = ["model.num_h_layers=1", "model.num_l_layers=1"] if model == "hrm" else []
    return compose("train", [f"model={name}_tiny", "model.vocab_size=12", "model.seq_len=900",
                             "model.num_puzzle_identifiers=82", "model.halt_max_steps=2", *hrm, *mixer]).model


def study_trainer(model: str, fused: bool = True):  # noqa: ANN201 - (trainer, batches) at the study's shapes
    import torch

    from benchmarks.reasoner_setup import make_trainer, random_batches
    from hrm_deeploop.models.scaling import ScalingConfig
    from hrm_deeploop.training.train_config import ReasonerOptim

    cfg, device = study_model(model), torch.device("cpu")
    trainer = make_trainer(cfg, ScalingConfig(), device, BATCH, False, ReasonerOptim(lr=1e-3, warmup_steps=10),
                           fused=fused)
    return trainer, random_batches(cfg, BATCH, 4, device)


def flops() -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    torch.set_num_threads(1)
    aten = torch.ops.aten
    # torch counts the CUDA attention kernels only; the CPU one gets the same formulas
    cpu_attention = {
        aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, out_shape=None, **kw: sdpa_flop_count(q, k, v),
        aten._scaled_dot_product_flash_attention_for_cpu_backward:
            lambda g, q, k, v, *a, out_shape=None, **kw: sdpa_backward_flop_count(g, q, k, v)}
    print("| model | params | training step, MFLOPs / example | evaluation forward, MFLOPs / example |")
    print("|---|---|---|---|")
    for model in MODELS:
        trainer, batches = study_trainer(model, fused=False)
        trainer.train_step(tensors=batches[0])  # past the first step's set-up
        with FlopCounterMode(display=False, custom_mapping=cpu_attention) as count:
            trainer.train_step(tensors=batches[1])
        train = count.get_total_flops() / BATCH
        net = trainer.model
        net.eval()
        with FlopCounterMode(display=False, custom_mapping=cpu_attention) as count:
            net.predict(batches[2])
        evaluate = count.get_total_flops() / BATCH
        params = sum(p.numel() for p in net.parameters())
        print(f"| {label(model)} | {params:,} | {train / 1e6:.2f} | {evaluate / 1e6:.2f} |")


def speed(steps: int = 40, warmup: int = 5) -> None:
    import torch

    from benchmarks.benchlib import time_interleaved

    torch.set_num_threads(1)
    device = torch.device("cpu")
    sides = {}
    for model in MODELS:
        trainer, batches = study_trainer(model)
        sides[model] = lambda t=trainer, b=batches: t.train_step(tensors=b[t.step % len(b)])
    ms = time_interleaved(sides, device, warmup, steps)
    print(f"| model | ms / step (CPU time, median of {steps}, interleaved) |")
    print("|---|---|")
    for model, t in ms.items():
        print(f"| {label(model)} | {t:.1f} |")


def main() -> int:
    if "--speed" in sys.argv:
        speed()
        return 0
    if "--flops" in sys.argv:
        flops()
        return 0
    if "--collect" in sys.argv:
        return collect()
    if TASK == "arc":
        return arc_table()
    print("| model | scheme | lr | params | final exact %, per seed | mean [min, max] | mean of seeds 0-2 | "
          "ms / step (median) | wall / run |")
    print("|---|---|---|---|---|---|---|---|---|")
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for model in MODELS:
        for scheme in ("baseline", "deeploop"):
            for lr_dir in lr_dirs(model):
                runs = sorted(lr_dir.glob(f"{scheme}_s*"), key=lambda p: int(p.name.split("_s")[1]))
                done = {int(r.name.split("_s")[1]): f for r in runs if (f := run_figures(r)) is not None}
                if not done:
                    continue
                exact = [f[0] for f in done.values()]
                m3 = mean_seeds(done, 0)
                if m3 is not None and m3 > best.get((model, scheme), (-1.0, ""))[0]:
                    best[(model, scheme)] = (m3, lr_dir.name[2:])
                m3 = float("nan") if m3 is None else m3
                fs = list(done.values())
                print(f"| {label(model)} | {scheme} | {lr_dir.name[2:]} | "
                      f"{fs[0][3]:,} | {', '.join(f'{e:.1f}' for e in exact)} | "
                      f"**{statistics.mean(exact):.1f}** [{min(exact):.1f}, {max(exact):.1f}] | {m3:.1f} | "
                      f"{statistics.median(f[1] for f in fs):.0f} | {min(f[2] for f in fs):.0f}-{max(f[2] for f in fs):.0f} s |")
    for (model, scheme), (m3, lr) in best.items():
        print(f"best rate, {model} {scheme}: {lr} (mean of seeds 0-2: {m3:.1f})")
    if _PLOT is not None:
        plot(Path(_PLOT))
    return 0


def rate_axes(ax, ticks: list[str], ylabel: str, title: str) -> None:  # noqa: ANN001 - a matplotlib Axes
    """A learning-rate sweep's axes: log x with the rates as ticks, labels, legend, grid."""
    ax.set_xscale("log")
    ax.set_xticks([float(t) for t in ticks], ticks)
    ax.minorticks_off()
    ax.set_xlabel("learning rate (optim.lr)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def plot(path: Path) -> None:
    """Final exact accuracy against the learning rate: each seed a dot, the mean of seeds 0-2 a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    rates: set[str] = set()
    for i, model in enumerate(MODELS):
        for scheme, style in (("baseline", "-"), ("deeploop", "--")):
            xs, means = [], []
            for lr_dir in lr_dirs(model):
                done = {int(r.name.split("_s")[1]): f[0] for r in lr_dir.glob(f"{scheme}_s*")
                        if (f := run_figures(r)) is not None}
                if not done:
                    continue
                lr = float(lr_dir.name[2:])
                rates.add(lr_dir.name[2:])
                ax.scatter([lr] * len(done), list(done.values()), s=10, color=f"C{i}", alpha=0.5)
                if all(s in done for s in (0, 1, 2)):
                    xs.append(lr)
                    means.append(statistics.mean(done[s] for s in (0, 1, 2)))
            if xs:
                ax.plot(xs, means, style, color=f"C{i}", marker="o", label=f"{label(model)} {scheme}")
    rate_axes(ax, sorted(rates, key=float), "final exact accuracy, % of 200 held-out puzzles",
              "6x6 Sudoku, 1500 steps of batch 32: mean of seeds 0-2 (line), every seed (dots)")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def collect() -> int:
    """Add a record of every finished run under <root>/arc (1500 steps) and <root>/arc_wall (equal CPU time) that
    has its `evaluate` folder, to the committed records file. The run folders stay on the machine that ran them; the
    records are what the table, the tests and the figure read."""
    from study_arc import vote_figures

    new, where = [], machine()
    for sub in ("arc", "arc_wall"):
        for run in sorted((ROOT / sub).glob("*/lr*/*_s*")):
            ev = run.parent / f"eval_{run.name}"
            if run.name.startswith("eval_") or (f := run_figures(run)) is None \
                    or not (ev / "pass_at_k.json").is_file():
                continue
            summary = json.loads((run / "summary.json").read_text())
            exact, copies, scores, solved, lines = vote_figures(ev, ROOT / "arc" / "data")
            scheme, seed = run.name.rsplit("_s", 1)
            new.append({"model": run.parent.parent.name, "scheme": scheme, "lr": run.parent.name[2:],
                        "seed": int(seed), "steps": summary["steps"], "exact_copies": exact, "copies": copies,
                        "pass_at_k": scores, "solved": solved, "ms_per_step": round(f[1], 1),
                        "wall_s": round(f[2]), "params": f[3], "train_fit": round(f[4], 2), "test_inputs": lines,
                        "machine": where, "source": f"run folder {run}, collected {time.strftime('%Y-%m-%d')}"})
    old = read_records(RECORDS)
    have = {run_key(r): r for r in old}
    changed = [r for r in new if have.get(run_key(r)) != r]
    write_records(merge_records(old, new), RECORDS)
    for r in changed:
        print("recorded:", " ".join(str(r[k]) for k in RECORD_KEY))
    print(f"{RECORDS}: {len(changed)} of {len(new)} runs found new or changed")
    return 0


def arc_runs(model: str, scheme: str) -> list[tuple[str, int, dict[int, tuple]]]:
    """[(lr, steps, {seed: (exact copies %, pass@1, pass@2, tasks solved, ms/step, wall s, params, training rows
    exact %)})] of one (model, scheme) on 4.7's ARC tasks, from the committed records (ms/step and wall s are None
    for the runs whose folders were lost before they were recorded)."""
    cells: dict[tuple[str, int], dict[int, tuple]] = {}
    for r in read_records(RECORDS):  # this module's RECORDS (the tests point it elsewhere)
        if (r["model"], r["scheme"]) == (model, scheme):
            cells.setdefault((r["lr"], r["steps"]), {})[r["seed"]] = (
                100 * r["exact_copies"] / r["copies"], r["pass_at_k"]["1"], r["pass_at_k"]["2"], r["solved"],
                r.get("ms_per_step"), r.get("wall_s"), r["params"], r["train_fit"])
    return [(lr, steps, dict(sorted(done.items()))) for (lr, steps), done in
            sorted(cells.items(), key=lambda c: (c[0][1], float(c[0][0])))]


ARC_SWEEP = ("5e-4", "1e-3", "2e-3", "3e-3")  # section 4.9's rates, fixed before its sweep
STEPS = 1500  # section 4.9's budget; other step counts are the equal-CPU-time runs


def mean_seeds(done: dict[int, tuple], i: int, seeds: tuple[int, ...] = (0, 1, 2)) -> float | None:
    """Mean of field i over the seeds (0-2 unless told), None unless all of them finished."""
    return statistics.mean(done[s][i] for s in seeds) if all(s in done for s in seeds) else None


def sweep_score(scheme: str, steps: int, done: dict[int, tuple],
                seeds: tuple[int, ...] = (0, 1, 2)) -> tuple[float, float] | None:
    """What the sweep's rule ranks a cell by, (mean single copies, mean pass@2) over seeds 0-2 (0-4 to break a
    tie); None for a cell outside the sweep (DeepLoop, another budget) or without all of those seeds."""
    ex = mean_seeds(done, 0, seeds)
    return (ex, mean_seeds(done, 2, seeds)) if scheme == "baseline" and steps == STEPS and ex is not None else None


TIE_SEEDS = (0, 1, 2, 3, 4)  # a tie over seeds 0-2 is broken by the same two measures over these


def tied_cells(cells: list, model: str, score: tuple) -> list[tuple[str, dict]]:
    """[(lr, seeds)] of the model's sweep cells whose score over seeds 0-2 equals `score`, lowest rate first."""
    return [(lr, done) for m, sc, lr, steps, done in cells
            if (m, sc) == (model, "baseline") and sweep_score(sc, steps, done) == score]


def best_arc_rates(cells: list) -> dict[tuple[str, str], tuple[str, float, float]]:
    """{(model, scheme): (lr, mean single copies, mean pass@2)}: the rule of 4.9's sweep, the highest mean of
    single copies exact over seeds 0-2, ties to the higher mean pass@2 over seeds 0-2 (1500-step runs only)."""
    best: dict[tuple[str, str], tuple[str, float, float]] = {}
    for model, scheme, lr, steps, done in cells:
        if (score := sweep_score(scheme, steps, done)) and score > best.get((model, scheme), ("", -1.0, -1.0))[1:]:
            best[(model, scheme)] = (lr, *score)
    for (model, scheme), (lr, *score) in list(best.items()):  # a full tie: seeds 0-4 decide once every tied rate has them
        tied = tied_cells(cells, model, tuple(score))
        over5 = [(sweep_score(scheme, STEPS, done, TIE_SEEDS), lr) for lr, done in tied]
        if len(tied) > 1 and all(s is not None for s, _ in over5):
            top = max(s for s, _ in over5)
            best[(model, scheme)] = (next(lr for s, lr in over5 if s == top), *score)
    for model, scheme, lr, steps, done in cells:  # DeepLoop is not swept: compared at the baseline's best rate only
        if scheme == "deeploop" and steps == STEPS and best.get((model, "baseline"), ("",))[0] == lr \
                and (ex := mean_seeds(done, 0)) is not None:
            best[(model, scheme)] = (lr, ex, mean_seeds(done, 2))
    return best


def rate_ties(cells: list, best: dict) -> dict[str, list[str]]:
    """{model: the other rates} where the baseline's best rate ties another on both of the rule's measures over
    seeds 0-2 (then seeds 0-4 decide, once every tied rate has them; until then `best_arc_rates` keeps the lowest)."""
    others = {model: [lr for lr, _ in tied_cells(cells, model, chosen[1:]) if lr != chosen[0]]
              for (model, scheme), chosen in best.items() if scheme == "baseline"}
    return {model: lrs for model, lrs in others.items() if lrs}


def tie_note(cells: list, model: str, chosen: tuple, tied: list[str]) -> str:
    """How the table names a tie over seeds 0-2: broken over seeds 0-4 (with both figures), or still open."""
    over5 = [(lr, sweep_score("baseline", STEPS, done, TIE_SEEDS)) for lr, done in tied_cells(cells, model, chosen[1:])]
    if all(s is not None for _, s in over5):
        figures = ", ".join(f"{lr} {s[0]:.1f} / {s[1]:.1f}" for lr, s in over5)
        return f"; tied over seeds 0-2 with {', '.join(tied)}, chosen over seeds 0-4 ({figures})"
    return (f"; tied on both with {', '.join(tied)}: the rule cannot choose until seeds 3-4 run at each tied rate, "
            "the lowest rate is kept")


def spread(values: list, unit: str = "") -> str:
    """min-max of the values known ("-" where none is: runs recorded without them)."""
    known = [v for v in values if v is not None]
    return f"{min(known):.0f}-{max(known):.0f}{unit}" if known else "-"


def arc_table() -> int:
    cells = [(m, sc, lr, steps, done) for m in MODELS for sc in ("baseline", "deeploop")
             for lr, steps, done in arc_runs(m, sc)]
    if not cells:
        raise SystemExit(f"{RECORDS}: no records (collect them from the run folders with --collect [root])")
    print("| model | lr | steps | single copies exact, per seed | mean [min, max] | pass@1, per seed | pass@2, per seed | "
          "mean pass@2 | seeds 0-2: mean single copies, mean pass@2 | tasks solved at pass@2 (in how many seeds) | "
          "training rows exact, last 100 steps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, scheme, lr, steps, done in cells:
        fs = list(done.values())
        ex, p1, p2 = ([f[i] for f in fs] for i in range(3))
        solved = Counter(name for f in fs for name in f[3])
        first3 = (mean_seeds(done, 0), mean_seeds(done, 2))
        print(f"| {label(model)}{', DeepLoop' if scheme == 'deeploop' else ''} | {lr} | {steps:,} | "
              f"{', '.join(f'{e:.1f}' for e in ex)} | **{statistics.mean(ex):.1f}** [{min(ex):.1f}, {max(ex):.1f}] | "
              f"{', '.join(f'{v:.1f}' for v in p1)} | {', '.join(f'{v:.1f}' for v in p2)} | "
              f"**{statistics.mean(p2):.1f}** | "
              f"{'-' if first3[0] is None else f'**{first3[0]:.1f}**, {first3[1]:.1f}'} | "
              f"{', '.join(f'{n} ({c})' for n, c in sorted(solved.items())) or '-'} | "
              f"{', '.join(f'{f[7]:.1f}' for f in fs)} |")
    print("\n| model | scheme | lr | steps | params | seeds | ms / step (wall, from the trainer) | wall / run |")
    print("|---|---|---|---|---|---|---|---|")
    for model, scheme, lr, steps, done in cells:
        fs = list(done.values())
        print(f"| {label(model)} | {scheme} | {lr} | {steps:,} | {fs[0][6]:,} | {len(fs)} | {spread([f[4] for f in fs])} | "
              f"{spread([f[5] for f in fs], ' s')} |")
    best = best_arc_rates(cells)
    ties = rate_ties(cells, best)
    print()
    for model in MODELS:
        mine = {lr: done for m, sc, lr, steps, done in cells if (m, sc, steps) == (model, "baseline", STEPS)}
        missing = [lr for lr in sorted(set(ARC_SWEEP) | set(mine), key=float)
                   if lr not in mine or mean_seeds(mine[lr], 0) is None]
        lr, ex, p2 = best.get((model, "baseline"), ("-", float("nan"), float("nan")))
        tied = ties.get(model, [])
        print(f"best rate, {model} baseline: {lr} (seeds 0-2: {ex:.1f} single copies, {p2:.1f} pass@2)"
              + (tie_note(cells, model, best[(model, "baseline")], tied) if tied else "")
              + (f"; the sweep still lacks seeds 0-2 at {', '.join(missing)}" if missing else "; sweep complete"))
    from hrm_deeploop.reports.stats import mann_whitney_u

    at_best = [(f"{label(m)}{', DeepLoop' if sc == 'deeploop' else ''} {lr}", list(done.values()))
               for m, sc, lr, steps, done in cells
               if steps == STEPS and len(done) >= 3 and best.get((m, sc), ("",))[0] == lr]
    # equal CPU time: HRM's 1500 steps at its best rate against the others' longer runs at theirs
    equal = [(f"{label(m)} {lr} {steps} steps", list(done.values())) for m, sc, lr, steps, done in cells
             if sc == "baseline" and len(done) >= 3 and best.get((m, sc), ("",))[0] == lr
             and (steps != STEPS or m == "hrm")]
    by_cell = {(m, sc, lr, steps): done for m, sc, lr, steps, done in cells}
    schemes = [[(f"{label(m)} {lr}", list(done.values())), (f"{label(m)}, DeepLoop {lr}", list(dl.values()))]
               for (m, sc, lr, steps), done in by_cell.items() if sc == "baseline" and len(done) >= 3
               and len(dl := by_cell.get((m, "deeploop", lr, steps), {})) >= 3]
    groups = [("each model's best rate, all its seeds", [at_best]),
              ("equal CPU time", [equal] if len(equal) > 1 else []),  # HRM's 1500 steps alone: none run yet
              ("baseline against DeepLoop at one rate", schemes)]
    for group, sets in groups:
        for what, i in (("single copies exact", 0), ("training rows exact, last 100 steps", 7)):
            if sets:
                print(f"\nTwo-sided Mann-Whitney U on {what} ({group}):")
            for runs in sets:
                for j, (a, xs) in enumerate(runs):
                    for b, ys in runs[j + 1:]:
                        p = mann_whitney_u([f[i] for f in xs], [f[i] for f in ys])[1]
                        print(f"- {a} ({len(xs)} seeds) against {b} ({len(ys)}): p = {p:.3f}")
    if _PLOT is not None:
        arc_plot(Path(_PLOT), cells, best)
    return 0


def arc_plot(path: Path, cells: list, best: dict) -> None:
    """Left: the sweep, single copies exact against the rate (dot = seed, line = mean of seeds 0-2). Right: each
    (model, scheme) at its best rate: single copies exact, voted pass@1 and pass@2, one dot per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (sweep, ax) = plt.subplots(1, 2, figsize=(12.0, 4.2), dpi=120, gridspec_kw={"width_ratios": [1, 1.3]})
    keys = [(m, sc) for m in MODELS for sc in ("baseline", "deeploop") if any(c[:2] == (m, sc) for c in cells)]
    colour = {k: f"C{i}" for i, k in enumerate(keys)}
    for key in keys:
        mine = sorted(((float(lr), done) for m, sc, lr, steps, done in cells if (m, sc) == key and steps == STEPS),
                      key=lambda c: c[0])
        for lr, done in mine:
            sweep.scatter([lr] * len(done), [f[0] for f in done.values()], s=10, color=colour[key], alpha=0.5)
        line = [(lr, mean_seeds(done, 0)) for lr, done in mine if mean_seeds(done, 0) is not None]
        if line:
            sweep.plot(*zip(*line), "-" if key[1] == "baseline" else "--", color=colour[key], marker="o",
                       label=f"{label(key[0])} {key[1]}")
    rates = sorted({lr for _, _, lr, steps, _ in cells if steps == STEPS} | set(ARC_SWEEP), key=float)
    rate_axes(sweep, rates, "single test copies exact, %", "the sweep: dot = seed, line = mean of seeds 0-2")
    shown = [c for c in cells if best.get(c[:2], ("",))[0] == c[2]]  # at the best rate: 1500 steps, equal CPU time
    width = 0.8 / max(len(shown), 1)
    for i, (model, scheme, lr, steps, done) in enumerate(shown):
        for j in range(3):
            ys = [f[j] for f in done.values()]
            x = j + (i - (len(shown) - 1) / 2) * width
            fill = {"color": colour[(model, scheme)]} if steps == STEPS else \
                {"edgecolors": colour[(model, scheme)], "facecolors": "none"}
            ax.scatter([x] * len(ys), ys, s=14, alpha=0.7, marker="o" if scheme == "baseline" else "s", **fill,
                       label=f"{label(model)} {scheme} (lr {lr}, {steps} steps, {len(ys)} seed{'s' * (len(ys) > 1)})"
                       if j == 0 else None)
            ax.hlines(statistics.mean(ys), x - width / 3, x + width / 3, color=colour[(model, scheme)])
    ax.set_xticks(range(3), ["single copies exact", "voted pass@1", "voted pass@2"])
    ax.set_ylabel("%")
    ax.set_title("each at its best rate (dot = seed, line = mean)", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: the dots stay visible
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle("4.7's 8 ARC-1 tasks, held-out test inputs, batch 8 (1500 steps; hollow: HRM's CPU time)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
