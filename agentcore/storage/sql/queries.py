"""Statements the table modules build the same way: keyset pages, inserts, checked updates.

Table and column names in them come from the code (and, for updates, from an allowed
set), never from a caller's data, so no statement can be steered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentcore.errors import NotFound
from agentcore.storage.sql.database import Connection, Cursor, Database

WORKSPACE = "organization_id = ? AND environment = ?"
#: the version this transaction bumped its workspace to (``VectorTables._send_bump``),
#: for a row written in it (its parameters: the workspace)
BUMPED_VERSION = f"(SELECT version FROM knowledge_state WHERE {WORKSPACE})"
#: that version only if the workspace is indexed by an embedder and dimension (its
#: parameters: the workspace, the embedder's name, the dimension), else NULL
CHECKED_VERSION = BUMPED_VERSION[:-1] + " AND embedder = ? AND dimension = ?)"


def marks(count: int) -> str:
    """``?, ?, ?``: the placeholders of an ``IN`` list of ``count`` values."""
    return ", ".join("?" * count)


#: parameters per multi-row ``INSERT`` (``insert_rows``): psycopg converts a statement's
#: placeholders once and caches it only up to 50 (past that it parses the text again at
#: every call, about 1.4 µs a placeholder), and even an old SQLite takes 999
PARAMS_PER_INSERT = 50


def insert_rows(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``sql``, an ``INSERT ... VALUES (...)`` holding one row's placeholders, for
    each of ``rows`` in order, a few rows per statement (its ``VALUES`` repeated, up to
    ``PARAMS_PER_INSERT`` parameters): ``executemany`` sends a statement per row, and on
    PostgreSQL each costs the client a message and its CPU."""
    if not rows:
        return
    head, values = sql.split(" VALUES ", 1)
    step = max(1, PARAMS_PER_INSERT // len(rows[0]))
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        params = [value for row in part for value in row]
        conn.execute(f"{head} VALUES {', '.join([values] * len(part))}", params)


def read_row(db: Database, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first row ``sql`` reads from the committed data, or ``None``."""
    with db.read() as conn:
        return conn.execute(sql, params).fetchone()


def read_rows(db: Database, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Every row ``sql`` reads from the committed data."""
    with db.read() as conn:
        return conn.execute(sql, params).fetchall()


def find_row(
    db: Database, table: str, row_id: str, workspace: Sequence[Any], columns: str = "*"
) -> Any:
    """Row ``row_id`` of ``table`` if it is ``workspace``'s (organization, environment)."""
    sql = f"SELECT {columns} FROM {table} WHERE id = ? AND {WORKSPACE}"
    return read_row(db, sql, [row_id, *workspace])


def write(db: Database, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one write statement in a transaction of its own; the rows it changed."""
    with db.write() as conn:
        return conn.execute(sql, params).rowcount


def insert_row(
    conn: Connection, table: str, values: Mapping[str, Any], returning: str = ""
) -> Cursor:
    """``INSERT INTO table (<keys>) VALUES (<values>)``, ``RETURNING returning`` if given."""
    sql = f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks(len(values))})"
    if returning:
        sql += f" RETURNING {returning}"
    return conn.execute(sql, list(values.values()))


def update_row(
    conn: Connection,
    table: str,
    row_id: str,
    changes: Mapping[str, Any],
    allowed: set[str],
    stamp: Mapping[str, Any] | None = None,
) -> None:
    """``UPDATE table SET <changes> WHERE id = row_id``, refusing columns not ``allowed``
    (the columns of ``stamp`` are set too). A row that no longer exists is left alone,
    like any ``UPDATE`` that matches nothing."""
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"cannot update {sorted(unknown)} of {table}")
    values = {**changes, **(stamp or {})}
    assignments = ", ".join(f"{column} = ?" for column in values)
    conn.execute(f"UPDATE {table} SET {assignments} WHERE id = ?", [*values.values(), row_id])


def page(
    db: Database,
    table: str,
    scope: Sequence[Any],
    limit: int,
    starting_after: str | None,
    where: str = "1 = 1",
    where_args: Sequence[Any] = (),
    *,
    scope_sql: str = WORKSPACE,
    oldest_first: bool = False,
    missing: str = "No object with id '{}' to start after.",
) -> tuple[list[Any], bool]:
    """One page of ``table`` newest first (or ``oldest_first``), Stripe style: rows after
    ``starting_after``, read in one snapshot (the caller's, if it is in one).

    A keyset page on ``seq``: ``scope`` is ``(organization_id, environment)`` (or the
    parameters of ``scope_sql``, the condition that holds the listing); ``where``
    narrows the listing. The cursor must be an id in the same scope (else ``NotFound``
    names it: ``missing``), but need not pass ``where``: an object that changed status
    mid-listing still works as a cursor. Returns the rows and whether more follow.
    """
    condition = f"{scope_sql} AND ({where})"
    args: list[Any] = [*scope, *where_args]
    order, after = ("ASC", ">") if oldest_first else ("DESC", "<")
    with db.snapshot() as conn:
        if starting_after is not None:
            cursor = conn.execute(
                f"SELECT seq FROM {table} WHERE id = ? AND {scope_sql}", [starting_after, *scope]
            ).fetchone()
            if cursor is None:
                raise NotFound(missing.format(starting_after), param="starting_after")
            condition += f" AND seq {after} ?"
            args.append(cursor["seq"])
        rows = conn.execute(
            f"SELECT * FROM {table} WHERE {condition} ORDER BY seq {order} LIMIT ?",
            [*args, limit + 1],
        ).fetchall()
    return rows[:limit], len(rows) > limit
