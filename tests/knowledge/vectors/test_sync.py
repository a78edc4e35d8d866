"""Incremental index catch-up: a cached index applies the store's change log.

Two cores on one SQLite file (separate stores, as two processes would have), and a
real second process writing through the CLI, must see each other's writes at the next
search, by applying only what changed, never by reloading the workspace.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from helpers import index_loads, open_seen, run_cli, run_python

from agentcore import AgentCore
from agentcore.knowledge.vectors import WorkspaceIndexes, adopt
from agentcore.schema import Document
from agentcore.storage.base import Store
from agentcore.workspace import Workspace

pytestmark = pytest.mark.both_stores

ALPHA = "Alpha manual. The red pump needs oil every week. " * 5
BETA = "Beta guide. Quantum flux capacitors hum when charged by zebras. " * 5
GAMMA = "Gamma notes. Vintage typewriters jam on humid mornings in Lisbon. " * 5


def _ws(core: AgentCore) -> Workspace:
    return core.workspace("acme", "test")


def _cache(core: AgentCore) -> WorkspaceIndexes:
    return core.indexes


def _sources(core: AgentCore, query: str) -> list[str]:
    return [r.source for r in _ws(core).knowledge.search(query, top_k=3).results]


def test_search_after_another_cores_write_applies_only_the_delta(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    assert _sources(b, "red pump oil")[0] == "alpha.txt"  # B loads the workspace once
    assert index_loads(b) == (1, 0)

    beta = _ws(a).knowledge.ingest_text("beta.txt", BETA)
    assert _sources(b, "quantum flux capacitors zebras")[0] == "beta.txt"
    assert index_loads(b) == (1, 1)

    _ws(a).knowledge.delete(beta.id)
    assert "beta.txt" not in _sources(b, "quantum flux capacitors zebras")
    assert index_loads(b) == (1, 2)

    # and the other way round: A's cached index catches up with B's write
    _ws(b).knowledge.ingest_text("gamma.txt", GAMMA)
    assert _sources(a, "typewriters jam humid Lisbon")[0] == "gamma.txt"
    assert index_loads(a)[0] <= 1


def test_a_search_with_nothing_changed_reads_nothing_more(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    for _ in range(3):
        assert _sources(b, "red pump")[0] == "alpha.txt"
    assert index_loads(b) == (1, 0)


def test_several_writes_in_between_are_applied_as_one_delta(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    alpha = _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    _sources(b, "red pump")
    _ws(a).knowledge.ingest_text("beta.txt", BETA)
    _ws(a).knowledge.ingest_text("gamma.txt", GAMMA)
    _ws(a).knowledge.delete(alpha.id)
    found = {r.source for r in _ws(b).knowledge.search("pump flux typewriters", top_k=10).results}
    assert found == {"beta.txt", "gamma.txt"}
    assert index_loads(b) == (1, 1)
    assert len(_cache(b).get(*_key(b))) == len(_cache(a).get(*_key(a)))


def _key(core: AgentCore) -> tuple[str, str]:
    ws = _ws(core)
    return ws.organization_id, ws.environment


def test_a_gap_above_the_threshold_reloads_the_workspace(store_url: str) -> None:
    a = open_seen(store_url, start_workers=False)
    b = open_seen(store_url, start_workers=False, index_catchup_max_rows=0)
    with a, b:
        _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
        _sources(b, "red pump")
        _ws(a).knowledge.ingest_text("beta.txt", BETA)
        assert _sources(b, "quantum flux capacitors zebras")[0] == "beta.txt"
        assert index_loads(b) == (2, 0)


def test_own_writes_keep_the_cached_index_without_reloading(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, _ = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    _sources(a, "red pump")
    _ws(a).knowledge.ingest_text("beta.txt", BETA)
    assert _sources(a, "quantum flux")[0] == "beta.txt"
    assert index_loads(a)[0] == 1


def test_a_delete_of_a_missing_document_does_not_hide_another_cores_write(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    _sources(a, "red pump")
    _ws(b).knowledge.ingest_text("beta.txt", BETA)  # A's cache is now one version behind
    with pytest.raises(Exception, match="No document"):
        _ws(a).knowledge.delete("doc_missing")
    assert _sources(a, "quantum flux capacitors zebras")[0] == "beta.txt"


# the store's change log --------------------------------------------------------------


def _vectors(n: int, d: int = 8, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    core = AgentCore.open(store_url, start_workers=False)
    yield core.store
    core.close()


def _document(store: Store, name: str, n: int, seed: int) -> list[int]:
    document = Document(
        id=f"doc_{name}",
        source=f"{name}.txt",
        content_type="text/plain",
        pages=1,
        chunks=n,
        bytes=1,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    chunks = [(f"chunk {i}", [1], [0]) for i in range(n)]
    keep = np.ones(n, dtype=bool)
    written = store.insert_document(
        "org", "test", document, chunks, "e", _vectors(n, seed=seed), keep
    )
    return written.chunk_ids


def test_changes_since_reports_rows_added_and_ids_deleted(store: Store) -> None:
    empty = store.changes_since("org", "test", 0, max_rows=10)
    assert empty is not None and empty.version == 0 and empty.added_ids.size == 0
    a_ids = _document(store, "a", 3, seed=0)
    b_ids = _document(store, "b", 2, seed=1)
    changes = store.changes_since("org", "test", 1, max_rows=10)
    assert changes is not None and changes.version == 2
    assert changes.added_ids.tolist() == b_ids
    np.testing.assert_array_equal(changes.added_vectors, _vectors(2, seed=1))
    assert changes.deleted_ids.size == 0

    assert store.delete_document("org", "test", "doc_a")
    changes = store.changes_since("org", "test", 0, max_rows=10)
    assert changes is not None and changes.version == 3
    assert changes.added_ids.tolist() == b_ids  # doc_a's rows are gone ...
    assert sorted(changes.deleted_ids.tolist()) == a_ids  # ... and tombstoned
    since_one = store.changes_since("org", "test", 1, max_rows=10)
    assert since_one is not None and sorted(since_one.deleted_ids.tolist()) == a_ids
    up_to_date = store.changes_since("org", "test", 3, max_rows=0)
    assert up_to_date is not None and up_to_date.version == 3
    assert not store.delete_document("org", "test", "doc_a")  # no change, no version
    assert store.knowledge_state("org", "test").version == 3


def test_changes_since_refuses_what_it_cannot_bridge(store: Store) -> None:
    ids = _document(store, "a", 3, seed=0)
    assert store.changes_since("org", "test", 0, max_rows=2) is None  # 3 rows > 2
    assert store.changes_since("org", "test", 0, max_rows=3) is not None  # boundary
    assert store.changes_since("org", "test", 5, max_rows=10) is None  # ahead of the store
    segments = [("doc_a", np.asarray(ids, dtype=np.int64), _vectors(3))]
    store.replace_all_vectors("org", "test", "e2", segments, 8)
    version = store.knowledge_state("org", "test").version
    assert store.changes_since("org", "test", 1, max_rows=10) is None  # before a re-embed
    after = store.changes_since("org", "test", version, max_rows=10)
    assert after is not None and after.added_ids.size == 0


# a real second process ---------------------------------------------------------------

DELETE_SCRIPT = """
import sys
from agentcore import AgentCore

