"""The daemon's loop, a component the daemon holds (Daemon.loop): a round, the wait
for the next one, and what happens while it waits: the backend's upkeep, a preempted
job's grace, a config reload (SIGHUP), a stop (SIGTERM). It owns the loop's state
(the stop, reload and wake events, the failures in a row and the backoff they set)
and sees the daemon only through `LoopHost`: its round, its reload, its config.
Kept apart from daemon.py, which is the round and its crash safety.

A round that fails (Slurm unreachable, solver error) is retried after a backoff that
doubles from ``slurm.retry_initial_seconds`` to ``slurm.retry_max_seconds``; the
daemon never gives up on its own."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from slurm_gavel.daemon.logs import event

if TYPE_CHECKING:
    from slurm_gavel.core.backend_hooks import BackendHooks
    from slurm_gavel.daemon.config_types import Config

log = logging.getLogger("slurm_gavel.daemon")

# run()'s exit code when this daemon was deposed (active/standby): the caller starts
# it again, as a standby, with nothing of this life's memory (commands/run.py).
STEP_DOWN = 75


class LoopHost(Protocol):
    """What the loop asks of the daemon (daemon.Daemon)."""

    @property
    def config(self) -> Config:
        """Read each round: a reload replaces it (round_seconds, slurm.retry_*)."""
        ...

    def lead(self, stop: threading.Event) -> bool:
        """Before start: stand by until this daemon leads (True; at once without a
        standby configuration), or until `stop` is set (False)."""
        ...

    def start(self) -> None:
        """Take the state lock and load the saved state (before the first round)."""
        ...

    def round_safely(self) -> bool:
        """One round, every failure logged and counted; True when it succeeded."""
        ...

    def reload(self) -> bool:
        """Read the config file again now; never raises."""
        ...

    def settle_left(self) -> float | None:
        """Seconds of settling after an outage still to go; None when not settling."""
        ...

    def round_index(self) -> int:
        """The rounds done (for the log line at the stop)."""
        ...

    def release(self) -> None:
        """The loop has ended: release the state lock."""
        ...


class DaemonLoop:
    """Rounds until stopped. stop() and request_reload() may be called from any
    thread (the signal handlers); run() from one."""

    def __init__(
        self,
        host: LoopHost,
        hooks: BackendHooks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """clock: the round's own time (the daemon's; a test's may be virtual); the wait
        between rounds is real time (time.monotonic)."""
        self.host = host
        self.hooks = hooks
        self.clock = clock
        self.consecutive_failures = 0  # rounds that failed in a row: the backoff
        self.stop_event = threading.Event()
        self.reload_requested = threading.Event()  # SIGHUP: read the config between rounds
        self._wake = threading.Event()  # ends the wait between rounds early
        # Set (from any thread) when this daemon may no longer act: it steps down.
        self.deposed = threading.Event()

    def backoff_seconds(self) -> float:
        s = self.host.config.slurm
        return min(
            s.retry_max_seconds, s.retry_initial_seconds * 2 ** (self.consecutive_failures - 1)
        )

    def run(self, once: bool = False) -> int:
        """Rounds until stop() (or one round with once=True). Returns an exit code."""
        host = self.host
        if not host.lead(self.stop_event):
            event(log, "stopping", round=None)
            return 0
        host.start()
        try:
            while True:
                t0 = self.clock()
                ok = host.round_safely()
                if self.deposed.is_set():
                    event(log, "stepping_down", logging.WARNING, round=host.round_index())
                    return STEP_DOWN
                self.consecutive_failures = 0 if ok else self.consecutive_failures + 1
                if once:
                    return 0 if ok else 1
                if ok:
                    wait = host.config.settings.round_seconds - (self.clock() - t0)
                    settling = host.settle_left()
                    if settling is not None:  # act as soon as the settling ends
                        wait = min(wait, settling + 0.1)
                else:
                    wait = self.backoff_seconds()
                    event(
                        log,
                        "retrying",
                        logging.WARNING,
                        in_s=round(wait, 3),
                        failures=self.consecutive_failures,
                    )
                gc.collect()  # the round's garbage, outside it (Daemon.round)
                if ok:
                    self.between_rounds()
                if self._idle(wait):
                    if self.deposed.is_set() and not self.stop_event.is_set():
                        event(log, "stepping_down", logging.WARNING, round=host.round_index())
                        return STEP_DOWN
                    event(log, "stopping", round=host.round_index())
                    return 0
        finally:
            host.release()

    def between_rounds(self) -> None:
        """The backend's upkeep off the round's path (its BetweenRoundsUpkeep hook; the
        Slurm backend: the periodic full read); on failure the next observe does what it
        left undone."""
        upkeep = self.hooks.upkeep
        if upkeep is None:
            return
        try:
            upkeep.between_rounds()
        except Exception as e:
            event(log, "between_rounds_failed", logging.WARNING, error=str(e)[:300])

    def _idle(self, seconds: float) -> bool:
        """Wait `seconds` (real time) for the next round; True when asked to stop. A
        reload asked meanwhile, or during the round that just ended, is applied at once:
        between rounds, never during one, and its errors are logged now, not a round later.
        """
        due = time.monotonic() + max(0.0, seconds)
        while not self.stop_event.is_set() and not self.deposed.is_set():
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self.host.reload()
            left = due - time.monotonic()
            if left <= 0:
                return False
            grace = self._grace_due_in()
            if grace is not None and grace <= 0:
                self._enforce_grace()
                continue
            self._wake.wait(left if grace is None else min(left, grace))
            self._wake.clear()
        return True

    def _grace_due_in(self) -> float | None:
        """Seconds until a preempted job's grace ends (the backend's GraceEnforcement
        hook); None without one."""
        grace = self.hooks.grace
        if grace is None:
            return None
        try:
            return grace.grace_due_in()
        except Exception:  # a bug: never let it end the loop; the next act looks again
            log.exception("grace_due_in failed")
            return None

    def _enforce_grace(self) -> None:
        """Requeue-hold the preempted jobs still running after their grace, now rather
        than at the next round (the backend's GraceEnforcement hook, which said one is
        due); a failure is logged and left to the next act, which checks them again."""
        grace = self.hooks.grace
        if grace is None:
            return
        try:
            held, failed = grace.enforce_grace()
        except Exception as e:
            event(log, "grace_check_failed", logging.WARNING, error=str(e)[:300])
            return
        if held:
            event(log, "requeue_held_after_grace", jobs=",".join(held))
        for job_id, why in list(failed.items())[:50]:
            event(log, "action_failed", logging.WARNING, job=job_id, reason=why)

    def stop(self) -> None:
        """Ask the loop to end after the current round (signal handlers call this).

        A round that is acting ends its waits now (the backend's InterruptibleWaits
        hook: a preempted job's grace may be minutes), so the round that acted is
        logged and saved before the process exits, not killed mid-wait by the service
        manager's stop timeout with nothing logged."""
        self._end_waits(self.stop_event)

    def step_down(self) -> None:
        """This daemon may no longer act (active/standby: deposed, or its lease
        lapsed). Called from any thread: the wait between rounds and an act's waits
        end now, and run() returns STEP_DOWN after the current round."""
        self._end_waits(self.deposed)

    def _end_waits(self, why: threading.Event) -> None:
        """Set ``why``, then end the wait between rounds and the act's waits now."""
        why.set()
        self._wake.set()
        waits = self.hooks.waits
        if waits is not None:
            waits.stop_waiting()

    def request_reload(self) -> None:
        """Ask for the config file to be read again between rounds (the SIGHUP handler)."""
        self.reload_requested.set()
        self._wake.set()
