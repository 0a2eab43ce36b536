"""LoopViT's config, its flavours and its depth accounting (torch-free: `hrm-deeploop scales` and
`--help` compose and print it without importing torch; the model is `models/loopvit.py`).

LoopViT (Shu et al. 2026, arXiv 2602.02156, code `WenjieShu/LoopViT`, built on VARC) treats an
ARC task as image-to-image translation on a canvas: K weight-tied blocks run for T loops over
(1 task token + (S/p)^2 patch tokens). Two blocks exist in the official code:

| model.block | official flag | block                                                                    |
|-------------|---------------|--------------------------------------------------------------------------|
| hybrid      | loop_vit1     | pre-norm RMSNorm, SDPA attention with 2-D RoPE, ConvGLU (3x3 depthwise)   |
| vanilla     | loop_vit      | VARC's Post-LN LayerNorm block, explicit-softmax attention, GELU MLP     |

Flavours (`FLAVOURS`, also `configs/model/loopvit*.yaml`); parameter counts as the official
`count_parameters` counts them (task table excluded, exit gate and step table included):

| flavour | block | d | heads | mlp | K | T | params | source |
|---|---|---|---|---|---|---|---|---|
| large | hybrid | 512 | 8 | 512 | 10 | 6 | 17,541,129 | `wandb_logs/Large/config.yaml` (65.8 on ARC-1) |
| medium | hybrid | 512 | 8 | 512 | 6 | 6 | 11,221,017 | paper's 11.2M, Fig. 8 (B = 6); T in [4, 8] |
| b6 | vanilla | 512 | 8 | 512 | 6 | 6 | 11,208,753 | the shipped `script/offline_train_loop_VARC_ViT.sh` |
| small | hybrid | 512 | 8 | 1024 | 1 | 24 | 3,857,961 | chosen here (docs/loopvit.md): the paper gives 3.8M, T in [20, 28] |
| tiny | hybrid | 32 | 2 | 48 | 2 | 3 | - | CPU tests, canvas 16 |

Depth: every loop is on the autograd tape (no truncation), so N = N_g = K * T block visits,
M = 2N sublayers, module `core` (K, R = T). The exit gate does not change the trained depth: the
official offline training sets min = max loops (the gate's dynamic exit is then a no-op) and
evaluation runs every loop (docs/loopvit.md). Residual schemes: the vanilla block is Post-LN, so
baseline / deepnorm / deeploop / power give its alpha (skip path) and beta (init gain on the value
rows of qkv, the attention output and both MLP matrices); the hybrid block is pre-norm, so it takes
baseline (the reference block) or looped_eps (x <- x + eps f(RMSNorm(x)), eps = lambda / (T sqrt K)).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.scaling import POST_LN, Depth, ScalingConfig
from hrm_deeploop.typed_config import at_least, check, in_range, one_of, positive

BLOCKS = ("hybrid", "vanilla")
NUM_COLORS = 12  # ARC colours 0-9, 10 = background / ignored target, 11 = the output's border (data/canvas.py)


@dataclass
class LoopViTConfig:
    """LoopViT (`model=loopvit`). Defaults: the published Large (hybrid, d 512, 10 blocks, 6 loops).
    The official `--architecture`, `--embed-dim`, `--loop-core-depth`, `--max-loop-steps` map to
    block, hidden_size, num_blocks, num_loops; `num_tasks` is filled from the dataset."""

    layer_fields: ClassVar[tuple[str, ...]] = ("num_blocks",)  # identical blocks (runtime.count_model)
    depth_option: ClassVar[str | None] = None  # one convention: every loop on the tape

    name: str = "loopvit"
    block: str = "hybrid"  # hybrid (the paper's, loop_vit1) | vanilla (VARC's Post-LN block, loop_vit)
    hidden_size: int = 512
    num_heads: int = 8
    mlp_dim: int = 512  # vanilla: the MLP width; hybrid: ConvGLU's width is int(2 * mlp_dim / 3)
    num_blocks: int = 10  # K weight-tied blocks (loop_core_depth)
    num_loops: int = 6  # T loops (max_loop_steps)
    image_size: int = 64  # the canvas side S
    patch_size: int = 2
    dropout: float = 0.1
    step_embeddings: bool = True  # a learned vector added to every token before each loop
    exit_gate: bool = True  # LN -> Linear -> GELU -> Linear -> sigmoid on the task token after each loop
    rope_theta: float = 10000.0
    num_tasks: int = 1  # task-token rows (one per puzzle identifier of the dataset)

    def __post_init__(self) -> None:
        one_of("model.block", self.block, BLOCKS)
        for key in ("hidden_size", "num_heads", "mlp_dim", "num_blocks", "num_loops", "image_size", "patch_size",
                    "num_tasks"):
            at_least(f"model.{key}", getattr(self, key), 1)
        in_range("model.dropout", self.dropout, 0.0, 1.0)
        positive("model.rope_theta", self.rope_theta)
        check(self.hidden_size % self.num_heads == 0, "model.hidden_size", self.hidden_size,
              f"divisible by model.num_heads={self.num_heads}")
        check(self.head_dim % 4 == 0, "model.hidden_size", self.hidden_size,
              f"such that the head size {self.head_dim} is divisible by 4 (2-D RoPE: half the head per axis, in pairs)")
        check(self.image_size % self.patch_size == 0, "model.image_size", self.image_size,
              f"divisible by model.patch_size={self.patch_size}")
        check(self.block == "vanilla" or self.mlp_dim * 2 // 3 >= 1, "model.mlp_dim", self.mlp_dim, ">= 2 (hybrid)")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def grid_size(self) -> int:
        """G: patches per canvas side; the sequence is 1 task token + G^2 patch tokens."""
        return self.image_size // self.patch_size

    @property
    def glu_width(self) -> int:
        """The hybrid block's ConvGLU width h = int(2 * mlp_dim / 3) (TransNeXt's heuristic)."""
        return int(2 * self.mlp_dim / 3)

    def depth(self, scaling: ScalingConfig) -> Depth:
        return loopvit_depth(self, scaling)

    def tape_layers(self, tape_rounds: int | None = None) -> int:
        """K x the loops on the tape (every loop is: `tape_rounds`, default T)."""
        return self.num_blocks * (tape_rounds or self.num_loops)


def loopvit_depth(cfg: LoopViTConfig, scaling: ScalingConfig | None = None) -> Depth:
    """N = K * T (every loop on the tape: N_g = N), one module `core` with K blocks and R = T; refuses
    the schemes the block has no form for (a Post-LN alpha on the pre-norm hybrid block, looped_eps's
    pre-norm step on the Post-LN vanilla block, OperLoop, HRM's per-module options)."""
    scaling = scaling or ScalingConfig()
    if scaling.per_module or scaling.p_h is not None or scaling.p_l is not None:
        raise ConfigError("scaling.per_module / p_h / p_l are HRM's per-module options; model=loopvit has one looped core")
    s = scaling.scheme
    if s == "operloop":
        raise ConfigError("scaling=operloop is not built for model=loopvit (use baseline, deeploop or looped_eps)")
    if cfg.block == "hybrid" and s in POST_LN and s != "baseline":
        raise ConfigError(f"scaling={s} scales a Post-LN block; model.block=hybrid is pre-norm "
                          "(use scaling=looped_eps, or model.block=vanilla)")
    if cfg.block == "vanilla" and s == "looped_eps":
        raise ConfigError("scaling=looped_eps is a pre-norm step; model.block=vanilla is Post-LN "
                          "(use scaling=deeploop, or model.block=hybrid)")
    k, t = cfg.num_blocks, cfg.num_loops
    n = k * t
    return Depth(N=n, M=2 * n, N_g=n, M_g=2 * n, modules={"core": {"K": k, "R": t, "N": n}})


_LARGE = LoopViTConfig()
FLAVOURS: dict[str, LoopViTConfig] = {
    "large": _LARGE,
    "medium": replace(_LARGE, num_blocks=6),
    "b6": replace(_LARGE, block="vanilla", num_blocks=6),
    "small": replace(_LARGE, mlp_dim=1024, num_blocks=1, num_loops=24),
    "tiny": LoopViTConfig(hidden_size=32, num_heads=2, mlp_dim=48, num_blocks=2, num_loops=3, image_size=16,
                          dropout=0.0),
}


def flavour(name: str, **over: Any) -> LoopViTConfig:
    """The named flavour with fields replaced."""
    if name not in FLAVOURS:
        raise ConfigError(f"LoopViT flavour {name!r}: must be one of {', '.join(FLAVOURS)}")
    return replace(FLAVOURS[name], **over)


OFFICIAL_BLOCKS = {"loop_vit": "vanilla", "loop_vit1": "hybrid"}  # the official --architecture values


def official_config(args: dict[str, Any], num_tasks: int = 1) -> LoopViTConfig:
    """The config of an official checkpoint from its saved arguments (`config`: `vars(args)` of
    its offline or TTT script). Refuses what this model does not build (loop_vit2's relative-position
    bias, several task tokens, a palette other than 12 colours)."""
    arch = args.get("architecture")
    if arch not in OFFICIAL_BLOCKS:
        raise ConfigError(f"official checkpoint: architecture={arch!r} is not one LoopViT builds "
                          f"({', '.join(OFFICIAL_BLOCKS)}; loop_vit2's relative-position bias is not built)")
    for key, want in (("num_task_tokens", 1), ("num_colors", NUM_COLORS)):
        if args.get(key, want) != want:
            raise ConfigError(f"official checkpoint: {key}={args.get(key)!r}, this model builds {want}")
    try:
        return LoopViTConfig(block=OFFICIAL_BLOCKS[arch], hidden_size=args["embed_dim"], num_heads=args["num_heads"],
                             mlp_dim=args["mlp_dim"], num_blocks=args["loop_core_depth"],
                             num_loops=args["max_loop_steps"], image_size=args["image_size"],
                             patch_size=args["patch_size"], dropout=args["dropout"],
                             step_embeddings=not args.get("no_step_embedding", False),
                             exit_gate=not args.get("disable_exit_gate", False), num_tasks=num_tasks)
    except KeyError as e:
        raise ConfigError(f"official checkpoint: its config has no {e.args[0]!r}") from None
