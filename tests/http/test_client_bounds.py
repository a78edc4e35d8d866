"""Bounds on what one client can hold of a real ``agentcore serve`` (issue 36): each client
address gets a share of the connections (429 ``too_many_connections`` past it, answered
and closed at once), and a request's body must arrive whole within ``body_deadline``
(408 ``body_timeout``), however steadily it trickles, there and on a mounted app.

Loopback answers all of 127/8: a socket bound to 127.0.0.2 is another client."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import ServerThread
from floods import HeadFlood, requests_from
from helpers import assert_problem, cli_env, start_serve, wait_for
from starlette.applications import Starlette
from starlette.routing import Mount

from agentcore import AgentCore
from agentcore_starlette import HttpSettings, create_app, lifespan_for
from agentcore_starlette.serve.connections import ClientShare, connections_per_client

slow = pytest.mark.slow  # the tests that start a server and wait out its bounds

MAX_CONNECTIONS = 200
SHARE = MAX_CONNECTIONS // 4  # the default share: a quarter
HEADER_TIMEOUT = 3.0
BODY_DEADLINE = 2.0


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    port: int
    key: str

    def connect(self, source: str) -> socket.socket:
        """A connection from ``source`` (an address of 127/8)."""
        sock = socket.create_connection(("127.0.0.1", self.port), 30, (source, 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def verify(self, source: str) -> httpx.Response:
        """``GET /v1/auth/verify`` from ``source`` on a fresh connection."""
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(transport=transport, timeout=30) as client:
            return client.get(
                self.url + "/v1/auth/verify", headers={"Authorization": f"Bearer {self.key}"}
            )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("client-bounds") / "bounds.db"
    with AgentCore.open(db) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
    env = {
        **cli_env(),
        "AGENTCORE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "AGENTCORE_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "AGENTCORE_BODY_DEADLINE": str(BODY_DEADLINE),
        "AGENTCORE_RATE_LIMIT_TEST": "1000000",
    }
    process, url = start_serve(db, key, env=env)
    try:
        yield Served(process, url, int(url.rsplit(":", 1)[1]), key)
    finally:
        process.terminate()
        process.wait(timeout=30)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The one answer on ``sock`` up to the server's end of file: status, headers, body."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


# a share of the connections per client address ---------------------------------------------


@slow
def test_one_address_flooding_half_sent_heads_leaves_another_address_served(
    served: Served,
) -> None:
    # 300 half-sent heads from 127.0.0.1, more than the whole cap, re-opened as they
    # close: the server holds its share of them and refuses the rest at once
    with HeadFlood(served.port, 300, source="127.0.0.1") as flood:
        statuses = [status for status, _ in requests_from("127.0.0.2", served.url, served.key, 200)]
        assert statuses.count(200) >= 0.99 * len(statuses), sorted(set(statuses))
        # the flood was refused: all but its share at once, more as it re-opened them
        wait_for(lambda: flood.answers[429] >= 300 - SHARE)
    # what it got: 429s, and 408s for the heads it held past header_timeout
    assert set(flood.answers) <= {429, 408}, flood.answers


@slow
def test_past_its_share_a_connection_is_answered_429_and_closed_unread(served: Served) -> None:
    held = [served.connect("127.0.0.3") for _ in range(SHARE)]
    try:
        for sock in held:
            sock.sendall(b"GET /v1/agents HTTP/1.1\r\nHost: x\r\n")
        # the next connection of 127.0.0.3 is answered without sending a byte: it never
        # gets to hold a request head, nor a place under max_connections
        with served.connect("127.0.0.3") as extra:
            status, headers, body = read_answer(extra)
        assert status == 429
        assert headers["content-type"] == "application/problem+json"
        assert headers["retry-after"] == "1" and headers["connection"] == "close"
        problem = json.loads(body)
        assert problem["code"] == "too_many_connections" and problem["status"] == 429
        assert problem["request_id"] == headers["request-id"]
        assert str(SHARE) in problem["detail"]
        # as an HTTP client sees it
        assert_problem(served.verify("127.0.0.3"), 429, "too_many_connections")
        assert served.verify("127.0.0.4").status_code == 200  # another address is served
        # a connection the address closes gives its place back
        held.pop().close()
        wait_for(lambda: served.verify("127.0.0.3").status_code == 200)
    finally:
        for sock in held:
            sock.close()


def test_the_default_share_is_a_quarter_of_the_cap_and_at_least_one() -> None:
    assert connections_per_client(HttpSettings(max_connections=1000)) == 250
    assert connections_per_client(HttpSettings(max_connections=3)) == 1
    given = HttpSettings(max_connections=1000, max_connections_per_client=1000)
    assert connections_per_client(given) == 1000  # behind a proxy: the whole cap


def test_a_share_admits_up_to_its_limit_per_address_and_forgets_idle_ones() -> None:
    share = ClientShare(2)
    assert [share.admit("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert share.admit("10.0.0.2")  # another address has its own share
    share.release("10.0.0.1")
    assert share.admit("10.0.0.1") and not share.admit("10.0.0.1")
    for _ in range(2):
        share.release("10.0.0.1")
    share.release("10.0.0.2")
    assert share.open == {}  # nothing kept for addresses with no connection


# how long a head and a body may take --------------------------------------------------------


def trickle(sock: socket.socket, data: bytes, every: float, limit: float) -> bool:
    """Send ``data`` a byte every ``every`` seconds until the server answers (``True``)
    or ``limit`` seconds pass (``False``)."""
    give_up = time.monotonic() + limit
    for byte in data:
        if select.select([sock], [], [], every)[0]:
            return True
        if time.monotonic() > give_up:
            return False
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return True  # closed after its answer: read it
    return bool(select.select([sock], [], [], max(0.0, give_up - time.monotonic()))[0])


@slow
def test_a_head_trickled_a_byte_at_a_time_is_408_at_the_header_timeout(served: Served) -> None:
    with served.connect("127.0.0.5") as sock:
        head = b"GET /v1/agents HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"s" * 10_000
        assert trickle(sock, head, every=0.2, limit=HEADER_TIMEOUT + 60)
        status, headers, body = read_answer(sock)
    assert status == 408 and json.loads(body)["code"] == "header_timeout"
    assert headers["connection"] == "close"


def slow_search(key: str, length: int) -> tuple[bytes, bytes]:
    """The head of a search whose body is ``length`` bytes, and such a body."""
    body = json.dumps({"query": "refunds " + "x" * (length - 30)}).encode()[:length]
    head = (
        "POST /v1/knowledge/search HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head, body


@slow
def test_a_body_trickled_past_the_body_deadline_is_408_and_closed(served: Served) -> None:
    # a byte every 0.2 s never stalls for body_timeout (30 s), but 1,000 bytes would
    # take 200 s: the whole-body deadline answers first
    head, body = slow_search(served.key, 1000)
    with served.connect("127.0.0.6") as sock:
        sock.sendall(head)
        assert trickle(sock, body, every=0.2, limit=BODY_DEADLINE + 60)
        status, headers, answer = read_answer(sock)
    assert status == 408, answer
    problem = json.loads(answer)
    assert problem["code"] == "body_timeout"
    assert f"within {BODY_DEADLINE:g} s" in problem["detail"]
    assert headers["connection"] == "close" and headers["request-id"] == problem["request_id"]
    assert served.verify("127.0.0.6").status_code == 200


@slow
def test_a_mounted_app_bounds_a_trickled_body_too(tmp_path: Path) -> None:
    # no agentcore serve here: stock uvicorn serving a host app that mounts the API
    with AgentCore.open(tmp_path / "m.db", rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read"]).secret
        api = create_app(core, body_deadline=BODY_DEADLINE)
        host = Starlette(routes=[Mount("/api", api)], lifespan=lifespan_for(core))
        with ServerThread(host) as server:
            head, body = slow_search(key, 1000)
            head = head.replace(b"POST /v1/", b"POST /api/v1/")
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(head)
                assert trickle(sock, body, every=0.2, limit=BODY_DEADLINE + 60)
                status, headers, answer = read_answer(sock)
    assert status == 408 and json.loads(answer)["code"] == "body_timeout"
    assert headers["connection"] == "close"


@slow
def test_a_body_that_arrives_in_time_is_read_as_before(served: Served) -> None:
    head, body = slow_search(served.key, 200)
    with served.connect("127.0.0.7") as sock:
        sock.sendall(head)
        for start in range(0, len(body), 50):  # in pieces, well within the deadline
            sock.sendall(body[start : start + 50])
            time.sleep(0.05)
        data = sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
