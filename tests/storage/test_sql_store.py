"""The one SQL store's seams: it implements the whole protocol, its placeholders
translate for psycopg, and its migrations render for each dialect."""

from __future__ import annotations

import pytest

from agentcore.storage.base import Store
from agentcore.storage.sql.dialect import POSTGRES, SQLITE
from agentcore.storage.sql.migrations import MIGRATIONS, migrations_for, statements
from agentcore.storage.sql.store import SQLStore
from agentcore.storage.sqlite import SQLiteStore


def protocol_methods() -> set[str]:
    return {
        name
        for cls in Store.__mro__
        if cls.__module__ == "agentcore.storage.base"
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_every_store_method_is_implemented() -> None:
    from agentcore.storage.postgres import PostgresStore

    names = protocol_methods()
    assert {"find_key_by_digest", "term_counts", "take_token", "close"} <= names
    for store in (SQLiteStore, PostgresStore):
        for name in names:
            owner = getattr(store, name).__qualname__.split(".")[0]
            assert owner not in {cls.__name__ for cls in Store.__mro__}, (store, name)
    assert issubclass(SQLiteStore, SQLStore) and issubclass(PostgresStore, SQLStore)


@pytest.mark.parametrize(
    ("sql", "named", "expected"),
    [
        ("SELECT * FROM t WHERE a = ? AND b IN (?, ?)", False, "SELECT * FROM t WHERE a = %s AND b IN (%s, %s)"),
        ("SELECT 'x%' || ?", False, "SELECT 'x%%' || %s"),
        ("SELECT ?::halfvec", False, "SELECT %s::halfvec"),
        ("VALUES (:key, :burst >= 1, CAST(:now AS float))", True, "VALUES (%(key)s, %(burst)s >= 1, CAST(%(now)s AS float))"),
        ("SELECT x::text, :a_1", True, "SELECT x::text, %(a_1)s"),
    ],
)  # fmt: skip
def test_placeholders_translate_for_psycopg(sql: str, named: bool, expected: str) -> None:
    from agentcore.storage.postgres.connection import translate

    assert translate(sql, named) == expected


def test_migrations_render_for_each_dialect() -> None:
    names = [step.name for step in MIGRATIONS]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert [int(name[1:4]) for name in names] == list(range(1, len(names) + 1))
    sqlite = [step.name for step in migrations_for(SQLITE)]
    postgres = [step.name.partition("_")[2] for step in migrations_for(POSTGRES)]
    assert sqlite == names
    # PostgreSQL's ledger numbers its steps: the databases it made know them as 1..9
    assert postgres == [
        "tenancy_and_agents",
        "knowledge",
        "events_and_webhooks",
        "chat_and_idempotency",
        "knowledge_change_log",
        "rate_limit_buckets",
        "document_status_and_ingest_jobs",
        "term_counts",
        "workspace_index_dtype",
    ]
    for step in MIGRATIONS:
        for dialect in (SQLITE, POSTGRES):
            script = step.script(dialect)
            assert "{" not in script and "}" not in script, (step.name, dialect.name)
            assert list(statements(script)), step.name
    knowledge = MIGRATIONS[1]
    assert "BYTEA" in knowledge.script(POSTGRES) and "SET STORAGE EXTERNAL" in knowledge.script(
        POSTGRES
    )
    assert "BYTEA" not in knowledge.script(SQLITE) and "STORAGE" not in knowledge.script(SQLITE)
