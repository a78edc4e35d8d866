"""An ingestion commit writes fewer pages: the unused ``chunks_workspace`` index is gone.

Migration m012 drops it from old files (their chunks stay readable and deletable), and
the queries that read chunks still use an index rather than scanning the table.
"""

from __future__ import annotations

from pathlib import Path

from sqlite_utils import Database as UtilsDatabase

from agentcore import AgentCore
from agentcore.storage.sqlite.migrations import migrations


def _indexes(core: AgentCore) -> set[str]:
    with core.store.db.read() as conn:
        return {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'chunks'"
            )
        }


def test_a_new_file_has_no_chunks_workspace_index(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "new.db", start_workers=False)
    try:
        assert _indexes(core) == {"chunks_document"}
        ws = core.workspace("acme", "test")
        document = ws.knowledge.ingest_text("a.txt", "Blades are stored in Rotterdam.")
        with core.store.db.read() as conn:
            # the chunk queries still go through an index, never a full scan
            for sql, args in [
                ("SELECT id FROM chunks WHERE document_id = ?", [document.id]),
                ("DELETE FROM chunks WHERE document_id = ?", [document.id]),
                ("SELECT text FROM chunks WHERE id IN (?)", [1]),
            ]:
                plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
                assert "SCAN" not in plan, (sql, plan)
        assert ws.knowledge.search("Rotterdam blades").results
    finally:
        core.close()


def test_the_migration_drops_the_index_and_keeps_the_chunks(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    core = AgentCore.open(path, start_workers=False)
    ws = core.workspace("acme", "test")
    kept = ws.knowledge.ingest_text("a.txt", "Blades are stored in Rotterdam.")
    gone = ws.knowledge.ingest_text("b.txt", "The canteen opens at eight.")
    core.close()
    # make it an old file: the index back, the migration not yet applied
    old = UtilsDatabase(str(path))
    old.execute("CREATE INDEX chunks_workspace ON chunks (organization_id, environment)")
    old.execute(
        "DELETE FROM _sqlite_migrations WHERE migration_set = 'agentcore'"
        " AND name = 'm012_drop_chunks_workspace_index'"
    )
    old.conn.commit()
    assert "chunks_workspace" in {index.name for index in old["chunks"].indexes}
    old.close()

    again = AgentCore.open(path, start_workers=False)
    try:
        assert _indexes(again) == {"chunks_document"}
        ws = again.workspace("acme", "test")
        assert [hit.document_id for hit in ws.knowledge.search("Rotterdam blades").results][:1] == [
            kept.id
        ]
        ws.knowledge.delete(gone.id)
        assert [d.id for d in ws.knowledge.list().documents] == [kept.id]
        assert "m012_drop_chunks_workspace_index" in {
            name
            for (name,) in again.store.db.connection().execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = 'agentcore'"
            )
        }
    finally:
        again.close()
    reopened = UtilsDatabase(str(path))
    try:
        assert migrations.pending(reopened) == []  # applied once, nothing left
    finally:
        reopened.close()
