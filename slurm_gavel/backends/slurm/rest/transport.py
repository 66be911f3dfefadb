"""RestTransport: SlurmBackend's primitives through slurmrestd instead of the commands.

The round's logic is SlurmBackend's, and the parsers are the CLI's (slurmrestd's
/jobs and /nodes return the same documents as squeue/sinfo --json); this holds
only the primitives, and a CliTransport (`cli`) for the scontrol fallbacks below.
The API version is the newest one both the server (its ``/openapi/v3``) and this
code know, and what it can do is read from the same document (versions.py has the
table, checked on 22.05, 24.11 and 26.05). Where a version cannot do something the commands do:

* no node list on a job update (22.05's v0.0.38: "Disabled key:
  required_nodes"): the job is placed by partition, GRES and node count, and the
  node list is set with ``scontrol update`` when ``pin_nodes_with_cli`` (the
  default); without it the job must go to a partition that holds only GPUs of
  the target type, and Slurm picks the nodes;
* no requeue (before v0.0.45): ``scontrol requeuehold`` is the fallback for a
  job that ignores the checkpoint signal (reported as failed when
  ``cli_fallback`` is off);
* no ``BATCH_JOB`` flag (v0.0.38): the signal goes to every step of the job,
  which reaches the batch shell of sbatch jobs too;
* job updates have no batch form in any version: one request per job to place,
  hold or release (signal and requeue take many jobs per request from v0.0.40
  and v0.0.45).

HTTP, token and retry rules: client.py, auth.py. What the requests send and what their
answers say (per API version; pure): documents.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.backends.slurm.cli.transport import CliTransport
from slurm_gavel.backends.slurm.from_json import parse_nodes
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.record_cache import JobRecordCache
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.reservations import SlurmReservation, parse_reservations
from slurm_gavel.backends.slurm.rest.auth import DEFAULT_REREAD_S, TokenSource
from slurm_gavel.backends.slurm.rest.client import (
    RestClient,
    SlurmRestEndpointGone,
    first_error,
)
from slurm_gavel.backends.slurm.rest.documents import (
    give_back_body,
    note_rest_errors,
    place_body,
    states_of,
    type_only,
)
from slurm_gavel.backends.slurm.rest.versions import RestApi, api_from_spec
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.backends.slurm.transport import Failures, NodesByName
from slurm_gavel.domain.model import JobId

__all__ = ["RestClient", "RestTransport", "rest_backend"]

STATE_QUERY_IDS = 100  # job ids per /jobs/state/ request (the URL stays short)


class RestTransport:
    """Slurm through slurmrestd (see the module notes)."""

    def __init__(
        self,
        rest: RestClient,
        cli: CliTransport,
        *,
        pin_nodes_with_cli: bool = True,
        cli_fallback: bool = True,
    ) -> None:
        """cli runs the scontrol fallbacks: the node list where the API cannot set it
        (pin_nodes_with_cli), the AdminComment on v0.0.38 (also pin_nodes_with_cli),
        requeuehold before v0.0.45 and PrivateData (cli_fallback), KillWait."""
        self.rest = rest
        self.cli = cli
        self.pin_nodes_with_cli = pin_nodes_with_cli
        self.cli_fallback = cli_fallback
        self._api: RestApi | None = None
        self._job_cache = JobRecordCache()  # unchanged records parsed once

    @property
    def commands(self) -> SlurmCommands:
        """The runner of the scontrol fallbacks."""
        return self.cli.commands

    @property
    def commands_issued(self) -> int:
        return self.rest.total + self.cli.commands.total

    @property
    def api(self) -> RestApi:
        """The API version in use, discovered from /openapi/v3 on first use."""
        if self._api is None:
            spec = self.rest.request("discover", "GET", "/openapi/v3")
            self._api = api_from_spec(spec, where=f"slurmrestd at {self.rest.address}")
        return self._api

    def call(
        self, kind: str, method: str, path: str, body: Any = None, **kw: Any
    ) -> dict[str, Any]:
        api = self.api
        try:
            return self.rest.request(kind, method, api.base + path, body, **kw)
        except SlurmRestEndpointGone:
            self._api = None  # slurmrestd was upgraded: discover again next time
            raise

    # --- reads -----------------------------------------------------------------------

    def read_nodes(self) -> list[SlurmNode]:
        return parse_nodes(self.call("observe", "GET", "/nodes"))[1]

    def read_reservations(self) -> list[SlurmReservation]:
        return parse_reservations(self.call("observe", "GET", "/reservations"))

    def read_jobs(
        self, nodes: Sequence[SlurmNode], *, first: bool, watched: Collection[JobId]
    ) -> list[SlurmJob]:
        """Every job's JSON, each round: slurmrestd has no cheap listing (the nodes,
        which tell the listing's jobs their GPU types, are not needed). /jobs lists
        the jobs that ended too, as long as slurmctld remembers them (MinJobAge)."""
        return self._job_cache.parse(self.call("observe", "GET", "/jobs"))[1]

    def read_ended(self, ids: list[JobId]) -> list[SlurmJob]:
        """Nothing more: read_jobs listed every job slurmctld remembers."""
        return []

    def between_rounds(self) -> None:
        """Nothing: read_jobs reads every job's JSON each round (no listing to check)."""

    def private_data(self) -> str | None:
        """slurmrestd does not publish PrivateData: scontrol reads it, where the scontrol
        fallbacks are allowed."""
        if not self.cli_fallback:
            raise NotImplementedError(
                "slurmrestd does not publish Slurm's PrivateData and the scontrol fallback is off"
            )
        return self.cli.private_data()

    def kill_wait_s(self) -> float | None:
        """slurmrestd does not publish KillWait: scontrol show config (a read)."""
        return self.cli.kill_wait_s()

    def steps_answer(self, ids: list[JobId]) -> set[JobId]:
        """slurmrestd cannot ask a node's slurmd: sstat does (a read)."""
        return self.cli.steps_answer(ids)

    def _update(
        self, kind: str, job_id: JobId, body: Mapping[str, Any], failed: dict[JobId, str]
    ) -> bool:
        doc = self.call(kind, "POST", f"/job/{quote(job_id, safe='')}", body)
        err = first_error(doc)
        if err:
            failed[job_id] = f"slurmrestd: {err}"
            return False
        return True

    # --- acts ------------------------------------------------------------------------

    def _tasks_apart(
        self, ids: list[JobId], failed: dict[JobId, str]
    ) -> tuple[list[JobId], list[JobId]]:
        """(other jobs, array tasks to act on through scontrol/scancel): slurmrestd
        refuses an act naming an array task ("Submit job update against Array Job's
        JobID instead of array task id", 26.05), and naming the array would act on
        every pending task (backends/slurm/arrays.py). Without the CLI fallback a
        task fails with why."""
        tasks = [j for j in ids if "_" in j]
        others = [j for j in ids if "_" not in j]
        if tasks and not self.cli_fallback:
            for j in tasks:
                failed[j] = (
                    "slurmrestd refuses to act on an array task; enable cli_fallback to let "
                    "the daemon use scontrol and scancel for array tasks"
                )
            return others, []
        return others, tasks

    def place(self, orders: list[StartOrder], nodes: NodesByName, failed: Failures) -> None:
        _, tasks = self._tasks_apart([o.job_id for o in orders], failed)
        if tasks:
            self.cli.place([o for o in orders if o.job_id in tasks], nodes, failed)
        orders = [o for o in orders if "_" not in o.job_id]
        pin_with_cli = not self.api.node_list and self.pin_nodes_with_cli
        pinned: list[StartOrder] = []
        for o in orders:
            if not self.api.node_list and not pin_with_cli and not type_only(o, nodes):
                failed[o.job_id] = (
                    f"partition {o.partition} mixes GPU types and slurmrestd's API "
                    f"{self.api.version} cannot set a node list (enable pin_nodes_with_cli)"
                )
                continue
            if self._update("place", o.job_id, place_body(self.api, o), failed):
                pinned.append(o)
        if pin_with_cli and pinned:
            self.cli.pin_nodes(pinned, failed)

    def release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        self._set_hold(ids, False, failed)

    def relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        """A held job given back to Slurm (slurm/giveback.py): its comment, its GPUs."""
        _, tasks = self._tasks_apart([o.job_id for o in orders], failed)
        if tasks:
            self.cli.relabel([o for o in orders if o.job_id in tasks], failed)
        for o in [o for o in orders if "_" not in o.job_id]:
            self._update("give_back", o.job_id, give_back_body(self.api, o), failed)

    def admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        ids, tasks = self._tasks_apart(list(order.job_ids), failed)
        if tasks:
            self.cli.admin_comment(CommentOrder(tuple(tasks), order.text), failed)
        if not ids:
            return
        order = CommentOrder(tuple(ids), order.text)
        if self.api.legacy:  # v0.0.38 refuses the key ("Unknown key"): scontrol, if allowed
            if not self.pin_nodes_with_cli:
                raise NotImplementedError(
                    f"slurmrestd's API {self.api.version} cannot set admin_comment "
                    "(enable pin_nodes_with_cli to let the daemon use scontrol)"
                )
            self.cli.admin_comment(order, failed)
            return
        for j in order.job_ids:
            self._update("admin_comment", j, {"admin_comment": order.text}, failed)

    def hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        self._set_hold(ids, True, failed)

    def _set_hold(self, ids: list[JobId], hold: bool, failed: dict[JobId, str]) -> None:
        """Hold or release: array tasks through scontrol, the other jobs one request each."""
        ids, tasks = self._tasks_apart(ids, failed)
        if tasks:
            (self.cli.hold if hold else self.cli.release)(tasks, failed)
        for j in ids:
            self._update("hold" if hold else "release", j, {"hold": hold}, failed)

    def send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        ids, tasks = self._tasks_apart(ids, failed)
        bad = {j for j in tasks if j in failed}
        if tasks:  # one scancel each, stopped at its first answer (cli/task_signal.py)
            bad |= self.cli.send_signal(tasks, signal, failed)
        if not ids:  # an empty job list in DELETE /jobs/ would select by filters alone
            return bad
        return bad | self._send_signal(ids, signal, failed)

    def _send_signal(self, ids: list[JobId], signal: str, failed: dict[JobId, str]) -> set[JobId]:
        sig = signal
        if self.api.batch_signal:
            body = {"signal": sig, "flags": ["BATCH_JOB"], "jobs": list(ids)}
            return note_rest_errors(self.call("signal", "DELETE", "/jobs/", body), ids, failed)
        flags = "&flags=BATCH_JOB" if self.api.signal_batch_flag else ""
        bad: set[JobId] = set()
        for j in ids:
            doc = self.call("signal", "DELETE", f"/job/{quote(j, safe='')}?signal={sig}{flags}")
            bad |= note_rest_errors(doc, [j], failed)
        return bad

    def states(self, ids: list[JobId]) -> dict[JobId, str]:
        """States of these jobs, polled during the grace period: only theirs where the
        version can (/jobs/state/, v0.0.40+), else the whole /jobs listing."""
        wanted = set(ids)
        if self.api.job_states:
            docs = [
                self.call(
                    "wait", "GET", "/jobs/state/?" + urlencode([("job_id", j) for j in chunk])
                )
                for chunk in (
                    ids[i : i + STATE_QUERY_IDS] for i in range(0, len(ids), STATE_QUERY_IDS)
                )
            ]
            field = "state"
        else:
            docs, field = [self.call("wait", "GET", "/jobs")], "job_state"
        return states_of(docs, field, wanted)

    def requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        ids, tasks = self._tasks_apart(ids, failed)
        if tasks:
            self.cli.requeuehold(tasks, failed)
        if not ids:
            return
        if self.api.requeue and ids:
            body = {"flags": ["Hold", "Incomplete"], "jobs": list(ids)}  # cli/argv.py
            # Acts: never retried after a timeout (idempotent=False is the POST default).
            note_rest_errors(self.call("requeuehold", "POST", "/jobs/requeue", body), ids, failed)
            return
        if not self.cli_fallback:
            for j in ids:
                failed[j] = (
                    f"ignored the checkpoint signal; slurmrestd's API {self.api.version} cannot "
                    "requeue (enable cli_fallback for scontrol requeuehold)"
                )
            return
        self.cli.requeuehold(ids, failed)

    @contextlib.contextmanager
    def tried_once(self) -> Iterator[None]:
        saved = self.rest.retries, self.cli.commands.retries
        self.rest.retries = self.cli.commands.retries = 0
        try:
            yield
        finally:
            self.rest.retries, self.cli.commands.retries = saved


