"""The OpenAI-compatible provider streaming from a real local server speaking the
protocol (``stream: true`` → ``text/event-stream`` chunks, ``data: [DONE]``)."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from helpers import cli_env, start_serve, where_cited
from httpx_sse import connect_sse
from hypothesis import given
from hypothesis import strategies as st
from processes import reap

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult, Passage, StreamingChatModel, ToolSpec
from agentcore.errors import ProviderError, ProviderTimeout
from agentcore.plugins.openai_compat import OpenAIChatModel, _MarkerFilter, _strip_markers
from agentcore.schema import Usage
from agentcore_starlette import create_app

KEY = "sk-stream-0123456789abcdef-secret"
PASSAGES = [
    Passage("P1", "Rollo was the leader of the Vikings.", "normans.pdf", [1], 0.5),
    Passage("P2", "Normandy is a region in France.", "normans.pdf", [2], 0.4),
]


@dataclass
class Piece:
    """Bytes the fake sends, after waiting ``delay`` seconds (or until released)."""

    data: bytes
    delay: float = 0.0


@dataclass
class StreamReply:
    pieces: list[Piece]
    status: int = 200
    content_type: str = "text/event-stream"
    drop: bool = False  # cut the connection after the pieces, mid-body
    done: bool = True  # end with "data: [DONE]"


@dataclass
class FakeStreamingProvider:
    """A real HTTP server that streams scripted chat-completion chunks."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    script: list[StreamReply] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)


def chunk(content: str | None = None, **delta: Any) -> Piece:
    if content is not None:
        delta["content"] = content
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return Piece(f"data: {json.dumps(body)}\n\n".encode())


