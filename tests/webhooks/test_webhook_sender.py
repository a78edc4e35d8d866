"""Delivery attempts against a real HTTP receiver on 127.0.0.1, the connect-time SSRF
guard, and the retry schedule."""

from __future__ import annotations

import queue
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from agentcore.outbound._ssrf import (
    AddressPolicy,
    BlockedAddress,
    GuardedTransport,
    validate_url,
)
from agentcore.webhooks._sender import RESPONSE_SNIPPET_BYTES, AttemptResult, make_client, send
from agentcore.webhooks.schedule import (
    MAX_RETRY_AFTER,
    RETRY_SCHEDULE,
    next_delay,
    parse_retry_after,
)
from agentcore.webhooks.signing import build_headers, encode_payload, generate_secret

LOCAL = AddressPolicy(["127.0.0.0/8"])
DEFAULT = AddressPolicy()
PUBLIC_IP = "93.184.216.34"
BODY = encode_payload("agent.action", "2024-05-01T12:00:00Z", {"agent_id": "agt_1"})
LARGE_BODY_BYTES = 64 * 1024 * 1024
HOLD = 60.0  # seconds a hanging or dripping receiver holds (released at the test's end)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A webhook receiver whose behaviour is chosen by the request path."""

    server: ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    large_outcome: queue.Queue[str] = field(default_factory=queue.Queue)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def reply(self, status: int, body: bytes = b"", **headers: str) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            url = urlsplit(self.path)
            query = {name: values[0] for name, values in parse_qs(url.query).items()}
            headers = {name.lower(): value for name, value in self.headers.items()}
            receiver.seen.append(Seen(url.path, headers, body))
            kind, _, arg = url.path.strip("/").partition("/")
            try:
                if kind == "ok":
                    self.reply(200, b"thanks")
                elif kind == "status":
                    self.reply(int(arg), b"nope", **query)
                elif kind == "redirect":
                    self.reply(int(arg), Location=receiver.url("/target"))
                elif kind == "hang":
                    receiver.release.wait(HOLD)
                    self.reply(200)
                elif kind == "drip":  # a byte of header every 0.2 s: no single read times out
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(int(HOLD / 0.2)):  # then give up: a regression fails, not hangs
                        if receiver.release.wait(0.2):
                            break
                        self.wfile.write(b"a")
                        self.wfile.flush()
                elif kind == "large":
                    self.send_response(200)
                    self.send_header("Content-Length", str(LARGE_BODY_BYTES))
                    self.end_headers()
                    chunk = b"x" * 65536
                    for _ in range(LARGE_BODY_BYTES // len(chunk)):
                        self.wfile.write(chunk)
                    receiver.large_outcome.put("completed")
                else:
                    self.reply(200, b"target")
            except OSError:
                receiver.large_outcome.put("aborted")
                self.close_connection = True

        do_GET = do_POST

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    instance = Receiver(server)
    server.RequestHandlerClass = _handler(instance)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield instance
    instance.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def local_client() -> Iterator[httpx.Client]:
    with make_client(LOCAL, timeout=1) as client:
        yield client


def deliver(client: httpx.Client, url: str, timeout: float = 30) -> AttemptResult:
    """One attempt at ``url``; the generous default ``timeout`` only guards a hang (the
    deadline tests pass their own)."""
    headers = build_headers([generate_secret()], "msg_1", int(time.time()), BODY)
    return send(client, url, headers, BODY, timeout=timeout)


class CountingResolver:
    """Answers from a script of address lists, one per call, repeating the last."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


# --- sending ------------------------------------------------------------------------


def test_2xx_delivers_a_verifiable_request(receiver: Receiver) -> None:
    secret = generate_secret()
    headers = build_headers([secret], "msg_1", int(time.time()), BODY)
    with make_client(LOCAL, timeout=1) as client:
        result = send(client, receiver.url("/ok"), headers, BODY, timeout=30)
    assert result == AttemptResult(200, None, None, result.duration_ms, "thanks")
    assert result.succeeded and not result.gone
    [seen] = receiver.seen
    assert seen.body == BODY
    assert seen.headers["user-agent"] == "agentcore-webhooks/1"
    assert seen.headers["accept-encoding"] == "identity"
    Webhook(secret).verify(seen.body, seen.headers)


@pytest.mark.parametrize(("status", "gone"), [(500, False), (404, False), (410, True)])
def test_non_2xx_fails_with_its_status(
    receiver: Receiver, local_client: httpx.Client, status: int, gone: bool
) -> None:
    result = deliver(local_client, receiver.url(f"/status/{status}"))
    assert result.status_code == status
    assert not result.succeeded
    assert result.gone is gone
    assert result.error is None
    assert result.response_snippet == "nope"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_failures_and_not_followed(
    receiver: Receiver, local_client: httpx.Client, status: int
) -> None:
    result = deliver(local_client, receiver.url(f"/redirect/{status}"))
    assert result.status_code == status
    assert not result.succeeded
    assert receiver.paths() == [f"/redirect/{status}"]


@pytest.mark.parametrize("as_date", [False, True])
def test_retry_after_is_reported(
    receiver: Receiver, local_client: httpx.Client, as_date: bool
) -> None:
    header = formatdate(time.time() + 3600, usegmt=True) if as_date else "3600"
    result = deliver(local_client, receiver.url(f"/status/503?retry_after={header}"))
    assert result.status_code == 503
    assert result.retry_after == pytest.approx(3600, abs=2)


@pytest.mark.slow
def test_hanging_receiver_times_out(receiver: Receiver, local_client: httpx.Client) -> None:
    result = deliver(local_client, receiver.url("/hang"), timeout=1)
    assert result.status_code is None
    assert result.error is not None and result.error.startswith("timed out after 1 s")
    assert 900 <= result.duration_ms < HOLD * 1000  # at the deadline, not the answer
    assert receiver.paths() == ["/hang"]


@pytest.mark.slow
def test_trickling_receiver_is_cut_off_at_the_deadline(
    receiver: Receiver, local_client: httpx.Client
) -> None:
    result = deliver(local_client, receiver.url("/drip"), timeout=1)
    assert result.status_code is None
    assert result.error is not None and result.error.startswith("timed out")
    assert result.duration_ms < HOLD * 1000  # at the deadline, not when the drip ended


def test_connection_refused_becomes_an_error(local_client: httpx.Client) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = deliver(local_client, f"http://127.0.0.1:{port}/")
    assert result.status_code is None
    assert result.error is not None and result.error.startswith("ConnectError")
    assert not result.succeeded


def test_unusable_url_becomes_an_error(local_client: httpx.Client) -> None:
    for url in ("ftp://127.0.0.1/", "http://[::1/"):
        result = deliver(local_client, url)
        assert result.status_code is None and result.error, url


def test_large_response_is_not_read(receiver: Receiver, local_client: httpx.Client) -> None:
    result = deliver(local_client, receiver.url("/large"))
    assert result.succeeded
    assert result.response_snippet == "x" * RESPONSE_SNIPPET_BYTES
    assert receiver.large_outcome.get(timeout=60) == "aborted"


# --- the SSRF guard at connect time --------------------------------------------------


def test_default_policy_refuses_to_connect_to_loopback(receiver: Receiver) -> None:
    with make_client(DEFAULT, timeout=1) as client:
        result = deliver(client, receiver.url("/ok"))
    assert result.error == "blocked by SSRF guard: 127.0.0.1 resolves to a loopback address"
    assert result.status_code is None
    assert receiver.seen == []


def test_guarded_transport_raises_blocked_address(receiver: Receiver) -> None:
    resolver = CountingResolver(["127.0.0.1"])
    transport = GuardedTransport(DEFAULT, resolver=resolver)
    with httpx.Client(transport=transport) as client, pytest.raises(BlockedAddress):
        client.get(receiver.url("/ok", host="receiver.test"))
    assert issubclass(BlockedAddress, httpx.TransportError)
    assert receiver.seen == []


def test_host_name_connects_to_the_checked_address_once(receiver: Receiver) -> None:
    # "receiver.test" is unknown to the system resolver: only the checked address works.
    resolver = CountingResolver(["127.0.0.1"], [])
    with make_client(LOCAL, timeout=1, resolver=resolver) as client:
        result = deliver(client, receiver.url("/ok", host="receiver.test"))
    assert result.succeeded, result.error
    assert resolver.calls == [("receiver.test", receiver.port)]
    assert receiver.seen[0].headers["host"] == f"receiver.test:{receiver.port}"


def test_dns_rebinding_is_refused_at_connect_time(receiver: Receiver) -> None:
    resolver = CountingResolver([PUBLIC_IP], ["127.0.0.1"])
    url = receiver.url("/ok", host="rebind.test")
    assert validate_url(url, environment="test", policy=DEFAULT, resolver=resolver) == url
    with make_client(DEFAULT, timeout=1, resolver=resolver) as client:
        result = deliver(client, url)
    assert result.error == "blocked by SSRF guard: rebind.test resolves to a loopback address"
    assert len(resolver.calls) == 2
    assert receiver.seen == []


def test_one_refused_address_among_good_ones_blocks(receiver: Receiver) -> None:
    # The first address would work; the second one still blocks the whole host.
    resolver = CountingResolver(["127.0.0.1", "10.0.0.1"])
    with make_client(LOCAL, timeout=1, resolver=resolver) as client:
        result = deliver(client, receiver.url("/ok", host="mixed.test"))
    assert result.error == "blocked by SSRF guard: mixed.test resolves to a private address"
    assert receiver.seen == []


def test_next_checked_address_is_tried_when_one_refuses(receiver: Receiver) -> None:
    resolver = CountingResolver(["127.0.0.2", "127.0.0.1"])  # the server listens on .1 only
    with make_client(LOCAL, timeout=1, resolver=resolver) as client:
        result = deliver(client, receiver.url("/ok", host="two.test"))
    assert result.succeeded, result.error


# --- the retry schedule --------------------------------------------------------------


def test_schedule_is_svix() -> None:
    assert RETRY_SCHEDULE == (0, 5, 300, 1800, 7200, 18000, 36000, 36000)


def test_first_attempt_is_immediate_without_jitter() -> None:
    for seed in range(20):
        assert next_delay(0, retry_after=None, rng=random.Random(seed)) == 0.0


@pytest.mark.parametrize("failed", range(1, len(RETRY_SCHEDULE)))
def test_delays_jitter_within_twenty_percent(failed: int) -> None:
    base = RETRY_SCHEDULE[failed]
    delays = {next_delay(failed, retry_after=None, rng=random.Random(seed)) for seed in range(50)}
    assert all(d is not None and 0.8 * base <= d <= 1.2 * base for d in delays)
    assert len(delays) > 40  # actually jittered


def test_no_delay_after_the_last_attempt() -> None:
    rng = random.Random(1)
    assert next_delay(len(RETRY_SCHEDULE) - 1, retry_after=None, rng=rng) is not None
    assert next_delay(len(RETRY_SCHEDULE), retry_after=None, rng=rng) is None
    assert next_delay(len(RETRY_SCHEDULE), retry_after=60, rng=rng) is None
    with pytest.raises(ValueError):
        next_delay(-1, retry_after=None, rng=rng)


def test_retry_after_lengthens_but_never_shortens() -> None:
    rng = random.Random(7)
    assert next_delay(1, retry_after=600, rng=rng) == 600
    assert 240 <= next_delay(2, retry_after=10, rng=rng) <= 360  # type: ignore[operator]
    assert next_delay(1, retry_after=10**9, rng=rng) == MAX_RETRY_AFTER
    assert 4 <= next_delay(1, retry_after=-50, rng=rng) <= 6  # type: ignore[operator]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 90.0),
        ("Wednesday, 21-Oct-15 07:28:00 GMT", 90.0),
        ("Wed, 21 Oct 2015 07:20:00 GMT", 0.0),  # in the past
        ("Wed, 21 Oct 2015 07:28:00 -0000", 90.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("٣", None),  # a non-ASCII digit
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    now = 1445412390.0  # 2015-10-21 07:26:30 UTC
    assert parse_retry_after(value, now=now) == expected
