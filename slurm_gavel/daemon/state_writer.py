"""The daemon's saves (Daemon.writer): state.json each time, the status views after the
act, and the run of saves that failed in a row.

A component with its own state, not a part of the round: how many saves have failed
since the last one that worked (the metric `state_save_failing`, the recovery event)
and each moldable job's last run's GPU count (LastCounts, which only the status view
reads). The round (daemon/daemon.py) says what to save and when; crash safety (which
save carries an inflight record, what a failed save stops) stays there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slurm_gavel.core.learned_rows import job_rows_doc
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.inflight import Inflight
from slurm_gavel.daemon.logs import event
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.mold_view import LastCounts, mold_view
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.daemon.publish import Publisher
from slurm_gavel.daemon.round_failures import save_failed
from slurm_gavel.daemon.row_view import row_view
from slurm_gavel.daemon.state_doc import state_document
from slurm_gavel.daemon.state_encode import Encoded, Fragments
from slurm_gavel.daemon.state_store import StateSaveError, StateStore
from slurm_gavel.daemon.status_records import jobs_view
from slurm_gavel.domain.cluster_model import ClusterSnapshot

log = logging.getLogger("slurm_gavel.daemon")


class StateWriter:
    def __init__(self, store: StateStore, metrics: DaemonMetrics, publisher: Publisher) -> None:
        self.store = store
        self.metrics = metrics
        self.publisher = publisher  # status.json, AdminComment
        self.started_at = time.time()
        self.failed_saves = 0  # in a row, since the last save that worked
        self.mold_counts = LastCounts()  # each moldable job's last run's GPUs (mold_view.py)
        # ha: the lead (holder, generation) each saved state records (daemon/ha.py)
        self.lead: Callable[[], dict[str, Any]] | None = None
        # The jobs view of the last published save. A save before the act (not
        # published: docs/design.md 1.5) writes it again instead of building its own:
        # nothing reads that save's view but `status` on state.json, which then shows
        # what status.json shows, and building it was a third of the daemon's CPU in
        # a steady round at 5,000 jobs (twice per round, once per save).
        # Its text, which that save encoded and the pre-act save writes as it is.
        self.published_jobs: dict[str, dict[str, Any]] | None = None
        self.published_text: Encoded | None = None
        # Each job's status record, learned row, account and allocation keep their
        # JSON text from one save to the next while they are unchanged
        # (state_encode.py): at 20,000 jobs most of them wait through a round. One set
        # for every copy of them: the state's, the inflight record's rows and the
        # pre-round copy's (Daemon._round, through state_plan).
        self.job_texts = Fragments()
        self.row_texts = Fragments()
        self.state_plan = {
            ("plugins", job_rows_doc.NAME, "jobs"): self.row_texts,
            ("jobs",): Fragments(),  # the jobs' accounts
            ("allocation", "fractions"): Fragments(),
            ("allocation_rows",): Fragments(),
        }
        self.plan = {
            **{("scheduler", *path): texts for path, texts in self.state_plan.items()},
            ("inflight", "job_rows", "jobs"): self.row_texts,
        }

    def save(
        self,
        config: Config,
        scheduler_json: dict[str, Any] | Encoded,
        inflight: Inflight | None,
        *,
        state: SchedulerState,
        sched_config: SchedulerConfig,
        snap: ClusterSnapshot | None,
        report: RoundReport | None,
        previous: RoundReport | None,
        progress: ProgressTracker | None,
        publish: bool,
        notices: dict[str, dict[str, Any]] | None = None,
        run_watch: dict[str, Any] | None = None,
    ) -> None:
        """Save state.json and, with `publish`, the status views (not before the act:
        docs/design.md 1.5). StateSaveError when state.json could not be written."""
        self.mold_counts.update(snap)
        jobs, text = (None, None) if publish else (self.published_jobs, self.published_text)
        if jobs is None or text is None:
            jobs = jobs_view(
                snap,
                report,
                sched_config.table,
                previous=previous,
                throughput_of=row_view(state, sched_config),
                moldable_of=mold_view(state, sched_config, snap, self.mold_counts),
            )
            text = Encoded(self.job_texts.encode(jobs))
        doc = state_document(
            config,
            self.started_at,
            scheduler_json,
            inflight,
            text,
            snap,
            progress,
            notices,
            run_watch,
        )
        if self.lead is not None:
            doc["ha"] = self.lead()
        self.store.save(doc, self.plan)
        if publish:
            # the view is made from the records, not their text
            self.publisher.save_view({**doc, "jobs": jobs})
            self.published_jobs, self.published_text = jobs, text
        self.metrics.state_save_failing.set(0)
        if self.failed_saves:
            event(
                log,
                "state_save_recovered",
                logging.WARNING,
                failed_saves=self.failed_saves,
                path=str(self.store.path),
            )
            self.failed_saves = 0

    def failed(self, e: StateSaveError, *, round_index: int, acted: bool) -> None:
        """A save failed: counted and logged (daemon/round_failures.save_failed)."""
        self.failed_saves += 1
        save_failed(self.metrics, e, round_index, acted, self.failed_saves)
