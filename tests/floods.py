"""One client address holding many half-sent request heads, and another address's
requests meanwhile: the connection flood of issue 36.

Shared by ``tests/http/test_client_bounds.py`` and ``benchmarks/ingest_safety.py``.
Loopback answers every address of 127/8, so a client socket bound to 127.0.0.2 is
another client to a server on 127.0.0.1. ``python tests/floods.py PORT COUNT`` floods in
a process of its own (``flood_process``), so that timing the other client in the
benchmark's process does not also time the flood's share of its GIL.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

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


def summary(results: list[tuple[int, float]]) -> dict[str, float]:
    """The share of ``results`` answered 200, and the p50 and p99 latency (ms) of all."""
    ordered = sorted(ms for _, ms in results) or [float("nan")]
    return {
        "share_200": sum(1 for status, _ in results if status == 200) / max(1, len(results)),
        "p50_ms": statistics.median(ordered),
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "n": len(results),
    }


@contextlib.contextmanager
def flood_process(port: int, count: int, *, source: str = "127.0.0.1") -> Iterator[Counter[int]]:
    """A ``HeadFlood`` in a process of its own, running once every connection has been
    opened; the counter it yields is filled with its ``answers`` when the block ends."""
    answers: Counter[int] = Counter()
    child = subprocess.Popen(
        [sys.executable, __file__, str(port), str(count), source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the flood did not start")
        yield answers
        child.stdin.close()  # the flood's cue to stop
        report = json.loads(child.stdout.readline())
        answers.update({int(status): n for status, n in report.items()})
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _flood_until_stdin_closes(port: int, count: int, source: str) -> None:
    with HeadFlood(port, count, source=source) as flood:
        print("ready", flush=True)
        sys.stdin.read()
    print(json.dumps(dict(flood.answers)), flush=True)


if __name__ == "__main__":
    _flood_until_stdin_closes(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
