"""Tools on a remote MCP server over HTTP: an MCP tool call next to a tool a plugin runs.

Two agents on one ``agentcore`` server: a real ``uvicorn`` server (a subprocess,
loopback, no access log) on ``agentcore_starlette.create_app(core)`` over a SQLite file
in a temporary directory (``--postgres URL|throwaway``: a PostgreSQL store instead).
One agent has the tool ``clock``, which a plugin runs in the server
(``agentcore_run_tool`` returns ``"12:00"``); the other has no tools of its own but
``mcp_servers``: an MCP server built with the official SDK (``MCPServer``, stateless
streamable HTTP, JSON responses) in a second subprocess on loopback, behind a bearer
token (401 without it), with one tool, ``order_status``, called with
``require_approval: "never"``. The SSRF guard is on, with ``127.0.0.0/8`` allowed. The
chat model is scripted and trivially cheap (no retrieval hits, no text to generate), so
the figures are the server's own cost per turn:

- **plugin tool turn**: ``POST /v1/chat/message`` asking for the time; the model calls
  ``clock``, then answers from its result. One request.
- **MCP tool turn**: ``POST /v1/chat/message`` asking for the status of an order; the
  model calls ``order_status``, which agentcore calls on the MCP server with the SDK's
  client, then answers from its result. One request. Each call is a session of its own
  on new connections: with ``mcp`` 2.3 that is three POSTs (``initialize``,
  ``notifications/initialized``, ``tools/call``).
- **MCP tool: added**: per turn, MCP tool turn − plugin tool turn of the same turn
  (the p50 and p95 of those differences, not the difference of the percentiles).

Each turn starts a fresh conversation (no ``conversationId``) and runs one turn of each
kind, their order alternating from turn to turn so both meet the same machine load;
every answer is checked (the order number changes per turn, so each MCP answer comes
from a call). All requests go through one keep-alive ``httpx.Client``. Before the
warm-up, one turn of each kind is timed once: the first MCP turn of the process
imports the SDK and lists the server's tools (the listing is then reused for
``mcp_tools_ttl``), so it is shown apart as the cold turn. After ``--warmup`` turns,
``--turns`` are timed; the table shows p50 and p95 per row and each row's ratio to the
plugin tool turn (the headline: MCP tool turn / plugin tool turn). Last, the first turn
of each of a few new MCP agents is timed: a warm process that lists the tools again
(the listing is kept per agent). Rate limits are lifted.

Run: ``python benchmarks/mcp_tools.py [--turns 200] [--warmup 20]
[--postgres URL|throwaway] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from caller_tools import (
    ClockTool,
    chat,
    free_port,
    print_table,
    serve,
    stop_server,
    store,
    wait_for,
    write_results,
)

import agentcore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall

MODEL = "scripted"
TOKEN = "mcp-bench-s3cret"
"""The bearer token the MCP server wants."""
TIME_QUESTION = "What time is it?"
ORDER_QUESTION = "Status of order {}?"
LISTINGS = 5
"""New MCP agents whose first turn (a listing in a warm process) is timed at the end."""
ROWS = (
    ("plugin tool turn", "1"),
    ("MCP tool turn", "1"),
    ("MCP tool: added", "–"),
)


# the agentcore server's plugins ---------------------------------------------------------


class ScriptedModel:
    """Asked about an order, calls ``order_status`` if it is offered; else ``clock`` if
    that is offered; then answers from the tool's result."""

    name = MODEL

    def complete(self, request: ChatRequest) -> ChatResult:
        if request.steps:
            return ChatResult(text=f"Tool said: {request.steps[-1].result}")
        offered = {tool.name for tool in request.tools}
        order = re.search(r"order (\d+)", request.message)
        if order is not None and "order_status" in offered:
            call = ToolCall("call_o", "order_status", {"order_id": order.group(1)})
        elif "clock" in offered:
            call = ToolCall("call_c", "clock", {})
        else:
            return ChatResult(text="No tool for that.")
        return ChatResult(text="", tool_calls=[call])

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


# the agentcore server (``mcp_tools.py serve URL PORT``) -----------------------------------


def open_core(url: str) -> agentcore.AgentCore:
    return agentcore.AgentCore.open(
        url,
        plugins=[ScriptedModel(), ClockTool()],
        rate_limit_test=1e6,
        rate_limit_live=1e6,
        start_workers=False,
        outbound_allowed_networks="127.0.0.0/8",  # the SSRF guard lets it reach loopback
    )


# the MCP server (``mcp_tools.py tools PORT``) ---------------------------------------------


