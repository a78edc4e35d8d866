"""SQLite remembers each workspace's knowledge state per thread while nothing is written.

Every search reads the workspace's state (and a search over HTTP reads it twice), so
the SQLite store answers a repeated read from a per-thread cache for as long as the
database is unchanged (``PRAGMA data_version`` and the store's own commit count). A
write by another core, another process or another thread is read at the very next
call; inside a transaction on the calling thread the row is read as it is there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import run_cli

from agentcore import AgentCore
from agentcore.storage.records import KnowledgeState

ALPHA = "The red pump in hall four is serviced every spring by the night shift."
BETA = "Quantum flux capacitors are kept in the basement next to the zebras."


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def core(db: Path) -> Iterator[AgentCore]:
    with AgentCore.open(db, start_workers=False) as opened:
        opened.workspace("acme", "test").knowledge.ingest_text("alpha.txt", ALPHA)
        yield opened


def state(core: AgentCore) -> KnowledgeState:
    ws = core.workspace("acme", "test", create=False)
    return core.store.knowledge_state(ws.organization_id, ws.environment)


def traced(core: AgentCore) -> list[str]:
    """The statements this thread's connection runs from now on."""
    seen: list[str] = []
    core.store.db.connection().set_trace_callback(seen.append)  # type: ignore[attr-defined]
    return seen


def reads_the_row(statements: list[str]) -> bool:
    return any("FROM knowledge_state" in sql for sql in statements)


def test_an_unchanged_state_is_answered_without_reading_the_row(core: AgentCore) -> None:
    first = state(core)
    assert first.version >= 1 and first.embedder is not None
    seen = traced(core)
    assert state(core) == first
    assert any("data_version" in sql for sql in seen)  # the one check it makes
    assert not reads_the_row(seen)


def test_a_write_by_another_core_is_read_at_the_next_call(core: AgentCore, db: Path) -> None:
    before = state(core)
    assert state(core) == before  # remembered now
    with AgentCore.open(db, start_workers=False) as other:
        other.workspace("acme", "test").knowledge.ingest_text("beta.txt", BETA)
    assert state(core).version == before.version + 1


def test_a_write_by_another_process_is_read_at_the_next_call(
    core: AgentCore, db: Path, tmp_path: Path
) -> None:
    before = state(core)
    assert state(core) == before
    beta = tmp_path / "beta.txt"
    beta.write_text(BETA)
    done = run_cli("--db", str(db), "ingest", "--org", "acme", "--env", "test", str(beta))
    assert done.returncode == 0, done.stderr
    assert state(core).version == before.version + 1


def test_a_write_on_another_thread_of_the_same_core_is_read_at_the_next_call(
    core: AgentCore,
) -> None:
    before = state(core)
    assert state(core) == before
    writer = threading.Thread(
        target=lambda: core.workspace("acme", "test").knowledge.ingest_text("beta.txt", BETA)
    )
    writer.start()
    writer.join(timeout=60)
    assert state(core).version == before.version + 1


def test_a_write_on_this_thread_is_read_at_the_next_call(core: AgentCore) -> None:
    before = state(core)
    assert state(core) == before
    core.workspace("acme", "test").knowledge.ingest_text("beta.txt", BETA)
    assert state(core).version == before.version + 1


def test_a_workspace_read_before_its_first_write_sees_that_write(core: AgentCore) -> None:
    empty = core.workspace("acme", "live")
    assert core.store.knowledge_state(empty.organization_id, "live") == KnowledgeState(
        None, None, 0
    )
    empty.knowledge.ingest_text("alpha.txt", ALPHA)
    after = core.store.knowledge_state(empty.organization_id, "live")
    assert after.version == 1 and after.embedder is not None


class Rollback(Exception):
    pass


def test_inside_a_transaction_the_row_is_read_as_it_is_there(core: AgentCore) -> None:
    before = state(core)
    assert state(core) == before  # remembered outside the transaction
    ws = core.workspace("acme", "test", create=False)
    with pytest.raises(Rollback), core.store.db.write() as conn:
        conn.execute(
            "UPDATE knowledge_state SET version = version + 5"
            " WHERE organization_id = ? AND environment = ?",
            [ws.organization_id, ws.environment],
        )
        assert state(core).version == before.version + 5  # its own uncommitted write
        raise Rollback
    assert state(core) == before  # rolled back: the remembered state is right again


def test_inside_a_snapshot_the_row_is_read(core: AgentCore) -> None:
    state(core)
    with core.store.db.snapshot():
        seen = traced(core)
        state(core)
    assert reads_the_row(seen)
