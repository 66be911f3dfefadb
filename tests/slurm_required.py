"""SLURM_GAVEL_REQUIRE_SLURM=1 (tools/test, CI): a Slurm test that skips is a failure.

Every skip of a test marked ``@pytest.mark.slurm`` counts, not only the session
fixture's "Slurm not installed": a test's own ``pytest.skip`` (no gcc, no runuser,
no .venv...) would otherwise let CI pass without ever running it. The root conftest
imports the hook; tests/tools/test_require_slurm.py runs it on a throwaway suite.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE = "SLURM_GAVEL_REQUIRE_SLURM"


def required() -> bool:
    return os.environ.get(REQUIRE) == "1"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and item.get_closest_marker("slurm") is not None
        and required()
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a Slurm test skipped while {REQUIRE}=1 (CI): {reason}"
    return report
