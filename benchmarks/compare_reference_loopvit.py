"""LoopViT side by side with the official code (WenjieShu/LoopViT, on VARC), both blocks.

Needs a checkout of the official code, which this project does not ship:

    git clone https://github.com/WenjieShu/LoopViT benchmarks/out/loopvit-reference
    python benchmarks/compare_reference_loopvit.py --reference benchmarks/out/loopvit-reference
    python benchmarks/compare_reference_loopvit.py --reference ... --preset cpu --blocks vanilla

1. Equivalence, per block (`--blocks`: hybrid = its `loop_vit1`, vanilla = `loop_vit`), fp32,
   dropout 0 (or `--dropout p`: the global RNG is seeded alike before each side's forward, so
   equal results mean the same dropout masks in the same places): its `LoopARCViT` is built (torch.manual_seed(--seed)), its state dict loaded into our
   `LoopViT` through `models.loopvit.official_key_map` (the RoPE tables checked equal, not
   loaded), and both run `--check-steps` training steps on the same pre-built canvas batches
   (`data.canvas`, random grids): its step as `offline_train_loop_ARC.train` does it (cross-entropy
   with ignore 10 plus its `_compute_gate_regularizers` at the script's weights 5e-4 / 1e-3, clip
   1.0, `torch.optim.AdamW` lr --lr, no weight decay), ours with `training.vision.vision_loss`, the
   same clip and AdamW (as `VisionTrainer.train_step`). Compared after each step: the logits,
   every loop's logits (`return_intermediates`), the gate probabilities, the loss, every gradient,
   every weight after the step, and the argmax predictions; then evaluation mode on a held-out
   batch, also with its gate's dynamic exit (min loops 1, the threshold at the median gate after
   the first loop, so that some samples exit early): logits and each sample's exit loop. Exit 1
   when a relative difference exceeds `--tol` (0: bit-identical) or a prediction differs.
2. Canvas: the official loader's `process_per_example` (its RNG replaced by one that returns the
   view ours drew, after checking that it asks for the same ranges) against `data.canvas.place`
   on random pairs: inputs, masks and targets must be equal.
3. Throughput: the canvas of one example (ours from the dataset's encoded rows, the official
   loader's from its JSON lists), then a training step of each side (eager), interleaved, median
   CPU time per step.

Stand-ins (printed in the header): `timm`, whose only use is `PatchEmbed` (a Conv2d D -> D, kernel =
stride = p, flattened row-major to (B, N, D), strict about the image size: timm's semantics; timm
itself needs torchvision), and `diffusers` (imported by its `src/ARC_UNet.py`, never called here).
Its `utils/pos_embed.py` needs `einops`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import (  # noqa: E402
    FLOOR,
    describe,
    fmt_diff,
    judge,
    print_table,
    rel_diff,
    setup_device,
    time_interleaved,
)
from benchmarks.refcheck import reference_modules  # noqa: E402
from hrm_deeploop.data.canvas import View, draw_view, place  # noqa: E402
from hrm_deeploop.models.loopvit import ExitRule, LoopViT, load_official, official_key_map  # noqa: E402
from hrm_deeploop.models.loopvit_config import NUM_COLORS, LoopViTConfig, flavour  # noqa: E402
from hrm_deeploop.training.vision import vision_loss  # noqa: E402

GATE_ENTROPY_WEIGHT, LOOP_PENALTY_WEIGHT = 5e-4, 1e-3  # script/offline_train_loop_VARC_ViT.sh
REFERENCE_TOP = ("src", "utils", "offline_train_loop_ARC")
PRESETS = {
    # the suggested harness of the reference spec: canvas 16, d 32, 2 heads (head 16), 2 blocks x 3 loops
    "tiny": dict(model=flavour("tiny"), batch=4),
    # the published structure's proportions at CPU size: canvas 32 (256 patches), d 64, 4 blocks x 4 loops
    "cpu": dict(model=replace(flavour("tiny"), hidden_size=64, mlp_dim=128, num_blocks=4, num_loops=4,
                              image_size=32), batch=4),
}

# ---- the reference ---------------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    """The stand-in for timm's PatchEmbed as LoopARCViT builds it (flatten, no norm, bias)."""

    def __init__(self, img_size: int, patch_size: int, in_chans: int, embed_dim: int, bias: bool = True, **_):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)
        self.norm = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert tuple(x.shape[2:]) == self.img_size, f"Input size {tuple(x.shape[2:])} != {self.img_size}"
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))  # NCHW -> NLC


