"""Model configs: one typed dataclass per model, and the registry that picks one by `model.name`.

Torch-free on purpose: composing or printing a config (`hrm-deeploop scales`, `--help`, the CLI's
config checks) never imports torch. Each model file imports its config from here. Every field is
range-checked once, in `__post_init__`, so a bad value is a one-line error naming `model.<field>`.

| name | dataclass | model class                          |
|------|-----------|--------------------------------------|
| hrm  | HRMConfig | hrm_deeploop.models.hrm.HRM          |
| trm  | TRMConfig | hrm_deeploop.models.trm.TRM          |
| urm  | URMConfig | hrm_deeploop.models.urm.URM          |
| gpt  | GPTConfig | hrm_deeploop.models.gpt.GPT          |

HRMConfig, TRMConfig and URMConfig extend `ReasonerConfig`, the fields and checks the three share.

Each dataclass declares what the rest of the library asks of a model, next to its fields:
`depth(scaling)` (its depth accounting: N, M, N_g, M_g and per module (K, R, N), on the helpers of
`models.scaling`), `tape_layers(tape_rounds)` (the blocks one backward keeps, for the memory
estimate), `layer_fields` (the fields that count identical blocks, for `runtime.count_model`),
`depth_option` (the `scaling.*_depth` field of its convention, or None). A new model is its
model file on `core.py` plus its dataclass here with those four and one entry in MODEL_CONFIGS
(a reasoner: `ReasonerConfig` and one entry in `models.reasoners.REASONERS`); the loaders, the
memory estimate, `scales` and the trainers then find it by `model.name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hrm_deeploop.errors import ConfigError
from hrm_deeploop.models.loopvit_config import LoopViTConfig
from hrm_deeploop.models.scaling import Depth, ScalingConfig, loop_depth, one_network_depth, two_module_depth
from hrm_deeploop.typed_config import at_least, check, in_range, one_of, positive, typed

COMPUTE_DTYPES = ("float32", "bfloat16", "float16")


def check_heads(hidden_size: int, num_heads: int, rope: bool) -> None:
    """Attention heads: hidden_size splits into num_heads heads, of even size under RoPE."""
    check(hidden_size % num_heads == 0, "model.hidden_size", hidden_size, f"divisible by model.num_heads={num_heads}")
    if rope:
        check((hidden_size // num_heads) % 2 == 0, "model.hidden_size", hidden_size,
              f"such that the head size hidden_size / num_heads = {hidden_size // num_heads} is even (RoPE)")


@dataclass
class ReasonerConfig:
    """What HRM, TRM and URM share: width, heads, ACT, the puzzle embedding, positions, norms, MLP,
    dtypes, loss and the three fields filled in from the dataset. Each model's dataclass adds its
    own layer counts (and redeclares a default where the references differ); `depth_keys` names them
    for the range checks, `pos_encoding_choices` the position schemes the model supports."""

    depth_keys: ClassVar[tuple[str, ...]] = ("num_h_cycles", "num_l_cycles")
    pos_encoding_choices: ClassVar[tuple[str, ...]] = ("rope", "learned")
    layer_fields: ClassVar[tuple[str, ...]] = ()  # fields that count identical blocks (runtime.count_model)
    depth_option: ClassVar[str | None] = None  # the ScalingConfig field of its depth convention (scales prints it)

    name: str = ""
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    num_h_cycles: int = 2  # outer cycles (the model's docstring says what one is)
    num_l_cycles: int = 2  # inner cycles
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    puzzle_emb_ndim: int | None = None  # None -> hidden_size; 0 disables the puzzle embedding
    pos_encodings: str = "rope"  # rope | learned (TRM also none)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    norm_weight: bool = False  # the references' RMSNorm has no gain
    mlp_multiple: int = 256
    mlp: str = "swiglu"  # swiglu (HRM's, TRM's) | convswiglu (URM's MLP, a width-`conv_kernel` convolution)
    forward_dtype: str = "bfloat16"  # compute dtype on CUDA; CPU runs use float32
    loss_type: str = "stablemax_cross_entropy"  # or softmax_cross_entropy
    stablemax_dtype: str = "float64"  # float64 as the references; float32 is faster on consumer GPUs
    vocab_size: int = 12  # these three are filled in from the dataset
    seq_len: int = 900
    num_puzzle_identifiers: int = 1

    def __post_init__(self) -> None:
        for key in ("hidden_size", "num_heads", *self.depth_keys, "halt_max_steps", "mlp_multiple", "vocab_size",
                    "seq_len", "num_puzzle_identifiers"):
            at_least(f"model.{key}", getattr(self, key), 1)
        positive("model.expansion", self.expansion)
        positive("model.rope_theta", self.rope_theta)
        positive("model.rms_norm_eps", self.rms_norm_eps)
        in_range("model.halt_exploration_prob", self.halt_exploration_prob, 0.0, 1.0)
        if self.puzzle_emb_ndim is not None:
            at_least("model.puzzle_emb_ndim", self.puzzle_emb_ndim, 0)
        one_of("model.pos_encodings", self.pos_encodings, self.pos_encoding_choices)
        one_of("model.mlp", self.mlp, ("swiglu", "convswiglu"))
        one_of("model.loss_type", self.loss_type, ("stablemax_cross_entropy", "softmax_cross_entropy"))
        one_of("model.stablemax_dtype", self.stablemax_dtype, ("float64", "float32"))
        one_of("model.forward_dtype", self.forward_dtype, COMPUTE_DTYPES)

    @property
    def puzzle_dim(self) -> int:
        return self.hidden_size if self.puzzle_emb_ndim is None else self.puzzle_emb_ndim

    @property
    def puzzle_len(self) -> int:
        """P: number of prefix tokens the puzzle embedding occupies (ceil(ndim / hidden))."""
        return -(self.puzzle_dim // -self.hidden_size)

    def depth(self, scaling: ScalingConfig) -> Depth:
        """N, M, N_g, M_g and each module's (K, R, N) under `scaling` (models/scaling.py's helpers)."""
        raise NotImplementedError(f"model {self.name!r} declares no depth accounting")

    def tape_layers(self, tape_rounds: int | None = None) -> int:
        """Block applications one backward keeps activations for: the gradient-visible N_g."""
        return self.depth(ScalingConfig()).N_g


@dataclass
class HRMConfig(ReasonerConfig):
    """HRM architecture (reference spec 3.1 defaults). Keys mirror HRM's `arch` section."""

    depth_keys: ClassVar[tuple[str, ...]] = ("num_h_layers", "num_l_layers", "num_h_cycles", "num_l_cycles")
    layer_fields: ClassVar[tuple[str, ...]] = ("num_h_layers", "num_l_layers")
    depth_option: ClassVar[str | None] = "hrm_depth"

    name: str = "hrm"
    num_h_cycles: int = 2  # C
    num_l_cycles: int = 2  # C_L
    num_h_layers: int = 4  # K_H
    num_l_layers: int = 4  # K_L

    def __post_init__(self) -> None:
        super().__post_init__()
        check_heads(self.hidden_size, self.num_heads, rope=self.pos_encodings == "rope")

    def depth(self, scaling: ScalingConfig) -> Depth:
        """The two modules (paper eq. 15-16), N by `scaling.hrm_depth` (paper | autograd), per module
        with `scaling.per_module` (models/scaling.py's docstring)."""
        return two_module_depth(self.num_h_layers, self.num_l_layers, self.num_h_cycles, self.num_l_cycles,
                                scaling.hrm_depth, scaling.per_module)

    def tape_layers(self, tape_rounds: int | None = None) -> int:
        """The one-step gradient: the last H and L updates, K_H + K_L (N_g under hrm_depth=autograd)."""
        return self.depth(ScalingConfig(hrm_depth="autograd")).N_g


