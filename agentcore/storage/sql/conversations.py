"""Conversations and their messages, in SQL, scoped to a workspace and an agent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentcore._ids import new_id, now_iso
from agentcore.errors import Conflict, NotFound
from agentcore.schema import (
    Conversation,
    ConversationStatus,
    Feedback,
    Message,
    RequestedToolCall,
    Usage,
)
from agentcore.storage.base import ConversationStore
from agentcore.storage.records import PendingTurn, StoredMessage
from agentcore.storage.sql.database import Connection, Tables
from agentcore.storage.sql.queries import WORKSPACE, find_row, insert_rows, marks, page

_GONE = "The conversation was deleted while the answer was being made."
_ANSWERED = (
    "These tool calls were answered (or the turn was released) while their outputs were"
    " being processed."
)
_BUSY = "The outputs of these tool calls are being processed by another request."


# the columns that are a conversation's, and a message's, fields as they are
_CONVERSATION = ("id", "status", "created_at", "updated_at", "message_count")
_MESSAGE = ("id", "role", "content", "created_at")


def _conversation(row: Any) -> Conversation:
    return Conversation(
        agentId=row["agent_id"],
        user=row["user_id"],
        **{column: row[column] for column in _CONVERSATION},
    )


def _message(row: Any) -> Message:
    usage, calls = row["usage"], row["tool_calls"]
    return Message(
        citations=json.loads(row["citations"]),
        usage=None if usage is None else Usage.model_validate_json(usage),
        tool_calls=None if calls is None else [RequestedToolCall(**c) for c in json.loads(calls)],
        tool_call_id=row["tool_call_id"],
        feedback=None if row["feedback"] is None else Feedback.model_validate_json(row["feedback"]),
        **{column: row[column] for column in _MESSAGE},
    )


def _pending(pending: PendingTurn | None) -> list[Any]:
    """The values of a conversation's pending columns (id, turn, expiry, lease)."""
    if pending is None:
        return [None, None, None, None]
    return [pending.id, json.dumps(pending.state), pending.expires_at, None]


def _pending_turn(row: Any) -> PendingTurn:
    return PendingTurn(row["pending_id"], json.loads(row["pending_turn"]), row["pending_expires"])


