"""Build the SPANK plugin and have the session's local Slurm cluster load it.

The root conftest loads the plugin named by SLURM_GAVEL_TEST_SPANK into the cluster it
starts. This folder's tests need ours, so when the variable is unset we build
spank/build/slurm-gavel.so (with job-types.txt beside it, which the plugin uses as its
list of known types) at collection time, before any test starts the cluster, and point
the variable at it. Without gcc/spank.h the slurm tests here fail with the reason.
"""

from __future__ import annotations

import os

import pytest
from spank_build import PLUGIN, ensure_built

if not os.environ.get("SLURM_GAVEL_TEST_SPANK") and ensure_built() is None:
    os.environ["SLURM_GAVEL_TEST_SPANK"] = str(PLUGIN)


@pytest.fixture
def cluster(slurm):  # type: ignore[no-untyped-def]
    """The session's local cluster, which must have loaded our plugin."""
    error = ensure_built()
    assert error is None, error
    loaded = (slurm.run_dir / "plugstack.conf").read_text()
    if "slurm-gavel.so" not in loaded:
        pytest.fail(
            f"the session cluster did not load the plugin (plugstack: {loaded!r}); "
            "SLURM_GAVEL_TEST_SPANK was set after the cluster started"
        )
    return slurm
