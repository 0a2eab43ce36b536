"""lm-evaluation-harness (0.4.x) adapter for any causal LM given as a torch module.

The model maps int64 tokens (B, T) to logits (B, T, V) (a tuple's first item or a dict's "logits"
is taken too). Text is tokenised with the offline GPT-2 tokenizer (or the one passed, e.g. a byte-level
model's `ByteTokenizer`). Scoring follows lm-eval's own
Hugging Face backend exactly: a request's tokens are `(context + continuation)`, truncated from
the left to `max_length + 1`, the last token dropped; the continuation's log-probability is the
sum over its tokens of log_softmax (float32, over the model's full vocabulary, padded entries
included, as in training), and `is_greedy` says whether argmax reproduces every continuation
token. An empty context is replaced by `<|endoftext|>`, as lm-eval does for GPT-2.

Generative tasks (`generate_until`) decode greedily (or sample, if a task asks) up to the first stop
string, with the looped GPT's KV cache (`hrm_deeploop.text.generate`).

`run_lm_eval` runs a task list through `lm_eval.simple_evaluate` and writes the paper's table:
accuracy (`acc`, not `acc_norm`; `exact_match` for a generative task) per task and their
unweighted average, one row per shot count.
Needs the `lmeval` extra: pip install 'hrm-deeploop[lmeval]'.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from hrm_deeploop.errors import UserError

try:
    import lm_eval
    from lm_eval import utils
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
except ImportError as e:  # the optional `lmeval` extra
    raise UserError(
        "the lm-evaluation-harness adapter needs lm-eval; install it with "
        "pip install 'hrm-deeploop[lmeval]'"
    ) from e

from hrm_deeploop.models.gpt import GPT
from hrm_deeploop.text.generate import Sampling, generate_tokens, sample_next
from hrm_deeploop.text.tokenizer import ByteTokenizer, Tokenizer, get_gpt2_tokenizer

log = logging.getLogger(__name__)

# The paper's suite (section 5.2, after Deep Delta Learning): acc, 0-shot and 1-shot.
PAPER_TASKS = (
    "arc_challenge",
    "arc_easy",
    "hellaswag",
    "openbookqa",
    "piqa",
    "sciq",
    "social_iqa",
    "winogrande",
)
PAPER_SHOTS = (0, 1)
SCORE_METRICS = ("acc,none", "exact_match,none")  # the table's score per task: acc, else exact_match


def _logits_of(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) and "logits" in out:
        return out["logits"]
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"the model must return logits (B, T, V), a tuple starting with them or a dict; got {type(out)}")


@register_model("hrm-deeploop")
class LoopedLM(TemplateLM):
    """An lm-eval `LM` around a causal torch module and the GPT-2 tokenizer.

    Args:
        model: module mapping int64 tokens (B, T) -> logits (B, T, V). Put in eval mode here.
        tokenizer: defaults to the offline GPT-2 tokenizer.
        max_length: context length (the paper: 1024, matching training).
        batch_size: requests per forward pass.
        device: where to run; defaults to the model's parameters' device.
        dtype: autocast dtype on CUDA (e.g. torch.bfloat16, the paper's bf16 inference); None = off.
        seed: seeds the draws of sampled (`do_sample`) generation requests.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer | ByteTokenizer | None = None,
        max_length: int = 1024,
        batch_size: int = 16,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        if not isinstance(model, torch.nn.Module):
            raise UserError(
                "LoopedLM needs a torch.nn.Module (build it in Python and pass it, or use "
                "run_lm_eval); loading from a model_args string is not supported"
            )
        if max_length < 1 or int(batch_size) < 1:
            raise UserError(f"max_length ({max_length}) and batch_size ({batch_size}) must be >= 1")
        self.model = model.eval()
        self.tokenizer = tokenizer or get_gpt2_tokenizer()
        self._max_length = int(max_length)
        self.batch_size = int(batch_size)
        if device is None:
            param = next(model.parameters(), None)
            device = param.device if param is not None else "cpu"
        self._device = torch.device(device)
        self.dtype = dtype
        self._generator = torch.Generator().manual_seed(seed)  # draws of sampled generate_until requests

    # --- lm-eval plumbing ------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eot_token

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def device(self) -> torch.device:
        return self._device

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return self.tokenizer.encode(string)

    def tok_decode(self, tokens: Sequence[int], **kwargs: Any) -> str:
        return self.tokenizer.decode(tokens)

    @torch.inference_mode()
    def _model_logits(self, tokens_BT: torch.Tensor) -> torch.Tensor:
        """The model's logits (B, T, V), under bf16/fp16 autocast on CUDA if `dtype` is set."""
        autocast = (
            torch.autocast(self.device.type, dtype=self.dtype)
            if self.dtype is not None and self.device.type == "cuda"
            else nullcontext()
        )
        with autocast:
            return _logits_of(self.model(tokens_BT))

    # --- scoring -----------------------------------------------------------------------------
    def _loglikelihood_tokens(
        self,
        requests: list[tuple[Any, list[int], list[int]]],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        """Score (request_key, context_tokens, continuation_tokens) triples, in request order."""
        L = self.max_length
        bs = int(override_bs or self.batch_size)
        # Longest first: padding is small within a batch and a memory error shows up at once.
        order = sorted(range(len(requests)), key=lambda i: -(len(requests[i][1]) + len(requests[i][2])))
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm or self.rank != 0, desc="loglikelihood")
        for start in range(0, len(order), bs):
            chunk = order[start : start + bs]
            inputs, conts = [], []
            for i in chunk:
                key, ctx, cont = requests[i]
                if not ctx or not cont:
                    raise ValueError(f"request {key!r}: empty context or continuation tokens")
                if len(cont) > L:
                    raise UserError(f"request {key!r}: continuation of {len(cont)} tokens exceeds max_length {L}")
                inputs.append((ctx + cont)[-(L + 1) :][:-1])  # left-truncated to L tokens
                conts.append(cont)
            width = max(len(t) for t in inputs)
            # Right padding: causal attention keeps the padded tail from touching real positions.
            batch_BT = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, toks in enumerate(inputs):
                batch_BT[row, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            logits_BTV = self._model_logits(batch_BT.to(self.device))
            for row, i in enumerate(chunk):
                n, c = len(inputs[row]), len(conts[row])
                # Only the positions predicting the continuation, in float32: (C, V).
                lp_CV = F.log_softmax(logits_BTV[row, n - c : n].float(), dim=-1)
                cont_C = torch.tensor(conts[row], dtype=torch.long, device=lp_CV.device)
                total = float(lp_CV.gather(1, cont_C[:, None]).sum())
                greedy = bool((lp_CV.argmax(dim=-1) == cont_C).all())
                results[i] = (total, greedy)
                key = requests[i][0]
                if key is not None:
                    self.cache_hook.add_partial("loglikelihood", key, results[i])
                bar.update(1)
        bar.close()
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Total log-likelihood of each whole string, in windows of max_length (lm-eval's rule:
        the first window is conditioned on `<|endoftext|>`, every token is predicted once)."""
        windows: list[tuple[None, list[int], list[int]]] = []
        owner: list[int] = []
        for idx, (string,) in enumerate(req.args for req in requests):
            for ctx, cont in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, ctx, cont))
                owner.append(idx)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for idx, (lp, _) in zip(owner, scores):
            totals[idx] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # --- generation ----------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """One continuation per (context, gen_kwargs) request, as lm-eval's Hugging Face backend:
        the context left-truncated to leave room for `max_gen_toks` (default 256) new tokens,
        greedy unless `do_sample` (then `temperature`, `top_k`, `top_p`), stopped at the first
        `until` string (cut off, not returned) or the end-of-text token. A looped GPT decodes
        with its per-(block, round) KV cache; any other module recomputes the whole sequence."""
        out: list[str] = []
        for req in tqdm(requests, disable=disable_tqdm or self.rank != 0, desc="generate_until"):
            context, gen_kwargs = req.args
            kwargs = dict(gen_kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            max_gen = min(int(kwargs.pop("max_gen_toks", 256)), self.max_length - 1)
            sampling = Sampling(float(kwargs.pop("temperature", 1.0)) if kwargs.pop("do_sample", False) else 0.0,
                                kwargs.pop("top_k", None), kwargs.pop("top_p", None))
            ctx = (self.tok_encode(context) or [self.eot_token_id])[-(self.max_length - max_gen):]
            text = self._generate(ctx, max_gen, sampling, until)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            out.append(text)
        return out

    def _generate(self, ctx: list[int], max_gen: int, sampling: Sampling, until: list[str]) -> str:
        prompt = torch.tensor([ctx], dtype=torch.long)
        if isinstance(self.model, GPT):
            steps = generate_tokens(self.model, prompt, max_gen, sampling, self._generator,
                                    vocab_limit=self.tokenizer.n_vocab)
        else:
            steps = self._generate_uncached(prompt, max_gen, sampling)
        new: list[int] = []
        text = ""
        for tok in steps:
            if int(tok[0]) == self.eot_token_id:
                break
            new.append(int(tok[0]))
            text = self.tok_decode(new)
            cut = min((text.find(s) for s in until if s and s in text), default=-1)
            if cut >= 0:
                return text[:cut]
        return text

    def _generate_uncached(self, prompt: torch.Tensor, max_gen: int, sampling: Sampling) -> Iterator[torch.Tensor]:
        seq = prompt.to(self.device)
        for _ in range(max_gen):
            logits = self._model_logits(seq[:, -self.max_length:])[:, -1, : self.tokenizer.n_vocab]
            nxt = sample_next(logits, sampling, self._generator)
            yield nxt
            seq = torch.cat([seq, nxt.to(self.device)[:, None]], dim=1)


# --------------------------------------------------------------------------------------------
# The paper's table
# --------------------------------------------------------------------------------------------


@dataclass
class LmEvalTable:
    """acc per (shot, task) and the unweighted average per shot."""

    tasks: list[str]
    acc: dict[int, dict[str, float]]  # shot -> task -> acc in [0, 1]

    def average(self, shot: int) -> float:
        vals = [self.acc[shot][t] for t in self.tasks]
        return sum(vals) / len(vals)

    def rows(self) -> list[dict[str, Any]]:
        """One row per shot: shot, each task's acc in percent, Avg (the paper's layout)."""
        return [
            {"shot": shot, **{t: 100 * self.acc[shot][t] for t in self.tasks}, "Avg": 100 * self.average(shot)}
            for shot in sorted(self.acc)
        ]

    def markdown(self) -> str:
        head = ["shot", *self.tasks, "Avg"]
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for row in self.rows():
            cells = [f"{row['shot']}-shot"] + [f"{row[k]:.2f}" for k in head[1:]]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def write(self, folder: str | os.PathLike) -> dict[str, Path]:
        """Write lm_eval.md and lm_eval.csv (acc in percent) into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        md, csv_path = folder / "lm_eval.md", folder / "lm_eval.csv"
        md.write_text(self.markdown())
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["shot", *self.tasks, "Avg"])
            writer.writeheader()
            for row in self.rows():
                writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
        return {"markdown": md, "csv": csv_path}


