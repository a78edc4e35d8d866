"""Conversations and their messages, in SQL, scoped to a workspace and an agent."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentcore.ids import new_id, now_iso
from agentcore.storage.records import StoredMessage
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.queries import WORKSPACE


class ConversationTables(Tables):
    """Conversations (``ConversationStore``).

    Every chat turn runs ``conversation_agent``, ``recent_messages`` and
    ``add_messages``: small statements each (sqlite-utils' table API added a
    ``sqlite_master`` lookup, and a SAVEPOINT for writes, to each call: about 3x their
    time on SQLite, ``benchmarks/store_crud.py``).
    """

    def create_conversation(self, organization_id: str, environment: str, agent_id: str) -> str:
        """A new conversation's id."""
        conversation_id = new_id("conv")
        now = now_iso()
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO conversations (id, organization_id, environment, agent_id,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                [conversation_id, organization_id, environment, agent_id, now, now],
            )
        return conversation_id

    def conversation_agent(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> str | None:
        """The agent a conversation of this workspace belongs to, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT agent_id FROM conversations WHERE id = ? AND {WORKSPACE}",
                [conversation_id, organization_id, environment],
            ).fetchone()
        return None if row is None else str(row["agent_id"])

    def add_messages(self, conversation_id: str, messages: Sequence[StoredMessage]) -> None:
        """Append messages to a conversation in one transaction."""
        now = now_iso()
        with self.db.write() as conn:
            conn.executemany(
                "INSERT INTO messages (conversation_id, role, content, citations, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [
                    [conversation_id, m.role, m.content, json.dumps(m.citations), now]
                    for m in messages
                ],
            )
            conn.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", [now, conversation_id]
            )

    def recent_messages(self, conversation_id: str, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages of a conversation, oldest first."""
        if limit <= 0:
            return []
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT role, content, citations FROM messages WHERE conversation_id = ?"
                " ORDER BY seq DESC LIMIT ?",
                [conversation_id, limit],
            ).fetchall()
        return [
            StoredMessage(row["role"], row["content"], json.loads(row["citations"]))
            for row in reversed(rows)
        ]
