"""How far one optimiser step moves LoopViT's output as the loop count T grows: the first-order
update condition DeepLoop is built on (docs/loopvit.md#depth-accounting-and-deeploop-for-loopvit).

For each block and scheme and T, a fresh tiny LoopViT (seeded) computes its logits on a fixed batch
of canvases, takes one AdamW step of the looped blocks' weights only (lr --lr, the train-vit loss,
dropout 0; Adam's first step moves every weight by about lr), and computes them again;
printed: the relative change ||logits' - logits|| / ||logits||, the mean over --seeds seeds. The
paper's bound for the Post-LN block: the change scales with M_g R (beta / alpha)^2 = 2 K T^2 unscaled
(alpha = beta = 1) and 1 / (8K) under DeepLoop (N = K T), i.e. it grows with T without scaling and
stays flat with it. The pre-norm hybrid block has no such bound; looped_eps scales its branches by
1 / (T sqrt K).

    python benchmarks/study_loopvit_update.py --loops 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.benchlib import print_table  # noqa: E402
from benchmarks.compare_reference_loopvit import make_batches  # noqa: E402
from hrm_deeploop.models.loopvit import LoopViT  # noqa: E402
from hrm_deeploop.models.loopvit_config import flavour  # noqa: E402
from hrm_deeploop.models.scaling import ScalingConfig  # noqa: E402
from hrm_deeploop.training.vision import vision_loss  # noqa: E402

SCHEMES = {"vanilla": ("baseline", "deepnorm", "deeploop"), "hybrid": ("baseline", "looped_eps")}


def update_size(cfg, scheme: str, batch: dict, lr: float, seed: int) -> float:
    """One AdamW step of the looped blocks' parameters only (`layers.*`, the weights the bound is
    about; embeddings, gate, final norm and head stay), and the relative change of the logits."""
    torch.manual_seed(seed)
    model = LoopViT(cfg, ScalingConfig(scheme=scheme))
    trunk = [p for n, p in model.named_parameters() if n.startswith("layers.")]
    opt = torch.optim.AdamW(trunk, lr=lr, weight_decay=0.0)
    before = model(batch["canvas"], batch["task_ids"], batch["mask"])
    loss, _ = vision_loss(before, batch["target"], 5e-4, 1e-3, cfg.num_loops)
    loss.backward()
    opt.step()
    with torch.no_grad():
        after = model(batch["canvas"], batch["task_ids"], batch["mask"]).logits
    return float((after - before.logits.detach()).norm() / before.logits.detach().norm())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--blocks", nargs="+", choices=sorted(SCHEMES), default=["vanilla", "hybrid"])
    parser.add_argument("--num-blocks", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = flavour("tiny", num_tasks=5, num_blocks=args.num_blocks, dropout=0.0)
    batch = make_batches(base, 8, 1, seed=0)[0]
    print(f"# LoopViT tiny (canvas {base.image_size}, d {base.hidden_size}, K {base.num_blocks}), batch 8, one AdamW "
          f"step of the blocks' weights at lr {args.lr}: ||logits after - before|| / ||logits before||, "
          f"mean of {args.seeds} seeds")
    for block in args.blocks:
        schemes = SCHEMES[block]
        rows = []
        for t in args.loops:
            cfg = replace(base, block=block, num_loops=t)
            sizes = [sum(update_size(cfg, s, batch, args.lr, seed) for seed in range(args.seeds)) / args.seeds
                     for s in schemes]
            rows.append([str(t), *(f"{x:.4f}" for x in sizes)])
        print(f"\n## {block} block")
        print_table(["T", *schemes], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