def rest_backend(
    address: str | Path | None = None,
    *,
    url: str | Path | None = None,
    token: str | None = None,
    token_file: Path | None = None,
    token_reread_s: float = DEFAULT_REREAD_S,
    user: str | None = None,
    managed_partitions: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    commands: SlurmCommands | None = None,
    rest: RestClient | None = None,
    pin_nodes_with_cli: bool = True,
    cli_fallback: bool = True,
    clock: Callable[[], float] = time.time,
    **options: Any,
) -> SlurmBackend[RestTransport]:
    """A SlurmBackend over slurmrestd. address/url: a unix socket path (``unix:``
    optional, rest_auth/local) or http(s)://host:port (rest_auth/jwt: token_file,
    re-read every token_reread_s and when refused, or a fixed token; and user).
    commands run the scontrol fallbacks (node list, requeuehold). options:
    SlurmBackend's."""
    commands = commands or SlurmCommands(env)
    where = address if address is not None else url
    if rest is None and where is None:
        raise ValueError("the slurmrestd backend needs the slurmrestd address (socket or URL)")
    if rest is None:
        source = TokenSource(token_file, reread_s=token_reread_s) if token_file else None
        rest = RestClient(  # the same timeout, retries and (daemon-watched) sleep
            str(where),
            token=token,
            token_source=source,
            user=user,
            timeout=commands.timeout,
            retries=commands.retries,
            backoff=commands.backoff,
            sleep=commands.sleep,
        )
    transport = RestTransport(
        rest,
        CliTransport(commands),
        pin_nodes_with_cli=pin_nodes_with_cli,
        cli_fallback=cli_fallback,
    )
    return SlurmBackend(transport, managed_partitions=managed_partitions, clock=clock, **options)
