"""`cli_fast.plain_config`: a plain call's config built without Hydra is the config Hydra composes,
and everything else (and every mistake) is left to Hydra's path."""

import subprocess
import sys

import pytest

from arc_data.errors import ArcError
from hrm_deeploop.cli import COMMANDS, DEPRECATED, compose, config_dir, main
from hrm_deeploop.cli_fast import plain_config
from hrm_deeploop.errors import ConfigError


def _fast(name, overrides, where=None):
    return plain_config(COMMANDS[name], where or config_dir(), overrides, DEPRECATED.get(name, {}))


def _outcome(fn):
    """The config, or the error's type and line."""
    try:
        return fn()
    except (ConfigError, ArcError) as e:
        return type(e).__name__, str(e)


# Plain forms: each must take the fast path and give what Hydra gives.
PLAIN = [
    [],
    ["sources=[/tmp/raw]", "output_dir=/tmp/out", "num_aug=200", "seed=42", "materialize=true",
     "overwrite=true", "progress=false"],  # benchmarks/bench_arc_build.py's call
    ["sources=[arc1,concept]", "output_dir=data/arc-aug-1000"],
    ["sources=[arc1,rearc:/data/re_arc,barc:data/b.jsonl]", "generated.pairs_per_task=5", "generated.examples=8",
     "generated.oversize=error", "generated.test_pairs=2"],
    ["sources=[]"],  # the schema's own check refuses it, on both paths alike
    ["num_aug=0", "seed=0", "materialize=false", "eval_name=eval", "test_labels=optional"],
    ["holdout_tasks=[007bbfb7,00d62c1b]", "holdout_dir=data/held", "validation_dir=data/val"],
    ["holdout_fraction=0.25", "holdout_dir=data/held", "holdout_pool=evaluation"],
    ["holdout_fraction=1", "holdout_dir=x"],  # an int for a float field: 1.0 on both paths
    ["num_aug=-1"],  # out of range: BuildConfig's own error, on both paths alike
    ["holdout_fraction=2", "holdout_dir=x"],
    ["num_aug=5", "num_aug=7"],  # the last one wins
    ["output_dir=a:b", "output_dir=/x/y.z+w@v-u_1"],
    ["generated.test_pairs=0"],  # the nested config's own error
    ["seed=-0"],
    ["output_dir=true_dir", "eval_name=nullable", "output_dir=infinity", "sources=[nan1,2d,a.b.c,1-2]"],
    ["num_aug=123456789012345678"],
]

# Not plain: Hydra alone composes these (the config, or the error it names).
NOT_PLAIN = [
    ["num_aug=1e5"], ["num_aug=+5"], ["num_aug=1_000"], ["num_aug=007"], ["num_aug=1234567890123456789"],
    ["output_dir=1e5"], ["output_dir=123"], ["output_dir=1.5"], ["output_dir=True"], ["output_dir=null"],
    ["output_dir=NaN"], ["output_dir=-inf"], ["output_dir=-0"], ["output_dir=~/data"], ["output_dir='a b'"], ["output_dir=a=b"],
    ["output_dir=${seed}"], ["output_dir=a\\,b"], ["output_dir="], ["output_dir=dé"], ["holdout_dir=null"],
    ["materialize=True"], ["materialize=yes"], ["materialize=1"], ["sources=arc1"], ["sources=[arc1, concept]"],
    ["sources=[a,,b]"], ["sources=[1,2]"], ["sources=[]x"], ["holdout_fraction=.5"], ["holdout_fraction=1e-1"],
    ["num_aug"], ["+num_aug=3"], ["~num_aug"], ["nope=1"], ["generated=x"], ["generated.nope=1"],
    ["hydra.verbose=true"], ["num_aug@x=1"], ["generated.examples=8", "generated.examples=x"],
]


@pytest.mark.parametrize("overrides", PLAIN, ids=[" ".join(o) or "none" for o in PLAIN])
def test_a_plain_call_gets_what_hydra_composes(overrides):
    fast = _outcome(lambda: _fast("build-arc", overrides))
    assert fast is not None, overrides  # it took the fast path (or raised the schema's own error there)
    assert fast == _outcome(lambda: compose("build-arc", overrides))


@pytest.mark.parametrize("overrides", NOT_PLAIN, ids=[" ".join(o) for o in NOT_PLAIN])
def test_anything_else_is_left_to_hydra(overrides):
    assert _fast("build-arc", overrides) is None


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_plain_subcommand_gets_hydras_defaults(name):
    """A subcommand whose YAML sets nothing gets its dataclass's defaults as Hydra gives them (or the
    same error); one whose YAML sets something is left to Hydra."""
    text = (config_dir() / f"{COMMANDS[name].config}.yaml").read_text()
    fast = _outcome(lambda: _fast(name, []))
    if "\n  - _self_" not in text or any(ln.strip() and not ln.startswith(("#", "defaults:", "  - _s"))
                                         for ln in text.splitlines()):
        assert fast is None, name
    elif fast is not None:
        assert fast == _outcome(lambda: compose(name, [])), name
    assert _fast("build-arc", []) is not None


def test_a_yaml_that_sets_a_value_is_composed_by_hydra(tmp_path):
    (tmp_path / "build_arc.yaml").write_text("defaults:\n  - _schema_build_arc\n  - _self_\nnum_aug: 3\n")
    assert _fast("build-arc", ["seed=1"], where=tmp_path) is None
    (tmp_path / "build_arc.yaml").write_text("# a comment\ndefaults:\n  - _schema_build_arc\n\n  - _self_\n")
    assert _fast("build-arc", ["seed=1"], where=tmp_path).seed == 1


def test_build_arc_starts_without_hydra(tmp_path):
    """The plain call never imports Hydra or OmegaConf (0.2-0.3 s), and its mistakes still do."""
    from tests.arc_synth import synthetic_tasks, write_layout

    src = write_layout(tmp_path / "raw", synthetic_tasks())
    code = ("import sys; from hrm_deeploop.cli import main; "
            f"code = main(['build-arc', 'sources=[{src}]', 'output_dir={tmp_path / 'ds'}', 'num_aug=2', "
            "'progress=false'] + sys.argv[1:]); "
            "print(code, sorted(m for m in ('hydra', 'omegaconf') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "0 []", p.stdout + p.stderr
    assert (tmp_path / "ds" / "manifest.json").is_file()
    p = subprocess.run([sys.executable, "-c", code, "num_aug=1e5"], capture_output=True, text=True)
    assert p.stdout.strip().splitlines()[-1] == "2 ['hydra', 'omegaconf']", p.stdout + p.stderr
    assert "num_aug=1e5" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_error_line_of_a_schema_check_is_the_same_on_both_paths(capsys):
    assert main(["build-arc", "num_aug=-1"]) == 2
    fast = capsys.readouterr().err
    assert main(["build-arc", "num_aug=-1", "output_dir='data/arc-aug-1000'"]) == 2  # quoted: Hydra's path
    assert capsys.readouterr().err == fast == "hrm-deeploop build-arc: error: arc: num_aug=-1: must be >= 0\n"