_STUBBED: list[str] = []  # module names stood in for while the reference imports; removed after


def _stub(name: str, **attrs) -> None:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    _STUBBED.append(name)


def stub_modules() -> list[str]:
    stubbed = []
    try:
        from timm.models.vision_transformer import PatchEmbed as _  # noqa: F401
    except ImportError:
        for name in ("timm", "timm.models"):
            _stub(name)
        _stub("timm.models.vision_transformer", PatchEmbed=PatchEmbed)
        stubbed.append("timm (PatchEmbed)")
    try:
        import diffusers  # noqa: F401
    except ImportError:
        class UNet2DConditionModel(nn.Module):  # never built here
            def __init__(self, *a, **k):
                raise RuntimeError("diffusers stand-in")
        _stub("diffusers", UNet2DConditionModel=UNet2DConditionModel)
        stubbed.append("diffusers")
    return stubbed


def import_reference(ref_dir: Path) -> tuple[types.SimpleNamespace, str]:
    if not (ref_dir / "src" / "ARC_LoopViT.py").is_file():
        raise SystemExit(f"--reference {ref_dir}: no src/ARC_LoopViT.py there (a checkout of "
                         "https://github.com/WenjieShu/LoopViT is expected)")
    stubbed = stub_modules()
    modules: dict[str, types.ModuleType] = {}
    with reference_modules(ref_dir, modules, REFERENCE_TOP):
        try:
            loop = importlib.import_module("src.ARC_LoopViT")
            vit = importlib.import_module("src.ARC_ViT")
            vit1 = importlib.import_module("src.ARC_ViT1")
            loader = importlib.import_module("src.ARC_loader")
            offline = importlib.import_module("offline_train_loop_ARC")
        except ImportError as e:
            raise SystemExit(f"cannot import the reference from {ref_dir}: {e} (it needs einops and PIL)") from None
        finally:  # its modules keep what they imported; nothing else in this process sees the stand-ins
            for name in _STUBBED:
                sys.modules.pop(name, None)
            _STUBBED.clear()
    ref = types.SimpleNamespace(Model=loop.LoopARCViT, layers={"vanilla": vit.ARCTransformerEncoderLayer,
                                                               "hybrid": vit1.ARCTransformerEncoderLayer},
                                loader=loader, gate_regularizers=offline._compute_gate_regularizers,
                                dir=ref_dir, modules=modules)  # torch.compile looks its modules up by name
    return ref, f"stand-in modules {stubbed or ['none']}"


def build_reference(ref, cfg: LoopViTConfig) -> nn.Module:
    return ref.Model(num_tasks=cfg.num_tasks, image_size=cfg.image_size, num_colors=NUM_COLORS,
                     embed_dim=cfg.hidden_size, loop_core_depth=cfg.num_blocks, max_loop_steps=cfg.num_loops,
                     min_loop_steps=cfg.num_loops, num_heads=cfg.num_heads, mlp_dim=cfg.mlp_dim,
                     dropout=cfg.dropout, num_task_tokens=1, patch_size=cfg.patch_size,
                     use_exit_gate=cfg.exit_gate, gate_threshold=0.6, add_step_embeddings=cfg.step_embeddings,
                     layer_class=ref.layers[cfg.block])


def reference_loss(ref, logits: torch.Tensor, meta, target: torch.Tensor) -> torch.Tensor:
    """`offline_train_loop_ARC.train`'s loss at the script's weights."""
    flat = logits.permute(0, 2, 3, 1).reshape(-1, NUM_COLORS)
    loss = nn.functional.cross_entropy(flat, target.view(-1), ignore_index=10)
    args = types.SimpleNamespace(disable_exit_gate=False)
    neg_entropy, penalty = ref.gate_regularizers(meta, args)
    return loss + GATE_ENTROPY_WEIGHT * neg_entropy + LOOP_PENALTY_WEIGHT * penalty


# ---- batches ---------------------------------------------------------------------------------------


