"""RestClient: HTTP to slurmrestd over a unix socket or http(s), with the CLI
backend's retry rule (slurm/retry.py, as slurm/cli/commands.py).

* A request that never reached slurmrestd (connect refused, socket missing) is
  retried with exponential backoff, whatever its method: nothing happened.
* So is an answer saying slurmrestd could not reach slurmctld, and a GET whose
  answer carries errors (22.05 answers /jobs with [] plus an error when
  slurmctld is down; never read as "no jobs").
* A non-idempotent request (POST, DELETE, the requeue call) that was sent and got
  no answer in time is never retried: it may have half happened (a signal
  delivered twice would cost a job its checkpoint grace). It raises
  SlurmActionTimedOut, and the daemon reconciles with what Slurm reports.
* A refused token (auth.auth_refused) is re-read from its file and the
  request sent once more (a refused request did nothing); refused again, it
  raises SlurmRestAuthError naming the file and the fix.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slurm_gavel.backends.slurm.from_json import SlurmJsonError
from slurm_gavel.backends.slurm.rest.auth import (
    SlurmRestAuthError,
    TokenSource,
    auth_refused,
    check_token_transport,
)
from slurm_gavel.backends.slurm.retry import attempts
from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut, SlurmUnreachable


class SlurmRestEndpointGone(SlurmUnreachable):
    """HTTP 404 for a whole endpoint: slurmrestd no longer serves this API version
    (upgraded under the daemon); the version is discovered again next time."""


class _NotSent(Exception):
    """The connection could not be opened: nothing reached slurmrestd."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class RestClient:
    """Minimal slurmrestd client: unix socket (rest_auth/local) or http(s)://host:port
    with a JWT (X-SLURM-USER-TOKEN, X-SLURM-USER-NAME); see the module notes."""

    def __init__(
        self,
        address: str | Path,
        *,
        user: str | None = None,
        token: str | None = None,
        token_source: TokenSource | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = str(address)
        if token or token_source:
            check_token_transport(self.address)
        self.user, self.token, self.token_source = user, token, token_source
        self.timeout, self.retries, self.backoff, self.sleep = timeout, retries, backoff, sleep
        self.counts: Counter[str] = Counter()
        self._tally = threading.Lock()  # the act signals from a second thread

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        token = self.token_source.current() if self.token_source else self.token
        if token:
            headers["X-SLURM-USER-TOKEN"] = token
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        return headers

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def _connection(self) -> http.client.HTTPConnection:
        if self.address.startswith(("http://", "https://")):
            host = urlsplit(self.address).netloc  # host:port, [v6]:port; no path
            if self.address.startswith("https://"):
                return http.client.HTTPSConnection(host, timeout=self.timeout)
            return http.client.HTTPConnection(host, timeout=self.timeout)
        return _UnixConnection(self.address.removeprefix("unix:"), self.timeout)

    def _send(self, method: str, path: str, body: Any) -> tuple[int, bytes]:
        conn = self._connection()
        try:
            try:
                conn.connect()
            except OSError as e:
                raise _NotSent(str(e) or type(e).__name__) from None
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=self.headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def request(
        self,
        kind: str,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        idempotent: bool | None = None,
    ) -> dict:
        """The JSON answer (which may carry per-job "errors"); see the module notes.
        idempotent: default GET only; say False for a GET that acts."""
        idempotent = method == "GET" if idempotent is None else idempotent
        last, reread = "", False
        for _ in attempts(self.retries, self.backoff, self.sleep):
            doc, last, reread = self._attempt(kind, method, path, body, idempotent, reread)
            if doc is not None:
                return doc
        raise SlurmUnreachable(
            f"slurmrestd at {self.address} ({method} {path}) failed after "
            f"{self.retries + 1} tries: {last}"
        )

    def _attempt(
        self,
        kind: str,
        method: str,
        path: str,
        body: Any,
        idempotent: bool,
        reread: bool,
    ) -> tuple[dict | None, str, bool]:
        """One try of request(): (the document, "", reread) or (None, why, reread) for
        another try. A refused token is read again once per request, and the request
        sent again at once (a refused request did nothing)."""
        while True:
            with self._tally:
                self.counts[kind] += 1
            try:
                status, raw = self._send(method, path, body)
            except _NotSent as e:
                return None, f"cannot connect: {e}", reread
            except (OSError, http.client.HTTPException) as e:
                if not idempotent:
                    raise SlurmActionTimedOut(
                        f"slurmrestd {method} {path}: {e or type(e).__name__} (it may have half "
                        "happened, so it is not retried): slurmrestd is not answering; this "
                        "round's remaining actions are skipped and the next round starts "
                        "from what Slurm reports"
                    ) from None
                return None, str(e) or type(e).__name__, reread
            doc = _json(raw)
            if auth_refused(status, doc):
                if self.token_source is not None and not reread:
                    reread = True
                    self.token_source.refresh()
                    continue
                raise self._auth_error(status, raw, doc)
            if doc is None:
                if status == 404:
                    raise SlurmRestEndpointGone(
                        f"slurmrestd at {self.address} does not serve {path} (HTTP 404); "
                        "the API version is discovered again at the next round"
                    )
                raise SlurmJsonError(
                    f"slurmrestd {method} {path}: HTTP {status}, not JSON: {raw[:200]!r}"
                )
            # A GET with errors is retried: with slurmctld down, 22.05's /jobs and
            # /nodes answer an empty list plus "Failed while looking for jobs" /
            # "Unspecified error", which must never be read as "no jobs".
            if _unreachable(doc) or (method == "GET" and idempotent and doc.get("errors")):
                return None, first_error(doc), reread
            return doc, "", reread

    def _auth_error(self, status: int, raw: bytes, doc: dict | None) -> SlurmRestAuthError:
        said = first_error(doc) if doc else raw[:100].decode("utf-8", "replace").strip()
        if self.token_source is not None:
            f = self.token_source.path
            fix = (
                f"also after re-reading {f}: renew it (scontrol token username="
                f"{self.user or 'USER'} lifespan=SECONDS > {f}; chmod 600 {f})"
            )
        elif self.token:
            fix = "renew the token (slurm.rest_token_file, re-read on a schedule)"
        else:
            fix = (
                "with rest_auth/jwt set slurm.rest_token_file and slurm.rest_user; with "
                "rest_auth/local the daemon must connect as the user slurmrestd runs as"
            )
        return SlurmRestAuthError(
            f"slurmrestd at {self.address} refused the credentials (HTTP {status}: {said}); {fix}"
        )


def _json(raw: bytes) -> dict | None:
    """The answer as JSON; None when it is not a JSON object (404/401 are plain text).

    slurmrestd copies a job's comment into /jobs byte for byte, and a user may write
    bytes that are not UTF-8 there: decoded strictly, one such job would fail every
    observe of every job. Those bytes are kept as surrogates (as the CLI backend
    reads squeue), never written back to Slurm."""
    try:
        doc = json.loads(raw.decode("utf-8", "surrogateescape")) if raw else {}
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def first_error(doc: Mapping[str, Any] | None) -> str:
    errs = (doc or {}).get("errors") or []
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
