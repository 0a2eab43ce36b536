"""`hrm-deeploop SUB [key=value ...]`: the one place that wires subcommands.

`COMMANDS` is a table: subcommand -> the function it runs ("module:function"), the typed dataclass
that is the single source of its defaults ("module:Class"), and its YAML file in `configs/` (which
holds only what differs from the dataclass, plus config-group choices such as `model: hrm`).
For each call the CLI composes the YAML with the command-line overrides (Hydra's compose API, the
dataclass registered as the YAML's schema; a plain call without Hydra, `cli_fast.plain_config`),
converts the result once to the dataclass, and calls the function with it. Every config mistake (unknown key, wrong type, value out of range) is
one line on stderr and exit code 2, before anything is read or written; so is every `UserError`
the function raises. Ctrl-C exits 130, SIGTERM 143 (`interrupts`: both are a KeyboardInterrupt).

Torch is imported only by the functions that need it, and every schema lives in a torch-free
module (the trainers' in training/train_config.py), so every `SUB --help`, `scales`, `build-arc`,
`viz-arc` and `vote` start without it (tests/test_cli_help.py checks all of them).
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrm_deeploop import interrupts
from hrm_deeploop.cli_fast import exit_now, plain_config, quick_start, selects_groups
from hrm_deeploop.errors import ConfigError, UserError


@dataclass(frozen=True)
class Command:
    target: str  # "module:function", called with the typed config; returns an exit code or None
    schema: str  # "module:Dataclass", the typed config and the single source of its defaults
    config: str  # configs/<config>.yaml
    help: str
    exit_fast: bool = False  # as the process's entry, end it without teardown (cli_fast.exit_now)
    blas: bool = True  # False: no linear algebra; as the process's entry, OpenBLAS starts no thread (0.03 s)


COMMANDS: dict[str, Command] = {
    "scales": Command("hrm_deeploop.scales:run", "hrm_deeploop.scales:ScalesConfig", "scales",
                      "print depth accounting (N, M, N_g, M_g) and alpha/beta per module"),
    "build-arc": Command("arc_data.arc.build:run", "arc_data.arc.build:BuildConfig", "build_arc",
                         "build the augmented ARC-AGI dataset (HRM layout or compact)", exit_fast=True),
    "viz-arc": Command("arc_data.arc.viz:run", "arc_data.arc.viz:VizConfig", "viz_arc",
                       "render ARC tasks / augmentations to PNG and an HTML gallery"),
    "generate-arc": Command("arc_data.generators.generate:run", "arc_data.generators.generate:GenerateArcConfig",
                            "generate_arc", "generate procedural ARC tasks (our own seeded families), offline"),
    "build-puzzles": Command("arc_data.puzzles.build:run_build", "arc_data.puzzles.puzzle_config:BuildPuzzlesConfig",
                             "build_puzzles", "build a Sudoku / Maze dataset (HRM layout) from CSVs"),
    "generate-puzzles": Command("arc_data.puzzles.generate:run_generate", "arc_data.puzzles.puzzle_config:GeneratePuzzlesConfig",
                                "generate_puzzles", "generate Sudoku / Maze puzzles into CSVs, offline"),
    "train": Command("hrm_deeploop.training.reasoner:run", "hrm_deeploop.training.train_config:TrainConfig", "train",
                     "train HRM, TRM or URM (baseline or DeepLoop) on a built puzzle dataset"),
    "train-vit": Command("hrm_deeploop.training.vision:run", "hrm_deeploop.training.vision_config:TrainViTConfig",
                         "train_vit", "train LoopViT (baseline or DeepLoop) on canvases of a built ARC dataset"),
    "evaluate": Command("eval.evaluate:run", "eval.evaluate_config:EvaluateConfig", "evaluate",
                        "predict with a checkpoint, then vote (ARC) or score (Sudoku, Maze, other tasks)"),
    "vote": Command("eval.arc.vote:run", "eval.arc.vote:VoteConfig", "vote",
                    "count-first voting and pass@K from a predictions.npz", exit_fast=True, blas=False),
    "score": Command("eval.arc.arcprize:run", "eval.arc.arcprize:ScoreConfig", "score",
                     "score a submission.json against a *_solutions.json by the ARC Prize rule"),
    "make-challenges": Command("arc_data.arc.challenges:run", "arc_data.arc.challenges:ChallengesConfig",
                               "make_challenges", "ARC tasks (a build-arc dataset or task files) as challenges.json + "
                               "solutions.json"),
    "prepare-text": Command("hrm_deeploop.text.prepare:run", "hrm_deeploop.text.prepare:PrepareTextConfig",
                            "prepare_text", "tokenise text/JSONL/Parquet into GPT-2 token shards"),
    "train-gpt": Command("hrm_deeploop.training.lm:run", "hrm_deeploop.training.train_config:TrainGPTConfig", "train_gpt",
                         "train the looped GPT language model"),
    "eval-gpt": Command("eval.lm:run", "eval.lm:EvalGPTConfig", "eval_gpt",
                        "validation loss and lm-evaluation-harness tasks for a looped GPT"),
    "generate": Command("eval.generate:run", "eval.generate:GenerateConfig", "generate",
                        "sample text from a looped-GPT checkpoint (KV cache, top-k/top-p, adaptive exit)"),
    "sweep": Command("hrm_deeploop.training.sweep:run", "hrm_deeploop.training.sweep:SweepConfig", "sweep",
                     "looped-GPT sweeps: {baseline, deeploop} x R, and the p-sweep"),
    "export": Command("hrm_deeploop.export:run", "hrm_deeploop.export:ExportConfig", "export",
                      "a checkpoint to a Hugging Face Hub folder (model.safetensors, config.json, model card)"),
    "bundle": Command("hrm_deeploop.bundle:run", "hrm_deeploop.bundle:BundleConfig", "bundle",
                      "wheels, checkpoint and run.py for an offline notebook (ARC Prize on Kaggle: ttt over the GPUs)"),
    "study": Command("hrm_deeploop.study:run", "hrm_deeploop.study:StudyConfig", "study",
                     "a grid over config keys x seeds for train / train-gpt, local pool or SLURM (submitit)"),
    "ttt": Command("hrm_deeploop.pertask.run:run", "hrm_deeploop.pertask.ttt_config:PerTaskConfig", "ttt",
                   "per-task test-time training: one copy of a checkpoint per ARC task, then a submission",
                   exit_fast=True),  # its time_budget counts to the process's end: no interpreter teardown
    "demo": Command("hrm_deeploop.demo:run", "hrm_deeploop.demo:DemoConfig", "demo",
                    "the whole pipeline end to end on bundled data (2 CPU cores; time in docs/demo.md)"),
}

# Config-group schemas: a group's YAML files extend these (`defaults: [_schema_hrm]`).
GROUP_SCHEMAS: dict[tuple[str, str], str] = {
    ("scaling", "_schema"): "hrm_deeploop.models.scaling:ScalingConfig",
    ("model", "_schema_hrm"): "hrm_deeploop.models.model_config:HRMConfig",
    ("model", "_schema_trm"): "hrm_deeploop.models.model_config:TRMConfig",
    ("model", "_schema_urm"): "hrm_deeploop.models.model_config:URMConfig",
    ("model", "_schema_gpt"): "hrm_deeploop.models.model_config:GPTConfig",
    ("model", "_schema_loopvit"): "hrm_deeploop.models.loopvit_config:LoopViTConfig",
}

# Old spellings that the docs or users already use: rewritten (with a one-line notice) to the
# current key before composing. Per subcommand; `train.` prefixes of the sweep map like train-gpt's.
_GPT_RENAMES = {
    "max_steps": "train.max_steps", "stop_after": "train.stop_after", "compile": "train.compile",
    "global_batch_tokens": "train.global_batch_tokens", "micro_batch_size": "train.micro_batch_size",
    "log_every": "train.log_every", "progress": "train.progress", "mfu_peak_tflops": "train.mfu_peak_tflops",
    "trailing_steps": "train.trailing_steps", "eval_every": "eval.every", "floor_margin": "eval.floor_margin",
    "checkpoint_every": "checkpoint.every", "keep_checkpoints": "checkpoint.keep",
}
_HRM_RENAMES = {
    "optim.lr_warmup_steps": "optim.warmup_steps", "optim.lr_min_ratio": "optim.min_lr_ratio",
    "eval.every_steps": "eval.every",
}
DEPRECATED: dict[str, dict[str, str]] = {
    "train": _HRM_RENAMES,
    "train-gpt": _GPT_RENAMES,
    "sweep": {"train." + k: v for k, v in _GPT_RENAMES.items() if "train." + k != v}
    | {f"train.{k}": k for k in ("data.train", "data.val", "data.tokenizer_id", "data.val_batches",
                                 "data.unigram_tokens", "optim.lr", "optim.min_lr_ratio", "optim.warmup_steps",
                                 "optim.weight_decay", "optim.beta1", "optim.beta2", "optim.eps", "optim.grad_clip",
                                 "optim.decay_embeddings", "device", "dtype", "logger", "project", "seed")},
}


def resolve(spec: str) -> Any:
    """'package.module:attribute' -> the attribute (imports the module)."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def config_dir() -> Path:
    """The configs folder: the repo's top-level configs/ (shipped as hrm_deeploop.configs)."""
    repo = Path(__file__).resolve().parent.parent / "configs"
    if (repo / "scales.yaml").exists():
        return repo
    import hrm_deeploop.configs as packaged  # lazy: only an installed wheel has it (configs/ mapped into the package)

    return Path(packaged.__file__).resolve().parent


