"""`hrm-deeploop eval-gpt checkpoint=... data=...`: validation loss and the lm-eval suite.

The checkpoint carries its model and scaling config, so nothing about the architecture is passed
on the command line. `checkpoint` may be a `step_N.pt` file or a run folder (its latest
checkpoint). Validation loss is the token-weighted mean cross-entropy over the held-out shards'
windows (the same windows as the trainer's validation). With `lm_eval=true` the paper's
8-task suite (section 5.2: acc, 0- and 1-shot, GPT-2 tokenizer, context 1024, bf16 on CUDA) runs
through `hrm_deeploop.text.lm_eval.run_lm_eval` and lm_eval.md/csv hold the table with the
unweighted average. Results go to `<output_dir>/eval.json` (default: `<run>/eval/` for a checkpoint
in a run's checkpoints/ folder; a loose checkpoint file needs output_dir); an earlier eval.json
is replaced only with overwrite=true.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arc_data.files.guard import check_output_dir
from hrm_deeploop.errors import ConfigError, UserError
from hrm_deeploop.models.model_config import EXIT_CRITERIA
from hrm_deeploop.typed_config import at_least, device_name, one_of, optional_at_least, positive, typed

PAPER_TASKS = ["arc_challenge", "arc_easy", "hellaswag", "openbookqa", "piqa", "sciq", "social_iqa", "winogrande"]


@dataclass
class EvalGPTConfig:
    """`hrm-deeploop eval-gpt`: validation loss on held-out shards and/or the lm-eval task suite."""

    checkpoint: str = ""  # step_N.pt or a run folder (latest checkpoint)
    data: str = ""  # held-out shards (glob / folder / file); empty skips validation loss
    tokenizer_id: str | None = "auto"  # auto: the one the checkpoint was trained with; null skips the check
    batch_size: int = 8  # sequences per forward
    max_batches: int | None = None  # cap on validation batches; null = every window
    num_rounds: int | None = None  # evaluate with a different R than trained (test-time depth; alpha/beta as trained)
    exit: str = "none"  # adaptive exit: none | kl (successive rounds' next-token KL) | hidden (stream change)
    exit_threshold: float = 1e-3  # stop a position's loop once the change falls under this
    device: str = "auto"
    dtype: str = "bfloat16"  # autocast on CUDA; CPU runs in float32
    output_dir: str | None = None  # default <run>/eval (a checkpoint outside a run's checkpoints/ needs it)
    overwrite: bool = False  # replace an earlier eval.json there
    lm_eval: bool = False
    tasks: list[str] = field(default_factory=lambda: list(PAPER_TASKS))
    num_fewshot: list[int] = field(default_factory=lambda: [0, 1])
    limit: float | None = None  # examples per task (testing only)
    lm_eval_batch_size: int = 16
    include_path: str | None = None  # extra lm-eval task YAMLs (e.g. offline local tasks)
    include_defaults: bool = True  # false: index only include_path tasks (faster, offline)

    def __post_init__(self) -> None:
        at_least("batch_size", self.batch_size, 1)
        optional_at_least("max_batches", self.max_batches, 1)
        optional_at_least("num_rounds", self.num_rounds, 1)
        device_name("device", self.device)
        one_of("dtype", self.dtype, ("bfloat16", "float16", "float32"))
        one_of("exit", self.exit, ("none", *EXIT_CRITERIA))
        positive("exit_threshold", self.exit_threshold)
        for k in self.num_fewshot:
            at_least("num_fewshot", k, 0)
        if self.limit is not None:
            positive("limit", self.limit)
        at_least("lm_eval_batch_size", self.lm_eval_batch_size, 1)


def run(cfg: EvalGPTConfig) -> int:
    evaluate(typed(cfg, EvalGPTConfig))
    return 0


def output_dir_for(opts: EvalGPTConfig, path: Path) -> Path:
    """Where eval.json goes, checked before any work: `output_dir`, else `<run>/eval` for a
    checkpoint in a run's checkpoints/ folder; a loose checkpoint file needs `output_dir` (nothing is
    written beside it). An earlier eval.json is replaced only with overwrite=true."""
    if opts.output_dir:
        out = Path(opts.output_dir)
    elif path.parent.name == "checkpoints":
        out = path.parent.parent / "eval"
    else:
        raise ConfigError(f"checkpoint '{path}' is not in a run folder's checkpoints/: give output_dir=DIR "
                          "for eval.json")
    out_dir = check_output_dir(out, [opts.data], "output_dir")
    if (out_dir / "eval.json").exists() and not opts.overwrite:
        raise UserError(f"'{out_dir / 'eval.json'}' already exists (an earlier eval-gpt); pass overwrite=true "
                        "to replace it or choose another output_dir")
    return out_dir


def evaluate(opts: EvalGPTConfig) -> dict[str, Any]:
    from hrm_deeploop import checkpoint as ckpt  # lazy: keeps torch off `eval-gpt --help`
    from hrm_deeploop import runtime  # lazy: keeps torch off `eval-gpt --help`
    from hrm_deeploop.loading import load_model  # lazy: keeps torch off `eval-gpt --help`
    from hrm_deeploop.models.gpt import ExitRule  # lazy: keeps torch off `eval-gpt --help`
    from hrm_deeploop.text.loss import (  # lazy: keeps torch off `eval-gpt --help`
        evaluate_loss,
        evaluate_loss_exit,
    )

    if not opts.checkpoint:
        raise ConfigError("checkpoint= is required (a step_N.pt file or a train-gpt run folder)")
    if not opts.data and not opts.lm_eval:
        raise ConfigError("nothing to evaluate: give data=<val shards> and/or lm_eval=true")
    e = runtime.setup(opts.device)
    try:
        path = ckpt.resolve(opts.checkpoint)
        out_dir = output_dir_for(opts, path)
        loaded = load_model(path, e.device, num_rounds=opts.num_rounds, batch=opts.batch_size, command="eval-gpt")
        model = loaded.model
        dtype = runtime.compute_dtype(opts.dtype, e.device)
        result: dict[str, Any] = {"checkpoint": str(path), "step": loaded.step,
                                  "num_rounds": model.cfg.num_rounds, "scheme": model.scaling.scheme}
        if opts.data:
            from hrm_deeploop.text.loader import iter_eval_batches  # lazy: `eval-gpt --help` skips it

            tokenizer_id = opts.tokenizer_id
            if tokenizer_id == "auto":  # what the checkpoint was trained with (gpt2 for older checkpoints)
                tokenizer_id = ((loaded.run_config or {}).get("data") or {}).get("tokenizer_id", "gpt2")
            batches = iter_eval_batches(opts.data, model.cfg.seq_len, opts.batch_size, e.rank, e.world_size,
                                        max_batches=opts.max_batches, tokenizer_id=tokenizer_id,
                                        vocab_size=model.cfg.vocab_size)
            if opts.exit == "none":
                result["val_loss"] = evaluate_loss(model, batches, e.device, dtype)
                runtime.print0(f"val loss {result['val_loss']:.4f} ({path})")
            else:
                rule = ExitRule(opts.exit, opts.exit_threshold)
                result["val_loss"], result["mean_rounds"] = evaluate_loss_exit(model, batches, e.device, dtype, rule)
                result["exit"] = {"criterion": opts.exit, "threshold": opts.exit_threshold}
                runtime.print0(f"val loss {result['val_loss']:.4f}, mean rounds {result['mean_rounds']:.3f} of "
                             f"{model.cfg.num_rounds} (exit={opts.exit} < {opts.exit_threshold:g}; {path})")
        if opts.lm_eval:
            from hrm_deeploop.text.lm_eval import run_lm_eval  # lazy: keeps torch off `eval-gpt --help`
            from hrm_deeploop.text.tokenizer import get_tokenizer  # lazy: `eval-gpt --help` skips it

            trained_with = ((loaded.run_config or {}).get("data") or {}).get("tokenizer_id") or "gpt2"
            try:
                table = run_lm_eval(model, opts.tasks, opts.num_fewshot, opts.limit, opts.lm_eval_batch_size,
                                    tokenizer=get_tokenizer(trained_with),
                                    output_path=out_dir if e.is_main else None, include_path=opts.include_path,
                                    max_length=model.cfg.seq_len, device=e.device,
                                    dtype=dtype if e.device.type == "cuda" else None,
                                    include_defaults=opts.include_defaults)
            except ConnectionError as err:  # datasets: a task's data neither in the HF cache nor reachable
                raise UserError(f"lm_eval: {err}: a task's dataset comes from the Hugging Face Hub; run once with "
                                "network (or HF_HOME at a cache that holds it), or give local tasks with "
                                "include_path=") from None
            except KeyError as err:  # lm-eval's task index: a name it does not know
                if "not a registered task" not in str(err):
                    raise
                raise UserError(f"lm_eval: tasks={list(opts.tasks)}: {err.args[0]} (include_path= adds a folder "
                                "of task YAMLs)") from None
            result["lm_eval"] = {"acc": {str(k): v for k, v in table.acc.items()},
                                 "avg": {str(s): table.average(s) for s in table.acc}}
            runtime.print0(table.markdown())
        if e.is_main:
            ckpt.atomic_write_bytes(out_dir / "eval.json", (json.dumps(result, indent=2) + "\n").encode())
        return result
    finally:
        runtime.teardown()
