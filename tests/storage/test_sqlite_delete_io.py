"""A delete of large rows writes only the pages that change, not the freed ones."""

from __future__ import annotations

import os
from pathlib import Path

from agentcore.storage.sqlite.connection import Database


def test_deleting_a_large_blob_does_not_rewrite_its_freed_pages(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(str(path))
    try:
        conn = db.connection()
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 2  # FAST
        with db.write() as c:
            c.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)")
            c.execute("INSERT INTO blobs (data) VALUES (?)", [os.urandom(1_500_000)])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size == 0
        with db.write() as c:
            c.execute("DELETE FROM blobs")
        # a handful of b-tree and freelist pages; zeroing the freed ones would write
        # all ~370 of them (1.5 MB) to the WAL again
        assert 0 < wal.stat().st_size < 100_000
        assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 0
    finally:
        db.close()


def test_deleted_rows_are_gone_after_reopening(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    db = Database(str(path))
    with db.write() as c:
        c.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)")
        for _ in range(3):
            c.execute("INSERT INTO blobs (data) VALUES (?)", [os.urandom(200_000)])
    with db.write() as c:
        c.execute("DELETE FROM blobs WHERE id = 2")
    db.close()
    again = Database(str(path))
    try:
        rows = again.connection().execute("SELECT id FROM blobs ORDER BY id").fetchall()
        assert [r[0] for r in rows] == [1, 3]
    finally:
        again.close()
