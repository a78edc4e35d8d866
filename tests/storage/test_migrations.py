"""Migration scripts: split into whole statements, applied atomically on a real SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database as UtilsDatabase
from sqlite_utils import Migrations

from agentcore.storage.sql.migrations import run_script, statements
from agentcore.storage.sqlite import SQLiteStore

TRIGGER_SCRIPT = """
CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL, log TEXT);
CREATE TABLE audit (note_id INTEGER NOT NULL, what TEXT NOT NULL);
-- a comment; with a semicolon
CREATE TRIGGER notes_audit AFTER INSERT ON notes
BEGIN
    INSERT INTO audit (note_id, what) VALUES (new.id, 'inserted; logged');
    UPDATE notes SET log = 'a;b' WHERE id = new.id;
END;
/* a block comment; also with one */
INSERT INTO notes (body) VALUES ('first; second')
"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("SELECT 1; SELECT 2;", ["SELECT 1;", "SELECT 2;"]),
        ("SELECT 1; SELECT 2", ["SELECT 1;", "SELECT 2"]),  # the last ';' is optional
        ("SELECT 'a;b'; SELECT \"c;d\"", ["SELECT 'a;b';", 'SELECT "c;d"']),
        ("SELECT 'it''s; fine'", ["SELECT 'it''s; fine'"]),
        ("", []),
        (" ;; \n ;", []),
        ("SELECT 1; -- trailing; comment", ["SELECT 1;", "-- trailing; comment"]),
        (
            "CREATE TRIGGER t AFTER INSERT ON x BEGIN SELECT ';'; SELECT 2; END; SELECT 3",
            ["CREATE TRIGGER t AFTER INSERT ON x BEGIN SELECT ';'; SELECT 2; END;", "SELECT 3"],
        ),
    ],
)
def test_statements_are_whole(script: str, expected: list[str]) -> None:
    assert list(statements(script)) == expected


@pytest.mark.parametrize(
    "script",
    [
        "SELECT 'never closed; SELECT 1",
        "CREATE TRIGGER t AFTER INSERT ON x BEGIN SELECT 1;",  # no END
        "SELECT 1; /* open comment; SELECT 2",
    ],
)
def test_unfinished_script_is_refused(script: str) -> None:
    with pytest.raises(ValueError, match="unfinished SQL statement"):
        list(statements(script))


def apply(store: SQLiteStore, extra: Migrations) -> None:
    """Apply ``extra`` the way ``SQLiteStore.migrate`` applies the schema."""
    with store.db.write() as conn:
        extra.apply(UtilsDatabase(conn))


def test_migration_with_a_trigger_and_semicolons_in_strings(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path / "core.db")
    extra = Migrations("test-extra")

    @extra()
    def m001_notes(db: UtilsDatabase) -> None:
        run_script(db, TRIGGER_SCRIPT)

    apply(store, extra)
    store.close()

    conn = sqlite3.connect(tmp_path / "core.db")  # a fresh connection: it was committed
    assert conn.execute("SELECT body, log FROM notes").fetchall() == [("first; second", "a;b")]
    assert conn.execute("SELECT note_id, what FROM audit").fetchall() == [(1, "inserted; logged")]
    conn.execute("INSERT INTO notes (body) VALUES ('again')")  # the trigger is whole
    assert conn.execute("SELECT COUNT(*) FROM audit").fetchone() == (2,)
    applied = conn.execute(
        "SELECT name FROM _sqlite_migrations WHERE migration_set = 'test-extra'"
    ).fetchall()
    assert applied == [("m001_notes",)]
    conn.close()


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path / "core.db")
    store.ensure_organization("acme")
    extra = Migrations("test-extra")

    @extra()
    def m001_broken(db: UtilsDatabase) -> None:
        run_script(
            db,
            "CREATE TABLE half (x TEXT); INSERT INTO half VALUES ('a;b');"
            " INSERT INTO no_such_table VALUES (1);",
        )

    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        apply(store, extra)
    with store.db.read() as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "half" not in tables
        assert "organizations" in tables
        assert not conn.execute(
            "SELECT 1 FROM _sqlite_migrations WHERE migration_set = 'test-extra'"
        ).fetchall()
    assert store.get_organization_by_name("acme") is not None  # earlier data is intact
    store.close()


def test_the_schema_migrations_apply_once(tmp_path: Path) -> None:
    path = tmp_path / "core.db"
    SQLiteStore.open(path).close()
    store = SQLiteStore.open(path)  # a second open finds nothing pending
    with store.db.read() as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = 'agentcore' ORDER BY id"
            )
        ]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert names[:5] == [
        "m001_tenancy_and_agents",
        "m002_knowledge",
        "m003_events_and_webhooks",
        "m004_chat_and_idempotency",
        "m005_chunk_page_offsets",
    ]
    assert {"api_keys", "agents", "chunks", "webhook_deliveries", "idempotency_keys"} <= tables
    store.close()
