"""An agent's stats: aggregates of its conversations' messages in a window, in SQL.

The database counts and groups (``GROUP BY``, ``SUM``, ``COUNT``); no message is read
into Python. Each question was normalised when it was written (the ``question`` column),
so both databases group the same text the same way.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from agentcore._ids import isoformat
from agentcore.schema import AgentStats, FeedbackCounts, QuestionCount, Usage
from agentcore.storage.sql.database import Connection, Database
from agentcore.storage.sql.dialect import Dialect

# the agent's answers: an assistant message, unless it is a turn's pause for the
# caller's tools (its calls are stored; the answer comes with the resume)
_ANSWER = "m.role = 'assistant' AND m.tool_calls IS NULL"
# what ``messages`` counts: the users' messages and the answers
_SAID = f"(m.role = 'user' OR ({_ANSWER}))"
_CITED = f"{_ANSWER} AND m.citations <> '[]'"  # citations are JSON text: '[]' is none
# no citation, and not a handoff for another reason than the knowledge's lack of one
_UNANSWERED = (
    f"{_ANSWER} AND m.citations = '[]'"
    " AND (m.handoff IS NULL OR m.handoff = 'no_relevant_knowledge')"
)
_FROM = "FROM messages m JOIN conversations c ON c.id = m.conversation_id"


def _count(condition: str) -> str:
    return f"COALESCE(SUM(CASE WHEN {condition} THEN 1 ELSE 0 END), 0)"


def _stored_time(moment: datetime) -> str:
    """``moment`` as the store writes times (UTC ISO 8601 to the millisecond, which sorts
    as text), rounded up to a whole millisecond: a stored time is at or after ``moment``
    exactly when its text is at or after this one."""
    moment = moment.astimezone(UTC)
    with contextlib.suppress(OverflowError):  # within a millisecond of the year 10000
        moment += timedelta(microseconds=-moment.microsecond % 1000)
    return isoformat(moment)


def _window(
    organization_id: str,
    environment: str,
    agent_id: str,
    since: datetime | None,
    until: datetime | None,
) -> tuple[str, list[Any]]:
    """The ``WHERE`` of the agent's users' messages and answers in the window, and its
    parameters."""
    where = (
        "c.organization_id = ? AND c.environment = ? AND c.agent_id = ?"
        " AND m.role IN ('user', 'assistant')"
    )
    args: list[Any] = [organization_id, environment, agent_id]
    if since is not None:
        where += " AND m.created_at >= ?"
        args.append(_stored_time(since))
    if until is not None:
        where += " AND m.created_at < ?"
        args.append(_stored_time(until))
    return where, args


def read_agent_stats(
    db: Database,
    dialect: Dialect,
    organization_id: str,
    environment: str,
    agent_id: str,
    *,
    since: datetime | None,
    until: datetime | None,
    top: int,
) -> AgentStats:
    """``AgentStore.agent_stats``: three aggregate statements in one snapshot."""
    where, args = _window(organization_id, environment, agent_id, since, until)
    rating = dialect.member("m.feedback", "rating")  # answers' ratings, by their time
    up, down = f"{rating} = 'up'", f"{rating} = 'down'"
    tokens = [dialect.member("m.usage", name) for name in ("input_tokens", "output_tokens")]
    totals = (
        f"SELECT COUNT(DISTINCT CASE WHEN {_SAID} THEN m.conversation_id END) AS conversations,"
        f" {_count(_SAID)} AS messages, {_count(_CITED)} AS answered,"
        f" {_count(_UNANSWERED)} AS unanswered, {_count('m.handoff IS NOT NULL')} AS handoffs,"
        f" {_count(up)} AS up, {_count(down)} AS down,"
        # every model call's tokens: a pause's too (a resume reports only its own calls)
        f" COALESCE(SUM(CAST({tokens[0]} AS BIGINT)), 0) AS input_tokens,"
        f" COALESCE(SUM(CAST({tokens[1]} AS BIGINT)), 0) AS output_tokens"
        f" {_FROM} WHERE {where}"
    )
    with db.snapshot() as conn:
        row = conn.execute(totals, args).fetchone()
        asked = _top(conn, dialect, where, args, "m.role = 'user'", top)
        unanswered = _top(conn, dialect, where, args, _UNANSWERED, top)
    return AgentStats(
        agent_id=agent_id,
        since=since,
        until=until,
        conversations=int(row["conversations"]),
        messages=int(row["messages"]),
        answered=int(row["answered"]),
        unanswered=int(row["unanswered"]),
        handoffs=int(row["handoffs"]),
        feedback=FeedbackCounts(up=int(row["up"]), down=int(row["down"])),
        top_questions=asked,
        unanswered_questions=unanswered,
        usage=Usage(input_tokens=int(row["input_tokens"]), output_tokens=int(row["output_tokens"])),
    )


def _top(
    conn: Connection,
    dialect: Dialect,
    where: str,
    args: list[Any],
    condition: str,
    top: int,
) -> list[QuestionCount]:
    """The ``top`` most frequent questions of the messages ``condition`` keeps, most first,
    ties by text in code point order (the same on both databases). Messages of versions
    that stored no question are left out."""
    rows = conn.execute(
        f"SELECT m.question AS text, COUNT(*) AS n {_FROM}"
        f" WHERE {where} AND {condition} AND m.question IS NOT NULL"
        f" GROUP BY m.question ORDER BY n DESC, m.question{dialect.code_point_order} LIMIT ?",
        [*args, top],
    ).fetchall()
    return [QuestionCount(text=row["text"], count=int(row["n"])) for row in rows]
