"""A sacct run record with plain defaults, for the tests of the accounting readers.

Imported as a plain module: pytest puts tests/accounting on sys.path (it is not a package).
"""

from __future__ import annotations

from typing import Any

from slurm_gavel.accounting.sacct import SacctRun


def sacct_run(**kw: Any) -> SacctRun:
    """A completed 100 s run of job 1 (alice, physics, one V100), `kw` replacing fields."""
    base: dict[str, Any] = dict(
        job_id="1", name="train", user="alice", account="physics", partition="gpu",
        state="COMPLETED", submit=1000.0, start=1010.0, end=1110.0, elapsed=100.0,
        comment="gavel:type=A3C", gpus={"v100": 1}, gpu_total=1,
    )  # fmt: skip
    base.update(kw)
    return SacctRun(**base)