def _usage() -> str:
    width = max(len(k) for k in COMMANDS)
    lines = [
        "usage: hrm-deeploop SUBCOMMAND [key=value ...]   (Hydra overrides, e.g. model=hrm train.max_steps=100)",
        "       hrm-deeploop SUBCOMMAND --help            (that subcommand's settings and defaults)",
        "",
        "subcommands:",
    ]
    lines += [f"  {name:<{width}}  {c.help}" for name, c in COMMANDS.items()]
    return "\n".join(lines)


def register_schemas(name: str) -> None:
    """Register the subcommand's dataclass (`_schema_<config>`) and, if it picks groups, the group schemas."""
    from hydra.core.config_store import ConfigStore  # lazy: keeps hydra off bare `--help`

    cs = ConfigStore.instance()
    cmd = COMMANDS[name]
    cs.store(name=f"_schema_{cmd.config}", node=resolve(cmd.schema))
    if not selects_groups(config_dir() / f"{cmd.config}.yaml"):
        return
    for (group, node_name), spec in GROUP_SCHEMAS.items():
        cs.store(group=group, name=node_name, node=resolve(spec))


def rewrite_deprecated(name: str, overrides: list[str]) -> list[str]:
    """Map old key spellings to the current ones, with a one-line notice each. Every setting
    already exists in the schema, so Hydra's `+key` (add) and `~key` (delete) are refused."""
    table = DEPRECATED.get(name, {})
    out = []
    for o in overrides:
        prefix = o[: len(o) - len(o.lstrip("+~"))]
        if prefix:
            key = o[len(prefix):].partition("=")[0]
            raise ConfigError(f"'{o}': every setting of {name} already exists, so '{prefix}' is not needed "
                              f"(write {key}=VALUE; see `hrm-deeploop {name} --help`)")
        key, sep, value = o[len(prefix):].partition("=")
        if key in table:
            print(f"hrm-deeploop {name}: note: '{key}' is deprecated, use '{table[key]}'", file=sys.stderr)
            key = table[key]
        out.append(f"{prefix}{key}{sep}{quote_non_ascii(value)}")
    return out


