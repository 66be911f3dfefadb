"""The comment grammar's shared table and the C enforcer compiled alone, for tests.

tests/data/comment_grammar.json holds comments with the verdict every enforcer must
give (plain / managed / refuse): slurm_gavel/domain/comment_grammar.py,
spank/gavel_grammar.h (through tests/spank/grammar_harness.c, built here with the system
C compiler) and
conf/slurm/job_submit.lua (through a real slurmctld, tests/test_comment_enforcers_on_slurm.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "tests" / "data" / "comment_grammar.json"
HARNESS_SOURCE = REPO / "tests" / "spank" / "grammar_harness.c"


@dataclass(frozen=True)
class Case:
    comment: str
    verdict: str
    why: str


def cases() -> list[Case]:
    doc = json.loads(TABLE.read_text())
    return [Case(c["comment"], c["verdict"], c["why"]) for c in doc["cases"]]


def build_harness(out_dir: Path) -> Path:
    """gcc the harness with spank/gavel_grammar.h; raises with the compiler's words."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc) to build tests/spank/grammar_harness.c")
    exe = out_dir / "grammar_harness"
    base = [cc, "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(REPO / "spank"),
            "-o", str(exe), str(HARNESS_SOURCE)]  # fmt: skip
    # With the sanitizers where the toolchain has them: hostile strings must not make
    # the C code read or write out of bounds, which a verdict alone would not show.
    for extra in (["-fsanitize=address,undefined", "-fno-sanitize-recover=all"], []):
        res = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        if res.returncode == 0:
            return exe
    raise RuntimeError(f"building the grammar harness failed:\n{res.stderr[-2000:]}")


def c_verdicts(exe: Path, comments: list[str], max_weight: str = "1") -> list[tuple[str, str]]:
    """(verdict, why) of the C grammar for each comment, in one process."""
    data = b"".join(c.encode("utf-8") + b"\0" for c in comments)
    res = subprocess.run([str(exe), max_weight], input=data, capture_output=True, timeout=120)
    if res.returncode != 0:
        raise AssertionError(f"grammar harness exit {res.returncode}: {res.stderr[-2000:]!r}")
    lines = res.stdout.decode("ascii").split("\n")[:-1]
    assert len(lines) == len(comments), (len(lines), len(comments), res.stderr[-500:])
    out = []
    for line in lines:
        verdict, _, why = line.partition("\t")
        out.append((verdict, why))
    return out
