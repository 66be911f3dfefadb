"""`slurm-gavel simulate --trace` of a file it must refuse, for the tests of what the
refusal says."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.cli import main


def refused_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str], csv: str) -> tuple[Path, str]:
    """The trace file holding ``csv`` and what simulate wrote to stderr refusing it
    (exit status 2: the user's error, no traceback)."""
    path = tmp_path / "t.csv"
    path.write_text(csv)
    assert main(["simulate", "--trace", str(path), "--no-progress"]) == 2
    return path, capsys.readouterr().err
