"""Tools on remote MCP servers: an agent's ``mcp_servers`` are listed and called with the
official MCP client, against a real MCP server built with the official SDK on
127.0.0.1 (``mcp_tool_server``), on both stores, over HTTP: headers kept secret, calls
approved or refused, every failure a tool error and an ``agent.error``, the SSRF guard
at create time and at connect time."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, Keys, ServerThread
from helpers import Recorder, open_with
from mcp_tool_server import TOKEN, ToolServer, serve_tools

from agentcore import AgentCore, AsyncClient, Client, Event
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.config import Settings
from agentcore.mcp_tools import McpFailure, McpTools
from agentcore.outbound import SecretBox
from agentcore.schema import McpServer
from agentcore_starlette import create_app

BEARER = {"Authorization": f"Bearer {TOKEN}"}


class Script:
    """The model: ``order N`` calls ``order_status``, ``cancel N`` calls ``cancel_order``,
    ``slow``/``huge``/``broken`` call those tools; then it answers with the result."""

    def __call__(self, request: ChatRequest) -> ChatResult:
        if request.steps:
            return ChatResult(text=f"Tool said: {request.steps[-1].result}")
        words = request.message.split()
        calls = {
            "order": ToolCall("call_1", "order_status", {"order_id": words[-1]}),
            "cancel": ToolCall("call_1", "cancel_order", {"order_id": words[-1]}),
            "slow": ToolCall("call_1", "slow", {"seconds": 5}),
            "huge": ToolCall("call_1", "huge", {"characters": 5000}),
            "broken": ToolCall("call_1", "broken", {}),
        }
        call = calls.get(words[0])
        if call is None or call.name not in {tool.name for tool in request.tools}:
            return ChatResult(text="No tool for that.")
        return ChatResult(text="", tool_calls=[call])


def open_core(store_url: str, **settings: Any) -> AgentCore:
    options: dict[str, Any] = {
        "outbound_allowed_networks": "127.0.0.0/8",
        "mcp_timeout": 2.0,
        "max_tool_output_chars": 2000,
        **settings,
    }
    return open_with(store_url, Recorder("scripted", Script()), **options)


@pytest.fixture
def core(store_url: str) -> Iterator[AgentCore]:
    """The suite's core (every HTTP test runs on both stores) with the scripted model."""
    instance = open_core(store_url)
    yield instance
    instance.close()


@pytest.fixture
def tools() -> Iterator[ToolServer]:
    with serve_tools() as server:
        yield server


def server(url: str, **fields: Any) -> dict[str, Any]:
    return {"label": "orders", "url": url, "headers": BEARER, **fields}


def create_agent(api: Api, *servers: dict[str, Any], status: int = 201) -> Any:
    body = {"name": "Orders", "model": "scripted", "mcp_servers": list(servers)}
    response = api.post("/v1/agents", json=body)
    assert response.status_code == status, response.text
    return response.json()


