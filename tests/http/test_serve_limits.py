"""HTTP limits of a real ``agentcore serve`` process, over raw sockets: an over-long
request line is 414 and an over-large head 431 (connection closed, memory bounded), a
head or a body that stalls is 408 after its timeout, the connection cap answers 503,
and another client is served all along."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from helpers import cli_env, start_serve
from processes import reap

from agentcore import AgentCore

pytestmark = pytest.mark.slow  # each test starts a server process

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MAX_CONNECTIONS = 12
MAX_URL = 1024
MAX_HEADERS = 4096


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    port: int
    key: str

    def verify(self) -> int:
        """Another client's request: its status."""
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.get(self.url + "/v1/auth/verify", headers=headers, timeout=10).status_code

    def connect(self, source: str = "127.0.0.1") -> socket.socket:
        """A connection from ``source`` (loopback answers all of 127/8)."""
        sock = socket.create_connection(("127.0.0.1", self.port), 10, (source, 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("serve-limits") / "limits.db"
    with AgentCore.open(db) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
    env = {
        **cli_env(),
        "AGENTCORE_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "AGENTCORE_BODY_TIMEOUT": str(BODY_TIMEOUT),
        "AGENTCORE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "AGENTCORE_MAX_URL_BYTES": str(MAX_URL),
        "AGENTCORE_MAX_HEADER_BYTES": str(MAX_HEADERS),
        "AGENTCORE_RATE_LIMIT_TEST": "100000",
    }
    process, url = start_serve(db, key, env=env)
    try:
        yield Served(process, url, int(url.rsplit(":", 1)[1]), key)
    finally:
        reap(process)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the one answer on ``sock``; then the server must
    close the connection (``recv`` gives end of file)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def problem_code(body: bytes) -> str:
    return str(json.loads(body)["code"])


def send_until_refused(sock: socket.socket, piece: bytes, total: int) -> int:
    """Send ``piece`` repeatedly up to ``total`` bytes; stop once the server closes."""
    sent = 0
    try:
        while sent < total:
            sock.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_an_endless_request_line_is_414_and_closed_and_memory_stays_bounded(
    served: Served,
) -> None:
    before = served.rss_kib()
    for _ in range(5):  # 5 connections each trying to push a 20 MB URL
        with served.connect() as sock:
            sock.sendall(b"GET /v1/agents?q=")
            sent = send_until_refused(sock, b"a" * 65536, 20 * 1024 * 1024)
            assert sent < 20 * 1024 * 1024  # refused long before the end
            status, headers, body = read_answer(sock)
        assert status == 414 and problem_code(body) == "uri_too_long"
        assert headers["connection"] == "close" and headers["request-id"].startswith("req_")
        assert headers["content-type"] == "application/problem+json"
    assert served.rss_kib() - before < 30 * 1024  # the 100 MB pushed were never held
    assert served.verify() == 200


def test_an_endless_header_section_is_431_and_closed(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"GET /v1/agents HTTP/1.1\r\nHost: x\r\n")
        send_until_refused(sock, b"X-Padding: " + b"p" * 1000 + b"\r\n", 5 * 1024 * 1024)
        status, headers, body = read_answer(sock)
    assert status == 431 and problem_code(body) == "headers_too_large"
    assert headers["connection"] == "close"
    assert served.verify() == 200


def test_a_whole_head_over_the_limits_is_refused_by_the_app(served: Served) -> None:
    # arriving whole, the head reaches the app, which checks the exact limits
    auth = {"Authorization": f"Bearer {served.key}"}
    long_url = httpx.get(f"{served.url}/v1/agents?x={'a' * MAX_URL}", headers=auth)
    assert long_url.status_code == 414 and long_url.json()["code"] == "uri_too_long"
    padding = {"X-Padding": "p" * MAX_HEADERS}
    big = httpx.get(f"{served.url}/v1/agents", headers={**auth, **padding})
    assert big.status_code == 431 and big.json()["code"] == "headers_too_large"
    assert big.headers["request-id"] == big.json()["request_id"]
    just_under = {"X-Padding": "p" * (MAX_HEADERS - 200)}
    assert httpx.get(f"{served.url}/v1/agents", headers={**auth, **just_under}).is_success


def test_a_stalled_head_is_408_after_the_header_timeout(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthori")
        began = time.monotonic()
        assert served.verify() == 200  # meanwhile another client is served
        status, headers, body = read_answer(sock)
        waited = time.monotonic() - began
    assert status == 408 and problem_code(body) == "header_timeout"
    assert headers["connection"] == "close"
    assert HEADER_TIMEOUT * 0.8 <= waited < HEADER_TIMEOUT + 5


def test_a_silent_connection_is_closed_after_the_header_timeout(served: Served) -> None:
    with served.connect() as sock:
        began = time.monotonic()
        assert sock.recv(1024) == b""  # closed, nothing said: no request was started
        assert HEADER_TIMEOUT * 0.8 <= time.monotonic() - began < HEADER_TIMEOUT + 5


def test_a_partial_head_after_an_answer_is_timed_too(served: Served) -> None:
    # the keep-alive timer stops at the first byte of the next request: ours does not
    with served.connect() as sock:
        request = (
            f"GET /v1/auth/verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.key}\r\n\r\n"
        )
        sock.sendall(request.encode())
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /v1/agents HTTP/1.1\r\n")
        status, _, body = read_answer(sock)
    assert status == 408 and problem_code(body) == "header_timeout"


def test_a_stalled_body_is_408_after_the_body_timeout(served: Served) -> None:
    with served.connect() as sock:
        body = b'{"query": "refunds"}'
        sock.sendall(
            b"POST /v1/knowledge/search HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {served.key}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            + body  # 20 of the 100 bytes promised
        )
        began = time.monotonic()
        status, headers, answer = read_answer(sock)
        waited = time.monotonic() - began
    assert status == 408 and problem_code(answer) == "body_timeout"
    assert headers["connection"] == "close" and headers["request-id"].startswith("req_")
    assert BODY_TIMEOUT * 0.8 <= waited < BODY_TIMEOUT + 5
    assert served.verify() == 200


def test_past_the_connection_cap_a_request_is_503_until_the_idle_ones_are_dropped(
    served: Served,
) -> None:
    # from four addresses, each holding its share (a quarter): together the whole cap
    idle = [served.connect(f"127.0.0.{10 + n % 4}") for n in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # every one accepted
        assert served.verify() == 503  # uvicorn's own answer, text/plain
        time.sleep(HEADER_TIMEOUT + 1)  # the header timeout closes the idle ones
        assert all(sock.recv(1024) == b"" for sock in idle)
        assert served.verify() == 200
    finally:
        for sock in idle:
            sock.close()
