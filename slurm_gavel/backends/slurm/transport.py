"""SlurmTransport: what SlurmBackend needs of a way to reach Slurm.

SlurmBackend (backend.py) holds the round's logic, the same whatever the way to
Slurm; a transport holds only the primitives, each one command or request (or a
few): read the nodes, reservations and jobs, hold, release, place, signal, read job states,
requeue-hold, relabel a job given back, write an AdminComment. Two transports:

* cli/  (CliTransport): Slurm's commands (squeue, scontrol, scancel), through
  SlurmCommands, the one runner of every Slurm command (timeouts, retries, counts);
* rest/ (RestTransport): slurmrestd's HTTP API, with a CliTransport it holds for
  the scontrol fallbacks older API versions need.

Every primitive that acts on jobs records per-job failures in `failed` (job ->
why) rather than raising: one job's refusal never stops the others. A primitive
raises SlurmUnreachable (cli/commands.py) when Slurm cannot be reached at all.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import SlurmReservation
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.domain.model import JobId

# Per-job failures of an act (job -> why), and the last observe's nodes by name.
Failures = dict[JobId, str]
NodesByName = Mapping[str, SlurmNode]


class SlurmTransport(Protocol):
    """The primitives of one way to reach Slurm (see the module notes)."""

    @property
    def commands_issued(self) -> int:
        """Commands run and requests sent so far (the daemon reports them per round)."""
        ...

    # --- reads -----------------------------------------------------------------------

    def read_nodes(self) -> list[SlurmNode]:
        """Every node Slurm reports, now."""
        ...

    def read_reservations(self) -> list[SlurmReservation]:
        """Slurm's advance reservations, now (reservations.py)."""
        ...

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        """The waiting and running jobs (and, where the transport lists them, recently
        ended ones). first: no round has been observed yet. watched: the managed jobs
        not done at the last observe, whose end the backend needs to see."""
        ...

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        """The final records of these jobs, which left the waiting/running list since
        the last read ([] where read_jobs lists ended jobs already, or for jobs Slurm
        has forgotten)."""
        ...

    def between_rounds(self) -> None:
        """Upkeep made while the daemon waits for the next round (may do nothing)."""
        ...

    def states(self, ids: list[JobId]) -> dict[JobId, str]:
        """The state names of these jobs (squeue's %T), finished ones may be absent."""
        ...

    def steps_answer(self, ids: list[JobId]) -> set[JobId]:
        """Of these running jobs, those whose batch step's node answers now, asked of
        that node's slurmd itself (not slurmctld's NOT_RESPONDING flag, which may come
        long after a slurmd died); a job whose node cannot be asked is left out."""
        ...

    def private_data(self) -> str | None:
        """Slurm's PrivateData ("none", "jobs,usage"), None where it cannot be read;
        NotImplementedError where this transport cannot ask."""
        ...

    def kill_wait_s(self) -> float | None:
        """Slurm's KillWait (seconds), None where it cannot be read."""
        ...

    # --- acts ------------------------------------------------------------------------

    def hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None: ...

    def release(self, ids: list[JobId], failed: dict[JobId, str]) -> None: ...

    def place(self, orders: list[StartOrder], nodes: NodesByName, failed: Failures) -> None:
        """Set each held job's partition, nodes and GPUs (StartOrder) without releasing
        it. nodes: the last observe's, by name."""
        ...

    def send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        """Send the checkpoint signal to the jobs' batch scripts; returns those it could
        not reach."""
        ...

    def requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        """Requeue and hold the jobs that have not ended (Slurm's Incomplete flag)."""
        ...

    def relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        """A held job given back to Slurm: its comment and GPU request (giveback.py)."""
        ...

    def admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None: ...

    def tried_once(self) -> AbstractContextManager[None]:
        """Within it, commands and requests are made once, without their retries."""
        ...
