"""What ships points only at what ships: no file of the package, the docs, the README
or the configs, and no `--help` text, names the design sketch (DESIGN.md) or the
development notes beside the repository (../shared), which a user never has; and
every "docs/design.md §N" (or "section N") names a section that exists."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_gavel.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ["slurm_gavel", "docs", "conf", "spank", "jobpkg", "workloads", "README.md",
           "CONTRIBUTING.md", "CHANGELOG.md", "EXPERIMENTS.md"]  # fmt: skip
TEXT = {".py", ".md", ".yaml", ".yml", ".json", ".lua", ".c", ".h", ".conf", ".service",
        ".toml", ".sh", ".txt", ".example", ".sysusers", ".tmpfiles", ""}  # fmt: skip
DANGLING = re.compile(r"DESIGN\.md|\.\./shared")
SECTION_REF = re.compile(r"docs/design\.md(?:,? §| section )(\d+(?:\.\d+)?)")


def shipped_files() -> Iterator[Path]:
    for name in SHIPPED:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(top.rglob("*"))
        for p in paths:
            if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts:
                yield p


def help_texts(
    parser: argparse.ArgumentParser, name: str = "slurm-gavel"
) -> Iterator[tuple[str, str]]:
    """`--help` of the command and of every subcommand, nested ones included."""
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from help_texts(sub, f"{name} {sub_name}")


def design_sections() -> set[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))


def test_the_file_walk_sees_the_package_and_the_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in shipped_files()}
    assert {"slurm_gavel/domain/problem.py", "docs/design.md", "README.md"} <= names
    assert "conf/systemd/slurm-gavel.service" in names


def test_no_shipped_file_names_the_sketch_or_the_notes() -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in shipped_files()
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if DANGLING.search(line)
    ]
    assert not bad, "point these at docs/design.md instead:\n" + "\n".join(bad)


def test_no_help_text_names_the_sketch() -> None:
    texts = dict(help_texts(build_parser()))
    assert {"slurm-gavel allocate", "slurm-gavel simulate", "slurm-gavel run"} <= set(texts)
    bad = [name for name, text in texts.items() if DANGLING.search(text)]
    assert not bad, f"--help of {bad} names DESIGN.md or ../shared"
    assert "docs/design.md section 2.1" in texts["slurm-gavel allocate"]


def test_design_section_references_exist() -> None:
    sections = design_sections()
    assert {"1", "2.1", "2.5", "4"} <= sections
    refs = [
        (p.relative_to(ROOT), m.group(1))
        for p in [*shipped_files(), *sorted((ROOT / "tests").rglob("*.py"))]
        for m in SECTION_REF.finditer(p.read_text(errors="replace"))
    ]
    assert len(refs) >= 10, refs  # the repointed references are found at all
    missing = [f"{p}: §{n}" for p, n in refs if n not in sections]
    assert not missing, f"docs/design.md has no such section: {missing}"


@pytest.mark.parametrize("text", ["see DESIGN.md", "../shared/notes/x.sh"])
def test_the_pattern_catches_both_forms(text: str) -> None:
    assert DANGLING.search(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_into_the_design_page_land_on_a_heading() -> None:
    text = (ROOT / "docs" / "design.md").read_text()
    anchors = {slug(h) for h in re.findall(r"^#{1,4} (.+)$", text, re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    for p in shipped_files():
        links += re.findall(r"docs/design\.md#([\w-]+)", p.read_text(errors="replace"))
    assert len(links) >= 12, links
    assert not [a for a in links if a not in anchors], sorted(anchors)
