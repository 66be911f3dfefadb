"""SlurmRestCluster: the same backend through slurmrestd instead of the commands.

It shares SlurmCluster's round logic and the parsers (slurmrestd's /jobs and
/nodes return the same documents as squeue/sinfo --json) and replaces only the
primitives. What Slurm 22.05's REST API (openapi/v0.0.38) cannot do, checked on
the real daemon:

* no node list on a job update ("Disabled key: required_nodes"): the job is
  placed by partition, GRES and node count, and the node list is set with
  ``scontrol update`` when ``pin_nodes_with_cli`` (the default); without it the
  job must go to a partition that holds only GPUs of the target type, and Slurm
  picks the nodes;
* no requeue: ``scontrol requeuehold`` is the fallback for a job that ignores the
  checkpoint signal (reported as failed when ``cli_fallback`` is off);
* no batch forms: one request per job per action (no process is spawned);
* signals go to every step of the job (``DELETE /job/{id}?signal=USR1``; there is
  no ``--batch`` flag), which reaches the batch shell of sbatch jobs.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from slurm_gavel.backends.slurm_cli import SlurmCluster, note_errors
from slurm_gavel.backends.slurm_commands import SlurmCommands, SlurmUnreachable
from slurm_gavel.backends.slurm_json import SlurmJsonError
from slurm_gavel.backends.slurm_snapshot import StartOrder, job_list
from slurm_gavel.model import JobId

API = "/slurm/v0.0.38"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class RestClient:
    """Minimal slurmrestd client: unix socket (rest_auth/local) or http://host:port
    with a JWT (X-SLURM-USER-NAME / X-SLURM-USER-TOKEN); retries while unreachable."""

    def __init__(
        self,
        address: str | Path,
        *,
        user: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = str(address)
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["X-SLURM-USER-TOKEN"] = token
        if user:
            self.headers["X-SLURM-USER-NAME"] = user
        self.timeout, self.retries, self.backoff, self.sleep = timeout, retries, backoff, sleep
        self.counts: Counter[str] = Counter()

    def _connect(self) -> http.client.HTTPConnection:
        if self.address.startswith(("http://", "https://")):
            host = self.address.split("://", 1)[1].rstrip("/")
            cls = (
                http.client.HTTPSConnection
                if self.address.startswith("https")
                else http.client.HTTPConnection
            )
            return cls(host, timeout=self.timeout)
        return _UnixConnection(self.address.removeprefix("unix:"), self.timeout)

    def request(
        self, kind: str, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict:
        delay, last = self.backoff, ""
        for attempt in range(self.retries + 1):
            self.counts[kind] += 1
            try:
                conn = self._connect()
                conn.request(
                    method,
                    path,
                    body=None if body is None else json.dumps(body),
                    headers=self.headers,
                )
                resp = conn.getresponse()
                raw = resp.read()
                conn.close()
            except (OSError, http.client.HTTPException) as e:
                last = str(e)
            else:
                try:
                    doc = json.loads(raw) if raw else {}
                except json.JSONDecodeError:
                    raise SlurmJsonError(
                        f"slurmrestd {method} {path}: HTTP {resp.status}, not JSON: {raw[:200]!r}"
                    ) from None
                # A GET with errors is retried: with slurmctld down, 22.05's /jobs and
                # /nodes answer an empty list plus "Failed while looking for jobs" /
                # "Unspecified error", which must never be read as "no jobs".
                if _unreachable(doc) or (method == "GET" and doc.get("errors")):
                    last = _first_error(doc)
                else:
                    return doc
            if attempt < self.retries:
                self.sleep(delay)
                delay *= 2
        raise SlurmUnreachable(
            f"slurmrestd at {self.address} ({method} {path}) failed after "
            f"{self.retries + 1} tries: {last}"
        )

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _first_error(doc: Mapping[str, Any]) -> str:
    errs = doc.get("errors") or []
    if not errs:
        return ""
    e = errs[0]
    return str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)


def _unreachable(doc: Mapping[str, Any]) -> bool:
    text = " ".join(
        str(e.get("error", "")) + " " + str(e.get("description", ""))
        for e in doc.get("errors") or []
        if isinstance(e, Mapping)
    )
    return "Unable to contact slurm controller" in text


class SlurmRestCluster(SlurmCluster):
    """SlurmCluster whose observe/act go through slurmrestd (see the module notes)."""

    def __init__(
        self,
        address: str | Path | None = None,
        *,
        url: str | Path | None = None,
        token: str | None = None,
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
        http(s)://host:port (rest_auth/jwt: pass token and user). commands run the
        scontrol fallbacks (node list, requeuehold)."""
        super().__init__(
            managed_partitions=managed_partitions, commands=commands or SlurmCommands(env), **kwargs
        )
        where = address if address is not None else url
        if rest is None and where is None:
            raise ValueError("SlurmRestCluster needs the slurmrestd address (socket or URL)")
        self.rest = rest or RestClient(str(where), token=token, user=user)
        self.pin_nodes_with_cli = pin_nodes_with_cli
        self.cli_fallback = cli_fallback

    @property
    def commands_issued(self) -> int:
        return self.rest.total + self.commands.total

    def _fetch(self) -> tuple[dict, dict]:
        return (
            self.rest.request("observe", "GET", f"{API}/nodes"),
            self.rest.request("observe", "GET", f"{API}/jobs"),
        )

    def _update(
        self, kind: str, job_id: JobId, body: Mapping[str, Any], failed: dict[JobId, str]
    ) -> bool:
        doc = self.rest.request(kind, "POST", f"{API}/job/{quote(job_id)}", body)
        err = _first_error(doc)
        if err:
            failed[job_id] = f"slurmrestd: {err}"
            return False
        return True

    def _place(self, orders: list[StartOrder], failed: dict[JobId, str]) -> None:
        pinned: list[StartOrder] = []
        for o in orders:
            if not self.pin_nodes_with_cli and not self._type_only_partition(o):
                failed[o.job_id] = (
                    f"partition {o.partition} mixes GPU types and 22.05's "
                    "REST API cannot set a node list (enable pin_nodes_with_cli)"
                )
                continue
            body = {
                "partition": o.partition,
                "gres": o.gres(),
                "nodes": [len(o.nodes), len(o.nodes)],
                "begin_time": "now",
            }
            if self._update("place", o.job_id, body, failed):
                pinned.append(o)
        if self.pin_nodes_with_cli and pinned:
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

    def _hold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        for j in ids:
            self._update("hold", j, {"hold": True}, failed)

    def _send_signal(self, ids: list[JobId], failed: dict[JobId, str]) -> set[JobId]:
        bad: set[JobId] = set()
        for j in ids:
            doc = self.rest.request(
                "signal", "DELETE", f"{API}/job/{quote(j)}?signal={self.checkpoint_signal}"
            )
            err = _first_error(doc)
            if err:
                failed[j] = f"slurmrestd: {err}"
                bad.add(j)
        return bad

    def _states(self, ids: list[JobId]) -> dict[JobId, str]:
        doc = self.rest.request("wait", "GET", f"{API}/jobs")
        wanted = set(ids)
        out = {}
        for raw in doc.get("jobs") or []:
            job_id = str(raw.get("job_id"))
            if job_id in wanted:
                state = raw.get("job_state")
                out[job_id] = state[0] if isinstance(state, list) and state else str(state)
        return out

    def _requeuehold(self, ids: list[JobId], failed: dict[JobId, str]) -> None:
        if not self.cli_fallback:
            for j in ids:
                failed[j] = (
                    "ignored the checkpoint signal; 22.05's REST API cannot requeue "
                    "(enable cli_fallback for scontrol requeuehold)"
                )
            return
        res = self.commands.run("requeuehold", ["scontrol", "requeuehold", job_list(ids)])
        note_errors(res, ids, failed)
