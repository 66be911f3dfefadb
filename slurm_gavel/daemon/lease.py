"""Leadership among daemons that share one state directory: a lease and a fencing token.

Every host runs the same `slurm-gavel run`; one leads (observes, acts on Slurm, saves
the state), the others stand by and touch Slurm not at all. The shared directory's
``ha/`` folder holds three things (docs/design.md, "Active/standby"):

``claims/<generation>``
    one empty-but-for-its-holder file per takeover, created with O_CREAT|O_EXCL: the
    one place where two standbys racing for the same generation are told apart (the
    file system lets exactly one create it). The highest generation whose claim exists
    is the leader's; a daemon whose generation is lower is deposed, whatever else it
    believes. Claims are never removed (one per takeover: a few a year).
``lease.json``
    the leader's renewals (holder, generation, a counter, its wall clock), rewritten
    atomically every third of the lease. Standbys never compare its clock with theirs:
    they watch its *bytes*, and take over once they have seen them unchanged for a whole
    lease by their own monotonic clock (or marked released by a leader that stopped
    cleanly). Like slurmctld's heartbeat file in StateSaveLocation.
``standby/<holder>.json``
    each standby's heartbeat, for `slurm-gavel status`.

The leader acts only while `may_act()` allows it: its last successful renewal began
less than ``lease - margin`` ago (its monotonic clock), and no higher claim exists.
A standby claims only after a full lease without a renewal by its own clock, so a
leader that was paused, or cut from the storage, finds its window closed before any
standby may act, and, once resumed, finds the higher claim too. The assumption is on
clock *rates* (the two monotonic clocks advance alike within ``margin`` over a lease:
NTP keeps them within parts per million) and on the storage (a write by one host is
seen by the other's next open and directory listing within ``margin``), not on the
hosts' wall clocks agreeing.

Pure apart from `HaFiles` (the file I/O), and with the clocks injected, so that the
tests drive it with a fake clock and a hostile directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from slurm_gavel.atomic import fsync_folder

LEASE_FORMAT = "slurm-gavel-lease/1"
HA_DIR = "ha"
LEASE_FILE = "lease.json"
CLAIMS_DIR = "claims"
STANDBY_DIR = "standby"
# Bounds on what a lease file may say: anything else is not a lease (hostile or torn).
MAX_GENERATION = 10**12
MAX_HOLDER_LEN = 200
MAX_LEASE_BYTES = 4096
_HOLDER = re.compile(r"[A-Za-z0-9._:@-]{1,200}")
_CLAIM = re.compile(r"[0-9]{1,12}")


def new_holder_id() -> str:
    """host:pid:random, unique per process start (a restarted daemon is a new holder)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:100] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LeaseRecord:
    """What lease.json says. renewed_at is the holder's wall clock: shown, never compared."""

    holder: str
    generation: int
    renewals: int
    renewed_at: float
    lease_s: float
    released: bool = False

    def to_bytes(self) -> bytes:
        return json.dumps({"format": LEASE_FORMAT, **asdict(self)}, sort_keys=True).encode()


def parse_lease(data: bytes | None) -> LeaseRecord | None:
    """The lease the bytes hold, or None for anything that is not one (absent, torn,
    garbage, out-of-range numbers, a holder id with odd characters)."""
    if not data or len(data) > MAX_LEASE_BYTES:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != LEASE_FORMAT:
        return None
    holder, released = doc.get("holder"), doc.get("released", False)
    gen, renewals = _whole(doc.get("generation")), _whole(doc.get("renewals"))
    at, lease_s = _number(doc.get("renewed_at")), _number(doc.get("lease_s"))
    if not isinstance(holder, str) or not _HOLDER.fullmatch(holder):
        return None
    if gen is None or not 0 <= gen <= MAX_GENERATION:
        return None
    if renewals is None or not 0 <= renewals <= 10**15:
        return None
    if at is None or lease_s is None or not 0 < lease_s <= 86400:
        return None
    if not isinstance(released, bool):
        return None
    return LeaseRecord(holder, gen, renewals, at, lease_s, released)


