"""FencedTransport: a transport whose every action first asks a gate.

Where several daemons share one cluster (active/standby, daemon/lease.py), only the
leader may change jobs, and it must stop the instant it is no longer sure it leads.
The gate is the daemon's: called with the action's kind and its jobs before every
primitive that changes a job (hold, release, place, signal, requeue-hold, relabel,
AdminComment), it raises to refuse, and nothing reaches Slurm. Reads pass through: a
deposed leader's reads change nothing. One wrapper rather than a check at each call
site, so that an action added to the backend later cannot forget it
(tests/backends/slurm/test_fenced.py checks every act primitive of SlurmTransport).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import SlurmReservation
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.transport import Failures, NodesByName, SlurmTransport
from slurm_gavel.domain.model import JobId

# The gate: (action kind, the jobs it names) -> None, or raises to refuse the action.
Gate = Callable[[str, Sequence[JobId]], None]


class FencedTransport:
    """`inner`, with `gate` asked before each action (see the module notes)."""

    def __init__(self, inner: SlurmTransport, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    @property
    def commands_issued(self) -> int:
        return self.inner.commands_issued

    # --- reads: through ------------------------------------------------------------

    def read_nodes(self) -> list[SlurmNode]:
        return self.inner.read_nodes()

    def read_reservations(self) -> list[SlurmReservation]:
        return self.inner.read_reservations()

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        return self.inner.read_jobs(nodes, first=first, watched=watched)

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        return self.inner.read_ended(ids)

    def between_rounds(self) -> None:
        self.inner.between_rounds()

    def states(self, ids: list[JobId]) -> dict[JobId, str]:
        return self.inner.states(ids)

    def steps_answer(self, ids: list[JobId]) -> set[JobId]:
        return self.inner.steps_answer(ids)

    def private_data(self) -> str | None:
        return self.inner.private_data()

    def kill_wait_s(self) -> float | None:
        return self.inner.kill_wait_s()

    def tried_once(self) -> AbstractContextManager[None]:
        return self.inner.tried_once()

    # --- acts: the gate first ------------------------------------------------------

    def hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        self.gate("hold", ids)
        self.inner.hold(ids, failed)

    def release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        self.gate("release", ids)
        self.inner.release(ids, failed)

    def place(self, orders: list[StartOrder], nodes: NodesByName, failed: Failures) -> None:
        self.gate("place", [o.job_id for o in orders])
        self.inner.place(orders, nodes, failed)

    def send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        self.gate("signal", ids)
        return self.inner.send_signal(ids, signal, failed)

    def requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        self.gate("requeuehold", ids)
        self.inner.requeuehold(ids, failed)

    def relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        self.gate("relabel", [o.job_id for o in orders])
        self.inner.relabel(orders, failed)

    def admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        self.gate("admin_comment", list(order.job_ids))
        self.inner.admin_comment(order, failed)
