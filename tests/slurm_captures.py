"""What capture.sh recorded of each Slurm release (tests/backends/data/<release>/), for
the tests that read the captures.

Imported as a plain module: pytest puts tests/ on sys.path (it is not a package).
"""

from __future__ import annotations

from pathlib import Path

CAPTURES = Path(__file__).resolve().parent / "backends" / "data"


def scenario(folder: Path = CAPTURES / "22.05") -> dict[str, str]:
    """role -> job id from a capture's scenario.txt (role=ID  # what was submitted)."""
    roles = {}
    for line in (folder / "scenario.txt").read_text().splitlines():
        item = line.split("#", 1)[0].strip()
        if item:
            role, job_id = item.split("=")
            roles[role] = job_id
    return roles
