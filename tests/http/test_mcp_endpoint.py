"""/v1/mcp through the official MCP SDK's streamable-HTTP client, as an agent tool would
use it: listing tools per key, calling each, refusals, tenant isolation, and the
endpoint's lifecycle, over a real uvicorn server (alone and mounted in FastAPI) on both
stores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from conftest import Keys, ServerThread
from helpers import wait_for, where_cited
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

import agentcore
from agentcore import AgentCore
from agentcore_starlette import HttpSettings, create_app

T = TypeVar("T")


@contextlib.asynccontextmanager
async def session(url: str, key: str | None) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session (the 2025 handshake) sending ``key``."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def run(url: str, key: str | None, work: Callable[[ClientSession], Awaitable[T]]) -> T:
    async def go() -> T:
        async with session(url, key) as client:
            return await work(client)

    return asyncio.run(go())


def refusal(url: str, key: str | None, work: Callable[[ClientSession], Awaitable[Any]]) -> MCPError:
    """The error an MCP client raises for a request the endpoint refuses."""
    with pytest.raises(BaseException) as raised:  # the SDK's task groups wrap it
        run(url, key, work)
    error: BaseException = raised.value
    while isinstance(error, BaseExceptionGroup):
        (error,) = error.exceptions
    assert isinstance(error, MCPError), repr(error)
    return error


@pytest.fixture
def mcp_url(served_v1: str) -> str:
    return served_v1 + "/mcp"


@pytest.fixture
def agent(handbook_agent: str) -> str:
    return handbook_agent


def test_each_key_lists_the_tools_its_scopes_allow(
    mcp_url: str, keys: Keys, core: AgentCore
) -> None:
    reader = keys.make(scopes=("read",)).secret
    writer = keys.make().secret
    listed = run(mcp_url, reader, lambda c: c.list_tools())
    assert [t.name for t in listed.tools] == ["search_knowledge", "list_agents", "chat_with_agent"]
    tools = {t.name: t for t in run(mcp_url, writer, lambda c: c.list_tools()).tools}
    assert list(tools) == ["search_knowledge", "list_agents", "chat_with_agent", "ingest_document"]
    search = tools["search_knowledge"]
    assert set(search.input_schema["properties"]) >= {"query", "top_k", "min_score"}
    top_k = next(b for b in search.input_schema["properties"]["top_k"]["anyOf"] if "maximum" in b)
    assert top_k["maximum"] == core.settings.max_top_k  # the limit the core enforces
    assert search.annotations is not None and search.annotations.read_only_hint is True
    chat = tools["chat_with_agent"]
    assert chat.input_schema["required"] == ["agent_id"]  # or tool_outputs, approvals
    assert (
        chat.input_schema["properties"]["message"]["maxLength"] == core.settings.max_message_chars
    )
    assert all(tool.output_schema for tool in tools.values())


def test_each_tool_answers_with_text_and_structured_content(
    mcp_url: str, keys: Keys, agent: str
) -> None:
    writer = keys.make().secret

    async def work(client: ClientSession) -> dict[str, Any]:
        results = {
            "search": await client.call_tool(
                "search_knowledge", {"query": "vacation days", "top_k": 2}
            ),
            "agents": await client.call_tool("list_agents", {"limit": 5}),
            "chat": await client.call_tool(
                "chat_with_agent", {"agent_id": agent, "message": "How many vacation days?"}
            ),
            "ingest": await client.call_tool(
                "ingest_document",
                {
                    "source": "parking.md",
                    "text": "Visitors park on level 2.",
                    "metadata": {"site": "hq"},
                },
            ),
        }
        conversation = results["chat"].structured_content["conversationId"]
        results["again"] = await client.call_tool(
            "chat_with_agent",
            {"agent_id": agent, "message": "When do they expire?", "conversation_id": conversation},
        )
        results["found"] = await client.call_tool("search_knowledge", {"query": "visitors park"})
        site = {"type": "eq", "key": "site", "value": "hq"}
        results["scoped"] = await client.call_tool(
            "search_knowledge", {"query": "level 2", "mode": "hybrid", "filter": site}
        )
        return results

    results = run(mcp_url, writer, work)
    for result in results.values():
        assert not result.is_error, result
        (text,) = result.content
        assert json.loads(text.text) == result.structured_content  # the same JSON twice
    search = results["search"].structured_content
    assert search["results"][0]["source"] == "handbook.pdf" and 2 in search["results"][0]["pages"]
    assert [a["id"] for a in results["agents"].structured_content["agents"]] == [agent]
    chat = results["chat"].structured_content
    assert "25 vacation days" in chat["response"]
    assert where_cited(chat["citations"]) == [{"source": "handbook.pdf", "pages": [2]}]
    assert results["again"].structured_content["conversationId"] == chat["conversationId"]
    assert results["ingest"].structured_content["status"] == "ready"
    assert results["found"].structured_content["results"][0]["source"] == "parking.md"
    scoped = results["scoped"].structured_content  # the search body's filter and mode
    assert scoped["mode"] == "hybrid"
    assert [(r["source"], r["metadata"]) for r in scoped["results"]] == [
        ("parking.md", {"site": "hq"})
    ]


def test_a_read_key_calling_ingest_is_refused(mcp_url: str, keys: Keys, core: AgentCore) -> None:
    reader = keys.make(scopes=("read",)).secret
    result = run(
        mcp_url,
        reader,
        lambda c: c.call_tool("ingest_document", {"source": "x.md", "text": "Nothing."}),
    )
    assert result.is_error
    assert result.structured_content["code"] == "insufficient_scope"
    assert result.structured_content["status"] == 403
    assert result.structured_content["request_id"].startswith("req_")
    assert core.workspace("acme", "test").knowledge.list().documents == []


def test_bad_arguments_and_unknown_objects_are_tool_errors(
    mcp_url: str, keys: Keys, agent: str, core: AgentCore
) -> None:
    reader = keys.make(scopes=("read",)).secret

    async def work(client: ClientSession) -> list[Any]:
        return [
            await client.call_tool(
                "search_knowledge", {"query": "x", "top_k": core.settings.max_top_k + 1}
            ),
            await client.call_tool("search_knowledge", {"query": "x", "filter": "nope"}),
            await client.call_tool("chat_with_agent", {"agent_id": "agt_missing", "message": "hi"}),
            await client.call_tool("list_agents", {"status": "retired"}),
        ]

    results = run(mcp_url, reader, work)
    assert all(result.is_error for result in results)
    codes = [(r.structured_content["status"], r.structured_content["param"]) for r in results]
    assert codes == [(422, "top_k"), (422, "filter"), (404, "agentId"), (422, "status")]
    unknown = refusal(mcp_url, reader, lambda c: c.call_tool("drop_tables", {}))
    assert "Unknown tool" in unknown.error.message


def test_another_tenant_sees_nothing_of_this_one(mcp_url: str, keys: Keys, agent: str) -> None:
    other = keys.make(org="globex").secret

    async def work(client: ClientSession) -> list[Any]:
        return [
            await client.call_tool("list_agents", {}),
            await client.call_tool("search_knowledge", {"query": "vacation days"}),
            await client.call_tool("chat_with_agent", {"agent_id": agent, "message": "Hi"}),
        ]

    agents, search, chat = run(mcp_url, other, work)
    assert agents.structured_content["agents"] == []
    assert search.structured_content["results"] == []
    assert chat.is_error and chat.structured_content["status"] == 404
    live = keys.make(env="live").secret  # the same tenant's other environment
    assert (
        run(mcp_url, live, lambda c: c.call_tool("list_agents", {})).structured_content["agents"]
        == []
    )


def test_without_a_valid_key_the_client_reports_401(mcp_url: str, keys: Keys) -> None:
    missing = refusal(mcp_url, None, lambda c: c.list_tools())
    assert missing.error.data["code"] == "missing_api_key" and missing.error.data["status"] == 401
    assert "Authorization: Bearer" in missing.error.message
    wrong = refusal(mcp_url, keys.make().secret[:-2] + "xx", lambda c: c.list_tools())
    assert wrong.error.data["status"] == 401
    raw = httpx.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert raw.status_code == 401 and raw.headers["www-authenticate"].startswith("Bearer")
    assert raw.json()["error"]["data"]["code"] == "missing_api_key"


def test_a_revoked_key_stops_at_once(mcp_url: str, core: AgentCore, keys: Keys) -> None:
    issued = keys.make()

    async def work(client: ClientSession) -> None:
        await client.list_tools()
        core.keys.revoke(issued.id)
        await client.list_tools()  # stateless: every request shows its key again

    assert refusal(mcp_url, issued.secret, work).error.data["status"] == 401


def test_the_2026_client_works_too(mcp_url: str, keys: Keys, agent: str) -> None:
    """``mcp.Client`` negotiates the newest protocol (server/discover, no handshake)."""

    async def go() -> Any:
        headers = {"Authorization": f"Bearer {keys.make().secret}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(mcp_url, http_client=http)) as client,
        ):
            names = [tool.name for tool in (await client.list_tools()).tools]
            answer = await client.call_tool(
                "chat_with_agent", {"agent_id": agent, "message": "Vacation days?"}
            )
            return names, answer

    names, answer = asyncio.run(go())
    assert "ingest_document" in names
    assert where_cited(answer.structured_content["citations"]) == [
        {"source": "handbook.pdf", "pages": [2]}
    ]


def test_limits_of_rest_apply(mcp_url: str, core: AgentCore, keys: Keys) -> None:
    from agentcore._rate_limits import RateLimiter

    auth = {"Authorization": f"Bearer {keys.make().secret}"}
    big = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ping",
        "params": {"pad": "x" * HttpSettings.of(core.settings).max_body_bytes},
    }
    too_large = httpx.post(mcp_url, json=big, headers=auth)
    assert too_large.status_code == 413
    assert too_large.json()["error"]["data"]["code"] == "body_too_large"
    slow = {"rate_limit_test": 0.01, "rate_limit_backend": "local"}
    core.rate_limiter = RateLimiter(core.settings.model_copy(update=slow))
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {**auth, "Accept": "application/json, text/event-stream"}
    first = httpx.post(mcp_url, json=ping, headers=accept)
    assert first.status_code == 200 and "ratelimit" in first.headers
    limited = httpx.post(mcp_url, json=ping, headers=accept)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["data"]["code"] == "rate_limited"


def test_only_post_is_served(mcp_url: str, keys: Keys) -> None:
    auth = {"Authorization": f"Bearer {keys.make().secret}"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, mcp_url, headers=auth)
        assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_a_setting_turns_the_endpoint_off(core: AgentCore, keys: Keys) -> None:
    key = keys.make().secret
    app = create_app(core, mcp_enabled=False)
    with ServerThread(app) as server:
        response = httpx.post(
            server.url + "/v1/mcp",
            headers={"Authorization": f"Bearer {key}"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
        assert response.status_code == 404 and response.json()["code"] == "route_not_found"
        paths = httpx.get(server.url + "/v1/openapi.json").json()["paths"]
        assert "/v1/mcp" not in paths and "/v1/chat/completions" in paths


def test_a_host_without_the_lifespan_is_told_so(core: AgentCore, keys: Keys) -> None:
    from fastapi import FastAPI

    host = FastAPI()  # mounted without lifespan_for(core): nothing runs the endpoint
    host.mount("/api", create_app(core))
    with ServerThread(host) as server:
        error = refusal(server.url + "/api/v1/mcp", keys.make().secret, lambda c: c.list_tools())
    assert error.error.data["code"] == "mcp_not_started" and error.error.data["status"] == 503


def test_the_endpoint_runs_again_after_a_restart(core: AgentCore, keys: Keys) -> None:
    """Each lifespan runs a session manager of its own (the SDK's runs only once), started
    with the lifespan, before any MCP request asks for it."""
    key = keys.make().secret
    app = create_app(core)
    for _ in range(2):
        with ServerThread(app) as server:
            wait_for(lambda: app.state.mcp.serving)  # nobody has asked over MCP yet
            listed = run(server.url + "/v1/mcp", key, lambda c: c.list_tools())
            assert len(listed.tools) == 4 and app.state.mcp.serving
        assert not app.state.mcp.serving  # stopped with the lifespan


def test_a_manager_that_fails_to_start_ahead_starts_at_the_first_request(
    core: AgentCore, keys: Keys, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agentcore_starlette.mcp.endpoint import McpEndpoint

    serve = McpEndpoint._serve
    failed: list[bool] = []

    async def once_broken(self: McpEndpoint, *, task_status: Any) -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("the disk went away mid-import")
        await serve(self, task_status=task_status)

    monkeypatch.setattr(McpEndpoint, "_serve", once_broken)
    app = create_app(core)
    with caplog.at_level(logging.WARNING, logger="agentcore.http"), ServerThread(app) as server:
        wait_for(lambda: failed and "did not start ahead" in caplog.text)
        assert not app.state.mcp.serving  # the app serves on
        listed = run(server.url + "/v1/mcp", keys.make().secret, lambda c: c.list_tools())
        assert len(listed.tools) == 4 and app.state.mcp.serving


class BrokenQueries:
    """An embedder plugin that embeds passages but fails on every query, as a plugin
    with a bug would (a plain exception, not an agentcore error)."""

    name = "broken-queries"
    dimension = 1024

    def __init__(self) -> None:
        from agentcore.plugins.hashing_embedder import HashingEmbedder

        self.inner = HashingEmbedder()

    def embed(self, texts: Any, kind: str = "passage") -> Any:
        if kind != "passage":
            raise RuntimeError("the plugin broke")
        return self.inner.embed(texts, kind="passage")

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)


def test_an_unexpected_failure_is_a_500_tool_error_logged_with_its_request_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = BrokenQueries()
    core = AgentCore.open(tmp_path / "b.db", embedder=plugin.name, plugins=[plugin])
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read"]).secret
    core.workspace("acme", "test").knowledge.ingest_text("a.txt", "Vacation is 25 days.")
    try:
        with ServerThread(create_app(core)) as server:
            result = run(
                server.url + "/v1/mcp",
                key,
                lambda c: c.call_tool("search_knowledge", {"query": "vacation"}),
            )
    finally:
        core.close()
    problem = result.structured_content
    assert result.is_error and problem["status"] == 500 and problem["code"] == "internal_error"
    assert "the plugin broke" not in json.dumps(problem)  # no internals in the answer
    logged = [r for r in caplog.records if r.name == "agentcore.mcp"]
    assert logged and problem["request_id"] in logged[0].getMessage()
    assert logged[0].exc_info is not None


def test_without_the_sdk_the_endpoint_says_how_to_install_it(core: AgentCore, keys: Keys) -> None:
    app = create_app(core)
    app.state.mcp.installed = False  # what find_spec says where the mcp extra is missing
    with ServerThread(app) as server:
        error = refusal(server.url + "/v1/mcp", keys.make().secret, lambda c: c.list_tools())
    assert error.error.data["code"] == "mcp_not_installed" and error.error.data["status"] == 404
    assert "pip install 'agentcore-service[server]'" in error.error.message
