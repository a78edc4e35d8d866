"""SQLite checkpoints run on the core's runtime (``Database.checkpoint``), never inside a
request's COMMIT, and only after commits."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from agentcore import AgentCore
from agentcore.storage.sqlite.connection import BACKSTOP_CHECKPOINT_PAGES, Database


def _fill(db: Database, rows: int) -> None:
    with db.write() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, data BLOB)")
    for _ in range(rows):
        with db.write() as conn:
            conn.execute("INSERT INTO blobs (data) VALUES (?)", [os.urandom(16_384)])


def test_commits_leave_checkpoints_to_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    db = Database(str(path))
    try:
        conn = db.connection()
        # a commit checkpoints by itself only far past SQLite's default of 1,000 pages
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_CHECKPOINT_PAGES
        _fill(db, 400)  # ~6.5 MB of WAL: past the default threshold, far below ours
        assert path.stat().st_size < 1_000_000  # the commits copied nothing into the file
        assert db.checkpoint()  # the frames are copied into the database file (it grows)
        assert path.stat().st_size > 6_000_000
        assert not db.checkpoint()  # nothing committed since: no work
        _fill(db, 1)
        assert db.checkpoint()
        assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 401
    finally:
        db.close()
    assert not db.checkpoint()  # a closed database is left alone


def test_memory_databases_need_no_checkpoints() -> None:
    memory = Database(":memory:")
    try:
        assert memory.checkpoint_interval is None
        _fill(memory, 2)
        assert not memory.checkpoint()
    finally:
        memory.close()


def test_a_started_core_checkpoints_on_its_runtime_and_stop_ends_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "core.db"
    core = AgentCore.open(path)
    try:
        assert path.with_name("core.db-wal").stat().st_size > 0  # the migrations
        size = path.stat().st_size
        core.start()
        ws = core.workspace("acme", "test")
        for n in range(50):
            ws.agents.create(name=f"agent {n}", system_prompt="x" * 20_000)
        give_up = time.monotonic() + 120  # only guards a hang
        while path.stat().st_size <= size + 500_000:
            assert time.monotonic() < give_up, "the WAL was never checkpointed"
            time.sleep(0.05)
        assert any(t.name == "agentcore-checkpoint" for t in threading.enumerate())
        core.stop()
        assert not any(t.name == "agentcore-checkpoint" for t in threading.enumerate())
    finally:
        core.close()


def test_data_survives_reopening_after_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = Database(str(path))
    _fill(db, 50)
    db.checkpoint()
    _fill(db, 5)
    db.close()
    again = Database(str(path))
    try:
        assert again.connection().execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 55
    finally:
        again.close()
