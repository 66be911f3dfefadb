"""Every relative link of the README, the docs and the other top-level pages lands on a
file that exists, and every `#anchor` on a heading of its page; every page in docs/ is
in the site's navigation (mkdocs.yml) and every page the navigation names exists.

tools/test also builds the site with `mkdocs build --strict`, which checks docs/ the same
way; this test covers the pages outside docs/ too (the README first: the front door a
newcomer reads on the forge), needs no mkdocs, and runs in the quick tier."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The pages read on the forge, beside the site's own pages.
PAGES = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "EXPERIMENTS.md",
         "benchmarks/README.md", "docker/README.md"]  # fmt: skip

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def pages() -> list[Path]:
    return [ROOT / p for p in PAGES] + sorted(DOCS.rglob("*.md"))


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield i, line


def slug(heading: str) -> str:
    """The anchor GitHub and mkdocs give a heading: lower case, punctuation dropped,
    spaces to '-' (the same rule as tests/test_shipped_references.py)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page.read_text()):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            # A repeated heading: mkdocs numbers it base_1, GitHub base-1.
            out |= {base} if n == 0 else {f"{base}_{n}", f"{base}-{n}"}
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for i, line in prose_lines(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("``", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{i}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}: no such heading in {dest.relative_to(root)}")
    return bad


# A path into the repository as the guides write one: from a top-level folder.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:slurm_gavel|slurm_gavel_dev|tests|conf|tools|docs|benchmarks|spank"
    r"|workloads|jobpkg|docker)/[\w./*-]*[\w*])"
)
BUILT = ("spank/build/",)  # made by `make -C spank`, named where the guides install them


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    """The repository paths a page names (a glob counts when it matches) that do not exist."""
    bad = []
    for i, line in enumerate(page.read_text().splitlines(), 1):
        for m in REPO_PATH.finditer(line):
            path = m.group(1).rstrip(".")
            found = any(root.glob(path)) if "*" in path else (root / path).exists()
            if not found and not path.startswith(BUILT):
                bad.append(f"{page.relative_to(root)}:{i}: {path}")
    return bad


def test_every_repository_path_the_readme_and_the_guides_name_exists() -> None:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    named = sum(len(REPO_PATH.findall(p.read_text())) for p in found)
    assert named >= 100, named  # the pattern finds the paths at all
    bad = [b for p in found for b in missing_paths(p)]
    assert not bad, "these paths no longer exist (renamed? say the new one):\n" + "\n".join(bad)


def test_the_path_check_catches_a_stale_module(tmp_path: Path) -> None:
    (tmp_path / "slurm_gavel" / "backends").mkdir(parents=True)
    (tmp_path / "slurm_gavel" / "backends" / "simulated.py").touch()
    page = tmp_path / "README.md"
    page.write_text(
        "`slurm_gavel/backends/simulated.py` and `slurm_gavel/backends/slurmrestd*.py`,\n"
        "slurm_gavel/backends/*.py, spank/build/slurm-gavel.so and tests/gone.py.\n"
    )
    assert missing_paths(page, tmp_path) == [
        "README.md:1: slurm_gavel/backends/slurmrestd*.py",
        "README.md:2: tests/gone.py",
    ]


def nav_pages(nav: object) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def test_every_relative_link_lands() -> None:
    found = [p for p in pages() if p.exists()]
    assert ROOT / "README.md" in found and DOCS / "index.md" in found
    links = sum(len(LINK.findall(line)) for p in found for _, line in prose_lines(p.read_text()))
    assert links >= 50, links  # the pattern finds the links at all
    bad = [b for p in found for b in broken_links(p)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_site_navigation_names_every_docs_page_and_only_those() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config["strict"] is True
    listed = list(nav_pages(config["nav"]))
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk, "mkdocs.yml's nav and docs/*.md differ"
    assert len(listed) == len(set(listed)), "a page is listed twice"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[a](nope.md)", "no such file"),
        ("see [b](design.md#no-such-heading).", "no such heading"),
        ("[c](#nor-this)", "no such heading"),
        ("[d](../nope/)", "no such file"),
    ],
)
def test_the_checker_catches_a_broken_link(tmp_path: Path, text: str, problem: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "design.md").write_text("# Design\n\n## 1. The round\n")
    page = docs / "p.md"
    page.write_text(f"# P\n\n{text}\n")
    bad = broken_links(page, tmp_path)
    assert len(bad) == 1 and problem in bad[0], bad


def test_the_checker_passes_good_links_and_ignores_code(tmp_path: Path) -> None:
    (tmp_path / "design.md").write_text("# Design\n\n## 1. The round\n\n## `code` heading\n")
    page = tmp_path / "p.md"
    page.write_text(
        "# P\n\n[round](design.md#1-the-round) [code](design.md#code-heading) [self](#p)\n"
        "[web](https://example.org/x.md) `[not](a-link.md)`\n\n```\n[nor](this.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == []
