"""`hrm-deeploop export`: a checkpoint of ours, of any family (`hrm_deeploop.families`: HRM, TRM, URM,
LoopViT, the looped GPT), to a folder in the Hub's conventions.

The folder (`hub` module: its format and reader):
- `model.safetensors`: the weights the evaluators use (a reasoner's weight average when it has one
  and `ema=true`), loaded through the same loaders as `evaluate` / `eval-gpt` so that nothing
  about the model is re-derived here;
- `config.json`: `format`, `model` and `scaling` (what rebuilds the model), `step`, `weights`
  (raw | ema), `code_version`, `puzzle_names` (adapted reasoners) and the run's whole resolved
  `config`;
- what the family's entry says its export carries beside the weights (`Family.metadata`):
  `tokenizer_config.json` (the looped GPT: the tokenizer id, its vocabulary size and end-of-text id)
  or `dataset.json` + `identifiers.json` (the ARC families, reasoners and LoopViT: the training
  split's metadata and puzzle names, copied from the run's dataset, found as `_dataset_metadata`
  says, or an error);
- `README.md`: a model card (Hub front matter; what the model is, its data, the figures of the
  run's summary.json, how to use and upload it; the settings and the command that reproduces the
  run folded below).

Reproducible bytes: nothing written depends on where or when export runs (no path of the
exporting shell, no time), so two exports of one run are byte-identical and the Hub sees no new
revision; files are 0644 (under the usual umask), not the private modes of temporary files.
`checkpoint=FOLDER` (or `hf://OWNER/NAME` once uploaded; offline, `HRM_DEEPLOOP_HUB_DIR`, see
`hub`) loads it back wherever a checkpoint is taken, with bit-identical outputs. The folder is
written beside the target and renamed into place; overwrite=true replaces only a folder that holds
a `config.json` and nothing an export does not write (an earlier export; `_outputs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hrm_deeploop import hub
from hrm_deeploop.errors import ConfigError, UserError

TOKENIZER_FILE = "tokenizer_config.json"  # the looped GPT's export: its tokenizer id, vocabulary size, end-of-text id


@dataclass
class ExportConfig:
    """`hrm-deeploop export`: a checkpoint (run folder, step_N.pt, hf://...) to a Hub-style folder."""

    checkpoint: str | None = None  # a run folder, a checkpoints/step_N.pt file, or hf://OWNER/NAME[@REV][/PATH]
    output_dir: str | None = None  # the folder to write (model.safetensors, config.json, README.md, ...)
    ema: bool = True  # reasoners: export the weight average when the checkpoint holds one
    repo_id: str | None = None  # OWNER/NAME named in the model card's usage lines (default: a placeholder)
    data_dir: str | None = None  # reasoners: the training dataset, when the run's own data_dir is not found from here
    overwrite: bool = False  # replace an earlier export (a folder holding config.json and only what export writes)


def _load(path: Path, ema: bool) -> tuple[Any, dict[str, Any], str, dict[str, Any], Any]:
    """The model as the evaluators load it, its train state, which weights, the summary figures, its family."""
    from hrm_deeploop import checkpoint as ckpt  # lazy: keeps torch off `export --help`

    state = ckpt.load(path, map_location="cpu")
    if not isinstance(state, dict) or state.get("format") != ckpt.FORMAT or "config" not in state:
        raise UserError(f"checkpoint '{path}' is not an hrm-deeploop train state (official checkpoints are loaded "
                        "as they are; export is for our own runs)")
    from hrm_deeploop.loading import load_model  # lazy: keeps torch off `export --help`

    loaded = load_model(path, "cpu", ema=ema, command="export")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    summary: dict[str, Any] = {}
    if run_dir is not None and (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except ValueError:
            summary = {}
    return loaded.model, state, loaded.weights, summary, loaded.family


def reproduce_command(config: dict[str, Any]) -> str:
    """The command line that trains this run again: the trainer, model and scaling groups, every setting."""
    from hrm_deeploop.families import family  # lazy: `export --help` skips it
    from hrm_deeploop.training.sweep import overrides  # lazy: keeps omegaconf off `export --help`

    values = json.loads(json.dumps(config))  # a deep copy of plain values
    model = dict(values.pop("model"))
    name = model.pop("name")
    values.pop("resume", None)
    trainer = family(name).trainer
    parts = [f"model={name}", *overrides("model", model), *overrides("scaling", values.pop("scaling", {})),
             *overrides("", values)]
    return "hrm-deeploop " + trainer + " \\\n  " + " \\\n  ".join(f'"{p}"' if any(c in p for c in " '*[]") else p
                                                              for p in parts)


def _card(meta: dict[str, Any], summary: dict[str, Any], files: list[str], repo_id: str, dataset: dict[str, Any],
          fam: Any) -> str:
    """The model card: what the model is, its data, its measured figures and how to use it first;
    the settings (model, scaling, training config) and the reproducing command folded below."""
    model, scaling, config = meta["model"], meta["scaling"], meta["config"]
    scheme = scaling.get("scheme")
    params = summary.get("params")
    what = fam.describe(model, params)
    what += (f", {params:,} parameters" if isinstance(params, int) else "") + f", with {scheme} residual scaling, " \
        f"trained for {meta['step']} steps; weights: {meta['weights']}" + (
            " (the weight average)" if meta["weights"] == "ema" else "") + "."
    if fam.metadata == "tokenizer":
        data = config.get("data") or {}
        data_lines = [f"Token shards `{data.get('train')}` (validation `{data.get('val')}`), tokenizer "
                      f"`{data.get('tokenizer_id')}` (`tokenizer_config.json`)."]
    else:
        keys = ("task", "vocab_size", "seq_len", "num_puzzle_identifiers", "total_groups")
        shown = {k: dataset[k] for k in keys if k in dataset}
        data_lines = [f"The dataset `{Path(str(config.get('data_dir') or '?')).name}` as the training command named it "
                      "(its training split's `dataset.json` and its `identifiers.json` are in this folder, "
                      "so `evaluate` can check a dataset against the model):", "",
                      *(f"- {k}: {v}" for k, v in shown.items())]
    figures = {k: summary[k] for k in ("status", "steps", "final_train_loss", "final_val_loss", "last_eval",
                                       "wall_time_s", "unigram_entropy") if summary.get(k) is not None}
    use = "\n".join(USE[c].format(repo_id=repo_id) for c in fam.commands if c in USE)
    front = {"library_name": "hrm-deeploop", "license": "apache-2.0",
             "tags": ["hrm-deeploop", model["name"], f"scaling-{scheme}"]}
    return "\n".join([
        "---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
        f"# {fam.title} ({scheme} scaling), step {meta['step']}", "", what, "",
        "## Data", "", *data_lines, "",
        "## Measured (the run's summary.json)", "",
        *(["```json", json.dumps(figures, indent=2), "```"] if figures else
          ["No summary.json was found beside the checkpoint."]), "",
        "## Use", "", "```bash", "pip install 'hrm-deeploop[hub]'", use, "```", "",
        "Before uploading, or offline: `HRM_DEEPLOOP_HUB_DIR=DIR` makes `hf://OWNER/NAME` read the folder "
        "`DIR/OWNER/NAME` (docs/hub.md).", "",
        "## Upload", "", "```bash", f"hf upload {repo_id} THIS_FOLDER .", "```", "",
        "## Files", "", *[f"- `{f}`" for f in sorted(files)], "",
        "<details><summary>Settings: model, scaling, training config, the command that reproduces the run"
        "</summary>", "",
        "```yaml", yaml.safe_dump({"model": model, "scaling": scaling}, sort_keys=False).strip(), "```", "",
        "```yaml", yaml.safe_dump(config, sort_keys=False).strip(), "```", "",
        "```bash", reproduce_command(config), "```", "", "</details>", "",
        f"Exported by `hrm-deeploop export` ({meta['code_version']}).", ""])


# the card's usage line of each command that reads an exported model, by command
USE = {"evaluate": "hrm-deeploop evaluate checkpoint=hf://{repo_id} data_dir=DATASET output_dir=OUT",
       "ttt": "hrm-deeploop ttt checkpoint=hf://{repo_id} challenges=CHALLENGES.json output_dir=OUT",
       "eval-gpt": "hrm-deeploop eval-gpt checkpoint=hf://{repo_id} data=VAL_SHARDS output_dir=OUT",
       "generate": "hrm-deeploop generate checkpoint=hf://{repo_id} prompt='...'"}


def export(opts: ExportConfig) -> Path:
    from arc_data.files.guard import checked_output_dir  # lazy: `export --help` skips it
    from arc_data.files.publish import atomic_dir  # lazy: `export --help` skips it
    from hrm_deeploop import checkpoint as ckpt  # lazy: keeps torch off `export --help`

    if not opts.checkpoint:
        raise ConfigError("checkpoint= is required (a run folder, a step_N.pt file or hf://OWNER/NAME)")
    if not opts.output_dir:
        raise ConfigError("output_dir= is required (the folder to write)")
    path = ckpt.resolve(opts.checkpoint)
    run_dir = hub.folder_of(path)  # never into the run itself
    target = checked_output_dir(opts.output_dir, opts.overwrite, [str(run_dir)], marker=hub.CONFIG,
                                writer="export", outputs=_outputs())
    model, state, which, summary, fam = _load(path, opts.ema)
    config = state["config"]
    model_cfg, scaling = dict(config["model"]), dict(config.get("scaling") or {})
    meta = {"format": hub.EXPORT_FORMAT, "model": model_cfg, "scaling": scaling, "step": state.get("step"),
            "weights": which, "code_version": ckpt.code_version(), "source_code_version": state.get("code_version"),
            "puzzle_names": state.get("puzzle_names"), "scaling_rounds": state.get("scaling_rounds"),
            "config": {k: v for k, v in config.items() if k not in ("model", "scaling")}}
    files = [hub.WEIGHTS, hub.CONFIG, "README.md"]
    dataset: dict[str, Any] = {}
    sources: list[Path] = []
    if fam.metadata == "dataset":
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
        sources = _dataset_metadata(config.get("data_dir"), run_dir, opts.data_dir)
        from arc_data.format import META_FILE  # lazy: `export --help` skips it

        meta_file = next((f for f in sources if f.name == META_FILE), None)
        dataset = json.loads(meta_file.read_text()) if meta_file else {}
    with atomic_dir(target) as tmp:
        hub.write_weights(tmp / hub.WEIGHTS, model.state_dict(), {"format": "pt", "step": str(meta["step"])})
        if fam.metadata == "tokenizer":
            from hrm_deeploop.text.tokenizer import get_tokenizer  # lazy: `export --help` skips it

            tid = (config.get("data") or {}).get("tokenizer_id") or "gpt2"
            tok = get_tokenizer(tid)
            (tmp / TOKENIZER_FILE).write_text(json.dumps(
                {"tokenizer_id": tid, "n_vocab": tok.n_vocab, "eot_token": tok.eot_token}, indent=2) + "\n")
            files.append(TOKENIZER_FILE)
        for src in sources:
            shutil.copyfile(src, tmp / src.name)
            files.append(src.name)
        from hrm_deeploop.training.record import export_files  # lazy: `export --help` skips it

        for name, data in export_files(path, config).items():  # what the run trained on (protocol=strict)
            (tmp / name).write_bytes(data)
            files.append(name)
        (tmp / hub.CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / "README.md").write_text(_card({**meta, "config": config}, summary, files,
                                             opts.repo_id or "OWNER/NAME", dataset, fam))
        _shareable(tmp)
    return target.path


def _outputs() -> tuple[str, ...]:
    """Every name an export writes: overwrite=true replaces a folder holding its config.json and
    nothing else (config.json alone is the marker of any Hugging Face model folder; new-user audit)."""
    from arc_data.format import IDENTIFIERS_FILE, META_FILE  # lazy: `export --help` skips it
    from hrm_deeploop.training.record import RECORD  # lazy: `export --help` skips it

    return hub.WEIGHTS, hub.CONFIG, "README.md", TOKENIZER_FILE, META_FILE, IDENTIFIERS_FILE, RECORD


def _shareable(folder: Path) -> None:
    """Modes as any other file the user writes (0644 under the usual umask 022, group-writable under
    002), not the private 0600 / 0700 of temporary files: a group that shares a model folder reads it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for f in folder.iterdir():
        os.chmod(f, 0o666 & ~umask)


def _dataset_metadata(data_dir: str | None, run_dir: Path | None, given: str | None) -> list[Path]:
    """The training split's dataset.json and the dataset's identifiers.json (what `evaluate` checks
    a dataset against). The run records `data_dir` as its training command named it, relative to
    wherever that ran: it is looked for as given, then beside the run folder and each folder above
    it, and a candidate counts only when its files are the ones the run recorded
    (data_identity.json). `given` (export data_dir=) overrides the search. Not found: one line."""
    from arc_data.format import IDENTIFIERS_FILE, META_FILE  # lazy: `export --help` skips it
    from hrm_deeploop.checkpoint import IDENTITY_FILE  # lazy: keeps torch off `export --help`

    if not data_dir and not given:
        return []
    recorded: dict[str, Any] = {}
    if run_dir is not None and (run_dir / IDENTITY_FILE).is_file():
        with contextlib.suppress(ValueError, OSError):
            recorded = json.loads((run_dir / IDENTITY_FILE).read_text()).get("files") or {}
    wanted = {("train", META_FILE): Path("train") / META_FILE, (".", IDENTIFIERS_FILE): Path(IDENTIFIERS_FILE)}

    def matches(root: Path) -> bool:
        if not (root / "train" / META_FILE).is_file():
            return False
        for (folder, name), rel in wanted.items():
            want = (recorded.get(folder) or {}).get(name)
            if want and (root / rel).is_file() and hashlib.sha256((root / rel).read_bytes()).hexdigest() != want.get("sha256"):
                return False
        return True

    if given:
        candidates = [Path(given)]
    else:
        p = Path(str(data_dir))
        above = [] if run_dir is None else [run_dir.resolve(), *run_dir.resolve().parents]
        candidates = [p] if p.is_absolute() else [p, *(folder / p for folder in above)]
    root = next((c for c in candidates if matches(c)), None)
    if root is None:
        where = f"data_dir={given}" if given else f"the run's data_dir '{data_dir}'"
        raise UserError(f"export: {where} holds no train/{META_FILE} that the run trained on (looked as given and "
                        "beside the run folder); the export needs its dataset.json and identifiers.json to be "
                        "evaluated: pass data_dir=PATH of the training dataset")
    return [root / rel for rel in wanted.values() if (root / rel).is_file()]


def run(opts: ExportConfig) -> int:
    out = export(opts)
    print(f"export: wrote {out} ({', '.join(sorted(p.name for p in out.iterdir()))}); load it with checkpoint={out}")
    return 0
