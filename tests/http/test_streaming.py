"""Streaming chat over Server-Sent Events: a real uvicorn server, a real SSE client."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from helpers import assert_problem, where_cited
from httpx_sse import ServerSentEvent, connect_sse

import agentcore
from agentcore import AgentCore
from agentcore.chat import HANDOFF_REPLY
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.errors import ProviderError
from agentcore.plugins.extractive import NO_ANSWER
from agentcore_starlette import create_app

pytestmark = pytest.mark.slow  # every test runs a real uvicorn server

HANDBOOK = (
    "Employees get 25 vacation days per year. Unused vacation days expire in March. "
    "The office opens at 9 am on weekdays. Parking in the garage is free for staff. "
    "The cafeteria serves lunch from noon until 2 pm."
)


class Scripted:
    """A streaming chat model plugin whose ``stream`` is a test's generator function."""

    def __init__(self, name: str, script: Callable[[ChatRequest], Iterator[str | ChatResult]]):
        self.name = name
        self.script = script
        self.requests: list[ChatRequest] = []
        self.closed = threading.Event()

    def complete(self, request: ChatRequest) -> ChatResult:
        items = list(self.stream(request))
        result = items[-1]
        assert isinstance(result, ChatResult)
        return result

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        self.requests.append(request)
        try:
            yield from self.script(request)
        finally:
            self.closed.set()

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


def words(*parts: str, used: tuple[str, ...] = ()) -> Callable[[ChatRequest], Iterator[Any]]:
    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        yield from parts
        yield ChatResult(text="".join(parts), used_passage_ids=list(used))

    return script


@dataclass
class Setup:
    core: AgentCore
    url: str
    key: str
    agent_id: str
    events: list[agentcore.Event] = field(default_factory=list)

    def post(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}", **headers}
        return httpx.post(f"{self.url}/v1/chat/message", json=body, headers=headers, timeout=30)

    def stream(
        self, message: str, *, agent_id: str | None = None, **extra: Any
    ) -> tuple[httpx.Response, list[ServerSentEvent]]:
        """POST with ``stream: true``; the response and every event until the end."""
        body = {"agentId": agent_id or self.agent_id, "message": message, "stream": True, **extra}
        headers = {"Authorization": f"Bearer {self.key}"}
        with (
            httpx.Client(timeout=30) as client,
            connect_sse(
                client, "POST", f"{self.url}/v1/chat/message", json=body, headers=headers
            ) as source,
        ):
            return source.response, list(source.iter_sse())

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [event.data for event in self.events if event.type == kind]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Setup]]:
    """Start a core (with plugins and settings) behind a real uvicorn server."""
    started: list[tuple[AgentCore, ServerThread]] = []

    def start(*plugins: object, model: str | None = None, **settings: Any) -> Setup:
        app_settings = {"stream_heartbeat": settings.pop("stream_heartbeat", 15.0)}
        core = AgentCore.open(
            tmp_path / f"stream{len(started)}.db",
            plugins=list(plugins),
            rate_limit_test=settings.pop("rate_limit_test", 1e6),
            **settings,
        )
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
        agent = ws.agents.create(name="HR", role="support", model=model)
        server = ServerThread(create_app(core, **app_settings)).__enter__()
        started.append((core, server))
        setup = Setup(core, server.url, key, agent.id)
        for kind in ("agent.action", "agent.handoff", "agent.error"):
            core.events.subscribe(kind, setup.events.append)
        return setup

    yield start
    for core, server in started:
        server.__exit__(None, None, None)
        core.close()


def deltas(events: list[ServerSentEvent]) -> list[str]:
    return [json.loads(e.data)["delta"] for e in events if e.event == "response.delta"]


# the happy path ----------------------------------------------------------------------


def test_extractive_answer_streams_and_the_deltas_join_to_the_completed_body(serve: Any) -> None:
    setup = serve()
    question = "How many vacation days do employees get, and when do unused days expire?"
    response, events = setup.stream(question)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["request-id"].startswith("req_")
    assert "ratelimit" in response.headers
    assert [e.event for e in events][-1] == "response.completed"
    assert {e.event for e in events[:-1]} == {"response.delta"}
    pieces = deltas(events)
    assert len(pieces) == 2  # sentence by sentence
    completed = json.loads(events[-1].data)
    assert "".join(pieces) == completed["response"]
    assert where_cited(completed["citations"]) == [{"source": "handbook.txt", "pages": [1]}]
    assert completed["agentId"] == setup.agent_id

    # the same body the non-streaming call returns (but for the new conversation's id)
    plain = setup.post({"agentId": setup.agent_id, "message": question}).json()
    assert {**plain, "conversationId": None} == {**completed, "conversationId": None}
    assert list(plain) == list(completed)


