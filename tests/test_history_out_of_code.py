"""History lives in CHANGELOG.md and git, not in the code or the guides: a comment that
says "issue 27" tells a reader nothing the code does not (and the number means nothing
outside this project's tracker). Code, tests, config, tools and the user and admin
docs are checked; EXPERIMENTS.md, benchmarks/README.md and CHANGELOG.md are records of
what was measured when, and may name the work they record."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
RECORDS = {"CHANGELOG.md", "EXPERIMENTS.md", "benchmarks/README.md"}
SUFFIXES = {".py", ".md", ".c", ".h", ".lua", ".sh", ".yaml", ".yml", ".json", ".toml", ""}


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / f for f in out if f not in RECORDS and Path(f).suffix in SUFFIXES]


def issue_numbers(paths: list[Path], root: Path = REPO) -> list[str]:
    found = []
    for path in paths:
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # data
        for n, line in enumerate(text.splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()[:120]}")
    return found


def test_no_issue_numbers_in_code_or_guides() -> None:
    paths = tracked()
    assert any(p.name == "scheduler.py" for p in paths) and any(p.suffix == ".lua" for p in paths)
    found = issue_numbers(paths)
    assert not found, "history belongs in CHANGELOG.md and git:\n" + "\n".join(found)


def test_the_check_sees_an_issue_number(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("# fine\n# the fix for issue 27, see there\n")
    good = tmp_path / "y.py"
    good.write_text("# a moldable job (issue tracker numbers are history)\n")
    assert issue_numbers([bad, good], tmp_path) == ["x.py:2: # the fix for issue 27, see there"]
