"""SQLite storage of conversations and their messages."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentcore.ids import new_id, now_iso
from agentcore.storage.records import StoredMessage
from agentcore.storage.sqlite.connection import Database

_WORKSPACE = "organization_id = ? AND environment = ?"


class ChatStore:
    """Conversations, scoped to a workspace and an agent.

    What every chat turn runs (``conversation_agent``, ``recent_messages``,
    ``add_messages``) stays raw SQL: sqlite-utils' table API adds a ``sqlite_master``
    lookup (and a SAVEPOINT for writes) to each call, about 3x the time of these
    small statements (``benchmarks/store_crud.py``).
    """

    db: Database

    def create_conversation(self, organization_id: str, environment: str, agent_id: str) -> str:
        """A new conversation's id."""
        conversation_id = new_id("conv")
        now = now_iso()
        with self.db.write() as conn:
            self.db.table(conn, "conversations").insert(
                {
                    "id": conversation_id,
                    "organization_id": organization_id,
                    "environment": environment,
                    "agent_id": agent_id,
                    "created_at": now,
                    "updated_at": now,
                }
            )
        return conversation_id

    def conversation_agent(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> str | None:
        """The agent a conversation of this workspace belongs to, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT agent_id FROM conversations WHERE id = ? AND {_WORKSPACE}",
                [conversation_id, organization_id, environment],
            ).fetchone()
        return None if row is None else str(row["agent_id"])

    def add_messages(self, conversation_id: str, messages: Sequence[StoredMessage]) -> None:
        """Append messages to a conversation in one transaction (one INSERT per message
        and one UPDATE; sqlite-utils' ``update`` would read the row first)."""
        now = now_iso()
        with self.db.write() as conn:
            for message in messages:
                conn.execute(
                    "INSERT INTO messages (conversation_id, role, content, citations, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    [
                        conversation_id,
                        message.role,
                        message.content,
                        json.dumps(message.citations),
                        now,
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