def test_deltas_arrive_while_the_model_is_still_generating(serve: Any) -> None:
    go_on = threading.Event()

    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        yield "First part."
        assert go_on.wait(60), "the client never saw the first delta"
        yield " Second part."
        yield ChatResult(text="First part. Second part.")

    setup = serve(Scripted("slowpoke", script), model="slowpoke")
    body = {"agentId": setup.agent_id, "message": "Tell me", "stream": True}
    seen: list[str] = []
    with (
        httpx.Client(timeout=30) as client,
        connect_sse(
            client,
            "POST",
            f"{setup.url}/v1/chat/message",
            json=body,
            headers={"Authorization": f"Bearer {setup.key}"},
        ) as source,
    ):
        for event in source.iter_sse():
            seen.append(event.event)
            if event.event == "response.delta" and not go_on.is_set():
                assert json.loads(event.data) == {"delta": "First part."}
                go_on.set()  # only now may the model go on: nothing was buffered
            if event.event == "response.completed":
                assert json.loads(event.data)["response"] == "First part. Second part."
    assert seen == ["response.delta", "response.delta", "response.completed"]


def test_a_quiet_stream_sends_comment_heartbeats(serve: Any) -> None:
    heard = threading.Event()

    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        assert heard.wait(60), "no heartbeat came"
        yield ChatResult(text="Done.")

    setup = serve(Scripted("quiet", script), model="quiet", stream_heartbeat=0.05)
    body = {"agentId": setup.agent_id, "message": "Anything?", "stream": True}
    lines: list[str] = []
    with httpx.stream(
        "POST",
        f"{setup.url}/v1/chat/message",
        json=body,
        headers={"Authorization": f"Bearer {setup.key}"},
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith(":"):
                heard.set()
    assert any(line.startswith(": ping") for line in lines)
    assert "event: response.delta" in lines and 'data: {"delta": "Done."}' in lines
    assert [line for line in lines if line][-2] == "event: response.completed"


def test_events_fire_and_the_conversation_is_stored_as_for_send(serve: Any) -> None:
    model = Scripted("echo", words("You said ", "hello."))
    setup = serve(model, model="echo")
    _, events = setup.stream("hello")
    completed = json.loads(events[-1].data)
    actions = [data["action"] for data in setup.kinds("agent.action")]
    assert actions == ["knowledge_lookup", "reply_sent"]
    assert setup.kinds("agent.action")[-1]["conversation_id"] == completed["conversationId"]

    # the next turn of the conversation sees the streamed one in its history
    follow = setup.post(
        {
            "agentId": setup.agent_id,
            "message": "again",
            "conversationId": completed["conversationId"],
        }
    )
    assert follow.status_code == 200
    history = [(turn.role, turn.content) for turn in model.requests[-1].history]
    assert history == [("user", "hello"), ("assistant", "You said hello.")]


def test_asking_for_a_human_streams_the_handoff(serve: Any) -> None:
    setup = serve()
    _, events = setup.stream("I want to talk to a human please")
    assert deltas(events) == [HANDOFF_REPLY]
    assert json.loads(events[-1].data)["response"] == HANDOFF_REPLY
    assert [data["reason"] for data in setup.kinds("agent.handoff")] == ["user_requested"]


def test_with_handoff_on_no_answer_the_no_answer_is_never_streamed(serve: Any) -> None:
    setup = serve()
    ws = setup.core.workspace("acme", "test")
    agent = ws.agents.create(name="Careful", handoff_on_no_answer=True)
    _, events = setup.stream("What is the airspeed of an unladen swallow?", agent_id=agent.id)
    assert deltas(events) == [HANDOFF_REPLY]
    assert NO_ANSWER not in "".join(e.data for e in events)
    assert [data["reason"] for data in setup.kinds("agent.handoff")] == ["no_relevant_knowledge"]


def test_text_beside_a_tool_call_stays_in_the_answer(serve: Any) -> None:
    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        if not request.steps:
            yield "Let me check."
            yield ChatResult(text="Let me check.", tool_calls=[ToolCall("c1", "lookup", {})])
            return
        yield " It is unknown."
        yield ChatResult(text=" It is unknown.")

    setup = serve(Scripted("tooly", script), model="tooly")
    ws = setup.core.workspace("acme", "test")
    # lookup is no tool of the agent's: the model is told so, and the turn goes on
    agent = ws.agents.create(name="T", model="tooly", tools=[{"name": "other"}])
    _, events = setup.stream("Look it up", agent_id=agent.id)
    assert deltas(events) == ["Let me check.", " It is unknown."]
    assert json.loads(events[-1].data)["response"] == "Let me check. It is unknown."
    assert "tool_call" in [data["action"] for data in setup.kinds("agent.action")]


# failures after the stream started ---------------------------------------------------


def test_a_provider_failure_mid_stream_is_an_error_event_and_an_agent_error(serve: Any) -> None:
    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        yield "Half an ans"
        raise ProviderError("The model provider at http://x/v1 broke: ReadError.")

    setup = serve(Scripted("flaky", script), model="flaky")
    response, events = setup.stream("Tell me")
    assert response.status_code == 200
    assert [e.event for e in events] == ["response.delta", "error"]
    problem = json.loads(events[-1].data)
    assert problem["status"] == 502 and problem["code"] == "provider_error"
    assert problem["type"].endswith("provider_error") and problem["title"]
    assert problem["request_id"] == response.headers["request-id"]
    assert [data["error"] for data in setup.kinds("agent.error")] == ["provider_error"]
    assert "reply_sent" not in [data["action"] for data in setup.kinds("agent.action")]
    conversation = setup.kinds("agent.error")[0]["conversation_id"]
    assert setup.core.store.recent_messages(conversation, 10) == []  # nothing half-stored


@pytest.mark.slow
def test_a_model_that_stalls_mid_stream_times_out(serve: Any) -> None:
    release = threading.Event()

    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        yield "Thinking"
        release.wait(600)  # the time-out ends it, however late it fires
        yield ChatResult(text="Thinking")

    model = Scripted("stalling", script)
    setup = serve(model, model="stalling", model_timeout=0.2)
    try:
        _, events = setup.stream("Tell me")
    finally:
        release.set()
    assert [e.event for e in events] == ["response.delta", "error"]
    assert json.loads(events[-1].data)["code"] == "provider_timeout"
    assert [data["error"] for data in setup.kinds("agent.error")] == ["provider_timeout"]
    assert model.closed.wait(60)  # the abandoned generator is closed once it returns


def test_a_client_that_disconnects_cancels_the_model(serve: Any) -> None:
    produced = threading.Event()
    count = 0

    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        nonlocal count
        stop = threading.Event()
        for count in range(1, 20_000):  # noqa: B007 - the count is read by the test
            yield f"word{count} "
            produced.set()
            stop.wait(0.01)
        yield ChatResult(text="never")

    model = Scripted("endless", script)
    setup = serve(model, model="endless")
    body = {"agentId": setup.agent_id, "message": "Go on forever", "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        connect_sse(
            client,
            "POST",
            f"{setup.url}/v1/chat/message",
            json=body,
            headers={"Authorization": f"Bearer {setup.key}"},
        ) as source,
    ):
        first = next(source.iter_sse())
        assert first.event == "response.delta"
    # the connection is closed: the server must stop the model and close its generator
    assert model.closed.wait(60), "the model kept generating after the client left"
    assert count < 19_999
    assert setup.kinds("agent.error") == []
    assert "reply_sent" not in [data["action"] for data in setup.kinds("agent.action")]