def _whole(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _number(v: Any) -> float | None:
    """A finite number of sane size (not NaN, not a bool), else None."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) < 1e12
    return float(v) if ok else None


class HaFiles:
    """The ``ha/`` folder of the shared state directory (see the module notes)."""

    def __init__(self, shared_dir: Path) -> None:
        self.dir = Path(shared_dir) / HA_DIR
        self.lease_path = self.dir / LEASE_FILE
        self.claims = self.dir / CLAIMS_DIR
        self.standbys = self.dir / STANDBY_DIR

    def ensure(self) -> None:
        for d in (self.dir, self.claims, self.standbys):
            d.mkdir(parents=True, exist_ok=True)

    def read_lease(self) -> bytes | None:
        """The lease file's bytes (at most MAX_LEASE_BYTES + 1), None when absent."""
        try:
            with open(self.lease_path, "rb") as f:
                return f.read(MAX_LEASE_BYTES + 1)
        except FileNotFoundError:
            return None

    def write_lease(self, record: LeaseRecord) -> None:
        _replace(self.lease_path, record.to_bytes())

    def claim(self, generation: int, holder: str) -> bool:
        """Create claims/<generation>, or False when another daemon created it first."""
        path = self.claims / str(generation)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, holder.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_folder(self.claims)
        return True

    def highest_claim(self) -> int:
        """The highest generation claimed (0: none). Names that are not a generation
        are ignored: they cannot be a claim."""
        best = 0
        with os.scandir(self.claims) as it:
            for e in it:
                if _CLAIM.fullmatch(e.name):
                    best = max(best, int(e.name))
        return best

    def claim_holder(self, generation: int) -> str | None:
        try:
            text = (self.claims / str(generation)).read_bytes()[: MAX_HOLDER_LEN + 1]
        except OSError:
            return None
        holder = text.decode("ascii", "replace").strip()
        return holder if _HOLDER.fullmatch(holder) else None

    def heartbeat(self, holder: str, doc: dict[str, Any]) -> None:
        _replace(self.standbys / _file_name(holder), json.dumps(doc).encode())

    def drop_heartbeat(self, holder: str) -> None:
        with contextlib.suppress(OSError):
            (self.standbys / _file_name(holder)).unlink()

    def read_heartbeats(self, limit: int = 64) -> list[dict[str, Any]]:
        """The standbys' heartbeats (bounded: at most `limit` files, 4 KiB each)."""
        out: list[dict[str, Any]] = []
        try:
            names = sorted(p for p in os.listdir(self.standbys) if p.endswith(".json"))
        except OSError:
            return out
        for name in names[:limit]:
            try:
                with open(self.standbys / name, "rb") as f:
                    doc = json.loads(f.read(4096))
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            if not isinstance(doc, dict):
                continue
            holder, at = doc.get("holder"), _number(doc.get("at"))
            if isinstance(holder, str) and _HOLDER.fullmatch(holder) and at is not None:
                out.append({"holder": holder, "at": at})
        return out


def _replace(target: Path, data: bytes) -> None:
    """Replace `target` whole (a temporary file renamed over it: a reader sees the old
    bytes or the new), without fsync. The lease and the heartbeats need to be seen, not
    to survive a power cut (a lost renewal reads as an expiry; safety rests on the
    claims, which are fsynced), and an fsync stalled behind a busy disk (measured: 20 s
    under load) would hold a standby's look at the lease, or a leader's renewal."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _file_name(holder: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", holder)[:MAX_HOLDER_LEN] + ".json"


class Role(Enum):
    STANDBY = "standby"
    LEADER = "leader"
    DEPOSED = "deposed"  # was the leader and may not act again (steps down)


class Leadership:
    """One daemon's side of the lease (see the module notes). Not thread-safe by
    itself: the daemon's keeper thread renews while the round asks may_act(), so the
    daemon holds a lock around both (ha.Ha)."""

    def __init__(
        self,
        files: HaFiles,
        holder: str,
        *,
        lease_s: float,
        margin_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < margin_s < lease_s:
            raise ValueError("margin_s must be between 0 and lease_s")
        self.files = files
        self.holder = holder
        self.lease_s = lease_s
        self.margin_s = margin_s
        self.clock = clock
        self.wall = wall
        self.role = Role.STANDBY
        self.generation = 0
        self.renewals = 0
        self.why_deposed: str | None = None
        self.took_over_because: str | None = None  # released, never held, expired
        self._seen: bytes | None = None  # the lease's bytes as last read (standby)
        self._seen_at: float | None = None  # when they last changed, by our clock
        self._renewed: float = 0.0  # when our last successful renewal began
        self.last_seen: LeaseRecord | None = None  # the last lease read, parsed

    # ---- standby -------------------------------------------------------------------

    def poll(self) -> bool:
        """One look at the lease (standby): claims the next generation when the lease
        was released, never written, or unchanged for a whole lease by our clock.
        True when this daemon is now the leader. OSError when the directory cannot be
        read (the caller logs it and looks again)."""
        if self.role is not Role.STANDBY:
            return self.role is Role.LEADER
        data = self.files.read_lease()
        now = self.clock()
        if self._seen_at is None or data != self._seen:
            self._seen, self._seen_at = data, now
        rec = parse_lease(data)
        self.last_seen = rec
        if rec is not None and rec.released:
            why = "released"
        elif data is None and self.files.highest_claim() == 0:
            why = "never held"
        elif now - self._seen_at >= self.lease_s:
            why = "expired"
        else:
            return False
        return self._take_over(why)

    def expires_in(self) -> float | None:
        """Seconds until the lease as we see it expires (standby; None before a look)."""
        if self._seen_at is None:
            return None
        return self._seen_at + self.lease_s - self.clock()

    def _take_over(self, why: str) -> bool:
        began = self.clock()
        generation = self.files.highest_claim() + 1
        if generation > MAX_GENERATION or not self.files.claim(generation, self.holder):
            self._seen_at = self.clock()  # another standby won: watch its lease afresh
            return False
        self.generation = generation
        self.renewals = 0
        self.role = Role.LEADER
        self.took_over_because = why
        # A failed write leaves the claim standing: we lead, and the keeper retries the
        # write. Until one succeeds may_act() counts from the claim's start, no later.
        with contextlib.suppress(OSError):
            self.files.write_lease(self._record())
        self._renewed = began
        return self.verify()

    # ---- leader --------------------------------------------------------------------

    def _record(self, released: bool = False) -> LeaseRecord:
        return LeaseRecord(
            self.holder, self.generation, self.renewals, self.wall(), self.lease_s, released
        )

    def verify(self) -> bool:
        """Still the highest claim? Deposes this daemon otherwise."""
        top = self.files.highest_claim()
        if top > self.generation:
            self.depose(f"a standby took over as generation {top}")
            return False
        return self.role is Role.LEADER

    def renew(self) -> bool:
        """Rewrite the lease (leader). False when the write failed (OSError is not
        raised: the leader's window simply closes unless a later renewal succeeds) or
        this daemon was deposed."""
        if self.role is not Role.LEADER:
            return False
        began = self.clock()
        try:
            if not self.verify():
                return False
            self.renewals += 1
            self.files.write_lease(self._record())
            if not self.verify():  # a claim made while we wrote: that daemon leads
                return False
        except OSError:
            return False
        self._renewed = began
        return True

    def renewed_ago(self) -> float:
        return self.clock() - self._renewed

    def may_act(self) -> str | None:
        """None when this daemon may issue a Slurm action now; else why not (and, when
        it led, it is deposed: it never acts again in this life)."""
        if self.role is Role.STANDBY:
            return "this daemon is a standby"
        if self.role is Role.DEPOSED:
            return f"deposed: {self.why_deposed}"
        age = self.renewed_ago()
        window = self.lease_s - self.margin_s
        if age >= window:
            self.depose(
                f"lease last renewed {age:.1f}s ago, beyond its {window:g}s window "
                "(lease_seconds - margin_seconds); a standby may lead now"
            )
            return f"deposed: {self.why_deposed}"
        try:
            ok = self.verify()
        except OSError as e:
            self.depose(f"the shared directory cannot be read ({e.strerror or e})")
            return f"deposed: {self.why_deposed}"
        return None if ok else f"deposed: {self.why_deposed}"

    def depose(self, why: str) -> None:
        if self.role is Role.LEADER:
            self.role = Role.DEPOSED
            self.why_deposed = why

    def release(self) -> bool:
        """A clean stop (leader): mark the lease released so that a standby takes over
        at its next look rather than a lease later. True when written."""
        if self.role is not Role.LEADER:
            return False
        try:
            if not self.verify():
                return False
            self.files.write_lease(self._record(released=True))
        except OSError:
            return False
        self.role = Role.DEPOSED
        self.why_deposed = "released at stop"
        return True


def ha_status(shared_dir: Path, now: float) -> dict[str, Any] | None:
    """What `slurm-gavel status` shows of the lead: None where the directory has no
    ``ha/`` (a single daemon). Ages are by the holder's clock against this host's:
    a display, never a decision."""
    files = HaFiles(shared_dir)
    if not files.dir.is_dir():
        return None
    try:
        rec = parse_lease(files.read_lease())
        generation = files.highest_claim()
    except OSError as e:
        return {"error": f"{files.dir}: {e.strerror or e}"}
    leader = None
    if rec is not None:
        leader = {
            "holder": rec.holder,
            "generation": rec.generation,
            "lease_s": rec.lease_s,
            "renewed_ago_s": round(now - rec.renewed_at, 1),
            "released": rec.released,
            "expired": rec.released or now - rec.renewed_at > rec.lease_s,
        }
    standbys = [
        {"holder": h["holder"], "seen_ago_s": round(now - h["at"], 1)}
        for h in files.read_heartbeats()
        if rec is None or h["holder"] != rec.holder
    ]
    return {"generation": generation, "leader": leader, "standbys": standbys}