def random_pairs(n: int, size: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    side = max(1, (size - 2) // 2)
    return [(rng.integers(0, 10, size=rng.integers(1, side + 1, size=2)).astype(np.uint8),
             rng.integers(0, 10, size=rng.integers(1, side + 1, size=2)).astype(np.uint8)) for _ in range(n)]


def make_batches(cfg: LoopViTConfig, batch: int, count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """`count` batches of canvases (views drawn by data.canvas) with random task ids."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        cols: dict[str, list[np.ndarray]] = {"canvas": [], "mask": [], "target": []}
        for inp, res in random_pairs(batch, cfg.image_size, rng):
            c, m, t = place(inp, res, cfg.image_size, draw_view(inp.shape, res.shape, cfg.image_size, rng))
            for k, v in zip(cols, (c, m, t)):
                cols[k].append(v)
        b = {k: torch.from_numpy(np.stack(v)).long() for k, v in cols.items()}
        b["task_ids"] = torch.from_numpy(rng.integers(0, cfg.num_tasks, size=batch))
        out.append(b)
    return out


# ---- part 1: equivalence ---------------------------------------------------------------------------


def check_block(ref, cfg: LoopViTConfig, batches: list[dict], held_out: dict, lr: float, seed: int) -> list[list[str]]:
    torch.manual_seed(seed)
    theirs = build_reference(ref, cfg)
    ours = LoopViT(cfg)
    load_official(ours, theirs.state_dict())
    kmap = {o: k for k, o in official_key_map(cfg).items() if o is not None}
    opt_t = torch.optim.AdamW(theirs.parameters(), lr=lr, weight_decay=0.0)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=lr, weight_decay=0.0)
    t_params, rows = dict(theirs.named_parameters()), []

    def row(step, q, v):
        rows.append([str(step), q, fmt_diff(q, v)])

    for step, b in enumerate(batches, 1):
        torch.manual_seed(seed + step)  # the same dropout draws on both sides (with --dropout > 0)
        logits, meta, inter = theirs(b["canvas"], b["task_ids"], attention_mask=b["mask"], dynamic_exit=False,
                                     return_intermediates=True)
        torch.manual_seed(seed + step)
        out = ours(b["canvas"], b["task_ids"], b["mask"], intermediates=True)
        row(step, "logits", rel_diff(out.logits, logits.permute(0, 2, 3, 1)))
        row(step, "every loop's logits", max(rel_diff(a, r.permute(0, 2, 3, 1))
                                              for a, r in zip(out.intermediates, inter)))
        row(step, "gate probabilities", rel_diff(out.gate_probs, torch.stack(meta.gate_probs, dim=1)))
        loss_t = reference_loss(ref, logits, meta, b["target"])
        loss_o, _ = vision_loss(out, b["target"], GATE_ENTROPY_WEIGHT, LOOP_PENALTY_WEIGHT, cfg.num_loops)
        row(step, "loss", rel_diff(loss_o, loss_t))
        row(step, "argmax (mismatches)", float((out.logits.argmax(-1) != logits.argmax(1)).sum()))
        loss_t.backward()
        loss_o.backward()
        norm_t = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        norm_o = torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
        row(step, "gradient norm", rel_diff(norm_o, norm_t))
        row(step, "every gradient (worst)", max(rel_diff(p.grad, t_params[kmap[n]].grad)
                                                for n, p in ours.named_parameters()))
        opt_t.step()
        opt_o.step()
        opt_t.zero_grad(set_to_none=True)
        opt_o.zero_grad(set_to_none=True)
        row(step, "every weight after AdamW (worst)", max(rel_diff(p, t_params[kmap[n]])
                                                          for n, p in ours.named_parameters()))
    theirs.eval()
    ours.eval()
    with torch.no_grad():
        logits, _ = theirs(held_out["canvas"], held_out["task_ids"], attention_mask=held_out["mask"])
        out = ours(held_out["canvas"], held_out["task_ids"], held_out["mask"])
    row("eval", "logits", rel_diff(out.logits, logits.permute(0, 2, 3, 1)))
    row("eval", "argmax (mismatches)", float((out.logits.argmax(-1) != logits.argmax(1)).sum()))
    # the gate's dynamic exit, as its forward runs it (min loops 1; the threshold: the median gate
    # after the first loop, so that some samples exit early and some do not)
    with torch.no_grad():
        first = ours(held_out["canvas"], held_out["task_ids"], held_out["mask"], num_loops=1).gate_probs[:, 0]
        thr = float(first.median())
        theirs.min_loop_steps = 1
        logits, meta = theirs(held_out["canvas"], held_out["task_ids"], attention_mask=held_out["mask"],
                              dynamic_exit=True, gate_threshold=thr)
        out = ours(held_out["canvas"], held_out["task_ids"], held_out["mask"],
                   exit_rule=ExitRule("gate", min_loops=1, gate_threshold=thr))
    row("exit", "logits (gate exit)", rel_diff(out.logits, logits.permute(0, 2, 3, 1)))
    row("exit", "exit steps (mismatches)", float((out.exit_steps != meta.exit_steps).sum()))
    row("exit", "(exit steps)", float(out.exit_steps.float().mean()))
    return rows


# ---- part 2: the canvas ----------------------------------------------------------------------------


class ReplayRng:
    """Stands in for the official loader's random.Random: returns queued values, checking that each
    randint asks for the range ours drew from."""

    def __init__(self, draws: list[tuple[int, int, int]]):
        self.draws = list(draws)

    def randint(self, a: int, b: int) -> int:
        lo, hi, v = self.draws.pop(0)
        assert (a, b) == (lo, hi), f"the official loader draws from [{a}, {b}], ours from [{lo}, {hi}]"
        return v


def check_canvas(ref, size: int, count: int, seed: int) -> int:
    """Pairs whose official canvas, mask or target differs from ours."""
    rng = np.random.default_rng(seed)
    bad = 0
    for inp, res in random_pairs(count, size, rng):
        v = draw_view(inp.shape, res.shape, size, rng)
        m = size - 2
        h, w = max(inp.shape[0], res.shape[0]), max(inp.shape[1], res.shape[1])
        draws = [(1, m // max(h, w), v.scale)]
        if m > v.scale * w:
            draws.append((1, m - v.scale * w, v.x0))
        if m > v.scale * h:
            draws.append((1, m - v.scale * h, v.y0))
        this = types.SimpleNamespace(max_size=size, resolution_enabled=True, fix_scale_factor=1)
        got = ref.loader.ARCDataset.process_per_example(this, {"input": inp.tolist(), "output": res.tolist()}, 0,
                                                        "t", 0, ReplayRng(draws))
        c, mk, t = place(inp, res, size, View(v.scale, v.x0, v.y0))
        same = (np.array_equal(got["inputs"].numpy(), c) and np.array_equal(got["attention_mask"].numpy(), mk)
                and np.array_equal(got["targets"].numpy(), t) and tuple(got["offset"]) == (v.x0, v.y0))
        bad += not same
    return bad


def time_canvases(ref, size: int, count: int, seed: int) -> tuple[float, float]:
    """Microseconds per example to turn a pair into (canvas, mask, target) at a random view: ours
    from the dataset's encoded 30 x 30 rows (`grid_of`, `draw_view`, `place`), the official loader's
    `process_per_example` from the JSON lists it holds (its random.Random(42)); CPU time, best of 3."""
    import random
    import time

    from arc_data.format import encode_grid
    from hrm_deeploop.data.canvas import grid_of

    rng = np.random.default_rng(seed)
    side = min(30, size - 2)
    pairs = [(rng.integers(0, 10, size=rng.integers(1, side + 1, size=2)).astype(np.uint8),
              rng.integers(0, 10, size=rng.integers(1, side + 1, size=2)).astype(np.uint8)) for _ in range(count)]
    rows = [(encode_grid(a), encode_grid(b)) for a, b in pairs]
    lists = [{"input": a.tolist(), "output": b.tolist()} for a, b in pairs]
    this = types.SimpleNamespace(max_size=size, resolution_enabled=True, fix_scale_factor=1)

    def ours():
        g = np.random.default_rng(seed)
        for x, y in rows:
            a, b = grid_of(x), grid_of(y)
            place(a, b, size, draw_view(a.shape, b.shape, size, g))

    def theirs():
        r = random.Random(42)
        for ex in lists:
            ref.loader.ARCDataset.process_per_example(this, ex, 0, "t", 0, r)

    def best(fn) -> float:
        times = []
        for _ in range(3):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return 1e6 * min(times) / count

    return best(ours), best(theirs)


# ---- part 3: throughput ----------------------------------------------------------------------------


def step_fn(model: nn.Module, batches: list[dict], loss_fn, lr: float):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    i = [0]

    def step():
        b = batches[i[0] % len(batches)]
        i[0] += 1
        loss_fn(model, b).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of github.com/WenjieShu/LoopViT")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--blocks", nargs="+", choices=["hybrid", "vanilla"], default=["hybrid", "vanilla"])
    parser.add_argument("--check-steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="dropout of both models in the training steps (the global RNG seeded alike before each)")
    parser.add_argument("--tol", type=float, default=0.0, help="largest relative difference accepted (0: bit-identical)")
    parser.add_argument("--canvas-pairs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--variants", nargs="+", choices=["eager", "compiled", "compiled_whole"], default=["eager"],
                        help="throughput variants; compiled: the reference as its script compiles it (torch.compile "
                             "of the whole model), ours as train-vit does (train.compile: each block compiled once); "
                             "compiled_whole: both sides' whole models compiled")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    device = setup_device(args.device, args.threads)
    if device.type != "cpu":
        raise SystemExit("--device: the comparison runs on CPU (fp32)")
    ref, note = import_reference(args.reference.resolve())
    preset = PRESETS[args.preset]
    cfg, batch = replace(preset["model"], num_tasks=5, dropout=args.dropout), preset["batch"]
    print(f"# LoopViT vs official ({args.reference}), preset {args.preset}: {describe(device)}")
    print(f"# canvas {cfg.image_size}, patch {cfg.patch_size}, d {cfg.hidden_size}, {cfg.num_heads} heads, mlp "
          f"{cfg.mlp_dim}, {cfg.num_blocks} blocks x {cfg.num_loops} loops, batch {batch}, dropout {cfg.dropout:g}, AdamW lr {args.lr}")
    print(f"# {note}")
    batches = make_batches(cfg, batch, args.check_steps + 1, args.seed)
    failed = False
    for block in args.blocks:
        c = replace(cfg, block=block)
        rows = check_block(ref, c, batches[:-1], batches[-1], args.lr, args.seed)
        bad = judge(rows, args.tol)
        print(f"\n## equivalence, {block} block (max relative difference, tolerance {args.tol:g})")
        print_table(["step", "quantity", "max rel diff"], [r for r in rows if not r[1].startswith(FLOOR)])
        print(f"# equivalence ({block}): {'FAILED on ' + str(len(bad)) + ' quantities' if bad else 'ok'}")
        failed |= bool(bad)
    bad = check_canvas(ref, cfg.image_size, args.canvas_pairs, args.seed)
    print(f"\n## canvas: {args.canvas_pairs} random pairs on a {cfg.image_size} canvas, the official "
          f"process_per_example vs data.canvas.place: {bad} differ")
    failed |= bad > 0
    if not args.skip_speed:
        us_ours, us_ref = time_canvases(ref, 64, 2000, args.seed)
        print(f"# canvas speed, 64 x 64, 2000 random pairs up to 30 x 30: ours {us_ours:.1f} us/example (from the "
              f"dataset's encoded rows), official loader {us_ref:.1f} us/example (from JSON lists): "
              f"{us_ref / us_ours:.2f}x")
    if not args.skip_speed:
        print(f"\n## throughput: training step (forward, loss, backward, clip, AdamW), batch {batch}, "
              f"median CPU time of this process over {args.steps} interleaved steps (compilation untimed)")
        table = []
        for variant in args.variants:
            for block in args.blocks:
                c = replace(cfg, block=block)
                torch.manual_seed(args.seed)
                theirs, ours = build_reference(ref, c), LoopViT(c)
                load_official(ours, theirs.state_dict())
                if variant.startswith("compiled"):
                    theirs = torch.compile(theirs)
                    if variant == "compiled_whole":
                        ours = torch.compile(ours)
                    else:
                        for layer in ours.layers:
                            layer.compile()

                def ref_loss(m, b):
                    logits, meta = m(b["canvas"], b["task_ids"], attention_mask=b["mask"], dynamic_exit=False)
                    return reference_loss(ref, logits, meta, b["target"])

                def our_loss(m, b, c=c):
                    return vision_loss(m(b["canvas"], b["task_ids"], b["mask"]), b["target"], GATE_ENTROPY_WEIGHT,
                                       LOOP_PENALTY_WEIGHT, c.num_loops)[0]

                with reference_modules(ref.dir, ref.modules, REFERENCE_TOP):
                    ms = time_interleaved({"reference": step_fn(theirs, batches, ref_loss, args.lr),
                                           "ours": step_fn(ours, batches, our_loss, args.lr)}, device, 3, args.steps)
                ex = {k: batch / (v / 1e3) for k, v in ms.items()}
                table.append([variant, block, f"{ex['reference']:,.2f}", f"{ex['ours']:,.2f}",
                              f"{ex['ours'] / ex['reference']:.2f}x"])
        print_table(["variant", "block", "reference ex/s", "ours ex/s", "ratio"], table)
        print("# ratio = ours / reference examples per second (> 1: ours is faster)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
