"""Client tokens: a backend mints a short-lived token for one end user, and their
browser or app uses it instead of an API key. What a token may and may not do, how it
ends (expiry, revocation by user, its key revoked or rotated), its own rate limit, its
storage (a digest only), and the browsers' door (``AGENTCORE_CORS_ORIGINS``); over
uvicorn and ASGI on both stores, through the Python API, ``Client``/``AsyncClient``,
the ``openai`` SDK and the ``mcp`` client with a token as their key."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Api, ServerThread
from helpers import assert_problem

from agentcore import AgentCore, AsyncClient, Client
from agentcore.errors import AuthenticationError, PermissionDenied, ValidationFailed
from agentcore_starlette import create_app
from agentcore_starlette.routes import ROUTES

pytestmark = pytest.mark.both_stores  # the tests that open cores of their own too

OPEN = "Parking is on level 2 for every visitor and employee."
HR = "HR parking is on level 5, next to the payroll office."
ANA = "Ana parks in spot 42 on level 3."


def mint(api: Api, status: int = 201, key: Any = True, **body: Any) -> Any:
    response = api.post("/v1/client_tokens", json=body, key=key)
    assert response.status_code == status, response.text
    return response.json()


def sources(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return sorted(result["source"] for result in response.json()["results"])


@pytest.fixture
def world(api: Api) -> dict[str, str]:
    """Three documents (open, HR's, ana's own) and two deployed agents."""
    for source, text, access in [
        ("open.md", OPEN, None),
        ("hr.md", HR, {"groups": ["hr"]}),
        ("ana.md", ANA, {"users": ["ana"]}),
    ]:
        body: dict[str, Any] = {"source": source, "text": text}
        if access is not None:
            body["access"] = access
        assert api.post("/v1/knowledge/documents", json=body).status_code == 201
    made = {}
    for name in ("parking", "other"):
        agent = api.post("/v1/agents", json={"name": name}).json()["id"]
        assert api.post(f"/v1/agents/{agent}/deploy").status_code == 200
        made[name] = agent
    return made


# minting ------------------------------------------------------------------------------


def test_a_write_key_mints_a_token_for_one_user(api: Api, keys: Any) -> None:
    before = datetime.now(UTC)
    token = mint(api, user="ana", groups=["hr"], ttl_seconds=120)
    assert token["object"] == "client_token" and token["token"].startswith("ct_test_")
    assert (token["user"], token["groups"]) == ("ana", ["hr"]) and "agents" not in token
    expires = datetime.fromisoformat(token["expires_at"])
    assert before + timedelta(seconds=119) <= expires <= datetime.now(UTC) + timedelta(seconds=121)
    assert datetime.fromisoformat(mint(api, user="bob")["expires_at"]) > expires + timedelta(
        seconds=3000
    )  # the default is an hour
    live = keys.make(env="live").secret
    assert mint(api, user="ana", key=live)["token"].startswith("ct_live_")
    # a read key may not mint, nor may a token
    read = keys.make(scopes=("read",)).secret
    assert_problem(
        api.post("/v1/client_tokens", json={"user": "x"}, key=read), 403, "insufficient_scope"
    )
    assert_problem(
        api.post("/v1/client_tokens", json={"user": "x"}, key=token["token"]),
        403,
        "insufficient_scope",
    )
    assert_problem(
        api.post("/v1/client_tokens/revoke", json={"user": "x"}, key=token["token"]),
        403,
        "insufficient_scope",
    )


def test_bad_token_requests_are_refused(api: Api, world: dict[str, str]) -> None:
    for body, param in [
        ({}, "user"),
        ({"user": ""}, "user"),
        ({"user": "x" * 129}, "user"),
        ({"user": 7}, "user"),
        ({"user": "ana", "ttl_seconds": 0}, "ttl_seconds"),
        ({"user": "ana", "ttl_seconds": 86_401}, "ttl_seconds"),
        ({"user": "ana", "ttl_seconds": "60"}, "ttl_seconds"),
        ({"user": "ana", "groups": [f"g{n}" for n in range(257)]}, "groups"),
        ({"user": "ana", "groups": [""]}, "groups.0"),
        ({"user": "ana", "agents": [world["parking"]] * 65}, "agents"),
        ({"user": "ana", "scopes": ["write"]}, "scopes"),
    ]:
        problem = mint(api, 422, **body)
        assert problem["param"] == param, (body, problem)
    missing = mint(api, 404, user="ana", agents=[world["parking"], "agt_nope"])
    assert missing["param"] == "agents.1"
    # the boundaries are accepted
    assert mint(api, user="u" * 128, ttl_seconds=86_400, groups=["g"] * 256)["user"] == "u" * 128
    assert mint(api, user="ana", ttl_seconds=1, agents=[])["agents"] == []
    assert mint(api, user="ana", ttl_seconds=60.0)["user"] == "ana"  # JSON's integer 60.0
    assert mint(api, 422, user="ana", ttl_seconds=60.5)["param"] == "ttl_seconds"
    for body in ({"user": ""}, {}, {"user": "ana", "groups": ["hr"]}):
        bad_revoke = api.post("/v1/client_tokens/revoke", json=body)
        assert bad_revoke.status_code == 422, (body, bad_revoke.text)
        assert bad_revoke.json()["param"] in ("user", "groups"), bad_revoke.text


# what a token may do ---------------------------------------------------------------------


def test_a_token_searches_and_chats_as_its_user(api: Api, world: dict[str, str]) -> None:
    minted = mint(api, user="ana")
    ana = minted["token"]
    bob_hr = mint(api, user="bob", groups=["hr"])["token"]
    query = {"query": "parking level spot payroll", "top_k": 10}
    everything = ["ana.md", "hr.md", "open.md"]
    assert sources(api.post("/v1/knowledge/search", json=query)) == everything  # the key
    for mode in ("vector", "keyword", "hybrid"):
        with_mode = {**query, "mode": mode}
        assert sources(api.post("/v1/knowledge/search", json=with_mode, key=ana)) == [
            "ana.md",
            "open.md",
        ]
        assert sources(api.post("/v1/knowledge/search", json=with_mode, key=bob_hr)) == [
            "hr.md",
            "open.md",
        ]
    # a body's user must be the token's, with no group it lacks
    narrower = {**query, "user": {"id": "bob"}}
    assert sources(api.post("/v1/knowledge/search", json=narrower, key=bob_hr)) == ["open.md"]
    for user in ({"id": "ana"}, {"id": "bob", "groups": ["hr", "board"]}):
        refused = api.post("/v1/knowledge/search", json={**query, "user": user}, key=bob_hr)
        assert_problem(refused, 403, "user_not_allowed", param="user")

    verified = api.get("/v1/auth/verify", key=ana).json()
    assert verified["user"] == {"id": "ana", "groups": []} and verified["environment"] == "test"
    assert verified["key_id"] == minted["id"]  # the token's, not its backend key's
    assert api.get("/v1/auth/verify").json()["key_id"].startswith("key_")
    assert "expires_at" in verified and "user" not in api.get("/v1/auth/verify").json()

    answer = api.post(
        "/v1/chat/message",
        json={"agentId": world["parking"], "message": "Where can I park, which level?"},
        key=bob_hr,
    )
    assert answer.status_code == 200, answer.text
    assert {c["source"] for c in answer.json()["citations"]} <= {"hr.md", "open.md"}
    streamed = api.post(
        "/v1/chat/message",
        json={"agentId": world["parking"], "message": "Where is spot 42?", "stream": True},
        key=bob_hr,
    )
    assert streamed.status_code == 200 and "ana.md" not in streamed.text
    conversation = answer.json()["conversationId"]
    assert api.get(f"/v1/conversations/{conversation}").json()["user"] == "bob"


def test_a_token_sees_only_its_agents(api: Api, world: dict[str, str]) -> None:
    draft = api.post("/v1/agents", json={"name": "draft"}).json()["id"]
    every = mint(api, user="ana")["token"]
    listed = [a["id"] for a in api.get("/v1/agents", key=every).json()["agents"]]
    assert set(listed) == {world["parking"], world["other"], draft}  # a test token: drafts too
    one = mint(api, user="ana", agents=[world["parking"]])["token"]
    assert [a["id"] for a in api.get("/v1/agents", key=one).json()["agents"]] == [world["parking"]]
    assert api.get(f"/v1/agents/{world['parking']}", key=one).status_code == 200
    assert_problem(api.get(f"/v1/agents/{world['other']}", key=one), 403, "agent_not_allowed")
    refused = api.post(
        "/v1/chat/message", json={"agentId": world["other"], "message": "Hi"}, key=one
    )
    assert_problem(refused, 403, "agent_not_allowed", param="agentId")
    assert api.get("/v1/agents?status=archived", key=one).json()["agents"] == []
    # pages of a token's own list
    both = mint(api, user="ana", agents=[world["parking"], world["other"], draft])["token"]
    first = api.get("/v1/agents?limit=2", key=both).json()
    assert len(first["agents"]) == 2 and first["has_more"] is True
    rest = api.get(f"/v1/agents?limit=2&starting_after={first['agents'][-1]['id']}", key=both)
    assert len(rest.json()["agents"]) == 1 and rest.json()["has_more"] is False


def test_a_token_reads_and_changes_only_its_users_conversations(
    api: Api, world: dict[str, str]
) -> None:
    ana = mint(api, user="ana")["token"]
    ana_again = mint(api, user="ana", groups=["hr"])["token"]
    bob = mint(api, user="bob")["token"]

    def chat(key: str, **body: Any) -> httpx.Response:
        return api.post(
            "/v1/chat/message",
            json={"agentId": world["parking"], "message": "Where do I park?", **body},
            key=key,
        )

    anas = chat(ana).json()["conversationId"]
    bobs = chat(bob).json()["conversationId"]
    nobodys = chat(True).json()["conversationId"]  # the key's own, for no one
    assert [c["id"] for c in api.get("/v1/conversations", key=ana).json()["conversations"]] == [
        anas
    ]
    # another token of the same user sees them too
    assert api.get(f"/v1/conversations/{anas}", key=ana_again).status_code == 200
    assert_problem(api.get("/v1/conversations?user=bob", key=ana), 403, "user_not_allowed")
    for theirs in (bobs, nobodys):
        for method, path in [
            ("GET", f"/v1/conversations/{theirs}"),
            ("GET", f"/v1/conversations/{theirs}/messages"),
            ("DELETE", f"/v1/conversations/{theirs}"),
        ]:
            assert_problem(api.request(method, path, key=ana), 404, "resource_missing")
        assert_problem(chat(ana, conversationId=theirs), 404, "resource_missing")
        message = api.get(f"/v1/conversations/{theirs}/messages").json()["messages"][-1]["id"]
        rated = api.post(
            f"/v1/conversations/{theirs}/messages/{message}/feedback",
            json={"rating": "up"},
            key=ana,
        )
        assert_problem(rated, 404, "resource_missing")
    # its own: continue, read, rate, delete
    assert chat(ana, conversationId=anas).status_code == 200
    said = api.get(f"/v1/conversations/{anas}/messages", key=ana).json()["messages"]
    assert len(said) == 4
    rated = api.post(
        f"/v1/conversations/{anas}/messages/{said[-1]['id']}/feedback",
        json={"rating": "down", "reason": "too short"},
        key=ana,
    )
    assert rated.status_code == 200 and rated.json()["feedback"]["rating"] == "down"
    assert api.delete(f"/v1/conversations/{anas}", key=ana).status_code == 200
    assert api.get(f"/v1/conversations/{bobs}").status_code == 200  # untouched
    assert api.get(f"/v1/conversations/{nobodys}").status_code == 200
    # an operator's routes stay the key's
    assert_problem(
        api.post(f"/v1/conversations/{bobs}/messages", json={"content": "hi"}, key=bob),
        403,
        "insufficient_scope",
    )
    assert_problem(
        api.post(f"/v1/conversations/{bobs}/release", key=bob), 403, "insufficient_scope"
    )


def test_a_token_limited_to_agents_sees_only_their_conversations(
    api: Api, world: dict[str, str]
) -> None:
    every = mint(api, user="ana")["token"]

    def chat(agent: str) -> str:
        body = {"agentId": agent, "message": "Where do I park?"}
        response = api.post("/v1/chat/message", json=body, key=every)
        assert response.status_code == 200, response.text
        return str(response.json()["conversationId"])

    parkings, others = chat(world["parking"]), chat(world["other"])
    listed = api.get("/v1/conversations", key=every).json()["conversations"]
    assert [c["id"] for c in listed] == [others, parkings]  # an unlimited token: both
    one = mint(api, user="ana", agents=[world["parking"]])["token"]
    assert [c["id"] for c in api.get("/v1/conversations", key=one).json()["conversations"]] == [
        parkings
    ]
    other = api.get(f"/v1/conversations?agentId={world['other']}", key=one)
    assert other.status_code == 200 and other.json()["conversations"] == []
    message = api.get(f"/v1/conversations/{others}/messages").json()["messages"][-1]["id"]
    for method, path, body in [
        ("GET", f"/v1/conversations/{others}", None),
        ("GET", f"/v1/conversations/{others}/messages", None),
        ("POST", f"/v1/conversations/{others}/messages/{message}/feedback", {"rating": "up"}),
        ("DELETE", f"/v1/conversations/{others}", None),
    ]:
        assert_problem(api.request(method, path, json=body, key=one), 404, "resource_missing")
    assert api.get(f"/v1/conversations/{parkings}", key=one).status_code == 200
    # the boundary: a token for no agent lists nothing, and the key still sees both
    none = mint(api, user="ana", agents=[])["token"]
    assert api.get("/v1/conversations", key=none).json()["conversations"] == []
    assert api.get(f"/v1/conversations/{others}").status_code == 200


def test_every_other_route_refuses_a_token(api: Api, world: dict[str, str]) -> None:
    token = mint(api, user="ana")["token"]
    ids = {
        "agent_id": world["parking"],
        "document_id": "doc_x",
        "webhook_id": "whk_x",
        "conversation_id": "conv_x",
        "message_id": "msg_x",
    }
    refused = 0
    for route in ROUTES:
        if route.end_users:
            continue
        path = "/v1" + route.path.format(**ids)
        response = api.request(
            route.method, path, key=token, json={} if route.body != "none" else None
        )
        assert response.status_code == 403, (route.method, path, response.text)
        assert response.json()["code"] == "insufficient_scope", (route.method, path)
        refused += 1
    assert refused >= 20  # documents, webhooks, agents' writes, tokens, operator routes
    # nothing was done: no document, agent or webhook was added or changed
    assert len(api.get("/v1/knowledge/documents").json()["documents"]) == 3
    assert len(api.get("/v1/webhooks").json()["webhooks"]) == 0


# how a token ends --------------------------------------------------------------------


def test_an_expired_token_is_refused(api: Api) -> None:
    token = mint(api, user="ana", ttl_seconds=1)["token"]
    deadline = time.monotonic() + 30
    while True:  # a second, however slow the machine: wait for it rather than time it
        response = api.get("/v1/auth/verify", key=token)
        if response.status_code == 401 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert_problem(response, 401, "token_expired")


def test_revoking_a_user_ends_their_tokens_only(api: Api) -> None:
    first, second = mint(api, user="ana")["token"], mint(api, user="ana")["token"]
    bob = mint(api, user="bob")["token"]
    revoked = api.post("/v1/client_tokens/revoke", json={"user": "ana"})
    assert revoked.status_code == 200
    assert revoked.json() == {"object": "client_token_revocation", "user": "ana", "revoked": 2}
    for token in (first, second):
        assert_problem(api.get("/v1/auth/verify", key=token), 401, "token_revoked")
    assert api.get("/v1/auth/verify", key=bob).status_code == 200
    again = api.post("/v1/client_tokens/revoke", json={"user": "ana"}).json()
    assert again["revoked"] == 0  # already ended
    fresh = mint(api, user="ana")["token"]  # a new token after a revocation works
    assert api.get("/v1/auth/verify", key=fresh).status_code == 200


def test_a_token_ends_with_its_key(api: Api, core: AgentCore, keys: Any) -> None:
    minter = keys.make()
    by_revoked = mint(api, user="ana", key=minter.secret)["token"]
    core.keys.revoke(minter.id)
    assert_problem(api.get("/v1/auth/verify", key=by_revoked), 401, "token_revoked")

    rotating = keys.make()
    by_rotated = mint(api, user="ana", key=rotating.secret)["token"]
    new = core.keys.rotate(rotating.id)
    assert_problem(api.get("/v1/auth/verify", key=by_rotated), 401, "token_revoked")
    assert api.get("/v1/auth/verify", key=rotating.secret).status_code == 200  # its grace
    by_new = mint(api, user="ana", key=new.secret)["token"]
    assert api.get("/v1/auth/verify", key=by_new).status_code == 200

    expiring = keys.make(expires_in=timedelta(seconds=2))
    by_expiring = mint(api, user="ana", key=expiring.secret, ttl_seconds=3600)["token"]
    deadline = time.monotonic() + 30
    while (response := api.get("/v1/auth/verify", key=by_expiring)).status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert_problem(response, 401, "token_expired")


def test_malformed_and_unknown_tokens_are_refused(api: Api) -> None:
    token = mint(api, user="ana")["token"]
    for secret, code in [
        ("ct_test_short", "malformed_client_token"),
        (token[:-1] + ("A" if token[-1] != "A" else "B"), "malformed_client_token"),  # checksum
        ("ct_prod_" + token[8:], "malformed_client_token"),
    ]:
        assert_problem(api.get("/v1/auth/verify", key=secret), 401, code)
    from agentcore.keys import generate_secret

    unknown = generate_secret("test", "ct")
    assert_problem(api.get("/v1/auth/verify", key=unknown), 401, "invalid_client_token")


# where it is kept, and what it costs ----------------------------------------------------


def test_a_token_is_stored_as_a_digest_only(core: AgentCore, store_kind: str) -> None:
    core.create_organization("acme")
    key = core.keys.create("acme", "test")
    issued = core.authenticate(key.secret).client_tokens.create(user="ana")
    body = issued.token.split("_", 2)[-1]
    rows = _all_rows(core, store_kind)
    assert rows and not any(body in row for row in rows)
    assert any(hashlib.sha256(issued.token.encode()).hexdigest() in row for row in rows)


def _all_rows(core: AgentCore, store_kind: str) -> list[str]:
    """Every stored row of every table, as text."""
    db: Any = core.store.db  # type: ignore[attr-defined]
    with db.read() as conn:
        if store_kind == "postgres":
            names = [
                r["tablename"]
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            ]
        else:
            names = [
                r["name"] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
        return [
            json.dumps([str(value) for value in dict(row).values()])
            for name in names
            for row in conn.execute(f'SELECT * FROM "{name}"')
        ]


def test_each_token_has_its_own_rate_limit(tmp_path: Path, store_url: str) -> None:
    # a token's bucket is a hundredth of its key's: one request, then 250 s to wait
    with AgentCore.open(store_url, rate_limit_test=0.4, client_token_rate_share=0.01) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test").secret
        ws = core.authenticate(key)
        ana, bob = (ws.client_tokens.create(user=u).token for u in ("ana", "bob"))
        api = Api(create_app(core), None)
        first = api.get("/v1/auth/verify", key=ana)
        assert first.status_code == 200
        assert first.headers["RateLimit-Policy"] == '"per-key";q=1;w=250'
        limited = api.get("/v1/auth/verify", key=ana)
        assert_problem(limited, 429, "rate_limited")
        assert int(limited.headers["Retry-After"]) > 100
        # another user's token, and the key itself, have buckets of their own
        assert api.get("/v1/auth/verify", key=bob).status_code == 200
        assert api.get("/v1/auth/verify", key=key).status_code == 200


def test_idempotency_keys_are_each_users_own(api: Api, world: dict[str, str]) -> None:
    body = {"agentId": world["parking"], "message": "Where do I park?"}
    same = {"Idempotency-Key": "chat-1"}
    answers = [
        api.post("/v1/chat/message", json=body, headers=same, key=mint(api, user=user)["token"])
        for user in ("ana", "bob")
    ]
    assert all(a.status_code == 200 and "idempotent-replayed" not in a.headers for a in answers)
    assert answers[0].json()["conversationId"] != answers[1].json()["conversationId"]
    # a retry by the same user is a replay of their own answer
    again = api.post(
        "/v1/chat/message", json=body, headers=same, key=mint(api, user="ana")["token"]
    )
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["conversationId"] == answers[0].json()["conversationId"]


# the doors users already hold ------------------------------------------------------------


def test_the_clients_the_openai_sdk_and_mcp_take_a_token(core: AgentCore) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from openai import OpenAI, PermissionDeniedError

    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("open.md", OPEN)
    ws.knowledge.ingest_text("hr.md", HR, access={"groups": ["hr"]})
    parking = ws.agents.create(name="Parking")
    other = ws.agents.create(name="Other")
    with ServerThread(create_app(core)) as server:
        with Client(server.url, key) as backend:
            token = backend.create_client_token("bob", agents=[parking.id], ttl_seconds=600)
            assert token.user == "bob" and token.agents == [parking.id]
        with Client(server.url, token.token) as browser:
            assert browser.verify().user is not None
            assert [r.source for r in browser.search("payroll level").results] == ["open.md"]
            answer = browser.chat(parking.id, "Where is HR parking?")
            assert {c.source for c in answer.citations} <= {"open.md"}
            assert [a.id for a in browser.list_agents().agents] == [parking.id]
            with pytest.raises(PermissionDenied) as refused:
                browser.list_documents()
            assert refused.value.code == "insufficient_scope"

        async def async_side() -> None:
            async with AsyncClient(server.url, key) as backend:
                hr = await backend.create_client_token("carl", groups=["hr"])
            async with AsyncClient(server.url, hr.token) as browser:
                found = await browser.search("payroll level")
                assert sorted(r.source for r in found.results) == ["hr.md", "open.md"]
            async with AsyncClient(server.url, key) as backend:
                assert (await backend.revoke_client_tokens("carl")).revoked == 1
            async with AsyncClient(server.url, hr.token) as browser:
                with pytest.raises(AuthenticationError) as ended:
                    await browser.verify()
                assert ended.value.code == "token_revoked"

        asyncio.run(async_side())

        openai = OpenAI(base_url=f"{server.url}/v1", api_key=token.token)
        question = [{"role": "user", "content": "Where is HR parking, which level?"}]
        completion = openai.chat.completions.create(model=parking.id, messages=question)  # type: ignore[arg-type]
        cites = {c["source"] for c in completion.model_extra["citations"]}  # type: ignore[index]
        assert cites <= {"open.md"}
        assert [m.id for m in openai.models.list()] == [parking.id]
        with pytest.raises(PermissionDeniedError):
            openai.chat.completions.create(model=other.id, messages=question)  # type: ignore[arg-type]

        async def over_mcp() -> tuple[set[str], list[str], str]:
            headers = {"Authorization": f"Bearer {token.token}"}
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(f"{server.url}/v1/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                found = await session.call_tool("search_knowledge", {"query": "payroll level"})
                content: Any = found.structured_content
                chat = await session.call_tool(
                    "chat_with_agent", {"agent_id": parking.id, "message": "Where is parking?"}
                )
                said: Any = chat.structured_content
                return names, [r["source"] for r in content["results"]], said["conversationId"]

        names, found, conversation = asyncio.run(over_mcp())
        assert names == {"search_knowledge", "list_agents", "chat_with_agent"}  # no ingest
        assert found == ["open.md"]
        assert ws.conversations.get(conversation).user == "bob"


def test_the_python_api_mints_and_checks(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test")
        ws = core.authenticate(key.secret)
        with pytest.raises(ValidationFailed) as refused:
            ws.client_tokens.create(user="ana", ttl_seconds=0)
        assert refused.value.param == "ttl_seconds"
        with pytest.raises(PermissionDenied) as keyless:  # host code holds no key
            core.workspace("acme", "test").client_tokens.create(user="ana")
        assert keyless.value.code == "key_required"
        token = ws.client_tokens.create(user="ana", groups=["hr"])
        as_ana = core.authenticate(token.token)
        assert as_ana.client is not None and as_ana.client.user.id == "ana"
        with pytest.raises(PermissionDenied):
            as_ana.knowledge.list()
        with pytest.raises(PermissionDenied):
            as_ana.client_tokens.create(user="ana")
        assert ws.client_tokens.revoke("ana").revoked == 1
        with pytest.raises(AuthenticationError) as ended:
            core.authenticate(token.token)
        assert ended.value.code == "token_revoked"


def test_expired_tokens_are_swept(core: AgentCore) -> None:
    from agentcore import client_tokens

    core.create_organization("acme")
    ws = core.authenticate(core.keys.create("acme", "test").secret)
    short = ws.client_tokens.create(user="ana", ttl_seconds=1)
    long = ws.client_tokens.create(user="bob", ttl_seconds=3600)
    later = datetime.now(UTC) + timedelta(seconds=5)
    assert client_tokens.sweep(core.store, now=later) == 1
    with pytest.raises(AuthenticationError) as gone:
        core.authenticate(short.token)
    assert gone.value.code == "invalid_client_token"
    assert core.authenticate(long.token).client is not None


# browsers -----------------------------------------------------------------------------

PAGE = "https://app.example.com"


def preflight(http: httpx.Client, path: str, origin: str = PAGE, method: str = "POST") -> Any:
    return http.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


@pytest.fixture
def cors_app(core: AgentCore) -> Iterator[httpx.Client]:
    with (
        ServerThread(create_app(core, cors_origins=[PAGE, "http://localhost:5173"])) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        yield http


def test_cors_opens_only_the_routes_a_token_may_use(
    cors_app: httpx.Client, core: AgentCore
) -> None:
    core.create_organization("acme")
    key = core.keys.create("acme", "test").secret
    token = core.authenticate(key).client_tokens.create(user="ana").token
    for path in (
        "/v1/chat/message",
        "/v1/knowledge/search",
        "/v1/chat/completions",
        "/v1/mcp",
        "/v1/conversations/conv_x/messages/msg_x/feedback",
    ):
        allowed = preflight(cors_app, path)
        assert allowed.status_code == 200, (path, allowed.text)
        assert allowed.headers["access-control-allow-origin"] == PAGE
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    for path in ("/v1/knowledge/documents", "/v1/webhooks/subscribe", "/v1/client_tokens"):
        closed = preflight(cors_app, path)
        assert "access-control-allow-origin" not in closed.headers, path
    assert (
        "access-control-allow-origin"
        not in preflight(cors_app, "/v1/chat/message", "https://evil.example").headers
    )
    # the answers themselves, errors included, carry the header on the open routes only
    auth = {"Authorization": f"Bearer {token}", "Origin": PAGE}
    verified = cors_app.get("/v1/auth/verify", headers=auth)
    assert verified.status_code == 200 and verified.headers["access-control-allow-origin"] == PAGE
    assert "ratelimit" in verified.headers["access-control-expose-headers"].lower()
    unauthenticated = cors_app.get("/v1/auth/verify", headers={"Origin": PAGE})
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["access-control-allow-origin"] == PAGE
    documents = cors_app.get(
        "/v1/knowledge/documents", headers={**auth, "Authorization": f"Bearer {key}"}
    )
    assert documents.status_code == 200 and "access-control-allow-origin" not in documents.headers


def test_no_origin_is_open_by_default(api: Api) -> None:
    response = api.request(
        "OPTIONS",
        "/v1/chat/message",
        headers={"Origin": PAGE, "Access-Control-Request-Method": "POST"},
        key=False,
    )
    assert "access-control-allow-origin" not in response.headers


def test_cors_origins_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcore_starlette.settings import HttpSettings

    monkeypatch.setenv("AGENTCORE_CORS_ORIGINS", f"{PAGE}, http://localhost:5173")
    with AgentCore.open(tmp_path / "a.db") as core:
        assert HttpSettings.of(core.settings).cors_origins == [PAGE, "http://localhost:5173"]
    for bad in ("app.example.com", "https://app.example.com/", "https://a.com/path"):
        monkeypatch.setenv("AGENTCORE_CORS_ORIGINS", bad)
        with pytest.raises(ValueError, match="not an origin"):
            AgentCore.open(tmp_path / "b.db")