def chat(api: Api, body: dict[str, Any]) -> Any:
    response = api.post("/v1/chat/message", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def recorded(core: AgentCore, kind: str) -> list[Event]:
    seen: list[Event] = []
    core.events.subscribe(kind, seen.append)
    return seen


def test_an_mcp_servers_tools_are_offered_and_called(
    api: Api, core: AgentCore, tools: ToolServer
) -> None:
    actions = recorded(core, "agent.action")
    created = create_agent(api, server(tools.url, require_approval="never"))
    assert TOKEN not in json.dumps(created)
    assert created["mcp_servers"] == [
        {
            "label": "orders",
            "url": tools.url,
            "header_names": ["Authorization"],
            "allowed_tools": None,
            "require_approval": "never",
        }
    ]
    for shown in (api.get(f"/v1/agents/{created['id']}"), api.get("/v1/agents")):
        assert shown.status_code == 200 and TOKEN not in shown.text
        assert "header_names" in shown.text

    body = chat(api, {"agentId": created["id"], "message": "order 42"})
    assert body["status"] == "completed"
    assert body["response"] == "Tool said: Order 42 ships on Tuesday."
    assert tools.calls == [("order_status", {"order_id": "42"})]
    assert set(tools.authorizations) == {f"Bearer {TOKEN}"}
    model = core.chat_models["scripted"]
    assert isinstance(model, Recorder)
    offered = {tool.name for tool in model.requests[0].tools}
    assert {"order_status", "cancel_order", "slow", "huge", "broken"} <= offered
    (call,) = [e.data for e in actions if e.data["action"] == "tool_call"]
    assert call["server"] == "orders" and call["arguments"] == {"order_id": "42"}

    # the listing is reused: the next turn lists nothing, it only calls
    before = len(tools.authorizations)
    chat(api, {"agentId": created["id"], "message": "order 7"})
    assert tools.calls[-1] == ("order_status", {"order_id": "7"})
    assert len(tools.authorizations) - before <= 4  # one session: initialize, call, close


def test_only_allowed_tools_are_offered(api: Api, core: AgentCore, tools: ToolServer) -> None:
    created = create_agent(
        api, server(tools.url, require_approval="never", allowed_tools=["cancel_order"])
    )
    body = chat(api, {"agentId": created["id"], "message": "order 42"})
    assert body["response"] == "No tool for that."
    model = core.chat_models["scripted"]
    assert isinstance(model, Recorder)
    assert [t.name for t in model.requests[-1].tools if t.name != "handoff_to_human"] == [
        "cancel_order"
    ]
    assert tools.calls == []


def test_calls_wait_for_approval_by_default(api: Api, core: AgentCore, tools: ToolServer) -> None:
    actions = recorded(core, "agent.action")
    agent_id = create_agent(api, server(tools.url))["id"]
    body = chat(api, {"agentId": agent_id, "message": "cancel 42"})
    assert body["status"] == "requires_action"
    assert body["tool_calls"] == [
        {
            "id": "call_1",
            "type": "approval",
            "name": "cancel_order",
            "arguments": {"order_id": "42"},
            "server_label": "orders",
        }
    ]
    assert tools.calls == []  # nothing is sent to the server before a person approves
    approved = chat(
        api,
        {
            "agentId": agent_id,
            "conversationId": body["conversationId"],
            "approvals": [{"tool_call_id": "call_1", "approve": True}],
        },
    )
    assert approved["response"] == "Tool said: Order 42 is cancelled."
    assert tools.calls == [("cancel_order", {"order_id": "42"})]
    (decision,) = [e.data for e in actions if e.data["action"] == "approval"]
    assert decision["approve"] is True and decision["server"] == "orders"

    # refused: the call is never made, and the model is told
    again = chat(api, {"agentId": agent_id, "message": "cancel 43"})
    refused = chat(
        api,
        {
            "agentId": agent_id,
            "conversationId": again["conversationId"],
            "approvals": [{"tool_call_id": "call_1", "approve": False, "reason": "no"}],
        },
    )
    assert "a person refused this call" in refused["response"]
    assert tools.calls == [("cancel_order", {"order_id": "42"})]


@pytest.mark.parametrize(
    ("message", "code"),
    [("slow", "mcp_timeout"), ("huge", "mcp_result_too_long")],
)
def test_a_failed_call_is_a_tool_error_and_an_agent_error(
    api: Api, core: AgentCore, tools: ToolServer, message: str, code: str
) -> None:
    errors = recorded(core, "agent.error")
    agent_id = create_agent(api, server(tools.url, require_approval="never"))["id"]
    body = chat(api, {"agentId": agent_id, "message": message})
    assert body["status"] == "completed"
    said = json.loads(body["response"].removeprefix("Tool said: "))
    assert said["code"] == code and said["error"]
    (error,) = [e.data for e in errors]
    assert error["error"] == code and error["server"] == "orders" and error["tool"] == message


def test_a_tools_own_error_reaches_the_model_only(
    api: Api, core: AgentCore, tools: ToolServer
) -> None:
    errors = recorded(core, "agent.error")
    agent_id = create_agent(api, server(tools.url, require_approval="never"))["id"]
    body = chat(api, {"agentId": agent_id, "message": "broken"})
    assert json.loads(body["response"].removeprefix("Tool said: ")) == {
        "error": "Error executing tool broken"
    }
    assert errors == []


def test_a_server_that_cannot_be_listed_leaves_the_turn_answering(
    api: Api, core: AgentCore, tools: ToolServer
) -> None:
    errors = recorded(core, "agent.error")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    agent_id = create_agent(
        api,
        server(tools.url, label="nokey", headers={"Authorization": "Bearer wrong"}),
        server(f"http://127.0.0.1:{port}/mcp", label="down"),
        server(f"{tools.base}/garbage", label="garbage"),
    )["id"]
    body = chat(api, {"agentId": agent_id, "message": "order 42"})
    assert body["status"] == "completed" and body["response"] == "No tool for that."
    failures = {e.data["server"]: e.data["error"] for e in errors}
    assert failures == {
        "nokey": "mcp_unauthorized",
        "down": "mcp_unreachable",
        "garbage": "mcp_bad_response",
    }
    assert tools.calls == []


def test_bad_servers_are_refused_and_nothing_is_stored(api: Api, tools: ToolServer) -> None:
    good = server(tools.url)
    for servers, status, param in [
        ([good, {**good, "url": tools.url + "2"}], 409, "mcp_servers.1.label"),
        ([{**good, "label": f"s{n}"} for n in range(9)], 422, "mcp_servers"),
        ([{**good, "label": "has space"}], 422, "mcp_servers.0.label"),
        ([{**good, "url": "ftp://example.com/mcp"}], 422, "mcp_servers.0.url"),
        ([{**good, "url": "http://10.1.2.3/mcp"}], 403, "mcp_servers.0.url"),
        ([{**good, "url": "http://169.254.169.254/mcp"}], 403, "mcp_servers.0.url"),
        ([{**good, "headers": {"Host": "x"}}], 422, "mcp_servers.0.headers"),
        ([{**good, "headers": {"A": "1", "a": "2"}}], 409, "mcp_servers.0.headers"),
        ([{**good, "headers": {"content-LENGTH": "1"}}], 422, "mcp_servers.0.headers"),
        ([{**good, "headers": {"X-Key": "line\nbreak"}}], 422, "mcp_servers.0.headers"),
        ([{**good, "headers": {"Bad Name": "x"}}], 422, "mcp_servers.0.headers"),
        ([{**good, "require_approval": "sometimes"}], 422, "mcp_servers.0.require_approval"),
        ([{**good, "allowed_tools": [""]}], 422, "mcp_servers.0.allowed_tools.0"),
        ([{**good, "extra": 1}], 422, "mcp_servers.0.extra"),
    ]:
        problem = create_agent(api, *servers, status=status)
        assert problem["param"] == param, (servers, problem)
    assert api.get("/v1/agents").json()["agents"] == []
    # eight is the most
    assert (
        len(create_agent(api, *[{**good, "label": f"s{n}"} for n in range(8)])["mcp_servers"]) == 8
    )


def test_a_public_address_is_accepted_without_contacting_it(api: Api) -> None:
    created = create_agent(api, server("https://mcp.example.invalid/mcp"))
    assert created["mcp_servers"][0]["url"] == "https://mcp.example.invalid/mcp"


def test_live_keys_need_https(api: Api, keys: Keys, tools: ToolServer) -> None:
    live = api.with_key(keys.make(env="live").secret)
    response = live.post(
        "/v1/agents", json={"name": "x", "mcp_servers": [server("http://example.com/mcp")]}
    )
    assert response.status_code == 403, response.text
    assert response.json()["code"] == "https_required"
    assert "MCP server" in response.json()["detail"]


def test_an_update_keeps_secret_headers_only_for_the_same_server(
    api: Api, core: AgentCore, tools: ToolServer
) -> None:
    agent = create_agent(api, server(tools.url, require_approval="never"))
    # what a GET showed, sent back: the headers stay
    resent = [
        {k: v for k, v in agent["mcp_servers"][0].items() if k != "header_names"},
    ]
    updated = api.patch(f"/v1/agents/{agent['id']}", json={"mcp_servers": resent}).json()
    assert updated["mcp_servers"][0]["header_names"] == ["Authorization"]
    assert chat(api, {"agentId": agent["id"], "message": "order 1"})["response"].endswith(
        "Tuesday."
    )
    # another URL: the secret does not follow it
    moved = [{**resent[0], "url": tools.url + "/"}]
    updated = api.patch(f"/v1/agents/{agent['id']}", json={"mcp_servers": moved}).json()
    assert updated["mcp_servers"][0]["header_names"] == []
    # {} removes them; null is refused
    cleared = [{**resent[0], "headers": {}}]
    updated = api.patch(f"/v1/agents/{agent['id']}", json={"mcp_servers": cleared}).json()
    assert updated["mcp_servers"][0]["header_names"] == []
    refused = api.patch(f"/v1/agents/{agent['id']}", json={"mcp_servers": None})
    assert refused.status_code == 422 and refused.json()["param"] == "mcp_servers"


def test_headers_are_sealed_at_rest(tmp_path: Any, tools: ToolServer) -> None:
    db = tmp_path / "sealed.db"
    core = open_core(str(db))  # a SQLite file: its key file seals the headers
    try:
        core.create_organization("acme")
        ws = core.workspace("acme", "test")
        agent = ws.agents.create(name="x", mcp_servers=[server(tools.url)])
    finally:
        core.close()
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute(
            "SELECT mcp_servers FROM agents WHERE id = ?", [agent.id]
        ).fetchone()
    assert TOKEN not in stored
    assert json.loads(stored)[0]["sealed_headers"].startswith("enc:v1:")


def test_the_openai_route_calls_mcp_tools_that_need_no_approval(
    api: Api, tools: ToolServer
) -> None:
    free = create_agent(api, server(tools.url, require_approval="never"))["id"]
    gated = create_agent(api, server(tools.url))["id"]
    for model, said in [
        (free, "Tool said: Order 9 ships on Tuesday."),
        (gated, "Tool said: "),
    ]:
        response = api.post(
            "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "order 9"}]},
        )
        assert response.status_code == 200, response.text
        content = response.json()["choices"][0]["message"]["content"]
        assert content.startswith(said)
    assert tools.calls == [("order_status", {"order_id": "9"})]


def test_a_turn_paused_for_approval_on_one_node_is_resumed_on_another(
    store_url: str, tools: ToolServer
) -> None:
    first, second = open_core(store_url), open_core(store_url)
    try:
        first.create_organization("acme")
        key = first.keys.create("acme", "test", ["read", "write"])
        with ServerThread(create_app(first)) as a, ServerThread(create_app(second)) as b:
            with Client(a.url, key.secret) as on_a:
                agent = on_a.create_agent(
                    name="O", model="scripted", mcp_servers=[server(tools.url)]
                )
                waiting = on_a.chat.send(agent.id, "cancel 5")
            assert waiting.tool_calls is not None
            assert waiting.tool_calls[0].server_label == "orders"

            async def resume() -> Any:
                async with AsyncClient(b.url, key.secret) as on_b:
                    return await on_b.chat.send(
                        agent.id,
                        conversation_id=waiting.conversationId,
                        approvals=[{"tool_call_id": "call_1", "approve": True}],
                    )

            done = asyncio.run(resume())
        assert done.response == "Tool said: Order 5 is cancelled."
        assert tools.calls == [("cancel_order", {"order_id": "5"})]
    finally:
        first.close()
        second.close()


# --- the client on its own: SSRF at connect time, listing cache ----------------------


def test_the_guard_refuses_a_name_that_resolves_to_a_refused_address(tools: ToolServer) -> None:
    port = tools.url.split(":")[2].split("/")[0]

    def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # accepted as public when given, loopback when connecting

    guarded = McpTools(Settings(), SecretBox(), resolver=rebinding)
    named = McpServer(label="o", url=f"http://tools.example.com:{port}/mcp")
    with pytest.raises(McpFailure) as failed:
        guarded.tools("agt_1", named.with_sealed_headers(json.dumps(BEARER)))
    assert failed.value.code == "mcp_url_not_allowed"
    assert tools.authorizations == []  # no request reached it

    allowed = McpTools(
        Settings(outbound_allowed_networks="127.0.0.0/8"), SecretBox(), resolver=rebinding
    )
    listed = allowed.tools("agt_1", named.with_sealed_headers(json.dumps(BEARER)))
    assert "order_status" in [tool.name for tool in listed]


def test_listings_are_reused_until_their_ttl_or_a_change(tools: ToolServer) -> None:
    now = [0.0]
    client = McpTools(
        Settings(outbound_allowed_networks="127.0.0.0/8", mcp_tools_ttl=60),
        SecretBox(),
        clock=lambda: now[0],
    )
    good = McpServer(label="o", url=tools.url).with_sealed_headers(json.dumps(BEARER))
    client.tools("agt_1", good)
    sessions = len(tools.authorizations)
    client.tools("agt_1", good)
    assert len(tools.authorizations) == sessions  # reused
    narrowed = good.model_copy(update={"allowed_tools": ["slow"]})
    assert [tool.name for tool in client.tools("agt_1", narrowed)] == ["slow"]
    assert len(tools.authorizations) > sessions  # a changed server is listed again
    sessions = len(tools.authorizations)
    now[0] = 61.0
    client.tools("agt_1", good)
    assert len(tools.authorizations) > sessions  # past its ttl


def test_responses_beyond_the_byte_limit_are_cut_off(tools: ToolServer) -> None:
    client = McpTools(
        Settings(outbound_allowed_networks="127.0.0.0/8", mcp_max_response_bytes=4096),
        SecretBox(),
    )
    good = McpServer(label="o", url=tools.url).with_sealed_headers(json.dumps(BEARER))
    with pytest.raises(McpFailure) as failed:
        client.call(good, "huge", {"characters": 3000})
    assert failed.value.code == "mcp_response_too_large"
    assert client.call(good, "huge", {"characters": 10}) == "x" * 10


def test_a_server_gone_after_its_listing_is_a_tool_error(api: Api, core: AgentCore) -> None:
    errors = recorded(core, "agent.error")
    with serve_tools() as tools:
        agent_id = create_agent(api, server(tools.url, require_approval="never"))["id"]
        first = chat(api, {"agentId": agent_id, "message": "order 1"})
        assert first["response"] == "Tool said: Order 1 ships on Tuesday."
    # the listing is still reused, and the call finds nobody there
    body = chat(api, {"agentId": agent_id, "message": "order 2"})
    assert body["status"] == "completed"
    said = json.loads(body["response"].removeprefix("Tool said: "))
    assert said["code"] == "mcp_unreachable"
    assert [(e.data["error"], e.data["tool"]) for e in errors] == [
        ("mcp_unreachable", "order_status")
    ]


def test_the_webhook_allowlist_still_opens_a_network_to_mcp_servers(tools: ToolServer) -> None:
    older = Settings(webhook_allowed_networks="127.0.0.0/8")
    assert older.allowed_networks == ("127.0.0.0/8",)
    both = Settings(outbound_allowed_networks="10.0.0.0/8", webhook_allowed_networks="127.0.0.0/8")
    assert set(both.allowed_networks) == {"10.0.0.0/8", "127.0.0.0/8"}
    good = McpServer(label="o", url=tools.url).with_sealed_headers(json.dumps(BEARER))
    assert "order_status" in [t.name for t in McpTools(older, SecretBox()).tools("agt_1", good)]


def test_headers_stored_before_a_key_are_sealed_when_one_is_set(
    store_kind: str, store_url: str, tools: ToolServer
) -> None:
    if store_kind != "postgres":
        pytest.skip("a SQLite file is sealed by its key file from the start")
    import base64
    import os

    import psycopg

    first = open_core(store_url)  # PostgreSQL without webhook_secret_key: plaintext
    try:
        first.create_organization("acme")
        ws = first.workspace("acme", "test")
        agent = ws.agents.create(
            name="x", mcp_servers=[server(tools.url, require_approval="never")]
        )
    finally:
        first.close()

    def stored() -> str:
        with psycopg.connect(store_url) as conn:
            row = conn.execute("SELECT mcp_servers FROM agents WHERE id = %s", [agent.id])
            return str(json.loads(row.fetchone()[0])[0]["sealed_headers"])

    assert TOKEN in stored()
    key = base64.b64encode(os.urandom(32)).decode()
    second = open_core(store_url, webhook_secret_key=key)
    try:
        assert stored().startswith("enc:v1:") and TOKEN not in stored()
        ws = second.workspace("acme", "test")
        agent = ws.agents.get(agent.id)
        calls = McpTools(
            Settings(outbound_allowed_networks="127.0.0.0/8"), second.webhook_keys.box
        ).call(agent.mcp_servers[0], "order_status", {"order_id": "3"})
        assert calls == "Order 3 ships on Tuesday."
    finally:
        second.close()
