"""One conformance suite for every Store: each method on SQLite and on PostgreSQL.

The same assertions run against both backends (the ``store`` fixture is parametrised),
so the PostgreSQL store is held to exactly the SQLite store's contract, including
concurrent delivery claims from two connections.
"""

from __future__ import annotations

import functools
import pickle
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import stored_chunk_ids, summed_rows

from agentcore._ids import new_id
from agentcore._memory_budget import Residency
from agentcore.errors import Conflict, NotFound
from agentcore.events import Event
from agentcore.schema import (
    Agent,
    ApiKey,
    Document,
    DocumentWarning,
    Feedback,
    McpServer,
    Problem,
    Usage,
)
from agentcore.storage.base import (
    BudgetedStore,
    EventWaiter,
    KeywordSnapshotStore,
    ObservableStore,
    ReopenableStore,
    Store,
    VectorSearchStore,
)
from agentcore.storage.records import (
    LOCATOR_SHIFT,
    Backlog,
    PendingTurn,
    StoredClientToken,
    StoredMessage,
    StoredResult,
)
from agentcore.storage.sql import vectors as sql_vectors
from agentcore.storage.sqlite import SQLiteStore

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def open_store(kind: str, request: pytest.FixtureRequest, **options: Any) -> Store:
    if kind == "sqlite":
        path: Path = request.getfixturevalue("tmp_path") / "store.db"
        return SQLiteStore.open(path)
    from agentcore.storage.postgres import PostgresStore

    url = request.getfixturevalue("postgres_url")
    return PostgresStore.open(url, **options)


# PostgreSQL is marked slow: `-m "not slow"` starts no database server
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    instance = open_store(kind, request)
    yield instance
    instance.close()


def org(store: Any, name: str = "acme") -> str:
    return str(store.ensure_organization(name).id)


def make_key(organization: str = "acme", env: str = "test", **kw: Any) -> ApiKey:
    return ApiKey(
        id=new_id("key"),
        organization=organization,
        environment=env,
        scopes=["read", "write"],
        prefix="ak_test_",
        last4="abcd",
        name=kw.get("name"),
        created_at=datetime.now(UTC).replace(microsecond=0),
        expires_at=kw.get("expires_at"),
    )


def make_agent(name: str = "Support", status: str = "draft") -> Agent:
    now = datetime.now(UTC).replace(microsecond=0)
    return Agent(
        id=new_id("agt"),
        name=name,
        role="support",
        status=status,  # type: ignore[arg-type]
        system_prompt="Be kind.",
        tools=[],
        created_at=now,
        updated_at=now,
    )


def make_document(chunks: int = 3) -> Document:
    return Document(
        id=new_id("doc"),
        source="a.txt",
        content_type="text/plain",
        pages=1,
        chunks=chunks,
        bytes=100,
        created_at=datetime.now(UTC).replace(microsecond=0),
    )


