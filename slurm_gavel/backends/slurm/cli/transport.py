"""CliTransport: SlurmBackend's primitives through Slurm's commands.

Reads: reader.py (nodes, the job listing, JSON of changed jobs). Acts, one command
per action kind whatever the number of jobs (SlurmBackend.act runs the signal
beside the hold, place and release):

    signal       scancel --signal=USR1 --batch ID ID ...   (preempt and move; an array
                 task: one scancel each, stopped at its first answer: task_signal.py)
    hold         scontrol hold ID,ID,...   (released earlier, not placed this round)
    place        scontrol, reading one `update JobId=...` line per job on stdin
                 (from 64 jobs on, two scontrol side by side, half the lines each)
    release      scontrol release ID,ID,...
    wait         squeue -h -j ID,... -o "%i %T"  (job states, polled during a grace)
    requeuehold  scontrol requeuehold Incomplete ID,...   (ignored the signal)
    probe        sstat -n -P -o JobID -j ID.batch,...   (before it: each batch host's
                 slurmd answers, asked directly; preemption._signal_reached)
    give_back    scontrol update JobId=ID "Comment=gavel-released: <why>", per held
                 job the daemon cannot use (giveback.py), then release
    admin_comment  scontrol update JobId=ID,... "AdminComment=slurm-gavel: ..."

Every command goes through SlurmCommands (commands.py): argument lists only, never a
shell (comments and job names are user text), a timeout, retries while slurmctld is
unreachable, a count per kind.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.argv import (
    job_list,
    render_update,
    requeuehold_argv,
    signal_argv,
)
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands, errors_only, note_errors
from slurm_gavel.backends.slurm.cli.json_format import CliFormat
from slurm_gavel.backends.slurm.cli.reader import CliReader
from slurm_gavel.backends.slurm.cli.task_signal import signal_task
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.old_runs import kill_wait_seconds
from slurm_gavel.backends.slurm.private_data import private_data_value
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import SlurmReservation
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.backends.slurm.transport import Failures, NodesByName
from slurm_gavel.domain.model import JobId

# From this many jobs to place in one act, two scontrol processes share the updates.
PLACE_SPLIT_AT = 64


class CliTransport:
    """Slurm through sinfo/squeue/scontrol/scancel (see the module notes)."""

    def __init__(self, commands: SlurmCommands, *, data_parser: str | None = None) -> None:
        self.commands = commands
        self.reader = CliReader(commands, data_parser)

    @property
    def cli_format(self) -> CliFormat:
        return self.reader.cli_format

    @property
    def commands_issued(self) -> int:
        return self.commands.total

    # --- reads -----------------------------------------------------------------------

    def read_nodes(self) -> list[SlurmNode]:
        return self.reader.read_nodes()

    def read_reservations(self) -> list[SlurmReservation]:
        return self.reader.read_reservations()

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        return self.reader.read_jobs(nodes, first=first, watched=watched)

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        return self.reader.read_ended(ids)

    def between_rounds(self) -> None:
        self.reader.between_rounds()

    def states(self, ids: list[JobId]) -> dict[JobId, str]:
        res = self.commands.run(
            "wait", ["squeue", "-h", "-j", job_list(ids), "-o", "%i %T"], retry_timeouts=True
        )
        out = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def steps_answer(self, ids: list[JobId]) -> set[JobId]:
        """`sstat -j ID.batch,...`: sstat asks each batch host's slurmd for the step, so
        a step listed is one whose slurmd answered now (~20 ms). A dead slurmd costs
        MessageTimeout (sstat then prints the others and an error, exit 0). Once, no
        retries (its "Communication connection failure" is the node's, not
        slurmctld's); a failure leaves every job out (not requeue-held)."""
        steps = ",".join(f"{j}.batch" for j in ids)
        try:
            with self.tried_once():
                res = self.commands.run(
                    "probe", ["sstat", "-n", "-P", "-o", "JobID", "-j", steps], retry_timeouts=True
                )
        except SlurmUnreachable:
            return set()
        listed = {line.strip().split(".")[0] for line in res.stdout.splitlines()}
        return listed & set(ids)

    def private_data(self) -> str | None:
        """PrivateData as slurmctld reports it, or None when it cannot be read
        (slurmctld away, scontrol failing, no such line)."""
        config = self._config()
        return None if config is None else private_data_value(config)

    def kill_wait_s(self) -> float | None:
        config = self._config()
        return None if config is None else kill_wait_seconds(config)

    def _config(self) -> str | None:
        """`scontrol show config`, None when it cannot be read."""
        try:
            res = self.commands.run("config", ["scontrol", "show", "config"], retry_timeouts=True)
        except SlurmUnreachable:
            return None
        return res.stdout if res.ok else None

    # --- acts ------------------------------------------------------------------------

    def hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("hold", ["scontrol", "hold", job_list(ids)])
        note_errors(res, ids, failed)

    def release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        res = self.commands.run("release", ["scontrol", "release", job_list(ids)])
        note_errors(res, ids, failed, ignore=("not held", "already"))

    def place(self, orders: list[StartOrder], nodes: NodesByName, failed: Failures) -> None:
        """One scontrol reading an update line per job; from PLACE_SPLIT_AT jobs on,
        two side by side, each with half the lines. slurmctld serves each update
        (~2 ms of its CPU with the NodeList) while the other scontrol's next request
        is on its way: 256 updates on 24.11 took 0.85-1.0 s in two streams against
        1.26-1.31 s in one (beside the signal; benchmarks/README.md)."""
        streams = [orders[i::2] for i in range(2)] if len(orders) >= PLACE_SPLIT_AT else [orders]
        results: list[dict[JobId, str]] = [{} for _ in streams]

        def place(part: list[StartOrder], part_failed: dict[JobId, str]) -> None:
            lines = "".join(render_update(o) + "\n" for o in part)
            res = self.commands.run("place", ["scontrol"], stdin=lines)
            note_errors(res, [o.job_id for o in part], part_failed, check_rc=False)

        if len(streams) == 1:
            place(orders, failed)
            return
        with ThreadPoolExecutor(len(streams), thread_name_prefix="gavel-place") as pool:
            list(pool.map(place, streams, results))
        for part_failed in results:
            failed.update(part_failed)

    def pin_nodes(self, orders: list[StartOrder], failed: dict[JobId, str]) -> None:
        """Only the node list of jobs placed otherwise (slurmrestd's v0.0.38 cannot set
        it): one scontrol reading a line per job."""
        lines = "".join(f"update JobId={o.job_id} NodeList={','.join(o.nodes)}\n" for o in orders)
        res = self.commands.run("place-nodes", ["scontrol"], stdin=lines)
        note_errors(res, [o.job_id for o in orders], failed, check_rc=False)

    def send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        """One scancel for the plain jobs; each array task (ARRAY_TASK) its own, stopped
        at slurmctld's first answer (cli/task_signal.py), side by side."""
        plain = [j for j in ids if "_" not in j]
        tasks = [j for j in ids if "_" in j]
        bad: set[JobId] = set()
        if plain:
            res = self.commands.run("signal", signal_argv(plain, signal))
            bad = note_errors(errors_only(res), plain, failed)
        if not tasks:
            return bad
        with self.commands._tally:
            self.commands.counts["signal"] += len(tasks)
        with ThreadPoolExecutor(min(8, len(tasks)), thread_name_prefix="gavel-task-signal") as pool:
            whys = list(pool.map(lambda j: signal_task(j, signal, self.commands.env), tasks))
        for j, why in zip(tasks, whys, strict=True):
            if why is not None:
                failed[j] = why
                bad.add(j)
        return bad

    def requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        note_errors(self.commands.run("requeuehold", requeuehold_argv(ids)), ids, failed)

    def relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        for o in orders:  # one command each: rare (a job is given back once)
            note_errors(self.commands.run("give_back", o.argv()), [o.job_id], failed)

    def admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        note_errors(self.commands.run("admin_comment", order.argv()), list(order.job_ids), failed)

    @contextlib.contextmanager
    def tried_once(self) -> Iterator[None]:
        saved = self.commands.retries
        self.commands.retries = 0
        try:
            yield
        finally:
            self.commands.retries = saved


def cli_backend(
    *,
    managed_partitions: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    commands: SlurmCommands | None = None,
    data_parser: str | None = None,
    clock: Callable[[], float] = time.time,
    **options: Any,
) -> SlurmBackend[CliTransport]:
    """A SlurmBackend over Slurm's commands. env: e.g. SLURM_CONF, for every command.
    data_parser: e.g. "v0.0.45", the JSON format to ask the CLI for, skipping the check
    that Slurm is a release slurm-gavel knows (default: the environment's
    SLURM_GAVEL_DATA_PARSER, else detected). options: SlurmBackend's."""

    transport = CliTransport(
        commands or SlurmCommands(env),
        data_parser=data_parser or os.environ.get("SLURM_GAVEL_DATA_PARSER") or None,
    )
    return SlurmBackend(transport, managed_partitions=managed_partitions, clock=clock, **options)
