"""A model server without tool support: the OpenAI-compatible provider sent the built-in
``handoff_to_human`` tool with every request, so such a server refused every chat. Now a
refusal of a request with tools is asked once more without them, and the provider
remembers it. Against a real scripted server on 127.0.0.1, through a real core."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentcore import AgentCore, ProviderError


@dataclass
class ToollessServer:
    """An OpenAI-compatible server that answers 400 to a request with ``tools`` (as
    Ollama does for a model without tool support) or, with ``refuse_all``, to any."""

    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    refuse_all: bool = False

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes, str]:
        self.bodies.append(body)
        if "tools" in body or self.refuse_all:
            refusal = {"error": {"message": "registry/tiny does not support tools"}}
            return 400, json.dumps(refusal).encode(), "application/json"
        text = "You get 25 vacation days a year [P1]."
        if body.get("stream"):
            parts = [text[:7], text[7:20], text[20:]]
            chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in parts]
            events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return 200, events.encode(), "text/event-stream"
        message = {"role": "assistant", "content": text}
        answer = {"id": "c1", "object": "chat.completion", "choices": [{"message": message}]}
        return 200, json.dumps(answer).encode(), "application/json"


@pytest.fixture
def server() -> Iterator[ToollessServer]:
    http = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = ToollessServer(f"http://127.0.0.1:{http.server_port}/v1")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, content, kind = fake.answer(body)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    http.RequestHandlerClass = Handler
    thread = threading.Thread(target=http.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    http.shutdown()
    http.server_close()
    thread.join(timeout=5)


@pytest.fixture
def core(server: ToollessServer, tmp_path: Path) -> Iterator[AgentCore]:
    core = AgentCore.open(tmp_path / "chat.db", openai_base_url=server.url, openai_model="tiny")
    core.create_organization("acme")
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.md", "Employees get 25 vacation days per year.")
    yield core
    core.close()


def test_a_server_that_refuses_tools_is_asked_again_without_them_once(
    server: ToollessServer, core: AgentCore, caplog: pytest.LogCaptureFixture
) -> None:
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="HR", model="openai:tiny")
    first = ws.chat.send(agent.id, "How many vacation days?")
    assert first.response == "You get 25 vacation days a year."
    assert [c.source for c in first.citations] == ["handbook.md"]
    # the built-in handoff tool was offered, refused, and the turn asked again without it
    assert [b["tools"][0]["function"]["name"] for b in server.bodies[:1]] == ["handoff_to_human"]
    assert ["tools" in b for b in server.bodies] == [True, False]
    assert any("sends no tools from now on" in r.getMessage() for r in caplog.records)

    # remembered: the next turns, whole or streamed, send no tools at all
    again = ws.chat.send(agent.id, "And how many vacation days again?", first.conversationId)
    assert again.citations == first.citations
    with ws.chat.stream(agent.id, "Vacation days?") as stream:
        text = "".join(stream)
    assert text == "You get 25 vacation days a year."
    assert ["tools" in b for b in server.bodies] == [True, False, False, False]


def test_a_streamed_turn_falls_back_as_well(server: ToollessServer, core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="HR", model="openai:tiny")
    with ws.chat.stream(agent.id, "How many vacation days?") as stream:
        text = "".join(stream)
    assert text == "You get 25 vacation days a year."
    assert stream.response.citations[0].source == "handbook.md"
    assert [("tools" in b, b.get("stream")) for b in server.bodies] == [(True, True), (False, True)]


def test_a_refusal_that_is_not_about_tools_stays_an_error(
    server: ToollessServer, core: AgentCore
) -> None:
    """One retry, not a loop, and nothing remembered: the next turn offers tools again."""
    server.refuse_all = True
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="HR", model="openai:tiny")
    with pytest.raises(ProviderError, match="HTTP 400"):
        ws.chat.send(agent.id, "How many vacation days?")
    assert ["tools" in b for b in server.bodies] == [True, False]
    server.refuse_all = False
    assert ws.chat.send(agent.id, "How many vacation days?").citations
    assert ["tools" in b for b in server.bodies] == [True, False, True, False]
