"""A real MCP server built with the official SDK (``MCPServer``), for agents whose tools
come from ``mcp_servers``: served on 127.0.0.1 by uvicorn, it wants a bearer token, and
records every call it runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from conftest import ServerThread
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN = "mcp-s3cret"
"""The bearer token the server wants (``headers={"Authorization": f"Bearer {TOKEN}"}``)."""


@dataclass
class ToolServer:
    """The running server: its MCP endpoint and what it saw."""

    url: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")


def _tools(seen: ToolServer) -> MCPServer:
    server: MCPServer = MCPServer("orders", log_level="WARNING")

    @server.tool()
    def order_status(order_id: str) -> str:
        """The delivery status of an order."""
        seen.calls.append(("order_status", {"order_id": order_id}))
        return f"Order {order_id} ships on Tuesday."

    @server.tool()
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        seen.calls.append(("cancel_order", {"order_id": order_id}))
        return f"Order {order_id} is cancelled."

    @server.tool()
    def slow(seconds: float) -> str:
        """Answer after ``seconds``."""
        seen.calls.append(("slow", {"seconds": seconds}))
        time.sleep(seconds)
        return "done"

    @server.tool()
    def huge(characters: int) -> str:
        """A result of ``characters`` characters."""
        seen.calls.append(("huge", {"characters": characters}))
        return "x" * characters

    @server.tool()
    def broken() -> str:
        """Always fails."""
        seen.calls.append(("broken", {}))
        raise RuntimeError("the warehouse is closed")

    return server


class _Bearer:
    """Refuses a request without the token (401), as a server behind an API key does;
    ``/garbage`` answers 200 with something that is not MCP."""

    def __init__(self, app: ASGIApp, seen: ToolServer) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if scope["path"].startswith("/garbage"):
            await Response("<html>hello</html>", media_type="text/html")(scope, receive, send)
            return
        authorization = request.headers.get("authorization")
        self.seen.authorizations.append(authorization)
        if authorization != f"Bearer {TOKEN}":
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


@contextmanager
def serve_tools() -> Iterator[ToolServer]:
    """The MCP tool server on a free port of 127.0.0.1 until the block ends."""
    seen = ToolServer(url="")
    # any Host: the tests reach it under made-up names their own resolver maps here
    anywhere = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = _tools(seen).streamable_http_app(
        stateless_http=True, json_response=True, transport_security=anywhere
    )
    with ServerThread(_Bearer(app, seen)) as thread:
        seen.url = f"{thread.url}/mcp"
        yield seen
