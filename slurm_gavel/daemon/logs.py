"""Structured logs: one event per line, as JSON or as key=value pairs.

The daemon logs events, not sentences: ``event=round_done round=12
duration_s=0.41 started=3``. Both formats carry the same fields, so an admin
can grep the key=value form and a log shipper can parse the JSON form.

Other modules keep using ``logging.getLogger(__name__)``; once
:func:`configure` has run, their records come out in the same format, with
fields passed as ``extra={"fields": {...}}`` or through :func:`event`.

Also the values some events carry: a bounded list of job ids (log_ids) and the
account the daemon runs as, for the fixes its errors print (running_as).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

ROOT = "slurm_gavel"


def _timestamp(created: float) -> str:
    ms = int((created % 1) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{ms:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": _timestamp(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
    }
    extra = getattr(record, "fields", None)
    event = getattr(record, "event", None)
    if event:
        out["event"] = event
    msg = record.getMessage()
    if msg and msg != event:
        out["msg"] = msg
    if isinstance(extra, Mapping):
        for k, v in extra.items():
            out.setdefault(str(k), v)
    if record.exc_info and record.exc_info[0] is not None:
        out["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
    return out


def _kv_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, list | tuple | dict):
        v = json.dumps(v, separators=(",", ":"), default=str)
    s = str(v)
    # Quote anything a `key=value` splitter would misread, or a terminal would act on
    # (user-chosen job types can carry ESC sequences); json.dumps escapes it.
    if not s or not s.isprintable() or any(c in s for c in ' ="\\'):
        return json.dumps(s)
    return s


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, separators=(",", ":"))


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _fields(record).items())


def syslog_priority(levelno: int) -> int:
    """The syslog priority journald reads from a leading "<N>" (sd-daemon(3)):
    3 error and critical, 4 warning, 6 info, 7 debug."""
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    return 6 if levelno >= logging.INFO else 7


def stream_is_journal(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """True when `stream` is the journal socket systemd gave the unit (JOURNAL_STREAM).

    systemd sets JOURNAL_STREAM=<device>:<inode> of the unit's stdout/stderr when they
    go to the journal; comparing it with the stream's own file keeps a child whose
    stderr was redirected elsewhere (a pipe, a file) on plain lines, as sd_journal
    documents.
    """
    env = os.environ if environ is None else environ
    value = env.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False  # no file behind it (a StringIO in tests): not the journal
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


class JournalPrefix(logging.Formatter):
    """Prefixes each line with its syslog priority, for `journalctl -p warning`."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        # Both inner formats escape newlines, so one record is one line and one prefix.
        return f"<{syslog_priority(record.levelno)}>{self.inner.format(record)}"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the record (tests swap it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure(
    fmt: str = "kv",
    level: str = "info",
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Send every slurm_gavel.* logger to `stream` (stderr) in the chosen format.

    When that stream is the journal (see :func:`stream_is_journal`) each line starts
    with its syslog priority, so journald files it at the record's level.
    """
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else KeyValueFormatter()
    if stream_is_journal(stream if stream is not None else sys.stderr, environ):
        formatter = JournalPrefix(formatter)
    handler.setFormatter(formatter)
    root = logging.getLogger(ROOT)
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Not also through the root logger: a handler there would print every line twice.
    root.propagate = False


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event with its fields: event(log, "round_done", round=3, duration_s=0.4)."""
    logger.log(level, name, extra={"event": name, "fields": fields})


def log_ids(ids: tuple[str, ...], limit: int = 50) -> str:
    """Job ids for a log line, at most `limit` of them."""
    more = f",+{len(ids) - limit}" if len(ids) > limit else ""
    return ",".join(ids[:limit]) + more


def running_as() -> str:
    """The account the daemon runs as, for the fixes its errors print."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"
