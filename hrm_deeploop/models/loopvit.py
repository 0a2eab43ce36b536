"""LoopViT (Shu et al. 2026, arXiv 2602.02156; code `WenjieShu/LoopViT`, on VARC): a looped vision
transformer that maps an input canvas to an output canvas (docs/loopvit.md).

- Tokens: a colour embedding per canvas pixel (12 colours: 0-9, background 10, border 11), a
  learned linear map of each p x p block of them (a Conv2d D -> D, kernel = stride = p), a learned
  absolute position per patch, and one task token (a row of the task table) prepended:
  L = 1 + G^2 tokens, G = S / p. Dropout on the sequence.
- Loop: T times, add the step embedding e_min(t, T-1) to every token, then apply the same K blocks
  (weight tying; `models/loopvit_blocks.py`: the hybrid pre-norm block or VARC's Post-LN one). No
  input re-injection. The key padding mask (from the canvas's input cells, max-pooled per patch)
  hides the patches outside the input from every key; the task token is always a key.
- Exit gate: LayerNorm -> Linear(D, D/2) -> GELU -> Linear(D/2, 1) -> sigmoid on the task token
  after every loop (its probabilities are outputs; training adds the official gate regularisers,
  `training/vision.py`).
- Readout: LayerNorm, drop the task token, Linear(D, 12 p^2) per patch, un-patchified to
  (B, S, S, 12) logits. `intermediates=True` also returns every loop's logits.
- Exit rules at inference (`ExitRule`): the official gate's dynamic exit, its evaluation's entropy
  plateau, the paper's entropy threshold; exited samples freeze (`forward`) or leave the batch
  (`forward_compact`, which saves their compute).
- Residual scaling: `scaling=` through `loopvit_config.loopvit_depth` (N = K * T): alpha / beta on the
  vanilla block, looped_eps's eps on the hybrid block.

Init (`init_weights`, as the official `_reset_parameters`): truncated normal std 0.02 (bounds +-2,
absolute) on the position, task, colour and step tables and the gate's matrices; zero head and
gate biases; PyTorch's defaults on every other Linear, the convolutions and the norms; then the
scheme's beta gain on the blocks' residual-branch matrices. Every parameter must be covered.

`official_key_map(cfg)` maps an official state dict's keys onto this model's (docs/loopvit.md).
Architecture only: no process group, no config files, no environment variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrm_deeploop.models.core import Linear, RMSNorm
from hrm_deeploop.models.loopvit_blocks import HybridBlock, VanillaBlock, rope_2d
from hrm_deeploop.models.loopvit_config import NUM_COLORS, LoopViTConfig, loopvit_depth
from hrm_deeploop.models.scaling import ScalingConfig, module_residuals

PREFIX = 1  # task tokens before the patches (the official num_task_tokens; only 1 is supported)


@dataclass
class LoopViTOutput:
    logits: Tensor  # (B, S, S, 12), the last loop's (with an exit rule: each sample's exit loop's)
    gate_probs: Tensor | None  # (B, loops run) the exit gate after each loop; None without a gate
    intermediates: list[Tensor] | None  # each loop's logits (B, S, S, 12), with intermediates=True
    exit_steps: Tensor | None = None  # (B,) the loop (1-based) each sample exited at, with an exit rule


EXIT_KINDS = ("gate", "plateau", "threshold")


@dataclass(frozen=True)
class ExitRule:
    """When a sample stops looping (inference). A stopped sample's state is frozen; the loop ends
    when every sample of the batch has stopped (the only compute saved, as in the official code).

    - gate: the official `dynamic_exit`: exit gate >= `gate_threshold` after loop t >= `min_loops`;
    - plateau: the official evaluation's rule (as coded): the mean canvas entropy fell by less than
      `pct` (relative) on `patience` consecutive loops; the official one computes every loop and
      picks the exit loop's logits afterwards (`entropy_exit_steps`), this one stops;
    - threshold: the paper's rule (as written): mean canvas entropy < `tau`, loop t >= `min_loops`.
    """

    kind: str = "gate"
    min_loops: int = 1
    gate_threshold: float = 0.6
    pct: float = 0.05
    patience: int = 2
    tau: float = 0.05

    def __post_init__(self) -> None:
        assert self.kind in EXIT_KINDS, f"exit rule {self.kind!r}: one of {', '.join(EXIT_KINDS)}"


def canvas_entropy(logits: Tensor) -> Tensor:
    """(B, S, S, C) -> (B,): mean over every canvas pixel of -sum_c p ln p, in fp32 (the official
    `compute_entropy`, background and ignored cells included)."""
    x = logits.float()
    return -(F.softmax(x, dim=-1) * F.log_softmax(x, dim=-1)).sum(-1).flatten(1).mean(1)


class _EntropyExit:
    """The per-sample state of the plateau / threshold rules over successive loops."""

    def __init__(self, rule: ExitRule, batch: int, device: torch.device):
        self.rule = rule
        self.prev: Tensor | None = None
        self.count = torch.zeros(batch, dtype=torch.long, device=device)

    def __call__(self, t: int, logits: Tensor) -> Tensor:
        """Whether each sample stops after loop t + 1 (not yet masked by the finished ones)."""
        ent, r = canvas_entropy(logits), self.rule
        if r.kind == "threshold":
            return (ent < r.tau) & (t + 1 >= r.min_loops)
        stop = torch.zeros_like(self.count, dtype=torch.bool)
        if self.prev is not None:
            flat = (self.prev - ent) / (self.prev + 1e-8) < r.pct
            self.count = torch.where(flat, self.count + 1, torch.zeros_like(self.count))
            stop = self.count >= r.patience
        self.prev = ent
        return stop

    def keep(self, rows: Tensor) -> None:
        """Keep the state of these rows only (`LoopViT.forward_compact` drops exited samples)."""
        self.count = self.count[rows]
        self.prev = self.prev[rows] if self.prev is not None else None


def entropy_exit_steps(intermediates: list[Tensor], rule: ExitRule) -> Tensor:
    """(B,) the 1-based loop each sample exits at under an entropy rule, from every loop's logits
    (the official evaluation's post-hoc form; the last loop when the rule never fires)."""
    check = _EntropyExit(rule, intermediates[0].shape[0], intermediates[0].device)
    exit_at = torch.full((intermediates[0].shape[0],), len(intermediates), dtype=torch.long,
                         device=intermediates[0].device)
    done = torch.zeros_like(exit_at, dtype=torch.bool)
    for t, logits in enumerate(intermediates):
        now = check(t, logits) & ~done
        exit_at = torch.where(now, t + 1, exit_at)
        done |= now
    return exit_at


class ExitGate(nn.Module):
    """LN -> Linear(D, D/2) -> GELU -> Linear(D/2, 1) on the task token; returns the logit (B,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = Linear(dim, dim // 2, bias=True)
        self.fc2 = Linear(dim // 2, 1, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(self.norm(x)))).squeeze(-1)


def _torch_default_(module: nn.Module) -> None:
    """PyTorch's default init of an nn.Linear (on our `Linear`): kaiming-uniform(a=sqrt 5) weight,
    U(+-1/sqrt(fan_in)) bias."""
    nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        bound = 1 / math.sqrt(module.weight.shape[1])
        nn.init.uniform_(module.bias, -bound, bound)


class LoopViT(nn.Module):
    """`forward(canvas, task_ids, attention_mask=None) -> LoopViTOutput` (see the module docstring)."""

    def __init__(self, cfg: LoopViTConfig, scaling: ScalingConfig | None = None):
        super().__init__()
        self.cfg = cfg
        self.scaling = scaling or ScalingConfig()
        self.depth = loopvit_depth(cfg, self.scaling)  # refuses a scheme the block has no form for
        self.residual = module_residuals(self.scaling, self.depth)["core"]
        D, p, G = cfg.hidden_size, cfg.patch_size, cfg.grid_size
        # registered in the official order: gradient clipping sums the per-parameter norms in this order
        self.color_embed = nn.Embedding(NUM_COLORS, D)
        self.task_embed = nn.Embedding(cfg.num_tasks, D)
        self.patch_embed = nn.Conv2d(D, D, kernel_size=p, stride=p, bias=True)
        self.pos_embed = nn.Parameter(torch.zeros(1, G * G, D))
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.block == "hybrid":
            self.layers = nn.ModuleList(HybridBlock(D, cfg.num_heads, cfg.mlp_dim, cfg.dropout, PREFIX, G, self.residual)
                                        for _ in range(cfg.num_blocks))
        else:
            self.layers = nn.ModuleList(VanillaBlock(D, cfg.num_heads, cfg.mlp_dim, cfg.dropout, PREFIX, self.residual)
                                        for _ in range(cfg.num_blocks))
        self.step_embed = nn.Embedding(cfg.num_loops, D) if cfg.step_embeddings else None
        self.gate = ExitGate(D) if cfg.exit_gate else None
        self.norm = nn.LayerNorm(D)
        self.head = Linear(D, NUM_COLORS * p * p, bias=True)
        cos, sin = rope_2d(cfg.head_dim, G, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)  # (G^2, hd)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    def init_weights(self) -> None:
        """The official init (module docstring), then beta; raises on a parameter it does not cover."""
        seen: set[int] = set()
        with torch.no_grad():
            for t in (self.pos_embed, self.task_embed.weight, self.color_embed.weight,
                      *([self.step_embed.weight] if self.step_embed is not None else [])):
                nn.init.trunc_normal_(t, std=0.02)
                seen.add(id(t))
            for name, m in self.named_modules():
                if isinstance(m, Linear):
                    if name.startswith("gate."):
                        nn.init.trunc_normal_(m.weight, std=0.02)
                        nn.init.zeros_(m.bias)
                    else:
                        _torch_default_(m)
                elif isinstance(m, (nn.LayerNorm, nn.Conv2d)):
                    m.reset_parameters()
                elif isinstance(m, RMSNorm):
                    nn.init.ones_(m.weight)
                else:
                    continue
                seen.update(id(q) for q in m.parameters())
            nn.init.zeros_(self.head.bias)
            missing = [n for n, q in self.named_parameters() if id(q) not in seen]
            assert not missing, f"LoopViT.init_weights does not initialise {missing}"
            r = self.residual
            if r.norm == "post" and r.beta != 1.0:
                for block in self.layers:
                    mats = block.beta_matrices()
                    for target in r.beta_targets:
                        for w, rows in mats[target]:
                            w[rows].mul_(r.beta)

    @property
    def dtype(self) -> torch.dtype:
        return self.head.weight.dtype

    def num_params(self) -> int:
        """Parameters without the task table (the official `count_parameters`)."""
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith("task_embed."))

    def pad_mask(self, attention_mask: Tensor) -> Tensor:
        """(B, S, S) input-cell mask -> (B, 1 + G^2) bool, True = padding (not a key): a patch is a key
        when any of its pixels is an input cell; the task token always is."""
        B, p, G = attention_mask.shape[0], self.cfg.patch_size, self.cfg.grid_size
        m = attention_mask.reshape(B, G, p, G, p).amax(dim=(2, 4)).reshape(B, G * G)  # (B, G^2)
        return torch.cat((torch.zeros(B, PREFIX, dtype=torch.bool, device=m.device), ~m.bool()), dim=1)

    def embed(self, canvas: Tensor, task_ids: Tensor) -> Tensor:
        """(B, S, S) colours and (B,) task ids -> z_0 (B, 1 + G^2, D)."""
        S = self.cfg.image_size
        if canvas.dim() != 3 or canvas.shape[1:] != (S, S):
            raise ValueError(f"canvas must be (B, {S}, {S}) (model.image_size), got {tuple(canvas.shape)}")
        x = self.color_embed(canvas.long()).permute(0, 3, 1, 2)  # (B, D, S, S)
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, G^2, D), patches row-major
        x = x + self.pos_embed
        task = self.task_embed(task_ids.long())[:, None]  # (B, 1, D)
        return self.drop(torch.cat((task, x), dim=1))

    def readout(self, z: Tensor) -> Tensor:
        """(B, 1 + G^2, D) -> logits (B, S, S, 12): final norm, per-patch head, un-patchify."""
        B, p, G = z.shape[0], self.cfg.patch_size, self.cfg.grid_size
        y = self.head(self.norm(z)[:, PREFIX:])  # (B, G^2, p*p*C)
        y = y.reshape(B, G, G, p, p, NUM_COLORS).permute(0, 1, 3, 2, 4, 5)  # (B, G, p, G, p, C)
        return y.reshape(B, G * p, G * p, NUM_COLORS)

    def forward(self, canvas: Tensor, task_ids: Tensor, attention_mask: Tensor | None = None,
                num_loops: int | None = None, intermediates: bool = False,
                exit_rule: ExitRule | None = None) -> LoopViTOutput:
        """num_loops: loops to run (default T; beyond T the last step embedding repeats, the
        official identity extrapolation). exit_rule: stop samples early (`ExitRule`)."""
        z = self.embed(canvas, task_ids)
        B = z.shape[0]
        pad = self.pad_mask(attention_mask) if attention_mask is not None else None
        rope = (self.rope_cos.to(z.dtype), self.rope_sin.to(z.dtype))
        steps = self.cfg.num_loops if num_loops is None else num_loops
        if exit_rule is not None and exit_rule.kind == "gate" and self.gate is None:
            raise ValueError("exit rule 'gate' needs the exit gate (model.exit_gate=true)")
        entropy = _EntropyExit(exit_rule, B, z.device) if exit_rule is not None and exit_rule.kind != "gate" else None
        finished = torch.zeros(B, dtype=torch.bool, device=z.device)
        exit_steps = torch.full((B,), steps, dtype=torch.long, device=z.device)
        cached = torch.zeros_like(z) if exit_rule is not None else None
        gates, inter = [], []
        for t in range(steps):
            if self.step_embed is not None:
                z = z + self.step_embed.weight[min(t, self.cfg.num_loops - 1)].view(1, 1, -1)
            for block in self.layers:  # the same K blocks every loop
                z = block(z, rope, pad)
            if intermediates:
                inter.append(self.readout(z))
            if self.gate is not None:
                gates.append(torch.sigmoid(self.gate(z[:, 0])))
            if exit_rule is not None:  # the official freeze-on-exit: the exited keep their state
                if entropy is None:
                    now = (gates[-1] >= exit_rule.gate_threshold) & (t + 1 >= exit_rule.min_loops) & ~finished
                else:
                    now = entropy(t, inter[-1] if intermediates else self.readout(z)) & ~finished
                if now.any():
                    cached[now] = z[now]
                    exit_steps[now] = t + 1
                    finished = finished | now
                z = torch.where(finished.view(B, 1, 1), cached, z)
                if finished.all():
                    break
        return LoopViTOutput(logits=self.readout(z), gate_probs=torch.stack(gates, dim=1) if gates else None,
                             intermediates=inter if intermediates else None,
                             exit_steps=exit_steps if exit_rule is not None else None)

    def forward_compact(self, canvas: Tensor, task_ids: Tensor, attention_mask: Tensor | None = None,
                        exit_rule: ExitRule = ExitRule(), num_loops: int | None = None) -> LoopViTOutput:
        """`forward` with an exit rule whose exited samples leave the batch: each sample costs only
        its own loops (sum(exit_steps) block-stack passes instead of B x loops), with the same exits
        and logits as the freezing form. Gate probabilities after a sample's exit are NaN."""
        z = self.embed(canvas, task_ids)
        B = z.shape[0]
        pad = self.pad_mask(attention_mask) if attention_mask is not None else None
        rope = (self.rope_cos.to(z.dtype), self.rope_sin.to(z.dtype))
        steps = self.cfg.num_loops if num_loops is None else num_loops
        if exit_rule.kind == "gate" and self.gate is None:
            raise ValueError("exit rule 'gate' needs the exit gate (model.exit_gate=true)")
        entropy = _EntropyExit(exit_rule, B, z.device) if exit_rule.kind != "gate" else None
        active = torch.arange(B, device=z.device)  # the rows still looping
        final = torch.empty_like(z)
        exit_steps = torch.full((B,), steps, dtype=torch.long, device=z.device)
        gates = torch.full((B, steps), float("nan"), device=z.device) if self.gate is not None else None
        for t in range(steps):
            if self.step_embed is not None:
                z = z + self.step_embed.weight[min(t, self.cfg.num_loops - 1)].view(1, 1, -1)
            for block in self.layers:
                z = block(z, rope, pad)
            g = torch.sigmoid(self.gate(z[:, 0])) if self.gate is not None else None
            if gates is not None:
                gates[active, t] = g.to(gates.dtype)
            if entropy is None:
                now = (g >= exit_rule.gate_threshold) & (t + 1 >= exit_rule.min_loops)
            else:
                now = entropy(t, self.readout(z))
            done = now | (t == steps - 1)
            final[active[done]] = z[done]
            exit_steps[active[now]] = t + 1
            keep = ~done
            active, z = active[keep], z[keep]
            pad = pad[keep] if pad is not None else None
            if entropy is not None:
                entropy.keep(keep)
            if not len(active):
                break
        return LoopViTOutput(logits=self.readout(final), gate_probs=gates, intermediates=None, exit_steps=exit_steps)


def official_key_map(cfg: LoopViTConfig) -> dict[str, str | None]:
    """Official `LoopARCViT` state-dict key -> ours; None: a buffer ours computes (the RoPE tables,
    which `load_official` checks against ours instead of loading)."""
    keys = {"positional_embed": "pos_embed", "color_embed.weight": "color_embed.weight",
            "task_token_embed.weight": "task_embed.weight", "patch_embed.proj.weight": "patch_embed.weight",
            "patch_embed.proj.bias": "patch_embed.bias", "norm.weight": "norm.weight", "norm.bias": "norm.bias",
            "head.weight": "head.weight", "head.bias": "head.bias"}
    if cfg.step_embeddings:
        keys["step_embed.weight"] = "step_embed.weight"
    if cfg.exit_gate:
        for i, ours in (("0", "norm"), ("1", "fc1"), ("3", "fc2")):
            for w in ("weight", "bias"):
                keys[f"exit_gate.{i}.{w}"] = f"gate.{ours}.{w}"
    for i in range(cfg.num_blocks):
        o, b = f"core_layers.{i}.", f"layers.{i}."
        for w in ("qkv.weight", "qkv.bias", "proj.weight", "proj.bias"):
            keys[o + "self_attn." + w] = b + "self_attn." + w
        keys[o + "self_attn.rotary.freqs_cos"] = keys[o + "self_attn.rotary.freqs_sin"] = None
        if cfg.block == "vanilla":
            for n in ("norm1", "norm2"):
                keys[f"{o}{n}.weight"], keys[f"{o}{n}.bias"] = f"{b}{n}.weight", f"{b}{n}.bias"
            for theirs, ours in (("linear1", "mlp.fc1"), ("linear2", "mlp.fc2")):
                keys[f"{o}{theirs}.weight"], keys[f"{o}{theirs}.bias"] = f"{b}{ours}.weight", f"{b}{ours}.bias"
        else:
            keys[o + "norm1.scale"], keys[o + "norm2.scale"] = b + "norm1.weight", b + "norm2.weight"
            for w in ("fc1.weight", "fc1.bias", "dwconv.weight", "dwconv.bias", "fc2.weight", "fc2.bias"):
                keys[o + "mlp." + w] = b + "mlp." + w
    return keys


def load_official(model: LoopViT, state: dict[str, Tensor], strict_tasks: bool = True) -> list[str]:
    """Load an official state dict (its `model_state`, `_orig_mod.` prefixes stripped) into `model`
    through `official_key_map`. The RoPE buffers must equal ours. `strict_tasks=False` keeps our task
    table when the row counts differ (the official TTT's fresh table). Returns the keys not loaded.
    Raises ValueError naming the first key that is missing, unexpected or of the wrong shape."""
    kmap = official_key_map(model.cfg)
    state = {k.removeprefix("_orig_mod."): v for k, v in state.items()}
    unexpected = sorted(set(state) - set(kmap))
    if unexpected:
        raise ValueError(f"official LoopViT state has keys this config does not: {unexpected[:3]} "
                         f"(model.block={model.cfg.block}, num_blocks={model.cfg.num_blocks}?)")
    ours = model.state_dict()
    skipped, new = [], {}
    for theirs, mine in kmap.items():
        if theirs not in state:
            raise ValueError(f"official LoopViT state lacks '{theirs}'")
        v = state[theirs]
        if mine is None:  # a RoPE table: ours is computed; it must be the same
            table = model.rope_cos if theirs.endswith("cos") else model.rope_sin
            if v.shape != table.shape or not torch.equal(v.to(table), table):
                raise ValueError(f"'{theirs}' differs from this model's 2-D RoPE table (head size or canvas?)")
            continue
        if v.shape != ours[mine].shape:
            if mine == "task_embed.weight" and not strict_tasks:
                skipped.append(theirs)
                continue
            raise ValueError(f"'{theirs}' has shape {tuple(v.shape)}, this model's '{mine}' {tuple(ours[mine].shape)}")
        new[mine] = v
    missing = sorted(set(ours) - set(new) - {"task_embed.weight"})
    if missing:
        raise ValueError(f"no official key maps onto {missing[:3]}")
    model.load_state_dict(new, strict=False)
    return skipped
