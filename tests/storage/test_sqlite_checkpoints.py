"""SQLite checkpoints run on the store's own thread, never inside a request's COMMIT."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentcore.storage.sqlite.connection import BACKSTOP_CHECKPOINT_PAGES, Database


def _fill(db: Database, rows: int) -> None:
    with db.write() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, data BLOB)")
    for _ in range(rows):
        with db.write() as conn:
            conn.execute("INSERT INTO blobs (data) VALUES (?)", [os.urandom(16_384)])


def test_commits_leave_checkpoints_to_the_background(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(str(path))
    try:
        conn = db.connection()
        # a commit checkpoints by itself only far past SQLite's default of 1,000 pages
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_CHECKPOINT_PAGES
        _fill(db, 400)  # ~6.5 MB of WAL: past the default threshold, far below ours
        # the checkpointer copies the frames into the database file (it grows) by itself
        give_up = time.monotonic() + 30  # only guards a hang
        while path.stat().st_size < 6_000_000:
            assert time.monotonic() < give_up, "the WAL was never checkpointed"
            time.sleep(0.05)
        assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 400
    finally:
        db.close()


def test_close_stops_the_checkpointer_and_memory_databases_have_none(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "b.db"))
    _fill(db, 3)
    db.close()
    assert db._checkpointer is not None and not db._checkpointer.is_alive()
    memory = Database(":memory:")
    try:
        assert memory._checkpointer is None
    finally:
        memory.close()


def test_data_survives_reopening_after_background_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = Database(str(path))
    _fill(db, 50)
    db.close()
    again = Database(str(path))
    try:
        assert again.connection().execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 50
    finally:
        again.close()
