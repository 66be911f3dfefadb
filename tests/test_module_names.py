"""No two modules of the package share a file name: a name says what the module holds,
so a reader (or a traceback, or a `grep -l`) never has to ask which of two `model.py`
is meant."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Names that stand in several places on purpose, each with why.
SHARED_NAMES = {
    # each distribution's own version: the job library (slurm-gavel-job) installs alone
    "_version.py": 2,
    # the Slurm transport protocol (backends/slurm/) and its two implementations, each
    # in the folder of its kind (cli/, rest/)
    "transport.py": 3,
}


def homonyms(root: Path = ROOT) -> dict[str, list[str]]:
    """Each module file name used more than once under slurm_gavel/, with its places."""
    places: dict[str, list[str]] = defaultdict(list)
    for path in sorted((root / "slurm_gavel").rglob("*.py")):
        if path.name != "__init__.py":
            places[path.name].append(str(path.relative_to(root)))
    return {name: where for name, where in places.items() if len(where) > 1}


def test_no_two_modules_share_a_name():
    found = homonyms()
    unexpected = {n: w for n, w in found.items() if len(w) != SHARED_NAMES.get(n, 1)}
    assert unexpected == {}


def test_the_check_finds_a_name_used_twice(tmp_path):
    for folder in ("slurm_gavel/a", "slurm_gavel/b"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "model.py").write_text("")
        (tmp_path / folder / "__init__.py").write_text("")
    assert homonyms(tmp_path) == {"model.py": ["slurm_gavel/a/model.py", "slurm_gavel/b/model.py"]}
