"""Databases made before the one SQL store open, migrate and read back whole.

``old_stores/`` holds a SQLite file and a PostgreSQL database made by a4b6b69 (the last
commit with two separate stores), dumped as SQL with every table filled, and what that
code read back from them (``make.py`` says how they were made). Each is loaded, opened
with this code, read back through the Store API (every row, the same values), used
(claims, deletes, new writes), and its schema compared with a fresh database's.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from old_stores.make import STEMS, read_back

from agentcore.schema import Agent, Document
from agentcore.storage.records import StoredResult
from agentcore.storage.sqlite import SQLiteStore

HERE = Path(__file__).parent / "old_stores"
EXPECTED = json.loads((HERE / "expected.json").read_text())


def reads_back_and_works(store: Any, expected: dict[str, Any]) -> None:
    made = expected["made"]
    org = made["org"]
    read = json.loads(json.dumps(read_back(store, made)))
    # the fields added since read as their defaults: an agent tool's require_approval
    tools = [tool for agent in read["agents"] for tool in agent["tools"]]
    assert tools and all(tool.pop("require_approval") == "never" for tool in tools)
    # and a document's warnings (m027): none on a document stored before them
    assert all(document.pop("warnings") == [] for document in read["documents"])
    assert read == expected["read"]
    documents, _ = store.list_documents(org, "test", limit=100, starting_after=None)
    assert documents and all(
        d.metadata == {} and d.external_id is None and d.access is None for d in documents
    )
    agents, _ = store.list_agents(
        org, "test", limit=100, starting_after=None, statuses=("draft", "deployed", "archived")
    )
    assert agents and all(a.knowledge is None and a.mcp_servers == [] for a in agents)
    # the rows still work: claims, replays, buckets, deletes and new writes
    job = store.claim_ingest_job(now=5000.0, lease_seconds=30)
    assert (job.document_id, job.kind, job.attempts) == ("doc_old3", "file", 1)
    assert store.ingest_job_data("doc_old3") == b"%PDF-1.4 \x00\xff bytes"
    assert store.claim_ingest_job(now=5000.0, lease_seconds=30) is None  # doc_old4 failed
    due = store.claim_due_deliveries(now=2100.0, lease_seconds=30, limit=10)
    assert sorted((d.event_id, d.attempts) for d in due) == [
        ("evt_old0", 0),
        ("evt_old0", 1),
        ("evt_old1", 0),
        ("evt_old1", 0),
    ]
    assert {tuple(d.secrets) for d in due} == {("whsec_a",), ("whsec_a", "whsec_0")}
    assert store.claim_idempotency_key(org, "test", "idem-done", "fp1", now=3001.0, ttl=1e9) == (
        "replay",
        StoredResult(201, '{"ok":true}'),
    )
    assert store.claim_idempotency_key(org, "test", "idem-open", "fp2", now=3001.0, ttl=1e9) == (
        "in_progress",
        None,
    )
    taken = store.take_token("key_old0", rate=1.0, burst=5.0, now=4000.0)
    assert taken.allowed and taken.tokens == pytest.approx(3.0)  # the old bucket had 4
    sentences, counts = store.term_counts(org, "test", STEMS)
    assert store.delete_document(org, "test", "doc_old0")
    assert store.term_counts(org, "test", STEMS) == (
        sentences - 4,
        {"blade": 2, "canteen": 1, "rotterdam": 1},
    )
    assert counts == {"blade": 4, "canteen": 1, "rotterdam": 2}
    # m014: the old messages got ids and their conversation its count
    conversation = made["conversation"]
    assert store.get_conversation(org, "test", conversation).message_count == 2
    messages, _ = store.list_messages(org, "test", conversation, limit=10, starting_after=None)
    assert [m.content for m in messages] == ["Where are the blades?", "Rotterdam."]
    assert len({m.id for m in messages}) == 2 and all(m.id.startswith("msg_") for m in messages)
    assert all(m.usage is None for m in messages)
    state = store.knowledge_state(org, "test")
    changes = store.changes_since(org, "test", state.version - 1, max_rows=100)
    assert changes is not None and len(changes.deleted_ids) == 3
    document = Document.model_validate(
        {**expected["read"]["documents"][0], "id": "doc_new", "chunks": 1}
    )
    vector = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
    (chunk,) = store.insert_document(
        org, "test", document, [("new", [1], [0])], "hashing-v1", vector, np.ones(1, bool)
    ).chunk_ids
    assert store.get_chunks([chunk])[chunk].text == "new"
    agent = Agent.model_validate({**expected["read"]["agents"][0], "id": "agt_new"})
    store.insert_agent(org, "test", agent)
    assert store.get_agent(org, "test", "agt_new") == agent


def sqlite_schema(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        schema: dict[str, Any] = {}
        for kind, name, table in conn.execute(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ):
            if kind == "table":
                schema[name] = (
                    conn.execute(f"PRAGMA table_xinfo({name})").fetchall(),
                    conn.execute(f"PRAGMA foreign_key_list({name})").fetchall(),
                    conn.execute(
                        "SELECT sql LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE name = ?",
                        [name],
                    ).fetchone(),
                )
            else:
                schema[name] = (
                    table,
                    conn.execute(f"PRAGMA index_xinfo({name})").fetchall(),
                    [row for row in conn.execute(f"PRAGMA index_list({table})") if row[1] == name],
                )
        ledger = conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id").fetchall()
        return {"schema": schema, "ledger": ledger}
    finally:
        conn.close()


def test_an_old_sqlite_file_opens_with_every_row(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.executescript((HERE / "sqlite.sql").read_text())
    conn.close()
    store = SQLiteStore.open(old)
    try:
        reads_back_and_works(store, EXPECTED["sqlite"])
    finally:
        store.close()
    SQLiteStore.open(tmp_path / "new.db").close()
    assert sqlite_schema(old) == sqlite_schema(tmp_path / "new.db")


def postgres_schema(url: str) -> dict[str, Any]:
    import psycopg

    queries = {
        "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default,"
        " is_identity, identity_generation FROM information_schema.columns"
        " WHERE table_schema = 'public'",
        "storage": "SELECT c.relname, a.attname, a.attstorage FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0",
        "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = 'public'",
        "constraints": "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM"
        " pg_constraint WHERE connamespace = 'public'::regnamespace",
        "ledger": "SELECT version, name FROM agentcore_migrations",
    }
    with psycopg.connect(url) as conn:
        return {name: sorted(conn.execute(query).fetchall()) for name, query in queries.items()}


@pytest.mark.slow
def test_an_old_postgres_database_opens_with_every_row(postgres_server: str) -> None:
    import psycopg
    from conftest import create_database

    from agentcore.storage.postgres import PostgresStore

    old = create_database(postgres_server, "agentcore_old_store")
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute((HERE / "postgres.sql").read_text().encode())
    store = PostgresStore.open(old, vector_search="pgvector")
    try:
        reads_back_and_works(store, EXPECTED["postgres"])
        org = EXPECTED["postgres"]["made"]["org"]
        found, _ = store.search_vectors(org, "test", np.ones(8, np.float32) / np.sqrt(8), 10)
        assert len(found) == 4  # doc_old1's three rows, and the new document's
    finally:
        store.close()
    new = create_database(postgres_server, "agentcore_new_store")
    PostgresStore.open(new, vector_search="pgvector").close()
    assert postgres_schema(old) == postgres_schema(new)