# A run of characters holding a non-ASCII one, between the override grammar's delimiters.
_NON_ASCII_RUN = re.compile(r"(\s*)([^\[\]{},\s][^\[\]{},]*?[^\x00-\x7f][^\[\]{},]*?)(\s*)(?=$|[\]{},])")


def quote_non_ascii(value: str) -> str:
    """Hydra's override lexer takes only ASCII outside quotes (`output_dir=/data/dé` is a
    LexerNoViableAltException): each non-ASCII item of a value (a path, a list element) is quoted."""
    if value.isascii() or value.lstrip().startswith("{") or any(c in value for c in "'\"\\"):
        return value
    return _NON_ASCII_RUN.sub(lambda m: f"{m[1]}'{m[2]}'{m[3]}", value)


def compose(name: str, overrides: list[str], convert: bool = True, choices: bool = False) -> Any:
    """The subcommand's config as its typed dataclass (or the composed DictConfig with
    convert=False; with choices=True also the config-group choices it was composed from, as
    `(cfg, {group: choice})`). Raises ConfigError (one line) on any mistake."""
    from hydra import compose as hydra_compose  # lazy: keeps hydra off bare `--help`
    from hydra import initialize_config_dir  # lazy: keeps hydra off bare `--help`
    from hydra.core.global_hydra import GlobalHydra  # lazy: keeps hydra off bare `--help`
    from hydra.errors import HydraException  # lazy: keeps hydra off bare `--help`
    from omegaconf import OmegaConf  # lazy: keeps omegaconf off bare `--help`
    from omegaconf.errors import OmegaConfBaseException  # lazy: keeps omegaconf off bare `--help`

    from hrm_deeploop.typed_config import check_int64  # lazy: omegaconf; bare `--help` skips it

    register_schemas(name)
    overrides, late = group_named(name, rewrite_deprecated(name, overrides))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose(config_name=COMMANDS[name].config, overrides=overrides, return_hydra_config=choices)
        if late:
            from hydra.core.override_parser.overrides_parser import OverridesParser  # lazy: as hydra above

            for o in OverridesParser.create().parse_overrides(late):  # the value as Hydra types it
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)  # struct: an unknown key raises
        if choices:
            from omegaconf import open_dict  # lazy: keeps omegaconf off bare `--help`

            picked = {g: c for g, c in cfg.hydra.runtime.choices.items() if not g.startswith("hydra/")}
            with open_dict(cfg):
                del cfg["hydra"]
            return cfg, picked
        if convert:
            check_int64(OmegaConf.to_container(cfg))  # one rule for every int field, before any __post_init__
        return OmegaConf.to_object(cfg) if convert else cfg
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_one_line(name, e)) from None
    except ValueError as e:  # Python refuses int() of more than 4300 digits while Hydra parses an override
        if "integer string conversion" not in str(e):
            raise
        bad = next((o.partition("=")[0] for o in overrides if len(re.sub(r"\D", "", o)) > 4300), "?")
        raise ConfigError(f"{bad}=<an integer of more than 4300 digits>: must fit a signed 64-bit integer "
                          "(|value| < 2**63)") from None
    finally:
        GlobalHydra.instance().clear()