def serve_tools(port: int) -> None:
    """The official SDK's MCP server with one tool, behind a bearer token."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from starlette.responses import JSONResponse

    server = MCPServer("orders", log_level="WARNING")

    @server.tool()
    def order_status(order_id: str) -> str:
        """The delivery status of an order."""
        return f"Order {order_id} ships on Tuesday."

    mcp_app = server.streamable_http_app(stateless_http=True, json_response=True)
    wanted = f"Bearer {TOKEN}".encode()
    refused = JSONResponse({"error": "unauthorized"}, status_code=401)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        """Refuses a request without the token (401), as a server behind an API key does."""
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != wanted:
            await refused(scope, receive, send)
            return
        await mcp_app(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, access_log=False, log_level="warning")


# measuring --------------------------------------------------------------------------------


def create_agent(client: Any, body: dict[str, Any]) -> str:
    created = client.post("/v1/agents", json={"model": MODEL, **body})
    if created.status_code != 201:
        raise SystemExit(f"HTTP {created.status_code}: {created.text}")
    agent_id: str = created.json()["id"]
    return agent_id


def mcp_agent(client: Any, tools_port: int) -> str:
    server = {
        "label": "orders",
        "url": f"http://127.0.0.1:{tools_port}/mcp",
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "require_approval": "never",
    }
    return create_agent(client, {"name": "Orders", "mcp_servers": [server]})


def plugin_turn(client: Any, agent_id: str) -> float:
    """Milliseconds of one turn whose tool a plugin runs."""
    started = time.perf_counter()
    answer = chat(client, {"agentId": agent_id, "message": TIME_QUESTION})
    took = (time.perf_counter() - started) * 1000
    if answer.get("status") != "completed" or answer.get("response") != "Tool said: 12:00":
        raise SystemExit(f"unexpected plugin tool answer: {answer}")
    return took


def mcp_turn(client: Any, agent_id: str, order: int) -> float:
    """Milliseconds of one turn whose tool is on the MCP server."""
    started = time.perf_counter()
    answer = chat(client, {"agentId": agent_id, "message": ORDER_QUESTION.format(order)})
    took = (time.perf_counter() - started) * 1000
    expected = f"Tool said: Order {order} ships on Tuesday."
    if answer.get("status") != "completed" or answer.get("response") != expected:
        raise SystemExit(f"unexpected MCP tool answer: {answer}")
    return took


def measure(
    client: Any, clock_agent: str, orders_agent: str, turns: int, warmup: int
) -> dict[str, list[float]]:
    """Per row, the milliseconds of each timed turn (the warm-up turns are dropped)."""
    times: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    for turn in range(warmup + turns):
        if turn % 2 == 0:
            plugin = plugin_turn(client, clock_agent)
            remote = mcp_turn(client, orders_agent, turn + 1)
        else:
            remote = mcp_turn(client, orders_agent, turn + 1)
            plugin = plugin_turn(client, clock_agent)
        if turn < warmup:
            continue
        times["plugin tool turn"].append(plugin)
        times["MCP tool turn"].append(remote)
        times["MCP tool: added"].append(remote - plugin)
    return times


def check_refused(tools_port: int) -> None:
    """The MCP server really wants its token."""
    import httpx

    response = httpx.post(f"http://127.0.0.1:{tools_port}/mcp", json={}, timeout=30)
    if response.status_code != 401:
        raise SystemExit(f"the MCP server answered {response.status_code} without its token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="timed turns")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns first")
    parser.add_argument(
        "--postgres", default=None, help="a PostgreSQL URL, or 'throwaway' (default: SQLite)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.turns < 1 or args.warmup < 0:
        parser.error("--turns must be at least 1 and --warmup at least 0")

    import httpx

    # a kill (a time-out's SIGTERM) unwinds too, so the subprocesses are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with store(args.postgres) as url:
        organization = "acme" if args.postgres is None else f"acme-{uuid.uuid4().hex[:8]}"
        setup = open_core(url)
        setup.create_organization(organization)
        secret = setup.keys.create(organization, "test", ["read", "write"]).secret
        setup.close()

        port, tools_port = free_port(), free_port()
        me = str(Path(__file__).resolve())
        tools = subprocess.Popen([sys.executable, me, "tools", str(tools_port)])
        try:
            server = subprocess.Popen([sys.executable, me, "serve", url, str(port)])
            try:
                wait_for(tools_port, tools)
                wait_for(port, server)
                check_refused(tools_port)
                with httpx.Client(
                    base_url=f"http://127.0.0.1:{port}",
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=60,
                ) as client:
                    clock_agent = create_agent(
                        client, {"name": "Clock", "tools": [{"name": "clock"}]}
                    )
                    orders_agent = mcp_agent(client, tools_port)
                    cold_plugin = plugin_turn(client, clock_agent)
                    cold_mcp = mcp_turn(client, orders_agent, 0)
                    times = measure(client, clock_agent, orders_agent, args.turns, args.warmup)
                    listings = [
                        mcp_turn(client, mcp_agent(client, tools_port), 0) for _ in range(LISTINGS)
                    ]
            finally:
                stop_server(server)
        finally:
            stop_server(tools)

    p50, p95 = print_table(times, ROWS, args)
    base = "plugin tool turn"
    listing = statistics.median(listings)
    remote = "MCP tool turn"
    print(
        f"\nMCP tool turn / plugin tool turn: p50 {p50[remote] / p50[base]:.2f}×, "
        f"p95 {p95[remote] / p95[base]:.2f}×"
    )
    print(
        f"cold, before warm-up: first MCP tool turn {cold_mcp:.2f} ms (imports the MCP SDK "
        f"and lists the server's tools), first plugin tool turn {cold_plugin:.2f} ms"
    )
    print(
        f"first MCP tool turn of a new agent (lists the tools again, warm process), "
        f"median of {LISTINGS}: {listing:.2f} ms"
    )
    write_results(
        args,
        "mcp_tools",
        [(name, int(requests) if requests.isdigit() else requests) for name, requests in ROWS],
        p50,
        p95,
        cold_mcp_turn_ms=cold_mcp,
        cold_plugin_turn_ms=cold_plugin,
        new_agent_mcp_turn_ms=listings,
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), open_core)
    elif len(sys.argv) > 1 and sys.argv[1] == "tools":
        serve_tools(int(sys.argv[2]))
    else:
        main()
