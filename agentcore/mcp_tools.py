"""Tools on remote MCP servers: an agent's ``mcp_servers``, listed and called with the
official MCP SDK over streamable HTTP.

Every exchange (a listing, or one call) opens a session, does its one thing and closes
it, behind the SSRF guard (checked on each connection, with the one outbound allowlist),
within ``Settings.mcp_timeout`` and ``Settings.mcp_max_response_bytes``. A server's tool
list is reused for ``Settings.mcp_tools_ttl`` seconds, keyed by the server's settings so
that a changed server is listed again at once. Whatever goes wrong (the server is down,
refuses the headers, is too slow, answers garbage or too much) is an
:class:`McpFailure` with a short code, never an exception of the SDK's: the turn tells
the model and announces an ``agent.error``.

The SDK is imported only when an agent has servers: the server extra brings it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentcore._logs import get_logger
from agentcore.outbound import (
    MCP_HEADERS,
    AddressPolicy,
    Resolver,
    SecretBox,
    default_resolver,
)
from agentcore.schema import McpServer

if TYPE_CHECKING:
    from mcp import ClientSession

    from agentcore.config import Settings

log = get_logger(__name__)

T = TypeVar("T")

# a model calls tools by names of this shape (OpenAI's rule); other tools are not offered
_OFFERED_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS_PER_SERVER = 128
"""The most tools of one server offered to the model (the first ones it lists)."""
MAX_SCHEMA_CHARS = 16_384
"""The longest input schema (JSON) of a tool that is offered."""
_LISTINGS_KEPT = 256
_FAILURE_KEPT = 30.0  # seconds a failed listing is reused (a hung server costs one time-out)


@dataclass(frozen=True)
class RemoteTool:
    """A tool of an MCP server, as offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    server: str
    """The label of its server in the agent."""


