"""The documented commands cannot rot.

1. Every `hrm-deeploop SUB key=value ...` line (also `python -m hrm_deeploop.cli`, `torchrun ... -m
   hrm_deeploop.cli`) in a ```bash block of README.md and docs/*.md names a real subcommand and
   composes to its typed config, as the CLI would compose it before running: a renamed key, a
   removed choice or an out-of-range value fails here, naming the page and line. Placeholder values
   (`...`, `$VAR`, `<host>`, upper-case words such as `R` or `DATA`) become `1`, or are left out for
   config groups (`scaling=SCHEME`).
2. The workflow blocks, a ```bash block right after a `<!-- workflow: NAME STEP -->` line, run
   verbatim, in bash, in a fresh folder, the blocks of one NAME in STEP order: what a reader pastes is
   what runs. Sizes come from shell variables the page shows with the reader's value as the default
   (`train.max_steps=${STEPS:-1500}`); the test sets them small (`TINY_ENV`), and nothing else is
   changed. A command that fails makes the test fail with the page and line it came from.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # docs/notebook/ holds dated logs of older code
MARKER = re.compile(r"^<!-- workflow: (\S+) (\d+)\b.*-->$")

# The size variables of the workflow blocks, set small for the test (a page writes `${NAME:-default}`,
# the default being what a reader runs). Nothing else of a documented line is changed.
TINY_ENV: dict[str, str] = {
    "AUG": "1",  # augmented views per task or puzzle (build-arc, build-puzzles, viz-arc num_aug)
    "N": "32",  # generated training puzzles (generate-puzzles count_train; a batch of 16 fills from them)
    "N_TEST": "4",  # generated test puzzles (count_test)
    "STEPS": "4",  # training steps (train / train-gpt / sweep train.max_steps)
    "DOCS": "300",  # demo corpus documents (prepare-text demo_docs)
    "VAL_TOKENS": "4096",  # held-out tokens (prepare-text val_tokens)
    "TTT_AUG": "1",  # ttt num_aug: the views of each task
    "TTT_STEPS": "2",  # ttt steps: training steps of each task's copy
}
SIZE_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}")
SLOW = {"arc-data", "evaluation", "gpt", "make-challenges", "first-ten", "per-task", "hub-local"}  # over ~10 s on the 2-core machine: `-m slow` (.ci/run runs them after the suite)

GROUPS = {"model", "scaling", "experiment", "preset", "launcher", "trainer", "kind"}
PLACEHOLDER = re.compile(r"\.\.\.|\$|<|^\[?[A-Z][A-Z0-9_]*\]?$")
SEPARATORS = {";", "&&", "||", "|", "&", "do", "then", "done", "else", "fi"}


@dataclass
class Line:
    page: Path
    number: int  # 1-based, of the first physical line
    text: str  # continuation lines joined

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.number}"


@dataclass
class Block:
    page: Path
    workflow: tuple[str, int] | None
    lines: list[Line]


def bash_blocks(page: Path) -> list[Block]:
    """The ```bash blocks of a page, each with its logical lines and its workflow marker."""
    raw = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(raw):
        if raw[i].strip() == "```bash":
            m = MARKER.match(raw[i - 1].strip()) if i else None
            j, lines = i + 1, []
            while raw[j].strip() != "```":
                start, text = j, raw[j]
                while text.endswith("\\") and raw[j + 1].strip() != "```":
                    j += 1
                    text = text[:-1] + " " + raw[j].strip()
                lines.append(Line(page, start + 1, text))
                j += 1
            blocks.append(Block(page, (m[1], int(m[2])) if m else None, lines))
            i = j
        i += 1
    return blocks


def commands(line: Line) -> list[tuple[str, list[str]]]:
    """(subcommand, arguments) of every hrm-deeploop call on a logical line."""
    try:
        tokens = shlex.split(line.text, comments=True)
    except ValueError:  # an unterminated quote: a multi-line shell string, not a command line
        return []
    segments, cur = [], []
    for tok in tokens:
        parts = re.split(r"(;|&&|\|\|)$", tok)
        word = parts[0]
        if word in SEPARATORS:
            segments.append(cur)
            cur = []
            continue
        if word:
            cur.append(word)
        if len(parts) > 1:
            segments.append(cur)
            cur = []
    segments.append(cur)
    out = []
    for seg in segments:
        for k, tok in enumerate(seg):
            if tok == "hrm-deeploop" or (tok == "-m" and seg[k + 1:k + 2] == ["hrm_deeploop.cli"]):
                rest = seg[k + 1:] if tok == "hrm-deeploop" else seg[k + 2:]
                if rest:
                    out.append((rest[0], rest[1:]))
                break
    return out


def documented_commands() -> list[tuple[Line, str, list[str]]]:
    return [(line, sub, args) for page in PAGES for block in bash_blocks(page) for line in block.lines
            for sub, args in commands(line)]


