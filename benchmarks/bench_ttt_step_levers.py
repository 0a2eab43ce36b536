"""What bounds `ttt views=official`'s tasks per hour on one CPU thread at the tiny size (issue 61; record:
docs/notebook/2026-12-06-batched-ttt.md, "7. Levers off the official arithmetic").

    python benchmarks/bench_ttt_step_levers.py --steps 40 --repeats 3

At the official 100 epochs a task's cost is its training steps (1.2% is outside training, the
notebook's section 3), so tasks per hour against the official loop is bounded by the ratio of the two
loops' step costs. Our lone step is the official loop's step (bit-identical: compare_reference_ttt.py),
so a gain must come from a cheaper step. This script times one step of the official loop (batch 8,
forward, cross-entropy, backward, clip 1.0, AdamW) on the tiny official-format LoopViT (vanilla block,
d 32, 2 blocks x 3 loops, patch 2, canvas 16: 65 tokens, dropout 0.1) under levers that change the
arithmetic, each in its own process (a compiled graph or autocast must not leak into the next):

- eager: the official step as it runs (the baseline);
- eager, dropout 0: what the dropout noise costs;
- eager, bf16 autocast: this CPU's bf16 matmuls (oneDNN; the CPU flags are printed);
- compiled: `torch.compile` (inductor) of forward + loss: inductor's own random numbers (other masks);
- compiled, eager's random numbers (`torch._inductor.config.fallback_random`: the masks eager draws);
- compiled, dropout 0; compiled + bf16 autocast, dropout 0.1.

Also: the step's floating-point work (torch.utils.flop_counter, forward + backward) and this core's
measured matmul throughput (a 512-square fp32 and bf16 matmul), so each variant's GFLOP/s can be read
against the machine. CPU milliseconds a step (process time, the median of `--repeats` rounds of
`--steps` steps after 5 warm-up steps), one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {  # name: (dropout, compile, fallback_random, bf16)
    "eager": (0.1, False, False, False),
    "eager, dropout 0": (0.0, False, False, False),
    "eager, bf16 autocast": (0.1, False, False, True),
    "compiled (inductor's random numbers)": (0.1, True, False, False),
    "compiled (eager's random numbers)": (0.1, True, True, False),
    "compiled, dropout 0": (0.0, True, False, False),
    "compiled + bf16 autocast": (0.1, True, False, True),
}


def setup(dropout: float):
    """The official loop's start for one ARC-1 task: the tiny official-format model (`dropout`), in
    training mode, its full batches of 8 (epoch 0), and the step's loss."""
    import numpy as np
    import torch.nn.functional as F

    from benchmarks.bench_ttt_batched import arc1_tasks, tiny_file
    from hrm_deeploop.data.canvas import IGNORE
    from hrm_deeploop.models.loopvit_config import NUM_COLORS
    from hrm_deeploop.pertask.official_ttt import start_model, train_batches
    from hrm_deeploop.pertask.official_views import build_views

    chal, _ = arc1_tasks(16, 1)
    tid = next(iter(chal))
    path = tiny_file(Path(tempfile.mkdtemp(prefix="bench-levers-")) / "tiny.pt", 16)
    model = start_model(str(path), 51, 0, dropout).train()
    batches = [b for b in train_batches(build_views(tid, chal[tid], 0), 16, 8, np.random.default_rng(0))(0)
               if len(b["canvas"]) == 8]

    def loss_of(canvas, task_ids, mask, target):
        logits = model(canvas, task_ids, mask).logits
        return F.cross_entropy(logits.reshape(-1, NUM_COLORS).float(), target.reshape(-1), ignore_index=IGNORE)
    return model, batches, loss_of


