"""PostgreSQL storage of agents."""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql
from psycopg.rows import DictRow

from agentcore.schema import Agent
from agentcore.storage.postgres.connection import Database, page_rows, retrying

_WORKSPACE = "organization_id = %s AND environment = %s"
_COLUMNS = (
    "id",
    "name",
    "role",
    "status",
    "system_prompt",
    "tools",
    "model",
    "handoff_on_no_answer",
    "created_at",
    "updated_at",
)


def _agent(row: DictRow) -> Agent:
    data = dict(row)
    data.pop("seq", None)
    data["tools"] = json.loads(data["tools"])
    data["handoff_on_no_answer"] = bool(data["handoff_on_no_answer"])
    return Agent.model_validate(data)


def _columns(agent: Agent) -> dict[str, Any]:
    data = agent.model_dump(mode="json")
    data["tools"] = json.dumps(data["tools"])
    data["handoff_on_no_answer"] = int(agent.handoff_on_no_answer)
    return data


def _names(columns: Any) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


class AgentStore:
    """Agents, each inside one (organization, environment)."""

    db: Database

    @retrying
    def insert_agent(self, organization_id: str, environment: str, agent: Agent) -> None:
        """Store a new agent."""
        data = _columns(agent)
        data.update(organization_id=organization_id, environment=environment)
        marks = sql.SQL(", ").join(sql.Placeholder() for _ in data)
        with self.db.write() as conn:
            conn.execute(
                sql.SQL("INSERT INTO agents ({}) VALUES ({})").format(_names(data), marks),
                list(data.values()),
            )

    @retrying
    def get_agent(self, organization_id: str, environment: str, agent_id: str) -> Agent | None:
        """The agent with this id in this workspace, or ``None`` (other workspaces' too)."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT * FROM agents WHERE id = %s AND {_WORKSPACE}",
                [agent_id, organization_id, environment],
            ).fetchone()
        return _agent(row) if row else None

    @retrying
    def update_agent(
        self, organization_id: str, environment: str, agent: Agent, *, expected_status: str
    ) -> bool:
        """Replace an agent's fields if its status is still ``expected_status``.

        One ``UPDATE ... WHERE status = %s``: PostgreSQL re-checks the condition on the
        row it locks, so concurrent transitions (on any nodes) cannot both win.
        """
        data = _columns(agent)
        agent_id = data.pop("id")
        data.pop("created_at")
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = %s").format(sql.Identifier(column)) for column in data
        )
        with self.db.write() as conn:
            cursor = conn.execute(
                sql.SQL(
                    "UPDATE agents SET {} WHERE id = %s AND organization_id = %s"
                    " AND environment = %s AND status = %s"
                ).format(assignments),
                [*data.values(), agent_id, organization_id, environment, expected_status],
            )
        return cursor.rowcount == 1

    @retrying
    def list_agents(
        self,
        organization_id: str,
        environment: str,
        *,
        limit: int,
        starting_after: str | None,
        statuses: tuple[str, ...],
    ) -> tuple[list[Agent], bool]:
        """A page of agents whose status is one of ``statuses``, newest first."""
        with self.db.snapshot() as conn:
            rows, more = page_rows(
                conn,
                "agents",
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
                filters=sql.SQL("status = ANY(%s)"),
                filter_params=[list(statuses)],
            )
        return [_agent(row) for row in rows], more
