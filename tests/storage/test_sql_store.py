"""The one SQL store's seams: it implements the whole protocol, its placeholders
translate for psycopg, and its migrations render for each dialect."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import make_document, stored_chunk_ids

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
    # PostgreSQL's ledger numbers its steps: databases made before know them as 1..9
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
        "document_terms",
        "drop_chunks_workspace_index",
        "fail_pending_of_disabled",
        "conversation_history",
        "document_metadata",
        "idempotency_retention",
        "document_external_id",
        "conversation_status",
        "pending_tool_calls",
        "agent_mcp_servers",
        "document_access",
        "conversation_user",
        "message_feedback",
        "client_tokens",
        "message_stats",
        "chunk_location",
        "document_warnings",
        "keyword_snapshots",
        "term_sums",
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


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_term_sums_follow_another_nodes_writes(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each store object keeps its own sums; another one's writes and deletes (another
    process, or node) are counted at the next call, through the change log or, once
    the log no longer reaches back, by a rebuild."""
    import numpy as np

    from agentcore.storage.sql import vectors

    def open_store() -> Any:
        if kind == "sqlite":
            return SQLiteStore.open(request.getfixturevalue("tmp_path") / "terms.db")
        from agentcore.storage.postgres import PostgresStore

        return PostgresStore.open(request.getfixturevalue("postgres_url"))

    def ingest(store: Any, stems: dict[str, int]) -> str:
        document = make_document()
        vector = np.ones((1, 4), dtype=np.float32) / 2
        store.insert_document(
            "org",
            "test",
            document,
            [("t", [1], [0])],
            "e",
            vector,
            np.ones(1, bool),
            (sum(stems.values()), stems),
        )
        return document.id

    writer, reader = open_store(), open_store()
    try:
        assert reader.term_counts("org", "test", ["a", "b"]) == (0, {})
        first = ingest(writer, {"a": 2, "b": 1})
        assert reader.term_counts("org", "test", ["a", "b"]) == (3, {"a": 2, "b": 1})
        ingest(writer, {"a": 1})
        writer.delete_document("org", "test", first)
        assert reader.term_counts("org", "test", ["a", "b"]) == (1, {"a": 1})
        monkeypatch.setattr(vectors, "TOMBSTONE_VERSIONS", 1)  # the log forgets at once
        for _ in range(3):
            writer.delete_document("org", "test", ingest(writer, {"b": 5}))
        ingest(writer, {"b": 2})
        assert reader.term_counts("org", "test", ["a", "b", "c"]) == (3, {"a": 1, "b": 2})
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_rows_inserted_several_per_statement_keep_their_order(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Chunks and messages go in several rows per ``INSERT`` (``insert_rows``): every row
    is stored, in the order given, around the statement's row count and past it."""
    import numpy as np

    from agentcore.storage.records import StoredMessage
    from agentcore.storage.sql.queries import PARAMS_PER_INSERT

    if kind == "sqlite":
        store: Any = SQLiteStore.open(request.getfixturevalue("tmp_path") / "rows.db")
    else:
        from agentcore.storage.postgres import PostgresStore

        store = PostgresStore.open(request.getfixturevalue("postgres_url"))
    per_statement = PARAMS_PER_INSERT // 7  # a chunk's row and a message's have 7 values
    try:
        for count in (1, per_statement, per_statement + 1, 3 * per_statement + 2):
            document = make_document(chunks=count)
            chunks = [(f"chunk {i}", [i + 1], [0]) for i in range(count)]
            vectors = np.eye(count, 4 * count, dtype=np.float32)
            written = store.insert_document(
                "org", f"e{count}", document, chunks, "e", vectors, np.ones(count, bool)
            )
            assert written.chunk_ids == sorted(written.chunk_ids)
            assert stored_chunk_ids(store, "org", f"e{count}", document.id) == written.chunk_ids
            stored = store.get_chunks(written.chunk_ids)
            assert [stored[i].text for i in written.chunk_ids] == [c[0] for c in chunks]
            assert [stored[i].pages for i in written.chunk_ids] == [c[1] for c in chunks]

            conversation = store.create_conversation("org", "test", "agent_x")
            said = [StoredMessage("user", f"message {i}", []) for i in range(count)]
            store.add_messages(conversation, said)
            assert store.recent_messages(conversation, 100) == said
    finally:
        store.close()