def unit(rows: int, d: int = 8, seed: int = 0) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((rows, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def ingest(store: Any, org_id: str, n: int = 3, d: int = 8, seed: int = 0) -> tuple[str, list[int]]:
    document = make_document(n)
    chunks = [(f"chunk {i}", [1], [0]) for i in range(n)]
    keep = np.ones(n, dtype=bool)
    written = store.insert_document(org_id, "test", document, chunks, "e1", unit(n, d, seed), keep)
    return document.id, written.chunk_ids


# organizations and keys ------------------------------------------------------------


def test_organizations(store: Any) -> None:
    first = store.ensure_organization("acme")
    assert store.ensure_organization("acme").id == first.id
    assert store.get_organization_by_name("acme") == first
    assert store.get_organization_by_name("nobody") is None


def test_keys(store: Any) -> None:
    org_id = org(store)
    key = make_key(name="ci")
    store.insert_key(key, org_id, "digest-1")
    found = store.find_key_by_digest("digest-1")
    assert found is not None and found[0].id == key.id and found[1:] == (org_id, "digest-1")
    assert store.find_key_by_digest("missing") is None
    assert store.get_key(key.id).name == "ci"
    assert store.get_key("key_missing") is None
    later = make_key()
    store.insert_key(later, org_id, "digest-2")
    assert {k.id for k in store.list_keys(org_id)} == {key.id, later.id}
    revoked = datetime.now(UTC).replace(microsecond=0)
    store.update_key(key.id, revoked_at=revoked.isoformat(), name="old")
    updated = store.get_key(key.id)
    assert updated.revoked_at == revoked and updated.name == "old"
    # a revocation is seen by the very next lookup
    assert store.find_key_by_digest("digest-1")[0].revoked_at == revoked
    with pytest.raises(ValueError):
        store.update_key(key.id, digest="x")


def make_token(store: Any, org_id: str, key: ApiKey, user: str = "ana", **kw: Any) -> Any:
    now = datetime.now(UTC).replace(microsecond=0)
    return StoredClientToken(
        id=new_id("ctk"),
        organization_id=org_id,
        organization="acme",
        environment="test",
        key_id=key.id,
        key_scopes=["read", "write"],
        user=user,
        groups=kw.get("groups", ["hr"]),
        agents=kw.get("agents"),
        created_at=now,
        expires_at=kw.get("expires_at", now + timedelta(hours=1)),
    )


def test_client_tokens(store: Any) -> None:
    org_id = org(store)
    key = make_key()
    store.insert_key(key, org_id, "key-digest")
    ana = make_token(store, org_id, key, agents=["agt_1"])
    store.insert_client_token(ana, "token-ana")
    found, digest = store.find_client_token_by_digest("token-ana")
    assert digest == "token-ana" and found.id == ana.id and found.organization == "acme"
    assert (found.user, found.groups, found.agents, found.key_scopes) == (
        "ana",
        ["hr"],
        ["agt_1"],
        ["read", "write"],
    )
    assert found.expires_at == ana.expires_at and found.revoked_at is None
    assert found.key_revoked_at is None and found.key_expires_at is None
    assert store.find_client_token_by_digest("missing") is None
    # the minting key's revocation is seen through the token at the next lookup
    now = datetime.now(UTC).replace(microsecond=0)
    store.update_key(key.id, revoked_at=now.isoformat())
    assert store.find_client_token_by_digest("token-ana")[0].key_revoked_at == now
    # revoked by user: only that user's live tokens in that workspace
    bob = make_token(store, org_id, key, "bob", agents=None)
    old = make_token(store, org_id, key, expires_at=now - timedelta(minutes=1))
    store.insert_client_token(bob, "token-bob")
    store.insert_client_token(old, "token-old")
    assert store.find_client_token_by_digest("token-bob")[0].agents is None
    assert store.revoke_client_tokens(org_id, "live", "ana", now=now) == 0
    assert store.revoke_client_tokens(org_id, "test", "ana", now=now) == 1  # not the expired
    assert store.find_client_token_by_digest("token-ana")[0].revoked_at == now
    assert store.revoke_client_tokens(org_id, "test", "ana", now=now) == 0
    # revoked by key (a rotation): every live token it minted
    other = make_key()
    store.insert_key(other, org_id, "other-digest")
    carl = make_token(store, org_id, other, "carl")
    store.insert_client_token(carl, "token-carl")
    assert store.revoke_key_client_tokens(other.id, now=now) == 1
    assert store.find_client_token_by_digest("token-carl")[0].revoked_at == now
    assert store.find_client_token_by_digest("token-bob")[0].revoked_at is None
    # swept by expiry, a bounded number at a time
    assert store.sweep_client_tokens(before=now, limit=10) == 1
    assert store.find_client_token_by_digest("token-old") is None
    assert store.sweep_client_tokens(before=now + timedelta(hours=2), limit=2) == 2
    assert store.sweep_client_tokens(before=now + timedelta(hours=2), limit=2) == 1
    assert store.find_client_token_by_digest("token-bob") is None


def test_keys_are_inserted_together_unless_one_is_usable(store: Any) -> None:
    org_id = org(store)
    now = datetime.now(UTC).replace(microsecond=0)
    first, second = make_key(name="a"), make_key(name="b", expires_at=now - timedelta(hours=1))
    assert store.insert_keys(org_id, [(first, "digest-a"), (second, "digest-b")])
    assert {k.id for k in store.list_keys(org_id)} == {first.id, second.id}
    assert store.find_key_by_digest("digest-b")[0].id == second.id
    # `first` is usable now: nothing is stored
    assert not store.insert_keys(org_id, [(make_key(), "digest-c")], unless_usable_at=now)
    assert store.find_key_by_digest("digest-c") is None
    # revoked, and `second` expired: none is usable, so the new key is stored
    store.update_key(first.id, revoked_at=now.isoformat())
    third = make_key()
    assert store.insert_keys(org_id, [(third, "digest-c")], unless_usable_at=now)
    assert store.find_key_by_digest("digest-c")[0].id == third.id
    # another organization's keys do not count
    other = org(store, "globex")
    assert store.insert_keys(other, [(make_key("globex"), "digest-d")], unless_usable_at=now)


# agents ----------------------------------------------------------------------------


def test_agents_crud_and_paging(store: Any) -> None:
    org_id = org(store)
    agents = [make_agent(f"a{i}") for i in range(5)]
    for agent in agents:
        store.insert_agent(org_id, "test", agent)
    assert store.get_agent(org_id, "test", agents[0].id) == agents[0]
    assert store.get_agent(org_id, "live", agents[0].id) is None
    page, more = store.list_agents(
        org_id, "test", limit=2, starting_after=None, statuses=("draft",)
    )
    assert [a.id for a in page] == [agents[4].id, agents[3].id] and more
    page, more = store.list_agents(
        org_id, "test", limit=10, starting_after=agents[1].id, statuses=("draft",)
    )
    assert [a.id for a in page] == [agents[0].id] and not more
    with pytest.raises(NotFound):
        store.list_agents(org_id, "test", limit=2, starting_after="agt_nope", statuses=("draft",))
    active = agents[0].model_copy(update={"status": "deployed"})
    assert store.update_agent(org_id, "test", active, expected_status="draft")
    assert not store.update_agent(org_id, "test", active, expected_status="draft")
    listed, _ = store.list_agents(
        org_id, "test", limit=10, starting_after=None, statuses=("deployed",)
    )
    assert [a.id for a in listed] == [agents[0].id]


def test_mcp_headers_stored_in_plaintext_are_sealed_in_place(store: Any) -> None:
    org_id = org(store)
    plain = McpServer(label="a", url="https://a.example/mcp").with_sealed_headers('{"K": "1"}')
    sealed = McpServer(label="b", url="https://b.example/mcp").with_sealed_headers("S:x")
    bare = McpServer(label="c", url="https://c.example/mcp")
    agent = make_agent().model_copy(update={"mcp_servers": [plain, sealed, bare]})
    store.insert_agent(org_id, "test", agent)
    store.insert_agent(org_id, "live", make_agent())  # no servers: not touched

    calls: list[str] = []

    def seal(value: str) -> str:
        calls.append(value)
        return value if value.startswith("S:") else "S:" + value

    assert store.seal_mcp_headers(seal) == 1
    assert sorted(calls) == ["S:x", '{"K": "1"}']  # each stored value sealed once
    assert store.seal_mcp_headers(seal) == 0  # nothing left in plaintext
    found = store.get_agent(org_id, "test", agent.id)
    assert [s.sealed_headers for s in found.mcp_servers] == ['S:{"K": "1"}', "S:x", None]
    assert found.updated_at == agent.updated_at  # and the servers as shown are unchanged
    assert [s.model_dump() for s in found.mcp_servers] == [
        s.model_dump() for s in agent.mcp_servers
    ]


def test_concurrent_transitions_have_one_winner(store: Any) -> None:
    org_id = org(store)
    agent = make_agent()
    store.insert_agent(org_id, "test", agent)
    wins: list[bool] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        active = agent.model_copy(update={"status": "deployed"})
        wins.append(store.update_agent(org_id, "test", active, expected_status="draft"))

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, False, False, True]


# knowledge -------------------------------------------------------------------------


def test_documents_chunks_and_vectors(store: Any) -> None:
    org_id = org(store)
    assert store.knowledge_state(org_id, "test").version == 0
    doc_id, ids = ingest(store, org_id, n=4)
    assert len(ids) == 4 and ids == sorted(ids)
    assert stored_chunk_ids(store, org_id, "test", doc_id) == ids
    state = store.knowledge_state(org_id, "test")
    assert (state.embedder, state.dimension, state.version) == ("e1", 8, 1)
    loaded_ids, vectors = store.load_vectors(org_id, "test", 8)
    assert loaded_ids.tolist() == ids
    np.testing.assert_array_equal(vectors, unit(4, 8, 0))
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
    assert store.count_vectors(org_id, "test") == 4
    with pytest.raises(ValueError):
        store.load_vectors(org_id, "test", 16)
    chunks = store.get_chunks([ids[1], 999_999])
    assert list(chunks) == [ids[1]]
    assert chunks[ids[1]].text == "chunk 1" and chunks[ids[1]].source == "a.txt"
    assert chunks[ids[1]].pages == [1] and chunks[ids[1]].page_offsets == [0]
    assert store.get_chunks([]) == {}
    document = store.get_document(org_id, "test", doc_id)
    assert document.id == doc_id and document.chunks == 4
    assert store.get_document(org_id, "live", doc_id) is None
    assert [(d, i) for d, i, _ in store.iter_chunk_texts(org_id, "test")] == [(doc_id, ids)]
    assert store.delete_document(org_id, "test", doc_id)
    assert not store.delete_document(org_id, "test", doc_id)
    assert store.count_vectors(org_id, "test") == 0
    assert store.get_chunks(ids) == {}
    assert store.knowledge_state(org_id, "test").version == 2


def test_keyword_snapshots(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(store, KeywordSnapshotStore)
    monkeypatch.setattr(sql_vectors, "SNAPSHOT_PART_BYTES", 10)
    org_id = org(store)
    assert store.keyword_snapshot(org_id, "test") is None
    ingest(store, org_id, n=2)
    ingest(store, org_id, n=2)  # the workspace is at version 2
    data = bytes(range(25))  # three parts
    assert store.put_keyword_snapshot(org_id, "test", 1, memoryview(data))
    assert store.keyword_snapshot(org_id, "test") == (1, data)
    assert store.keyword_snapshot(org_id, "live") is None  # each workspace its own
    assert not store.put_keyword_snapshot(org_id, "test", 1, b"same version")
    assert store.put_keyword_snapshot(org_id, "test", 1, b"replaced", replace=True)
    assert store.put_keyword_snapshot(org_id, "test", 2, b"newer")  # fewer parts: one
    assert store.keyword_snapshot(org_id, "test") == (2, b"newer")
    assert not store.put_keyword_snapshot(org_id, "test", 1, bytearray(b"an older one"))
    assert store.keyword_snapshot(org_id, "test") == (2, b"newer")
    assert store.put_keyword_snapshot(org_id, "test", 2, b"", replace=True)  # one empty part
    assert store.keyword_snapshot(org_id, "test") == (2, b"")


def test_keep_mask_and_add_vectors(store: Any) -> None:
    org_id = org(store)
    document = make_document(3)
    keep = np.array([True, False, True])
    ids = store.insert_document(
        org_id, "test", document, [("a", [1], [0])] * 3, "e1", unit(3), keep
    ).chunk_ids
    loaded, _ = store.load_vectors(org_id, "test", 8)
    assert loaded.tolist() == [ids[0], ids[2]]
    store.add_vectors(org_id, "test", None, "e1", 8, np.array([ids[1]]), unit(1, seed=5))
    assert store.count_vectors(org_id, "test") == 3
    with pytest.raises(ValueError):
        store.add_vectors(org_id, "test", None, "e1", 8, np.array([1, 2]), unit(1))


def test_single_rows_are_read_back_by_locator(store: Any) -> None:
    org_id, other = org(store), org(store, "globex")
    first, ids = ingest(store, org_id, n=4)
    second, more = ingest(store, org_id, n=3)
    rows = store.load_index(org_id, "test", 8, located=True)
    loaded, vectors, located = rows.ids, rows.vectors, rows.locators
    assert loaded.tolist() == ids + more and located.shape == (7,)
    assert len(set(located.tolist())) == 7 and (located >= 0).all()
    np.testing.assert_array_equal(store.locate_vectors(org_id, "test", loaded), located)
    wanted = np.array([located[5], located[0], located[5]])
    np.testing.assert_array_equal(
        store.read_vector_rows(org_id, "test", wanted, 8), vectors[[5, 0, 5]]
    )
    # an id not stored has no locator; a row not stored (any more) reads as NaN
    assert store.locate_vectors(org_id, "test", np.array([999_999])).tolist() == [-1]
    assert np.isnan(store.read_vector_rows(org_id, "test", np.array([-1]), 8)).all()
    store.delete_document(org_id, "test", first)
    rows = store.read_vector_rows(org_id, "test", located[[0, 4]], 8)
    assert np.isnan(rows[0]).all()
    np.testing.assert_array_equal(rows[1], vectors[4])
    assert store.locate_vectors(org_id, "test", loaded[:1]).tolist() == [-1]
    # another workspace's locators read nothing of this one
    assert np.isnan(store.read_vector_rows(other, "test", located[4:], 8)).all()
    assert np.isnan(store.read_vector_rows(org_id, "live", located[4:], 8)).all()
    assert second  # the survivor's rows above


@pytest.mark.parametrize("stream", [False, True], ids=["select", "copy"])
def test_a_workspace_of_many_segments_loads_them_in_order(
    store: Any, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcore.storage.postgres import connection as postgres_connection

    # PostgreSQL reads a small workspace's segments with one SELECT and streams a
    # larger one's with one COPY (here: any): each segment lands at its place
    if stream:
        monkeypatch.setattr(postgres_connection, "STREAM_BYTES", 0)
    org_id, other = org(store), org(store, "globex")
    written: dict[str, tuple[list[int], np.ndarray]] = {}
    for seed in range(6):  # another workspace's segments in between
        document_id, ids = ingest(store, org_id, n=3 + seed % 2, seed=seed)
        written[document_id] = (ids, unit(3 + seed % 2, 8, seed))
        ingest(store, other, n=2, seed=100 + seed)
    first, *_, last = written
    for gone in (first, list(written)[3], last):
        store.delete_document(org_id, "test", gone)
        del written[gone]
    ids, vectors = store.load_vectors(org_id, "test", 8)
    assert ids.tolist() == [i for part, _ in written.values() for i in part]
    np.testing.assert_array_equal(vectors, np.concatenate([v for _, v in written.values()]))
    located = store.load_index(org_id, "test", 8, located=True)
    np.testing.assert_array_equal(located.vectors, vectors)
    assert located.labels.shape == (len(ids),) and located.locators is not None
    assert len(set(located.labels.tolist())) == len(written)
    np.testing.assert_array_equal(
        store.read_vector_rows(org_id, "test", located.locators, 8), vectors
    )
    # the change log reads the segments added since a version the same way
    version = store.knowledge_state(org_id, "test").version
    more = [ingest(store, org_id, n=2, seed=50 + seed)[1] for seed in range(3)]
    changes = store.changes_since(org_id, "test", version, max_rows=100)
    assert changes.added_ids.tolist() == [i for part in more for i in part]
    np.testing.assert_array_equal(
        changes.added_vectors, np.concatenate([unit(2, 8, 50 + s) for s in range(3)])
    )
    assert len(set(changes.added_labels.tolist())) == 3
    # a workspace without segments loads empty
    empty = store.load_index(org(store, "initech"), "test", 8)
    assert empty.ids.shape == (0,) and empty.vectors.shape == (0, 8)


@pytest.mark.slow
def test_a_postgres_segment_read_checks_what_it_got(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcore.storage.postgres import connection as postgres_connection

    store = open_store("postgres", request)
    try:
        org_id = org(store)
        ingest(store, org_id, n=3)
        index = store.load_index(org_id, "test", 8, located=True)
        loaded, located = index.ids, index.locators
        segment = int(located[0]) >> LOCATOR_SHIFT
        ids, vectors = np.empty(4, dtype="<i8"), np.empty((4, 8), dtype="<f4")
        for stream in (False, True):  # by SELECT, then by COPY
            monkeypatch.setattr(postgres_connection, "STREAM_BYTES", -1 if stream else 1 << 20)
            with store.db.snapshot() as conn:
                # the segment holds three rows, not four; a segment not stored is missing
                with pytest.raises(ValueError, match="changed while it was read"):
                    store.db.read_segments(conn, [(segment, 4)], ids, vectors)
                with pytest.raises(ValueError, match="deleted while they were read"):
                    store.db.read_segments(conn, [(segment, 3), (10**9, 1)], ids, vectors)
                store.db.read_segments(conn, [(segment, 3)], ids[:3], vectors[:3])
            assert ids[:3].tolist() == loaded.tolist()
    finally:
        store.close()


def test_sqlite_bulk_reads_map_the_file_only_while_they_run(
    request: pytest.FixtureRequest,
) -> None:
    store = open_store("sqlite", request)
    try:
        org_id = org(store)
        for seed, n in enumerate((3, 5)):
            ingest(store, org_id, n=n, seed=seed)
        loaded = store.load_index(org_id, "test", 8, located=True)
        mapped = store.db.connection().execute("PRAGMA mmap_size")
        assert mapped.fetchone()[0] == 0  # the load mapped the file, then let it go
        assert np.array_equal(loaded.vectors, np.vstack([unit(3, 8, 0), unit(5, 8, 1)]))
        segment = int(loaded.locators[0]) >> LOCATOR_SHIFT
        ids, vectors = np.empty(4, dtype="<i8"), np.empty((4, 8), dtype="<f4")
        with store.db.snapshot() as conn:
            with pytest.raises(ValueError, match="bytes, expected"):
                store.db.read_segments(conn, [(segment, 4)], ids, vectors)
            assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 0  # after a failure too
    finally:
        store.close()
    memory = SQLiteStore.open(":memory:")  # nothing to map: read as it is
    try:
        org_id = org(memory)
        ingest(memory, org_id, n=3)
        assert np.array_equal(memory.load_index(org_id, "test", 8).vectors, unit(3, 8, 0))
    finally:
        memory.close()


def test_documents_paging(store: Any) -> None:
    org_id = org(store)
    docs = [ingest(store, org_id, n=1)[0] for _ in range(3)]
    page, more = store.list_documents(org_id, "test", limit=2, starting_after=None)
    assert [d.id for d in page] == [docs[2], docs[1]] and more
    page, more = store.list_documents(org_id, "test", limit=2, starting_after=docs[1])
    assert [d.id for d in page] == [docs[0]] and not more


def test_replace_all_vectors(store: Any) -> None:
    org_id = org(store)
    doc_id, ids = ingest(store, org_id, n=2)
    fresh = unit(2, 4, seed=9)
    store.replace_all_vectors(org_id, "test", "e2", [(doc_id, np.array(ids), fresh)], 4)
    state = store.knowledge_state(org_id, "test")
    assert (state.embedder, state.dimension) == ("e2", 4)
    loaded_ids, vectors = store.load_vectors(org_id, "test", 4)
    assert loaded_ids.tolist() == ids
    np.testing.assert_array_equal(vectors, fresh)


def test_chunk_texts_by_id(store: Any) -> None:
    org_id = org(store)
    _, ids = ingest(store, org_id, n=3)
    assert store.chunk_texts_by_id([ids[2], ids[0], 999_999]) == {
        ids[2]: "chunk 2",
        ids[0]: "chunk 0",
    }
    assert store.chunk_texts_by_id([]) == {}


def test_metadata_updates_and_the_documents_changed(store: Any) -> None:
    org_id = org(store)
    first, ids = ingest(store, org_id, n=1)
    since = store.knowledge_state(org_id, "test").version
    everything = store.documents_changed(org_id, "test", None)
    assert everything.version == since and [d.id for d in everything.documents] == [first]
    assert everything.documents[0].metadata == {}
    second, _ = ingest(store, org_id, n=1)
    updated = store.update_metadata(org_id, "test", first, {"team": "hr", "year": 2024})
    assert updated.id == first and updated.metadata == {"team": "hr", "year": 2024}
    assert store.get_document(org_id, "test", first).metadata == {"team": "hr", "year": 2024}
    assert store.get_chunks(ids)[ids[0]].metadata == {"team": "hr", "year": 2024}
    # each write advanced the version, and both documents were written after `since`
    changes = store.documents_changed(org_id, "test", since)
    assert changes.version == store.knowledge_state(org_id, "test").version == since + 2
    assert {d.id: d.metadata for d in changes.documents} == {
        first: {"team": "hr", "year": 2024},
        second: {},
    }
    assert store.documents_changed(org_id, "test", changes.version).documents == []
    # not this workspace's, or no document: nothing written, the version unchanged
    assert store.update_metadata(org_id, "live", first, {"team": "x"}) is None
    assert store.update_metadata(org_id, "test", "doc_missing", {"team": "x"}) is None
    assert store.knowledge_state(org_id, "test").version == changes.version


def test_index_dtype_is_claimed_once_per_workspace(store: Any) -> None:
    org_id = org(store)
    assert store.knowledge_state(org_id, "test").index_dtype is None
    assert store.claim_index_dtype(org_id, "test", "int8") == "int8"
    assert store.claim_index_dtype(org_id, "test", "float16") == "int8"  # the first stays
    state = store.knowledge_state(org_id, "test")
    assert state.index_dtype == "int8" and state.version == 0  # the index is unchanged
    assert store.claim_index_dtype(org_id, "live", "float16") == "float16"
    ingest(store, org_id)
    assert store.knowledge_state(org_id, "test").index_dtype == "int8"


def test_concurrent_index_dtype_claims_agree(kind: str, request: pytest.FixtureRequest) -> None:
    nodes = [open_store(kind, request) for _ in range(2)]
    try:
        org_id = org(nodes[0])
        claimed: list[str] = []
        barrier = threading.Barrier(4)

        def go(node: Any, dtype: str) -> None:
            barrier.wait()
            claimed.append(node.claim_index_dtype(org_id, "test", dtype))

        threads = [
            threading.Thread(target=go, args=(nodes[i % 2], ("int8", "float16")[i % 2]))
            for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(claimed) == 4 and len(set(claimed)) == 1
        assert nodes[1].knowledge_state(org_id, "test").index_dtype == claimed[0]
    finally:
        for node in nodes:
            node.close()


def write_counts(node: Any, sentences: int, stems: dict[str, int], *, org_id: str) -> str:
    """Store a one-chunk document whose sentence counts are ``(sentences, stems)``."""
    document = make_document(1)
    node.insert_document(
        org_id, "test", document, [("a", [1], [0])], "e1", unit(1), np.ones(1, bool),
        term_counts=(sentences, stems),
    )  # fmt: skip
    return str(document.id)


def test_term_counts_follow_every_write(
    store: Any, kind: str, request: pytest.FixtureRequest
) -> None:
    org_id = org(store)
    assert store.term_counts(org_id, "test", ["vacat"]) == (0, {})
    write = functools.partial(write_counts, org_id=org_id)

    first = write(store, 4, {"vacat": 2, "day": 1})
    write(store, 3, {"vacat": 1, "leav": 3})
    sentences, counts = store.term_counts(org_id, "test", ["vacat", "day", "leav", "none"])
    assert sentences == 7 and counts.get("none", 0) == 0
    assert {stem: n for stem, n in counts.items() if n} == {"vacat": 3, "day": 1, "leav": 3}
    assert store.term_counts(org_id, "live", ["vacat"]) == (0, {})
    # another node's writes are counted by this one's next call, its delete too
    other = open_store(kind, request)
    try:
        write(other, 5, {"day": 5})
        assert store.term_counts(org_id, "test", ["day"]) == (12, {"day": 6})
        other.delete_document(org_id, "test", first)
        assert store.term_counts(org_id, "test", ["vacat", "day"]) == (8, {"vacat": 1, "day": 5})
    finally:
        other.close()


def test_a_fresh_store_reads_the_stored_term_sums(
    store: Any, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sums one store object made are kept in the store; another one (a restart,
    another node) reads them and applies only the log since, and gets what summing every
    document's row gives. A copy that is damaged, or of a version the workspace has not
    reached, is not used, and is replaced."""
    from agentcore.storage.sql import terms

    org_id = org(store)
    stems = ["vacat", "day", "leav", "none"]
    write = functools.partial(write_counts, org_id=org_id)
    applied = summed_rows(monkeypatch)

    def fresh(expected: tuple[int, dict[str, int]], rows: int) -> None:
        """A new store object's sums are ``expected``, after applying ``rows`` rows."""
        applied.clear()
        other = open_store(kind, request)
        try:
            assert other.term_counts(org_id, "test", stems) == expected
        finally:
            other.close()
        assert len(applied) == rows

    first = write(store, 4, {"vacat": 2, "day": 1})
    write(store, 3, {"vacat": 1, "leav": 3})
    expected = (7, {"vacat": 3, "day": 1, "leav": 3})
    assert store.term_counts(org_id, "test", stems) == expected  # summed, then kept
    fresh(expected, 0)
    store.delete_document(org_id, "test", first)
    write(store, 5, {"day": 5})
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 2)  # the log since: one in, one out
    monkeypatch.setattr(terms, "TERM_SUMS_REWRITE", 2)
    assert store.term_counts(org_id, "test", stems) == (8, {"vacat": 1, "leav": 3, "day": 5})
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 0)  # two applied: written again

    def damage(sql: str) -> None:
        with store.db.write() as conn:
            conn.execute(sql, [org_id])

    damage("UPDATE term_sums SET counts = counts || counts WHERE organization_id = ?")
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 2)  # every row summed, and kept again
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 0)
    damage("UPDATE term_sums SET version = version + 100 WHERE organization_id = ?")
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 2)
    fresh((8, {"vacat": 1, "leav": 3, "day": 5}), 0)


def test_workspaces_are_isolated(store: Any) -> None:
    acme, globex = org(store, "acme"), org(store, "globex")
    ingest(store, acme, n=2)
    assert store.count_vectors(globex, "test") == 0
    assert store.count_vectors(acme, "live") == 0
    assert store.list_documents(globex, "test", limit=10, starting_after=None) == ([], False)


def test_changes_since(store: Any) -> None:
    org_id = org(store)
    doc_a, ids_a = ingest(store, org_id, n=3, seed=1)
    v1 = store.knowledge_state(org_id, "test").version
    same = store.changes_since(org_id, "test", v1, max_rows=100)
    assert same.version == v1 and same.added_ids.size == 0 and same.deleted_ids.size == 0
    _, ids_b = ingest(store, org_id, n=2, seed=2)
    store.delete_document(org_id, "test", doc_a)
    changes = store.changes_since(org_id, "test", v1, max_rows=100)
    assert changes.version == store.knowledge_state(org_id, "test").version
    assert changes.added_ids.tolist() == ids_b
    np.testing.assert_array_equal(changes.added_vectors, unit(2, seed=2))
    assert sorted(changes.deleted_ids.tolist()) == ids_a
    # too many rows, or a version the store never had: the caller must reload
    assert store.changes_since(org_id, "test", v1, max_rows=1) is None
    assert store.changes_since(org_id, "test", changes.version + 5, max_rows=100) is None
    # a re-embed restarts the log
    store.replace_all_vectors(org_id, "test", "e2", [], 8)
    assert store.changes_since(org_id, "test", changes.version, max_rows=100) is None


def processing(store: Any, org_id: str, now: float = 1.0) -> Document:
    document = make_document(2).model_copy(update={"status": "processing", "chunks": 0})
    store.insert_processing_document(
        org_id,
        "test",
        document,
        kind="text",
        filename="notes.txt",
        content_type=None,
        data=b"hello\x00world",
        now=now,
    )
    return document


def test_background_ingestion_jobs(store: Any) -> None:
    org_id = org(store)
    first, second = processing(store, org_id, 1.0), processing(store, org_id, 2.0)
    assert store.get_document(org_id, "test", first.id).status == "processing"
    job = store.claim_ingest_job(now=10.0, lease_seconds=30)
    assert (job.document_id, job.kind, job.filename, job.attempts) == (
        first.id,
        "text",
        "notes.txt",
        1,
    )
    assert store.ingest_job_data(first.id) == b"hello\x00world"
    # leased: the next claim takes the other job, then nothing until a lease runs out
    assert store.claim_ingest_job(now=11.0, lease_seconds=30).document_id == second.id
    assert store.claim_ingest_job(now=12.0, lease_seconds=30) is None
    assert store.renew_ingest_job(first.id, until=100.0)
    store.release_ingest_job(second.id)  # shutdown: given back, the attempt not counted
    again = store.claim_ingest_job(now=13.0, lease_seconds=30)
    assert again.document_id == second.id and again.attempts == 1
    ready = first.model_copy(update={"status": "ready", "chunks": 2, "pages": 1})
    ids = store.complete_document(
        org_id, "test", ready, [("a", [1], [0]), ("b", [1], [0])], "e1", unit(2), np.ones(2, bool)
    )
    assert ids is not None and len(ids.chunk_ids) == 2
    assert store.get_document(org_id, "test", first.id).status == "ready"
    assert store.count_vectors(org_id, "test") == 2
    assert store.ingest_job_data(first.id) is None and not store.renew_ingest_job(first.id, until=1)
    # finishing twice (another worker) writes nothing
    assert (
        store.complete_document(
            org_id, "test", ready, [("a", [1], [0])], "e1", unit(1), np.ones(1, bool)
        )
        is None
    )
    error = Problem(type="about:blank", title="Bad", status=422, detail="no text", code="no_text")
    assert store.fail_document(org_id, "test", second.id, error)
    failed = store.get_document(org_id, "test", second.id)
    assert failed.status == "failed" and failed.last_error == error
    assert not store.fail_document(org_id, "test", second.id, error)
    # deleting a processing document drops its job
    third = processing(store, org_id, 3.0)
    assert store.delete_document(org_id, "test", third.id)
    assert store.claim_ingest_job(now=1e6, lease_seconds=30) is None


def test_document_warnings_are_kept(store: Any) -> None:
    """A document's warnings come back as written, from an insert and from a completed
    job, in a read, a list and a metadata update; none is ``[]``."""
    org_id = org(store)
    warnings = [
        DocumentWarning(code="no_text", pages=[3, 4], detail="Images, no text."),
        DocumentWarning(code="ocr", pages=[2], detail="Read by OCR."),
    ]
    written = make_document(1).model_copy(update={"warnings": warnings})
    store.insert_document(
        org_id, "test", written, [("a", [1], [0])], "e1", unit(1), np.ones(1, bool)
    )
    job = processing(store, org_id)
    ready = job.model_copy(update={"status": "ready", "chunks": 1, "warnings": warnings[1:]})
    done = store.complete_document(
        org_id, "test", ready, [("b", [1], [0])], "e1", unit(1, seed=1), np.ones(1, bool)
    )
    assert done is not None and done.document is not None
    assert done.document.warnings == warnings[1:]
    plain = make_document(1)
    store.insert_document(
        org_id, "test", plain, [("c", [1], [0])], "e1", unit(1, seed=2), np.ones(1, bool)
    )
    assert store.get_document(org_id, "test", written.id).warnings == warnings
    assert store.get_document(org_id, "test", job.id).warnings == warnings[1:]
    assert store.get_document(org_id, "test", plain.id).warnings == []
    listed, _ = store.list_documents(org_id, "test", limit=10, starting_after=None)
    assert {d.id: d.warnings for d in listed} == {
        written.id: warnings,
        job.id: warnings[1:],
        plain.id: [],
    }
    updated = store.update_metadata(org_id, "test", written.id, {"team": "hr"})
    assert updated is not None and updated.warnings == warnings


def test_token_buckets(store: Any) -> None:
    first = store.take_token("key_a", rate=1.0, burst=2.0, now=100.0)
    assert first.allowed and first.tokens == pytest.approx(1.0)
    assert store.take_token("key_a", rate=1.0, burst=2.0, now=100.0).allowed
    refused = store.take_token("key_a", rate=1.0, burst=2.0, now=100.0)
    assert not refused.allowed and refused.tokens == pytest.approx(0.0)
    assert store.take_token("key_a", rate=1.0, burst=2.0, now=101.0).allowed  # refilled
    assert store.take_token("key_b", rate=1.0, burst=2.0, now=100.0).allowed  # its own bucket


def test_concurrent_token_takes_never_overspend(kind: str, request: pytest.FixtureRequest) -> None:
    nodes = [open_store(kind, request) for _ in range(2)]
    try:
        allowed: list[bool] = []
        barrier = threading.Barrier(4)

        def go(node: Any) -> None:
            barrier.wait()
            for _ in range(5):
                allowed.append(node.take_token("key", rate=0.001, burst=7.0, now=50.0).allowed)

        threads = [threading.Thread(target=go, args=(nodes[i % 2],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert allowed.count(True) == 7 and len(allowed) == 20
    finally:
        for node in nodes:
            node.close()


# webhooks and the outbox -----------------------------------------------------------


def subscribe(store: Any, org_id: str, events: tuple[str, ...] = ("agent.created",)) -> Any:
    return store.insert_subscription(
        org_id, "test", url="http://127.0.0.1:9/hook", events=events, secret="s1", description="d"
    )


def event(org_id: str, kind: str = "agent.created") -> Event:
    return Event(
        id=new_id("evt"),
        type=kind,
        organization_id=org_id,
        environment="test",
        timestamp="2026-01-01T00:00:00Z",
        data={"b": 1, "a": [1, 2]},
    )


def test_subscriptions(store: Any) -> None:
    org_id = org(store)
    sub = subscribe(store, org_id)
    assert sub.public.status == "active" and sub.secret == "s1"
    assert store.get_subscription(org_id, "test", sub.public.id).public == sub.public
    assert store.get_subscription(None, None, sub.public.id) is not None
    assert store.get_subscription(org_id, "live", sub.public.id) is None
    second = subscribe(store, org_id)
    page, more = store.list_subscriptions(org_id, "test", limit=1, starting_after=None)
    assert [s.public.id for s in page] == [second.public.id] and more
    store.update_subscription(sub.public.id, previous_secret="s0", failing_since=5.0)
    updated = store.get_subscription(org_id, "test", sub.public.id)
    assert updated.previous_secret == "s0" and updated.failing_since == 5.0
    with pytest.raises(ValueError):
        store.update_subscription(sub.public.id, url="http://evil")
    assert store.delete_subscription(org_id, "test", sub.public.id)
    assert not store.delete_subscription(org_id, "test", sub.public.id)


def test_seal_secrets_replaces_only_plaintext_values_in_place(store: Any) -> None:
    org_id = org(store)
    plain, sealed, rotated = (subscribe(store, org_id) for _ in range(3))
    store.update_subscription(plain.public.id, secret="whsec_a", previous_secret="whsec_0")
    store.update_subscription(sealed.public.id, secret="enc:x", previous_secret=None)
    store.update_subscription(rotated.public.id, secret="enc:y", previous_secret="whsec_b")
    before = {
        s.public.id: store.get_subscription(None, None, s.public.id) for s in (plain, rotated)
    }
    assert store.seal_secrets("whsec_", lambda value: "enc:" + value) == 3
    stored = [store.get_subscription(None, None, s.public.id) for s in (plain, sealed, rotated)]
    assert [(s.secret, s.previous_secret) for s in stored] == [
        ("enc:whsec_a", "enc:whsec_0"),
        ("enc:x", None),
        ("enc:y", "enc:whsec_b"),
    ]
    assert stored[0].public == before[plain.public.id].public  # updated_at kept
    assert store.seal_secrets("whsec_", lambda value: "enc:" + value) == 0  # nothing left


def test_outbox_lifecycle(store: Any) -> None:
    org_id = org(store)
    sub = subscribe(store, org_id)
    subscribe(store, org_id, events=("agent.archived",))
    assert store.next_due_at() is None
    assert store.record_event(event(org_id), now=100.0) == 1
    assert store.next_due_at() == 100.0
    assert store.claim_due_deliveries(now=99.0, lease_seconds=30, limit=10) == []
    (due,) = store.claim_due_deliveries(now=100.0, lease_seconds=30, limit=10)
    assert due.subscription_id == sub.public.id and due.secrets == ["s1"]
    assert due.event_data == {"b": 1, "a": [1, 2]} and due.attempts == 0
    # leased: nobody else gets it until the lease runs out
    assert store.claim_due_deliveries(now=101.0, lease_seconds=30, limit=10) == []
    assert store.next_due_at() == 130.0
    (again,) = store.claim_due_deliveries(now=131.0, lease_seconds=30, limit=10)
    assert again.id == due.id
    store.record_attempt(
        again,
        attempted_at="2026-01-01T00:00:01Z",
        status_code=500,
        error="boom",
        duration_ms=3.0,
        outcome="pending",
        next_attempt_at=200.0,
        subscription_changes={"failing_since": 131.0},
    )
    assert store.get_subscription(org_id, "test", sub.public.id).failing_since == 131.0
    (retry,) = store.claim_due_deliveries(now=200.0, lease_seconds=30, limit=10)
    assert retry.attempts == 1 and retry.failing_since == 131.0
    store.record_attempt(
        retry,
        attempted_at="2026-01-01T00:00:02Z",
        status_code=200,
        error=None,
        duration_ms=2.0,
        outcome="succeeded",
        next_attempt_at=None,
        subscription_changes={"failing_since": None},
    )
    assert store.get_subscription(org_id, "test", sub.public.id).failing_since is None
    deliveries, more = store.list_deliveries(
        org_id, "test", sub.public.id, limit=10, starting_after=None
    )
    assert not more and len(deliveries) == 1
    assert deliveries[0].status == "succeeded" and deliveries[0].event_type == "agent.created"
    assert [a.status_code for a in deliveries[0].attempts] == [500, 200]
    assert store.claim_due_deliveries(now=1e9, lease_seconds=30, limit=10) == []


def test_busy_subscriptions_and_targets(store: Any) -> None:
    org_id = org(store)
    a, b = subscribe(store, org_id), subscribe(store, org_id)
    store.record_event(event(org_id), now=1.0)
    due = store.claim_due_deliveries(
        now=1.0, lease_seconds=30, limit=10, busy_subscriptions=[a.public.id]
    )
    assert [d.subscription_id for d in due] == [b.public.id]
    # a ping targets one subscription whatever its event list
    assert store.record_event(event(org_id, "ping"), now=2.0, only_subscription=a.public.id) == 1


def test_a_delivery_is_pending_until_it_ends(store: Any) -> None:
    org_id = org(store)
    kept, deleted, disabled = (subscribe(store, org_id) for _ in range(3))
    store.record_event(event(org_id), now=1.0)
    due = {
        d.subscription_id: d
        for d in store.claim_due_deliveries(now=1.0, lease_seconds=30, limit=10)
    }
    assert all(store.delivery_pending(d.id) for d in due.values())  # leased, not yet sent
    store.record_attempt(
        due[kept.public.id],
        attempted_at="2026-01-01T00:00:01Z",
        status_code=200,
        error=None,
        duration_ms=1.0,
        outcome="succeeded",
        next_attempt_at=None,
        subscription_changes={},
    )
    store.delete_subscription(org_id, "test", deleted.public.id)
    store.update_subscription(disabled.public.id, status="disabled")
    assert not any(store.delivery_pending(d.id) for d in due.values())
    assert not store.delivery_pending("dlv_missing")


def test_deleting_a_subscription_fails_its_pending_deliveries(store: Any) -> None:
    org_id = org(store)
    sub = subscribe(store, org_id)
    store.record_event(event(org_id), now=1.0)
    store.delete_subscription(org_id, "test", sub.public.id)
    assert store.claim_due_deliveries(now=2.0, lease_seconds=30, limit=10) == []
    assert store.next_due_at() is None


def test_concurrent_claims_are_disjoint(kind: str, request: pytest.FixtureRequest) -> None:
    """Two stores (two connections, like two nodes) claiming at once split the work."""
    first = open_store(kind, request)
    second = open_store(kind, request)
    try:
        org_id = org(first)
        for _ in range(5):
            subscribe(first, org_id)
        for _ in range(8):
            first.record_event(event(org_id), now=1.0)  # 40 deliveries
        claimed: list[list[str]] = [[], []]
        barrier = threading.Barrier(2)

        def claim(index: int, node: Any) -> None:
            barrier.wait()
            while True:
                got = node.claim_due_deliveries(now=2.0, lease_seconds=60, limit=3)
                if not got:
                    return
                claimed[index].extend(d.id for d in got)

        threads = [
            threading.Thread(target=claim, args=(i, s)) for i, s in enumerate((first, second))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        everything = claimed[0] + claimed[1]
        assert len(everything) == 40 and len(set(everything)) == 40
    finally:
        first.close()
        second.close()


# conversations and idempotency -----------------------------------------------------


def test_conversations(store: Any) -> None:
    org_id = org(store)
    conversation = store.create_conversation(org_id, "test", "agt_1")
    assert store.get_conversation(org_id, "test", conversation).agentId == "agt_1"
    assert store.get_conversation(org_id, "live", conversation) is None
    cites = [{"source": "a.txt", "pages": [1]}]
    store.add_messages(
        conversation, [StoredMessage("user", "hi", []), StoredMessage("assistant", "yo", cites)]
    )
    store.add_messages(conversation, [StoredMessage("user", "more", [])])
    assert [m.content for m in store.recent_messages(conversation, 2)] == ["yo", "more"]
    assert store.recent_messages(conversation, 10)[1].citations == cites
    assert store.recent_messages(conversation, 0) == []


def test_a_conversation_is_created_with_its_first_messages(store: Any) -> None:
    org_id = org(store)
    said = [StoredMessage("user", "hi", []), StoredMessage("assistant", "yo", [])]
    named = store.create_conversation(org_id, "test", "agt_1", said, conversation_id="conv_x1")
    assert named == "conv_x1"
    assert [m.content for m in store.recent_messages(named, 10)] == ["hi", "yo"]
    assert store.get_conversation(org_id, "test", named).message_count == 2
    store.add_messages(named, [StoredMessage("user", "more", [])])
    assert store.get_conversation(org_id, "test", named).message_count == 3
    fresh = store.create_conversation(org_id, "test", "agt_1", said)
    assert fresh.startswith("conv_") and fresh != named


def test_an_answer_is_rated_in_its_workspace_only(store: Any) -> None:
    org_id, other = org(store), org(store, "globex")
    said = [StoredMessage("user", "hi", []), StoredMessage("assistant", "yo", [])]
    conversation = store.create_conversation(org_id, "test", "agt_1", said, user="ana")
    assert store.get_conversation(org_id, "test", conversation).user == "ana"
    question, answer = store.list_messages(
        org_id, "test", conversation, limit=10, starting_after=None
    )[0]
    down = Feedback(rating="down", reason="no", rated_at=datetime(2026, 1, 1, tzinfo=UTC))
    rated = store.rate_message(org_id, "test", conversation, answer.id, down)
    assert rated.id == answer.id and rated.feedback == down
    up = Feedback(rating="up", rated_at=datetime(2026, 1, 2, tzinfo=UTC))
    assert store.rate_message(org_id, "test", conversation, answer.id, up).feedback == up
    with pytest.raises(Conflict):
        store.rate_message(org_id, "test", conversation, question.id, up)
    assert store.rate_message(other, "test", conversation, answer.id, down) is None
    assert store.rate_message(org_id, "live", conversation, answer.id, down) is None
    assert store.rate_message(org_id, "test", conversation, "msg_missing", down) is None
    messages, _ = store.list_messages(org_id, "test", conversation, limit=10, starting_after=None)
    assert [m.feedback for m in messages] == [None, up]
    mine, _ = store.list_conversations(org_id, "test", limit=10, starting_after=None, user="ana")
    assert [c.id for c in mine] == [conversation]


def test_a_conversation_is_handed_off_and_released(store: Any) -> None:
    org_id, other = org(store), org(store, "globex")
    said = [StoredMessage("user", "a human, please", []), StoredMessage("assistant", "ok", [])]
    conversation = store.create_conversation(org_id, "test", "agt_1", said, status="handed_off")
    assert store.get_conversation(org_id, "test", conversation).status == "handed_off"
    # a message without a status leaves it as it is; with one, sets it in the same write
    store.add_messages(conversation, [StoredMessage("user", "still there?", [])])
    assert store.get_conversation(org_id, "test", conversation).status == "handed_off"
    store.add_messages(conversation, [StoredMessage("operator", "yes", [])], status="handed_off")
    released = store.set_conversation_status(org_id, "test", conversation, "active")
    assert (released.id, released.status, released.message_count) == (conversation, "active", 4)
    assert store.get_conversation(org_id, "test", conversation).status == "active"
    # another workspace's conversation is not found, and stays as it was
    assert store.set_conversation_status(other, "test", conversation, "handed_off") is None
    assert store.set_conversation_status(org_id, "live", conversation, "handed_off") is None
    assert store.get_conversation(org_id, "test", conversation).status == "active"
    messages, _ = store.list_messages(org_id, "test", conversation, limit=10, starting_after=None)
    assert [m.role for m in messages] == ["user", "assistant", "user", "operator"]
    fresh = store.create_conversation(org_id, "test", "agt_1")
    assert store.get_conversation(org_id, "test", fresh).status == "active"


def test_a_paused_turn_waits_is_held_by_one_resume_and_expires(store: Any) -> None:
    org_id = org(store)
    call = {"id": "call_1", "type": "function", "name": "lookup", "arguments": {"q": "x"}}
    said = [StoredMessage("user", "hi", []), StoredMessage("assistant", "", [], tool_calls=[call])]
    first = PendingTurn("turn_1", {"waiting": [call], "step": 0}, expires_at=1_000.0)
    conversation = store.create_conversation(org_id, "test", "agt_1", said, pending=first)
    assert store.pending_turn(conversation, now=999.0) == first
    assert store.pending_turn(conversation, now=1_000.0) is None  # expired
    assert store.pending_turn("conv_missing", now=0.0) is None
    messages, _ = store.list_messages(org_id, "test", conversation, limit=10, starting_after=None)
    assert messages[1].tool_calls[0].model_dump() == call and messages[1].tool_call_id is None

    # one resume holds it until its lease ends; a failed one lets it go at once
    assert store.claim_pending_turn(conversation, now=10.0, lease_until=20.0) == first
    with pytest.raises(Conflict) as busy:
        store.claim_pending_turn(conversation, now=15.0, lease_until=25.0)
    assert busy.value.code == "tool_outputs_in_progress"
    assert store.claim_pending_turn(conversation, now=20.0, lease_until=30.0) == first  # lapsed
    store.release_pending_turn(conversation, "turn_other")  # another turn's: no effect
    with pytest.raises(Conflict):
        store.claim_pending_turn(conversation, now=21.0, lease_until=31.0)
    store.release_pending_turn(conversation, "turn_1")
    assert store.claim_pending_turn(conversation, now=21.0, lease_until=31.0) == first
    assert store.claim_pending_turn(conversation, now=1_000.0, lease_until=1_010.0) is None

    # the resume that finishes it stores its messages and the next pause, once
    output = StoredMessage("tool", '{"found": 1}', [], tool_call_id="call_1")
    second = PendingTurn("turn_2", {"waiting": [], "step": 1}, expires_at=2_000.0)
    store.add_messages(conversation, [output], pending=second, resumed="turn_1")
    assert store.pending_turn(conversation, now=21.0) == second
    with pytest.raises(Conflict) as answered:  # a second resume of the same pause
        store.add_messages(conversation, [output], resumed="turn_1")
    assert answered.value.code == "tool_outputs_already_submitted"
    assert store.get_conversation(org_id, "test", conversation).message_count == 3
    messages, _ = store.list_messages(org_id, "test", conversation, limit=10, starting_after=None)
    assert (messages[2].role, messages[2].tool_call_id) == ("tool", "call_1")
    # any other message ends the wait (a new message after it expired, an operator's reply)
    store.add_messages(conversation, [StoredMessage("operator", "I'll take it", [])])
    assert store.pending_turn(conversation, now=21.0) is None
    with pytest.raises(NotFound):
        store.add_messages("conv_missing", [output], resumed="turn_2")


def test_conversation_history(store: Any) -> None:
    org_id, other = org(store), org(store, "globex")
    first = store.create_conversation(org_id, "test", "agt_1")
    second = store.create_conversation(org_id, "test", "agt_2")
    elsewhere = store.create_conversation(other, "test", "agt_1")
    usage = Usage(input_tokens=12, output_tokens=3)
    cites = [{"source": "a.txt", "pages": [1, 2]}]
    store.add_messages(
        first,
        [StoredMessage("user", "hi", []), StoredMessage("assistant", "yo", cites, usage=usage)],
    )
    store.add_messages(first, [StoredMessage("user", "more", [])])
    # newest first: the second conversation was created last
    page, more = store.list_conversations(org_id, "test", limit=10, starting_after=None)
    assert [c.id for c in page] == [second, first] and not more
    assert [c.message_count for c in page] == [0, 3]
    assert page[1].agentId == "agt_1" and page[1].updated_at >= page[1].created_at
    page, more = store.list_conversations(org_id, "test", limit=1, starting_after=None)
    assert [c.id for c in page] == [second] and more
    page, more = store.list_conversations(org_id, "test", limit=1, starting_after=second)
    assert [c.id for c in page] == [first] and not more
    only, _ = store.list_conversations(
        org_id, "test", limit=10, starting_after=None, agent_id="agt_1"
    )
    assert [c.id for c in only] == [first]
    assert store.list_conversations(org_id, "live", limit=10, starting_after=None) == ([], False)
    with pytest.raises(NotFound):  # a cursor of another workspace
        store.list_conversations(org_id, "test", limit=10, starting_after=elsewhere)
    assert store.get_conversation(org_id, "test", first).message_count == 3
    assert store.get_conversation(org_id, "test", elsewhere) is None
    assert store.get_conversation(org_id, "live", first) is None

    messages, more = store.list_messages(org_id, "test", first, limit=10, starting_after=None)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "hi"),
        ("assistant", "yo"),
        ("user", "more"),
    ]
    assert not more and len({m.id for m in messages}) == 3
    assert all(m.id.startswith("msg_") for m in messages)
    assert messages[1].usage == usage and messages[0].usage is None and messages[2].usage is None
    assert [c.model_dump() for c in messages[1].citations] == cites
    newest, more = store.list_messages(
        org_id, "test", first, limit=2, starting_after=None, newest_first=True
    )
    assert [m.content for m in newest] == ["more", "yo"] and more
    rest, more = store.list_messages(
        org_id, "test", first, limit=2, starting_after=newest[-1].id, newest_first=True
    )
    assert [m.content for m in rest] == ["hi"] and not more
    after, _ = store.list_messages(org_id, "test", first, limit=1, starting_after=messages[0].id)
    assert [m.content for m in after] == ["yo"]
    assert store.list_messages(org_id, "test", elsewhere, limit=10, starting_after=None) is None
    with pytest.raises(NotFound):  # a message of another conversation
        store.list_messages(org_id, "test", second, limit=10, starting_after=messages[0].id)

    assert store.delete_conversation(org_id, "live", first) is False  # another environment
    assert store.delete_conversation(other, "test", first) is False  # another organization
    assert store.delete_conversation(org_id, "test", first) is True
    assert store.delete_conversation(org_id, "test", first) is False
    assert store.get_conversation(org_id, "test", first) is None
    assert store.set_conversation_status(org_id, "test", first, "active") is None
    assert store.recent_messages(first, 10) == []
    assert store.list_messages(org_id, "test", first, limit=10, starting_after=None) is None
    with pytest.raises(NotFound):  # a turn finishing after the delete stores nothing
        store.add_messages(first, [StoredMessage("user", "late", [])])
    assert store.recent_messages(first, 10) == []
    assert store.get_conversation(org_id, "test", second) is not None


def _times(store: Any, org_id: str, conversation: str) -> list[datetime]:
    messages, _ = store.list_messages(org_id, "test", conversation, limit=100, starting_after=None)
    return [m.created_at for m in messages]


def test_agent_stats_are_aggregates_of_the_window(store: Any) -> None:
    org_id, other = org(store), org(store, "globex")

    def stats(agent: str = "agt_1", **window: Any) -> Any:
        return store.agent_stats(
            org_id, "test", agent, since=window.get("since"), until=window.get("until"), top=20
        )

    def q(role: str, text: str, cites: Any = (), **fields: Any) -> StoredMessage:
        return StoredMessage(role, text, list(cites), question=text.lower(), **fields)

    empty = stats()
    assert (empty.conversations, empty.messages, empty.answered, empty.unanswered) == (0, 0, 0, 0)
    assert empty.top_questions == [] and empty.usage == Usage(input_tokens=0, output_tokens=0)
    cites = [{"source": "a.txt", "pages": [1]}]
    call = {"id": "call_1", "type": "function", "name": "lookup", "arguments": {}}
    first = store.create_conversation(
        org_id,
        "test",
        "agt_1",
        [
            q("user", "Days"),
            q("assistant", "Days", cites, usage=Usage(input_tokens=10, output_tokens=2)),
            q("user", "Wifi"),
            q("assistant", "Wifi"),  # no citation: unanswered
            # a pause for the caller's tools: its tokens count, it is no answer
            StoredMessage(
                "assistant", "", [], usage=Usage(input_tokens=5, output_tokens=1), tool_calls=[call]
            ),
            StoredMessage("tool", "{}", [], tool_call_id="call_1"),
            StoredMessage("operator", "here", []),  # an operator's reply: not counted
        ],
    )
    answers = [
        m for m in store.list_messages(org_id, "test", first, limit=10, starting_after=None)[0]
    ]
    rated_at = datetime(2026, 1, 1, tzinfo=UTC)
    store.rate_message(
        org_id, "test", first, answers[1].id, Feedback(rating="up", rated_at=rated_at)
    )
    store.rate_message(
        org_id, "test", first, answers[3].id, Feedback(rating="down", rated_at=rated_at)
    )
    # a handoff the user asked for (no citation, yet not unanswered), one for lack of
    # knowledge (unanswered), a message of an earlier version (no question: in no list)
    store.create_conversation(
        org_id,
        "test",
        "agt_1",
        [q("user", "Human"), q("assistant", "Human", handoff="user_requested")],
    )
    store.create_conversation(
        org_id,
        "test",
        "agt_1",
        [q("user", "Wifi"), q("assistant", "Wifi", handoff="no_relevant_knowledge")],
    )
    store.create_conversation(org_id, "test", "agt_1", [StoredMessage("user", "old", [])])
    # other agents and workspaces are not this agent's
    for organization, environment, agent in [
        (org_id, "test", "agt_2"),
        (org_id, "live", "agt_1"),
        (other, "test", "agt_1"),
    ]:
        store.create_conversation(organization, environment, agent, [q("user", "Days")])

    every = stats()
    assert (every.agent_id, every.since, every.until) == ("agt_1", None, None)
    assert every.conversations == 4 and every.messages == 9
    assert (every.answered, every.unanswered, every.handoffs) == (1, 2, 2)
    assert (every.feedback.up, every.feedback.down) == (1, 1)
    assert every.usage == Usage(input_tokens=15, output_tokens=3)
    assert [(t.text, t.count) for t in every.top_questions] == [
        ("wifi", 2),
        ("days", 1),
        ("human", 1),
    ]
    assert [(t.text, t.count) for t in every.unanswered_questions] == [("wifi", 2)]
    assert stats("agt_2").messages == 1 and stats("agt_missing").messages == 0

    # the window: since included, until excluded, to the millisecond the store keeps
    time.sleep(0.005)
    later = store.create_conversation(org_id, "test", "agt_1", [q("user", "Late")])
    (at,) = _times(store, org_id, later)
    assert at > max(_times(store, org_id, first))
    since = stats(since=at)
    assert (since.since, since.conversations, since.messages) == (at, 1, 1)
    assert [t.text for t in since.top_questions] == ["late"] and since.answered == 0
    until = stats(until=at)
    assert (until.until, until.messages, until.answered) == (at, 9, 1)
    assert stats(since=at, until=at).messages == 0
    half = timedelta(microseconds=500)  # between two milliseconds
    assert stats(since=at + half).messages == 0 and stats(until=at + half).messages == 10
    assert stats(since=at - half).messages == 1 and stats(until=at - half).messages == 9
    assert stats(since=at.astimezone(timezone(timedelta(hours=-5)))).messages == 1


def test_agent_stats_lists_are_cut_at_top_ties_by_code_point(store: Any) -> None:
    org_id = org(store)
    texts = ["fig", "éclair", "zebra"] * 2 + ["most"] * 3 + [f"q{n:02}" for n in range(21)]
    said = [StoredMessage("user", text, [], question=text) for text in texts]
    said += [StoredMessage("assistant", "?", [], question=text) for text in texts]
    store.create_conversation(org_id, "test", "agt_1", said)
    stats = store.agent_stats(org_id, "test", "agt_1", since=None, until=None, top=5)
    expected = [("most", 3), ("fig", 2), ("zebra", 2), ("éclair", 2), ("q00", 1)]
    assert [(t.text, t.count) for t in stats.top_questions] == expected
    assert [(t.text, t.count) for t in stats.unanswered_questions] == expected
    assert stats.messages == 2 * len(texts) and stats.unanswered == len(texts)
    wide = store.agent_stats(org_id, "test", "agt_1", since=None, until=None, top=20)
    assert len(wide.top_questions) == 20 and wide.top_questions[-1].text == "q15"


def test_idempotency_keys(store: Any) -> None:
    org_id = org(store)
    assert store.claim_idempotency_key(org_id, "test", "k", "f1", now=0.0, ttl=10) == ("new", None)
    assert store.claim_idempotency_key(org_id, "test", "k", "f1", now=1.0, ttl=10)[0] == (
        "in_progress"
    )
    assert store.claim_idempotency_key(org_id, "test", "k", "f2", now=1.0, ttl=10)[0] == (
        "mismatch"
    )
    response = StoredResult(201, '{"ok":true}')
    store.finish_idempotency_key(org_id, "test", "k", response)
    assert store.claim_idempotency_key(org_id, "test", "k", "f1", now=2.0, ttl=10) == (
        "replay",
        response,
    )
    # expired: claimed anew
    assert store.claim_idempotency_key(org_id, "test", "k", "f2", now=11.0, ttl=10)[0] == "new"
    store.release_idempotency_key(org_id, "test", "k")
    assert store.claim_idempotency_key(org_id, "test", "k", "f3", now=12.0, ttl=10)[0] == "new"
    # another workspace has its own keys
    assert store.claim_idempotency_key(org_id, "live", "k", "f9", now=12.0, ttl=10)[0] == "new"


def test_idempotency_leases_sweeps_and_conversations(store: Any) -> None:
    org_id = org(store)
    claim = functools.partial(store.claim_idempotency_key, org_id, "test", ttl=100, lease=5)
    assert claim("k", "f", now=0.0)[0] == "new"
    assert claim("k", "f", now=4.0)[0] == "in_progress"
    assert claim("k", "f", now=5.0)[0] == "new"  # the lease ran out: its holder is dead
    store.release_idempotency_key(org_id, "test", "k", claimed_at=0.0)  # the dead one's
    assert claim("k", "f", now=6.0)[0] == "in_progress"
    # the holder renews its lease (one write for all it holds); a lost claim is named
    lost = store.renew_idempotency_keys(
        [(org_id, "test", "k", 5.0), (org_id, "test", "k", 0.0)], until=40.0
    )
    assert lost == [(org_id, "test", "k", 0.0)]  # taken over at 5: not renewed
    assert claim("k", "f", now=39.0)[0] == "in_progress"  # past 5 + 5: renewed
    kept = StoredResult(200, '{"conversationId":"conv_1"}', "conv_1")
    store.finish_idempotency_key(org_id, "test", "k", kept, claimed_at=5.0)
    assert claim("k", "f", now=50.0) == ("replay", kept)  # a kept result outlives the lease
    assert store.renew_idempotency_keys([(org_id, "test", "k", 5.0)], until=90.0) == [
        (org_id, "test", "k", 5.0)  # finished: nothing to renew
    ]
    # a claim made without a lease (as by earlier versions) lapses only at the ttl
    assert store.claim_idempotency_key(org_id, "test", "n", "f", now=0.0, ttl=100)[0] == "new"
    assert claim("n", "f", now=59.5)[0] == "in_progress"
    store.release_idempotency_key(org_id, "test", "n")
    assert claim("other", "f", now=60.0)[0] == "new"
    assert store.sweep_idempotency_keys(before=59.0, limit=10) == 1  # "k", claimed at 5
    assert claim("k", "f2", now=61.0)[0] == "new"
    assert store.sweep_idempotency_keys(before=59.0, limit=10) == 0
    # deleting a conversation deletes the results that hold its messages, no others
    conversation = store.create_conversation(org_id, "test", "agt_1")
    answer = StoredResult(200, "{}", conversation)
    for key in ("chat-1", "chat-2"):
        assert claim(key, "f", now=70.0)[0] == "new"
        store.finish_idempotency_key(org_id, "test", key, answer)
    assert store.delete_conversation(org_id, "test", conversation) is True
    assert claim("chat-1", "f-other", now=71.0)[0] == "new"
    assert claim("chat-2", "f-other", now=71.0)[0] == "new"
    assert claim("k", "f2", now=61.5)[0] == "in_progress"


def test_concurrent_idempotency_claims_have_one_winner(
    kind: str, request: pytest.FixtureRequest
) -> None:
    stores = [open_store(kind, request) for _ in range(2)]
    try:
        org_id = org(stores[0])
        results: list[str] = []
        barrier = threading.Barrier(4)

        def go(node: Any) -> None:
            barrier.wait()
            results.append(node.claim_idempotency_key(org_id, "test", "k", "f", now=0, ttl=60)[0])

        threads = [threading.Thread(target=go, args=(stores[i % 2],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["in_progress", "in_progress", "in_progress", "new"]
    finally:
        for s in stores:
            s.close()


# PostgreSQL-only capabilities ---------------------------------------------------------


@pytest.fixture
def pgvector_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    instance = open_store("postgres", request, vector_search="pgvector")
    yield instance
    instance.close()


@pytest.mark.slow
def test_pgvector_search_matches_the_exact_index(pgvector_store: Any) -> None:
    from agentcore.knowledge.vectors import adopt

    store = pgvector_store
    assert isinstance(store, VectorSearchStore)
    org_id = org(store)
    for seed in range(3):
        ingest(store, org_id, n=50, d=16, seed=seed)
    ids, vectors = store.load_vectors(org_id, "test", 16)
    index = adopt(ids, vectors)
    query = unit(1, 16, seed=42)[0]
    want_ids, want_scores = index.search(query, 10)
    got_ids, got_scores = store.search_vectors(org_id, "test", query, 10)
    assert got_ids.tolist() == want_ids.tolist()
    np.testing.assert_allclose(got_scores, want_scores, atol=1e-5)
    assert store.search_vectors(org(store, "globex"), "test", query, 10)[0].size == 0


@pytest.mark.slow
def test_pgvector_rows_follow_deletes_and_backfill(request: pytest.FixtureRequest) -> None:
    plain = open_store("postgres", request)
    org_id = org(plain)
    doc_id, _ = ingest(plain, org_id, n=5)
    plain.close()
    # switching to pgvector fills the rows from the segments written before
    store: Any = open_store("postgres", request, vector_search="pgvector")
    try:
        query = unit(1, seed=1)[0]
        assert store.search_vectors(org_id, "test", query, 10)[0].size == 5
        store.delete_document(org_id, "test", doc_id)
        assert store.search_vectors(org_id, "test", query, 10)[0].size == 0
    finally:
        store.close()


@pytest.mark.slow
def test_postgres_wakes_listeners_on_events(request: pytest.FixtureRequest) -> None:
    listener: Any = open_store("postgres", request)
    writer: Any = open_store("postgres", request)
    try:
        assert isinstance(listener, EventWaiter)
        assert not listener.wait_for_events(0.05)  # also subscribes
        org_id = org(writer)
        subscribe(writer, org_id)
        woke: list[bool] = []
        thread = threading.Thread(target=lambda: woke.append(listener.wait_for_events(30)))
        thread.start()
        writer.record_event(event(org_id), now=1.0)
        thread.join(30)
        assert woke == [True]
    finally:
        listener.close()
        writer.close()


@pytest.mark.slow
def test_postgres_schema_newer_than_the_code_is_refused(
    postgres_server: str, request: pytest.FixtureRequest
) -> None:
    import psycopg
    from conftest import create_database

    from agentcore.storage.postgres import PostgresStore, SchemaTooNew

    url = create_database(postgres_server, "agentcore_too_new")
    PostgresStore.open(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO agentcore_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(SchemaTooNew, match="version 999"):
        PostgresStore.open(url)


@pytest.mark.slow
def test_postgres_nodes_migrating_at_once_do_not_race(postgres_server: str) -> None:
    from conftest import create_database

    from agentcore.storage.postgres import PostgresStore

    url = create_database(postgres_server, "agentcore_race")
    errors: list[BaseException] = []
    opened: list[Any] = []
    barrier = threading.Barrier(3)

    def go() -> None:
        barrier.wait()
        try:
            opened.append(PostgresStore.open(url))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == 3
    opened[0].ensure_organization("acme")
    for s in opened:
        assert s.get_organization_by_name("acme") is not None
        s.close()


# the lifecycle, and the optional capabilities both built-in stores have -----------------


def test_ping_answers_until_the_store_is_closed(kind: str, request: pytest.FixtureRequest) -> None:
    node = open_store(kind, request)
    assert node.ping() is None
    node.close()
    with pytest.raises(Exception):  # noqa: B017 - the driver's error, whichever it is
        node.ping()


def test_backlog_and_connections(store: Any) -> None:
    assert isinstance(store, ObservableStore)
    assert store.backlog(10.0) == Backlog(0, 0, 0, 0)
    org_id = org(store)
    processing(store, org_id, 1.0)
    processing(store, org_id, 2.0)
    store.claim_ingest_job(now=10.0, lease_seconds=30)
    gone = subscribe(store, org_id)
    subscribe(store, org_id)
    store.record_event(event(org_id), now=1.0)
    store.delete_subscription(org_id, "test", gone.public.id)  # its delivery failed
    assert store.backlog(11.0) == Backlog(
        ingest_queued=1, ingest_running=1, deliveries_pending=1, deliveries_failed=1
    )
    assert store.backlog(50.0).ingest_running == 0  # the lease ran out: queued again
    assert store.connection_stats().open >= 1


def test_term_sums_are_charged_to_a_shared_budget(store: Any) -> None:
    assert isinstance(store, BudgetedStore)
    budget: Residency[Any, Any] = Residency(budget_bytes=1 << 20)
    store.share_budget(budget)
    org_id = org(store)
    document = make_document(1)
    store.insert_document(
        org_id, "test", document, [("a", [1], [0])], "e1", unit(1), np.ones(1, bool),
        term_counts=(2, {"vacat": 1}),
    )  # fmt: skip
    assert store.term_counts(org_id, "test", ["vacat"]) == (2, {"vacat": 1})
    stats = store.cache_stats()
    assert stats.entries == 1 and stats.bytes > 0 and stats.budget_bytes == 1 << 20


def test_another_process_can_open_the_store_again(store: Any) -> None:
    assert isinstance(store, ReopenableStore)
    org_id = org(store)
    reopen = pickle.loads(pickle.dumps(store.reopener()))  # as it travels to a worker
    again = reopen()
    try:
        assert again.get_organization_by_name("acme").id == org_id
    finally:
        again.close()
