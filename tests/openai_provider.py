"""A real OpenAI-compatible chat server on 127.0.0.1 that plays a script: the model
server of the OpenAI-compatible provider's tests and of tests of a served agent that
calls tools."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer of the fake provider."""

    body: Any
    status: int = 200
    delay: float = 0.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


@dataclass
class FakeProvider:
    """A real OpenAI-compatible HTTP server that records requests and plays a script."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    script: list[Reply] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def reply(self, body: Any, status: int = 200, delay: float = 0.0) -> None:
        self.script.append(Reply(body, status, delay))


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            provider.requests.append(Recorded(self.path, dict(self.headers.items()), raw))
            reply = provider.script.pop(0) if provider.script else Reply({"error": "no script"})
            if reply.delay:
                provider.release.wait(reply.delay)
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout tests)

    return Handler


@contextmanager
def serve_provider() -> Iterator[FakeProvider]:
    """A ``FakeProvider`` listening on a free port of 127.0.0.1 until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    fake = FakeProvider(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def completion(content: str | None = None, tool_calls: list[Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"message": message}]}
