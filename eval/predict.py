"""`hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT`: predict, then vote (ARC) or
score (Sudoku, Maze, any other task: `eval.puzzle_eval`, exact and token accuracy with and without
test-time augmentation, per ACT segment; docs/evaluation.md). The rest of this docstring is ARC's path.

Runs the model over every example of the test split (every augmented copy), each batch from a
fresh carry for exactly halt_max_steps segments in eval mode (the reference's protocol), sharded
across ranks under torchrun and gathered on rank 0. Writes `OUT/predictions.npz`:

    puzzle_identifiers  int32   [n]       the example's puzzle id, as in the dataset
    inputs              uint8   [n, 900]  the example's input sequence
    predictions         uint8   [n, 900]  argmax token per position (augmented frame, label encoding)
    q_halt              float32 [n]       halting logit of the last segment

in dataset order, without padding rows (written by `eval.predictions.save_predictions`, which
validates it); then runs the vote step (`eval.vote.run`, skip with vote=false).

CKPT is one of ours (`<run>/checkpoints/step_N.pt`, or a run folder for its latest checkpoint), HRM
or TRM (a TRM run trained with `train.ema=true` is evaluated with its weight average; `ema=false`
for the raw weights), or an official checkpoint in its release layout, `<dir>/step_N` with
`all_config.yaml` beside it: HRM's (sapientinc/HRM-checkpoint-*) or TRM's (the ARC Prize
verification release arcprize/trm_arc_prize_verification, `arc_v1_public/step_518071`, whose
weights are already TRM's average).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arc_data.fsio import check_output_dir, staged_outputs
from eval.predictions import save_predictions
from eval.tasks import TASK_CHOICES, evaluation_for
from hrm_deeploop import checkpoint as ckpt
from hrm_deeploop import official
from hrm_deeploop import runtime as D
from hrm_deeploop.config import at_least, device_name, one_of, optional_at_least
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.models.act import ACTReasoner
from hrm_deeploop.models.config import HRMConfig, TRMConfig, URMConfig
from hrm_deeploop.models.reasoners import build_reasoner
from hrm_deeploop.models.scaling import ScalingConfig


@dataclass
class EvaluateConfig:
    """`hrm-deeploop evaluate`: predict every augmented test copy with a checkpoint, then vote."""

    checkpoint: str | None = None  # <run>/checkpoints/step_N.pt, a run folder, or an official HRM/TRM <dir>/step_N
    data_dir: str | None = None
    output_dir: str | None = None
    split: str = "test"
    global_batch_size: int | None = None  # None: 768 on CUDA, 16 per rank on CPU
    device: str = "auto"
    dtype: str = "auto"  # auto: the checkpoint's forward_dtype on CUDA, float32 on CPU
    max_batches: int | None = None  # cap (quick looks and tests); the vote then sees a subset
    ema: bool = True  # use the weight average of a checkpoint trained with train.ema=true
    vote: bool = True  # ARC: run the vote step on the predictions (other tasks are always scored)
    overwrite: bool = False  # replace an existing OUT/predictions.npz
    progress: bool = True
    halt_max_steps: int | None = None  # ACT segments to run (None: the checkpoint's; more = deeper than trained)
    task: str = "auto"  # auto (the dataset's) | sudoku | maze | generic: for datasets that do not record it
    tta: int = 0  # Sudoku/Maze: augmented copies of every test input, voted count-first (0 = off)
    tta_seed: int = 0
    report: bool = True  # report.html + report/*.png (ARC's vote report, or the puzzle pictures)
    report_puzzles: int = 6  # puzzles pictured in the report (Sudoku/Maze; half solved, half not)
    challenges: str | None = None  # ARC: submission.json covers every task and test input of this *_challenges.json
    all_checkpoints: bool = False  # checkpoint=RUN: every checkpoint into OUT/step_N/, then curve.json/png (eval/curve.py)

    def __post_init__(self) -> None:
        optional_at_least("global_batch_size", self.global_batch_size, 1)
        optional_at_least("max_batches", self.max_batches, 1)
        optional_at_least("halt_max_steps", self.halt_max_steps, 1)
        at_least("tta", self.tta, 0)
        at_least("tta_seed", self.tta_seed, 0)
        at_least("report_puzzles", self.report_puzzles, 0)
        one_of("task", self.task, TASK_CHOICES)
        device_name("device", self.device)
        one_of("dtype", self.dtype, ("auto", "float32", "bfloat16", "float16"))
        one_of("split", self.split, ("train", "test"))


# ---- loading a checkpoint -------------------------------------------------------------------------

@dataclass
class LoadedModel:
    model: ACTReasoner  # HRM or TRM
    config: HRMConfig | TRMConfig | URMConfig
    kind: str  # "hrm-deeploop" | "official"
    step: int | None
    path: Path
    weights: str = "raw"  # raw | ema (the weight average of our checkpoint) | official
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    puzzle_names: list[str] | None = None  # name of every puzzle-table row (adapted checkpoints: data/rows.py)
    run_config: dict | None = None  # the resolved config of the run that wrote it (ours), e.g. its data_dir


SCHEMAS: dict[str, type] = {"hrm": HRMConfig, "trm": TRMConfig, "urm": URMConfig}


def load_model(path: str | Path, device: torch.device | str = "cpu", dtype: str = "auto",
               seq_len: int | None = None, ema: bool = True, batch: int = 0) -> LoadedModel:
    """Build the model a checkpoint describes and load its weights (ours, HRM or TRM, or an official
    HRM or TRM one). With `ema`, a checkpoint of ours that holds a weight average loads the average.
    A model this machine cannot hold (with `batch` rows per forward, if given) is refused in one
    line before it is built (runtime.estimate_memory).

    An official RoPE checkpoint does not record the sequence length (HRM and TRM take it from the
    dataset): `seq_len` supplies it, default 900 (the ARC format)."""
    p = ckpt.resolve(path)
    device = torch.device(device)
    state = ckpt.load(p, map_location="cpu")
    if not isinstance(state, dict):
        raise UserError(f"checkpoint '{p}' is not a state dict or a train-state file")
    which = (state.get("exported") or {}).get("weights") or "raw"  # an exported folder says what it holds
    if official.is_official(state):
        arch = official.read_official_arch(p)
        name = official.official_kind(arch, str(p))
        if name == "trm":
            values = official.official_trm_model_fields(arch, state, str(p))
        else:
            values = official.official_model_fields(arch, state, str(p))
        values.setdefault("seq_len", seq_len or 900)
        cfg = _model_config(name, values, str(p))
        if name == "trm":
            key_map = official.official_trm_key_map(cfg.num_layers, cfg.pos_encodings, cfg.puzzle_dim > 0, cfg.mixer)
        else:
            key_map = official.official_key_map(cfg.num_h_layers, cfg.num_l_layers, cfg.pos_encodings, cfg.puzzle_dim > 0)
        weights = official.official_state_dict(state, key_map, str(p))
        scaling, kind, which = ScalingConfig(), "official", "official"
        step = int(p.name.split("_")[-1]) if p.name.startswith("step_") and p.name.split("_")[-1].isdigit() else None
    elif state.get("format") == ckpt.FORMAT:
        conf = state.get("config") or {}
        values = dict(conf.get("model") or {})
        cfg = _model_config(values.pop("name", "hrm"), values, str(p))
        scaling = ScalingConfig(**(conf.get("scaling") or {}))
        weights, kind, step = ckpt.strip_prefixes(state["model"]), "hrm-deeploop", int(state["step"])
        if ema and state.get("ema") is not None:
            weights = _with_average(weights, state["ema"]["shadow"], str(p))
            which = "ema"
    else:
        raise UserError(f"checkpoint '{p}' is neither an hrm-deeploop train state nor an official HRM/TRM state dict")
    run_dtype = D.compute_dtype(cfg.forward_dtype, device) if dtype == "auto" else D.DTYPES.get(dtype)
    if run_dtype is None:
        raise ConfigError(f"dtype='{dtype}' must be auto or one of {sorted(D.DTYPES)}")
    est = D.estimate_memory(lambda c: build_reasoner(c, scaling, run_dtype), cfg, copies=1, batch=batch,
                            layers=1, dtype=run_dtype)  # the weights alone without `batch` (init_from, export)
    per_forward = f"; at {batch} rows x {cfg.seq_len + cfg.puzzle_len:,} tokens per forward" if batch else ""
    D.check_memory(f"checkpoint '{p}' holds model={cfg.name} hidden_size={cfg.hidden_size} ({est.parameters:,} "
                   f"parameters){per_forward}", est, device,
                   fix=("lower global_batch_size, or " if batch else "") + "load it on a machine with more memory")
    model = build_reasoner(cfg, scaling, run_dtype, D.env().fused_kernel)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise UserError(f"checkpoint '{p}' does not fit its model config: {str(e).splitlines()[0]}") from None
    model.to(device).eval()
    ours = kind == "hrm-deeploop"
    return LoadedModel(model=model, config=cfg, kind=kind, step=step, path=p, weights=which, scaling=scaling,
                       puzzle_names=state.get("puzzle_names") if ours else None,
                       run_config=state.get("config") if ours else None)


def _with_average(weights: dict[str, Any], shadow: dict[str, Any], where: str) -> dict[str, Any]:
    """The state dict with every trainable parameter replaced by its average (buffers kept)."""
    unknown = sorted(set(shadow) - set(weights))
    if unknown:
        raise UserError(f"checkpoint '{where}': its weight average has key(s) the model lacks: {unknown[:5]}")
    return {**weights, **shadow}


def _model_config(name: str, values: dict[str, Any], where: str) -> HRMConfig | TRMConfig | URMConfig:
    if name not in SCHEMAS:
        raise UserError(f"{where}: model '{name}' is not a reasoner ({', '.join(SCHEMAS)})")
    schema = SCHEMAS[name]
    known = {f.name for f in fields(schema)} - {"name"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{where}: unknown model config key(s) {unknown}")
    return schema(**values)


# ---- predict --------------------------------------------------------------------------------------

@torch.no_grad()
def predict_split(model: ACTReasoner, split: Any, env: D.Env, global_batch_size: int, max_batches: int | None = None,
                  show_progress: bool = True, rows: torch.Tensor | None = None) -> dict[str, np.ndarray] | None:
    """Predictions of this rank's rows, gathered on rank 0 in dataset order (None on other ranks).
    `rows`: dataset id -> puzzle-table row (`data.rows.row_map`), applied to the model's input only."""
    from hrm_deeploop.data.puzzles import num_sequential_batches, sequential_batches
    from hrm_deeploop.data.rows import map_rows
    from hrm_deeploop.runtime import progress

    model.eval()
    cols: dict[str, list[np.ndarray]] = {"index": [], "puzzle_identifiers": [], "inputs": [], "predictions": [], "q_halt": []}
    bar = progress(num_sequential_batches(split, global_batch_size, max_batches), "predict") if show_progress else None
    for b in sequential_batches(split, global_batch_size, env.rank, env.world_size, max_batches):
        n = b.num_valid
        if n:
            t = map_rows({k: v.to(env.device) for k, v in b.tensors.items()}, rows)
            _, out = model.predict(t)
            cols["index"].append(b.index[:n])
            cols["puzzle_identifiers"].append(b.tensors["puzzle_identifiers"][:n].numpy().astype(np.int32))
            cols["inputs"].append(b.tensors["inputs"][:n].numpy().astype(np.uint8))
            cols["predictions"].append(out["logits"][:n].argmax(-1).to(torch.uint8).cpu().numpy())
            cols["q_halt"].append(out["q_halt_logits"][:n].float().cpu().numpy())
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    local = {k: (np.concatenate(v) if v else None) for k, v in cols.items()}
    if env.distributed:
        import torch.distributed as dist

        gathered: list[Any] = [None] * env.world_size if env.is_main else None
        dist.gather_object(local, gathered, dst=0)
        if not env.is_main:
            return None
        parts = [g for g in gathered if g["index"] is not None]
    else:
        parts = [local] if local["index"] is not None else []
    if not parts:
        raise UserError("the split has no examples to predict")
    merged = {k: np.concatenate([g[k] for g in parts]) for k in cols}
    order = np.argsort(merged.pop("index"), kind="stable")
    return {k: v[order] for k, v in merged.items()}