@dataclass
class TRMConfig(ReasonerConfig):
    """Tiny Recursive Model (TRM, Jolicoeur-Martineau 2025). Defaults: the reference's
    `config/arch/trm.yaml` (ARC experiments set num_l_cycles=4). One network of `num_layers`
    blocks updates both latents; the reference's arch keys map as H_cycles -> num_h_cycles (T),
    L_cycles -> num_l_cycles (n), L_layers -> num_layers, mlp_t -> mixer=mlp,
    no_ACT_continue -> act_continue=False (see official.OFFICIAL_TRM_ARCH_FIELDS)."""

    depth_keys: ClassVar[tuple[str, ...]] = ("num_layers", "num_h_cycles", "num_l_cycles")
    pos_encoding_choices: ClassVar[tuple[str, ...]] = ("rope", "learned", "none")
    layer_fields: ClassVar[tuple[str, ...]] = ("num_layers",)
    depth_option: ClassVar[str | None] = "trm_depth"

    name: str = "trm"
    num_h_cycles: int = 3  # T: deep-recursion steps per segment; the first T-1 run without grad
    num_l_cycles: int = 6  # n: latent updates z_L <- net(z_L, z_H + x) per step, then one z_H <- net(z_H, z_L)
    num_layers: int = 2  # K: physical blocks of the one network (the reference's L_layers; H_layers unused)
    mixer: str = "attention"  # attention | mlp (the reference's mlp_t: a SwiGLU across the sequence axis)
    act_continue: bool = False  # learn Q(continue) (HRM's rule and its extra target forward); False: halt when Q(halt) > 0
    puzzle_emb_len: int = 16  # prefix positions for the puzzle embedding; 0 -> ceil(puzzle_emb_ndim / hidden_size)

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("model.puzzle_emb_len", self.puzzle_emb_len, 0)
        one_of("model.mixer", self.mixer, ("attention", "mlp"))
        check(self.mixer == "attention" or self.mlp == "swiglu", "model.mlp", self.mlp,
              "swiglu with model.mixer=mlp (the token-mixing block has TRM's own SwiGLUs)")
        if self.puzzle_emb_len:
            check(self.puzzle_dim <= self.puzzle_emb_len * self.hidden_size, "model.puzzle_emb_len",
                  self.puzzle_emb_len, f"large enough to hold model.puzzle_emb_ndim={self.puzzle_dim} "
                  f"(>= {-(self.puzzle_dim // -self.hidden_size)} positions of {self.hidden_size})")
        if self.mixer == "attention":
            check_heads(self.hidden_size, self.num_heads, rope=self.pos_encodings == "rope")

    def depth(self, scaling: ScalingConfig) -> Depth:
        """T steps of n latent updates and one answer update per segment: each block visited n+1
        times per step, N by `scaling.trm_depth` (gradient | forward | physical; docs/trm.md)."""
        return one_network_depth("trm", scaling, self.num_layers, passes=self.num_h_cycles,
                                 visits=self.num_l_cycles + 1, key="trm_depth", num_layers=self.num_layers,
                                 num_h_cycles=self.num_h_cycles, num_l_cycles=self.num_l_cycles)

    @property
    def puzzle_len(self) -> int:
        """P: prefix positions; only the first ceil(ndim / hidden) carry the embedding, the rest are
        zeros (the reference pads the embedding to P * hidden_size). No puzzle embedding: no prefix
        (the reference keeps puzzle_emb_len positions in its carry but not in its input, and fails)."""
        if self.puzzle_dim == 0:
            return 0
        return self.puzzle_emb_len or -(self.puzzle_dim // -self.hidden_size)


@dataclass
class URMConfig(ReasonerConfig):
    """Universal Reasoning Model (URM, Gao et al. 2025, arXiv 2512.14693). Defaults: the reference's
    published setups (its scripts/URM_*.sh: loops 16, H_cycles 2, L_cycles 6, 4 layers; the rest
    from config/arch/urm.yaml, whose own 8 layers / H 4 / L 3 no script uses). One stack of
    `num_layers` Post-LN blocks (ConvSwiGLU MLP) recurs on one latent. The reference's arch keys map
    as loops -> halt_max_steps (its exploration probability is a hard-coded 0.1), H_cycles ->
    num_h_cycles, L_cycles -> num_l_cycles; it always uses RoPE."""

    depth_keys: ClassVar[tuple[str, ...]] = ("num_layers", "num_h_cycles", "num_l_cycles", "conv_kernel")
    pos_encoding_choices: ClassVar[tuple[str, ...]] = ("rope",)
    layer_fields: ClassVar[tuple[str, ...]] = ("num_layers",)
    depth_option: ClassVar[str | None] = "urm_depth"

    name: str = "urm"
    num_h_cycles: int = 2  # outer passes per ACT step; the first H-1 run without grad (truncated backprop)
    num_l_cycles: int = 6  # rounds per pass: z <- blocks(z + x)
    mlp: str = "convswiglu"  # convswiglu (the reference) | swiglu (its ablation without the convolution)
    num_layers: int = 4  # K physical blocks
    conv_kernel: int = 2  # the depthwise convolution's width (causal over positions; the reference's 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_heads(self.hidden_size, self.num_heads, rope=True)

    def depth(self, scaling: ScalingConfig) -> Depth:
        """H passes of C_L rounds per ACT step, N by `scaling.urm_depth` (gradient | forward |
        physical; docs/urm.md)."""
        return one_network_depth("urm", scaling, self.num_layers, passes=self.num_h_cycles,
                                 visits=self.num_l_cycles, key="urm_depth", num_layers=self.num_layers,
                                 num_h_cycles=self.num_h_cycles, num_l_cycles=self.num_l_cycles)


@dataclass
class GPTConfig:
    """The looped GPT (DeepLoop section 5.1): GPT-2 small by default; K blocks looped R rounds."""

    layer_fields: ClassVar[tuple[str, ...]] = ("num_blocks",)
    depth_option: ClassVar[str | None] = None

    name: str = "gpt"
    vocab_size: int = 50304  # GPT-2's 50257 padded to a multiple of 128
    hidden_size: int = 768
    num_heads: int = 12
    num_blocks: int = 12  # K physical blocks
    num_rounds: int = 1  # R loop rounds
    expansion: float = 4.0
    mlp_multiple: int = 256
    seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    norm_weight: bool = True
    embed_norm: bool = True  # RMSNorm on the input embedding (paper's baseline has it)
    tie_embeddings: bool = True
    activation_checkpointing: bool = False  # per-round checkpointing, for large R
    embed_init_std: float = 0.02  # token embedding (= tied head) init std, GPT-2's value
    mlp: str = "swiglu"  # swiglu (as HRM) | gelu (GPT-2's 4x GELU MLP); the paper does not say
    init: str = "lecun"  # lecun: truncated LeCun normal | gpt2: N(0, 0.02), projections / sqrt(2 K)

    def __post_init__(self) -> None:
        for key in ("vocab_size", "hidden_size", "num_heads", "num_blocks", "num_rounds", "mlp_multiple", "seq_len"):
            at_least(f"model.{key}", getattr(self, key), 1)
        positive("model.expansion", self.expansion)
        positive("model.rope_theta", self.rope_theta)
        positive("model.norm_eps", self.norm_eps)
        positive("model.embed_init_std", self.embed_init_std)
        one_of("model.mlp", self.mlp, ("swiglu", "gelu"))
        one_of("model.init", self.init, ("lecun", "gpt2"))
        check_heads(self.hidden_size, self.num_heads, rope=True)

    def depth(self, scaling: ScalingConfig) -> Depth:
        """One loop of K blocks for R rounds: N = K*R (a drawn R's alpha/beta: models/rounds.py)."""
        return loop_depth("gpt", scaling, self.num_blocks, self.num_rounds, num_blocks=self.num_blocks,
                          num_rounds=self.num_rounds)

    def tape_layers(self, tape_rounds: int | None = None) -> int:
        """K x the rounds on the tape (`tape_rounds`, default R)."""
        return self.num_blocks * (tape_rounds or self.num_rounds)


# The looped GPT's adaptive-exit criteria at inference (`models.gpt.ExitRule`; eval-gpt's and generate's `exit=`).
EXIT_CRITERIA = ("kl", "hidden")

MODEL_CONFIGS: dict[str, type] = {"hrm": HRMConfig, "trm": TRMConfig, "urm": URMConfig, "gpt": GPTConfig,
                                  "loopvit": LoopViTConfig}
ModelConfig = HRMConfig | TRMConfig | URMConfig | GPTConfig | LoopViTConfig


def model_config(cfg: Any) -> ModelConfig:
    """Typed model config from the `model` section; `model.name` selects the schema."""
    if cfg is None:
        raise ConfigError(f"config section 'model' is missing (choose model={' or model='.join(MODEL_CONFIGS)})")
    if isinstance(cfg, tuple(MODEL_CONFIGS.values())):
        return cfg
    name = cfg.get("name")
    if name not in MODEL_CONFIGS:
        raise ConfigError(f"model.name={name!r}: must be one of {', '.join(MODEL_CONFIGS)}")
    return typed(cfg, MODEL_CONFIGS[name], "model.")
