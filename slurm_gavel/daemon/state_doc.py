"""The document the daemon saves each round (state.json): the scheduler's state, the
inflight record, and what `status` shows (jobs, cluster, the progress it learned).

The private state and the public status views are both made from it
(daemon/publish.py); docs/admin-guide.md says what each field means.
"""

from __future__ import annotations

import os
import time
from typing import Any

from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.inflight import Inflight
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.daemon.state_encode import Encoded
from slurm_gavel.daemon.status_records import cluster_view
from slurm_gavel.domain.cluster_model import ClusterSnapshot


def state_document(
    config: Config,
    started_at: float,
    scheduler_json: dict[str, Any] | Encoded,
    inflight: Inflight | None,
    jobs: dict[str, dict[str, Any]] | Encoded,
    snap: ClusterSnapshot | None,
    progress: ProgressTracker | None,
    notices: dict[str, dict[str, Any]] | None = None,
    run_watch: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The document; the scheduler's state and the jobs may be text encoded before
    (state_encode.py), written as they are."""
    return {
        "saved_at": time.time(),
        "daemon": {
            "pid": os.getpid(),
            "started_at": started_at,
            "config": str(config.source) if config.source else None,
            "policy": config.policy,
            "round_seconds": config.settings.round_seconds,
            "partitions": list(config.partitions),
        },
        "scheduler": scheduler_json,
        "inflight": inflight.to_json() if inflight else None,
        "jobs": jobs,
        "cluster": cluster_view(snap),
        "progress": progress.to_json() if progress else None,
        # what the daemon told owners about how their jobs' runs ended (run_watch.py)
        "notices": notices or {},
        # the crash-loop and ignored-signal counts a restart must not forget
        # (run_watch.py; absent in older files: none)
        "run_watch": run_watch or {},
    }
