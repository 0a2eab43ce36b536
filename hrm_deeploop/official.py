"""Interop with the official checkpoints: HRM's (sapientinc/HRM) and TRM's (the ARC Prize
verification release) `step_N` state dicts with the `all_config.yaml` beside them.

- `is_official`, `read_official_arch`, `official_kind`: recognise a file and read its arch section;
- `official_model_fields` / `official_trm_model_fields`: HRMConfig / TRMConfig fields from that
  section and the weights (unknown fields raise);
- `official_key_map` / `official_trm_key_map`: their state-dict keys -> ours, spelled out so that an
  unknown or missing key fails loudly; `official_state_dict` applies a map.

`hrm_deeploop.loading` loads through these; `checkpoint.py` owns our own train-state files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hrm_deeploop.checkpoint import strip_prefixes
from hrm_deeploop.errors import UserError

# ---- official HRM checkpoints (sapientinc/HRM `step_N` + `all_config.yaml`) -----------------------

OFFICIAL_PREFIX = "model.inner."  # ACTLossHead.model (ACT wrapper) .inner (the reasoning model)
OFFICIAL_BLOCK_WEIGHTS = ("self_attn.qkv_proj.weight", "self_attn.o_proj.weight",
                          "mlp.gate_up_proj.weight", "mlp.down_proj.weight")
# arch field in all_config.yaml -> HRMConfig field. Every field HRM's arch section can carry is
# listed: honoured ones map to a field; `name`, `loss.name` are checked; the ones pretrain fills
# in at run time (batch_size, vocab_size, seq_len, num_puzzle_identifiers, causal) are checked
# against the weights or the dataset where they appear.
OFFICIAL_ARCH_FIELDS = {
    "H_cycles": "num_h_cycles", "L_cycles": "num_l_cycles", "H_layers": "num_h_layers",
    "L_layers": "num_l_layers", "hidden_size": "hidden_size", "num_heads": "num_heads",
    "expansion": "expansion", "puzzle_emb_ndim": "puzzle_emb_ndim", "pos_encodings": "pos_encodings",
    "rope_theta": "rope_theta", "rms_norm_eps": "rms_norm_eps", "halt_max_steps": "halt_max_steps",
    "halt_exploration_prob": "halt_exploration_prob", "forward_dtype": "forward_dtype",
}
OFFICIAL_RUNTIME_FIELDS = ("batch_size", "vocab_size", "seq_len", "num_puzzle_identifiers", "causal")


def official_key_map(num_h_layers: int, num_l_layers: int, pos_encodings: str, puzzle_emb: bool) -> dict[str, str]:
    """Official HRM state-dict key (after removing `_orig_mod.`) -> hrm_deeploop `HRM` key.

    HRM's `model.state_dict()` is the loss head's; its persistent entries are the ones below
    (RoPE tables and the puzzle embedding's local buffers are non-persistent). Our module names
    are HRM's, so the map only drops the `model.inner.` prefix, but it is spelled out so that an
    unknown or missing key fails loudly instead of loading half a model.
    """
    native = ["embed_tokens.embedding_weight", "lm_head.weight", "q_head.weight", "q_head.bias", "H_init", "L_init"]
    if puzzle_emb:
        native.append("puzzle_emb.weights")
    if pos_encodings == "learned":
        native.append("embed_pos.embedding_weight")
    for level, n in (("H_level", num_h_layers), ("L_level", num_l_layers)):
        native += [f"{level}.layers.{i}.{w}" for i in range(n) for w in OFFICIAL_BLOCK_WEIGHTS]
    return {OFFICIAL_PREFIX + k: k for k in native}


def is_official(state: dict[str, Any]) -> bool:
    """An official checkpoint is a bare state dict with `[_orig_mod.]model.inner.` keys."""
    return "format" not in state and any(
        isinstance(k, str) and strip_prefixes({k: None}, ("_orig_mod.",)).popitem()[0].startswith(OFFICIAL_PREFIX)
        for k in state)


def read_official_arch(ckpt_path: str | Path) -> dict[str, Any]:
    """The resolved `arch` section of the `all_config.yaml` next to an official `step_N` file."""
    from omegaconf import OmegaConf  # lazy: omegaconf only to read an official checkpoint's config

    cfg_path = Path(ckpt_path).parent / "all_config.yaml"
    if not cfg_path.is_file():
        raise UserError(f"official HRM/TRM checkpoint '{ckpt_path}' needs '{cfg_path}' beside it (their pretrain "
                        "writes it into the checkpoint folder)")
    try:
        cfg = OmegaConf.to_container(OmegaConf.load(cfg_path), resolve=True)
    except Exception as e:  # yaml and omegaconf raise many types on a broken file
        raise UserError(f"cannot read '{cfg_path}': {type(e).__name__}: {e}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("arch"), dict):
        raise UserError(f"'{cfg_path}' has no 'arch' section")
    return cfg["arch"]


def official_model_fields(arch: dict[str, Any], state: dict[str, Any], where: str) -> dict[str, Any]:
    """HRMConfig fields from an official `arch` section and its weights. Unknown fields raise."""
    name = str(arch.get("name", "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"))
    if "hrm_act_v1" not in name:
        raise UserError(f"{where}: arch.name='{name}' is not HRM's hrm_act_v1 model")
    fields: dict[str, Any] = {}
    for key, value in arch.items():
        if key in ("name", "loss") or key in OFFICIAL_RUNTIME_FIELDS:
            continue
        if key not in OFFICIAL_ARCH_FIELDS:
            raise UserError(f"{where}: unknown arch field '{key}' (known: {sorted(OFFICIAL_ARCH_FIELDS)})")
        fields[OFFICIAL_ARCH_FIELDS[key]] = value
    sd, emb = _official_common_fields(arch, state, where, "HRM", fields)
    pos = sd.get(OFFICIAL_PREFIX + "embed_pos.embedding_weight")
    if pos is not None:
        hidden = int(fields.get("hidden_size", emb.shape[1]))
        ndim = fields.get("puzzle_emb_ndim") if fields.get("puzzle_emb_ndim") is not None else hidden
        fields["seq_len"] = int(pos.shape[0]) - (-(int(ndim) // -hidden))
    _check_arch_against_weights(arch, fields, where)
    return fields


# ---- official TRM checkpoints (the ARC Prize verification release) --------------------------------
# arcprize/trm_arc_prize_verification on Hugging Face holds one folder per model (arc_v1_public/,
# arc_v2_public/), each with `step_<N>` (TRM pretrain.py's `torch.save(model.state_dict())` of the
# compiled ACTLossHead, saved while evaluating with ema=True, so the parameters are the weight
# average and the puzzle table the current rows), `all_config.yaml` (its PretrainConfig, arch
# section included) and copies of trm.py and losses.py. 15 keys at the ARC config:
# `_orig_mod.model.inner.` + H_init, L_init (forward dtype, bf16), embed_tokens.embedding_weight,
# lm_head.weight, q_head.weight, q_head.bias, puzzle_emb.weights and four matrices per block of
# `L_level` (the one network, our `net`).

OFFICIAL_TRM_NAME = "recursive_reasoning.trm@"
# arch field in all_config.yaml -> TRMConfig field (value transform); `H_layers` is unused by TRM.
OFFICIAL_TRM_ARCH_FIELDS: dict[str, tuple[str, Any]] = {
    "H_cycles": ("num_h_cycles", int), "L_cycles": ("num_l_cycles", int), "L_layers": ("num_layers", int),
    "hidden_size": ("hidden_size", int), "num_heads": ("num_heads", int), "expansion": ("expansion", float),
    "puzzle_emb_ndim": ("puzzle_emb_ndim", int), "puzzle_emb_len": ("puzzle_emb_len", int),
    "pos_encodings": ("pos_encodings", str), "rope_theta": ("rope_theta", float),
    "rms_norm_eps": ("rms_norm_eps", float), "halt_max_steps": ("halt_max_steps", int),
    "halt_exploration_prob": ("halt_exploration_prob", float), "forward_dtype": ("forward_dtype", str),
    "mlp_t": ("mixer", lambda v: "mlp" if v else "attention"),
    "no_ACT_continue": ("act_continue", lambda v: not v),
}
OFFICIAL_TRM_IGNORED_FIELDS = ("H_layers",)  # TRM's config: "H_layers: int # ignored"
# Fields TRM's config requires (no default there): a checkpoint whose arch lacks one is refused.
OFFICIAL_TRM_REQUIRED = ("H_cycles", "L_cycles", "L_layers", "hidden_size", "expansion", "num_heads",
                         "pos_encodings", "halt_max_steps", "halt_exploration_prob")


def official_kind(arch: dict[str, Any], where: str) -> str:
    """'hrm' or 'trm' from an official all_config.yaml's arch.name."""
    name = str(arch.get("name", "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"))
    if "hrm_act_v1" in name:
        return "hrm"
    if name.startswith(OFFICIAL_TRM_NAME):
        return "trm"
    raise UserError(f"{where}: arch.name='{name}' is neither HRM's hrm_act_v1 nor TRM's {OFFICIAL_TRM_NAME}... model")


def official_trm_key_map(num_layers: int, pos_encodings: str, puzzle_emb: bool, mixer: str) -> dict[str, str]:
    """Official TRM state-dict key (after removing `_orig_mod.`) -> hrm_deeploop `TRM` key.

    The reference's one network is `L_level` (it updates z_H as well); ours is `net`. The other
    names are the reference's. RoPE tables and the puzzle embedding's local buffers are not saved.
    """
    keys = {k: k for k in ("embed_tokens.embedding_weight", "lm_head.weight", "q_head.weight", "q_head.bias",
                           "H_init", "L_init")}
    if puzzle_emb:
        keys["puzzle_emb.weights"] = "puzzle_emb.weights"
    if pos_encodings == "learned":
        keys["embed_pos.embedding_weight"] = "embed_pos.embedding_weight"
    mix = ("mlp_t.gate_up_proj.weight", "mlp_t.down_proj.weight") if mixer == "mlp" else \
        ("self_attn.qkv_proj.weight", "self_attn.o_proj.weight")
    for i in range(num_layers):
        for w in (*mix, "mlp.gate_up_proj.weight", "mlp.down_proj.weight"):
            keys[f"L_level.layers.{i}.{w}"] = f"net.layers.{i}.{w}"
    return {OFFICIAL_PREFIX + k: v for k, v in keys.items()}


def official_trm_model_fields(arch: dict[str, Any], state: dict[str, Any], where: str) -> dict[str, Any]:
    """TRMConfig fields from an official TRM `arch` section and its weights. Unknown fields raise;
    so do fields TRM requires; the others take TRM's defaults (puzzle_emb_ndim 0 among them)."""
    missing = [k for k in OFFICIAL_TRM_REQUIRED if k not in arch]
    if missing:
        raise UserError(f"{where}: the arch section lacks {missing} (TRM requires them)")
    fields: dict[str, Any] = {"puzzle_emb_ndim": 0}
    for key, value in arch.items():
        if key in ("name", "loss") or key in OFFICIAL_RUNTIME_FIELDS or key in OFFICIAL_TRM_IGNORED_FIELDS:
            continue
        if key not in OFFICIAL_TRM_ARCH_FIELDS:
            raise UserError(f"{where}: unknown arch field '{key}' (known: {sorted(OFFICIAL_TRM_ARCH_FIELDS)})")
        field, convert = OFFICIAL_TRM_ARCH_FIELDS[key]
        fields[field] = convert(value)
    sd, emb = _official_common_fields(arch, state, where, "TRM", fields)
    mlp_t = sd.get(OFFICIAL_PREFIX + "L_level.layers.0.mlp_t.gate_up_proj.weight")
    pos = sd.get(OFFICIAL_PREFIX + "embed_pos.embedding_weight")
    total = int(mlp_t.shape[1]) if mlp_t is not None else int(pos.shape[0]) if pos is not None else None
    if total is not None:  # the state length P + S is in the weights; S follows from P
        hidden = int(fields.get("hidden_size", emb.shape[1]))
        ndim = int(fields["puzzle_emb_ndim"])
        p_len = 0 if ndim == 0 else (int(fields.get("puzzle_emb_len", 16)) or -(ndim // -hidden))
        fields["seq_len"] = total - p_len
    _check_arch_against_weights(arch, fields, where)
    return fields


def _official_common_fields(arch: dict[str, Any], state: dict[str, Any], where: str, model: str,
                            fields: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """What HRM's and TRM's official checkpoints share: the `arch.loss` section, no causal
    attention, and the fields the weights fix (vocab_size, num_puzzle_identifiers). Fills `fields`;
    returns the prefix-stripped state dict and the token embedding."""
    for key, value in (arch.get("loss") or {}).items():
        if key == "name":
            if "ACTLossHead" not in str(value):
                raise UserError(f"{where}: arch.loss.name='{value}' is not {model}'s ACTLossHead")
        elif key == "loss_type":
            fields["loss_type"] = value
        else:
            raise UserError(f"{where}: unknown arch.loss field '{key}'")
    if arch.get("causal"):
        raise UserError(f"{where}: arch.causal=true is not supported ({model}'s attention is non-causal)")
    sd = strip_prefixes(state, ("_orig_mod.",))
    emb = sd.get(OFFICIAL_PREFIX + "embed_tokens.embedding_weight")
    if emb is None:
        raise UserError(f"{where}: missing key '{OFFICIAL_PREFIX}embed_tokens.embedding_weight'")
    fields["vocab_size"] = int(emb.shape[0])
    pe = sd.get(OFFICIAL_PREFIX + "puzzle_emb.weights")
    fields["num_puzzle_identifiers"] = int(pe.shape[0]) if pe is not None else 1
    if pe is None and fields.get("puzzle_emb_ndim") != 0:
        raise UserError(f"{where}: missing key '{OFFICIAL_PREFIX}puzzle_emb.weights' (arch.puzzle_emb_ndim is not 0)")
    return sd, emb


def _check_arch_against_weights(arch: dict[str, Any], fields: dict[str, Any], where: str) -> None:
    for key in ("vocab_size", "seq_len", "num_puzzle_identifiers"):
        if key in arch and key in fields and int(arch[key]) != fields[key]:
            raise UserError(f"{where}: arch.{key}={arch[key]} but the weights give {fields[key]}")


def official_state_dict(state: dict[str, Any], key_map: dict[str, str], where: str) -> dict[str, Any]:
    """Rename an official state dict to our keys; unknown or missing keys raise naming them."""
    sd = strip_prefixes(state, ("_orig_mod.",))
    unknown = sorted(set(sd) - set(key_map))
    missing = sorted(set(key_map) - set(sd))
    if unknown:
        raise UserError(f"{where}: unknown key(s) in the official checkpoint: {unknown[:5]}"
                        + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
    if missing:
        raise UserError(f"{where}: key(s) missing from the official checkpoint: {missing[:5]}"
                        + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    return {key_map[k]: v for k, v in sd.items()}
