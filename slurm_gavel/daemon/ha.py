"""The daemon's side of active/standby (``ha:``), a component the daemon holds
(Daemon.ha): waiting as a standby, the keeper thread that renews the lease, the gate
every Slurm action passes, and the checkpoint signals saved for the next leader.

The rules (daemon/lease.py has the lease itself, docs/design.md "Active/standby" why):

* a standby reads the lease and writes its heartbeat, nothing else: no Slurm command,
  no state loaded, until it has claimed the next generation;
* the leader renews every third of the lease from a thread of its own, so a round
  that waits out a long grace still renews; a pause of the whole process (SIGSTOP, a
  stall) stops the renewals too, which is the point;
* before every action batch the gate asks the lease (Leadership.may_act): once it
  refuses, nothing more goes to Slurm, the refusal is logged and counted, and the
  loop ends this life of the daemon, which starts again as a standby;
* every action batch is logged with the generation (``action`` events), so that a
  late one would be recognisable; the state file carries the generation too;
* before a checkpoint signal goes out, the jobs and the time are written to
  ``ha/signals.json`` (write-ahead): a leader killed mid-round leaves its successor
  the signals it sent, which are then neither sent again nor left to outrun their
  grace (SignalMemory hook).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_gavel.atomic import write_atomic
from slurm_gavel.core.backend_hooks import SignalMemory
from slurm_gavel.daemon.config_types import HaConfig
from slurm_gavel.daemon.lease import HaFiles, Leadership, Role, new_holder_id
from slurm_gavel.daemon.logs import event, log_ids
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import JobId

log = logging.getLogger("slurm_gavel.daemon")

SIGNALS_FILE = "signals.json"
# A signal older than this is no one's grace any more (the longest grace is far less):
# an entry for a job never seen again is dropped rather than kept for ever.
SIGNAL_KEEP_S = 7 * 24 * 3600.0
MAX_SIGNALS = 100_000


class ActionRefused(Exception):
    """The gate refused a Slurm action: this daemon is not (or no longer surely) the
    leader. Nothing was sent; the daemon steps down."""


class Ha:
    """Leadership for one daemon life (see the module notes)."""

    def __init__(
        self,
        config: HaConfig,
        metrics: DaemonMetrics,
        *,
        holder: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.files = HaFiles(config.shared_dir)
        self.holder = holder or new_holder_id()
        self.lead = Leadership(
            self.files,
            self.holder,
            lease_s=config.lease_seconds,
            margin_s=config.margin,
            clock=clock,
            wall=wall,
        )
        self.wall = wall
        # How often a standby looks at the lease: a takeover comes at most this long
        # after the lease expires.
        self.poll_s = min(1.0, config.lease_seconds / 10)
        self.renew_s = config.lease_seconds / 3
        self._lock = threading.Lock()  # the keeper's renewals vs the gate's checks
        self._journal_lock = threading.Lock()
        self._stop_keeper = threading.Event()
        self._keeper: threading.Thread | None = None
        self.on_deposed: Callable[[], None] = lambda: None  # the loop's step-down
        self.signal_memory: SignalMemory | None = None  # the backend's (Daemon wires it)
        self._told_deposed = False
        self._beat_failing = False

    @property
    def generation(self) -> int:
        return self.lead.generation

    def is_deposed(self) -> bool:
        return self.lead.role is Role.DEPOSED

    # ---- standby ---------------------------------------------------------------------

    def wait_to_lead(self, stop: threading.Event) -> bool:
        """Stand by until this daemon claims the lead (True) or `stop` is set (False).
        Touches the shared directory only: the lease, the claims and a heartbeat."""
        self.metrics.ha_leader.set(0)
        try:
            self.files.ensure()
        except OSError as e:  # a read-only or absent mount: look anyway, say why
            event(log, "ha_shared_dir_unwritable", logging.WARNING, error=str(e)[:300])
        event(log, "ha_standby", holder=self.holder, lease_s=self.config.lease_seconds,
              shared_dir=str(self.config.shared_dir))  # fmt: skip
        failing = False
        beat_due = 0.0
        while not stop.is_set():
            try:
                led = self.lead.poll()
            except OSError as e:
                if not failing:
                    event(log, "ha_poll_failed", logging.WARNING, error=str(e)[:300])
                failing, led = True, False
            else:
                failing = False
            if led:
                self._led()
                return True
            seen = self.lead.last_seen
            if seen is not None:
                self.metrics.ha_generation.set(seen.generation)
            if time.monotonic() >= beat_due:
                beat_due = time.monotonic() + self.renew_s
                self._heartbeat(seen.holder if seen else None)
            stop.wait(self.poll_s)
        self.files.drop_heartbeat(self.holder)
        return False

    def _heartbeat(self, leader: str | None) -> None:
        """Write this standby's heartbeat (for `status`); a failure is logged once
        until a write succeeds again."""
        try:
            self.files.heartbeat(
                self.holder, {"holder": self.holder, "at": self.wall(), "leader": leader}
            )
        except OSError as e:
            if not self._beat_failing:
                event(log, "ha_heartbeat_failed", logging.WARNING, error=str(e)[:300])
            self._beat_failing = True
        else:
            self._beat_failing = False

    def _led(self) -> None:
        self.files.drop_heartbeat(self.holder)
        why = self.lead.took_over_because or "expired"
        previous = self.lead.last_seen
        self.metrics.ha_leader.set(1)
        self.metrics.ha_generation.set(self.generation)
        self.metrics.ha_takeovers.labels(why=why.replace(" ", "_")).inc()
        event(
            log,
            "ha_leader",
            logging.WARNING,
            generation=self.generation,
            holder=self.holder,
            why=why,
            previous=previous.holder if previous else None,
            previous_generation=previous.generation if previous else None,
        )
        self._stop_keeper.clear()
        self._keeper = threading.Thread(target=self._keep, name="gavel-lease", daemon=True)
        self._keeper.start()

    # ---- leader ----------------------------------------------------------------------

    def _keep(self) -> None:
        """The keeper thread: renew every third of the lease until deposed or stopped."""
        failing = False
        while not self._stop_keeper.wait(self.renew_s):
            with self._lock:
                ok = self.lead.renew()
                role = self.lead.role
            if ok:
                if failing:
                    event(log, "ha_renew_recovered", generation=self.generation)
                failing = False
                continue
            if role is Role.DEPOSED:
                self._deposed()
                return
            if not failing:
                event(log, "ha_renew_failed", logging.WARNING, generation=self.generation,
                      renewed_ago_s=round(self.lead.renewed_ago(), 3))  # fmt: skip
            failing = True

    def _deposed(self) -> None:
        self.metrics.ha_leader.set(0)
        if not self._told_deposed:
            self._told_deposed = True
            event(log, "ha_deposed", logging.WARNING, generation=self.generation,
                  why=self.lead.why_deposed)  # fmt: skip
        self.on_deposed()

    def check(self) -> None:
        """Raise ActionRefused unless this daemon may act now (the gate's check, also
        before each state save)."""
        with self._lock:
            why = self.lead.may_act()
        if why is not None:
            self._deposed()
            raise ActionRefused(why)

    def gate(self, kind: str, ids: Sequence[JobId]) -> None:
        """Before every Slurm action batch (backends/slurm/fenced.py): refuse it unless
        this daemon surely leads; log it with the generation; a checkpoint signal is
        written ahead to signals.json."""
        try:
            self.check()
        except ActionRefused as e:
            self.metrics.ha_refused_actions.inc()
            event(log, "action_refused", logging.WARNING, kind=kind, jobs=log_ids(tuple(ids)),
                  generation=self.generation, why=str(e))  # fmt: skip
            raise
        event(log, "action", kind=kind, jobs=log_ids(tuple(ids)), generation=self.generation)
        if kind == "signal":
            now = self.wall()
            self.save_signals({j: now for j in ids})

    # ---- the signals, for the next leader ------------------------------------------

    def save_signals(self, adding: Mapping[JobId, float] | None = None) -> None:
        """Write signals.json: the backend's signals not yet seen answered, and
        `adding` (about to be sent). Raises OSError: a signal that cannot be written
        ahead is not sent (the round fails and is retried)."""
        sent = dict(self.signal_memory.signals()) if self.signal_memory is not None else {}
        sent.update(adding or {})
        doc = {"generation": self.generation, "sent": sent}
        with self._journal_lock:
            write_atomic(self.files.dir / SIGNALS_FILE, json.dumps(doc).encode())

    def load_signals(self) -> dict[JobId, float]:
        """The signals the last leader saved (bounded, hostile entries dropped)."""
        try:
            with open(self.files.dir / SIGNALS_FILE, "rb") as f:
                doc = json.loads(f.read(16 << 20))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, UnicodeDecodeError) as e:
            event(log, "ha_signals_unreadable", logging.WARNING, error=str(e)[:300])
            return {}
        return signals_from_json(doc, self.wall())

    # ---- the end of this life ------------------------------------------------------

    def stop(self, *, clean: bool) -> None:
        """Stop renewing; on a clean stop (SIGTERM) release the lease so that a
        standby takes over at its next look."""
        self._stop_keeper.set()
        if self._keeper is not None:
            self._keeper.join(timeout=5)
        self.files.drop_heartbeat(self.holder)
        if clean:
            with self._lock:
                released = self.lead.release()
            if released:
                event(log, "ha_released", generation=self.generation)
        self.metrics.ha_leader.set(0)

    def status(self) -> dict[str, Any]:
        """What `status` shows of the lead, for the state document."""
        return {"holder": self.holder, "generation": self.generation}


def signals_from_json(doc: Any, now: float) -> dict[JobId, float]:
    """signals.json's entries that can be a job id and a time no later than now (+1 h
    of clock difference) and no older than SIGNAL_KEEP_S; anything else is dropped."""
    sent = doc.get("sent") if isinstance(doc, dict) else None
    if not isinstance(sent, dict):
        return {}
    out: dict[JobId, float] = {}
    for j, t in list(sent.items())[:MAX_SIGNALS]:
        if not isinstance(j, str) or not _job_id(j):
            continue
        if isinstance(t, bool) or not isinstance(t, int | float) or t != t:
            continue
        if now - SIGNAL_KEEP_S <= t <= now + 3600:
            out[j] = float(t)
    return out


def _job_id(j: str) -> bool:
    """A Slurm job id or array task (digits, one optional "_" and digits)."""
    head, sep, task = j.partition("_")
    return 0 < len(j) <= 32 and j.isascii() and head.isdigit() and (not sep or task.isdigit())
