"""Running a command in a child process from a test, output captured as text.

Imported as a plain module: pytest puts tests/ on sys.path (it is not a package).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_ok(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run argv; assert it exited 0, showing its stderr when it did not."""
    res = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert res.returncode == 0, f"{argv[:4]} exited {res.returncode}:\n{res.stderr}"
    return res


def python_module(*args: str) -> list[str]:
    """The argv of `python -m ARGS` with this interpreter."""
    return [sys.executable, "-m", *args]
