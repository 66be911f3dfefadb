"""The scheduler daemon: config -> backend -> round -> persist -> sleep, forever.

Crash safety, in two saves per round:

1. just before the backend acts, the *pre-round* state is saved with an
   ``inflight`` record (round index, time, placement about to be carried out);
2. after the round, the post-round state is saved with no inflight record.

A daemon killed between the two (mid-act) restarts from (1): it credits the
previous placement with the time up to the killed round's act, counts that
round as done, and then credits whatever it *observes* running on its first
observe with the time since. A daemon killed anywhere else restarts from a
consistent end-of-round state. Either way no fairness accounting is lost, and
the first round after the restart re-places every held job. The same
reconciliation runs after a round that failed half-way (slurmctld went away
mid-act): the in-memory state is rolled back to the last save and reconciled
against what the next observe sees.

A round that fails (Slurm unreachable, solver error) is retried after a backoff
(daemon/round_loop.py). Once slurmctld answers again the daemon observes without acting
for SETTLE_AFTER_OUTAGE_S (daemon/hooked_backend.py), so jobs that ended during the outage are
known to be over before anything is preempted (or requeued).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

from slurm_gavel.core.backend_hooks import BackendHooks
from slurm_gavel.core.learned_rows.job_rows_doc import empty_rows_json, rows_from_json, rows_to_json
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler import account_last_round, run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.config_types import Config
from slurm_gavel.daemon.dry_run import format_plan
from slurm_gavel.daemon.events import RoundEvents
from slurm_gavel.daemon.ha import ActionRefused, Ha
from slurm_gavel.daemon.hooked_backend import DaemonTap
from slurm_gavel.daemon.inflight import Inflight
from slurm_gavel.daemon.logs import event, log_ids
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.daemon.publish import Publisher
from slurm_gavel.daemon.reload import reload_daemon
from slurm_gavel.daemon.restart_clock import RestartClock
from slurm_gavel.daemon.round_failures import round_failed
from slurm_gavel.daemon.round_loop import DaemonLoop
from slurm_gavel.daemon.run_watch import RunWatch, notices_from_json
from slurm_gavel.daemon.scheduler_config import scheduler_config
from slurm_gavel.daemon.state_encode import Encoded, PreRound
from slurm_gavel.daemon.state_store import StateSaveError, StateStore
from slurm_gavel.daemon.state_writer import StateWriter
from slurm_gavel.domain.cluster_model import (
    ClusterBackend,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    RoundPlacement,
)
from slurm_gavel.domain.throughputs import ThroughputTable, load_table
from slurm_gavel.policies import get_policy

log = logging.getLogger("slurm_gavel.daemon")

# The daemon's table with the running jobs' measurements folded in, in its state_dir.
LEARNED_TABLE = "throughputs-learned.json"


class Daemon:
    def __init__(
        self,
        config: Config,
        backend: ClusterBackend,
        *,
        store: StateStore | None = None,
        metrics: DaemonMetrics | None = None,
        table: ThroughputTable | None = None,
        dry_run: bool = False,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        retried_unreachable: Callable[[], bool] = lambda: False,
        ha: Ha | None = None,
    ) -> None:
        """ha: active/standby (config ``ha:``, daemon/ha.py): the daemon stands by until
        it leads, and its backend must ask ha.gate before every action (run.py builds
        it so). None: the state directory's lock makes it the only daemon.

        retried_unreachable: True (once) when the backend had to wait for an
        unreachable slurmctld since the last call (run.py wires it to the retry sleep
        of SlurmCommands), so outages the backend rode out still make the daemon settle.

        The backend's optional hooks are checked here, once (core/backend_hooks.py):
        BackendHookError when one has the wrong shape.
        """
        self.config = config
        self.retried_unreachable = retried_unreachable
        self.backend = backend
        self.hooks = BackendHooks.of(backend)
        self.store = store or StateStore(config.state_dir)
        self.metrics = metrics or DaemonMetrics()
        self.table = table if table is not None else load_table(config.throughput_table)
        self.dry_run = dry_run
        self.out = out or sys.stdout
        self.clock = clock
        self.sched_config = scheduler_config(config, self.table)
        self.state = SchedulerState()
        self.progress = (
            ProgressTracker(config.progress_dir, table=self.table) if config.progress_dir else None
        )
        # each restart's cost, measured (restart_clock.py) and reported with the act:
        # the round keeps it (core/restart_costs/restart_costs.py)
        self.restart_clock = RestartClock(config.settings.preemption_overhead_seconds)
        # how the managed jobs' runs end: crash loops, signals ignored (run_watch.py)
        self.run_watch = RunWatch(config.checkpoint)
        self.tap = DaemonTap(self)
        self.publisher = Publisher(self.store, self.hooks)  # status.json, AdminComment
        # state.json and the status views, and the saves failed in a row (state_writer.py)
        self.writer = StateWriter(self.store, self.metrics, self.publisher)
        self._inflight: Inflight | None = None
        self._needs_reconcile = False
        self.events = RoundEvents()
        self.last_report: RoundReport | None = None
        self._started = False
        self._commands_before: int | None = None
        # the rounds, the wait between them, stop and reload (daemon/round_loop.py)
        self.loop = DaemonLoop(self, self.hooks, clock)
        self.ha = ha
        if ha is not None:
            ha.signal_memory = self.hooks.signal_memory
            ha.on_deposed = self.loop.step_down
            self.writer.lead = ha.status

    # ---- the loop (daemon/round_loop.py): what the CLI and its signal handlers call ------------

    def run(self, once: bool = False) -> int:
        """Rounds until stop() (or one round with once=True). Returns an exit code."""
        return self.loop.run(once)

    def stop(self) -> None:
        """Ask the loop to end after the current round (the SIGTERM handler)."""
        self.loop.stop()

    def request_reload(self) -> None:
        """Ask for the config file to be read again between rounds (the SIGHUP handler)."""
        self.loop.request_reload()

    # ---- the loop's host (loop.LoopHost) ---------------------------------------------------

    def settle_left(self) -> float | None:
        return self.tap.settle_left()

    def round_index(self) -> int:
        return self.state.round_index

    def lead(self, stop: threading.Event) -> bool:
        """Without ha: at once. With it: stand by until this daemon leads (True), or
        until stopped (False); a standby touches no Slurm and loads no state."""
        if self.ha is None or self.dry_run:
            return True
        return self.ha.wait_to_lead(stop)

    def release(self) -> None:
        if self.ha is not None and not self.dry_run:
            self.ha.stop(clean=not self.ha.is_deposed() and self.loop.stop_event.is_set())
        self.store.release()
        self._started = False

    # ---- start / resume ------------------------------------------------------------------

    def start(self) -> None:
        """Take the state lock (not in dry-run) and load the saved state, if any."""
        if self._started:
            return
        # Import the policy now (cvxpy and friends take seconds): the first round's
        # timing then measures the round, and a broken install fails before any lock.
        get_policy(self.config.policy)
        if self.ha is not None and not self.dry_run:
            # Shared with the other hosts' daemons: the lease makes this one the writer.
            self.store.lead(self.ha.check)
        elif not self.dry_run:
            self.store.acquire()
        if not self.dry_run:
            self.store.cleanup_temporaries()
            self.publisher.resolve_privacy(self.config.status_privacy)
        try:
            doc = self.store.load()
        except BaseException:
            self.store.release()
            raise
        self._started = True
        self._restore_signals()
        if doc is None:
            event(log, "state_new", state_dir=str(self.config.state_dir))
            return
        self.state = SchedulerState.from_json(doc["scheduler"], str(self.store.path))
        if self.progress is not None:
            self.progress.load(doc.get("progress"))
        self.run_watch.notices = notices_from_json(doc.get("notices"))
        self.run_watch.load_streaks(doc.get("run_watch"))
        raw = doc.get("inflight")
        self._inflight = Inflight.from_json(raw) if raw else None
        self._needs_reconcile = True
        # The backend reads how the jobs it managed and no longer lists ended (SlurmBackend.resume).
        if self.hooks.resumable is not None:
            self.hooks.resumable.resume(list(self.state.jobs))
        event(
            log,
            "state_loaded",
            round=self.state.round_index,
            jobs=len(self.state.jobs),
            inflight=self._inflight.round_index if self._inflight else None,
        )

    def _restore_signals(self) -> None:
        """Taking over (ha): the checkpoint signals the last leader sent, so that this
        one neither sends them again nor lets those jobs outrun their grace."""
        if self.ha is None or self.hooks.signal_memory is None:
            return
        sent = self.ha.load_signals()
        if sent:
            self.hooks.signal_memory.restore_signals(sent)
            event(log, "signals_restored", jobs=log_ids(tuple(sorted(sent))),
                  generation=self.ha.generation)  # fmt: skip

    # ---- the tap's hooks (daemon_tap.TapHost) --------------------------------------------

    def reconcile_next_round(self) -> None:
        """The round did not act (settling): the next observe trusts reality again."""
        self._needs_reconcile = True

    def reconcile(self, snap: ClusterSnapshot) -> None:
        """After a restart or a failed round: account the lost time, trust reality."""
        if not self._needs_reconcile:
            return
        st = self.state
        infl = self._inflight
        acted: dict[str, JobPlacement] = {}
        if infl is not None and infl.round_index == st.round_index:
            # The killed round acted (at least partly) at infl.time: until then the
            # previous placement ran; count the round as done, with what it learned
            # up to then (its jobs' progress on that placement: inflight.py), so that
            # the next interval begins at the act.
            account_last_round(st, infl.time)
            st.last_round_time = infl.time
            st.round_index += 1
            if infl.job_rows is not None:
                st.plugins.learned_rows = rows_from_json(infl.job_rows)[0]
            acted = infl.placement
        # From then until now, what runs is what Slurm says runs: where that is what
        # the killed round placed, its placement (consolidated or not, as it decided),
        # else where the job was before.
        prev = st.placement
        st.placement = {}
        for o in snap.jobs:
            if o.state is JobState.RUNNING and o.gpu_type is not None and o.job.id in st.jobs:
                p = JobPlacement(o.job.id, o.gpu_type, o.nodes, o.partner)
                old = acted.get(o.job.id)
                if old is None or not p.same_place(old):
                    old = prev.get(o.job.id)
                st.placement[o.job.id] = old if old is not None and p.same_place(old) else p
        event(log, "state_reconciled", round=st.round_index, running=len(st.placement))
        self._inflight = None
        self._needs_reconcile = False

    def refresh_table(self) -> None:
        """Fold the measured throughputs into the table the policy uses, when new ones
        arrived. Always from the configured table with every observation so far: the
        result does not depend on how many rounds ran (or on restarts in between), and
        the next reallocation (job set change) uses it."""
        if self.progress is None or not self.progress.changed:
            return
        self.progress.changed = False
        from slurm_gavel.core import estimate
        from slurm_gavel.daemon import pair_cells

        # Only cells that several users' jobs agreed on, each bounded (daemon/progress_learning.py);
        # pair cells learned so are marked as estimates until profiled (pair_cells.py).
        table = estimate.update_table(self.table, self.progress.table_observations())
        table = pair_cells.update_pairs(table, self.progress.pair_observations())
        self.sched_config = replace(self.sched_config, table=table)
        if not self.dry_run:
            # What the running jobs taught it, in the table format: an admin can review
            # it and point throughput_table at a copy (day one on GPU types the
            # configured table lacks: the cells measured so far). A view: the daemon
            # never reads it back, so a failed write costs nothing but the view.
            try:
                table.save(self.store.dir / LEARNED_TABLE)
            except OSError as e:
                event(log, "learned_table_not_saved", logging.WARNING, error=str(e))

    def before_act(self, placement: RoundPlacement) -> None:
        """Save the pre-round state with the placement about to be carried out."""
        # self.state is the round's own (run_round mutates it): its rows as learned so far
        rows = rows_to_json(self.state.plugins.learned_rows) or empty_rows_json()
        self._inflight = Inflight(
            placement.round_index, placement.start, dict(placement.jobs), rows
        )
        if not self.dry_run:
            # The round before's rows are left out: a restart from this save always takes
            # the record's (reconcile), so the file carries one copy of the rows, not two
            # (at 5,000 jobs each copy is ~60 ms of encoding: benchmarks/README.md).
            self._save(self._pre_round.state, inflight=self._inflight, publish=False)

    # ---- one round -------------------------------------------------------------------------

    def round(self) -> RoundReport:
        """One round; raises on failure after rolling the in-memory state back.

        Python's cyclic garbage collector is off during it: at 5,000 jobs a round
        allocates and frees enough objects to set off full passes over everything the
        daemon holds (~0.1 s each, on the round's path; benchmarks/README.md "A daemon
        round"). The loop collects between rounds instead, while the daemon waits anyway."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._round()
        finally:
            if collecting:
                gc.enable()

    def _round(self) -> RoundReport:
        # A deep copy: to_json() shares the live dicts, which the round is about to
        # mutate. As JSON text (C code) rather than copy.deepcopy (Python, one object
        # at a time; benchmarks/README.md "A daemon round"), which the pre-act save
        # writes as it is and a failed round parses back (state_encode.PreRound).
        self._pre_round = PreRound.of(self.state.to_json(), self.writer.state_plan)
        if self.dry_run:
            # Nothing a dry run plans happens, so each round starts from what Slurm
            # reports, not from the previous (imagined) round.
            self._needs_reconcile = True
        t0 = self.clock()
        self._commands_before = self.hooks.commands_issued()
        try:
            self.state, report = run_round(self.state, self.tap, self.sched_config)
        except BaseException:
            self.restart_clock.discard()
            self.state = SchedulerState.from_json(self._pre_round.restore())
            self._needs_reconcile = True  # uses self._inflight if act had begun
            raise
        self._inflight = None
        self.restart_clock.commit()
        # The round has acted: log it first, so a save that fails (a full disk) cannot
        # hide what was done to Slurm. A failed save here keeps the new state in memory
        # (it is what Slurm now runs); on disk the inflight record of this round stays,
        # from which a restart would reconcile, and the next round saves again.
        self._record(report, self.clock() - t0)
        self.events.rows_bounded(self.state.plugins.learned_rows.clamped)
        self.last_report = report
        if not self.dry_run:
            try:
                self._save(self.state.to_json(), inflight=None, report=report)
            except StateSaveError as e:
                self.writer.failed(e, round_index=report.round_index, acted=True)
            else:
                self.publisher.admin_comments()
            self._save_signals()
        self.tap.give_back(report)  # held jobs no round can place go back to Slurm
        return report

    def _save_signals(self) -> None:
        """ha: the signals still awaiting their job's exit, for the next leader (the
        gate wrote each ahead of its send; this drops the answered ones)."""
        if self.ha is None or self.hooks.signal_memory is None:
            return
        try:
            self.ha.save_signals()
        except ActionRefused:
            raise
        except OSError as e:
            event(log, "ha_signals_not_saved", logging.WARNING, error=str(e)[:300])

    def round_safely(self) -> bool:
        """One round with every failure logged and counted; True when it succeeded."""
        try:
            self.round()
        except ActionRefused:
            # Deposed (ha.py logged and counted it): nothing more goes to Slurm; the
            # loop ends this life and the daemon stands by again.
            return False
        except StateSaveError as e:
            # The pre-round save (the inflight record) failed: nothing was done to
            # Slurm, and nothing will be until a save succeeds (crash safety needs it).
            self.writer.failed(e, round_index=self.state.round_index, acted=False)
            return False
        except Exception as e:
            if round_failed(self.metrics, e):
                self.tap.outage = True
            return False
        return True

    def _save(
        self,
        scheduler_json: dict[str, Any] | Encoded,
        inflight: Inflight | None,
        report: RoundReport | None = None,
        *,
        publish: bool = True,
    ) -> None:
        """Save state.json and, with `publish`, the status views (state_writer.py)."""
        self.writer.save(
            self.config, scheduler_json, inflight, state=self.state,
            sched_config=self.sched_config, snap=self.tap.last_snapshot, report=report,
            previous=self.last_report, progress=self.progress, publish=publish,
            notices=self.run_watch.notices_json(), run_watch=self.run_watch.streaks_json(),
        )  # fmt: skip

    def _record(self, report: RoundReport, duration: float) -> None:
        """Metrics, the round's log lines (daemon/events.py) and a dry run's plan."""
        issued = self.hooks.commands_issued()
        commands = None
        if issued is not None and self._commands_before is not None:
            commands = issued - self._commands_before
        snap = self.tap.last_snapshot
        self.metrics.record_round(
            report,
            snap,
            duration,
            commands,
            self.state.allocation,
            self.hooks.checkpoint_waits(),
        )
        self.metrics.record_restart_costs(report.result.restart_costs, snap)
        self.events.record(
            report,
            snap,
            self.hooks.warnings(),
            duration=duration,
            commands=commands,
            dry_run=self.dry_run,
        )
        if self.dry_run:
            self.out.write(format_plan(report, self.config))
            self.out.flush()

    def reload(self) -> bool:
        """Read the config file and its table again now (daemon/reload.py); never raises.
        True when the new config is in use, False when it was refused."""
        return reload_daemon(self)