def run_lm_eval(
    model: torch.nn.Module,
    tasks: Sequence[str] = PAPER_TASKS,
    num_fewshot: int | Sequence[int] = PAPER_SHOTS,
    limit: int | float | None = None,
    batch_size: int = 16,
    output_path: str | os.PathLike | None = None,
    include_path: str | os.PathLike | None = None,
    max_length: int = 1024,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    tokenizer: Tokenizer | ByteTokenizer | None = None,
    seed: int = 1234,
    include_defaults: bool = True,
) -> LmEvalTable:
    """Evaluate `model` on lm-eval `tasks` for each shot count; return (and write) the acc table.

    `limit` caps examples per task (testing only). `include_path` adds a folder of task YAMLs
    (e.g. local offline tasks); `include_defaults=False` skips indexing lm-eval's thousands of
    built-in task files (faster when only `include_path` tasks are run). With `output_path`,
    writes lm_eval.md, lm_eval.csv and lm_eval_results.json (lm-eval's raw results per shot)
    into that folder. The model's train/eval mode is restored afterwards.
    """
    from lm_eval.tasks import TaskManager  # lazy: lm_eval.tasks (+900 modules) only when tasks run

    shots = [num_fewshot] if isinstance(num_fewshot, int) else list(num_fewshot)
    was_training = model.training  # restored at the end: LoopedLM puts the model in eval mode
    lm = LoopedLM(model, tokenizer=tokenizer, max_length=max_length, batch_size=batch_size,
                  device=device, dtype=dtype, seed=seed)
    manager = TaskManager(
        include_path=str(include_path) if include_path is not None else None,
        include_defaults=include_defaults,
    )
    acc: dict[int, dict[str, float]] = {}
    raw: dict[int, Any] = {}
    try:
        for shot in shots:
            acc[shot], raw[shot] = _evaluate_shot(lm, tasks, shot, limit, manager, seed)
    finally:
        model.train(was_training)
    acc = {k: v for k, v in acc.items() if v is not None}
    table = LmEvalTable(tasks=list(tasks), acc=acc)
    if output_path is not None:
        table.write(output_path)
        (Path(output_path) / "lm_eval_results.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    return table


def _evaluate_shot(
    lm: LoopedLM, tasks: Sequence[str], shot: int, limit: int | float | None, manager: Any, seed: int
) -> tuple[dict[str, float] | None, dict[str, Any] | None]:
    """One lm_eval.simple_evaluate call: (acc per task, lm-eval's raw results)."""
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(tasks),
        num_fewshot=shot,
        limit=limit,
        task_manager=manager,
        log_samples=False,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    if out is None:  # non-zero ranks under lm-eval's own distributed mode
        return None, None
    results = out["results"]
    acc: dict[str, float] = {}
    for task in tasks:
        # multiple-choice tasks report acc; generative ones (generate_until) exact_match
        metric = next((m for m in SCORE_METRICS if m in results.get(task, {})), None)
        if metric is None:
            raise UserError(f"lm-eval returned no {' or '.join(SCORE_METRICS)} for task '{task}' "
                            f"(got {sorted(results.get(task, {}))})")
        acc[task] = float(results[task][metric])
    return acc, {"results": results, "n-samples": out.get("n-samples"), "versions": out.get("versions")}
