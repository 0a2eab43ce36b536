"""K copies of one LoopViT trained at once in one process (`ttt views=official`, `official.copies`;
docs/per-task.md#many-copies-at-once).

- The weights: every parameter stacked on a leading copy axis (K, ...), the model's forward run
  once for all copies by `torch.func.vmap` over `torch.func.functional_call` on one template
  module (built once per process); each copy its own batch (B rows, padded rows ignored), its loss
  its own; the sum of the K losses is differentiated, so a copy's gradient is its loss's alone.
- Dropout: every `nn.Dropout` of the template replaced by `CopyDropout`, whose noise comes from the
  copy's own `torch.Generator` (`copy_noise`, a custom op whose vmap rule draws each copy's noise
  from its generator in turn): a copy's masks are the ones a lone copy would draw from the same
  generator, whatever its batch-mates. The noise is `F.dropout`'s (on the CPU bernoulli(1 - p) /
  (1 - p), times the input; on CUDA its fused kernel's on ones), so a copy draws the masks of
  `official_ttt.train_run` with the global generator seeded alike (on CUDA for an input laid out
  as the lone one's; checked only where a GPU is lent). The hybrid block's attention dropout (inside SDPA) is off.
- The optimiser: AdamW (weight decay 0) per copy, written out in torch's single-tensor order
  (`_single_tensor_adam`), with each copy's own step count and learning rate; the gradient norm
  clipped per copy (the norm over that copy's gradients only).
- A copy that is not stepping (no task, or its batch-mates still training) keeps its weights and
  moments exactly (`torch.where`).

The arithmetic of a batched matmul may round differently from the lone one (tests/test_pertask_copies.py
measures it); nothing of one copy enters another's numbers.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from hrm_deeploop.data.canvas import IGNORE
from hrm_deeploop.models.loopvit import LoopViT
from hrm_deeploop.models.loopvit_config import NUM_COLORS
from hrm_deeploop.pertask.official_ttt import exact_rows

GENERATORS: list[torch.Generator] = []  # copy index -> its dropout generator (set by Copies)


@torch.library.custom_op("hrm_ttt::copy_noise", mutates_args=())
def copy_noise(like: Tensor, lane: Tensor, p: float) -> Tensor:
    """`F.dropout`'s noise of `like`'s shape from copy `lane`'s generator: on the CPU bernoulli(1 - p)
    / (1 - p), as its CPU kernel; on CUDA its fused kernel's (`native_dropout`: philox draws laid out
    by the kernel, the kept cells times 1 / (1 - p)), run on ones from the copy's generator."""
    gen = GENERATORS[int(lane)]
    if like.is_cuda:  # not testable without a GPU: tests/test_pertask_copies_gpu.py checks it on one
        return torch._fused_dropout(torch.ones_like(like, memory_format=torch.contiguous_format), 1 - p, gen)[0]
    return torch.empty_like(like).bernoulli_(1 - p, generator=gen).div_(1 - p)


@copy_noise.register_fake
def _(like: Tensor, lane: Tensor, p: float) -> Tensor:
    return torch.empty_like(like)


@copy_noise.register_vmap
def _(info, in_dims, like: Tensor, lane: Tensor, p: float):
    like_dim, lane_dim = in_dims[0], in_dims[1]
    assert lane_dim is not None, "copy_noise under vmap: the copies' indices must be batched"
    lanes = lane.movedim(lane_dim, 0).cpu()  # the indices read once (on CUDA one sync, not one a copy)
    rows = like.movedim(like_dim, 0) if like_dim is not None else like.expand(len(lanes), *like.shape)
    return torch.stack([copy_noise(rows[k], lanes[k], p) for k in range(len(lanes))]), 0


@torch.library.custom_op("hrm_ttt::lane_conv", mutates_args=())
def lane_conv(x: Tensor, weight: Tensor, bias: Tensor, stride: list[int], padding: list[int], groups: int) -> Tensor:
    """F.conv2d; under vmap, one convolution per copy (module docstring)."""
    return F.conv2d(x, weight, bias, stride, padding, 1, groups)


@lane_conv.register_fake
def _(x, weight, bias, stride, padding, groups):
    return F.conv2d(x, weight, bias, stride, padding, 1, groups)


@lane_conv.register_vmap
def _(info, in_dims, x, weight, bias, stride, padding, groups):
    k = info.batch_size
    at = [t.movedim(d, 0) if d is not None else t.expand(k, *t.shape) for t, d in zip((x, weight, bias), in_dims[:3])]
    return torch.stack([F.conv2d(at[0][i], at[1][i], at[2][i], stride, padding, 1, groups) for i in range(k)]), 0