class ConversationTables(Tables, ConversationStore):
    """Conversations and messages, in tables of those names.

    Every chat turn runs ``get_conversation``, ``recent_messages`` and
    ``add_messages``: small statements each (sqlite-utils' table API added a
    ``sqlite_master`` lookup, and a SAVEPOINT for writes, to each call: about 3x their
    time on SQLite, ``benchmarks/store_crud.py``).
    """

    def create_conversation(
        self,
        organization_id: str,
        environment: str,
        agent_id: str,
        messages: Sequence[StoredMessage] = (),
        *,
        conversation_id: str | None = None,
        status: ConversationStatus = "active",
        pending: PendingTurn | None = None,
        user: str | None = None,
    ) -> str:
        conversation_id = conversation_id or new_id("conv")
        now = now_iso()
        with self.db.write() as conn:  # the conversation and its first messages at once
            conn.execute(
                "INSERT INTO conversations (id, organization_id, environment, agent_id,"
                " status, created_at, updated_at, message_count, pending_id, pending_turn,"
                " pending_expires, pending_lease, user_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    conversation_id,
                    organization_id,
                    environment,
                    agent_id,
                    status,
                    now,
                    now,
                    len(messages),
                    *_pending(pending),
                    user,
                ],
            )
            _insert_messages(conn, conversation_id, messages, now)
        return conversation_id

    def add_messages(
        self,
        conversation_id: str,
        messages: Sequence[StoredMessage],
        *,
        status: ConversationStatus | None = None,
        pending: PendingTurn | None = None,
        resumed: str | None = None,
    ) -> None:
        # The conversation's row is updated first (its count and ``updated_at``), which
        # locks it on PostgreSQL: a concurrent ``delete_conversation`` either ran before
        # (then this raises ``NotFound`` and stores nothing) or waits for this commit and
        # deletes these messages too. A resume's update also requires its paused turn.
        now = now_iso()
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE conversations SET updated_at = ?, message_count = message_count + ?,"
                " status = COALESCE(?, status), pending_id = ?, pending_turn = ?,"
                " pending_expires = ?, pending_lease = ?"
                " WHERE id = ? AND (CAST(? AS TEXT) IS NULL OR pending_id = ?)",
                [now, len(messages), status, *_pending(pending), conversation_id, resumed, resumed],
            )
            if cursor.rowcount != 1:
                exists = "SELECT 1 FROM conversations WHERE id = ?"
                if resumed is not None and conn.execute(exists, [conversation_id]).fetchone():
                    raise Conflict(_ANSWERED, code="tool_outputs_already_submitted")
                raise NotFound(_GONE, param="conversationId")
            _insert_messages(conn, conversation_id, messages, now)

    def pending_turn(self, conversation_id: str, now: float) -> PendingTurn | None:
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT pending_id, pending_turn, pending_expires FROM conversations"
                " WHERE id = ? AND pending_id IS NOT NULL AND pending_expires > ?",
                [conversation_id, now],
            ).fetchone()
        return None if row is None else _pending_turn(row)

    def claim_pending_turn(
        self, conversation_id: str, now: float, lease_until: float
    ) -> PendingTurn | None:
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT pending_id, pending_turn, pending_expires, pending_lease"
                " FROM conversations WHERE id = ? AND pending_id IS NOT NULL"
                " AND pending_expires > ?",
                [conversation_id, now],
            ).fetchone()
            if row is None:
                return None
            claimed = conn.execute(
                "UPDATE conversations SET pending_lease = ? WHERE id = ? AND pending_id = ?"
                " AND (pending_lease IS NULL OR pending_lease <= ?)",
                [lease_until, conversation_id, row["pending_id"], now],
            )
            if claimed.rowcount != 1:
                raise Conflict(_BUSY, code="tool_outputs_in_progress", param="tool_outputs")
        return _pending_turn(row)

    def release_pending_turn(self, conversation_id: str, turn_id: str) -> None:
        with self.db.write() as conn:
            conn.execute(
                "UPDATE conversations SET pending_lease = NULL WHERE id = ? AND pending_id = ?",
                [conversation_id, turn_id],
            )

    def set_conversation_status(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        status: ConversationStatus,
    ) -> Conversation | None:
        with self.db.write() as conn:
            changed = conn.execute(
                f"UPDATE conversations SET status = ? WHERE id = ? AND {WORKSPACE}",
                [status, conversation_id, organization_id, environment],
            )
            if changed.rowcount != 1:
                return None
            row = conn.execute(
                "SELECT * FROM conversations WHERE id = ?", [conversation_id]
            ).fetchone()
        return _conversation(row)

    def recent_messages(self, conversation_id: str, limit: int) -> list[StoredMessage]:
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

    def get_conversation(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> Conversation | None:
        row = find_row(self.db, "conversations", conversation_id, [organization_id, environment])
        return None if row is None else _conversation(row)

    def list_conversations(
        self,
        organization_id: str,
        environment: str,
        *,
        limit: int,
        starting_after: str | None,
        agent_id: str | None = None,
        user: str | None = None,
        agent_ids: Sequence[str] | None = None,
    ) -> tuple[list[Conversation], bool]:
        given = {"agent_id": agent_id, "user_id": user}
        chosen = {column: value for column, value in given.items() if value is not None}
        conditions = [f"{column} = ?" for column in chosen]
        args: list[Any] = list(chosen.values())
        if agent_ids is not None:
            conditions.append(f"agent_id IN ({marks(len(agent_ids))})" if agent_ids else "1 = 0")
            args.extend(agent_ids)
        where = " AND ".join(conditions) or "1 = 1"
        workspace = (organization_id, environment)
        rows, more = page(self.db, "conversations", workspace, limit, starting_after, where, args)
        return [_conversation(row) for row in rows], more

    def list_messages(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        *,
        limit: int,
        starting_after: str | None,
        newest_first: bool = False,
    ) -> tuple[list[Message], bool] | None:
        workspace = [organization_id, environment]
        with self.db.snapshot():  # find_row and page read in it
            if find_row(self.db, "conversations", conversation_id, workspace, "1") is None:
                return None
            rows, more = page(
                self.db,
                "messages",
                [conversation_id],
                limit,
                starting_after,
                scope_sql="conversation_id = ?",
                oldest_first=not newest_first,
                missing="No message with id '{}' in this conversation to start after.",
            )
        return [_message(row) for row in rows], more

    def rate_message(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        message_id: str,
        feedback: Feedback,
    ) -> Message | None:
        workspace = [organization_id, environment]
        with self.db.write() as conn:
            if find_row(self.db, "conversations", conversation_id, workspace, "1") is None:
                return None
            row = conn.execute(
                "SELECT * FROM messages WHERE id = ? AND conversation_id = ?",
                [message_id, conversation_id],
            ).fetchone()
            if row is None:
                return None
            if row["role"] != "assistant":
                raise Conflict(
                    f"Message {message_id!r} is a {row['role']} message: only the agent's"
                    " answers are rated.",
                    code="not_an_answer",
                    param="message_id",
                )
            rated = conn.execute(
                "UPDATE messages SET feedback = ? WHERE id = ? RETURNING *",
                [feedback.model_dump_json(), message_id],
            ).fetchone()
        return _message(rated)

    def delete_conversation(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> bool:
        # The conversation's row is locked first (an ``UPDATE``), so a chat turn adding
        # messages to it right now finishes first and its messages go too.
        with self.db.write() as conn:
            found = conn.execute(
                f"UPDATE conversations SET updated_at = updated_at WHERE id = ? AND {WORKSPACE}",
                [conversation_id, organization_id, environment],
            )
            if found.rowcount != 1:
                return False
            conn.execute("DELETE FROM messages WHERE conversation_id = ?", [conversation_id])
            conn.execute("DELETE FROM conversations WHERE id = ?", [conversation_id])
            # and the kept idempotent results holding its messages: deleted for good
            conn.execute(
                "DELETE FROM idempotency_keys WHERE conversation_id = ?", [conversation_id]
            )
        return True


def _insert_messages(
    conn: Connection, conversation_id: str, messages: Sequence[StoredMessage], now: str
) -> None:
    """Insert ``messages`` into a conversation, within the caller's write."""
    insert_rows(
        conn,
        "INSERT INTO messages (id, conversation_id, role, content, citations, usage,"
        " tool_calls, tool_call_id, question, handoff, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            [
                new_id("msg"),
                conversation_id,
                m.role,
                m.content,
                json.dumps(m.citations),
                None if m.usage is None else m.usage.model_dump_json(),
                None if m.tool_calls is None else json.dumps(m.tool_calls),
                m.tool_call_id,
                m.question,
                m.handoff,
                now,
            ]
            for m in messages
        ],
    )
