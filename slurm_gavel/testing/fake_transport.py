"""FakeTransport: the SlurmTransport protocol over a FakeSlurm, so that the unmodified
SlurmBackend (its round: observe, act, grace, give-back) runs on the fake.

Each primitive is one command, logged in `log` as (kind, job ids) with the kinds the
CLI transport counts (cli/transport.py): hold, release, place, signal, requeuehold,
give_back, admin_comment, wait (states), probe (steps_answer), and the reads nodes,
reservations, list (read_jobs), ended, config. The fake has no reservations of its own:
a test sets `reservations` to those read_reservations answers (none by default). A
test reads from the log which commands a round issued, for which jobs. Failures as the
real ones report them: per job in `failed`, never raised; `unreachable` makes every
primitive raise SlurmUnreachable (slurmctld away), `refuse(kind, job, why)` makes one
job's next command of a kind fail.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.records import ACTIVE_STATES, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import SlurmReservation
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.backends.slurm.transport import Failures, NodesByName
from slurm_gavel.domain.model import JobId
from slurm_gavel.testing.cluster import FakeSlurm, FakeSlurmError
from slurm_gavel.testing.to_records import job_records, node_record


class FakeTransport:
    """SlurmTransport over a FakeSlurm (see the module notes)."""

    def __init__(self, slurm: FakeSlurm, *, wait_advance_s: float = 0.5) -> None:
        """wait_advance_s: each read of job states (what the backend polls while it
        waits out a grace) first lets this much of the fake's time pass: the poll's
        wait, which the backend makes in real time, outside the fake's clock."""
        self.slurm = slurm
        self.wait_advance_s = wait_advance_s
        # SlurmBackend.act signals from a second thread, beside the hold, place and
        # release: one command at a time, as slurmctld serialises them
        self._lock = threading.RLock()
        self.log: list[tuple[str, tuple[JobId, ...]]] = []
        self.unreachable = False
        self._refusals: dict[tuple[str, JobId], str] = {}
        self.reservations: list[SlurmReservation] = []
        self._listed: dict[JobId, SlurmJob] = {}  # read_jobs' last records

    # --- test controls --------------------------------------------------------------

    def refuse(self, kind: str, job: JobId, why: str) -> None:
        """The next `kind` command naming `job` fails for it with `why` (not applied)."""
        self._refusals[(kind, job)] = why

    def issued(self, kind: str | None = None) -> list[tuple[str, tuple[JobId, ...]]]:
        """The log, or its commands of one kind."""
        return [e for e in self.log if kind is None or e[0] == kind]

    def acts(self) -> list[tuple[str, tuple[JobId, ...]]]:
        """The commands that change Slurm (not the reads), in order."""
        reads = {"nodes", "reservations", "list", "ended", "wait", "probe", "config"}
        return [e for e in self.log if e[0] not in reads]

    @contextlib.contextmanager
    def _command(self, kind: str, ids: Sequence[JobId] = ()) -> Iterator[None]:
        """One command: logged, run alone (the lock), or refused while unreachable."""
        with self._lock:
            self._check(kind)
            self.log.append((kind, tuple(ids)))
            yield

    def _check(self, kind: str) -> None:
        if self.unreachable:
            raise SlurmUnreachable(
                f"{kind}: slurmctld unreachable (the fake's unreachable is set)",
                last_error="Unable to contact slurm controller (connect failure)",
            )

    def _refused(self, kind: str, ids: Sequence[JobId], failed: dict[JobId, str]) -> list[JobId]:
        """The ids left once this command's refusals are in failed."""
        out = []
        for j in ids:
            why = self._refusals.pop((kind, j), None)
            if why is None:
                out.append(j)
            else:
                failed[j] = why
        return out

    @property
    def commands_issued(self) -> int:
        return len(self.log)

    # --- reads ----------------------------------------------------------------------

    def read_nodes(self) -> list[SlurmNode]:
        with self._command("nodes"):
            return [node_record(n, self.slurm.scheduler) for n in self.slurm.nodes.values()]

    def read_reservations(self) -> list[SlurmReservation]:
        with self._command("reservations"):
            return list(self.reservations)

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        with self._command("list"):
            active = [j for j in self.slurm.jobs if j.state in ACTIVE_STATES]
            records = job_records(active, self.slurm.nodes, self.slurm.def_mem_per_cpu_mb)
            # A record equal to the last read's is handed back as that object, as the
            # CLI transport hands back the job of an unchanged listing record.
            last = self._listed
            records = [r if (old := last.get(r.job_id)) != r else old for r in records]
            self._listed = {r.job_id: r for r in records}
            return records

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        with self._command("ended", ids):
            wanted = set(ids)
            ended = [
                j for j in self.slurm.jobs
                if j.state not in ACTIVE_STATES and (j.name in wanted or str(j.number) in wanted)
            ]  # fmt: skip
            return job_records(ended, self.slurm.nodes, self.slurm.def_mem_per_cpu_mb)

    def between_rounds(self) -> None:
        return None

    def states(self, ids: list[JobId]) -> dict[JobId, str]:
        with self._command("wait", ids):
            if self.wait_advance_s:
                self.slurm.advance(self.wait_advance_s)
            out = {}
            for name in ids:
                found = self.slurm.named(name) if _plain_id(name) else []
                if len(found) == 1:
                    out[name] = found[0].state
            return out

    def steps_answer(self, ids: list[JobId]) -> set[JobId]:
        with self._command("probe", ids):
            out = set()
            for name in ids:
                found = self.slurm.named(name) if _plain_id(name) else []
                up = len(found) == 1 and not any(
                    self.slurm.nodes[a.node].down for a in found[0].alloc
                )
                if up and found[0].state == "RUNNING":
                    out.add(name)
            return out

    def private_data(self) -> str | None:
        with self._command("config"):
            return self.slurm.private_data

    def kill_wait_s(self) -> float | None:
        with self._command("config"):
            return self.slurm.kill_wait_s

    # --- acts -----------------------------------------------------------------------

    def hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        with self._command("hold", ids):
            failed.update(self.slurm.hold(self._refused("hold", ids, failed)))

    def release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        with self._command("release", ids):
            failed.update(self.slurm.release(self._refused("release", ids, failed)))

    def place(self, orders: list[StartOrder], nodes: NodesByName, failed: Failures) -> None:
        with self._command("place", [o.job_id for o in orders]):
            left = set(self._refused("place", [o.job_id for o in orders], failed))
            for o in orders:
                if o.job_id not in left:
                    continue
                try:
                    self.slurm.update(o.job_id, partition=o.partition, nodes=o.nodes, gres=o.gres())
                except FakeSlurmError as e:
                    failed[o.job_id] = f"scontrol: error: {e}"

    def send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        with self._command("signal", ids):
            left = self._refused("signal", ids, failed)
            errors = self.slurm.signal(left, signal)
            failed.update(errors)
            return {j for j in ids if j in failed}

    def requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        with self._command("requeuehold", ids):
            failed.update(self.slurm.requeuehold(self._refused("requeuehold", ids, failed)))

    def relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        for o in orders:  # one command each, as the CLI's
            with self._command("give_back", [o.job_id]):
                if not self._refused("give_back", [o.job_id], failed):
                    continue
                try:
                    self.slurm.set_comment(o.job_id, o.comment, o.gres)
                except (KeyError, FakeSlurmError) as e:
                    failed[o.job_id] = str(e)

    def admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        with self._command("admin_comment", order.job_ids):
            left = self._refused("admin_comment", order.job_ids, failed)
            failed.update(self.slurm.set_admin_comment(left, order.text))

    @contextlib.contextmanager
    def tried_once(self) -> Iterator[None]:
        yield


def _plain_id(name: str) -> bool:
    return bool(name) and all(part.isdigit() for part in name.split("_", 1))


def fake_backend(
    slurm: FakeSlurm | None = None,
    *,
    managed_partitions: Collection[str] | None = None,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> SlurmBackend[FakeTransport]:
    """A SlurmBackend over a FakeSlurm (a new default one when none is given), on the
    fake's clock. options: SlurmBackend's (grace_s, wait_for_preempted...); poll_s is
    the fake time each poll of job states lets pass (FakeTransport.wait_advance_s): the
    backend itself then polls without sleeping."""
    slurm = slurm or FakeSlurm()
    poll_s = float(options.pop("poll_s", 0.5))
    return SlurmBackend(
        FakeTransport(slurm, wait_advance_s=poll_s),
        managed_partitions=managed_partitions,
        clock=clock or slurm.clock,
        poll_s=0.0,
        **options,
    )
