"""Agents, in SQL, each inside one (organization, environment)."""

from __future__ import annotations

import json
from typing import Any

from agentcore.schema import Agent
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.queries import WORKSPACE, insert_row, marks, page_rows


def _agent(row: Any) -> Agent:
    data = dict(row)  # the columns of the row that are not the agent's are ignored
    data["tools"] = json.loads(data["tools"])
    data["handoff_on_no_answer"] = bool(data["handoff_on_no_answer"])
    data["knowledge"] = json.loads(data["knowledge"]) if data.get("knowledge") else None
    return Agent.model_validate(data)


def _columns(agent: Agent) -> dict[str, Any]:
    data = agent.model_dump(mode="json")
    data["tools"] = json.dumps(data["tools"])
    data["handoff_on_no_answer"] = int(agent.handoff_on_no_answer)
    # compact, with the filter's unset parts left out: what a request sent
    knowledge = agent.knowledge
    data["knowledge"] = None if knowledge is None else knowledge.model_dump_json(exclude_none=True)
    return data


class AgentTables(Tables):
    """Agents (``AgentStore``)."""

    def insert_agent(self, organization_id: str, environment: str, agent: Agent) -> None:
        """Store a new agent."""
        data = _columns(agent)
        data.update(organization_id=organization_id, environment=environment)
        with self.db.write() as conn:
            insert_row(conn, "agents", data)

    def get_agent(self, organization_id: str, environment: str, agent_id: str) -> Agent | None:
        """The agent with this id in this workspace, or ``None`` (other workspaces' too).

        One indexed statement: every chat turn reads its agent (sqlite-utils'
        ``rows_where``, a generator building its query and then a dict per row, took
        ~3x as long: ``benchmarks/store_crud.py``, get agent).
        """
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT * FROM agents WHERE id = ? AND {WORKSPACE}",
                [agent_id, organization_id, environment],
            ).fetchone()
        return _agent(row) if row else None

    def update_agent(
        self, organization_id: str, environment: str, agent: Agent, *, expected_status: str
    ) -> bool:
        """Replace an agent's fields if its status is still ``expected_status``.

        The check and the write are one statement (PostgreSQL re-checks the condition
        on the row it locks), so concurrent transitions, on any node, cannot both win.
        Returns whether the agent was updated.
        """
        data = _columns(agent)
        agent_id = data.pop("id")
        data.pop("created_at")
        assignments = ", ".join(f"{column} = ?" for column in data)
        with self.db.write() as conn:
            cursor = conn.execute(
                f"UPDATE agents SET {assignments} WHERE id = ? AND {WORKSPACE} AND status = ?",
                [*data.values(), agent_id, organization_id, environment, expected_status],
            )
        return cursor.rowcount == 1

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
                where=f"status IN ({marks(len(statuses))})",
                where_args=statuses,
            )
        return [_agent(row) for row in rows], more