def group_named(name: str, overrides: list[str]) -> tuple[list[str], list[str]]:
    """(the overrides for Hydra, those set after it): a command that picks no config group takes a key
    named as one (`ttt preset=gpu`; `configs/preset/` is the demo's group) as a plain setting, which
    Hydra would read as that group and refuse ('Could not override'), so it is set once composed."""
    if selects_groups(config_dir() / f"{COMMANDS[name].config}.yaml"):
        return overrides, []
    groups = {p.name for p in config_dir().iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    late = [o for o in overrides if o.partition("=")[0] in groups]
    return [o for o in overrides if o not in late], late


def _one_line(name: str, e: Exception) -> str:
    """Hydra's multi-line composition errors as one line naming the key."""
    texts = [str(e)] + ([str(e.__cause__)] if e.__cause__ is not None else [])
    lines = [ln.strip() for t in texts for ln in t.splitlines() if ln.strip()]
    full_key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), "")
    joined = "\n".join(lines)
    if lines and lines[0].startswith("Could not override '") or "not in struct" in joined or " not in '" in joined:
        bad = full_key or next((ln.split("'")[1] for ln in lines if ln.startswith(("Could not override", "Key '"))), "?")
        import difflib  # lazy: only for a mistake's hint (a plain start skips it)

        hint = difflib.get_close_matches(bad, _known_keys(name), n=1)
        return (f"unknown config key '{bad}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
                + f"; see `hrm-deeploop {name} --help`")
    if any(ln.startswith("Available options") for ln in lines):
        at = next(i for i, ln in enumerate(lines) if ln.startswith("Available options"))
        options = []
        for ln in lines[at + 1:]:
            if ln.startswith("Config search path"):
                break
            if not ln.startswith("_schema"):
                options.append(ln)
        return f"{lines[0].removeprefix(f'In {COMMANDS[name].config!r}: ')} (choose one of: {', '.join(options)})"
    detail = next((ln for ln in lines[1:] if not ln.startswith(("full_key:", "object_type", "reference_type",
                                                                   "To append"))), "")
    head = lines[0] if lines else type(e).__name__
    return f"{head} ({detail})" if detail and detail not in head else head


