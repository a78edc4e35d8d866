"""Agents, in SQL, each inside one (organization, environment); their stats are read in
``agent_stats.py``."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from agentcore.schema import STORED, Agent, AgentStats, McpServer
from agentcore.storage.base import AgentStore
from agentcore.storage.sql.agent_stats import read_agent_stats
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.queries import WORKSPACE, find_row, insert_row, marks, page, write


def _agent(row: Any) -> Agent:
    data = dict(row)  # the columns of the row that are not the agent's are ignored
    data["tools"] = json.loads(data["tools"])
    data["handoff_on_no_answer"] = bool(data["handoff_on_no_answer"])
    data["knowledge"] = json.loads(data["knowledge"]) if data.get("knowledge") else None
    data["mcp_servers"] = [  # each with its stored headers, which are never shown
        McpServer.model_validate(server).with_sealed_headers(server.get("sealed_headers"))
        for server in (json.loads(data["mcp_servers"]) if data.get("mcp_servers") else [])
    ]
    # a filter value older versions accepted (an integer beyond 2**53) is read, not refused
    return Agent.model_validate(data, context=STORED)


def _columns(agent: Agent) -> dict[str, Any]:
    data = agent.model_dump(mode="json")
    data["tools"] = json.dumps(data["tools"])
    data["handoff_on_no_answer"] = int(agent.handoff_on_no_answer)
    # compact, with the filter's unset parts left out: what a request sent
    knowledge = agent.knowledge
    data["knowledge"] = None if knowledge is None else knowledge.model_dump_json(exclude_none=True)
    servers = [
        {**server.model_dump(mode="json"), "sealed_headers": server.sealed_headers}
        for server in agent.mcp_servers
    ]
    data["mcp_servers"] = json.dumps(servers) if servers else None
    return data


class AgentTables(Tables, AgentStore):
    """Agents, in the table ``agents``."""

    def insert_agent(self, organization_id: str, environment: str, agent: Agent) -> None:
        data = _columns(agent)
        data.update(organization_id=organization_id, environment=environment)
        with self.db.write() as conn:
            insert_row(conn, "agents", data)

    def get_agent(self, organization_id: str, environment: str, agent_id: str) -> Agent | None:
        # one indexed statement: every chat turn reads its agent (sqlite-utils'
        # ``rows_where`` took ~3x as long: ``benchmarks/store_crud.py``, get agent)
        row = find_row(self.db, "agents", agent_id, [organization_id, environment])
        return _agent(row) if row else None

    def update_agent(
        self,
        organization_id: str,
        environment: str,
        agent: Agent,
        *,
        expected_status: str,
        fields: Collection[str] | None = None,
    ) -> bool:
        # the check and the write are one statement (PostgreSQL re-checks the condition
        # on the row it locks), so concurrent transitions, on any node, cannot both win;
        # writing only the fields changed keeps another request's change of the others
        # (writing back every field as read undid it)
        data = _columns(agent)
        agent_id = data.pop("id")
        data.pop("created_at")
        if fields is not None:
            data = {column: data[column] for column in (*fields, "updated_at")}
        assignments = ", ".join(f"{column} = ?" for column in data)
        changed = write(
            self.db,
            f"UPDATE agents SET {assignments} WHERE id = ? AND {WORKSPACE} AND status = ?",
            [*data.values(), agent_id, organization_id, environment, expected_status],
        )
        return changed == 1

    def seal_mcp_headers(self, seal: Callable[[str], str]) -> int:
        replaced = 0
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT id, mcp_servers FROM agents WHERE mcp_servers IS NOT NULL"
            ).fetchall()
            for row in rows:
                servers = json.loads(row["mcp_servers"])
                changed = 0
                for server in servers:
                    stored = server.get("sealed_headers")
                    sealed = seal(stored) if stored else stored
                    if sealed != stored:
                        server["sealed_headers"] = sealed
                        changed += 1
                if changed:
                    # only if they are still those servers: an update committed since the
                    # read (another node's) stored its own, sealed ones
                    changed *= conn.execute(
                        "UPDATE agents SET mcp_servers = ? WHERE id = ? AND mcp_servers = ?",
                        [json.dumps(servers), row["id"], row["mcp_servers"]],
                    ).rowcount
                    replaced += changed
        return replaced

    def list_agents(
        self,
        organization_id: str,
        environment: str,
        *,
        limit: int,
        starting_after: str | None,
        statuses: tuple[str, ...],
    ) -> tuple[list[Agent], bool]:
        where = f"status IN ({marks(len(statuses))})"
        workspace = (organization_id, environment)
        rows, more = page(self.db, "agents", workspace, limit, starting_after, where, statuses)
        return [_agent(row) for row in rows], more

    def agent_stats(
        self,
        organization_id: str,
        environment: str,
        agent_id: str,
        *,
        since: datetime | None,
        until: datetime | None,
        top: int,
    ) -> AgentStats:
        return read_agent_stats(
            self.db,
            self.dialect,
            organization_id,
            environment,
            agent_id,
            since=since,
            until=until,
            top=top,
        )
