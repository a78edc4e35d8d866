"""``/v1/mcp``: the Model Context Protocol over streamable HTTP, keyed like the REST API.

Every request is authenticated with the caller's Bearer key (401 without one), charged
to its rate limit and read within the body limits, as REST requests are (a refusal is a
JSON-RPC error holding the problem document, which MCP clients report); then the
official SDK's ``StreamableHTTPSessionManager`` answers it (stateless, JSON answers:
nothing of a client is kept between requests, so any node of a cluster can answer any
request, and a revoked key stops working at once). The tools are ``mcp.tools``.

The session manager runs a task group, which must live inside the app's lifespan
(``lifespan_for(core)``, also when the API is mounted in a host app): the lifespan
opens a task group for each endpoint of the core and starts the manager in it at once,
importing the SDK on a thread (about half a second), so the first MCP request after a
start does not wait for it. The lifespan's end stops it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import weakref
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from agentcore import AgentCore
from agentcore.adapters import get_logger
from agentcore.errors import NotFound, ServiceUnavailable
from agentcore_starlette.bodies import read_limited, refuse_lone_surrogates, require_json
from agentcore_starlette.credentials import identify, refuse_secrets_in_query
from agentcore_starlette.problems import RESPONDER, mcp_error_response
from agentcore_starlette.settings import HttpSettings

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = get_logger("agentcore.http")  # masks keys and secrets in every record

PATH = "/mcp"
METHODS = ["POST"]
"""Stateless, there is no session to end (DELETE) and nothing the server would send on
its own (a GET stream): both are a 405, as the MCP specification allows."""
WORKSPACE = "agentcore.workspace"
"""Key in ``scope["state"]`` of the caller's ``WorkspaceServices`` (what the tools act for)."""


class McpEndpoint:
    """The ASGI endpoint of ``/v1/mcp`` of one app.

    :param core: whose keys and rate limits the requests use, and whose tools they call.
    :param http: the app's HTTP settings (body limits, the request deadline).
    :param pool: the threads the tools' blocking work runs on (the REST handlers').
    """

    def __init__(self, core: AgentCore, http: HttpSettings, pool: Executor) -> None:
        self.core = core
        self.http = http
        self.pool = pool
        self.installed = importlib.util.find_spec("mcp") is not None
        self._group: anyio.abc.TaskGroup | None = None
        self._starting: anyio.Lock | None = None
        self._manager: StreamableHTTPSessionManager | None = None
        _ENDPOINTS.setdefault(core, weakref.WeakSet()).add(self)

    @property
    def serving(self) -> bool:
        """Whether the SDK's session manager runs now (soon after the lifespan starts)."""
        return self._manager is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While this runs, requests may start the SDK's session manager (in this task
        group); when it ends, the manager stops. An endpoint already running (the same
        core served by another server at once) is left to that one's lifespan."""
        if self._group is not None:
            yield
            return
        async with anyio.create_task_group() as group:
            self._group, self._starting = group, anyio.Lock()
            if self.installed:
                group.start_soon(self._start_ahead)
            try:
                yield
            finally:
                self._group = self._starting = self._manager = None
                group.cancel_scope.cancel()

    async def _start_ahead(self) -> None:
        """Start the session manager before the first MCP request asks for it; a failure
        is logged, and that request tries again (and reports what failed)."""
        try:
            await self._manager_now()
        except Exception:  # the app serves on; MCP requests get the error
            log.warning("the MCP endpoint did not start ahead of its requests", exc_info=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"][RESPONDER] = mcp_error_response  # what MCP clients can report
        request = Request(scope, receive)
        if scope["query_string"]:
            refuse_secrets_in_query(request)
        workspace, limits = identify(self.core, request, "any", end_users=True)
        if not self.installed:
            raise NotFound(
                "The MCP endpoint needs the official MCP SDK, which the server extra brings: "
                "pip install 'agentcore-service[server]'.",
                code="mcp_not_installed",
            )
        receive = await self._read_body(request)
        scope["state"][WORKSPACE] = workspace
        manager = await self._manager_now()
        extra = [(name.lower().encode(), value.encode()) for name, value in limits.items()]

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await manager.handle_request(scope, receive, send_with_limits)

    async def _read_body(self, request: Request) -> Receive:
        """Read the JSON body as REST reads one: 415 for another media type, 413 past
        ``max_body_bytes``, 408 when it stalls (``body_timeout``) or comes too slowly
        (``body_deadline``), 422 naming the field for a string with a lone surrogate;
        then hand it to the SDK as it had come."""
        require_json(request)
        http = self.http
        body = await read_limited(
            request, http.max_body_bytes, timeout=http.body_timeout, deadline=http.body_deadline
        )
        refuse_lone_surrogates(body)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await request.receive()  # the disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    async def _manager_now(self) -> StreamableHTTPSessionManager:
        """The running session manager, started in the lifespan's task group first."""
        manager = self._manager
        if manager is not None:
            return manager
        group, starting = self._group, self._starting
        if group is None or starting is None:
            raise ServiceUnavailable(
                "The MCP endpoint is not running: serve the app with its lifespan. A host"
                " that mounts the API passes lifespan_for(core) as its own lifespan.",
                code="mcp_not_started",
            )
        async with starting:
            if self._manager is None:
                self._manager = await group.start(self._serve)
            return self._manager

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        """Run the session manager until the lifespan ends."""
        # the SDK's import takes about half a second: on a thread, so other requests go on
        tools = await anyio.to_thread.run_sync(
            importlib.import_module, "agentcore_starlette.mcp.tools"
        )
        manager = tools.session_manager(self.core.settings, self.http, self.pool)
        async with manager.run():
            task_status.started(manager)
            await anyio.sleep_forever()


_ENDPOINTS: weakref.WeakKeyDictionary[AgentCore, weakref.WeakSet[McpEndpoint]] = (
    weakref.WeakKeyDictionary()
)
"""The MCP endpoints of each core's apps. A mounted app gets no lifespan events: its
host runs ``lifespan_for(core)``, which knows only the core, and finds them here."""


@contextlib.asynccontextmanager
async def endpoints_running(core: AgentCore) -> AsyncIterator[None]:
    """Run the MCP endpoints of every app made for ``core`` (``McpEndpoint.running``)."""
    async with contextlib.AsyncExitStack() as stack:
        for endpoint in list(_ENDPOINTS.get(core, ())):
            await stack.enter_async_context(endpoint.running())
        yield