def _handler(fake: FakeStreamingProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fake.requests.append(json.loads(raw))
            reply = fake.script.pop(0)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                pieces = list(reply.pieces)
                if reply.done and not reply.drop:
                    pieces.append(Piece(b"data: [DONE]\n\n"))
                for piece in pieces:
                    if piece.delay:
                        fake.release.wait(piece.delay)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece.data), piece.data))
                    self.wfile.flush()
                if reply.drop:  # no terminating chunk: the body is cut short
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client went away
            finally:
                fake.finished.set()

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeStreamingProvider]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    provider = FakeStreamingProvider(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(provider)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield provider
    provider.release.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def model(fake: FakeStreamingProvider) -> Iterator[OpenAIChatModel]:
    chat = OpenAIChatModel("openai:tiny", fake.url, KEY, "tiny", timeout=10)
    yield chat
    chat.close()


def request(**kw: Any) -> ChatRequest:
    return ChatRequest(system_prompt="Be brief.", message="Who led them?", passages=PASSAGES, **kw)


def test_text_streams_with_markers_removed_across_chunks(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    pieces = ["Rollo", " led them", " [", "P1", "]", ", from", " France [P2", "][P9]", "."]
    fake.script.append(StreamReply([chunk(role="assistant"), *[chunk(p) for p in pieces]]))
    assert isinstance(model, StreamingChatModel)
    items = list(model.stream(request(tools=[ToolSpec("t", "A tool.", {"type": "object"})])))
    result = items[-1]
    assert isinstance(result, ChatResult)
    deltas = items[:-1]
    assert all(isinstance(d, str) and d for d in deltas)
    assert "".join(deltas) == result.text == "Rollo led them, from France."
    assert result.used_passage_ids == ["P1", "P2"]
    assert deltas[0] == "Rollo"  # the first words are not held back
    sent = fake.requests[0]
    assert sent["stream"] is True and sent["model"] == "tiny"
    assert sent["tools"][0]["function"]["name"] == "t"


def test_tool_calls_are_assembled_from_streamed_pieces(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    def call(index: int, **function: Any) -> Piece:
        piece: dict[str, Any] = {"index": index, "function": function}
        if "name" in function:
            piece.update(id=f"call_{index}", type="function")
        return chunk(tool_calls=[piece])

    fake.script.append(
        StreamReply(
            [
                call(0, name="get_weather", arguments=""),
                call(0, arguments='{"ci'),
                call(1, name="handoff_to_human", arguments="{}"),
                call(0, arguments='ty": "Rouen"}'),
            ]
        )
    )
    items = list(model.stream(request()))
    assert len(items) == 1
    result = items[0]
    assert isinstance(result, ChatResult) and result.text == ""
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_0", "get_weather", {"city": "Rouen"}),
        ("call_1", "handoff_to_human", {}),
    ]


def test_a_connection_dropped_mid_stream_is_a_provider_error(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    fake.script.append(StreamReply([chunk("Rollo"), chunk(" led")], drop=True))
    seen: list[Any] = []
    with pytest.raises(ProviderError) as failed:
        for item in model.stream(request()):
            seen.append(item)
    assert seen == ["Rollo", " led"]
    assert "broke" in failed.value.detail or "ended" in failed.value.detail
    assert KEY not in failed.value.detail


def test_a_stream_ending_without_done_is_incomplete(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    fake.script.append(StreamReply([chunk("Rollo")], done=False))
    with pytest.raises(ProviderError) as failed:
        list(model.stream(request()))
    assert "before it was complete" in failed.value.detail


def test_an_http_error_and_an_error_chunk_are_provider_errors(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    body = json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()
    fake.script.append(
        StreamReply([Piece(body)], status=401, content_type="application/json", done=False)
    )
    with pytest.raises(ProviderError) as http_error:
        list(model.stream(request()))
    assert "HTTP 401" in http_error.value.detail and "[redacted]" in http_error.value.detail
    assert KEY not in http_error.value.detail

    error = json.dumps({"error": {"message": "overloaded"}})
    fake.script.append(StreamReply([chunk("Ro"), Piece(f"data: {error}\n\n".encode())]))
    with pytest.raises(ProviderError) as mid:
        list(model.stream(request()))
    assert "overloaded" in mid.value.detail

    fake.script.append(StreamReply([Piece(b"{}")], content_type="application/json", done=False))
    with pytest.raises(ProviderError) as not_sse:
        list(model.stream(request()))
    assert "event stream" in not_sse.value.detail


def test_a_stall_between_chunks_times_out(fake: FakeStreamingProvider) -> None:
    # the first chunk must arrive within the time-out even on a loaded machine
    stalling = OpenAIChatModel("openai:tiny", fake.url, None, "tiny", timeout=2.0)
    slow = chunk(" late")
    slow.delay = 600  # a stall the time-out ends, however late it fires
    fake.script.append(StreamReply([chunk("Rollo"), slow]))
    seen: list[Any] = []
    with pytest.raises(ProviderTimeout):
        for item in stalling.stream(request()):
            seen.append(item)
    assert seen == ["Rollo"]
    stalling.close()


def test_chunks_without_progress_do_not_keep_a_stream_alive(fake: FakeStreamingProvider) -> None:
    idle = OpenAIChatModel("openai:tiny", fake.url, None, "tiny", timeout=0.3)
    empty = [chunk(role="assistant") for _ in range(1200)]  # a minute of them
    for piece in empty:
        piece.delay = 0.05
    fake.script.append(StreamReply([chunk("Rollo"), *empty, chunk("never")]))
    with pytest.raises(ProviderTimeout):
        list(idle.stream(request()))
    idle.close()


@given(st.lists(st.text(alphabet="ab [P]1,;\n2", max_size=8), max_size=8))
def test_marker_filter_matches_strip_markers_for_any_split(pieces: list[str]) -> None:
    markers = _MarkerFilter()
    shown = "".join(markers.feed(piece) for piece in pieces) + markers.finish()
    assert shown == _strip_markers("".join(pieces))


# end to end: a real server streaming from a real provider ------------------------------


class Registered:
    def __init__(self, model: OpenAIChatModel) -> None:
        self.model = model

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self.model)


@dataclass
class Served:
    """A real agentcore server whose agent answers with the streaming provider."""

    url: str
    agent_id: str
    key: str
    errors: list[Any]

    def ask(self, message: str) -> list[Any]:
        """Stream an answer to the end; the events."""
        body = {"agentId": self.agent_id, "message": message, "stream": True}
        with (
            httpx.Client(timeout=30) as client,
            connect_sse(
                client,
                "POST",
                f"{self.url}/v1/chat/message",
                json=body,
                headers={"Authorization": f"Bearer {self.key}"},
            ) as source,
        ):
            return list(source.iter_sse())


@pytest.fixture
def served(tmp_path: Path, model: OpenAIChatModel) -> Iterator[Served]:
    core = AgentCore.open(tmp_path / "e2e.db", plugins=[Registered(model)], rate_limit_test=1e6)
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("normans.txt", "Rollo was the leader of the Vikings in Normandy.")
    agent = ws.agents.create(name="N", model="openai:tiny")
    errors: list[Any] = []
    core.events.subscribe("agent.error", errors.append)
    with ServerThread(create_app(core)) as server:
        yield Served(server.url, agent.id, key, errors)
    core.close()


def test_over_http_the_provider_stream_becomes_deltas_with_citations(
    fake: FakeStreamingProvider, served: Served
) -> None:
    fake.script.append(StreamReply([chunk("Rollo"), chunk(" led them [P1]"), chunk(".")]))
    events = served.ask("Who led the Vikings?")
    assert [e.event for e in events] == ["response.delta"] * 3 + ["response.completed"]
    completed = json.loads(events[-1].data)
    text = "".join(json.loads(e.data)["delta"] for e in events[:-1])
    assert text == completed["response"] == "Rollo led them."
    assert where_cited(completed["citations"]) == [{"source": "normans.txt", "pages": [1]}]
    assert served.errors == []


def usage_chunk(prompt: int, completion: int) -> Piece:
    """OpenAI's last chunk with ``stream_options.include_usage``: no choices, the usage."""
    body = {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0},
    }
    return Piece(f"data: {json.dumps(body)}\n\n".encode())


def test_the_stream_asks_for_usage_and_reports_it(
    fake: FakeStreamingProvider, model: OpenAIChatModel
) -> None:
    fake.script.append(StreamReply([chunk("Rollo [P1]"), chunk("."), usage_chunk(41, 6)]))
    result = list(model.stream(request()))[-1]
    assert isinstance(result, ChatResult) and result.text == "Rollo."
    assert result.usage == Usage(input_tokens=41, output_tokens=6)
    assert fake.requests[0]["stream_options"] == {"include_usage": True}
    # a server that sends no usage: none reported
    fake.script.append(StreamReply([chunk("Rollo.")]))
    assert list(model.stream(request()))[-1].usage is None


def test_over_http_a_streamed_answer_carries_the_providers_usage(
    fake: FakeStreamingProvider, served: Served
) -> None:
    fake.script.append(StreamReply([chunk("Rollo led them [P1]."), usage_chunk(120, 9)]))
    events = served.ask("Who led the Vikings?")
    completed = json.loads(events[-1].data)
    assert completed["usage"] == {"input_tokens": 120, "output_tokens": 9}
    fake.script.append(StreamReply([chunk("Rollo led them [P1].")]))
    assert "usage" not in json.loads(served.ask("Who led the Vikings?")[-1].data)


def test_over_http_a_dropped_provider_is_an_error_event_and_agent_error(
    fake: FakeStreamingProvider, served: Served
) -> None:
    fake.script.append(StreamReply([chunk("Rollo"), chunk(" led")], drop=True))
    events = served.ask("Who led the Vikings?")
    assert [e.event for e in events] == ["response.delta", "response.delta", "error"]
    problem = json.loads(events[-1].data)
    assert (problem["status"], problem["code"]) == (502, "provider_error")
    assert [e.data["error"] for e in served.errors] == ["provider_error"]
    assert KEY not in events[-1].data


def test_over_http_a_client_that_leaves_closes_the_provider_connection(
    fake: FakeStreamingProvider, served: Served
) -> None:
    slow = [chunk(f" w{n}") for n in range(500)]
    for piece in slow:
        piece.delay = 0.02  # ten seconds in all, unless the connection is closed
    fake.script.append(StreamReply([chunk("Rollo"), *slow]))
    seen: list[str] = []
    body = {"agentId": served.agent_id, "message": "Who?", "stream": True}
    with httpx.stream(
        "POST",
        f"{served.url}/v1/chat/message",
        json=body,
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            seen.append(line)
            if line.startswith("data:"):
                break  # leave after the first delta
    assert seen[0] == "event: response.delta"
    # the server closed its provider connection: the provider's writes fail at once
    assert fake.finished.wait(60), "the provider kept streaming after the client left"
    assert served.errors == []


@pytest.mark.slow
def test_agentcore_serve_ends_open_streams_with_an_error_event_on_sigterm(
    fake: FakeStreamingProvider, tmp_path: Path
) -> None:
    """The real ``agentcore serve``: SIGTERM mid-answer → ``error`` 503, then exit 0."""
    db = tmp_path / "serve.db"
    core = AgentCore.open(db, openai_base_url=fake.url, openai_model="tiny")
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read"]).secret
    agent = core.workspace("acme", "test").agents.create(name="N", model="openai:tiny")
    core.close()
    slow = [chunk(f" w{n}") for n in range(4000)]
    for piece in slow:
        piece.delay = 0.05  # 200 s in all: only the shutdown can end it early
    fake.script.append(StreamReply([chunk("Rollo"), *slow]))
    env = {**cli_env(db), "AGENTCORE_OPENAI_BASE_URL": fake.url, "AGENTCORE_OPENAI_MODEL": "tiny"}
    process, url = start_serve(db, key, env=env)
    try:
        body = {"agentId": agent.id, "message": "Who?", "stream": True}
        events: list[str] = []
        with (
            httpx.Client(timeout=30) as client,
            connect_sse(
                client,
                "POST",
                f"{url}/v1/chat/message",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
            ) as source,
        ):
            for event in source.iter_sse():
                events.append(event.event)
                if len(events) == 2:
                    process.send_signal(signal.SIGTERM)
                if event.event == "error":
                    problem = json.loads(event.data)
        assert events[-1] == "error" and set(events[:-1]) == {"response.delta"}
        assert (problem["status"], problem["code"]) == (503, "server_shutting_down")
        assert process.wait(timeout=120) == 0
    finally:
        reap(process)
