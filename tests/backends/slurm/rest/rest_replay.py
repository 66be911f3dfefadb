"""A unix-socket HTTP server for the slurmrestd client's unit tests.

It answers with what a test scripts (the answers are captured from the real
slurmrestd of each release, tests/backends/data/rest/<release>/), records every
request, and can stay silent to play a slurmrestd that stopped answering. It
tests the client's rules (version choice, retries, tokens); Slurm's behaviour is
tested against the real daemons (test_rest_transport.py)."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[2] / "data" / "rest"


def load(release: str, name: str) -> Any:
    return json.loads((DATA / release / name).read_text())


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# An answer: (status, JSON document or plain text), or None to never answer.
Answer = tuple[int, Any] | None
Route = Callable[[Seen], Answer]


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def replay(sock: Path, route: Route) -> Iterator[list[Seen]]:
    seen: list[Seen] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            req = Seen(
                self.command,
                self.path,
                dict(self.headers.items()),
                json.loads(raw) if raw else None,
            )
            seen.append(req)
            answer = route(req)
            if answer is None:
                release.wait(10)  # silent until the test ends
                return
            status, doc = answer
            data = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
            kind = "text/plain" if isinstance(doc, str) else "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def address_string(self) -> str:
            return "unix"

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _Server(str(sock), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        release.set()
        server.shutdown()
        server.server_close()
