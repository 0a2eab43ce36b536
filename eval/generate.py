"""`hrm-deeploop generate checkpoint=... prompt=...`: sample text from a looped-GPT checkpoint.

The tokenizer is the one the checkpoint was trained with (`data.tokenizer_id` in its config: GPT-2
or bytes). Text streams to stdout as it is sampled (a partial UTF-8 character waits for its last
byte); a one-line summary (tokens, tokens/s, mean rounds, cache memory) goes to stderr. A seed
gives the same text every time (`hrm_deeploop.text.generate`). Sampling stops at
`max_new_tokens` or at the end-of-text token (`stop_at_eot`).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from hrm_deeploop.errors import ConfigError, UserError, os_error
from hrm_deeploop.models.model_config import EXIT_CRITERIA
from hrm_deeploop.typed_config import at_least, device_name, one_of, optional_at_least, typed


@dataclass
class GenerateConfig:
    """`hrm-deeploop generate`: sample a continuation of `prompt` from a train-gpt checkpoint."""

    checkpoint: str = ""  # step_N.pt or a run folder (latest checkpoint)
    prompt: str = ""  # empty: start from the end-of-text token
    max_new_tokens: int = 64  # tokens to sample after the prompt
    temperature: float = 0.8  # 0 = greedy
    top_k: int | None = None  # sample among the k likeliest tokens only (null: all)
    top_p: float | None = None  # nucleus sampling: the smallest set of tokens with this much probability (null: all)
    seed: int = 0  # the sampler's seed
    num_rounds: int | None = None  # R at inference (default: as trained); alpha/beta stay as trained
    cache: str = "rounds"  # rounds: one KV slot per (block, round), exact | shared: one per block | none
    exit: str = "none"  # adaptive exit: none | kl | hidden
    exit_threshold: float = 1e-3  # adaptive exit: stop looping a token once the criterion falls below this
    stop_at_eot: bool = True  # stop at the end-of-text token
    device: str = "auto"

    def __post_init__(self) -> None:
        at_least("max_new_tokens", self.max_new_tokens, 1)
        at_least("temperature", self.temperature, 0.0)
        optional_at_least("top_k", self.top_k, 1)
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p={self.top_p!r}: must be in (0, 1]")
        optional_at_least("num_rounds", self.num_rounds, 1)
        one_of("cache", self.cache, ("rounds", "shared", "none"))
        one_of("exit", self.exit, ("none", *EXIT_CRITERIA))
        if not self.exit_threshold > 0:
            raise ConfigError(f"exit_threshold={self.exit_threshold!r}: must be > 0")
        device_name("device", self.device)


class TextStream:
    """Decode the growing token list and write only the new, complete text."""

    def __init__(self, tokenizer, out=None):
        self.tokenizer, self.out = tokenizer, out or sys.stdout  # looked up now (capture swaps it)
        self.tokens: list[int] = []
        self.written = 0

    def push(self, token: int) -> None:
        self.tokens.append(token)
        text = self.tokenizer.decode(self.tokens)
        if text.endswith("\ufffd"):  # a multi-byte character (or BPE piece) not complete yet
            return
        self.out.write(text[self.written:])
        self.out.flush()
        self.written = len(text)

    def close(self) -> str:
        text = self.tokenizer.decode(self.tokens)
        self.out.write(text[self.written:] + "\n")
        self.out.flush()
        return text


def run(cfg: GenerateConfig) -> int:
    generate(typed(cfg, GenerateConfig))
    return 0


def generate(opts: GenerateConfig) -> str:
    """Stream a continuation of opts.prompt to stdout; return it."""
    import torch  # lazy: keeps torch off `generate --help`

    from hrm_deeploop import checkpoint as ckpt  # lazy: keeps torch off `generate --help`
    from hrm_deeploop import runtime  # lazy: keeps torch off `generate --help`
    from hrm_deeploop.loading import load_model  # lazy: keeps torch off `generate --help`
    from hrm_deeploop.models.gpt import ExitRule  # lazy: keeps torch off `generate --help`
    from hrm_deeploop.text.generate import (  # lazy: keeps torch off `generate --help`
        GenerationStats,
        Sampling,
        generate_tokens,
    )
    from hrm_deeploop.text.tokenizer import get_tokenizer  # lazy: `generate --help` skips it

    if not opts.checkpoint:
        raise ConfigError("checkpoint= is required (a step_N.pt file or a train-gpt run folder)")
    try:  # a prompt read from a file of another encoding ($(cat f)) arrives with its bytes escaped
        opts.prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(f"prompt is not UTF-8 text (byte 0x{ord(opts.prompt[e.start]) & 0xFF:02x} at character "
                          f"{e.start}); convert it, e.g. with iconv -t UTF-8") from None
    device = runtime.setup(opts.device).device
    path = ckpt.resolve(opts.checkpoint)
    loaded = load_model(path, device, num_rounds=opts.num_rounds, command="generate")
    model = loaded.model
    tokenizer_id = ((loaded.run_config or {}).get("data") or {}).get("tokenizer_id") or "gpt2"
    tokenizer = get_tokenizer(tokenizer_id)
    if tokenizer.n_vocab > model.cfg.vocab_size:
        raise UserError(f"checkpoint '{path}': tokenizer '{tokenizer_id}' has {tokenizer.n_vocab} ids, the model "
                        f"{model.cfg.vocab_size}")
    ids = tokenizer.encode(opts.prompt) if opts.prompt else [tokenizer.eot_token]
    if len(ids) + opts.max_new_tokens > model.cfg.seq_len:
        raise UserError(f"prompt ({len(ids)} tokens) + max_new_tokens ({opts.max_new_tokens}) exceeds the model's "
                        f"context of {model.cfg.seq_len} tokens")
    check_generation(model, len(ids), opts, device)
    gen = torch.Generator().manual_seed(opts.seed)
    sampling = Sampling(opts.temperature, opts.top_k, opts.top_p)
    rule = None if opts.exit == "none" else ExitRule(opts.exit, opts.exit_threshold)
    stats = GenerationStats()
    stream = TextStream(tokenizer)
    t0 = time.perf_counter()
    tokens = generate_tokens(model, torch.tensor([ids]), opts.max_new_tokens, sampling, gen, opts.cache,
                             opts.num_rounds, rule, vocab_limit=tokenizer.n_vocab, stats=stats)
    try:
        sys.stdout.write(opts.prompt)
        for tok in tokens:
            if opts.stop_at_eot and int(tok[0]) == tokenizer.eot_token:
                break
            stream.push(int(tok[0]))
        text = stream.close()
    except OSError as e:  # stdout is a closed pipe (`| head`), a full disk, a file-size limit
        _silence_stdout()
        why = "it is a pipe whose reader has gone" if isinstance(e, BrokenPipeError) else os_error(e)
        raise UserError(f"cannot write the text to stdout ({why}); stopped after {stats.new_tokens} tokens") from None
    dt = time.perf_counter() - t0
    print(f"generate: {stats.new_tokens} tokens in {dt:.2f} s ({stats.new_tokens / dt:.1f} tokens/s), "
          f"R={model.cfg.num_rounds}, mean rounds {stats.mean_rounds:.2f}, cache={opts.cache}, seed={opts.seed}",
          file=sys.stderr)
    return text


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of it cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a captured stream): nothing is flushed to a pipe
        pass


def check_generation(model, prompt_tokens: int, opts: GenerateConfig, device) -> None:
    """The loop counts and the KV cache, before anything is sampled: `num_rounds=1000000` is refused
    (or announced) by its time, like the trainers' loop counts, and by its cache's memory."""
    import torch  # lazy: keeps torch off `generate --help`

    from arc_data.budget import check_fits  # lazy: `generate --help` skips it
    from hrm_deeploop import runtime  # lazy: keeps torch off `generate --help`

    m = model.cfg
    rounds = opts.num_rounds or m.num_rounds
    calls = m.num_blocks * rounds * (1 + opts.max_new_tokens)  # the prompt in one pass, then one per token
    runtime.check_loop_time(f"generate: {m.num_blocks} blocks x {rounds} rounds", calls,
                            calls * runtime.block_flops(m.hidden_size) * max(1, prompt_tokens), device,
                            "for the generation", fix="lower num_rounds or max_new_tokens")
    if opts.cache != "none":  # a (1, H, seq_len, D) buffer of keys and one of values per slot
        slots = m.num_blocks * (rounds if opts.cache == "rounds" else 1)
        size = next(model.parameters()).element_size()
        free = {"available": torch.cuda.mem_get_info(device)[0], "where": f"free on {device}"} \
            if device.type == "cuda" else {}
        check_fits(f"generate: the KV cache of {slots:,} slots (cache={opts.cache}, {m.num_blocks} blocks x {rounds} "
                   "rounds)", memory=2 * slots * m.seq_len * m.hidden_size * size,
                   fix="lower num_rounds, or cache=shared (one slot per block)", say=None, **free)
