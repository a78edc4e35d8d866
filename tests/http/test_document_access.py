"""Who may read a document (``access``) and who is asking (``user``): search in every
mode and engine, chat, streaming, the OpenAI route and MCP see only the documents the
end user may read, before the top k; on both stores, over HTTP and the Python API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, ServerThread

from agentcore import AgentCore, Client
from agentcore.errors import ValidationFailed
from agentcore_starlette import create_app

pytestmark = pytest.mark.both_stores  # the tests that open cores of their own too

OPEN = "Parking is on level 2 for every visitor and employee."
HR = "HR parking is on level 5, next to the payroll office."
ANA = "Ana parks in spot 42 on level 3."
NOISE = "Parking parking parking level level, a note about parking levels {n}."


def add(api: Api, source: str, text: str, access: Any = None, status: int = 201) -> Any:
    body: dict[str, Any] = {"source": source, "text": text}
    if access is not None:
        body["access"] = access
    response = api.post("/v1/knowledge/documents", json=body)
    assert response.status_code == status, response.text
    return response.json()


def search(api: Api, query: str = "where to park", **body: Any) -> list[str]:
    response = api.post("/v1/knowledge/search", json={"query": query, "top_k": 10, **body})
    assert response.status_code == 200, response.text
    return sorted(result["source"] for result in response.json()["results"])


@pytest.fixture
def documents(api: Api) -> dict[str, str]:
    return {
        "open": add(api, "open.md", OPEN)["id"],
        "hr": add(api, "hr.md", HR, {"groups": ["hr"]})["id"],
        "ana": add(api, "ana.md", ANA, {"users": ["ana"], "groups": []})["id"],
    }


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_search_sees_only_what_the_user_may_read(
    api: Api, documents: dict[str, str], mode: str
) -> None:
    everything = ["ana.md", "hr.md", "open.md"]
    assert search(api, "parking level", mode=mode) == everything  # a key with no user
    for user, seen in [
        ({"id": "bob"}, ["open.md"]),
        ({"id": "bob", "groups": ["hr"]}, ["hr.md", "open.md"]),
        ({"id": "ana"}, ["ana.md", "open.md"]),
        ({"id": "ana", "groups": ["hr", "sales"]}, everything),
        ({"id": "hr"}, ["open.md"]),  # a user named like a group is not the group
    ]:
        assert search(api, "parking level", mode=mode, user=user) == seen, user
    # with a metadata filter: both apply
    add(api, "tagged.md", "Parking for the sales team is on level 1.", {"groups": ["sales"]})
    api.patch(f"/v1/knowledge/documents/{documents['open']}", json={"metadata": {"team": "x"}})
    team = {"type": "eq", "key": "team", "value": "x"}
    assert search(api, "parking level", mode=mode, user={"id": "bob"}, filter=team) == ["open.md"]
    assert search(api, "parking level", mode=mode, user={"id": "ana"}, filter=team) == ["open.md"]


def test_the_access_list_applies_before_the_top_k(api: Api, documents: dict[str, str]) -> None:
    for n in range(30):  # rank above ana.md for "parking level", and hidden from ana
        add(api, f"noise{n}.md", NOISE.format(n=n), {"users": ["zoe"]})
    found = search(api, "parking level", top_k=2, user={"id": "ana"})
    assert found == ["ana.md", "open.md"]


def test_an_access_change_is_seen_by_the_next_search(api: Api, documents: dict[str, str]) -> None:
    bob = {"id": "bob"}
    hr = documents["hr"]
    response = api.patch(f"/v1/knowledge/documents/{hr}", json={"access": {"users": ["bob"]}})
    assert response.status_code == 200 and response.json()["access"] == {
        "users": ["bob"],
        "groups": [],
    }
    assert search(api, user=bob) == ["hr.md", "open.md"]
    # metadata alone keeps the list
    kept = api.patch(f"/v1/knowledge/documents/{hr}", json={"metadata": {"a": 1}}).json()
    assert kept["access"] == {"users": ["bob"], "groups": []} and kept["metadata"] == {"a": 1}
    # null: everyone's again
    opened = api.patch(f"/v1/knowledge/documents/{hr}", json={"access": None}).json()
    assert opened["access"] is None
    assert search(api, user={"id": "carl"}) == ["hr.md", "open.md"]
    assert api.get(f"/v1/knowledge/documents/{documents['ana']}").json()["access"] == {
        "users": ["ana"],
        "groups": [],
    }
    listed = {
        d["source"]: d["access"] for d in api.get("/v1/knowledge/documents").json()["documents"]
    }
    assert listed == {"open.md": None, "hr.md": None, "ana.md": {"users": ["ana"], "groups": []}}


def test_bad_access_lists_and_users_are_refused(api: Api, documents: dict[str, str]) -> None:
    before = len(api.get("/v1/knowledge/documents?limit=100").json()["documents"])
    for access, param in [
        ({"users": [""]}, "access.users.0"),
        ({"users": ["x" * 129]}, "access.users.0"),
        ({"groups": [f"g{n}" for n in range(257)]}, "access.groups"),
        ({"users": "ana"}, "access.users"),
        ({"roles": ["x"]}, "access.roles"),
        ({"users": [1]}, "access.users.0"),
    ]:
        problem = add(api, "bad.md", "Some text.", access, status=422)
        assert problem["param"] == param, (access, problem)
        patched = api.patch(f"/v1/knowledge/documents/{documents['open']}", json={"access": access})
        assert patched.status_code == 422 and patched.json()["param"] == param
    assert len(api.get("/v1/knowledge/documents?limit=100").json()["documents"]) == before
    # the boundary: 256 of each, 128 characters
    widest = {"users": ["u" * 128] * 1 + [f"u{n}" for n in range(255)], "groups": ["g"] * 256}
    assert add(api, "wide.md", "Wide access.", widest)["access"]["users"][0] == "u" * 128
    for user, param in [
        ({"groups": ["hr"]}, "user.id"),
        ({"id": ""}, "user.id"),
        ({"id": "a", "groups": [f"g{n}" for n in range(257)]}, "user.groups"),
        (None, "user"),
    ]:
        response = api.post("/v1/knowledge/search", json={"query": "parking", "user": user})
        assert response.status_code == 422 and response.json()["param"] == param, user
    assert (
        api.patch(f"/v1/knowledge/documents/{documents['open']}", json={"metadata": None}).json()[
            "param"
        ]
        == "metadata"
    )


def test_an_upload_carries_its_access_list(api: Api) -> None:
    files = {"file": ("ana.md", ANA.encode(), "text/markdown")}
    data = {"access": json.dumps({"users": ["ana"]})}
    response = api.post("/v1/knowledge/documents", files=files, data=data)
    assert response.status_code == 201, response.text
    assert response.json()["access"] == {"users": ["ana"], "groups": []}
    assert search(api, "spot 42", user={"id": "bob"}) == []
    assert search(api, "spot 42", user={"id": "ana"}) == ["ana.md"]
    for raw, param in [
        ("not json", "access"),
        ('["ana"]', "access"),
        ('{"users": [""]}', "access.users.0"),
    ]:
        bad = api.post("/v1/knowledge/documents", files=files, data={"access": raw})
        assert bad.status_code == 422 and bad.json()["param"] == param, raw


def test_chat_answers_from_what_the_user_may_read(api: Api, documents: dict[str, str]) -> None:
    agent = api.post("/v1/agents", json={"name": "Parking"}).json()["id"]

    def cited(user: dict[str, Any] | None, stream: bool = False) -> set[str]:
        body: dict[str, Any] = {"agentId": agent, "message": "Where can I park, which level?"}
        if user is not None:
            body["user"] = user
        if stream:
            body["stream"] = True
            response = api.post("/v1/chat/message", json=body)
            assert response.status_code == 200
            done = [
                line for line in response.text.splitlines() if line.startswith('data: {"agentId')
            ]
            answer = json.loads(done[-1].removeprefix("data: "))
        else:
            response = api.post("/v1/chat/message", json=body)
            assert response.status_code == 200, response.text
            answer = response.json()
        assert "42" not in answer["response"] or user is None or user["id"] == "ana"
        return {citation["source"] for citation in answer["citations"]}

    assert cited({"id": "bob"}) == {"open.md"}
    assert cited({"id": "bob"}, stream=True) == {"open.md"}
    assert cited({"id": "ana", "groups": ["hr"]}) <= {"open.md", "hr.md", "ana.md"}
    assert "ana.md" not in cited({"id": "bob", "groups": ["hr"]})


def test_the_openai_route_and_mcp_act_for_the_user(core: AgentCore, store_url: str) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from openai import OpenAI

    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("open.md", OPEN)
    ws.knowledge.ingest_text("hr.md", HR, access={"groups": ["hr"]})
    agent = ws.agents.create(name="Parking")
    with ServerThread(create_app(core)) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key=key)
        question = [{"role": "user", "content": "Where is HR parking, which level?"}]
        for extra, seen in [
            ({"user": "bob"}, {"open.md"}),
            ({"user": "bob", "extra_body": {"user_groups": ["hr"]}}, {"open.md", "hr.md"}),
        ]:
            answer = client.chat.completions.create(model=agent.id, messages=question, **extra)  # type: ignore[call-overload]
            cites = {c["source"] for c in answer.model_extra["citations"]}  # type: ignore[index]
            assert cites <= seen and ("hr.md" in cites) == ("hr.md" in seen), (extra, cites)

        async def over_mcp() -> list[list[str]]:
            headers = {"Authorization": f"Bearer {key}"}
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(f"{server.url}/v1/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                found = []
                for user in ({"id": "bob"}, {"id": "bob", "groups": ["hr"]}):
                    result = await session.call_tool(
                        "search_knowledge", {"query": "parking level", "user": user}
                    )
                    content: Any = result.structured_content
                    found.append(sorted(r["source"] for r in content["results"]))
                return found

        assert asyncio.run(over_mcp()) == [["open.md"], ["hr.md", "open.md"]]
        with Client(server.url, key) as typed:
            assert [r.source for r in typed.search("payroll", user={"id": "bob"}).results] == [
                "open.md"
            ] or typed.search("payroll", user={"id": "bob"}).results == []
            hr_doc = next(d for d in typed.list_documents().documents if d.source == "hr.md")
            assert typed.update_document(hr_doc.id, access=None).access is None
            sources = {r.source for r in typed.search("payroll", user={"id": "bob"}).results}
            assert "hr.md" in sources


def test_another_node_sees_an_access_change_at_its_next_search(store_url: str) -> None:
    with AgentCore.open(store_url) as first, AgentCore.open(store_url) as second:
        one, two = first.workspace("acme", "test"), second.workspace("acme", "test")
        doc = one.knowledge.ingest_text("hr.md", HR, access={"groups": ["hr"]})
        bob = {"id": "bob"}
        assert two.knowledge.search("payroll", user=bob).results == []
        one.knowledge.update(doc.id, access={"users": ["bob"]})
        assert [r.source for r in two.knowledge.search("payroll", user=bob).results] == ["hr.md"]


def test_the_python_api_checks_its_arguments(tmp_path: Any) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme", "test")
        with pytest.raises(ValidationFailed) as refused:
            ws.knowledge.ingest_text("a.md", "Text.", access={"users": [""]})
        assert refused.value.param == "access.users.0"
        with pytest.raises(ValidationFailed) as refused:
            ws.knowledge.search("text", user={"id": "x" * 129})
        assert refused.value.param == "user.id"
        assert ws.knowledge.list().documents == []


@pytest.fixture
def pgvector_core(store_kind: str, store_url: str) -> Iterator[AgentCore]:
    if store_kind != "postgres":
        pytest.skip("pgvector is PostgreSQL's")
    with AgentCore.open(store_url, vector_search="pgvector") as core:
        yield core


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_pgvector_applies_the_access_list_in_its_sql(pgvector_core: AgentCore, mode: str) -> None:
    ws = pgvector_core.workspace("acme", "test")
    ws.knowledge.ingest_text("open.md", OPEN)
    ws.knowledge.ingest_text("ana.md", ANA, access={"users": ["ana"]})
    for n in range(30):
        ws.knowledge.ingest_text(f"noise{n}.md", NOISE.format(n=n), access={"users": ["zoe"]})
    found = ws.knowledge.search("parking level", top_k=2, mode=mode, user={"id": "ana"})
    assert sorted(r.source for r in found.results) == ["ana.md", "open.md"]
    nobody = ws.knowledge.search("parking level", top_k=5, mode=mode, user={"id": "bob"})
    assert [r.source for r in nobody.results] == ["open.md"]


def test_a_queued_upload_keeps_its_access_list(store_url: str) -> None:
    from helpers import wait_for

    with AgentCore.open(store_url) as core:
        core.start()
        ws = core.workspace("acme", "test")
        queued = ws.knowledge.ingest_text("ana.md", ANA, access={"users": ["ana"]}, wait=False)
        assert queued.status == "processing" and queued.access is not None
        ready = wait_for(lambda: (d := ws.knowledge.get(queued.id)).status == "ready" and d)
        assert ready.access is not None and ready.access.users == ["ana"]
        assert ws.knowledge.search("spot 42", user={"id": "bob"}).results == []
        assert [r.source for r in ws.knowledge.search("spot 42", user={"id": "ana"}).results] == [
            "ana.md"
        ]


def test_a_conversation_belongs_to_the_user_it_was_started_for(
    api: Api, core: AgentCore, documents: dict[str, str]
) -> None:
    events: list[Any] = []
    core.events.subscribe("agent.action", events.append)
    core.events.subscribe("conversation.message", events.append)
    agent = api.post("/v1/agents", json={"name": "Parking"}).json()["id"]
    ana = {"id": "ana", "groups": ["hr"]}

    def chat(body: dict[str, Any], status: int = 200) -> Any:
        response = api.post("/v1/chat/message", json={"agentId": agent, **body})
        assert response.status_code == status, response.text
        return response.json()

    started = chat({"message": "Where do I park?", "user": ana})
    conversation = started["conversationId"]
    assert api.get(f"/v1/conversations/{conversation}").json()["user"] == "ana"
    chat({"message": "Where do visitors park?"})  # a conversation for no one
    listed = api.get("/v1/conversations?user=ana").json()["conversations"]
    assert [c["id"] for c in listed] == [conversation]
    assert len(api.get("/v1/conversations").json()["conversations"]) == 2
    for query in ("user=", "user=" + "x" * 129):
        refused = api.get(f"/v1/conversations?{query}")
        assert refused.status_code == 422 and refused.json()["param"] == "user"

    # another user does not find it; the key itself, and ana, may go on
    other = chat({"message": "And me?", "conversationId": conversation, "user": {"id": "bob"}}, 404)
    assert other["param"] == "conversationId"
    chat({"message": "And on weekends?", "conversationId": conversation, "user": ana})
    chat({"message": "Thanks", "conversationId": conversation})

    # the turn's events say whom it was for; a handed-off conversation's messages too
    mine = [e.data for e in events if e.data.get("conversation_id") == conversation]
    assert mine and all(data.get("user") == "ana" for data in mine[:4])
    chat({"message": "I want to talk to a human", "conversationId": conversation, "user": ana})
    chat({"message": "Hello?", "conversationId": conversation, "user": ana})
    reply = api.post(f"/v1/conversations/{conversation}/messages", json={"content": "Hi, Ana."})
    assert reply.status_code == 201
    said = [e.data for e in events if e.type == "conversation.message"]
    assert [(d["role"], d.get("user")) for d in said] == [("user", "ana"), ("operator", "ana")]
