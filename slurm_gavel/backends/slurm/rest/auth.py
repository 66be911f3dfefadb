"""The slurmrestd token: where it may be sent, the file it comes from, when to re-read it.

A JWT for the daemon's Slurm user has operator rights over every job, so:

* it is never sent over plain http to another host (anyone on the path could
  read it): https://, a unix: socket, or http:// to a loopback address only;
* its file must be a regular file owned by the daemon's user and readable by
  nobody else (mode 0600 or 0400), or the daemon refuses it and says how to fix it;
* it is re-read on a schedule (tokens from ``scontrol token lifespan=N`` expire,
  and a cron job or a secrets agent renews the file) and at once when slurmrestd
  says the token was refused (HTTP 401/403/511, error 1007 "Protocol
  authentication error", seen on 24.11 and 26.05 for an expired token).
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slurm_gavel.errors import InputError

MAX_TOKEN_BYTES = 64 * 1024
DEFAULT_REREAD_S = 300.0
# A JWT is three base64url parts; anything else (spaces, CR/LF that would add HTTP
# headers, a file of the wrong kind) is refused before it reaches a request.
_JWT = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){1,4}$")
# HTTP statuses slurmrestd answers a refused token with, and Slurm's
# ESLURM_PROTOCOL_AUTHENTICATION_ERROR (the error 511 bodies carry).
AUTH_STATUSES = frozenset({401, 403, 511})
AUTH_ERROR_NUMBER = 1007


class TokenFileError(InputError):
    """The token file is missing, unsafe or does not hold a token."""


class SlurmRestAuthError(InputError):
    """slurmrestd refused the token (also after re-reading it): a human must renew it."""


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token_transport(address: str) -> None:
    """Refuse to send a token over plain http to a host that is not this one."""
    if not address.startswith("http://"):
        return  # https:// or a unix socket: nobody on the wire can read it
    host = urlsplit(address).hostname or ""
    if not is_loopback(host):
        raise InputError(
            f"slurm.rest_url: refusing to send the slurmrestd token over plain http to "
            f"{host!r}: anyone on the network path could read it and act as the daemon's "
            "Slurm user. Use https://, a unix: socket, or http:// to localhost/127.0.0.1/::1"
        )


def read_token_file(path: Path) -> str:
    """The token in `path`, after checking the file is the daemon's own and private."""
    where = f"slurm.rest_token_file {path}"
    try:
        # O_NONBLOCK: a FIFO put there must not hang the daemon; fstat checks what
        # was opened (not the name, which could be swapped between two calls).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TokenFileError(
            f"{where}: cannot open it ({e.strerror}); create it with `scontrol token` "
            "output, owned by the daemon's user, mode 0600"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"{where}: not a regular file; put the token in a plain file")
        euid = os.geteuid()
        if st.st_uid != euid:
            raise TokenFileError(
                f"{where}: owned by uid {st.st_uid}, not by the daemon's user (uid {euid}); "
                f"chown it to the daemon's user"
            )
        if st.st_mode & 0o077:
            raise TokenFileError(
                f"{where}: mode {stat.S_IMODE(st.st_mode):04o} lets group/others read or "
                f"change the token; run `chmod 600 {path}`"
            )
        if st.st_size > MAX_TOKEN_BYTES:
            raise TokenFileError(f"{where}: {st.st_size} bytes, too big for a token")
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", errors="replace").strip()
    # `scontrol token` prints SLURM_JWT=...; accept its output as it is.
    text = text.removeprefix("SLURM_JWT=")
    if not _JWT.match(text):
        raise TokenFileError(
            f"{where}: does not hold a JWT (one line of base64url parts, as printed by "
            "`scontrol token`)"
        )
    return text


class TokenSource:
    """The token, re-read from its file every `reread_s` and on demand."""

    def __init__(
        self,
        path: Path,
        *,
        reread_s: float = DEFAULT_REREAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.reread_s = reread_s
        self.clock = clock
        self.reads = 0
        self._token = ""
        self._read_at = 0.0
        self.refresh()  # fail at start-up, not at the first round

    def refresh(self) -> str:
        self._token = read_token_file(self.path)
        self._read_at = self.clock()
        self.reads += 1
        return self._token

    def current(self) -> str:
        if self.clock() - self._read_at >= self.reread_s:
            return self.refresh()
        return self._token


def auth_refused(status: int, doc: Mapping[str, Any] | None) -> bool:
    """Did slurmrestd (or slurmctld behind it) refuse the credentials?"""
    if status in AUTH_STATUSES:
        return True
    for e in (doc or {}).get("errors") or []:
        if isinstance(e, Mapping) and (
            e.get("error_number") == AUTH_ERROR_NUMBER
            or "authentication" in str(e.get("error", "")).lower()
        ):
            return True
    return False
