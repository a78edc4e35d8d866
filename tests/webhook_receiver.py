"""A scriptable webhook receiver on 127.0.0.1 for tests and benchmarks.

It records every request (path, lower-cased headers, body, arrival time) and answers
from a per-path script: a list of :class:`Reply` consumed one per request, then the
path's default reply. A reply can set the status, extra headers (``Retry-After``,
``Location``), a delay before answering, an event to answer once set (the test decides
when), or a hang (the handler sleeps, interruptibly, so ``close()`` never waits for it).

    with Receiver() as rx:
        rx.script("/hook", [Reply(500), Reply(503, {"Retry-After": "120"})])
        url = rx.url("/hook")
        ...
        assert rx.wait_for(2)
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """How to answer one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering
    hang: float = 0.0  # seconds to sleep before answering (a stuck receiver)
    until: threading.Event | None = None  # answer once it is set (or the receiver closes)


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when the body had been read
    wall: float  # time.time() at the same moment

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here


class Receiver:
    """A threaded HTTP receiver; use as a context manager (``close()`` on exit)."""

    def __init__(self, default: Reply | None = None) -> None:
        self._default = default or Reply()
        self._defaults: dict[str, Reply] = {}
        self._scripts: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self.received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like a real receiver

            def setup(self) -> None:
                super().setup()
                # answer head and body without waiting on Nagle + delayed ACK (40 ms)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path
                reply = receiver._record_and_pick(
                    Received(
                        path=path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=body,
                        at=time.monotonic(),
                        wall=time.time(),
                    )
                )
                if reply.hang and receiver._stop.wait(reply.hang):
                    self.close_connection = True
                    return
                if reply.until is not None:
                    while not (reply.until.wait(0.05) or receiver._stop.is_set()):
                        pass
                if reply.delay:
                    time.sleep(reply.delay)
                payload = b'{"ok":true}'
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # scripting --------------------------------------------------------------------

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, replies: Iterable[Reply], *, then: Reply | None = None) -> None:
        """Answer the next requests to ``path`` with ``replies``, then with ``then``."""
        with self._lock:
            self._scripts[path] = deque(replies)
            if then is not None:
                self._defaults[path] = then

    def always(self, path: str, reply: Reply) -> None:
        """Answer every request to ``path`` with ``reply`` (after any scripted ones)."""
        with self._lock:
            self._defaults[path] = reply

    def _record_and_pick(self, seen: Received) -> Reply:
        with self._lock:
            self.received.append(seen)
            self._changed.notify_all()
            queue = self._scripts.get(seen.path)
            if queue:
                return queue.popleft()
            return self._defaults.get(seen.path, self._default)

    # inspecting -------------------------------------------------------------------

    def requests(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if path is None or r.path == path]

    def count(self, path: str | None = None) -> int:
        return len(self.requests(path))

    def distinct_ids(self, path: str | None = None) -> set[str]:
        return {r.webhook_id for r in self.requests(path)}

    def wait_for(self, n: int, *, path: str | None = None, timeout: float = 60.0) -> bool:
        """Wait (bounded) until ``path`` (or any path) has at least ``n`` requests; the
        default bound only guards a hang (a busy machine delivers late, not never)."""
        end = time.monotonic() + timeout
        with self._lock:
            while True:
                have = sum(1 for r in self.received if path is None or r.path == path)
                if have >= n:
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.1))

    def wait_for_ids(self, n: int, *, path: str | None = None, timeout: float = 60.0) -> bool:
        """Wait (bounded) until at least ``n`` distinct webhook-ids arrived (``wait_for``)."""
        end = time.monotonic() + timeout
        with self._lock:
            while True:
                ids = {r.webhook_id for r in self.received if path is None or r.path == path}
                if len(ids) >= n:
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.2))

    # lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()  # wakes hanging handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