def compose_check(sub: str, args: list[str]) -> str | None:
    """None if the documented arguments compose to `sub`'s typed config, else the one-line error."""
    from hrm_deeploop import cli
    from hrm_deeploop.errors import ConfigError, UserError

    if sub in ("-h", "--help", "help") or re.fullmatch(r"[A-Z]+", sub):  # the usage, or `SUB` itself
        return None
    if sub not in cli.COMMANDS:
        return f"unknown subcommand '{sub}'"
    overrides = []
    for arg in args:
        arg = SIZE_VAR.sub(lambda m: m[2], arg)  # `${STEPS:-1500}`: the reader's value
        if arg in ("-h", "--help") or arg.startswith("$"):
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            if PLACEHOLDER.search(arg):  # `<base>`: a stand-in for several key=value words
                continue
            return f"'{arg}' is not key=value"
        if PLACEHOLDER.search(value):
            if key in GROUPS:
                continue
            value = "[1]" if value.startswith("[") else "1"
        overrides.append(f"{key}={value}")
    try:
        cli.compose(sub, overrides)
    except (ConfigError, UserError) as e:
        return str(e)
    return None


COMMANDS = documented_commands()


def test_the_extractor_finds_the_documented_commands():
    found = {(line.page.name, sub) for line, sub, _ in COMMANDS}
    assert {("README.md", "demo"), ("evaluation.md", "evaluate"), ("looped-gpt.md", "train-gpt"),
            ("reproduce.md", "train")} <= found
    line = Line(ROOT / "x.md", 1, "for s in a b; do OMP_NUM_THREADS=1 hrm-deeploop train x=$s y=2; done  # c=3")
    assert commands(line) == [("train", ["x=$s", "y=2"])]
    assert commands(Line(ROOT / "x.md", 1, "pip install -e . && hrm-deeploop demo")) == [("demo", [])]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_documented_commands_compose(page):
    bad = [f"{line.where}: hrm-deeploop {sub}: {err}" for line, sub, args in COMMANDS if line.page == page
           for err in [compose_check(sub, args)] if err]
    assert not bad, "\n".join(bad)


def workflows() -> dict[str, list[Block]]:
    out: dict[str, list[Block]] = {}
    for page in PAGES:
        for block in bash_blocks(page):
            if block.workflow:
                out.setdefault(block.workflow[0], []).append(block)
    return {name: sorted(blocks, key=lambda b: b.workflow[1]) for name, blocks in sorted(out.items())}


WORKFLOWS = workflows()


def script(blocks: list[Block]) -> str:
    """The blocks as one bash script; each line first records where it came from."""
    out = ["set -eE -o pipefail",
           "trap 'echo \"docs workflow failed at $DOCLINE\" >&2; exit 1' ERR",
           'hrm-deeploop() { PYTHONPATH="$ROOT" "$PY" -m hrm_deeploop.cli "$@"; }',
           'python() { PYTHONPATH="$ROOT" "$PY" "$@"; }']
    for block in blocks:
        for line in block.lines:
            out += [f"DOCLINE={shlex.quote(line.where + ': ' + line.text.strip()[:160])}", line.text]
    return "\n".join(out) + "\n"


def run_workflow(name: str, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    env = {**os.environ, "ROOT": str(ROOT), "PY": sys.executable, "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT), **TINY_ENV}
    return subprocess.run(["bash", "-c", script(WORKFLOWS[name])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)


def test_workflows_run_verbatim_and_size_only_through_the_tests_variables():
    """Each workflow line runs as the page writes it; a size variable of a page is one the test sets
    small (else a reader's full size would run in CI), and every variable the test sets is used."""
    used = set()
    for blocks in WORKFLOWS.values():
        text = script(blocks)
        for block in blocks:
            for line in block.lines:
                assert "\n" + line.text + "\n" in text, f"{line.where}: not run verbatim"
                for var, default in SIZE_VAR.findall(line.text):
                    assert var in TINY_ENV, f"{line.where}: ${{{var}:-{default}}} is not set small by TINY_ENV"
                    used.add(var)
    assert used == set(TINY_ENV), f"TINY_ENV sets variables no workflow uses: {set(TINY_ENV) - used}"
    assert compose_check("train", ["experiment=hrm_tiny_cpu", "train.max_steps=${STEPS:-0}"])  # the default is checked


def test_every_workflow_is_listed():
    assert set(WORKFLOWS) >= {"puzzles", "evaluation", "arc-data", "gpt", "unseen", "text", "per-task", "first-ten"}
    for name, blocks in WORKFLOWS.items():
        steps = [b.workflow[1] for b in blocks]
        assert steps == list(range(1, len(steps) + 1)), f"workflow {name}: steps {steps}, expected 1..{len(steps)}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else [])
                                  for n in WORKFLOWS])
def test_documented_workflow_runs(name, tmp_path):
    r = run_workflow(name, tmp_path)
    if r.returncode:
        tail = [ln for ln in r.stderr.splitlines() if "%|" not in ln and ln.strip()][-25:]  # no progress bars
        pytest.fail(f"workflow {name} (exit {r.returncode}):\n" + "\n".join(tail), pytrace=False)


def test_a_broken_documented_command_fails_naming_its_line(tmp_path):
    """The runner itself: a page whose second command is broken fails at that line."""
    page = tmp_path / "page.md"
    page.write_text("<!-- workflow: broken 1 -->\n```bash\nhrm-deeploop scales\n"
                    "hrm-deeploop scales scaling.pp=0.5\n```\n")
    blocks = bash_blocks(page)
    assert blocks[0].workflow == ("broken", 1)
    env = {**os.environ, "ROOT": str(ROOT), "PY": sys.executable, "PYTHONPATH": str(ROOT)}
    text = script(blocks).replace(str(tmp_path) + "/", "")
    r = subprocess.run(["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "page.md:4" in r.stderr and "scaling.pp" in r.stderr
    assert compose_check("scales", ["scaling.pp=0.5"])
