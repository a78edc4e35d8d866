"""AsyncClient, and chat.stream in both clients, against a real uvicorn server."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Keys, ServerThread
from helpers import start_serve
from processes import reap

import agentcore
from agentcore import (
    AgentCore,
    AsyncClient,
    Client,
    NotFound,
    PermissionDenied,
    ProviderError,
    ValidationFailed,
)
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.client import AsyncChatClient, ChatClient
from agentcore_starlette import create_app

pytestmark = pytest.mark.slow  # every test runs a real uvicorn server

FACTS = "The office cat is named Pixel and likes tuna. The office dog is called Rex."


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and (not name.startswith("_") or name == "__call__")
    }


@pytest.mark.parametrize(("sync", "async_"), [(Client, AsyncClient), (ChatClient, AsyncChatClient)])
def test_async_surface_matches_the_sync_one(sync: type, async_: type) -> None:
    ours, theirs = _public(sync), _public(async_)
    assert set(ours) == set(theirs)
    for name, signature in ours.items():
        other = theirs[name]
        assert list(signature.parameters) == list(other.parameters), name
        if name in ("stream",):
            continue
        member = getattr(async_, name)
        assert inspect.iscoroutinefunction(member), f"AsyncClient.{name} is not async"
    client = AsyncClient("http://127.0.0.1:1", "ak_test_x")
    assert isinstance(client.chat, AsyncChatClient)
    asyncio.run(client.close())


@pytest.fixture
def server(core: AgentCore) -> Iterator[ServerThread]:
    with ServerThread(create_app(core)) as running:
        yield running


async def _round_trip(url: str, key: str, tmp_path: Path) -> None:
    async with AsyncClient(url, key) as client:
        assert (await client.verify()).organization == "acme"
        agent = await client.create_agent(name="Helper", role="support")
        assert (await client.deploy_agent(agent.id)).status == "deployed"
        assert (await client.update_agent(agent.id, name="Helper 2")).name == "Helper 2"
        assert [a.id for a in (await client.list_agents()).agents] == [agent.id]
        (tmp_path / "more.txt").write_text("The office parrot is called Kiwi.")
        uploaded = await client.upload(tmp_path / "more.txt", content_type="text/plain")
        document = await client.add_text("facts.txt", FACTS)
        assert len((await client.list_documents()).documents) == 2
        hits = await client.search("What is the cat called?", top_k=1)
        assert hits.results[0].document_id == document.id

        answer = await client.chat(agent.id, "What is the office cat called?")
        assert "Pixel" in answer.response
        same = await client.chat.send(agent.id, "What is the office cat called?")
        assert same.response == answer.response

        pieces: list[str] = []
        async with client.chat.stream(agent.id, "What is the office cat called?") as stream:
            async for delta in stream:
                pieces.append(delta)
        assert "".join(pieces) == stream.response.response == answer.response
        assert stream.response.citations == answer.citations

        # a follow-up in the streamed conversation, iterated without ``async with``
        follow = client.chat.stream(agent.id, "And the dog?", stream.response.conversationId)
        text = "".join([delta async for delta in follow])
        assert "Rex" in text and follow.response.conversationId == stream.response.conversationId

        # the conversation's history, as a chat UI reads it back
        conversation_id = stream.response.conversationId
        conversation = await client.get_conversation(conversation_id)
        assert conversation.message_count == 4 and conversation.agentId == agent.id
        listed = await client.list_conversations(agentId=agent.id)
        assert conversation_id in [c.id for c in listed.conversations]
        history = await client.list_messages(conversation_id, order="desc", limit=2)
        assert [m.role for m in history.messages] == ["assistant", "user"] and history.has_more
        assert history.messages[1].content == "And the dog?"
        assert (await client.delete_conversation(conversation_id)).deleted is True
        with pytest.raises(NotFound):
            await client.list_messages(conversation_id)

        with pytest.raises(NotFound):
            async with client.chat.stream("agt_missing", "hi"):
                pass
        with pytest.raises(NotFound):
            await client.get_agent("agt_missing")
        with pytest.raises(ValidationFailed) as invalid:
            await client.search("x", top_k=0)
        assert invalid.value.param == "top_k"
        assert (await client.delete_document(uploaded.id)).deleted is True
        assert (await client.archive_agent(agent.id)).status == "archived"
        assert (await client.list_webhooks()).webhooks == []


def test_async_client_round_trip(server: ServerThread, keys: Keys, tmp_path: Path) -> None:
    asyncio.run(_round_trip(server.url, keys.make().secret, tmp_path))


def test_async_client_raises_the_core_errors(server: ServerThread, keys: Keys) -> None:
    read = keys.make(scopes=("read",)).secret

    async def go() -> None:
        async with AsyncClient(server.url, read) as client:
            with pytest.raises(PermissionDenied):
                await client.create_agent(name="B")

    asyncio.run(go())


def test_sync_client_streams(server: ServerThread, keys: Keys) -> None:
    with Client(server.url, keys.make().secret) as client:
        agent = client.create_agent(name="Helper")
        client.add_text("facts.txt", FACTS)
        with client.chat.stream(agent.id, "What is the office cat called?") as stream:
            pieces = list(stream)
        assert pieces and "".join(pieces) == stream.response.response
        assert "Pixel" in stream.response.response
        assert client.chat(agent.id, "What is the office dog called?").response.startswith("The")
        with pytest.raises(NotFound), client.chat.stream("agt_missing", "hi"):
            pass
        unfinished = client.chat.stream(agent.id, "What is the office cat called?")
        with pytest.raises(RuntimeError):
            _ = unfinished.response
        unfinished.close()


class Broken:
    """Streams one delta, then fails like a provider would."""

    name = "broken"

    def complete(self, request: ChatRequest) -> ChatResult:
        raise ProviderError("down")

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        yield "Half"
        raise ProviderError("The provider went away.")

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


def test_an_error_event_raises_from_the_iteration(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "broken.db", plugins=[Broken()], rate_limit_test=1e6)
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    agent = core.workspace("acme", "test").agents.create(name="B", model="broken")
    with ServerThread(create_app(core)) as running:
        with Client(running.url, key) as client:
            seen: list[str] = []
            with pytest.raises(ProviderError) as failed, client.chat.stream(agent.id, "hi") as s:
                seen.extend(s)
            assert seen == ["Half"]
            assert failed.value.code == "provider_error"
            assert failed.value.extra["request_id"].startswith("req_")

        async def go() -> list[str]:
            got: list[str] = []
            async with AsyncClient(running.url, key) as client:
                with pytest.raises(ProviderError):
                    async with client.chat.stream(agent.id, "hi") as stream:
                        async for delta in stream:
                            got.append(delta)
            return got

        assert asyncio.run(go()) == ["Half"]
    core.close()


@pytest.mark.slow
def test_agentcore_serve_streams_to_curl_style_clients(tmp_path: Path) -> None:
    """The real ``agentcore serve`` command: a raw SSE read and the async client."""
    db = tmp_path / "served.db"
    core = AgentCore.open(db)
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("facts.txt", FACTS)
    agent = ws.agents.create(name="Helper")
    core.close()
    process, url = start_serve(db, key)
    try:
        body = {"agentId": agent.id, "message": "What is the cat called?", "stream": True}
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.stream("POST", f"{url}/v1/chat/message", json=body, headers=headers) as raw:
            lines = [line for line in raw.iter_lines() if line]
        assert lines[0] == "event: response.delta"
        assert lines[-2] == "event: response.completed"
        assert "Pixel" in lines[-1]

        async def go() -> str:
            async with AsyncClient(url, key) as client:
                stream = client.chat.stream(agent.id, "What is the cat called?")
                return "".join([delta async for delta in stream])

        assert "Pixel" in asyncio.run(go())
    finally:
        reap(process)


HR = {"filter": {"type": "eq", "key": "team", "value": "hr"}}


async def _metadata_round_trip(url: str, key: str, tmp_path: Path) -> None:
    async with AsyncClient(url, key) as client:
        (tmp_path / "it.txt").write_text("Passwords are reset on the XK-4471-Q portal.")
        it = await client.upload(
            tmp_path / "it.txt", content_type="text/plain", metadata={"team": "it"}
        )
        hr = await client.add_text(
            "hr.txt", "Employees get 25 vacation days.", metadata={"team": "hr"}
        )
        assert (it.metadata, hr.metadata) == ({"team": "it"}, {"team": "hr"})
        scoped = await client.search("XK-4471-Q", filter=HR["filter"], mode="keyword")
        assert scoped.mode == "keyword" and scoped.results == []
        moved = await client.update_document(it.id, metadata={"team": "hr", "year": 2026})
        assert moved.metadata == {"team": "hr", "year": 2026}
        found = await client.search("XK-4471-Q", filter=HR["filter"], mode="hybrid")
        assert [r.document_id for r in found.results][:1] == [it.id]
        assert found.results[0].metadata == moved.metadata
        agent = await client.create_agent(name="HR", knowledge=HR)
        assert agent.knowledge is not None
        assert (await client.get_agent(agent.id)).knowledge == agent.knowledge
        assert (await client.update_agent(agent.id, knowledge=None)).knowledge is None
        with pytest.raises(ValidationFailed) as invalid:
            await client.add_text("x.txt", "x", metadata={"team": ["a"]})
        assert invalid.value.param == "metadata.team"


def test_both_clients_carry_metadata_filters_modes_and_knowledge(
    server: ServerThread, keys: Keys, tmp_path: Path
) -> None:
    asyncio.run(_metadata_round_trip(server.url, keys.make().secret, tmp_path))
    with Client(server.url, keys.make().secret) as client:
        document = client.add_text("more.txt", "Laptops are replaced every three years.")
        assert client.get_document(document.id).metadata == {}
        client.update_document(document.id, metadata={"team": "hr"})
        hits = client.search("laptops replaced", filter=HR["filter"], top_k=10)
        assert document.id in {r.document_id for r in hits.results}
        agent = client.create_agent(name="Scoped", knowledge=HR)
        assert client.update_agent(agent.id, name="Renamed").knowledge == agent.knowledge
        with pytest.raises(ValidationFailed) as invalid:
            client.search("x", filter={"type": "eq", "key": "team"})
        assert invalid.value.param == "filter.value"
