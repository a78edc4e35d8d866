"""``agentcore_starlette.protocol``: a response's head and body leave in one write,
and streamed answers are not held back, over a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import free_port
from starlette.types import Receive, Scope, Send

from agentcore.cli import http_protocol
from agentcore_starlette.protocol import CoalescingTransport, DeferredLogger, HttpToolsProtocol


class Recorder(asyncio.Transport):
    """A transport keeping what it is asked to do (the socket's side of the wrapper)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.calls.append("write")

    def close(self) -> None:
        self.closing = True
        self.calls.append("close")

    def is_closing(self) -> bool:
        return self.closing

    def write_eof(self) -> None:
        self.calls.append("write_eof")

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


async def _step() -> None:
    await asyncio.sleep(0)  # lets the callbacks scheduled so far run
    await asyncio.sleep(0)


def test_writes_of_one_step_leave_as_one_write() -> None:
    async def run() -> Recorder:
        inner = Recorder()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(memoryview(b"{}"))
        transport.writelines([b"a", bytearray(b"b")])
        assert inner.writes == []  # held until the step ends
        assert transport.get_write_buffer_size() == 7 + 23
        await _step()
        assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}ab"]
        transport.write(b"next")  # a later step: a write of its own
        await _step()
        return inner

    assert asyncio.run(run()).writes[-1] == b"next"


def test_closing_writes_what_is_held_first_and_nothing_after() -> None:
    async def run() -> Recorder:
        inner = Recorder()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"last words")
        transport.close()
        assert inner.calls == ["write", "close"] and inner.writes == [b"last words"]
        transport.write(b"too late")  # the connection is closing: dropped, not raised
        await _step()
        transport.write(b"x")
        transport.write_eof()
        return inner

    inner = asyncio.run(run())
    assert inner.writes == [b"last words"] and inner.calls[-1] == "write_eof"


def test_everything_else_is_the_transports_own() -> None:
    async def run() -> None:
        inner = Recorder()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1)
        assert transport.is_closing() is False
        with pytest.raises(AttributeError):
            transport.no_such_method  # noqa: B018

    asyncio.run(run())


# over a real server ----------------------------------------------------------------------

BODY = b'{"results": []}'
released = threading.Event()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/whole``: a JSON answer sent whole; ``/stream``: a first event, then a second
    only once the test has read the first."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json")]
    if scope["path"] == "/whole":
        headers.append((b"content-length", str(len(BODY)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
    while not released.is_set():
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": b"second\n"})


socket_writes: list[bytes] = []  # what the server wrote to its sockets
happenings: list[str] = []  # socket writes and access lines, in order


class Lines(logging.Handler):
    """Notes each access line (uvicorn's record: its arguments, in order)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        happenings.append("log")


class Counted:
    """The socket transport of a connection, noting each write the protocol makes."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def write(self, data: bytes) -> None:
        socket_writes.append(bytes(data))
        happenings.append("write")
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class CountedProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(Counted(transport))  # type: ignore[arg-type]


@pytest.fixture
def url() -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(  # no logging configuration: the test's handlers stay
        app, host="127.0.0.1", port=port, log_config=None, log_level="info", http=CountedProtocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # only guards a hang
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_a_whole_response_leaves_in_one_write(url: str) -> None:
    socket_writes.clear()
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(3):  # keep-alive: every response of the connection
            response = client.get("/whole")
            assert response.status_code == 200 and response.content == BODY
    assert len(socket_writes) == 3  # uvicorn alone writes the head and the body apart
    for data in socket_writes:
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and body == BODY


def test_a_stream_is_not_held_back(url: str) -> None:
    released.clear()
    with httpx.Client(timeout=30) as client, client.stream("GET", f"{url}/stream") as response:
        assert response.status_code == 200  # the head came without the rest
        lines = response.iter_lines()
        assert next(lines) == "first"  # and the first part before the second exists
        released.set()
        assert next(lines) == "second"


@pytest.fixture
def lines() -> Iterator[Lines]:
    logger = logging.getLogger("uvicorn.access")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)  # before the server starts: uvicorn then logs access lines
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_access_line_follows_the_written_response(lines: Lines, url: str) -> None:
    happenings.clear()
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(2):
            assert client.get("/whole?x=1").status_code == 200
        deadline = time.monotonic() + 30  # the last line is written one loop step later
        while len(lines.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert happenings == ["write", "log", "write", "log"]
    first = lines.records[0]
    assert first.args is not None and first.args[1:] == ("GET", "/whole?x=1", "1.1", 200)
    assert first.getMessage().endswith('"GET /whole?x=1 HTTP/1.1" 200')


def test_the_deferred_logger_passes_everything_on() -> None:
    logger = logging.getLogger("tests.deferred")
    handler = Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:

        async def run() -> None:
            deferred = DeferredLogger(logger, asyncio.get_running_loop())
            deferred.info("%s and %s", "this", "that")
            deferred.info("with %s", "extra", extra={"tag": 7})
            assert handler.records == []  # not yet: at the next step
            assert deferred.name == "tests.deferred"  # the logger's own attributes
            await asyncio.sleep(0)

        asyncio.run(run())
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == ["this and that", "with extra"]
    assert handler.records[1].tag == 7  # type: ignore[attr-defined]


def test_serve_uses_it_when_httptools_is_there() -> None:
    assert http_protocol() == "agentcore_starlette.protocol:HttpToolsProtocol"


def test_serve_falls_back_to_uvicorns_protocol_without_the_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from uvicorn.protocols.http import httptools_impl

    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "on_response_complete")
    assert http_protocol() == "auto"