def _known_keys(name: str) -> list[str]:
    """Dotted keys of the subcommand's schema (for 'did you mean')."""
    from omegaconf import OmegaConf  # lazy: keeps omegaconf off bare `--help`

    def walk(node: Any, prefix: str) -> list[str]:
        out = []
        for k in node:
            v = node._get_node(k)
            full = f"{prefix}{k}"
            out.append(full)
            if OmegaConf.is_dict(v):
                out += walk(v, full + ".")
        return out

    from hrm_deeploop.models.model_config import MODEL_CONFIGS  # lazy: omegaconf; bare `--help` skips it

    try:
        keys = walk(OmegaConf.structured(resolve(COMMANDS[name].schema)), "")
    except Exception:  # noqa: BLE001 - hints are best effort; the error itself is already decided
        return []
    if "model" in keys:  # the model section's keys depend on model.name: offer every model's
        keys += sorted({f"model.{k}" for cls in MODEL_CONFIGS.values() for k in OmegaConf.structured(cls)})
    return keys


# Keys a subcommand refuses to run without although their default is None (an unset path): its
# --help shows them as ??? like the schema's MISSING fields. tests/test_cli_help.py runs each
# subcommand without each of these keys and checks the refusal names it, so this table cannot drift.
REQUIRED: dict[str, tuple[str, ...]] = {
    "train": ("data_dir", "output_dir"),
    "train-vit": ("data_dir", "output_dir"),
    "evaluate": ("checkpoint", "data_dir", "output_dir"),
    "eval-gpt": ("checkpoint",),
    "generate": ("checkpoint",),
    "export": ("checkpoint", "output_dir"),
    "bundle": ("checkpoint", "output_dir"),
    "make-challenges": ("source", "output_dir"),
    "build-puzzles": ("source", "output_dir"),
    "generate-puzzles": ("output_dir",),
    "generate-arc": ("output_dir",),
    "ttt": ("checkpoint", "challenges"),
}


def describe(name: str, overrides: list[str]) -> str:
    """`SUB --help`: the help line, the schema's docstring, the config groups' choices and the
    composed settings as YAML, each key with its description (??? for a required key still unset)."""
    from omegaconf import OmegaConf  # lazy: keeps omegaconf off bare `--help`

    from hrm_deeploop.helptext import describe_groups, settings  # lazy: bare `--help` skips it

    cmd = COMMANDS[name]
    cfg, picked = compose(name, overrides, convert=False, choices=True)  # shown as composed, even unfinished
    models = getattr(resolve(cmd.schema), "MODELS", None)
    groups = (["", "config groups (GROUP=NAME picks configs/GROUP/NAME.yaml; * = in use):",
               *describe_groups(config_dir(), cfg, picked, models)]
              if picked else [])
    for key in REQUIRED.get(name, ()):
        if OmegaConf.select(cfg, key) in (None, ""):  # unset: None, or '' for a path (generate's checkpoint)
            OmegaConf.update(cfg, key, "???")
    doc = (resolve(cmd.schema).__doc__ or "").strip()
    from hrm_deeploop.families import titles  # lazy: bare `--help` skips it

    served = titles(name)
    families = [f"model families it serves: {served} (hrm_deeploop/families)"] if served else []
    return "\n".join([f"hrm-deeploop {name}: {cmd.help}", "", doc, *families, *groups, "",
                      f"settings (defaults: {cmd.schema.replace(':', '.')}; configs/{cmd.config}.yaml; "
                      "override with key=value; ??? = required):", "", settings(cfg)])


# Overrides a subcommand derives from its own command line before composing: a trainer's
# `init_from=RUN` inherits the run's optimiser, schedule, logger, batch and what its family needs to
# run (training/inherit.py: one rule for every trainer that takes init_from).
PREPARE: dict[str, str] = {"train": "hrm_deeploop.training.inherit:inherit",
                           "train-vit": "hrm_deeploop.training.inherit:inherit"}


