"""`hrm-deeploop SUB [key=value ...]`: one console script, each subcommand a Hydra app.

Each subcommand reads `configs/<config_name>.yaml` (with its config groups) and takes Hydra
overrides. The registry below is explicit: every entry names the function it runs, so the wiring
is visible to grep. Run functions take the composed DictConfig and convert it to their typed
dataclass first thing (`hrm_deeploop.config.typed`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from hrm_deeploop.errors import UserError


@dataclass(frozen=True)
class Subcommand:
    config_name: str
    help: str
    run: Callable[[DictConfig], int | None]


# Lazy imports keep `hrm-deeploop --help` fast and keep torch out of torch-free commands.
def _scales(cfg: DictConfig) -> int | None:
    from hrm_deeploop.scaling import run

    return run(cfg)


def _build_arc(cfg: DictConfig) -> int | None:
    from arc_data.build import BuildConfig, build
    from hrm_deeploop.config import typed

    build(typed(cfg, BuildConfig))
    return 0


def _build_puzzles(cfg: DictConfig) -> int | None:
    from arc_data.puzzle_config import BuildPuzzlesConfig
    from arc_data.puzzles import run_build
    from hrm_deeploop.config import typed

    return run_build(typed(cfg, BuildPuzzlesConfig))


def _generate_puzzles(cfg: DictConfig) -> int | None:
    from arc_data.puzzle_config import GeneratePuzzlesConfig
    from arc_data.puzzles import run_generate
    from hrm_deeploop.config import typed

    return run_generate(typed(cfg, GeneratePuzzlesConfig))


def _viz_arc(cfg: DictConfig) -> int | None:
    from arc_data.viz import VizConfig, visualize
    from hrm_deeploop.config import typed

    visualize(typed(cfg, VizConfig))
    return 0


def _train(cfg: DictConfig) -> int | None:
    from hrm_deeploop.train import run

    return run(cfg)


def _evaluate(cfg: DictConfig) -> int | None:
    from eval.predict import run

    return run(cfg)


def _vote(cfg: DictConfig) -> int | None:
    from eval.vote import run

    return run(cfg)


def _prepare_text(cfg: DictConfig) -> int | None:
    from hrm_deeploop.text import run_prepare

    return run_prepare(cfg)


def _train_gpt(cfg: DictConfig) -> int | None:
    from hrm_deeploop.train_gpt import run

    return run(cfg)


def _eval_gpt(cfg: DictConfig) -> int | None:
    from hrm_deeploop.eval_gpt import run

    return run(cfg)


def _sweep(cfg: DictConfig) -> int | None:
    from hrm_deeploop.sweep import run

    return run(cfg)


def _demo(cfg: DictConfig) -> int | None:
    from hrm_deeploop.demo import run

    return run(cfg)


SUBCOMMANDS: dict[str, Subcommand] = {
    "scales": Subcommand("scales", "print depth accounting (N, M, N_g, M_g) and alpha/beta per module", _scales),
    "build-arc": Subcommand("build_arc", "build the augmented ARC-AGI dataset (HRM layout or compact)", _build_arc),
    "build-puzzles": Subcommand("build_puzzles", "build a Sudoku or Maze dataset (HRM layout) from puzzle CSVs", _build_puzzles),
    "generate-puzzles": Subcommand("generate_puzzles", "generate Sudoku / Maze puzzle CSVs (train.csv, test.csv) offline", _generate_puzzles),
    "viz-arc": Subcommand("viz_arc", "render ARC tasks / augmentations to PNG and an HTML gallery", _viz_arc),
    "train": Subcommand("train", "train HRM (baseline or DeepLoop) on a built ARC dataset", _train),
    "evaluate": Subcommand("evaluate", "predict every augmented test copy with a checkpoint, then vote", _evaluate),
    "vote": Subcommand("vote", "count-first voting and pass@K from a predictions.npz", _vote),
    "prepare-text": Subcommand("prepare_text", "tokenise text/JSONL/Parquet into GPT-2 token shards", _prepare_text),
    "train-gpt": Subcommand("train_gpt", "train the looped GPT language model", _train_gpt),
    "eval-gpt": Subcommand("eval_gpt", "validation loss and lm-evaluation-harness tasks for a looped GPT", _eval_gpt),
    "sweep": Subcommand("sweep", "looped-GPT sweeps: {baseline, deeploop} x R, and the p-sweep", _sweep),
    "demo": Subcommand("demo", "the whole pipeline end to end on bundled data (2 CPU cores: ~4 min idle, <= 10 min)", _demo),
}


def config_dir() -> Path:
    """The configs folder: the repo's top-level configs/ (shipped as hrm_deeploop.configs)."""
    repo = Path(__file__).resolve().parent.parent / "configs"
    if (repo / "scales.yaml").exists():
        return repo
    import hrm_deeploop.configs as packaged  # installed wheel: configs/ mapped into the package

    return Path(packaged.__file__).resolve().parent


