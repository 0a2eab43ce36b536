"""Our vote against HRM's scorer (its arc_eval.ipynb) and TRM's (evaluators/arc.py), same predictions.

Needs checkouts of the reference code, which this project does not ship:

    git clone https://github.com/sapientinc/HRM benchmarks/out/hrm-reference   # /benchmarks/out is git-ignored
    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels benchmarks/out/trm-reference  # optional
    python benchmarks/compare_reference_vote.py --reference benchmarks/out/hrm-reference \
        [--trm benchmarks/out/trm-reference]

What it does:
1. builds ARC-AGI-1 with our builder (`arc_data.arc.build`, compact layout, `--num-aug` copies);
2. makes predictions for every row of the test split (every augmented copy of every evaluation
   test input): each row predicts the right answer (in its augmented frame) with probability
   `--p-correct`, else one of two wrong answers that all its augmented copies share (all black,
   or a copy of the input: both commute with the augmentations) or a one-cell corruption of its
   own; Q logits are drawn from a few values so that count and mean-Q ties happen;
3. scores them with our `eval.arc.vote` (HRM protocol: a task counts when all its test inputs are
   right) and with HRM's scorer, run from the notebook's own cells on a predictions file in the
   layout HRM's evaluate writes (`<checkpoint>_all_preds.0`: puzzle_identifiers, inputs, labels,
   logits, q_halt_logits);
4. with `--trm`, also with TRM's `ARC` evaluator (its fractional protocol: a task earns the share of
   its test inputs that are right), fed through its `update_batch`/`result` API in a one-process
   gloo group, on a copy of the dataset's identifiers in TRM's naming (`|||` separators) and a
   `test_puzzles.json` as TRM's builder writes it; compared with our `fractional` scores;
5. prints the pass@K tables; exit 1 if any K differs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from arc_data.arc.build import BuildConfig, build  # noqa: E402
from arc_data.dataset import open_split  # noqa: E402
from benchmarks.benchlib import print_table, stub_argdantic  # noqa: E402
from eval.arc.results import DEFAULT_KS  # noqa: E402
from eval.arc.vote import vote  # noqa: E402
from eval.predictions import Predictions, validate  # noqa: E402

VOCAB = 12


def make_predictions(data_dir: Path, p_correct: float, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(arrays for both scorers, labels (N, 900)) for every row of the test split."""
    rng = np.random.default_rng(seed)
    split = open_split(data_dir, "test")
    n = split.num_examples
    inputs, labels = split.examples(np.arange(n))
    inputs, labels = np.asarray(inputs, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    labels = np.where(labels < 0, 0, labels)  # ignore-label cells are padding (0) in the grid
    ids = np.repeat(np.asarray(split.puzzle_identifiers), np.diff(np.asarray(split.puzzle_indices)))
    # Each row predicts: the right answer (probability p), or one of two wrong answers that every
    # augmented copy shares once mapped back (they commute with rotations and colour maps): the
    # output's shape all black, or a copy of the input; or a wrong answer of its own (one cell
    # recoloured). So wrong answers win votes, counts tie, and Q decides or first-seen does.
    kind = rng.choice(4, size=n, p=[p_correct, (1 - p_correct) * 0.35, (1 - p_correct) * 0.35, (1 - p_correct) * 0.3])
    colour_cells = labels >= 2
    preds = labels.copy()
    preds[kind == 1] = np.where(colour_cells[kind == 1], 2, labels[kind == 1])  # all black (colour 0 + offset 2)
    preds[kind == 2] = inputs[kind == 2]
    for i in np.flatnonzero(kind == 3):
        cells = np.flatnonzero(colour_cells[i])
        cell = cells[rng.integers(0, len(cells))]
        preds[i, cell] = 2 + (preds[i, cell] - 2 + rng.integers(1, 10)) % 10
    q = rng.choice(np.array([-2.0, 0.0, 0.0, 1.5]), size=n).astype(np.float32)
    return {"puzzle_identifiers": ids.astype(np.int32), "inputs": inputs, "predictions": preds, "q_halt": q}, labels


def ours(data_dir: Path, arrays: dict[str, np.ndarray], ks: list[int]) -> dict[str, dict[int, float]]:
    p = validate(Predictions(puzzle_identifiers=arrays["puzzle_identifiers"], inputs=arrays["inputs"].astype(np.uint8),
                             predictions=arrays["predictions"].astype(np.uint8), q_halt=arrays["q_halt"]))
    result = vote(p, data_dir, ks=ks)
    return {proto: {k: result.scores[proto][str(k)] for k in ks} for proto in ("hrm", "fractional")}


def notebook_scope(ref_dir: Path) -> dict:
    """The code cells of HRM's arc_eval.ipynb, run without their last line (its top-level
    `test(visualize=False)` call, with the notebook's own paths): a namespace holding `test`,
    `load_identifiers_and_preds`, `crop`, ..., with DATASET_PATH / CHECKPOINT_PATH still to set."""
    cells = [c for c in json.loads((ref_dir / "arc_eval.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    code = "\n".join("".join(c["source"]) for c in cells)
    code, calls = re.subn(r"^test\(.*\)\s*$", "", code, flags=re.M)
    if calls != 1 or "def test(" not in code:
        raise SystemExit(f"{ref_dir}/arc_eval.ipynb: not the layout this script expects (a `def test(` and one "
                         "top-level `test(...)` call)")
    for mod in [m for m in sys.modules if m == "dataset" or m.startswith("dataset.")]:
        del sys.modules[mod]  # TRM's `dataset` package may be loaded: HRM's has the same name
    sys.path.insert(0, str(ref_dir))
    scope: dict = {"__name__": "hrm_arc_eval"}
    try:
        exec(compile(code, "arc_eval.ipynb", "exec"), scope)  # noqa: S102 - the reference's scorer, on purpose
    finally:
        sys.path.remove(str(ref_dir))
    return scope


def notebook_scores(output: str, ks: list[int]) -> dict[int, float]:
    """pass@K (%) from what the notebook's test() prints (`1-shot: 12.50%`)."""
    found = {int(k): float(v) for k, v in re.findall(r"^(\d+)-shot: ([\d.]+)%", output, re.M)}
    if sorted(found) != sorted(ks):
        raise SystemExit(f"could not read the reference scorer's output:\n{output}")
    return found


def reference(ref_dir: Path, data_dir: Path, arrays: dict[str, np.ndarray], labels: np.ndarray,
              ks: list[int], work: Path) -> dict[int, float]:
    """Run the scorer cells of HRM's arc_eval.ipynb on an `_all_preds` file of these predictions."""
    ckpt = work / "step_0"
    logits = torch.nn.functional.one_hot(torch.from_numpy(arrays["predictions"]), VOCAB).to(torch.float16)
    torch.save({"puzzle_identifiers": torch.from_numpy(arrays["puzzle_identifiers"]),
                "inputs": torch.from_numpy(arrays["inputs"]), "labels": torch.from_numpy(labels),
                "logits": logits, "q_halt_logits": torch.from_numpy(arrays["q_halt"])}, f"{ckpt}_all_preds.0")
    scope = notebook_scope(ref_dir)
    scope["DATASET_PATH"], scope["CHECKPOINT_PATH"] = str(data_dir), str(ckpt)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scope["test"](visualize=False, Ks=ks)
    return notebook_scores(out.getvalue(), ks)


def trm(trm_dir: Path, data_dir: Path, arrays: dict[str, np.ndarray], ks: list[int], work: Path) -> dict[int, float]:
    """TRM's evaluators/arc.py `ARC` on these predictions: pass@K in % (fractional protocol)."""
    import torch.distributed as dist

    from eval.arc.vote import load_ground_truth, read_table

    table = read_table(data_dir)
    names = json.loads((data_dir / "identifiers.json").read_text())
    trm_data = work / "trm_data"
    trm_data.mkdir(exist_ok=True)
    # TRM names augmented puzzles <task>|||t<k>|||<perm>; ours (HRM's) use "_".
    plain = (table.base_task < 0) | table.is_identity(np.arange(len(table)))  # blank row and originals
    trm_names = [n if plain[i] else
                 f"{table.task_names[table.base_task[i]]}|||t{table.dihedral[i]}|||{''.join(map(str, table.colour_map[i]))}"
                 for i, n in enumerate(names)]
    (trm_data / "identifiers.json").write_text(json.dumps(trm_names))
    truth = load_ground_truth(data_dir, "test", table)
    puzzles: dict[str, dict] = {}
    for t in truth.test_inputs:  # test_puzzles.json: each evaluation task's test pairs, in order
        puzzles.setdefault(t.task, {"test": []})["test"].append({"input": t.input_grid.tolist(), "output": t.truth_grid.tolist()})
    (trm_data / "test_puzzles.json").write_text(json.dumps(puzzles))

    for mod in [m for m in sys.modules if m == "dataset" or m.startswith(("dataset.", "evaluators"))]:
        del sys.modules[mod]  # HRM's `dataset` package may be loaded: TRM's has the same name
    stub_argdantic()
    sys.path.insert(0, str(trm_dir))
    try:
        from evaluators.arc import ARC  # noqa: PLC0415 - the reference's evaluator, from --trm
    finally:
        sys.path.remove(str(trm_dir))
    meta = types.SimpleNamespace(blank_identifier_id=0)
    evaluator = ARC(str(trm_data), meta, submission_K=2, pass_Ks=ks, aggregated_voting=False)
    evaluator.begin_eval()
    n = len(arrays["q_halt"])
    for a in range(0, n, 4096):  # batches, as its evaluation loop feeds it
        sl = slice(a, a + 4096)
        evaluator.update_batch({"inputs": torch.from_numpy(arrays["inputs"][sl]),
                                "puzzle_identifiers": torch.from_numpy(arrays["puzzle_identifiers"][sl])},
                               {"q_halt_logits": torch.from_numpy(arrays["q_halt"][sl]),
                                "preds": torch.from_numpy(arrays["predictions"][sl])})
    dist.init_process_group("gloo", init_method=f"file://{work / 'pg'}", rank=0, world_size=1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            res = evaluator.result(None, rank=0, world_size=1)
    finally:
        dist.destroy_process_group()
        (work / "pg").unlink(missing_ok=True)
    return {k: 100 * res[f"ARC/pass@{k}"] for k in ks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/sapientinc/HRM")
    parser.add_argument("--trm", type=Path, help="also compare with TRM's evaluator: a checkout of "
                        "github.com/SamsungSAILMontreal/TinyRecursiveModels")
    parser.add_argument("--num-aug", type=int, default=20)
    parser.add_argument("--p-correct", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ref_dir = args.reference.resolve()
    if not (ref_dir / "arc_eval.ipynb").is_file():
        raise SystemExit(f"--reference {ref_dir}: no arc_eval.ipynb there (a checkout of sapientinc/HRM is expected)")
    ks = list(DEFAULT_KS)
    t0 = time.perf_counter()
    rows, trm_rows, differ = [], [], False
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "arc1"
        with contextlib.redirect_stdout(io.StringIO()):
            build(BuildConfig(sources=["arc1"], output_dir=str(data_dir), num_aug=args.num_aug, materialize=False,
                              progress=False))
        for p in args.p_correct:
            arrays, labels = make_predictions(data_dir, p, args.seed)
            a = ours(data_dir, arrays, ks)
            # HRM's notebook prints 2 decimals; TRM's evaluator returns the exact fractions
            for table, proto, tol, theirs in [(rows, "hrm", 0.005, reference(ref_dir, data_dir, arrays, labels, ks,
                                                                            Path(tmp)))] + (
                    [(trm_rows, "fractional", 1e-9, trm(args.trm.resolve(), data_dir, arrays, ks, Path(tmp)))]
                    if args.trm else []):
                same = all(abs(a[proto][k] - theirs[k]) < tol for k in ks)
                differ |= not same
                table.append([f"{p:g}", f"{len(labels):,}"] + [f"{a[proto][k]:.2f} / {theirs[k]:.2f}" for k in ks]
                             + ["yes" if same else "NO"])
    header = ["p(correct)", "rows"] + [f"pass@{k}" for k in ks] + ["same"]
    print(f"# ARC-AGI-1 evaluation, num_aug {args.num_aug}, seed {args.seed}: pass@K in % (HRM protocol), "
          f"ours / HRM's arc_eval.ipynb scorer")
    print_table(header, rows)
    if args.trm:
        print("\n# the same predictions, pass@K in % (TRM's fractional protocol), ours / TRM's evaluators/arc.py")
        print_table(header, trm_rows)
    print(f"# {time.perf_counter() - t0:.1f} s")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