class LaneConv2d(nn.Conv2d):
    """nn.Conv2d (bias, no dilation, zero padding) through `lane_conv`."""

    def forward(self, x: Tensor) -> Tensor:
        return lane_conv(x, self.weight, self.bias, list(self.stride), list(self.padding), self.groups)


@torch.library.custom_op("hrm_ttt::lane_layer_norm", mutates_args=())
def lane_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """F.layer_norm over the last dimension; under vmap, one per copy (module docstring)."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)


@lane_layer_norm.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x)


@lane_layer_norm.register_vmap
def _(info, in_dims, x, weight, bias, eps):
    k = info.batch_size
    at = [t.movedim(d, 0) if d is not None else t.expand(k, *t.shape) for t, d in zip((x, weight, bias), in_dims[:3])]
    return torch.stack([F.layer_norm(at[0][i], at[1][i].shape, at[1][i], at[2][i], eps) for i in range(k)]), 0


class LaneLayerNorm(nn.LayerNorm):
    """nn.LayerNorm (affine, over the last dimension) through `lane_layer_norm`."""

    def forward(self, x: Tensor) -> Tensor:
        return lane_layer_norm(x, self.weight, self.bias, self.eps)


@torch.library.custom_op("hrm_ttt::lane_linear", mutates_args=())
def lane_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """F.linear; under vmap, one per copy (LoopViT's head, the reasoners' q head: their inputs are
    strided slices, whose batched weight gradient sums in another order than the lone one's)."""
    return F.linear(x, weight, bias)


@lane_linear.register_fake
def _(x, weight, bias):
    return F.linear(x, weight, bias)


@lane_linear.register_vmap
def _(info, in_dims, x, weight, bias):
    k = info.batch_size
    at = [None if t is None else t.movedim(d, 0) if d is not None else t.expand(k, *t.shape)
          for t, d in zip((x, weight, bias), in_dims)]
    return torch.stack([F.linear(at[0][i], at[1][i], None if at[2] is None else at[2][i]) for i in range(k)]), 0


@torch.library.custom_op("hrm_ttt::lane_cross_entropy", mutates_args=())
def lane_cross_entropy(logits: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    """F.cross_entropy (mean over the pixels not ignored); under vmap, one per copy."""
    return F.cross_entropy(logits, target, ignore_index=ignore_index)


@lane_cross_entropy.register_fake
def _(logits, target, ignore_index):
    return logits.new_empty(())


@lane_cross_entropy.register_vmap
def _(info, in_dims, logits, target, ignore_index):
    k = info.batch_size
    at = [t.movedim(d, 0) if d is not None else t.expand(k, *t.shape) for t, d in zip((logits, target), in_dims[:2])]
    return torch.stack([F.cross_entropy(at[0][i], at[1][i], ignore_index=ignore_index) for i in range(k)]), 0


class CopyDropout(nn.Module):
    """nn.Dropout whose noise is the current copy's (`lane`, set before each forward)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.lane: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        return x * copy_noise(x.detach(), self.lane, self.p)


def template_of(model: LoopViT) -> tuple[LoopViT, list[CopyDropout]]:
    """A copy of `model` with every nn.Dropout a CopyDropout, every nn.Conv2d and nn.LayerNorm
    through its per-copy op, SDPA's
    dropout off."""
    t = copy.deepcopy(model)
    drops: list[CopyDropout] = []
    for name, m in list(t.named_modules()):
        if type(m) is nn.Conv2d:
            assert m.bias is not None and m.dilation == (1, 1) and m.padding_mode == "zeros", f"{name}: not a lane conv"
            m.__class__ = LaneConv2d
        if name == "head":
            m.forward = lambda x, m=m: lane_linear(x, m.weight, m.bias)
        if type(m) is nn.LayerNorm:
            assert m.elementwise_affine and m.bias is not None and len(m.normalized_shape) == 1, f"{name}: not a lane norm"
            m.__class__ = LaneLayerNorm
        for child, sub in list(m.named_children()):
            if isinstance(sub, nn.Dropout):
                d = CopyDropout(sub.p)
                setattr(m, child, d)
                drops.append(d)
        if hasattr(m, "explicit") and not m.explicit:
            m.dropout = 0.0  # the hybrid's attention dropout lives inside SDPA: not drawn per copy
    return t, drops


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def activation_bytes(model: LoopViT, batch: int) -> int:
    """A rough upper bound of what one copy's forward keeps for its backward at `batch` rows (fp32):
    per block pass the residual stream, qkv, attention scores and the MLP's hidden units."""
    c = model.cfg
    L = 1 + c.grid_size ** 2
    per_pass = L * (12 * c.hidden_size + 3 * c.mlp_dim) + 3 * c.num_heads * L * L
    head = c.image_size ** 2 * NUM_COLORS * 3
    return 4 * batch * (c.num_blocks * c.num_loops * per_pass + head)


def bytes_per_copy(model: LoopViT, batch: int) -> int:
    """The estimate (where the peak cannot be measured, `sizing`): weights, gradients and two AdamW
    moments, and the forward's activations."""
    return 4 * param_bytes(model) + activation_bytes(model, batch)


def probe_step(start: LoopViT, k: int, device: torch.device, batch: int, lr: float) -> None:
    """One step of `k` fresh copies of `start` on made-up full batches of `batch` rows at its canvas:
    what `sizing.measure` reads the peak of. The copies are its own (the module's GENERATORS are set
    anew by the run's `Copies`); `start` and torch's global generator are not touched."""
    S = start.cfg.image_size
    rows = {"canvas": torch.zeros(batch, S, S, dtype=torch.long), "task_ids": torch.zeros(batch, dtype=torch.long),
            "mask": torch.ones(batch, S, S, dtype=torch.long), "target": torch.zeros(batch, S, S, dtype=torch.long)}
    Copies(start, k, device, lr).step([rows] * k, [lr] * k)


@contextlib.contextmanager
def sdpa_lane_by_lane() -> Iterator[None]:
    """CPU SDPA (LoopViT's hybrid block) has no vmap batching rule, so vmap runs it copy by copy, as
    meant here: torch's warning on every call ("There is a performance drop ... file us an issue")
    is not the user's to read, and is kept off their stderr (as `reasoner_copies` does)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented "
                                "the batching rule for aten::_scaled_dot_product")
        yield


KEYS = ("canvas", "task_ids", "mask", "target")  # a LoopViT batch's tensors, in the vmapped loss's order


def lane_groups(params: dict[str, Tensor], lanes: Tensor, batches: dict[int, dict], keys: tuple[str, ...] = KEYS
                ) -> Iterator[tuple[list[int], dict[str, Tensor], Tensor, list[Tensor]]]:
    """The lanes with a batch, grouped by its number of rows (a lane's rows are never padded: its
    arithmetic is a lone copy's), group by group in the order of `batches`: (the lanes' indices, their
    stacked parameters (all K as they are when every lane is in the group), their lane ids, their
    batches' `keys` stacked, (len(idx), B, ...))."""
    groups: dict[int, list[int]] = {}
    for i, b in batches.items():
        groups.setdefault(len(b[keys[0]]), []).append(i)
    for idx in groups.values():
        if len(idx) == len(lanes):
            sub, ids = params, lanes
        else:
            at = torch.tensor(idx, device=lanes.device)
            sub, ids = {n: p.index_select(0, at) for n, p in params.items()}, lanes[at]
        yield idx, sub, ids, [torch.stack([batches[i][key] for i in idx]).to(lanes.device) for key in keys]


class Copies:
    """K stacked copies of `start` (a LoopViT) with per-copy AdamW state (module docstring)."""

    def __init__(self, start: LoopViT, k: int, device: torch.device, lr: float, clip: float = 1.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.k, self.device, self.lr, self.clip, self.betas, self.eps = k, device, lr, clip, betas, eps
        self.template, self.drops = template_of(start)
        self.template.to(device).train()
        self.start = {n: p.detach().to(device) for n, p in self.template.named_parameters()}
        self.buffers = {n: b.to(device) for n, b in self.template.named_buffers()}
        self.params = {n: p.unsqueeze(0).repeat(k, *[1] * p.dim()).requires_grad_(True) for n, p in self.start.items()}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.steps = [0] * k
        self.exact: list[int | None] = [None] * k  # the last step's exact rows per copy (None: not stepped)
        self.preds: list[Tensor | None] = [None] * k  # and its argmax canvases
        self.lanes = torch.arange(k, device=device)
        GENERATORS[:] = [torch.Generator(device=device) for _ in range(k)]
        self._loss = vmap(self._one_loss, in_dims=(0, 0, 0, 0, 0, 0), randomness="error")

    def reset(self, lane: int) -> None:
        """Copy `lane` back to the start: weights, moments, step count (its generator goes on)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p[lane].copy_(self.start[n])
                self.exp_avg[n][lane].zero_()
                self.exp_avg_sq[n][lane].zero_()
        self.steps[lane] = 0

    def seed(self, lane: int, seed: int) -> None:
        """Copy `lane`'s dropout generator seeded (a new task)."""
        GENERATORS[lane].manual_seed(seed)

    def _one_loss(self, params, lane, canvas, task_ids, mask, target) -> Tensor:
        for d in self.drops:
            d.lane = lane
        logits = functional_call(self.template, (params, self.buffers), (canvas, task_ids, mask)).logits  # (B,S,S,C)
        pred = logits.detach().argmax(-1)
        return (lane_cross_entropy(logits.reshape(-1, NUM_COLORS), target.reshape(-1), IGNORE),
                exact_rows(logits.detach(), target), pred)

    def step(self, batches: list[dict | None], lrs: list[float]) -> list[float | None]:
        """One step of every copy with a batch (None: that copy holds still), at its learning rate;
        returns each stepping copy's loss (and sets `exact`: each stepping copy's rows its logits got
        exactly right, `official_ttt.exact_rows`; `preds`: its argmax canvases). Copies whose batches have the same number of rows
        run in one vmap (a copy's rows are never padded: its arithmetic is a lone copy's)."""
        active = [b is not None for b in batches]
        assert any(active), "Copies.step: no copy has a batch"
        for p in self.params.values():
            p.grad = None
        losses: list[float | None] = [None] * self.k
        self.exact: list[int | None] = [None] * self.k
        self.preds: list[Tensor | None] = [None] * self.k
        total = None
        with sdpa_lane_by_lane():
            for idx, params, lanes, stacked in lane_groups(self.params, self.lanes,
                                                           {i: b for i, b in enumerate(batches) if b is not None}):
                got, exact, pred = self._loss(params, lanes, *stacked)  # (len(idx),) each; pred (len(idx), B, S, S)
                total = got.sum() if total is None else total + got.sum()
                for i, x, n, p in zip(idx, got.detach().cpu().tolist(), exact.cpu().tolist(), pred):
                    losses[i], self.exact[i], self.preds[i] = x, n, p
            total.backward()
        with torch.no_grad():
            self._clip()
            self._adamw(active, lrs)
        return losses

    def _clip(self) -> None:
        """torch.nn.utils.clip_grad_norm_ per copy: the norm of the per-parameter norms."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]  # the exit gate has none
        # each copy's norms as the lone clip computes them (a reduction over a (K, n) tensor's rows
        # sums in another order than one over a lone tensor)
        norms = torch._foreach_norm([g[k] for k in range(self.k) for g in grads], 2)
        total = torch.stack([torch.linalg.vector_norm(torch.stack(norms[k * len(grads):(k + 1) * len(grads)]), 2)
                             for k in range(self.k)])  # (K,)
        coef = torch.clamp(self.clip / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))

    def _adamw(self, active: list[bool], lrs: list[float]) -> None:
        """torch's single-tensor AdamW (weight decay 0), per copy: the copies that step advance their
        step count; the others keep weights and moments."""
        b1, b2 = self.betas
        for k, a in enumerate(active):
            self.steps[k] += int(a)
        steps = [max(s, 1) for s in self.steps]
        neg_step = [-(lr / (1 - b1 ** s)) for lr, s in zip(lrs, steps)]
        bc2_sqrt = [math.sqrt(1 - b2 ** s) for s in steps]
        on = torch.tensor(active, device=self.device)
        ns = torch.tensor(neg_step, dtype=torch.float32, device=self.device)
        bs = torch.tensor(bc2_sqrt, dtype=torch.float32, device=self.device)
        for n, p in self.params.items():
            if p.grad is None:  # as torch's AdamW: a parameter without a gradient is not stepped
                continue
            shape = (-1, *[1] * (p.dim() - 1))
            g, m, v = p.grad, self.exp_avg[n], self.exp_avg_sq[n]
            m_new = m.lerp(g, 1 - b1)
            v_new = v.mul(b2).addcmul_(g, g, value=1 - b2)
            denom = (v_new.sqrt() / bs.view(shape)).add_(self.eps)
            p_new = p.detach() + (ns.view(shape) * m_new) / denom
            keep = on.view(shape)
            m.copy_(torch.where(keep, m_new, m))
            v.copy_(torch.where(keep, v_new, v))
            p.detach().copy_(torch.where(keep, p_new, p.detach()))

    def solo(self, lane: int, into: LoopViT) -> LoopViT:
        """Copy `lane`'s weights into `into` (a LoopViT of the start's shape), returned."""
        with torch.no_grad():
            for n, p in into.named_parameters():
                p.copy_(self.params[n][lane])
        return into