def one(name: str, steps: int, repeats: int) -> dict:
    """Time one variant in this process; returns its CPU ms a step (median, all) and GFLOP a step."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    dropout, compiled, fallback, bf16 = VARIANTS[name]
    torch.set_num_threads(1)
    if fallback:
        import torch._inductor.config as inductor_config
        inductor_config.fallback_random = True
    model, batches, loss_of = setup(dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    fn = torch.compile(loss_of) if compiled else loss_of

    def step(n: int) -> None:
        b = batches[n % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = fn(b["canvas"], b["task_ids"], b["mask"], b["target"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    t0 = time.process_time()
    for n in range(5):
        step(n)
    warm = time.process_time() - t0
    rounds = []
    for _ in range(repeats):
        t0 = time.process_time()
        for n in range(steps):
            step(n)
        rounds.append(1000 * (time.process_time() - t0) / steps)
    flops = 0
    if not compiled:
        counter = FlopCounterMode(display=False)
        with counter:
            step(0)
        flops = counter.get_total_flops()
    return {"ms": statistics.median(rounds), "rounds": rounds, "gflop": flops / 1e9, "warm_s": warm}


def noise() -> dict:
    """The dropout noise of one eager step: how many elements `bernoulli_` draws (counted under a
    dispatch mode) and what drawing them costs alone (the same shapes, torch's CPU generator), ms."""
    import numpy as np
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(1)
    shapes = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "bernoulli" in str(func):
                shapes.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))
    _, batches, loss_of = setup(0.1)
    b = batches[0]
    with Count():
        loss_of(b["canvas"], b["task_ids"], b["mask"], b["target"]).backward()
    bufs = [torch.empty(s) for s in shapes]
    for _ in range(5):
        for t in bufs:
            t.bernoulli_(0.9)
    n, t0 = 40, time.process_time()
    for _ in range(n):
        for t in bufs:
            t.bernoulli_(0.9)
    ms = 1000 * (time.process_time() - t0) / n
    return {"calls": len(shapes), "elements": int(sum(np.prod(s) for s in shapes)), "ms": ms}


def peak() -> dict:
    """This core's matmul throughput, fp32 and bf16 (512 x 512 x 512, one thread), GFLOP/s."""
    import torch
    torch.set_num_threads(1)
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        a, b = torch.randn(512, 512, dtype=dt), torch.randn(512, 512, dtype=dt)
        for _ in range(3):
            a @ b
        n, t0 = 40, time.process_time()
        for _ in range(n):
            a @ b
        out[str(dt).split(".")[1]] = 2 * 512 ** 3 * n / (time.process_time() - t0) / 1e9
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", help=argparse.SUPPRESS)  # a child: time this one variant, print its JSON
    a = ap.parse_args()
    if a.only:
        print(json.dumps({"peak": peak, "noise": noise}[a.only]() if a.only in ("peak", "noise") else one(a.only, a.steps, a.repeats)))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def child(name: str) -> dict:
        r = subprocess.run([sys.executable, __file__, "--only", name, "--steps", str(a.steps), "--repeats",
                            str(a.repeats)], env=env, capture_output=True, text=True, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    print(f"# load {os.getloadavg()}; avx512_bf16: {'avx512_bf16' in flags}; amx: {'amx_bf16' in flags}")
    p = child("peak")
    print(f"# this core's matmul (512^3, one thread): fp32 {p['float32']:.0f} GFLOP/s, bf16 {p['bfloat16']:.0f} GFLOP/s")
    print("| variant | CPU ms a step (median; rounds) | against eager | GFLOP/s | first 5 steps, CPU s |")
    print("|---|---|---|---|---|")
    base, gflop = None, None
    for name in VARIANTS:
        r = child(name)
        base = base or r["ms"]
        gflop = gflop or r["gflop"]
        rounds = ", ".join(f"{x:.1f}" for x in r["rounds"])
        print(f"| {name} | {r['ms']:.1f} ({rounds}) | {base / r['ms']:.2f}x | {gflop / r['ms'] * 1e3:.1f} | "
              f"{r['warm_s']:.1f} |", flush=True)
    z = child("noise")
    print(f"# the step's work: {gflop:.3f} GFLOP (matmuls, forward + backward, flop_counter): {gflop / p['float32'] * 1e3:.1f} ms "
          f"at this core's fp32 matmul rate; its dropout noise: {z['elements']:,} elements in {z['calls']} bernoulli_ "
          f"calls, {z['ms']:.1f} ms drawn alone ({z['ms'] * 1e6 / z['elements']:.1f} ns an element); load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
