"""Looped-GPT generation: tokens/s with and without the KV cache, the shared cache's memory and its
quality cost.

Three tables, all from one run (so the ratios compare like with like on a loaded machine):
1. speed: greedy decoding of --new-tokens tokens after a --prompt-tokens prompt, at each batch size
   in --batches, with the per-(block, round) cache (`rounds`, exact), the per-block cache shared
   across rounds (`shared`) and none (`none`: the whole sequence again every token); tokens/s is
   batch x new tokens / the median wall time of --repeats runs, and `x none` the speed-up over no
   cache in the same run.
2. memory: the key/value bytes each cache holds at the full context (K x R slots vs K).
3. quality (with --checkpoint and --data): teacher-forced next-token loss on held-out windows, the
   full forward (= the per-round cache's logits) against token-by-token decoding with the shared
   cache, and how often their argmax agrees. Without a checkpoint, a randomly initialised model
   stands in (speed and memory do not depend on the weights).

    python benchmarks/bench_generate.py --device cpu        # the results page's byte-level tiny GPT (R = 3)
    python benchmarks/bench_generate.py --checkpoint runs/x --data 'data/val_*.bin' --device cpu
    python benchmarks/bench_generate.py --preset paper      # GPU: GPT-2 small looped, K = 12, R = 3, context 1024
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import add_common_args, describe, fmt_mb, print_table, setup_device, time_steps  # noqa: E402
from hrm_deeploop.models.gpt import GPT  # noqa: E402
from hrm_deeploop.models.model_config import GPTConfig  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.text.generate import CACHES, Sampling, generate_tokens  # noqa: E402

PRESETS = {
    # the byte-level tiny GPT of docs/results.md (hidden 64, 2 heads, K = 2, context 128), at R = 3
    "cpu": dict(model=GPTConfig(vocab_size=320, hidden_size=64, num_heads=2, num_blocks=2, num_rounds=3,
                                mlp_multiple=16, seq_len=128), prompt=16, new=96, batches=[1, 8], repeats=3),
    "tiny": dict(model=GPTConfig(vocab_size=64, hidden_size=32, num_heads=2, num_blocks=2, num_rounds=2,
                                 mlp_multiple=16, seq_len=32), prompt=4, new=8, batches=[1, 2], repeats=1),
    "paper": dict(model=GPTConfig(num_rounds=3), prompt=128, new=512, batches=[1, 8], repeats=3),
}


def decode_all(model: GPT, prompt: torch.Tensor, new: int, cache: str) -> None:
    for _ in generate_tokens(model, prompt, new, Sampling(0.0), None, cache=cache):
        pass


def speed_rows(model: GPT, args, device: torch.device) -> list[list[str]]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for batch in args.batches:
        prompt = torch.randint(0, min(model.cfg.vocab_size, 256), (batch, args.prompt_tokens), generator=gen)
        rate: dict[str, float] = {}
        for cache in CACHES:
            t = time_steps(lambda p=prompt, c=cache: decode_all(model, p, args.new_tokens, c), device, 1, args.repeats)
            rate[cache] = batch * args.new_tokens / (t.ms_per_step / 1e3)
        for cache in CACHES:
            rows.append([f"batch {batch}, cache={cache}", f"{rate[cache]:,.0f}", f"{rate[cache] / rate['none']:.2f}x"])
    return rows


def memory_rows(model: GPT, batch: int, device: torch.device) -> list[list[str]]:
    rows = []
    prompt = torch.zeros(batch, 1, dtype=torch.long, device=device)
    for share in (False, True):
        cache = model.new_cache(batch, share_rounds=share)
        model.decode(prompt, cache)  # allocates every slot at the full context
        slots = sum(len(s) for s in cache.slots)
        rows.append([f"{'shared' if share else 'rounds'} (batch {batch})", str(slots), fmt_mb(cache.nbytes() / 1e6)])
    return rows


@torch.no_grad()
def quality_rows(model: GPT, windows: list[torch.Tensor], device: torch.device) -> list[list[str]]:
    """Loss of the full forward vs shared-cache decoding, one window (1, T+1) at a time."""
    sums = {"full": 0.0, "shared": 0.0}
    agree = count = 0
    for w in windows:
        x, y = w[:, :-1].to(device), w[:, 1:].to(device)
        full = model(x)
        cache = model.new_cache(1, share_rounds=True)
        shared = torch.cat([model.decode(x[:, t:t + 1], cache)[0] for t in range(x.shape[1])], dim=1)
        for name, logits in (("full", full), ("shared", shared)):
            sums[name] += float(F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum"))
        agree += int((full.argmax(-1) == shared.argmax(-1)).sum())
        count += y.numel()
    full, shared = sums["full"] / count, sums["shared"] / count
    return [["full forward (= cache=rounds)", f"{full:.4f}", "-", "-"],
            ["cache=shared", f"{shared:.4f}", f"{shared - full:+.4f}", f"{100 * agree / count:.1f}%"]]


def load_windows(pattern: str, seq_len: int, n: int, tokenizer_id: str | None, vocab: int) -> list[torch.Tensor]:
    from hrm_deeploop.text.loader import iter_eval_batches

    out = []
    for x, y in iter_eval_batches(pattern, seq_len, 1, 0, 1, max_batches=n, tokenizer_id=tokenizer_id,
                                  vocab_size=vocab):
        out.append(torch.cat([x, y[:, -1:]], dim=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--checkpoint", help="a train-gpt run or step_N.pt (default: a random model of the preset)")
    p.add_argument("--data", help="held-out shards for the quality table (needs --checkpoint)")
    p.add_argument("--windows", type=int, default=8, help="held-out windows for the quality table")
    p.add_argument("--num-rounds", type=int, help="R at inference (default: the model's)")
    p.add_argument("--prompt-tokens", type=int)
    p.add_argument("--new-tokens", type=int)
    p.add_argument("--batches", type=int, nargs="+")
    p.add_argument("--repeats", type=int)
    add_common_args(p, 989.0)
    args = p.parse_args(argv)
    preset = PRESETS[args.preset]
    args.prompt_tokens = args.prompt_tokens or preset["prompt"]
    args.new_tokens = args.new_tokens or preset["new"]
    args.batches = args.batches or preset["batches"]
    args.repeats = args.repeats or preset["repeats"]
    device = setup_device(args.device, args.threads)
    run_config = None
    if args.checkpoint:
        from hrm_deeploop import checkpoint as ckpt
        from hrm_deeploop.loading import load_model

        loaded = load_model(ckpt.resolve(args.checkpoint), device, num_rounds=args.num_rounds, command="generate")
        model, run_config = loaded.model, loaded.run_config or {}
    else:
        cfg = preset["model"]
        if args.num_rounds:
            cfg = GPTConfig(**{**cfg.__dict__, "num_rounds": args.num_rounds})
        torch.manual_seed(0)
        model = GPT(cfg, ScalingConfig(scheme="deeploop")).to(device).eval()
    m = model.cfg
    if args.prompt_tokens + args.new_tokens > m.seq_len:
        raise SystemExit(f"--prompt-tokens + --new-tokens = {args.prompt_tokens + args.new_tokens} exceeds the "
                         f"context {m.seq_len}")
    print(f"# {describe(device)}; looped GPT hidden {m.hidden_size}, K={m.num_blocks}, R={m.num_rounds}, "
          f"context {m.seq_len}, vocab {m.vocab_size}; {'checkpoint ' + args.checkpoint if args.checkpoint else 'random init'}")
    print(f"\n## 1. greedy decoding, {args.prompt_tokens}-token prompt + {args.new_tokens} new tokens "
          f"(median of {args.repeats})\n")
    print_table(["variant", "tokens/s", "x none"], speed_rows(model, args, device))
    print(f"\n## 2. KV cache memory at the full context ({m.seq_len} positions)\n")
    print_table(["cache", "slots", "MB"], [r for b in args.batches for r in memory_rows(model, b, device)])
    if args.data:
        if run_config is None:
            raise SystemExit("--data needs --checkpoint (the quality of a random model says nothing)")
        tokenizer_id = (run_config.get("data") or {}).get("tokenizer_id")
        windows = load_windows(args.data, m.seq_len, args.windows, tokenizer_id, m.vocab_size)
        print(f"\n## 3. quality: teacher-forced loss on {len(windows)} held-out windows of {m.seq_len} tokens\n")
        print_table(["decoding", "loss (nats/token)", "vs full", "argmax agrees"], quality_rows(model, windows, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
