"""The httpx client against a real server: same models, same error classes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from conftest import Keys, ServerThread
from helpers import Recorder, core_with
from starlette.applications import Starlette
from starlette.routing import Mount

from agentcore import (
    AgentCore,
    AsyncClient,
    Client,
    Conflict,
    DeadlineExceeded,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore_starlette import create_app


@pytest.mark.slow
def test_client_round_trip(core: AgentCore, keys: Keys) -> None:
    secret = keys.make().secret
    with ServerThread(create_app(core)) as server, Client(server.url, secret) as client:
        assert client.verify().organization == "acme"
        agent = client.create_agent(name="Helper", role="support")
        assert client.deploy_agent(agent.id).status == "deployed"
        assert [a.id for a in client.list_agents().agents] == [agent.id]
        document = client.add_text("facts.txt", "The office cat is named Pixel and likes tuna.")
        hits = client.search("What is the cat called?", top_k=1)
        assert hits.results[0].document_id == document.id
        answer = client.chat(agent.id, "What is the office cat called?")
        assert "Pixel" in answer.response
        assert [c.source for c in answer.citations] == ["facts.txt"]
        conversation = client.get_conversation(answer.conversationId)
        assert conversation.message_count == 2
        assert [c.id for c in client.list_conversations().conversations] == [conversation.id]
        messages = client.list_messages(conversation.id).messages
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[1].citations == answer.citations and messages[1].usage is None
        assert client.delete_conversation(conversation.id).deleted is True
        with pytest.raises(NotFound):
            client.get_conversation(conversation.id)
        assert client.delete_document(document.id).deleted is True


@pytest.mark.slow
def test_client_raises_the_core_errors(core: AgentCore, keys: Keys) -> None:
    write = keys.make().secret
    read = keys.make(scopes=("read",)).secret
    with ServerThread(create_app(core)) as server:
        with Client(server.url, write) as client:
            agent = client.create_agent(name="A")
            with pytest.raises(Conflict) as conflict:
                client.undeploy_agent(agent.id)
            assert conflict.value.code == "invalid_state_transition"
            with pytest.raises(NotFound):
                client.get_agent("agt_missing")
            with pytest.raises(ValidationFailed) as invalid:
                client.search("x", top_k=0)
            assert invalid.value.param == "top_k"
        with Client(server.url, read) as client, pytest.raises(PermissionDenied):
            client.create_agent(name="B")


@pytest.mark.slow
def test_an_id_is_one_path_segment(core: AgentCore, keys: Keys) -> None:
    # an id with "../" once named another route: delete_conversation("../knowledge/
    # documents/<id>") deleted the document; an empty id met a redirect, and the client
    # parsed its empty body (a pydantic error)
    ws = core.workspace("acme", "test")
    document = ws.knowledge.ingest_text("keep.md", "This document must stay.")
    with ServerThread(create_app(core)) as server, Client(server.url, keys.make().secret) as c:
        with pytest.raises(NotFound):
            c.delete_conversation("../knowledge/documents/" + document.id)
        with pytest.raises(NotFound):
            c.get_agent("a/b")
        for bad in ("", ".", ".."):
            with pytest.raises(ValidationFailed):
                c.get_document(bad)
    assert [d.id for d in ws.knowledge.list().documents] == [document.id]


@pytest.mark.slow
def test_an_error_is_raised_as_the_class_of_its_code(tmp_path: Path) -> None:
    # a 504 deadline_exceeded is a DeadlineExceeded (its status alone names the
    # ProviderTimeout of a model that did not answer)
    release = threading.Event()

    def held(request: ChatRequest) -> ChatResult:
        release.wait(10)
        return ChatResult(text="late")

    core = core_with(tmp_path, Recorder("held", held), model_timeout=20)
    core.create_organization("acme")
    key = core.keys.create("acme", "test").secret
    agent = core.workspace("acme", "test").agents.create(name="H", model="held")
    try:
        app = create_app(core, request_deadline=0.5)
        with ServerThread(app) as server, Client(server.url, key) as client:
            with pytest.raises(DeadlineExceeded) as raised:
                client.chat(agent.id, "hello?")
            release.set()  # the abandoned model call ends before the server stops
            assert raised.value.code == "deadline_exceeded"
    finally:
        release.set()
        core.close()


def test_the_base_url_may_end_in_v1_as_the_openai_sdk_wants(core: AgentCore, keys: Keys) -> None:
    """``Client("http://host:8000/v1", key)`` is the same API as without ``/v1`` (it
    requested ``/v1/v1/...``, a 404), with or without a trailing slash, also when the
    API is mounted under a prefix."""
    secret = keys.make().secret
    mounted = Starlette(routes=[Mount("/api", app=create_app(core))])
    with ServerThread(create_app(core)) as server, ServerThread(mounted) as host:
        bases = [server.url, f"{server.url}/", f"{server.url}/v1", f"{server.url}/v1/"]
        bases += [f"{host.url}/api", f"{host.url}/api/v1/"]
        for base in bases:
            with Client(base, secret) as client:
                assert client.verify().organization == "acme", base

        async def verify() -> str:
            async with AsyncClient(f"{server.url}/v1", secret) as client:
                return (await client.verify()).organization

        assert asyncio.run(verify()) == "acme"
