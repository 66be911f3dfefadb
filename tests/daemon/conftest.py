"""Fixtures shared by the daemon's tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def spool() -> Iterator[Path]:
    """A progress spool other uids can reach (pytest's tmp_path is 0700 root's)."""
    base = Path(tempfile.mkdtemp(prefix="gavel-spool-", dir="/tmp"))
    base.chmod(0o755)
    root = base / "progress"
    root.mkdir(mode=0o755)
    yield root
    shutil.rmtree(base)
