"""Chat turns that fail or are stopped store nothing: not their messages, not a new
conversation. Over a real uvicorn server on both stores: a non-streaming chat answered
504 (the request deadline), one whose client went away, a model failure before and in
the middle of a stream, and ``chat_with_agent`` over MCP past the deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from helpers import assert_problem
from httpx_sse import connect_sse
from test_limits import ModelPlugin
from test_mcp_endpoint import run

from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.errors import ProviderError
from agentcore.events import Event
from agentcore_starlette import create_app

pytestmark = pytest.mark.both_stores

HANDBOOK = "Employees get 25 vacation days per year. Unused vacation days expire in March."
ANSWER = "Employees get 25 vacation days per year."


class Held:
    """A chat model that answers only once the test lets it (``release``), so the test
    decides when the model finishes, not a sleep."""

    name = "held"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def complete(self, request: ChatRequest) -> ChatResult:
        self.started.set()
        try:
            self.release.wait(600)  # released by the test (or the fixture's end)
            return ChatResult(text=ANSWER, used_passage_ids=["P1"])
        finally:
            self.finished.set()


class Failing:
    """A chat model that fails, before any text or after its first delta."""

    def __init__(self, name: str, said: str = "") -> None:
        self.name = name
        self.said = said

    def complete(self, request: ChatRequest) -> ChatResult:
        raise ProviderError("the provider is down")

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        if self.said:
            yield self.said
        raise ProviderError("the provider dropped the stream")


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
def served(store_url: str, held: Held) -> Iterator[tuple[AgentCore, str, str, dict[str, str]]]:
    """A core with the test's models behind uvicorn, a key's secret, and an agent per
    model (by model name); the request deadline is 3 s (time enough to reach the model
    on a busy machine: the tests stop a turn whose model holds it)."""
    models = ModelPlugin(held, Failing("broken"), Failing("midway", said="Employees get"))
    core = AgentCore.open(
        store_url, plugins=[models], request_deadline=3.0, rate_limit_test=1e6, model_timeout=600
    )
    core.create_organization("acme")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
    agents = {name: ws.agents.create(name=name, model=name).id for name in ("held", "broken")}
    agents["midway"] = ws.agents.create(name="midway", model="midway").id
    try:
        with ServerThread(create_app(core)) as server:
            yield core, server.url, secret, agents
    finally:
        held.release.set()
        core.close()


def ask(url: str, secret: str, agent_id: str) -> httpx.Response:
    """A non-streaming chat turn over HTTP."""
    return httpx.post(
        f"{url}/v1/chat/message",
        json={"agentId": agent_id, "message": "How many vacation days?"},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def stored(core: AgentCore, agent_id: str) -> list[int]:
    """The message counts of the agent's conversations."""
    page = core.workspace("acme", "test").conversations.list(agent_id=agent_id)
    return [c.message_count for c in page.conversations]


def replies(core: AgentCore) -> list[Event]:
    events: list[Event] = []
    core.events.subscribe("agent.action", events.append)
    return events


def test_a_chat_answered_504_is_not_stored_afterwards(served: Any, held: Held) -> None:
    core, url, secret, agents = served
    events = replies(core)
    response = ask(url, secret, agents["held"])
    assert_problem(response, 504, "deadline_exceeded")
    held.release.set()  # the model answers after all, past the deadline
    assert held.finished.wait(60)
    time.sleep(0.3)  # what a turn still running would take to store its answer
    assert stored(core, agents["held"]) == []
    assert [e.data["action"] for e in events] == ["knowledge_lookup"]  # no reply_sent


def test_an_openai_completion_answered_504_is_not_stored_afterwards(
    served: Any, held: Held
) -> None:
    core, url, secret, agents = served
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": agents["held"], "messages": [{"role": "user", "content": "Days off?"}]},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "deadline_exceeded"
    held.release.set()
    assert held.finished.wait(60)
    time.sleep(0.3)
    assert stored(core, agents["held"]) == []


