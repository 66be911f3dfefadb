"""Slurm's advance reservations, as the round must honour them. Pure: the transports
read them (`scontrol show reservation`, slurmrestd's /reservations), the view applies
them to each managed job's nodes (ObservedJob.allowed) and to the nodes' capacity.

What Slurm does, and so what the daemon does (checked on 22.05, 24.11 and 26.05):

* a job that did not ask for a reservation never starts on a reserved node while
  the reservation is active, whoever its owner is, nor where the reservation starts
  before the job's time limit would end (a job without a limit is kept off every
  reservation that has not ended). Slurm leaves such a job pending
  (ReqNodeNotAvail); the daemon keeps it off those nodes, and a running job there
  (IGNORE_JOBS) is moved off once the reservation is active;
* MAGNETIC: a job the reservation admits (its user or account is listed, and not
  excluded with ``-name``) may use it without asking for it;
* a job submitted with ``--reservation=R`` runs on R's nodes only, and only once R
  has started; FLEX lets it start earlier and use nodes outside R too (R's nodes are
  tried first). If R has ended or was deleted, or its nodes cannot hold the job's
  GPUs, the job is given back to Slurm with the reason (giveback.py);
* MAINT marks the nodes MAINTENANCE in Slurm's node state: they are reserved like
  any other (the reservation's own jobs may use them); ANY_NODES reserves no node;
* a reservation of some cores only (CoreCnt) is read as reserving its nodes whole
  (the daemon does not place by core): conservative, never a start Slurm refuses.

Where the reservations cannot be read, a node Slurm flags RESERVED or MAINTENANCE is
kept off for every managed job (the fallback is the safe side) and jobs that ask for
a reservation wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_gavel.backends.slurm.fields import INFINITE, expand_hostlist, number
from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob, SlurmNode

# A job's time limit Slurm reports in minutes; None is unlimited.
_MINUTE = 60
# The node state flags of a node in an active reservation (MAINT: MAINTENANCE).
RESERVED_FLAGS = frozenset({"RESERVED", "MAINTENANCE", "MAINT"})


@dataclass(frozen=True)
class SlurmReservation:
    name: str
    nodes: frozenset[str]
    start: int  # epoch seconds
    end: int  # epoch seconds; 0: no end
    flags: frozenset[str] = frozenset()
    users: tuple[str, ...] = ()  # as Slurm lists them; "-name" excludes a user
    accounts: tuple[str, ...] = ()

    def active(self, now: float) -> bool:
        return self.start <= now and (self.end == 0 or now < self.end)

    def ended(self, now: float) -> bool:
        return self.end != 0 and now >= self.end

    @property
    def reserves_nodes(self) -> bool:
        return bool(self.nodes) and "ANY_NODES" not in self.flags

    def admits(self, user: str, account: str) -> bool:
        """Whether the reservation lets this user or account in (MAGNETIC: without
        asking). A listed "-name" excludes; a list of exclusions admits the rest."""
        return _listed(self.users, user) or _listed(self.accounts, account)


def _listed(names: tuple[str, ...], who: str) -> bool:
    if not names or not who:
        return False
    if any(n == f"-{who}" for n in names):
        return False
    if all(n.startswith("-") for n in names):
        return True
    return who in names


@dataclass(frozen=True)
class Reservations:
    """What the last observe read; known=False: the read failed (the fallback above)."""

    items: tuple[SlurmReservation, ...] = ()
    known: bool = True

    def by_name(self) -> dict[str, SlurmReservation]:
        return {r.name: r for r in self.items}


NO_RESERVATIONS = Reservations()


@dataclass(frozen=True)
class JobPlaces:
    """What the reservations leave a job: the nodes it may not use (off), or the only
    ones it may use (only, for a reservation job; None: not confined), the nodes tried
    first (prefer), why, and whether it must wait or be given back."""

    off: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    prefer: frozenset[str] | None = None
    why: str = ""
    waits: str | None = None
    give_back: str | None = None


FREE = JobPlaces()


def job_places(
    sj: SlurmJob, resv: Reservations, nodes: Iterable[SlurmNode], now: float
) -> JobPlaces:
    """Where the reservations let this job run now (see the module notes)."""
    wanted = tuple(n for n in sj.reservation.split(",") if n)
    if not resv.known:
        flagged = frozenset(n.name for n in nodes if n.flags & RESERVED_FLAGS)
        if wanted:
            why = "Slurm's reservations could not be read; it waits for them"
            return JobPlaces(waits=f"its reservation {sj.reservation}: {why}")
        if not flagged:
            return FREE
        return JobPlaces(off=flagged, why="reserved nodes (reservations unreadable)")
    running = sj.state in RUNNING_STATES
    if wanted:
        return _reservation_job(sj, wanted, resv, now)
    off: set[str] = set()
    names: list[str] = []
    for r in resv.items:
        if not r.reserves_nodes or r.ended(now):
            continue
        if "MAGNETIC" in r.flags and r.active(now) and r.admits(sj.user, sj.account):
            continue
        if running and not r.active(now):
            continue  # a running job keeps its place until the reservation begins
        limit = None if sj.time_limit_min is None else sj.time_limit_min * _MINUTE
        if limit is not None and r.start >= now + limit:
            continue  # it would end before the reservation starts
        off |= r.nodes
        names.append(r.name)
    if not off:
        return FREE
    return JobPlaces(off=frozenset(off), why=f"reserved nodes ({','.join(sorted(names))})")


def _reservation_job(
    sj: SlurmJob, wanted: tuple[str, ...], resv: Reservations, now: float
) -> JobPlaces:
    known = resv.by_name()
    mine = [known[n] for n in wanted if n in known and not known[n].ended(now)]
    if not mine:
        return JobPlaces(
            give_back=f"its reservation {sj.reservation} does not exist (ended or deleted)"
        )
    flex = any("FLEX" in r.flags for r in mine)
    started = [r for r in mine if r.active(now)]
    if not started and not flex:
        first = min(r.start for r in mine)
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(first))
        return JobPlaces(waits=f"its reservation {sj.reservation} starts at {when}")
    inside = frozenset().union(*(r.nodes for r in (started or mine)))
    others = frozenset().union(
        *(
            r.nodes
            for r in resv.items
            if r.reserves_nodes and r.active(now) and r.name not in wanted
        )
    )
    if flex:  # inside first, anywhere else not reserved for others
        return JobPlaces(off=others - inside, prefer=inside, why="reserved nodes")
    return JobPlaces(only=inside, why=f"it runs in reservation {sj.reservation}")


# --- reading ---------------------------------------------------------------------------


def parse_reservations(doc: Mapping[str, Any]) -> list[SlurmReservation]:
    """The reservations of `scontrol --json show reservations` (24.11+) or slurmrestd's
    /reservations (every API version: plain ints on 22.05's v0.0.38, the
    {"set","infinite","number"} object later)."""
    out = []
    for raw in doc.get("reservations") or []:
        if not isinstance(raw, Mapping):
            continue
        name = str(raw.get("name") or "")
        if not name:
            continue
        end = number(raw.get("end_time"))
        out.append(
            SlurmReservation(
                name=name,
                nodes=frozenset(expand_hostlist(str(raw.get("node_list") or ""))),
                start=max(0, number(raw.get("start_time"))),
                end=0 if end == INFINITE else max(0, end),
                flags=frozenset(str(f).upper() for f in raw.get("flags") or ()),
                users=_names(raw.get("users")),
                accounts=_names(raw.get("accounts")),
            )
        )
    return out


def _names(value: Any) -> tuple[str, ...]:
    text = "" if value is None else str(value)
    if text == "(null)":
        return ()
    return tuple(n for n in (p.strip() for p in text.split(",")) if n)


def parse_reservations_text(text: str) -> list[SlurmReservation]:
    """22.05's `scontrol show reservation --oneliner` (its scontrol has no --json):
    one reservation a line, `Key=value` separated by spaces; times in epoch seconds
    (SLURM_TIME_FORMAT=%s) or local time."""
    out = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for part in line.split():
            key, sep, value = part.partition("=")
            if sep:
                fields[key] = value
        name = fields.get("ReservationName", "")
        if not name:
            continue
        nodes = fields.get("Nodes", "")
        out.append(
            SlurmReservation(
                name=name,
                nodes=frozenset(expand_hostlist("" if nodes == "(null)" else nodes)),
                start=_local_time(fields.get("StartTime", "")),
                end=_local_time(fields.get("EndTime", "")),
                flags=frozenset(f.upper() for f in _names(fields.get("Flags"))),
                users=_names(fields.get("Users")),
                accounts=_names(fields.get("Accounts")),
            )
        )
    return out


def _local_time(text: str) -> int:
    """scontrol's time -> epoch seconds; 0 when unset. The daemon's commands run with
    SLURM_TIME_FORMAT=%s (epoch seconds, cli/commands.py); scontrol's default is local
    time, "2026-11-29T07:13:17"."""
    if text.isdigit():
        return int(text)
    try:
        return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return 0


def closed_nodes(
    resv: Reservations,
    nodes: Iterable[SlurmNode],
    places: Iterable[JobPlaces],
    now: float,
) -> set[str]:
    """The nodes of active reservations (or flagged reserved, when unknown) that no
    managed job may use: the round counts none of their GPUs."""
    if resv.known:
        reserved = set().union(*(r.nodes for r in resv.items if r.reserves_nodes and r.active(now)))
    else:
        reserved = {n.name for n in nodes if n.flags & RESERVED_FLAGS}
    if not reserved:
        return set()
    usable: set[str] = set()
    for p in places:
        if p.waits or p.give_back:
            continue
        if p.only is not None:
            usable |= p.only
        else:
            usable |= reserved - p.off
    return reserved - usable
