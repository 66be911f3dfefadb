"""The set-up both live demo tests need: Slurm and root present (or a clear skip/fail),
the SPANK plugin built, and a run folder slurmd's users can read."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from build_lock import build_lock

REPO = Path(__file__).resolve().parents[1]


def demo_run_dir(tmp_path: Path) -> Path:
    """A fresh ``tmp_path/demo`` for ``slurm_gavel_dev.demo --dir``, after checking what
    the live demo needs (skips without Slurm, fails where CI requires it)."""
    if os.geteuid() != 0 or not shutil.which("sbatch"):
        if os.environ.get("SLURM_GAVEL_REQUIRE_SLURM") == "1":
            pytest.fail("the demo test needs Slurm and root: run tools/setup as root")
        pytest.skip("Slurm not installed (or not root)")
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: run tools/setup")
    pytest.importorskip("torch")
    with build_lock():
        build = subprocess.run(
            ["make", "-s", "-C", str(REPO / "spank")], capture_output=True, text=True, timeout=120
        )
    assert build.returncode == 0, build.stderr
    run = tmp_path / "demo"
    run.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(run, 0o755)
    return run
