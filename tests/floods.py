"""One client address holding many half-sent request heads, and another address's
requests meanwhile: the connection flood of issue 36.

Used by ``tests/http/test_client_bounds.py``. Loopback answers every address of 127/8,
so a client socket bound to 127.0.0.2 is another client to a server on 127.0.0.1.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import Counter

import httpx

HALF_HEAD = b"GET /v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthori"
"""A request head that never ends: what each flooding connection sends."""


class HeadFlood:
    """``count`` connections from ``source``, each sending half a request head and then
    nothing; one the server answers or closes is re-opened at once, so the flood keeps
    ``count`` connections for as long as it runs (on a thread, while in use).

    ``answers`` counts the status of each answer the server sent a flooding connection
    (``0``: closed without one); ``opened`` how many connections it opened in all.
    """

    def __init__(self, port: int, count: int, *, source: str = "127.0.0.1") -> None:
        self.port = port
        self.count = count
        self.source = source
        self.answers: Counter[int] = Counter()
        self.opened = 0
        self.failed_connects = 0
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HeadFlood:
        for _ in range(self.count):
            self._open()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _open(self) -> None:
        sock = socket.socket()
        try:
            sock.bind((self.source, 0))
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(HALF_HEAD)
        except OSError:
            sock.close()
            self.failed_connects += 1
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)
        self.opened += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                self.answers[_status(data)] += 1
                self._selector.unregister(sock)
                sock.close()  # what was not read with it does not matter: re-open
                self._open()
            while len(self._selector.get_map()) < self.count and not self._stop.is_set():
                before = self.failed_connects
                self._open()
                if self.failed_connects > before:
                    time.sleep(0.05)  # the backlog is full: let the server catch up


def _status(data: bytes) -> int:
    if not data.startswith(b"HTTP/1.1 "):
        return 0
    return int(data.split(b" ", 2)[1])


def requests_from(
    source: str, url: str, key: str, count: int, *, timeout: float = 60
) -> list[tuple[int, float]]:
    """``count`` ``GET /v1/auth/verify`` from ``source``, each on a fresh connection (so
    each must be accepted anew): their statuses (``0``: no answer) and milliseconds."""
    transport = httpx.HTTPTransport(
        local_address=source, limits=httpx.Limits(max_keepalive_connections=0)
    )
    results = []
    with httpx.Client(
        transport=transport, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
    ) as client:
        for _ in range(count):
            began = time.perf_counter()
            try:
                status = client.get(url + "/v1/auth/verify").status_code
            except httpx.HTTPError:
                status = 0
            results.append((status, (time.perf_counter() - began) * 1000))
    return results
