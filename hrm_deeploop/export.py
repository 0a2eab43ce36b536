"""`hrm-deeploop export`: a checkpoint of ours (HRM, TRM, URM, looped GPT) to a folder in the Hub's conventions.

The folder (`hub` module: its format and reader):
- `model.safetensors`: the weights the evaluators use (a reasoner's weight average when it has one
  and `ema=true`), loaded through the same loaders as `evaluate` / `eval-gpt` so that nothing
  about the model is re-derived here;
- `config.json`: `format`, `model` and `scaling` (what rebuilds the model), `step`, `weights`
  (raw | ema), `code_version`, `puzzle_names` (adapted reasoners) and the run's whole resolved
  `config`;
- `tokenizer_config.json` (looped GPT: the tokenizer id, its vocabulary size and end-of-text id) or
  `dataset.json` + `identifiers.json` (reasoners: the training split's metadata and puzzle names,
  copied from `data_dir` when it is readable here);
- `README.md`: a model card (Hub front matter; model, data, training config, the figures of the
  run's summary.json, the command that reproduces the run, how to use and upload it).

`checkpoint=FOLDER` (or `hf://OWNER/NAME` once uploaded) loads it back wherever a checkpoint is
taken, with bit-identical outputs. The folder is written beside the target and renamed into place;
overwrite=true replaces only a folder that holds a `config.json` (an earlier export).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrm_deeploop import hub
from hrm_deeploop.errors import ConfigError, UserError


@dataclass
class ExportConfig:
    """`hrm-deeploop export`: a checkpoint (run folder, step_N.pt, hf://...) to a Hub-style folder."""

    checkpoint: str | None = None  # a run folder, a checkpoints/step_N.pt file, or hf://OWNER/NAME[@REV][/PATH]
    output_dir: str | None = None  # the folder to write (model.safetensors, config.json, README.md, ...)
    ema: bool = True  # reasoners: export the weight average when the checkpoint holds one
    repo_id: str | None = None  # OWNER/NAME named in the model card's usage lines (default: a placeholder)
    overwrite: bool = False  # replace an earlier export (a folder holding config.json)


def _load(path: Path, ema: bool) -> tuple[Any, dict[str, Any], str, dict[str, Any]]:
    """The model as the evaluators load it, its train state, which weights, the summary figures."""
    from hrm_deeploop import checkpoint as ckpt  # torch: imported here, so `export --help` starts without it

    state = ckpt.load(path, map_location="cpu")
    if not isinstance(state, dict) or state.get("format") != ckpt.FORMAT or "config" not in state:
        raise UserError(f"checkpoint '{path}' is not an hrm-deeploop train state (official HRM/TRM checkpoints "
                        "are loaded as they are; export is for our own runs)")
    from eval.checkpoints import load_model

    loaded = load_model(path, "cpu", ema=ema)
    model, which = loaded.model, loaded.weights
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    summary: dict[str, Any] = {}
    if run_dir is not None and (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except ValueError:
            summary = {}
    return model, state, which, summary


def reproduce_command(config: dict[str, Any]) -> str:
    """The command line that trains this run again: the trainer, model and scaling groups, every setting."""
    from hrm_deeploop.training.sweep import overrides

    values = json.loads(json.dumps(config))  # a deep copy of plain values
    model = dict(values.pop("model"))
    name = model.pop("name")
    values.pop("resume", None)
    trainer = "train-gpt" if name == "gpt" else "train"
    parts = [f"model={name}", *overrides("model", model), *overrides("scaling", values.pop("scaling", {})),
             *overrides("", values)]
    return "hrm-deeploop " + trainer + " \\\n  " + " \\\n  ".join(f'"{p}"' if any(c in p for c in " '*[]") else p
                                                              for p in parts)


def _card(meta: dict[str, Any], summary: dict[str, Any], files: list[str], repo_id: str, source: str) -> str:
    import yaml

    model, scaling, config = meta["model"], meta["scaling"], meta["config"]
    gpt = model["name"] == "gpt"
    data = (config.get("data") or {}) if gpt else {"data_dir": config.get("data_dir")}
    figures = {k: summary[k] for k in ("status", "steps", "final_train_loss", "final_val_loss", "last_eval",
                                       "wall_time_s", "params", "unigram_entropy") if summary.get(k) is not None}
    use = (f"hrm-deeploop eval-gpt checkpoint=hf://{repo_id} data=VAL_SHARDS output_dir=OUT\n"
           f"hrm-deeploop generate checkpoint=hf://{repo_id} prompt='...'" if gpt else
           f"hrm-deeploop evaluate checkpoint=hf://{repo_id} data_dir=DATASET output_dir=OUT")
    front = {"library_name": "hrm-deeploop", "license": "apache-2.0",
             "tags": ["hrm-deeploop", model["name"], f"scaling-{scaling.get('scheme')}"]}
    return "\n".join([
        "---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
        f"# {model['name'].upper()} ({scaling.get('scheme')} scaling), step {meta['step']}", "",
        f"Exported by `hrm-deeploop export` ({meta['code_version']}) from `{source}`; weights: {meta['weights']}"
        + (" (the weight average)" if meta["weights"] == "ema" else "") + ".", "",
        "## Files", "", *[f"- `{f}`" for f in files], "",
        "## Model", "", "```yaml", yaml.safe_dump({"model": model, "scaling": scaling}, sort_keys=False).strip(),
        "```", "",
        "## Data", "", "```yaml", yaml.safe_dump(data, sort_keys=False).strip(), "```", "",
        "## Figures measured (the run's summary.json)", "",
        *(["```json", json.dumps(figures, indent=2), "```"] if figures else
          ["No summary.json was found beside the checkpoint."]), "",
        "## Training config", "", "```yaml", yaml.safe_dump(config, sort_keys=False).strip(), "```", "",
        "## Reproduce", "", "```bash", reproduce_command(config), "```", "",
        "## Use", "", "```bash", "pip install 'hrm-deeploop[hub]'", use, "```", "",
        "## Upload", "", "```bash", f"hf upload {repo_id} THIS_FOLDER .", "```", ""])


def export(opts: ExportConfig) -> Path:
    from arc_data.fsio import atomic_dir, checked_output_dir
    from hrm_deeploop import checkpoint as ckpt

    if not opts.checkpoint:
        raise ConfigError("checkpoint= is required (a run folder, a step_N.pt file or hf://OWNER/NAME)")
    if not opts.output_dir:
        raise ConfigError("output_dir= is required (the folder to write)")
    path = ckpt.resolve(opts.checkpoint)
    target = checked_output_dir(opts.output_dir, opts.overwrite, [str(path.parent)], marker=hub.CONFIG,
                                writer="hrm-deeploop export")
    model, state, which, summary = _load(path, opts.ema)
    config = state["config"]
    model_cfg, scaling = dict(config["model"]), dict(config.get("scaling") or {})
    meta = {"format": hub.EXPORT_FORMAT, "model": model_cfg, "scaling": scaling, "step": state.get("step"),
            "weights": which, "code_version": ckpt.code_version(), "source_code_version": state.get("code_version"),
            "puzzle_names": state.get("puzzle_names"),
            "config": {k: v for k, v in config.items() if k not in ("model", "scaling")}}
    files = [hub.WEIGHTS, hub.CONFIG, "README.md"]
    with atomic_dir(target) as tmp:
        hub.write_weights(tmp / hub.WEIGHTS, model.state_dict(), {"format": "pt", "step": str(meta["step"])})
        if model_cfg["name"] == "gpt":
            from hrm_deeploop.text.tokenizer import get_tokenizer

            tid = (config.get("data") or {}).get("tokenizer_id") or "gpt2"
            tok = get_tokenizer(tid)
            (tmp / "tokenizer_config.json").write_text(json.dumps(
                {"tokenizer_id": tid, "n_vocab": tok.n_vocab, "eot_token": tok.eot_token}, indent=2) + "\n")
            files.append("tokenizer_config.json")
        else:
            files += _copy_dataset_metadata(config.get("data_dir"), tmp)
        (tmp / hub.CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / "README.md").write_text(_card({**meta, "config": config}, summary, files,
                                             opts.repo_id or "OWNER/NAME", str(path)))
    return target.path


def _copy_dataset_metadata(data_dir: str | None, out: Path) -> list[str]:
    """The training split's dataset.json and the identifiers.json of a puzzle dataset, when readable here."""
    from arc_data.format import IDENTIFIERS_FILE, META_FILE

    if not data_dir:
        return []
    copied = []
    for src in (Path(data_dir) / "train" / META_FILE, Path(data_dir) / IDENTIFIERS_FILE):
        if src.is_file():
            shutil.copyfile(src, out / src.name)
            copied.append(src.name)
    return copied


def run(opts: ExportConfig) -> int:
    out = export(opts)
    print(f"export: wrote {out} ({', '.join(sorted(p.name for p in out.iterdir()))}); load it with checkpoint={out}")
    return 0