def held_core(store_url: str, held: Held) -> tuple[AgentCore, str, str]:
    """A core whose agent answers with ``held`` (a 30 s request deadline), a read key's
    secret, and the agent's id."""
    core = AgentCore.open(
        store_url, plugins=[ModelPlugin(held)], request_deadline=30, rate_limit_test=1e6
    )
    core.create_organization("acme")
    secret = core.keys.create("acme", "test", ["read"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
    agent_id = ws.agents.create(name="held", model="held").id
    return core, secret, agent_id


def test_a_chat_whose_client_goes_away_is_not_stored(store_url: str, held: Held) -> None:
    core, secret, agent_id = held_core(store_url, held)
    events = replies(core)
    try:
        with ServerThread(create_app(core)) as server:
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and hangs up
                httpx.post(
                    f"{server.url}/v1/chat/message",
                    json={"agentId": agent_id, "message": "How many vacation days?"},
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=httpx.Timeout(30, read=0.5),
                )
            assert held.started.is_set()
            time.sleep(0.3)  # the server sees the disconnect
            held.release.set()
            assert held.finished.wait(60)
            time.sleep(0.3)
            assert stored(core, agent_id) == []
            assert [e.data["action"] for e in events] == ["knowledge_lookup"]
    finally:
        held.release.set()
        core.close()


def test_a_failed_chat_leaves_no_empty_conversation(served: Any) -> None:
    core, url, secret, agents = served
    response = ask(url, secret, agents["broken"])
    assert_problem(response, 502, "provider_error")
    listed = httpx.get(
        f"{url}/v1/conversations",
        params={"agentId": agents["broken"]},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert listed.json()["conversations"] == []


def test_a_stream_that_fails_leaves_no_empty_conversation(served: Any) -> None:
    core, url, secret, agents = served
    body = {"agentId": agents["midway"], "message": "How many vacation days?", "stream": True}
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {secret}"}) as client,
        connect_sse(client, "POST", f"{url}/v1/chat/message", json=body) as source,
    ):
        kinds = [event.event for event in source.iter_sse()]
    assert kinds == ["response.delta", "error"]
    assert stored(core, agents["midway"]) == []


def test_a_new_conversation_is_stored_with_its_first_turn(served: Any, held: Held) -> None:
    core, url, secret, agents = served
    held.release.set()
    response = ask(url, secret, agents["held"])
    assert response.status_code == 200, response.text
    conversation = response.json()["conversationId"]
    got = core.workspace("acme", "test").conversations.get(conversation)
    assert got.message_count == 2 and got.agentId == agents["held"]
    assert stored(core, agents["held"]) == [2]


def test_mcp_chat_past_the_deadline_is_a_tool_error_and_stores_nothing(
    served: Any, held: Held
) -> None:
    core, url, secret, agents = served
    result = run(
        f"{url}/v1/mcp",
        secret,
        lambda client: client.call_tool(
            "chat_with_agent", {"agent_id": agents["held"], "message": "How many vacation days?"}
        ),
    )
    answered_first = not held.finished.is_set()  # at the deadline, not when the model answered
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["code"] == "deadline_exceeded"
    assert held.started.is_set() and answered_first
    held.release.set()
    assert held.finished.wait(60)
    time.sleep(0.3)
    assert stored(core, agents["held"]) == []


def test_a_chat_cut_by_shutdown_is_a_503_problem_and_not_stored(store_url: str, held: Held) -> None:
    """uvicorn cancels a request still running past its graceful timeout: the client gets
    a problem to retry on (not a plain-text 500), the turn's work is told to stop and
    stores nothing, and the lifespan's stop leaves no handler or model thread."""
    core, secret, agent_id = held_core(store_url, held)
    answers: list[httpx.Response] = []
    try:
        server = ServerThread(create_app(core), graceful_timeout=0.3)
        with server:
            client = threading.Thread(
                target=lambda: answers.append(ask(server.url, secret, agent_id))
            )
            client.start()
            assert held.started.wait(60)
            server.server.should_exit = True  # the request is still running
            client.join(10)
            assert answers, "the client got no answer"
            assert_problem(answers[0], 503, "server_shutting_down")
            held.release.set()  # the model answers after all, once the request was cut
            server.thread.join(10)
            assert not server.thread.is_alive()
        assert held.finished.is_set()
        assert stored(core, agent_id) == []
        left = [
            t.name
            for t in threading.enumerate()
            if t.name.startswith(("agentcore-model", "agentcore-http"))
        ]
        assert left == []
    finally:
        held.release.set()
        core.close()