def prepare(name: str, overrides: list[str]) -> list[str]:
    """The overrides with what PREPARE adds; the keys an `experiment=` sets count as given; the
    models `model=` and `experiment=` select, by override (checked against an `init_from`'s)."""
    if name not in PREPARE:
        return overrides
    preset: set[str] = set()
    chosen: dict[str, str] = {}
    for o in overrides:
        key, _, value = o.partition("=")
        if key in ("experiment", "model") and value and (config_dir() / key / f"{value}.yaml").is_file():
            from hrm_deeploop.helptext import read_group_file  # lazy: with experiment= / model= only

            model, keys = read_group_file(config_dir(), key, value)
            preset |= keys if key == "experiment" else set()
            if model:
                chosen[o] = model
    return resolve(PREPARE[name])(overrides, preset, name, chosen)


def run_subcommand(name: str, overrides: list[str], ends_process: bool = False) -> int:
    """Compose, convert, run; the exit code (2: user error, 130: Ctrl-C). `ends_process`: quick_start."""
    try:
        if any(o in ("-h", "--help") for o in overrides):
            print(describe(name, [o for o in overrides if o not in ("-h", "--help")]))
            return 0
        overrides = prepare(name, overrides)
        with quick_start(ends_process):  # a plain call gets its config without Hydra (cli_fast)
            cfg = plain_config(COMMANDS[name], config_dir(), overrides, DEPRECATED.get(name, {})) or compose(name, overrides)
        return int(resolve(COMMANDS[name].target)(cfg) or 0)
    except (UserError, *_data_errors()) as e:
        close_progress_bars()
        task = getattr(e, "task", None)  # a task room's DatasetError: the line names the task
        print(f"hrm-deeploop {name}: error: " + (f"{task}: " if task else "") + str(e), file=sys.stderr)
        return 2
    except Exception as e:
        lost = lost_peer(e)
        if lost is None:
            raise
        close_progress_bars()
        print(f"hrm-deeploop {name}: error: {lost}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM made one by `interrupts.handled`
        signum = getattr(e, "signum", signal.SIGINT)
        by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
        said = f": {e}" if isinstance(e, interrupts.Interrupted) and str(e) else ""
        print(f"hrm-deeploop {name}: interrupted{by}{said}", file=sys.stderr)
        return 128 + signum


def close_progress_bars() -> None:
    """Close every live tqdm bar: the error line that follows starts on a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ()) or ()):
        bar.close()


def lost_peer(e: Exception) -> str | None:
    """Under torchrun, a collective that failed because another rank died (killed, out of memory) as
    one line naming this rank and the peer's address, instead of each surviving rank's traceback;
    None for any other error (which stays a traceback: a bug)."""
    dist = sys.modules.get("torch.distributed")  # the group itself is gone by now (runtime.teardown)
    if dist is None or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    text = " ".join(str(e).split())
    if not (isinstance(e, getattr(dist, "DistError", ())) or any(
            w in text for w in ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL"))):
        return None
    peer = re.search(r"\[([0-9a-fA-F.:]+)\]:(\d+)", text)
    return (f"rank {os.environ.get('RANK', '?')} of {os.environ['WORLD_SIZE']}: lost its peer"
            + (f" at {peer.group(1)}:{peer.group(2)}" if peer else "") + " in a collective (another rank died: see "
            "its own output); this rank stops too")


def _data_errors() -> tuple[type[BaseException], ...]:
    from arc_data.errors import DatasetError  # lazy: bare `--help` loads no data package

    return (DatasetError,)


def main(argv: list[str] | None = None) -> int:
    entry = argv is None  # the process's entry (console script, -m): `exit_fast` commands end it
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib  # lazy: only for a mistake's hint (a plain start skips it)

        hint = difflib.get_close_matches(name, COMMANDS, n=1)
        print(f"hrm-deeploop: unknown subcommand '{name}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
              + f"\n\n{_usage()}", file=sys.stderr)
        return 2
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    ends_process = entry and COMMANDS[name].exit_fast
    if entry and not COMMANDS[name].blas:  # before numpy's import: its OpenBLAS would start (and spin) a thread a core
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with interrupts.handled():  # SIGTERM behaves like Ctrl-C everywhere (exit 143 instead of 130)
        code = run_subcommand(name, rest, ends_process)
    return exit_now(code) if ends_process else code


if __name__ == "__main__":
    sys.exit(main())