with AgentCore.open(sys.argv[1], start_workers=False) as core:
    ws = core.workspace("acme", "test")
    ws.knowledge.delete(sys.argv[2])
"""


@pytest.mark.slow
def test_another_process_writes_are_seen_at_the_next_search(store_url: str, tmp_path: Path) -> None:
    db = store_url
    with open_seen(db, start_workers=False) as core:
        _ws(core).knowledge.ingest_text("alpha.txt", ALPHA)
        assert _sources(core, "red pump")[0] == "alpha.txt"

        beta = tmp_path / "beta.txt"
        beta.write_text(BETA)
        done = run_cli("--db", db, "ingest", "--org", "acme", "--env", "test", str(beta))
        assert done.returncode == 0, done.stderr
        assert _sources(core, "quantum flux capacitors zebras")[0] == "beta.txt"

        doc_id = next(d.id for d in _ws(core).knowledge.list().documents if d.source == "beta.txt")
        deleted = run_python(DELETE_SCRIPT, str(db), doc_id)
        assert deleted.returncode == 0, deleted.stderr
        assert "beta.txt" not in _sources(core, "quantum flux capacitors zebras")
        assert index_loads(core) == (1, 2)


# room to grow after a load -------------------------------------------------------------


def test_an_adopted_index_takes_spare_rows_without_copying_the_matrix() -> None:
    index = adopt(np.arange(10), _vectors(10), spare_rows=5)
    size = index.nbytes
    index.add(np.arange(100, 105), _vectors(5, seed=3))  # fills the spare rows exactly
    assert index.nbytes == size and len(index) == 15
    found, _ = index.search(_vectors(5, seed=3)[2], 1)
    assert found.tolist() == [102]
    index.add([200], _vectors(1, seed=4))  # one past the spare room: grows
    assert index.nbytes > size and len(index) == 16


def test_arrays_that_do_not_own_their_memory_are_adopted_as_they_are() -> None:
    base = _vectors(20)
    before = base.copy()
    view = base[:10]  # a view: the index must neither enlarge nor write it
    index = adopt(np.arange(10), view, spare_rows=100)
    # the view is held as it is; the spare rows are a separate tail buffer
    tail = 100 * (view.shape[1] * 4 + 8 + 4)  # a row, its id and its label code
    assert index.nbytes == view.nbytes + np.arange(10).nbytes + tail
    index.add(np.arange(10, 110), _vectors(100, seed=9))
    assert index.nbytes == view.nbytes + np.arange(10).nbytes + tail
    np.testing.assert_array_equal(base, before)


def test_ids_out_of_order_are_adopted_sorted_with_their_spare_rows() -> None:
    """A load whose ids are not ascending (ids a caller assigned) still gets spare
    rows: the first rows added after it must not copy the whole matrix."""
    ids = np.array([50, 10, 40, 20, 30])
    vectors = _vectors(5)
    index = adopt(ids, vectors, spare_rows=3)
    size = index.nbytes
    index.add(np.array([5, 60, 1]), _vectors(3, seed=7))  # fills the spare rows exactly
    assert index.nbytes == size and len(index) == 8
    assert sorted(index.ids().tolist()) == [1, 5, 10, 20, 30, 40, 50, 60]
    for row, i in enumerate(ids.tolist()):
        found, scores = index.search(vectors[row], 1)
        assert found.tolist() == [i] and scores[0] == pytest.approx(1.0, abs=1e-6)
    assert index.remove([40, 60]) == 2 and not index.contains(40)
    index.add([200], _vectors(1, seed=4))  # one past the spare room: grows
    assert index.nbytes > size and len(index) == 7


def test_repeated_ids_out_of_order_are_refused() -> None:
    from agentcore.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as refused:
        adopt(np.array([3, 1, 3]), _vectors(3))
    assert refused.value.code == "duplicate_id"
