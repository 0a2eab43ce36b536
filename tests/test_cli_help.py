"""`SUB --help` against the configs on disk, and docs/cli.md against the live CLI: the page's
group table, its examples and their output are checked here, so the page cannot go stale."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hrm_deeploop.cli import COMMANDS, REQUIRED, _usage, compose, config_dir, main
from hrm_deeploop.helptext import group_choices as _choices
from hrm_deeploop.helptext import read_group_file

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def help_of(capsys, *args: str) -> str:
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


def group_line(out: str, group: str) -> str:
    """The `group=` entry of a --help's config-group block, its wrapped lines joined."""
    m = re.search(rf"^  {group}=\s+(.*?)(?=^  \S|^\S|\Z)", out, re.M | re.S)
    assert m, f"no {group}= line in:\n{out}"
    return " ".join(m[1].split())


def names_in(line: str) -> set[str]:
    return {n.rstrip("*") for part in line.split(";") for n in part.split(":")[-1].replace(",", " ").split()}


@pytest.mark.parametrize("name", [n for n, keys in REQUIRED.items() for _ in keys])
def test_required_keys_are_refused_when_unset(capsys, tmp_path, name):
    """REQUIRED (what --help shows as ???) says what the command itself refuses: run it with each
    required key unset in turn (the others given) and the one-line error names that key."""
    for key in REQUIRED[name]:
        others = [f"{k}={tmp_path / k}" for k in REQUIRED[name] if k != key]
        assert main([name, *others]) == 2, (name, key)
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and key in err, (name, key, err)
        assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing written"


def setting_line(out: str, key: str) -> str:
    """`key: value` of a --help's settings, without its description."""
    m = re.search(rf"^{re.escape(key)}: (.*?)(?:\s+# .*)?$", out, re.M)
    assert m, f"no {key}: line in:\n{out}"
    return m[1]


def test_help_marks_required_keys_and_shows_given_ones(capsys):
    out = help_of(capsys, "train")
    assert setting_line(out, "output_dir") == "???" and setting_line(out, "data_dir") == "???"
    out = help_of(capsys, "train", "data_dir=data/x")
    assert setting_line(out, "data_dir") == "data/x" and setting_line(out, "output_dir") == "???"
    assert setting_line(help_of(capsys, "evaluate"), "checkpoint") == "???"
    assert setting_line(help_of(capsys, "generate"), "checkpoint") == "???"  # its default is '', not None


def test_help_describes_each_setting_and_its_choices(capsys):
    """One line per key: its value, then its description from the dataclass (its comment), and the
    choices its __post_init__ accepts."""
    out = help_of(capsys, "generate")
    assert re.search(r"^checkpoint: \?\?\?\s+# step_N.pt or a run folder", out, re.M)
    assert re.search(r"^device: auto\s+# one of: auto, cpu, cuda, cuda:N$", out, re.M)
    assert re.search(r"^top_p: null\s+# nucleus sampling", out, re.M)
    out = help_of(capsys, "train")
    assert re.search(r"^  lr: 0.0001\s+# peak learning rate", out, re.M)
    assert re.search(r"^  name: adam_atan2\s+# adam_atan2 .*\| muon", out, re.M)
    assert re.search(r"^logger: wandb\s+# wandb .*\| none$", out, re.M)
    assert re.search(r"^  scheme: baseline\s+# one of: baseline, deepnorm, deeploop, power, looped_eps, operloop$", out, re.M)
    assert re.search(r"^optim:\s+# `optim.\*`", out, re.M)  # a section: its docstring's first sentence
    out = help_of(capsys, "demo")
    assert re.search(r"^  puzzle_task: sudoku\s+# sudoku \| maze", out, re.M)
    assert re.search(r"^output_dir: demo_out\s+# the report folder", out, re.M)
    for name in ("train", "train-gpt", "generate", "demo", "export", "study"):  # every non-model key described
        settings = help_of(capsys, name).split("??? = required):\n\n", 1)[1]
        bare = [ln for ln in settings.splitlines() if "#" not in ln and not ln.startswith(("model:", "  "))]
        assert not bare, (name, bare)


