"""Routes: /v1/agents — list, create, get, update, archive, deploy, undeploy; stats."""

from __future__ import annotations

from typing import cast

from agentcore.schema import Agent, AgentCreate, AgentList, AgentStats, AgentStatus, AgentUpdate
from agentcore_starlette.routing import PAGINATION, ApiRoute, Call, QueryParam

STATUSES = ("draft", "deployed", "archived")


def list_agents(call: Call) -> AgentList:
    """A page of agents, newest first (archived ones with ``status=archived``)."""
    status = call.str_query("status", STATUSES)
    return call.workspace.agents.list(
        limit=call.int_query("limit"),
        starting_after=call.str_query("starting_after"),
        status=cast(AgentStatus | None, status),
    )


def create_agent(call: Call) -> Agent:
    """Create an agent in ``draft``."""
    return call.workspace.agents.create(cast(AgentCreate, call.body))


def get_agent(call: Call) -> Agent:
    """One agent."""
    return call.workspace.agents.get(call.path["agent_id"])


def update_agent(call: Call) -> Agent:
    """Change the fields given."""
    return call.workspace.agents.update(call.path["agent_id"], cast(AgentUpdate, call.body))


def archive_agent(call: Call) -> Agent:
    """Archive an agent (terminal)."""
    return call.workspace.agents.archive(call.path["agent_id"])


def deploy_agent(call: Call) -> Agent:
    """``draft`` → ``deployed``."""
    return call.workspace.agents.deploy(call.path["agent_id"])


def undeploy_agent(call: Call) -> Agent:
    """``deployed`` → ``draft``."""
    return call.workspace.agents.undeploy(call.path["agent_id"])


def agent_stats(call: Call) -> AgentStats:
    """What the agent's conversations held in a window."""
    # the raw values: an empty one is malformed, not absent
    return call.workspace.agents.stats(
        call.path["agent_id"], call.query.get("since"), call.query.get("until")
    )


_TIME = {"type": "string", "format": "date-time"}
_ONE = "/agents/{agent_id}"
ROUTES = [
    ApiRoute(
        method="GET",
        path="/agents",
        handler=list_agents,
        response=AgentList,
        summary="List agents",
        scope="read",
        tag="agents",
        end_users=True,
        query=(
            *PAGINATION,
            QueryParam("status", {"type": "string", "enum": list(STATUSES)}, "Filter by status."),
        ),
    ),
    ApiRoute(
        method="POST",
        path="/agents",
        handler=create_agent,
        response=Agent,
        summary="Create an agent",
        scope="write",
        tag="agents",
        body="json",
        request=AgentCreate,
        status_code=201,
    ),
    ApiRoute(
        method="GET",
        path=_ONE,
        handler=get_agent,
        response=Agent,
        summary="Retrieve an agent",
        scope="read",
        tag="agents",
        end_users=True,
    ),
    ApiRoute(
        method="PATCH",
        path=_ONE,
        handler=update_agent,
        response=Agent,
        summary="Update an agent",
        scope="write",
        tag="agents",
        body="json",
        request=AgentUpdate,
    ),
    ApiRoute(
        method="DELETE",
        path=_ONE,
        handler=archive_agent,
        response=Agent,
        summary="Archive an agent",
        scope="write",
        tag="agents",
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/deploy",
        handler=deploy_agent,
        response=Agent,
        summary="Deploy an agent",
        scope="write",
        tag="agents",
    ),
    ApiRoute(
        method="GET",
        path=_ONE + "/stats",
        handler=agent_stats,
        response=AgentStats,
        summary="Retrieve an agent's stats",
        scope="read",
        tag="agents",
        query=(
            QueryParam(
                "since",
                _TIME,
                "Count the messages at or after this time (ISO 8601; no offset: UTC).",
            ),
            QueryParam("until", _TIME, "Count the messages before this time (not before `since`)."),
        ),
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/undeploy",
        handler=undeploy_agent,
        response=Agent,
        summary="Undeploy an agent",
        scope="write",
        tag="agents",
    ),
]
