"""The agent registry: create, configure, deploy, undeploy and archive agents."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agentcore._ids import new_id, utcnow
from agentcore.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from agentcore.outbound import (
    MCP_HEADERS,
    AddressPolicy,
    Resolver,
    SecretBox,
    default_resolver,
    validate_url,
)
from agentcore.schema import (
    TOP_QUESTIONS,
    Agent,
    AgentCreate,
    AgentList,
    AgentStats,
    AgentStatus,
    AgentUpdate,
    McpServer,
    McpServerSpec,
    ToolDefinition,
)
from agentcore.workspace import CHAT_STATUSES

if TYPE_CHECKING:
    from agentcore.chat_models import ChatModel
    from agentcore.config import Settings
    from agentcore.storage.base import AgentStore
    from agentcore.workspace import Workspace

_Servers = list[McpServer]  # (a method of AgentService is named ``list``)

# (from, to) pairs that are allowed; anything else is a 409.
TRANSITIONS: dict[str, set[AgentStatus]] = {
    "deploy": {"draft"},
    "undeploy": {"deployed"},
    "archive": {"draft", "deployed"},
}
_TARGET: dict[str, AgentStatus] = {"deploy": "deployed", "undeploy": "draft", "archive": "archived"}


class AgentService:
    """Agents of one workspace; reached as ``workspace.agents``.

    :param workspace: whose agents, and the scopes the caller holds.
    :param store: where agents are kept.
    :param chat_models: the registered chat models, by name (an agent's ``model``
        must name one of them).
    :param settings: page-size limits, and the networks MCP servers may be on.
    :param secrets: seals MCP servers' headers for the store (the webhook secrets' box).
    :param resolver: how MCP servers' host names are looked up for the SSRF check.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: AgentStore,
        chat_models: Mapping[str, ChatModel],
        settings: Settings,
        secrets: SecretBox | None = None,
        resolver: Resolver = default_resolver,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._chat_models = chat_models
        self._settings = settings
        self._secrets = secrets or SecretBox()
        self._policy = AddressPolicy(settings.allowed_networks)
        self._resolver = resolver

    def create(self, spec: AgentCreate | None = None, **fields: object) -> Agent:
        """Create an agent in ``draft``. Write scope."""
        self._ws.require("write")
        spec = spec or AgentCreate.model_validate(fields)
        self._check_model(spec.model)
        _check_tool_names(spec.tools)
        servers = self._mcp_servers(spec.mcp_servers)
        now = utcnow()
        agent = Agent(
            id=new_id("agt"),
            status="draft",
            created_at=now,
            updated_at=now,
            **spec.model_dump(exclude={"mcp_servers"}),
            mcp_servers=servers,
        )
        self._store.insert_agent(self._ws.organization_id, self._ws.environment, agent)
        return agent

    def get(self, agent_id: str) -> Agent:
        """One agent of this workspace (archived ones too; a client token: only an agent
        it may chat with). Read scope."""
        ws = self._ws
        ws.require("read", end_users=True)
        agent = self._find(agent_id)
        if ws.client is not None:
            if not ws.client.allows_agent(agent_id):
                raise PermissionDenied(
                    "This client token may not use that agent.",
                    code="agent_not_allowed",
                    param="id",
                )
            if agent.status not in CHAT_STATUSES[ws.environment]:
                raise NotFound(f"No agent with id {agent_id!r}.", param="id")
        return agent

    def _find(self, agent_id: str) -> Agent:
        # no scope check: write operations look the agent up without needing 'read'
        agent = self._store.get_agent(self._ws.organization_id, self._ws.environment, agent_id)
        if agent is None:
            raise NotFound(f"No agent with id {agent_id!r}.", param="id")
        return agent

    def list(
        self,
        *,
        limit: int | None = None,
        starting_after: str | None = None,
        status: AgentStatus | None = None,
    ) -> AgentList:
        """A page of agents, newest first; archived ones only when asked for. Read scope.

        A client token lists only the agents it may chat with (those its key's
        environment chats with, and only its ``agents`` if it names some).
        """
        ws = self._ws
        ws.require("read", end_users=True)
        statuses: tuple[str, ...] = (status,) if status else ("draft", "deployed")
        if ws.client is not None:
            statuses = tuple(s for s in statuses if s in CHAT_STATUSES[ws.environment])
            if ws.client.agents is not None:
                return self._named(ws.client.agents, statuses, limit, starting_after)
        agents, more = self._store.list_agents(
            self._ws.organization_id,
            self._ws.environment,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
            statuses=statuses,
        )
        return AgentList(agents=agents, has_more=more)

    def _named(
        self,
        ids: Iterable[str],
        statuses: tuple[str, ...],
        limit: int | None,
        starting_after: str | None,
    ) -> AgentList:
        """A page of the agents ``ids`` names (a client token's, at most 64) in
        ``statuses``, newest first, paged as the store pages."""
        ws = self._ws
        found = [
            agent
            for agent_id in ids
            if (agent := self._store.get_agent(ws.organization_id, ws.environment, agent_id))
            and agent.status in statuses
        ]
        found.sort(key=lambda agent: (agent.created_at, agent.id), reverse=True)
        if starting_after is not None:
            at = next((n for n, agent in enumerate(found) if agent.id == starting_after), None)
            if at is None:
                raise NotFound(f"No agent with id {starting_after!r}.", param="starting_after")
            found = found[at + 1 :]
        size = self._settings.page_size(limit)
        return AgentList(agents=found[:size], has_more=len(found) > size)

    def stats(
        self,
        agent_id: str,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> AgentStats:
        """What the agent's conversations held from ``since`` (included) to ``until``
        (excluded), by the time of each message: conversations, messages, answers with
        and without citations, handoffs, ratings, the most asked and the unanswered
        questions, tokens (``AgentStats``). Read scope; not for a client token.

        ``since`` and ``until`` are times or ISO 8601 timestamps (without an offset:
        UTC; ``None``: no bound). A malformed one, or ``until`` before ``since``, is a
        422 naming it; another workspace's agent a 404.
        """
        ws = self._ws
        ws.require("read")
        self._find(agent_id)  # archived ones too: their conversations stay
        start, end = _moment(since, "since"), _moment(until, "until")
        if start is not None and end is not None and end < start:
            raise ValidationFailed("'until' must not be before 'since'.", param="until")
        return self._store.agent_stats(
            ws.organization_id,
            ws.environment,
            agent_id,
            since=start,
            until=end,
            top=TOP_QUESTIONS,
        )

    def update(self, agent_id: str, changes: AgentUpdate | None = None, **fields: object) -> Agent:
        """Change the fields given; an archived agent cannot change. Write scope."""
        self._ws.require("write")
        changes = changes or AgentUpdate.model_validate(fields)
        agent = self._find(agent_id)
        if agent.status == "archived":
            raise Conflict(
                "An archived agent cannot be changed.", code="agent_archived", param="id"
            )
        given = changes.model_dump(exclude_unset=True)
        self._check_model(given.get("model"))
        _check_tool_names(changes.tools or [])
        for required in (
            "name",
            "role",
            "system_prompt",
            "tools",
            "handoff_on_no_answer",
            "mcp_servers",
        ):
            if required in given and given[required] is None:
                raise ValidationFailed(f"'{required}' cannot be null.", param=required)
        for nested in ("tools", "knowledge", "mcp_servers"):
            given.pop(nested, None)
        if changes.mcp_servers is not None:
            given["mcp_servers"] = self._mcp_servers(changes.mcp_servers, agent.mcp_servers)
        updated = agent.model_copy(update={**given, "updated_at": utcnow()})
        # models, not the dicts model_dump made of them (model_copy does not validate)
        if changes.tools is not None:
            updated = updated.model_copy(update={"tools": changes.tools})
        if "knowledge" in changes.model_fields_set:
            updated = updated.model_copy(update={"knowledge": changes.knowledge})
        self._save(updated, agent.status, changes.model_fields_set)
        return self._find(agent_id)  # with what another request changed meanwhile

    def _save(self, agent: Agent, expected_status: AgentStatus, fields: Collection[str]) -> None:
        """Write ``fields`` of ``agent`` (only those: another request's change of the
        others stays), if its status is still ``expected_status``; else a 409."""
        ws = self._ws
        if not self._store.update_agent(
            ws.organization_id,
            ws.environment,
            agent,
            expected_status=expected_status,
            fields=fields,
        ):
            raise Conflict(
                "The agent changed while this request ran; retry.", code="concurrent_update"
            )

    def _mcp_servers(
        self, specs: Sequence[McpServerSpec], before: Sequence[McpServer] = ()
    ) -> _Servers:
        """The servers to store for ``specs``: labels unique, each URL past the SSRF
        guard, headers sealed (a server of the same label and URL given without
        ``headers`` keeps those stored in ``before``)."""
        stored = {server.label: server for server in before}
        servers: _Servers = []
        for number, spec in enumerate(specs):
            if any(server.label == spec.label for server in servers):
                raise Conflict(
                    f"Two MCP servers are labelled {spec.label!r}: an agent's labels are unique.",
                    code="duplicate_mcp_server_label",
                    param=f"mcp_servers.{number}.label",
                )
            url = validate_url(
                spec.url,
                environment=self._ws.environment,
                policy=self._policy,
                resolver=self._resolver,
                param=f"mcp_servers.{number}.url",
                subject="MCP server",
            )
            names: Sequence[str] = ()
            sealed = None
            _check_header_names(spec.headers or {}, number)
            if spec.headers:
                names = list(spec.headers)
                sealed = self._secrets.seal(json.dumps(spec.headers), MCP_HEADERS)
            elif spec.headers is None:
                # the same server as before: its secret headers stay (a GET shows no
                # values, so an update that resends what it read must not drop them);
                # never for another URL, where they would reach a server not meant for them
                old = stored.get(spec.label)
                if old is not None and old.url == url:
                    names, sealed = old.header_names, old.sealed_headers
            server = McpServer(
                label=spec.label,
                url=url,
                header_names=list(names),
                allowed_tools=spec.allowed_tools,
                require_approval=spec.require_approval,
            )
            servers.append(server.with_sealed_headers(sealed))
        return servers

    def _check_model(self, name: str | None) -> None:
        models = self._chat_models
        if name is not None and name not in models:
            known = ", ".join(sorted(models)) or "none"
            raise ValidationFailed(
                f"No chat model named {name!r} (available: {known}).",
                code="unknown_model",
                param="model",
            )

    def deploy(self, agent_id: str) -> Agent:
        """``draft`` → ``deployed``. Write scope."""
        return self._transition(agent_id, "deploy")

    def undeploy(self, agent_id: str) -> Agent:
        """``deployed`` → ``draft``. Write scope."""
        return self._transition(agent_id, "undeploy")

    def archive(self, agent_id: str) -> Agent:
        """Any → ``archived`` (terminal; hidden from lists by default). Write scope."""
        return self._transition(agent_id, "archive")

    def _transition(self, agent_id: str, action: str) -> Agent:
        self._ws.require("write")
        agent = self._find(agent_id)
        if agent.status not in TRANSITIONS[action]:
            raise Conflict(
                f"Cannot {action} an agent that is {agent.status}.",
                code="invalid_state_transition",
                param="status",
            )
        updated = agent.model_copy(update={"status": _TARGET[action], "updated_at": utcnow()})
        self._save(updated, agent.status, ["status"])
        return self._find(agent_id)


def _moment(value: datetime | str | None, param: str) -> datetime | None:
    """A bound of a stats window as an aware UTC time: an ISO 8601 timestamp or a
    ``datetime`` (without an offset: UTC; a date alone: its midnight), else a 422 naming
    ``param``. A time beyond what UTC datetimes hold (the year 1 at +01:00) is the
    first or last one they do."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.upper())  # RFC 3339 allows 't' and 'z'
        except ValueError:
            raise ValidationFailed(
                f"'{param}' must be an ISO 8601 timestamp, such as 2025-06-01T00:00:00Z.",
                param=param,
            ) from None
    if not isinstance(value, datetime):
        raise ValidationFailed(f"'{param}' must be a timestamp.", param=param)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return (datetime.min if value.year == 1 else datetime.max).replace(tzinfo=UTC)


def _check_tool_names(tools: Sequence[ToolDefinition]) -> None:
    """409 ``duplicate_tool_name`` naming the second tool of a name: an agent's tools are
    keyed by name (the model calls a tool by it), so a second one conflicts with the
    first, as a second object under a unique key does (the rule JSON Schema cannot
    state, so the OpenAPI document declares this 409)."""
    seen: set[str] = set()
    for number, tool in enumerate(tools):
        if tool.name in seen:
            raise Conflict(
                f"Two tools are named {tool.name!r}: an agent's tool names are unique.",
                code="duplicate_tool_name",
                param=f"tools.{number}.name",
            )
        seen.add(tool.name)


def _check_header_names(headers: Mapping[str, str], number: int) -> None:
    """409 ``duplicate_header_name``: HTTP header names are case-insensitive, so two that
    differ only in case name one header (a rule JSON Schema cannot state: declared 409)."""
    seen: set[str] = set()
    for name in headers:
        if name.lower() in seen:
            raise Conflict(
                f"The header {name!r} is given twice (header names are case-insensitive).",
                code="duplicate_header_name",
                param=f"mcp_servers.{number}.headers",
            )
        seen.add(name.lower())