class McpFailure(Exception):
    """An exchange with an MCP server failed.

    :param code: ``mcp_unreachable``, ``mcp_url_not_allowed``, ``mcp_unauthorized``,
        ``mcp_timeout``, ``mcp_response_too_large``, ``mcp_result_too_long``,
        ``mcp_error`` (the server answered with an MCP error), ``mcp_bad_response``
        or ``mcp_not_installed``.
    :param detail: what happened, for the model and the workspace's subscribers (it
        never holds the server's headers).
    """

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class McpTools:
    """Lists and calls the tools of agents' MCP servers; one per core, shared by its
    turns (thread-safe).

    :param settings: ``mcp_timeout``, ``mcp_tools_ttl``, ``mcp_max_response_bytes``,
        ``max_tool_output_chars`` and the outbound allowlist.
    :param secrets: opens the servers' sealed headers.
    :param resolver: how host names are looked up for the SSRF guard.
    :param clock: seconds, for the listings' time to live.
    """

    def __init__(
        self,
        settings: Settings,
        secrets: SecretBox,
        *,
        resolver: Resolver = default_resolver,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._timeout = settings.mcp_timeout
        self._ttl = settings.mcp_tools_ttl
        self._max_bytes = settings.mcp_max_response_bytes
        self._max_chars = settings.max_tool_output_chars
        self._policy = AddressPolicy(settings.allowed_networks)
        self._secrets = secrets
        self._resolver = resolver
        self._clock = clock
        self._ssl: Any = None  # made on first use: loading the CAs takes a while
        self._listings: OrderedDict[tuple[Any, ...], tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def tools(self, agent_id: str, server: McpServer) -> list[RemoteTool]:
        """The tools ``server`` offers the agent: those ``allowed_tools`` names (all
        without it) whose names a model can call, the first ``MAX_TOOLS_PER_SERVER``.

        :raises McpFailure: the server could not be listed (reused for a while).
        """
        key = (
            agent_id,
            server.label,
            server.url,
            server.sealed_headers,
            None if server.allowed_tools is None else tuple(server.allowed_tools),
        )
        now = self._clock()
        with self._lock:
            kept = self._listings.get(key)
            if kept is not None and kept[0] > now:
                self._listings.move_to_end(key)
                listing = kept[1]
                if isinstance(listing, McpFailure):
                    raise listing
                return list(listing)
        try:
            listing = self._exchange(server, self._list)
        except McpFailure as failure:
            self._keep(key, now + min(self._ttl, _FAILURE_KEPT), failure)
            raise
        tools = list(_offered(listing, server))
        self._keep(key, now + self._ttl, tools)
        return list(tools)

    def call(self, server: McpServer, name: str, arguments: dict[str, Any]) -> str:
        """Call the tool ``name`` on ``server``: its result as text for the model (a
        result the tool itself marks as an error is ``{"error": ...}``).

        :raises McpFailure: the call did not get a usable result.
        """

        async def work(session: ClientSession) -> str:
            from mcp import types

            # the request itself, not ``call_tool``: that one lists the server's tools
            # again in a new session to check structured results, which only the text
            # of reaches the model (a round trip more per call)
            request = types.CallToolRequest(
                params=types.CallToolRequestParams(name=name, arguments=arguments)
            )
            result = await session.send_request(request, types.CallToolResult)
            return _result_text(result)

        text = self._exchange(server, work)
        if len(text) > self._max_chars:
            raise McpFailure(
                "mcp_result_too_long",
                f"the tool's result is {len(text)} characters; at most {self._max_chars}",
            )
        return text

    def _keep(self, key: tuple[Any, ...], until: float, listing: Any) -> None:
        with self._lock:
            self._listings[key] = (until, listing)
            self._listings.move_to_end(key)
            while len(self._listings) > _LISTINGS_KEPT:
                self._listings.popitem(last=False)

    @staticmethod
    async def _list(session: ClientSession) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        while len(tools) < MAX_TOOLS_PER_SERVER * 4:  # a server that pages for ever
            from mcp.types import PaginatedRequestParams

            params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _exchange(self, server: McpServer, work: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Open a session with ``server``, do ``work`` in it, close it: bounded in time
        and bytes, every failure an :class:`McpFailure`."""
        headers = {}
        if server.sealed_headers:
            headers = json.loads(self._secrets.open(server.sealed_headers, MCP_HEADERS))
        statuses: list[int] = []  # the HTTP errors it answered (the SDK keeps no status)
        try:
            done: T = _run(self._session, server.url, headers, statuses, work)
            return done
        except McpFailure:
            raise
        except BaseException as error:  # the SDK's task groups wrap what failed
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            failure = _failure(error, statuses)
            log.info("mcp server %s failed: %s (%s)", server.label, failure.code, failure.detail)
            raise failure from None

    async def _session(
        self,
        url: str,
        headers: dict[str, str],
        statuses: list[int],
        work: Callable[[ClientSession], Awaitable[T]],
    ) -> T:
        try:
            import anyio
            import httpx2
            from mcp import ClientSession
            from mcp.client.streamable_http import streamable_http_client

            from agentcore.outbound.async_guard import AsyncGuardedTransport
        except ImportError:
            raise McpFailure(
                "mcp_not_installed",
                "the MCP SDK is not installed here (pip install 'agentcore-service[server]')",
            ) from None
        if self._ssl is None:
            self._ssl = httpx2.create_ssl_context(trust_env=False)
        transport = AsyncGuardedTransport(
            self._policy, max_bytes=self._max_bytes, resolver=self._resolver, ssl_context=self._ssl
        )

        async def note(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                statuses.append(response.status_code)

        with anyio.fail_after(self._timeout):
            async with (
                httpx2.AsyncClient(
                    transport=transport,
                    trust_env=False,
                    headers=headers,
                    timeout=self._timeout,
                    event_hooks={"response": [note]},
                ) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write, read_timeout_seconds=self._timeout) as session,
            ):
                await session.initialize()
                return await work(session)


def _offered(tools: list[Any], server: McpServer) -> Iterator[RemoteTool]:
    allowed = None if server.allowed_tools is None else set(server.allowed_tools)
    offered = 0
    for tool in tools:
        if allowed is not None and tool.name not in allowed:
            continue
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
        if (
            not _OFFERED_NAME.match(tool.name)
            or schema.get("type") != "object"
            or len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS
        ):
            log.info("mcp server %s: tool %r is not offered", server.label, tool.name[:128])
            continue
        if offered == MAX_TOOLS_PER_SERVER:
            log.info("mcp server %s: more than %d tools", server.label, MAX_TOOLS_PER_SERVER)
            return
        offered += 1
        yield RemoteTool(
            name=tool.name,
            description=(tool.description or "")[:1024],
            parameters=schema,
            server=server.label,
        )


def _result_text(result: Any) -> str:
    """A tool call's result as the text the model reads."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str))
    text = "\n".join(parts)
    return json.dumps({"error": text}) if result.is_error else text


def _failure(error: BaseException, statuses: list[int]) -> McpFailure:
    """What went wrong, from what the SDK and httpx2 raised (groups are looked into)
    and the HTTP error statuses the server answered."""
    import httpx2
    from mcp import MCPError

    causes = list(_leaves(error))
    for cause in causes:
        if isinstance(cause, McpFailure):
            return cause
    refused = [status for status in statuses if status in (401, 403)]
    if refused:
        return McpFailure("mcp_unauthorized", f"the MCP server refused access ({refused[0]})")
    for cause in causes:
        text = str(cause)[:300] or type(cause).__name__
        if isinstance(cause, TimeoutError | httpx2.TimeoutException):
            return McpFailure("mcp_timeout", "the MCP server did not answer in time")
        if isinstance(cause, httpx2.HTTPStatusError):
            status = cause.response.status_code
            if status in (401, 403):
                return McpFailure("mcp_unauthorized", f"the MCP server refused access ({status})")
            return McpFailure("mcp_bad_response", f"the MCP server answered HTTP {status}")
        if isinstance(cause, httpx2.ConnectError) and "SSRF guard" in text:
            return McpFailure("mcp_url_not_allowed", text)
        if isinstance(cause, httpx2.ReadError) and "sent more than" in text:
            return McpFailure("mcp_response_too_large", text)
        if isinstance(cause, httpx2.TransportError):
            return McpFailure("mcp_unreachable", f"cannot reach the MCP server: {text}")
        if isinstance(cause, MCPError):
            if statuses:
                return McpFailure(
                    "mcp_bad_response", f"the MCP server answered HTTP {statuses[0]}: {text}"
                )
            if text.startswith("Unexpected content type"):
                return McpFailure("mcp_bad_response", f"the server does not speak MCP: {text}")
            return McpFailure("mcp_error", f"the MCP server answered an error: {text}")
    first = causes[0] if causes else error
    return McpFailure(
        "mcp_bad_response", f"the MCP server's answer is not usable ({type(first).__name__})"
    )


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
        return
    yield error
    if error.__cause__ is not None:
        yield from _leaves(error.__cause__)


def _run(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``fn(*args)`` on an event loop of its own: this thread's, or a new thread's when
    this one already runs a loop (the Python API called from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn(*args))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(fn(*args))).result()


__all__ = ["MAX_TOOLS_PER_SERVER", "McpFailure", "McpTools", "RemoteTool"]
