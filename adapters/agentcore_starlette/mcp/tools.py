"""The MCP tools of ``/v1/mcp``: each one is an operation of the REST API, called the
same way (its route's handler, scope and request model), so tenancy, scopes and
limits are those of REST by construction.

``search_knowledge`` is ``POST /v1/knowledge/search`` (same arguments), ``list_agents``
``GET /v1/agents``, ``chat_with_agent`` ``POST /v1/chat/message`` and ``ingest_document``
``POST /v1/knowledge/documents`` with ``{source, text}``. A key lists only the tools its
scopes allow (a read key does not see ``ingest_document``, and is refused if it calls
it anyway). A result carries its JSON as text and as structured content (described by
the tool's ``outputSchema``); a failure is a result with ``isError`` holding the same
problem document REST answers.

Built on the official SDK's low-level ``Server`` (``mcp.server.lowlevel``): the tool
list depends on the caller's key, which the high-level ``MCPServer`` cannot express.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field
from starlette.datastructures import Headers, QueryParams

from agentcore import Cancellation, Workspace, WorkspaceServices, __version__
from agentcore.adapters import get_logger
from agentcore.config import Settings
from agentcore.errors import AgentCoreError
from agentcore.schema import (
    MAX_TOOL_OUTPUTS,
    AgentStatus,
    ChatMessageRequest,
    EndUser,
    Request,
    SearchRequest,
    TextDocumentCreate,
    ToolApproval,
    ToolOutput,
)
from agentcore_starlette.bodies import validate
from agentcore_starlette.declared_limits import declare_limits
from agentcore_starlette.mcp.endpoint import WORKSPACE
from agentcore_starlette.problems import problem_body
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute, Call
from agentcore_starlette.settings import HttpSettings

log = get_logger("agentcore.mcp")  # masks keys and secrets in every record


class ListAgentsArguments(Request):
    """Arguments of ``list_agents``: the query parameters of ``GET /v1/agents``."""

    limit: int | None = Field(None, ge=1, description="Page size.")
    starting_after: str | None = Field(
        None, min_length=1, description="Id of the last agent of the previous page."
    )
    status: AgentStatus | None = Field(
        None, description="Only agents in this status (archived ones only this way)."
    )


class ChatWithAgentArguments(Request):
    """Arguments of ``chat_with_agent``."""

    agent_id: str = Field(..., min_length=1, max_length=100, description="The agent's id.")
    message: str | None = Field(
        None,
        min_length=1,
        description="The user's message (leave it out to resume a turn with `tool_outputs`"
        " or `approvals`).",
    )
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="Continue this conversation (the conversationId of an earlier answer).",
    )
    tool_outputs: list[ToolOutput] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOOL_OUTPUTS,
        description="An answer with status requires_action waits for these: the outputs of"
        " its `function` tool_calls, by tool_call_id (with its conversation_id).",
    )
    approvals: list[ToolApproval] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOOL_OUTPUTS,
        description="Decisions on its `approval` tool_calls: {tool_call_id, approve, reason}.",
    )
    user: EndUser | None = Field(
        None,
        description="Answer for this end user {id, groups}: only documents they may read.",
    )


def _as_query(args: BaseModel) -> tuple[None, QueryParams]:
    given = args.model_dump(exclude_none=True)
    return None, QueryParams([(name, str(value)) for name, value in given.items()])


def _as_body(args: BaseModel) -> tuple[BaseModel, QueryParams]:
    return args, QueryParams()


def _as_chat_message(args: BaseModel) -> tuple[BaseModel, QueryParams]:
    assert isinstance(args, ChatWithAgentArguments)
    given = {
        "agentId": args.agent_id,
        "message": args.message,
        "conversationId": args.conversation_id,
        "tool_outputs": args.tool_outputs,
        "approvals": args.approvals,
        "user": args.user,
    }
    body = ChatMessageRequest.model_validate(
        {name: value for name, value in given.items() if value is not None}
    )
    return body, QueryParams()


@dataclass(frozen=True)
class McpTool:
    """A tool: the REST operation it calls, its arguments, and how they become the
    operation's request (body, query)."""

    name: str
    title: str
    description: str
    operation: str
    """The operationId (handler name) of the route it calls."""
    arguments: type[Request]
    to_request: Callable[[BaseModel], tuple[BaseModel | None, QueryParams]]
    read_only: bool

    @functools.cached_property
    def route(self) -> ApiRoute:
        """The route this tool calls."""
        (route,) = [r for r in ROUTES if r.operation_id == self.operation]
        return route


TOOLS = (
    McpTool(
        name="search_knowledge",
        title="Search the knowledge core",
        description="Chunks of the workspace's documents ranked by cosine similarity to"
        " the query (or by BM25 with mode 'keyword', both fused with 'hybrid'), among the"
        " documents a metadata filter selects if one is given; each with its score,"
        " source document, pages, location (a slide, a sheet, a heading) and metadata.",
        operation="search_knowledge",
        # the route's own body: a field it gains (issue #22's filter and mode) is an
        # argument of the tool at once
        arguments=SearchRequest,
        to_request=_as_body,
        read_only=True,
    ),
    McpTool(
        name="list_agents",
        title="List agents",
        description="A page of the workspace's agents, newest first (id, name, role,"
        " status, system prompt, tools); `has_more` says whether another page follows"
        " (pass the last id as `starting_after`).",
        operation="list_agents",
        arguments=ListAgentsArguments,
        to_request=_as_query,
        read_only=True,
    ),
    McpTool(
        name="chat_with_agent",
        title="Ask an agent",
        description="Send a message to an agent; the answer comes with its citations (the"
        " source documents, pages and locations it used) and a conversationId to continue the"
        " conversation with.",
        operation="send_chat_message",
        arguments=ChatWithAgentArguments,
        to_request=_as_chat_message,
        read_only=False,
    ),
    McpTool(
        name="ingest_document",
        title="Add a document",
        description="Add a text or Markdown document (its source name and text) to the"
        " knowledge core; it is searchable once its status is `ready`.",
        operation="create_document",
        arguments=TextDocumentCreate,
        to_request=_as_body,
        read_only=False,
    ),
)
_BY_NAME = {tool.name: tool for tool in TOOLS}


