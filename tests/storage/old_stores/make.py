"""Write the old-store fixtures: a database of every table, made by an older agentcore.

Run once with the code whose databases must keep opening (``--code``, a checkout of
that commit): it fills a SQLite file and a PostgreSQL database through that code's
public Store API, dumps both as SQL (``sqlite.sql``, ``postgres.sql``: the old schema,
its migration ledger and the rows) and writes what that code read back from them
(``expected.json``). ``test_old_stores.py`` loads the dumps and reads every row back
through the current code. The files here were made from a4b6b69 (before the SQLite
and PostgreSQL stores became one SQL store):

    git archive a4b6b69 agentcore | tar -x -C /tmp/old
    python tests/storage/old_stores/make.py --code /tmp/old --postgres URL
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STEMS = ["blade", "canteen", "rotterdam", "nothing"]


def fill(store: Any) -> dict[str, Any]:
    """One or more rows in every table, through the Store API; what to expect back."""
    import numpy as np

    from agentcore.events import Event
    from agentcore.models import Agent, ApiKey, Document, Problem
    from agentcore.storage.records import StoredMessage, StoredResult

    org = store.ensure_organization("acme").id
    keys = []
    for number, name in enumerate(["ci", None]):
        key = ApiKey(
            id=f"key_old{number}",
            organization="acme",
            environment="test",
            scopes=["read", "write"] if number == 0 else ["read"],
            prefix="ak_test_",
            last4=f"abc{number}",
            name=name,
            created_at=WHEN,
        )
        store.insert_key(key, org, f"digest-{number}")
        keys.append(key.id)
    store.update_key("key_old0", last_used_at="2026-01-03T00:00:00.000Z")
    store.update_key("key_old1", revoked_at="2026-01-04T00:00:00.000Z")

    agents = []
    for number, status in enumerate(["draft", "deployed", "archived"]):
        agent = Agent(
            id=f"agt_old{number}",
            name=f"Agent {number}",
            role="support",
            status="draft",
            system_prompt="Be kind.",
            tools=[{"name": "lookup", "description": "d", "parameters": {"type": "object"}}],
            model="extractive" if number else None,
            handoff_on_no_answer=number == 1,
            created_at=WHEN,
            updated_at=WHEN,
        )
        store.insert_agent(org, "test", agent)
        if status != "draft":
            changed = agent.model_copy(update={"status": status})
            store.update_agent(org, "test", changed, expected_status="draft")
        agents.append(agent.id)

    rng = np.random.default_rng(7)

    def document(number: int, chunks: int, status: str = "ready") -> Document:
        return Document(
            id=f"doc_old{number}",
            source=f"file{number}.txt",
            content_type="text/plain",
            pages=2,
            chunks=chunks,
            bytes=1000 + number,
            created_at=WHEN,
            status=status,  # type: ignore[arg-type]
        )

    store.claim_index_dtype(org, "test", "float32")
    for number in range(3):
        vectors = rng.standard_normal((3, 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.insert_document(
            org,
            "test",
            document(number, 3),
            [(f"text {number}.{i}", [1, 2] if i else [1], [0, 5] if i else [0]) for i in range(3)],
            "hashing-v1",
            vectors,
            np.array([True, number != 1, True]),
            (4 + number, {"blade": 2, "canteen": number, "rotterdam": 1}),
        )
    store.delete_document(org, "test", "doc_old2")  # a tombstone with its counts
    extra = rng.standard_normal((1, 8)).astype(np.float32)
    chunk = next(ids for d, ids, _ in store.iter_chunk_texts(org, "test") if d == "doc_old1")[1]
    store.add_vectors(org, "test", "doc_old1", "hashing-v1", 8, np.array([chunk]), extra / 1.0)
    store.insert_processing_document(
        org,
        "test",
        document(3, 0, "processing"),
        kind="file",
        filename="upload.pdf",
        content_type="application/pdf",
        data=b"%PDF-1.4 \x00\xff bytes",
        now=1000.0,
    )
    store.insert_processing_document(
        org,
        "test",
        document(4, 0, "processing"),
        kind="text",
        filename="broken.txt",
        content_type=None,
        data=b"x",
        now=1001.0,
    )
    problem = Problem(type="about:blank", title="Bad", status=422, detail="no", code="no_text")
    store.fail_document(org, "test", "doc_old4", problem)

    subscriptions = []
    for events in (["agent.action"], ["agent.action", "agent.error"]):
        subscriptions.append(
            store.insert_subscription(
                org,
                "test",
                url="https://example.com/h",
                events=events,
                secret="whsec_a",
                description="d",
            ).public.id
        )
    store.update_subscription(
        subscriptions[1], previous_secret="whsec_0", previous_secret_expires_at=5000.0
    )
    for number in range(2):
        event = Event(
            id=f"evt_old{number}",
            type="agent.action",
            organization_id=org,
            environment="test",
            timestamp="2026-01-02T03:04:05Z",
            data={"n": number, "nested": {"a": [1, 2]}},
        )
        store.record_event(event, now=2000.0 + number)
    (due, *_rest) = store.claim_due_deliveries(now=2000.5, lease_seconds=30, limit=1)
    store.record_attempt(
        due,
        attempted_at="2026-01-02T03:04:06Z",
        status_code=500,
        error="boom",
        duration_ms=12.5,
        outcome="pending",
        next_attempt_at=2100.0,
        subscription_changes={"failing_since": 2000.5},
    )

    conversation = store.create_conversation(org, "test", agents[1])
    store.add_messages(
        conversation,
        [
            StoredMessage("user", "Where are the blades?", []),
            StoredMessage("assistant", "Rotterdam.", [{"source": "file0.txt", "pages": [1]}]),
        ],
    )
    store.claim_idempotency_key(org, "test", "idem-done", "fp1", now=3000.0, ttl=1e9)
    store.finish_idempotency_key(org, "test", "idem-done", StoredResult(201, '{"ok":true}'))
    store.claim_idempotency_key(org, "test", "idem-open", "fp2", now=3000.0, ttl=1e9)
    store.take_token("key_old0", rate=1.0, burst=5.0, now=4000.0)

    return {"org": org, "conversation": conversation, "subscriptions": subscriptions}


# Fields the models gained after these stores were made: left out of ``read_back`` (what
# the old code read), and checked by test_old_stores to read as their defaults.
ADDED_SINCE = {
    "agents": {"knowledge", "mcp_servers"},
    "documents": {"metadata", "external_id", "access"},
}


def read_back(store: Any, made: dict[str, Any]) -> dict[str, Any]:
    """Everything the Store API reads from the filled store, as JSON values."""
    org = made["org"]
    ws = (org, "test")
    documents, _ = store.list_documents(*ws, limit=100, starting_after=None)
    chunk_ids = [i for _, ids, _ in store.iter_chunk_texts(*ws) for i in ids]
    state = store.knowledge_state(*ws)
    ids, vectors = store.load_vectors(*ws, state.dimension)
    changes = store.changes_since(*ws, 1, max_rows=100)
    subscriptions, _ = store.list_subscriptions(*ws, limit=100, starting_after=None)
    return {
        "organization": store.get_organization_by_name("acme").model_dump(mode="json"),
        "keys": [key.model_dump(mode="json") for key in store.list_keys(org)],
        "found_keys": [
            [found[0].id, found[1], found[2]]
            for found in (store.find_key_by_digest(f"digest-{n}") for n in range(2))
        ],
        "agents": [
            agent.model_dump(mode="json", exclude=ADDED_SINCE["agents"])
            for agent in store.list_agents(
                *ws, limit=100, starting_after=None, statuses=("draft", "deployed", "archived")
            )[0]
        ],
        "documents": [
            d.model_dump(mode="json", exclude=ADDED_SINCE["documents"]) for d in documents
        ],
        "chunks": {
            str(i): [c.document_id, c.source, c.text, c.pages, c.page_offsets]
            for i, c in store.get_chunks(chunk_ids).items()
        },
        "chunk_texts": [[d, i, t] for d, i, t in store.iter_chunk_texts(*ws)],
        "state": [state.embedder, state.dimension, state.version, state.index_dtype],
        "vector_ids": ids.tolist(),
        "vectors": vectors.tolist(),
        "count_vectors": store.count_vectors(*ws),
        "changes_since_1": [
            changes.version,
            changes.added_ids.tolist(),
            changes.added_vectors.tolist(),
            sorted(changes.deleted_ids.tolist()),
        ],
        "term_counts": list(store.term_counts(*ws, STEMS)),
        "subscriptions": [
            {
                "public": s.public.model_dump(mode="json"),
                "secret": s.secret,
                "previous_secret": s.previous_secret,
                "previous_secret_expires_at": s.previous_secret_expires_at,
                "failing_since": s.failing_since,
            }
            for s in subscriptions
        ],
        "deliveries": {
            sub: [
                d.model_dump(mode="json")
                for d in store.list_deliveries(*ws, sub, limit=100, starting_after=None)[0]
            ]
            for sub in made["subscriptions"]
        },
        "next_due_at": store.next_due_at(),
        "conversation_agent": store.get_conversation(*ws, made["conversation"]).agentId,
        "messages": [
            [m.role, m.content, m.citations]
            for m in store.recent_messages(made["conversation"], 10)
        ],
    }


def dump_sqlite(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return "\n".join(conn.iterdump()) + "\n"
    finally:
        conn.close()


def dump_postgres(url: str) -> str:
    """The schema and rows of ``url``'s public tables as SQL (no pg_dump needed)."""
    import psycopg
    from psycopg import sql

    lines = ["CREATE EXTENSION IF NOT EXISTS vector;"]
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY c.oid"
            )
        ]
        for table in tables:
            columns = conn.execute(
                "SELECT column_name, format_type(a.atttypid, a.atttypmod), is_nullable,"
                " column_default, is_identity, identity_generation, a.attstorage"
                " FROM information_schema.columns c JOIN pg_attribute a"
                " ON a.attrelid = %s::regclass AND a.attname = c.column_name"
                " WHERE table_name = %s ORDER BY ordinal_position",
                [table, table],
            ).fetchall()
            parts = []
            for name, kind, nullable, default, identity, generation, _storage in columns:
                part = f"{name} {kind}"
                if identity == "YES":
                    part += f" GENERATED {generation} AS IDENTITY"
                if default is not None:
                    part += f" DEFAULT {default}"
                if nullable == "NO":
                    part += " NOT NULL"
                parts.append(part)
            for (definition,) in conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'c')"
                " ORDER BY contype, conname",
                [table],
            ):
                parts.append(definition)
            lines.append(f"CREATE TABLE {table} (\n    " + ",\n    ".join(parts) + "\n);")
            for name, *_, storage in columns:
                if storage == "e":
                    lines.append(f"ALTER TABLE {table} ALTER COLUMN {name} SET STORAGE EXTERNAL;")
        for table in tables:
            for (definition,) in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN"
                " (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)"
                " ORDER BY indexname",
                [table, table],
            ):
                lines.append(definition.replace("public.", "") + ";")
        for table in tables:
            for (definition,) in conn.execute(
                "SELECT 'ALTER TABLE ' || %s || ' ADD ' || pg_get_constraintdef(oid)"
                " FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'"
                " ORDER BY conname",
                [table, table],
            ):
                lines.append(definition + ";")
        for table in tables:
            cursor = conn.execute(
                sql.SQL("SELECT * FROM {} ORDER BY 1").format(sql.Identifier(table))
            )
            names = [column.name for column in cursor.description or []]
            for row in cursor.fetchall():
                values = sql.SQL(", ").join(sql.Literal(value) for value in row)
                statement = sql.SQL(
                    "INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({});"
                ).format(
                    sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, names)), values
                )
                lines.append(statement.as_string(conn))
            for name, identity in conn.execute(
                "SELECT column_name, is_identity FROM information_schema.columns"
                " WHERE table_name = %s",
                [table],
            ):
                if identity == "YES":
                    lines.append(
                        f"SELECT setval(pg_get_serial_sequence('{table}', '{name}'),"
                        f" (SELECT MAX({name}) FROM {table}));"
                    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="checkout of the old agentcore")
    parser.add_argument("--postgres", required=True, help="URL of an empty PostgreSQL database")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    import agentcore

    assert Path(agentcore.__file__).is_relative_to(Path(args.code).resolve()), agentcore.__file__
    from agentcore.storage.postgres import PostgresStore
    from agentcore.storage.sqlite import SQLiteStore

    expected: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old.db"
        store = SQLiteStore.open(path)
        made = fill(store)
        expected["sqlite"] = {"made": made, "read": read_back(store, made)}
        store.close()
        (HERE / "sqlite.sql").write_text(dump_sqlite(path))
    store = PostgresStore.open(args.postgres, vector_search="pgvector")
    made = fill(store)
    expected["postgres"] = {"made": made, "read": read_back(store, made)}
    store.close()
    (HERE / "postgres.sql").write_text(dump_postgres(args.postgres))
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
