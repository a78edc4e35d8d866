"""A request past its deadline: completed → its replay is the real result; stopped (a chat
turn, ingestion) → key released.

Never a stored resource behind a cached 504.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from conftest import served_client
from helpers import assert_problem

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.schema import Agent
from agentcore_starlette import create_app
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute, Call

pytestmark = pytest.mark.timeout(120)

DEADLINE = 1.0


class SlowOnce:
    """An embedder and chat model plugin whose first call outlasts the request deadline."""

    name = "slow-once"
    dimension = 1024

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.calls = 0
        self.first_done = threading.Event()

    def _maybe_sleep(self) -> None:
        self.calls += 1
        if self.calls == 1:
            time.sleep(DEADLINE * 2.5)
            self.first_done.set()

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        if kind == "passage":
            self._maybe_sleep()
        return self.inner.embed(texts, kind="passage")

    def complete(self, request: ChatRequest) -> ChatResult:
        self._maybe_sleep()
        return ChatResult(text="Thirty days of leave.")

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def slow() -> SlowOnce:
    return SlowOnce()


@pytest.fixture
def client(tmp_path: Path, slow: SlowOnce) -> Iterator[httpx.Client]:
    core = AgentCore.open(
        tmp_path / "a.db", embedder=slow.name, plugins=[slow], rate_limit_test=1e6
    )
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    app = create_app(core, request_deadline=DEADLINE)
    with served_client(app, key) as http:
        yield http
    core.close()


def retry(client: httpx.Client, path: str, key: str, **kwargs: Any) -> httpx.Response:
    """Send again with the same Idempotency-Key while the first is still settling (409)."""
    give_up = time.monotonic() + 30
    while True:
        response = client.post(path, headers={"Idempotency-Key": key}, **kwargs)
        if response.status_code != 409 or time.monotonic() > give_up:
            return response
        assert response.json()["code"] == "idempotency_request_in_progress"
        time.sleep(0.1)


@pytest.mark.slow
def test_work_stopped_at_the_deadline_releases_the_key(
    client: httpx.Client, slow: SlowOnce
) -> None:
    body = {"source": "policy.txt", "text": "Employees get thirty days of leave."}
    first = client.post(
        "/v1/knowledge/documents", json=body, headers={"Idempotency-Key": "upload-1"}
    )
    assert_problem(first, 504, "deadline_exceeded")
    assert slow.first_done.wait(30)

    second = retry(client, "/v1/knowledge/documents", "upload-1", json=body)
    assert second.status_code == 201, second.text
    assert "idempotent-replayed" not in second.headers  # it ran afresh
    documents = client.get("/v1/knowledge/documents").json()["documents"]
    assert [d["id"] for d in documents] == [second.json()["id"]]  # nothing behind the 504

    third = retry(client, "/v1/knowledge/documents", "upload-1", json=body)
    assert third.status_code == 201 and third.headers["idempotent-replayed"] == "true"
    assert third.json() == second.json()


def late_agent_route(slow: SlowOnce) -> ApiRoute:
    def create_late(call: Call) -> Agent:
        """Work that cannot be stopped: it outlasts the deadline, then commits."""
        slow.calls += 1
        time.sleep(DEADLINE * 2.5)
        return call.workspace.agents.create(name="Late")

    return ApiRoute(
        method="POST",
        path="/test/late-agent",
        handler=create_late,
        response=Agent,
        summary="Create an agent late",
        scope="write",
        tag="test",
        status_code=201,
    )


@pytest.mark.slow
def test_work_that_completes_after_the_deadline_is_replayed(tmp_path: Path, slow: SlowOnce) -> None:
    with AgentCore.open(tmp_path / "late.db", rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        app = create_app(core, routes=[*ROUTES, late_agent_route(slow)], request_deadline=DEADLINE)
        with served_client(app, key) as client:
            first = client.post("/v1/test/late-agent", headers={"Idempotency-Key": "late-1"})
            assert_problem(first, 504, "deadline_exceeded")
            replay = retry(client, "/v1/test/late-agent", "late-1")
            assert replay.status_code == 201, replay.text
            assert replay.headers["idempotent-replayed"] == "true"
            listed = client.get("/v1/agents").json()["agents"]
    assert [a["id"] for a in listed] == [replay.json()["id"]]
    assert slow.calls == 1  # it ran once: the replay is the late real result


@pytest.mark.slow
def test_a_chat_stopped_at_the_deadline_releases_the_key(
    client: httpx.Client, slow: SlowOnce
) -> None:
    agent = client.post(
        "/v1/agents", json={"name": "HR", "role": "support", "model": slow.name}
    ).json()
    message = {"agentId": agent["id"], "message": "How many days of leave?"}
    first = client.post("/v1/chat/message", json=message, headers={"Idempotency-Key": "chat-1"})
    assert_problem(first, 504, "deadline_exceeded")
    assert slow.first_done.wait(30)
    # the turn was stopped and stored nothing: the retry runs it again
    again = retry(client, "/v1/chat/message", "chat-1", json=message)
    assert again.status_code == 200, again.text
    assert "idempotent-replayed" not in again.headers
    assert again.json()["response"] == "Thirty days of leave."
    assert slow.calls == 2
    listed = client.get("/v1/conversations").json()["conversations"]
    assert [(c["id"], c["message_count"]) for c in listed] == [(again.json()["conversationId"], 2)]


@pytest.mark.slow
def test_without_a_key_the_stopped_work_stores_nothing(
    client: httpx.Client, slow: SlowOnce
) -> None:
    body = {"source": "policy.txt", "text": "Employees get thirty days of leave."}
    assert client.post("/v1/knowledge/documents", json=body).status_code == 504
    assert slow.first_done.wait(30)
    # (before, the late work committed right after the slow embedder call returned)
    later = client.post("/v1/knowledge/documents", json={"source": "b.txt", "text": "Later."})
    assert later.status_code == 201
    sources = [d["source"] for d in client.get("/v1/knowledge/documents").json()["documents"]]
    assert sources == ["b.txt"]