def allowed(tool: McpTool, workspace: Workspace) -> bool:
    """Whether the key may call ``tool`` (and sees it listed): its route's scope, and
    for a client token, whether end users may call its route."""
    route = tool.route
    if workspace.client is not None and not route.end_users:
        return False
    return route.scope == "any" or route.scope in workspace.scopes


class McpTools:
    """The tools of one app: their schemas (declaring the core's limits, as the app's
    OpenAPI document does) and their calls, run on the app's handler threads.

    :param settings: the core's settings (the limits its services enforce).
    :param http: the app's HTTP settings (the request deadline).
    :param pool: the threads blocking work runs on (the REST handlers' ones).
    """

    def __init__(self, settings: Settings, http: HttpSettings, pool: Executor) -> None:
        self.pool = pool
        self.deadline = http.request_deadline
        self.listed: dict[str, types.Tool] = {}
        for tool in TOOLS:
            name = tool.arguments.__name__
            schema = tool.arguments.model_json_schema()
            declare_limits({name: schema}, {name}, settings)
            if tool.arguments is ChatWithAgentArguments:
                schema["properties"]["message"]["maxLength"] = settings.max_message_chars
            self.listed[tool.name] = types.Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=schema,
                output_schema=tool.route.response.model_json_schema(mode="serialization"),
                annotations=types.ToolAnnotations(
                    title=tool.title,
                    read_only_hint=tool.read_only,
                    destructive_hint=False,
                    open_world_hint=False,
                ),
            )

    def list_for(self, workspace: Workspace) -> list[types.Tool]:
        """The tools ``workspace``'s key may call."""
        return [self.listed[tool.name] for tool in TOOLS if allowed(tool, workspace)]

    async def call(
        self,
        workspace: WorkspaceServices,
        name: str,
        arguments: Mapping[str, Any],
        request_id: str | None = None,
    ) -> types.CallToolResult:
        """Run tool ``name`` for ``workspace``: its result, or an ``isError`` result
        holding the problem document (an unknown tool is a protocol error)."""
        tool = _BY_NAME.get(name)
        if tool is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name!r}.")
        work = functools.partial(self._run, tool, workspace, arguments)
        context = contextvars.copy_context()  # as run_in_threadpool: the work sees it
        try:
            result = await asyncio.get_running_loop().run_in_executor(self.pool, context.run, work)
        except AgentCoreError as error:
            return _failed(error, request_id)
        except Exception:  # as REST answers one: a 500 problem, the trace in the log only
            log.exception("unhandled error in MCP tool %s [%s]", name, request_id)
            return _failed(AgentCoreError("The server hit an unexpected error."), request_id)
        structured = result.model_dump(mode="json")
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(structured))],
            structured_content=structured,
        )

    def _run(
        self, tool: McpTool, workspace: WorkspaceServices, arguments: Mapping[str, Any]
    ) -> Any:
        """The tool's work, on a handler thread: as REST runs the route."""
        route = tool.route
        if route.scope != "any":
            workspace.require(route.scope, end_users=route.end_users)
        args = validate(tool.arguments, dict(arguments))
        body, query = tool.to_request(args)
        call = Call(
            workspace,
            {},
            query,
            Headers(),
            body=body,
            cancellation=Cancellation(timeout=self.deadline),
        )
        return route.handler(call)


def _failed(error: AgentCoreError, request_id: str | None) -> types.CallToolResult:
    """A tool error: the problem document as text and as structured content."""
    problem = problem_body(error, request_id)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(problem))],
        structured_content=problem,
        is_error=True,
    )


def caller(ctx: ServerRequestContext[Any, Any]) -> tuple[WorkspaceServices, str | None]:
    """The caller's workspace and the request's id, which ``McpEndpoint`` and
    ``ApiMiddleware`` put in the state of the HTTP request carrying the message."""
    request = ctx.request
    state = {} if request is None else request.scope.get("state", {})
    workspace = state.get(WORKSPACE)
    if not isinstance(workspace, WorkspaceServices):  # only reachable through McpEndpoint
        raise MCPError(code=types.INTERNAL_ERROR, message="The request was not authenticated.")
    return workspace, state.get("request_id")


def build_server(tools: McpTools) -> Server[Any]:
    """The SDK's low-level MCP server answering ``tools/list`` and ``tools/call``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        workspace, _ = caller(ctx)
        return types.ListToolsResult(tools=tools.list_for(workspace))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        workspace, request_id = caller(ctx)
        return await tools.call(workspace, params.name, params.arguments or {}, request_id)

    return Server(
        "agentcore",
        version=__version__,
        title="agentcore",
        instructions="Search this workspace's knowledge, list its agents, ask an agent"
        " (answers cite their sources), and, with a write key, add documents.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def session_manager(
    settings: Settings, http: HttpSettings, pool: Executor
) -> StreamableHTTPSessionManager:
    """The SDK's streamable-HTTP session manager serving the tools (``McpTools``):
    stateless (every request stands alone, authenticated by its own key) and answering
    JSON."""
    return StreamableHTTPSessionManager(
        build_server(McpTools(settings, http, pool)),
        stateless=True,
        json_response=True,
        max_request_body_size=http.max_body_bytes,
    )