@pytest.mark.parametrize("name", ["train", "train-gpt", "sweep", "scales"])
def test_help_lists_the_model_and_scaling_choices_the_command_takes(capsys, name):

    out = help_of(capsys, name)
    family = {n: read_group_file(config_dir(), "model", n)[0] for n in group_choices("model")}
    takes = {"train": {"hrm", "trm", "urm"}, "train-gpt": {"gpt"}, "sweep": {"gpt"}}.get(name, set(family.values()))
    assert names_in(group_line(out, "model")) == {n for n, f in family.items() if f in takes}
    assert names_in(group_line(out, "scaling")) == set(group_choices("scaling"))
    assert "operloop" in group_choices("scaling") and {"trm", "trm_tiny"} <= set(group_choices("model"))
    default = compose(name, [], convert=False).scaling.scheme
    assert f"{default}*" in group_line(out, "scaling")
    if name == "train":
        assert "gpt" not in group_line(out, "model")


def test_help_lists_each_trainers_experiments_and_they_compose(capsys):
    """train lists the reasoner setups, train-gpt the GPT ones: together every file on disk, and
    each one listed composes for the command that lists it."""
    listed = {}
    for name in ("train", "train-gpt"):
        line = group_line(help_of(capsys, name), "experiment")
        assert line.startswith("none*;"), line
        listed[name] = names_in(line) - {"none"}
        for experiment in sorted(listed[name]):
            compose(name, [f"experiment={experiment}"])
    # train-vit's own setups (its --help also lists the reasoners' tiny ones, whose keys it has)
    vit = {n for n in names_in(group_line(help_of(capsys, "train-vit"), "experiment")) if n.startswith("loopvit")}
    for experiment in sorted(vit):
        compose("train-vit", [f"experiment={experiment}"])
    assert listed["train"] | listed["train-gpt"] | vit == set(group_choices("experiment"))
    assert not listed["train"] & listed["train-gpt"]
    assert {"gpt2_small_fineweb", "gpt2_medium_fineweb"} == listed["train-gpt"]
    out = help_of(capsys, "train", "experiment=trm_arc1_deeploop")
    assert "trm_arc1_deeploop*" in group_line(out, "experiment") and "deeploop*" in group_line(out, "scaling")


def test_help_and_scales_start_without_torch():
    """Every subcommand's --help (and `scales`, which runs) composes its schema without importing
    torch: the schemas live in torch-free modules (training/train_config.py, models/model_config.py, ...)."""
    code = ("import sys; from hrm_deeploop.cli import COMMANDS, main; assert main(['--help']) == 0; "
            "assert main(['scales']) == 0\n"
            "for n in COMMANDS:\n"
            "    assert main([n, '--help']) == 0, n\n"
            "    assert 'torch' not in sys.modules, f'{n} --help imported torch'\n"
            "print(len(COMMANDS))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(f"\n{len(COMMANDS)}"), "every subcommand checked"


# ---- docs/cli.md against the live CLI --------------------------------------------------------------

def doc_text() -> str:
    return DOC.read_text()


def test_docs_group_table_lists_what_is_on_disk():
    rows = dict(re.findall(r"^\| `(\w+)=` \| [^|]+ \| (.+) \|$", doc_text(), re.M))
    assert set(rows) == {"model", "scaling", "experiment", "preset"}, rows.keys()
    for group, cell in rows.items():
        assert set(re.findall(r"`(\w+)`", cell)) == set(group_choices(group)), group


def test_docs_subcommand_list_is_the_cli_usage():
    block = re.search(r"```console\n\$ hrm-deeploop --help\n(.*?)```", doc_text(), re.S)
    assert block, "docs/cli.md has no `$ hrm-deeploop --help` block"
    assert block[1].rstrip("\n") == _usage()
    assert set(re.findall(r"^  (\S+)  ", block[1], re.M)) == set(COMMANDS)


def doc_examples() -> list[tuple[list[str], str]]:
    """Each `$ hrm-deeploop ARGS` line of the page's console blocks (other than --help) and the
    lines shown under it."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", doc_text(), re.S):
        for m in re.finditer(r"^\$ hrm-deeploop (.+)\n((?:(?!\$ ).*\n)*)", block, re.M):
            if m[1] != "--help":
                out.append((m[1].split(), m[2].rstrip("\n")))
    return out


def test_docs_examples_print_what_the_page_shows(capsys):
    examples = doc_examples()
    assert len(examples) >= 4, examples
    for args, shown in examples:
        code = main(args)
        got = capsys.readouterr()
        text = (got.out + got.err).rstrip("\n")
        if "--help" in args:  # a help example shows the start of the output
            assert code == 0 and text.startswith(shown), (args, shown)
        else:
            assert code == 2 and text == shown, (args, text)


def group_choices(group: str) -> list[str]:
    return _choices(config_dir(), group)
