"""SlurmRestCluster: the same backend through slurmrestd instead of the commands.

It shares SlurmCluster's round logic and the parsers (slurmrestd's /jobs and
/nodes return the same documents as squeue/sinfo --json) and replaces only the
primitives. The API version is the newest one both the server (its
``/openapi/v3``) and this code know, and what it can do is read from the same
document (slurm/rest/versions.py has the table, checked on 22.05, 24.11 and
26.05). Where a version cannot do something the commands do:

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

Transport, token and retry rules: slurm/rest/client.py, slurm/rest/auth.py.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from slurm_gavel.backends.slurm.admin_comment import CommentOrder
from slurm_gavel.backends.slurm.backend import SlurmCluster
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands, note_errors
from slurm_gavel.backends.slurm.fields import job_state
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.preemption import requeuehold_argv
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.rest.auth import DEFAULT_REREAD_S, TokenSource
from slurm_gavel.backends.slurm.rest.client import (
    RestClient,
    SlurmRestEndpointGone,
    first_error,
)
from slurm_gavel.backends.slurm.rest.versions import RestApi, api_from_spec
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.core.model import JobId

__all__ = ["RestClient", "SlurmRestCluster"]

_REQUEUE_FAILED = re.compile(r"JobId=(\d+)")
STATE_QUERY_IDS = 100  # job ids per /jobs/state/ request (the URL stays short)


class SlurmRestCluster(SlurmCluster):
    """SlurmCluster whose observe/act go through slurmrestd (see the module notes)."""

    def __init__(
        self,
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
        **kwargs: Any,
    ) -> None:
        """address/url: a unix socket path (``unix:`` optional, rest_auth/local) or
        http(s)://host:port (rest_auth/jwt: token_file, re-read every token_reread_s
        and when refused, or a fixed token; and user). commands run the scontrol
        fallbacks (node list, requeuehold)."""
        super().__init__(
            managed_partitions=managed_partitions, commands=commands or SlurmCommands(env), **kwargs
        )
        where = address if address is not None else url
        if rest is None and where is None:
            raise ValueError("SlurmRestCluster needs the slurmrestd address (socket or URL)")
        if rest is None:
            source = TokenSource(token_file, reread_s=token_reread_s) if token_file else None
            c = self.commands  # the same timeout, retries and (daemon-watched) sleep
            rest = RestClient(
                str(where),
                token=token,
                token_source=source,
                user=user,
                timeout=c.timeout,
                retries=c.retries,
                backoff=c.backoff,
                sleep=c.sleep,
            )
        self.rest = rest
        self.pin_nodes_with_cli = pin_nodes_with_cli
        self.cli_fallback = cli_fallback
        self._api: RestApi | None = None

    def private_data(self) -> str | None:
        """slurmrestd does not publish PrivateData: scontrol reads it, where the scontrol
        fallbacks are allowed."""
        if not self.cli_fallback:
            raise NotImplementedError(
                "slurmrestd does not publish Slurm's PrivateData and the scontrol fallback is off"
            )
        return super().private_data()

    @property
    def commands_issued(self) -> int:
        return self.rest.total + self.commands.total

    @property
    def api(self) -> RestApi:
        """The API version in use, discovered from /openapi/v3 on first use."""
        if self._api is None:
            spec = self.rest.request("discover", "GET", "/openapi/v3")
            self._api = api_from_spec(spec, where=f"slurmrestd at {self.rest.address}")
        return self._api

    def _call(
        self, kind: str, method: str, path: str, body: Any = None, **kw: Any
    ) -> dict[str, Any]:
        api = self.api
        try:
            return self.rest.request(kind, method, api.base + path, body, **kw)
        except SlurmRestEndpointGone:
            self._api = None  # slurmrestd was upgraded: discover again next time
            raise

    def _fetch_nodes(self) -> dict:
        return self._call("observe", "GET", "/nodes")

    def between_rounds(self) -> None:
        """Nothing: observe reads every job's JSON each round (no listing to check)."""

    def _fetch_jobs(self, nodes: Sequence[SlurmNode]) -> list[SlurmJob]:
        # slurmrestd has no cheap listing: every job's JSON, each round (the nodes,
        # which tell the listing's jobs their GPU types, are not needed)
        doc = self._call("observe", "GET", "/jobs")
        return self._job_cache.parse(doc, allow_newer=self._allow_newer)[1]

    def _update(
        self, kind: str, job_id: JobId, body: Mapping[str, Any], failed: dict[JobId, str]
    ) -> bool:
        doc = self._call(kind, "POST", f"/job/{quote(job_id, safe='')}", body)
        err = first_error(doc)
        if err:
            failed[job_id] = f"slurmrestd: {err}"
            return False
        return True

    def _place_body(self, o: StartOrder) -> dict[str, Any]:
        n = len(o.nodes)
        if self.api.legacy:  # v0.0.38 (22.05): gres and a [min, max] node count
            return {
                "partition": o.partition,
                "gres": o.gres(),
                "nodes": [n, n],
                "begin_time": "now",
            }
        body: dict[str, Any] = {
            "partition": o.partition,
            "tres_per_node": f"gres/{o.gres()}",
            "minimum_nodes": n,
            "maximum_nodes": n,
            "begin_time": "now",
        }
        if self.api.node_list:
            body["required_nodes"] = list(o.nodes)
        return body

    def _place(self, orders: list[StartOrder], failed: dict[JobId, str]) -> None:
        pin_with_cli = not self.api.node_list and self.pin_nodes_with_cli
        pinned: list[StartOrder] = []
        for o in orders:
            if not self.api.node_list and not pin_with_cli and not self._type_only_partition(o):
                failed[o.job_id] = (
                    f"partition {o.partition} mixes GPU types and slurmrestd's API "
                    f"{self.api.version} cannot set a node list (enable pin_nodes_with_cli)"
                )
                continue
            if self._update("place", o.job_id, self._place_body(o), failed):
                pinned.append(o)
        if pin_with_cli and pinned:
            lines = "".join(
                f"update JobId={o.job_id} NodeList={','.join(o.nodes)}\n" for o in pinned
            )
            res = self.commands.run("place-nodes", ["scontrol"], stdin=lines)
            note_errors(res, [o.job_id for o in pinned], failed, check_rc=False)

    def _type_only_partition(self, o: StartOrder) -> bool:
        assert self.view is not None
        types = {n.gpu_type for n in self.view.nodes.values() if o.partition in n.partitions}
        return types == {o.gpu_type}

    def _release(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        for j in ids:
            self._update("release", j, {"hold": False}, failed)

    def _relabel(self, orders: list[GiveBack], failed: dict[JobId, str]) -> None:
        """A held job given back to Slurm (slurm/giveback.py): its comment, its GPUs."""
        for o in orders:
            body: dict[str, Any] = {"comment": o.comment}
            if o.gres:
                body.update(
                    {"gres": o.gres} if self.api.legacy else {"tres_per_node": f"gres/{o.gres}"}
                )
            self._update("give_back", o.job_id, body, failed)

    def _admin_comment(self, order: CommentOrder, failed: dict[JobId, str]) -> None:
        if self.api.legacy:  # v0.0.38 refuses the key ("Unknown key"): scontrol, if allowed
            if not self.pin_nodes_with_cli:
                raise NotImplementedError(
                    f"slurmrestd's API {self.api.version} cannot set admin_comment "
                    "(enable pin_nodes_with_cli to let the daemon use scontrol)"
                )
            super()._admin_comment(order, failed)
            return
        for j in order.job_ids:
            self._update("admin_comment", j, {"admin_comment": order.text}, failed)

    def _hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        for j in ids:
            self._update("hold", j, {"hold": True}, failed)

    def _send_signal(self, ids: list[JobId], failed: dict[JobId, str]) -> set[JobId]:
        if not ids:  # an empty job list in DELETE /jobs/ would select by filters alone
            return set()
        sig = self.checkpoint_signal
        if self.api.batch_signal:
            body = {"signal": sig, "flags": ["BATCH_JOB"], "jobs": list(ids)}
            return _note_rest_errors(self._call("signal", "DELETE", "/jobs/", body), ids, failed)
        flags = "&flags=BATCH_JOB" if self.api.signal_batch_flag else ""
        bad: set[JobId] = set()
        for j in ids:
            doc = self._call("signal", "DELETE", f"/job/{quote(j, safe='')}?signal={sig}{flags}")
            bad |= _note_rest_errors(doc, [j], failed)
        return bad

    def _states(self, ids: list[JobId]) -> dict[JobId, str]:
        """States of these jobs, polled during the grace period: only theirs where the
        version can (/jobs/state/, v0.0.40+), else the whole /jobs listing."""
        wanted = set(ids)
        if self.api.job_states:
            docs = [
                self._call(
                    "wait", "GET", "/jobs/state/?" + urlencode([("job_id", j) for j in chunk])
                )
                for chunk in (
                    ids[i : i + STATE_QUERY_IDS] for i in range(0, len(ids), STATE_QUERY_IDS)
                )
            ]
            field = "state"
        else:
            docs, field = [self._call("wait", "GET", "/jobs")], "job_state"
        out = {}
        for doc in docs:
            for raw in doc.get("jobs") or []:
                job_id = str(raw.get("job_id"))
                if job_id in wanted:
                    # As squeue names it: 24.11+ list a requeued job still cleaning up
                    # as ["PENDING", "COMPLETING"], which must read as COMPLETING (a
                    # release before it is done lost the relaunch's batch script on 26.05).
                    out[job_id] = job_state(raw.get(field))[0]
        return out

    def _requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        if self.api.requeue and ids:
            body = {"flags": ["Hold", "Incomplete"], "jobs": list(ids)}  # requeuehold_argv
            # Acts: never retried after a timeout (idempotent=False is the POST default).
            _note_rest_errors(self._call("requeuehold", "POST", "/jobs/requeue", body), ids, failed)
            return
        if not self.cli_fallback:
            for j in ids:
                failed[j] = (
                    f"ignored the checkpoint signal; slurmrestd's API {self.api.version} cannot "
                    "requeue (enable cli_fallback for scontrol requeuehold)"
                )
            return
        res = self.commands.run("requeuehold", requeuehold_argv(ids))
        note_errors(res, ids, failed)


def _note_rest_errors(
    doc: Mapping[str, Any], ids: list[JobId], failed: dict[JobId, str]
) -> set[JobId]:
    """Per-job failures of a signal or requeue answer; returns the jobs that failed.

    24.11+ report a signal's failures per job in ``status`` (with HTTP 200 and no
    ``errors``: seen for an unknown job id, also for a single-job DELETE); the
    requeue call reports them in ``errors`` ("Requeue JobId=N failed"). An error
    that names no job of `ids` fails them all (unattributable)."""
    bad: set[JobId] = set()
    wanted = set(ids)
    unattributed: list[str] = []
    for st in doc.get("status") or []:
        if not isinstance(st, Mapping):
            continue
        err = st.get("error") or {}
        code = err.get("code") if isinstance(err, Mapping) else None
        if not code:
            continue
        msg = str(err.get("message") or err.get("string") or code)
        job = str(st.get("step_id") or "").split(".", 1)[0]
        if job in wanted:
            failed[job] = f"slurmrestd: {msg}"
            bad.add(job)
        else:
            unattributed.append(msg)
    for e in doc.get("errors") or []:
        text = (
            str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)
        )
        detail = str(e.get("error") or "") if isinstance(e, Mapping) else ""
        m = _REQUEUE_FAILED.search(text)
        if m and m.group(1) in wanted:
            failed[m.group(1)] = f"slurmrestd: {text}" + (f": {detail}" if detail else "")
            bad.add(m.group(1))
        elif not m:
            unattributed.append(text + (f": {detail}" if detail and detail not in text else ""))
    if unattributed and len(ids) == 1:
        failed[ids[0]] = f"slurmrestd: {'; '.join(unattributed)}"
        bad.add(ids[0])
    elif unattributed:
        for j in ids:
            if j not in bad:
                failed.setdefault(j, f"slurmrestd: {'; '.join(unattributed)}")
                bad.add(j)
    return bad