# errors before the stream starts are ordinary problems -------------------------------


def test_errors_before_the_stream_are_problem_documents(serve: Any) -> None:
    setup = serve(rate_limit_test=1.0)
    body = {"agentId": setup.agent_id, "message": "hi", "stream": True}
    url = f"{setup.url}/v1/chat/message"

    assert_problem(httpx.post(url, json=body), 401, "missing_api_key")
    write_only = setup.core.keys.create("acme", "test", ["write"]).secret
    denied = httpx.post(url, json=body, headers={"Authorization": f"Bearer {write_only}"})
    assert_problem(denied, 403, "insufficient_scope")

    key = setup.core.keys.create("acme", "test", ["read"]).secret
    auth = {"Authorization": f"Bearer {key}"}
    missing = httpx.post(url, json={**body, "agentId": "agt_nope"}, headers=auth)
    assert_problem(missing, 404, "resource_missing", param="agentId")
    key = setup.core.keys.create("acme", "test", ["read"]).secret
    auth = {"Authorization": f"Bearer {key}"}
    for bad in ("true", 1, None):
        response = httpx.post(url, json={**body, "stream": bad}, headers=auth)
        assert_problem(response, 422, "validation_error", param="stream")
        key = setup.core.keys.create("acme", "test", ["read"]).secret
        auth = {"Authorization": f"Bearer {key}"}
    no_message = httpx.post(url, json={"agentId": setup.agent_id, "stream": True}, headers=auth)
    assert_problem(no_message, 422, "validation_error", param="message")

    # one request a second: the second in a row is refused before anything streams
    key = setup.core.keys.create("acme", "test", ["read"]).secret
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", url, json=body, headers=auth, timeout=30) as first:
        assert first.status_code == 200
        first.read()
    limited = httpx.post(url, json=body, headers=auth)
    assert_problem(limited, 429, "rate_limited")
    assert "retry-after" in limited.headers


