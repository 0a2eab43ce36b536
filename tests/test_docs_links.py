"""Every relative link in README.md and the pages under docs/ points at a file that exists, and every
`#anchor` at a heading of that file (GitHub's slug rules: lower case, punctuation dropped,
spaces to hyphens)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_slug_follows_github():
    assert slug("4.5 The paper's HRM prediction: C_L x p, and kappa along C_L") == \
        "45-the-papers-hrm-prediction-c_l-x-p-and-kappa-along-c_l"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http(s), mailto
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '#{anchor}' in {dest.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


REPO_PATH = re.compile(r"`((?:hrm_deeploop|arc_data|eval|tests|benchmarks|configs|docs)/[\w./-]+\.(?:py|yaml|md|sh|png|gz|txt))"
                       r"(?:::[\w\[\]-]+)?`")


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name != "notebook"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_named_repository_files_exist(page):
    """A file of this repository named in backticks (`eval/predict.py`, `tests/test_x.py::test_y`)
    on a current page exists: a page cannot keep pointing at a file that moved. (docs/notebook/
    is a dated log: it names the files of its day.)"""
    missing = sorted({m[1] for m in REPO_PATH.finditer(page.read_text()) if not (ROOT / m[1]).exists()})
    assert not missing, f"{page.name}: no such file: " + ", ".join(missing)