def _usage() -> str:
    width = max(len(k) for k in SUBCOMMANDS)
    lines = [
        "usage: hrm-deeploop SUBCOMMAND [key=value ...]   (Hydra overrides)",
        "       hrm-deeploop SUBCOMMAND --help            (show that subcommand's config)",
        "",
        "subcommands:",
    ]
    lines += [f"  {name:<{width}}  {sub.help}" for name, sub in SUBCOMMANDS.items()]
    return "\n".join(lines)


def register_schemas() -> None:
    """Typed schemas for the shared config groups, so YAML files and overrides are checked.

    A group file extends its schema (`defaults: [_schema_hrm]`), so any field of the dataclass
    can be overridden on the command line and a misspelled key is an error at compose time.
    """
    from hydra.core.config_store import ConfigStore

    from hrm_deeploop.gpt import GPTConfig
    from hrm_deeploop.hrm import HRMConfig
    from hrm_deeploop.scaling import ScalingConfig

    cs = ConfigStore.instance()
    cs.store(group="scaling", name="_schema", node=ScalingConfig)
    cs.store(group="model", name="_schema_hrm", node=HRMConfig)
    cs.store(group="model", name="_schema_gpt", node=GPTConfig)
    from arc_data.puzzle_config import BuildPuzzlesConfig, GeneratePuzzlesConfig  # light: no numba

    cs.store(name="_schema_build_puzzles", node=BuildPuzzlesConfig)
    cs.store(name="_schema_generate_puzzles", node=GeneratePuzzlesConfig)


def run_subcommand(name: str, overrides: list[str]) -> int:
    """Compose the config for `name` with Hydra and run it. Returns the exit code."""
    import hydra

    register_schemas()

    sub = SUBCOMMANDS[name]
    code: list[int] = [0]

    @hydra.main(config_path=str(config_dir()), config_name=sub.config_name, version_base=None)
    def app(cfg: DictConfig) -> None:
        try:
            code[0] = int(sub.run(cfg) or 0)
        except UserError as e:
            print(f"hrm-deeploop {name}: error: {e}", file=sys.stderr)
            code[0] = 2
        except _arc_error_types() as e:
            print(f"hrm-deeploop {name}: error: {e}", file=sys.stderr)
            code[0] = 2

    saved = sys.argv
    sys.argv = [f"hrm-deeploop {name}", *overrides]
    try:
        app()
    finally:
        sys.argv = saved
    return code[0]


def _arc_error_types() -> tuple[type[BaseException], ...]:
    try:
        from arc_data.errors import ArcDataError
    except ImportError:  # arc_data is part of this distribution; this only guards partial checkouts
        return ()
    return (ArcDataError,)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"hrm-deeploop: unknown subcommand '{name}'\n\n{_usage()}", file=sys.stderr)
        return 2
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    return run_subcommand(name, rest)


if __name__ == "__main__":
    sys.exit(main())