def test_idempotency_key_does_not_apply_to_streams(serve: Any) -> None:
    model = Scripted("counted", words("One answer."))
    setup = serve(model, model="counted")
    key = {"Idempotency-Key": "retry-me-1"}
    body = {"agentId": setup.agent_id, "message": "hi", "stream": True}
    first = setup.post(body, **key)
    second = setup.post(body, **key)
    for response in (first, second):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "idempotent-replayed" not in response.headers
    assert len(model.requests) == 2  # both ran: a stream is never replayed
    # the key was not used up by the streams: a plain request claims and replays it
    plain = {"agentId": setup.agent_id, "message": "hi"}
    once, again = setup.post(plain, **key), setup.post(plain, **key)
    assert once.status_code == 200 and "idempotent-replayed" not in once.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == once.json()
    assert len(model.requests) == 3


def test_openapi_documents_the_event_stream(serve: Any) -> None:
    setup = serve()
    document = httpx.get(f"{setup.url}/v1/openapi.json").json()
    operation = document["paths"]["/v1/chat/message"]["post"]
    content = operation["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}
    events = content["text/event-stream"]["x-events"]
    assert set(events) == {
        "response.delta",
        "response.completed",
        "response.requires_action",
        "error",
    }
    for ending in ("response.completed", "response.requires_action"):
        assert events[ending]["data"] == {"$ref": "#/components/schemas/ChatMessageResponse"}
    assert document["components"]["schemas"]["ChatDelta"]["required"] == ["delta"]
    schema = document["components"]["schemas"]["ChatMessageRequest"]["properties"]["stream"]
    assert schema["type"] == "boolean"


# the Python API -----------------------------------------------------------------------


def test_python_stream_yields_deltas_then_holds_the_response(tmp_path: Path) -> None:
    model = Scripted("echo", words("a", "b", "c", used=("P1",)))
    core = AgentCore.open(tmp_path / "py.db", plugins=[model])
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
    agent = ws.agents.create(name="E", model="echo")
    with pytest.raises(agentcore.NotFound):  # raised at the call, before any iteration
        ws.chat.stream("agt_missing", "hi")

    stream = ws.chat.stream(agent.id, "vacation days")
    with pytest.raises(RuntimeError):
        _ = stream.response
    assert list(stream) == ["a", "b", "c"]
    assert stream.response.response == "abc"
    assert stream.response.citations[0].source == "handbook.txt"

    with ws.chat.stream(agent.id, "again", stream.response.conversationId) as early:
        assert next(early) == "a"
    assert list(early) == []  # closed: the iteration is over
    assert model.closed.wait(60)
    with pytest.raises(RuntimeError):
        _ = early.response
    history = core.store.recent_messages(stream.response.conversationId, 10)
    assert [m.content for m in history] == ["vacation days", "abc"]  # the closed turn is not
    core.close()


def test_a_model_that_cannot_stream_yields_one_delta(tmp_path: Path) -> None:
    class Whole:
        name = "whole"

        def complete(self, request: ChatRequest) -> ChatResult:
            return ChatResult(text="All at once.")

        @agentcore.hookimpl
        def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
            register(self)

    core = AgentCore.open(tmp_path / "whole.db", plugins=[Whole()])
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="W", model="whole")
    stream = ws.chat.stream(agent.id, "hi")
    assert list(stream) == ["All at once."]
    assert stream.response.response == "All at once."
    core.close()


def test_a_result_longer_than_its_deltas_sends_the_tail(tmp_path: Path) -> None:
    def script(request: ChatRequest) -> Iterator[str | ChatResult]:
        yield "Hello"
        yield ChatResult(text="Hello, world.")

    core = AgentCore.open(tmp_path / "tail.db", plugins=[Scripted("tail", script)])
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="T", model="tail")
    stream = ws.chat.stream(agent.id, "hi")
    assert list(stream) == ["Hello", ", world."]
    assert stream.response.response == "Hello, world."
    assert ws.chat.send(agent.id, "hi").response == "Hello, world."
    core.close()