def run(c: EvaluateConfig) -> int:
    from eval.report import check_outputs
    from hrm_deeploop.data.puzzles import check_matches, open_dataset

    for key in ("checkpoint", "data_dir", "output_dir"):
        if not getattr(c, key):
            raise ConfigError(f"{key} is not set (hrm-deeploop evaluate checkpoint=CKPT data_dir=DIR output_dir=OUT)")
    out = check_output_dir(c.output_dir, [c.data_dir])
    if c.all_checkpoints:
        from eval.curve import evaluate_run

        return evaluate_run(c, run)
    pred_path = out / "predictions.npz"
    if pred_path.exists() and not c.overwrite:
        raise UserError(f"'{pred_path}' exists; pass overwrite=true to replace it or choose another output_dir")
    task = evaluation_for(c.data_dir, c.split, c.task)
    if task == "arc":
        if c.tta:
            raise ConfigError(f"tta={c.tta}: an ARC test split holds its augmented copies already (build-arc), and "
                              "the vote step votes over them; tta is for Sudoku and Maze datasets")
        if c.vote and c.split != "test":
            raise ConfigError(f"split={c.split} with vote=true: voting needs the untranslated test split; "
                              "pass vote=false to only write predictions.npz for another split")
        if c.vote:
            from eval.vote import load_table

            check_outputs(out, c.overwrite, c.report)  # fail before the (long) predict step, not after it
            load_table(Path(c.data_dir))  # the augmentation table the vote reads: a corrupt one, now
    else:
        from eval.puzzle_report import check_outputs as check_puzzle_outputs

        check_puzzle_outputs(out, c.overwrite)
    env = D.setup(c.device)
    try:
        split = open_dataset(c.data_dir, c.split)
        if task != "arc" and (c.tta or c.halt_max_steps):  # before the checkpoint is read: what cannot be served
            from eval.tta import check_request, group_for

            if c.tta:
                group_for(task, int(split.meta.seq_len), int(split.meta.vocab_size))
            check_request(c.tta, int(split.num_examples), int(split.meta.seq_len), out,
                          segments=c.halt_max_steps or 1)
        G = c.global_batch_size or (768 if env.device.type == "cuda" else 16 * env.world_size)
        loaded = load_model(c.checkpoint, env.device, c.dtype, seq_len=int(split.meta.seq_len), ema=c.ema,
                            batch=max(1, G // env.world_size if task == "arc"  # ARC's batches are padded to G
                                      else min(G // env.world_size, int(split.num_examples))))  # rows per forward
        rows = table_rows(loaded, c.data_dir)
        check_matches(loaded.config if rows is None else replace(loaded.config, num_puzzle_identifiers=int(
            split.meta.num_puzzle_identifiers)), split, str(Path(c.data_dir) / c.split),
            what=f"checkpoint '{loaded.path}'")
        trained = loaded.config.halt_max_steps
        D.print0(f"evaluate: {loaded.kind} {loaded.config.name.upper()} checkpoint {loaded.path} (step {loaded.step}, "
                 f"{loaded.weights} weights), "
                 f"{split.num_examples} examples of '{c.split}' ({task}), halt_max_steps={c.halt_max_steps or trained}"
                 + (f" (trained with {trained})" if c.halt_max_steps and c.halt_max_steps != trained else "")
                 + f", dtype={loaded.model.dtype}, world={env.world_size}")
        if task != "arc":
            from eval.puzzle_eval import evaluate_puzzles

            info = {"checkpoint": str(loaded.path), "checkpoint_kind": loaded.kind, "step": loaded.step,
                    "model": loaded.config.name, "weights": loaded.weights}
            return evaluate_puzzles(loaded.model, split, env, c, out, task, G, info)
        if c.halt_max_steps:  # eval runs exactly cfg.halt_max_steps segments: the one place it is read there
            loaded.model.cfg = replace(loaded.config, halt_max_steps=c.halt_max_steps)
        preds = predict_split(loaded.model, split, env, G, c.max_batches, c.progress, rows)
    finally:
        D.teardown()
    if env.is_main:
        _publish(preds, pred_path, c)
    return 0


def table_rows(loaded: LoadedModel, data_dir: str) -> torch.Tensor | None:
    """Dataset id -> puzzle-table row for a checkpoint that names its rows (None: ids are rows)."""
    if loaded.puzzle_names is None:
        return None
    from arc_data.dataset import load_identifiers
    from arc_data.errors import DatasetError
    from hrm_deeploop.data.rows import row_map

    try:
        names = load_identifiers(data_dir)
    except DatasetError as e:
        raise UserError(f"checkpoint '{loaded.path}' names its puzzle rows, and {e}") from None
    return row_map(loaded.puzzle_names, names, f"checkpoint '{loaded.path}' on '{data_dir}'")


def _publish(preds: dict[str, np.ndarray], pred_path: Path, c: EvaluateConfig) -> None:
    """predictions.npz and (vote=true) the vote's outputs, staged and published together: a vote
    that fails, a full disk or Ctrl-C publishes nothing, and an earlier good output stays."""
    from eval.report import output_names, print_summary, vote_file, write_vote_files
    from eval.vote import VoteConfig

    out = pred_path.parent
    vc = VoteConfig(predictions=str(pred_path), data_dir=c.data_dir, output_dir=c.output_dir, split=c.split,
                    overwrite=c.overwrite, report=c.report, challenges=c.challenges)
    names = (pred_path.name, *(output_names(c.report) if c.vote else ()))
    with staged_outputs(out, names, c.overwrite, "evaluate") as stage:
        save_predictions(stage / pred_path.name, preds["puzzle_identifiers"], preds["inputs"], preds["predictions"],
                         preds["q_halt"])
        result = vote_file(vc, stage / pred_path.name) if c.vote else None
        if result is not None:
            write_vote_files(result, stage, vc.max_candidates, vc.report, vc.report_candidates)
    print(f"wrote {pred_path} ({len(preds['q_halt'])} rows)")
    if result is not None:
        print_summary(result, out)
