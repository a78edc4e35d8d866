"""The index cache's memory budget: LRU eviction, held indexes, single loads, exact results.

Real SQLite files (and PostgreSQL where marked), the built-in hashing embedder; the
reference for "right" is always an unbounded cache on the same store.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import file_indexes, open_seen, run_python, seen, stored_chunk_ids

from agentcore import AgentCore
from agentcore._memory_budget import Residency
from agentcore.config import Settings, machine_memory
from agentcore.knowledge.vectors import Embedding, WorkspaceIndexes
from agentcore.knowledge.vectors import _segments as segments
from agentcore.knowledge.vectors import _workspace_loading as loading
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.storage.records import IndexRows
from agentcore.storage.sqlite import SQLiteStore

ENV = "test"
TEXT = "Tenant {n} handbook. The red pump number {n} needs oil every {n} weeks. " * 6
QUERIES = ["red pump oil", "handbook weeks", "tenant number", "oil every week"]


def _tenant(core: AgentCore, n: int) -> str:
    ws = core.workspace(f"tenant-{n}", ENV)
    ws.knowledge.ingest_text(f"t{n}.txt", TEXT.format(n=n))
    return ws.organization_id


def _search(core: AgentCore, org: str, query: str = "red pump oil") -> list[tuple[int, float]]:
    ids, scores = core.indexes.search(
        org, ENV, lambda: core.embedders["hashing-v1"].embed([query], kind="query")[0], 5
    )
    return list(zip(ids.tolist(), scores.tolist(), strict=True))


def _same(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """The same ids in the same order, and the same scores but for float32 rounding (a
    part mapped from a file and one in RAM may sum a dot product in another order)."""
    return [i for i, _ in got] == [i for i, _ in expected] and np.allclose(
        [s for _, s in got], [s for _, s in expected], rtol=0, atol=1e-6
    )


def _one_workspace_bytes(db: Path) -> int:
    """What one tenant's index is charged (all tenants here are the same size)."""
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        org = _tenant(core, 0)
        _search(core, org)
        charged = core.indexes.stats()["bytes"]
    assert isinstance(charged, int) and charged > 0
    return charged


# -- the LRU itself ------------------------------------------------------------------


def test_residency_evicts_the_least_recently_used_first() -> None:
    evicted: list[str] = []
    lru: Residency[str, str] = Residency(budget_bytes=30, on_evict=lambda k, v: evicted.append(k))
    for key in "abc":
        lru.put(key, key.upper(), 10)
    assert lru.keys() == ["a", "b", "c"] and not evicted
    slot = lru.acquire("a")  # used: now the most recent
    assert slot is not None and slot.value == "A"
    lru.release(slot)
    lru.put("d", "D", 10)
    assert evicted == ["b"] and lru.keys() == ["c", "a", "d"]
    assert lru.stats().bytes == 30 and lru.stats().evictions == 1


def test_residency_never_evicts_a_held_value_and_catches_up_when_released() -> None:
    lru: Residency[str, str] = Residency(budget_bytes=20)
    held = lru.put("big", "B", 15, held=True)
    lru.put("x", "X", 10)  # over: "big" is older but held, so "x" goes
    assert lru.keys() == ["big"]
    assert lru.stats().pinned == 1
    lru.put("y", "Y", 10)  # over again while "big" is held: "big" stays
    assert "big" in lru and lru.stats().bytes == 15
    lru.charge("big", "B", 25)  # grew past the budget alone: still held, still there
    assert "big" in lru
    lru.release(held)  # released over the budget: now it goes
    assert "big" not in lru and lru.stats().bytes == 0


def test_residency_bounds_mapped_files_too_and_charges_only_the_current_value() -> None:
    lru: Residency[str, str] = Residency(budget_bytes=None, max_files=2)
    lru.put("a", "A", 1, files=1)
    lru.put("b", "B", 1, files=1)
    lru.put("c", "C", 1, files=0)
    assert lru.keys() == ["a", "b", "c"]
    lru.charge("c", "C", 1, files=1)  # three files: the oldest holder goes
    assert lru.keys() == ["b", "c"]
    lru.charge("b", "stale", 100, files=5)  # not b's value any more: ignored
    assert lru.stats().files == 2 and lru.stats().bytes == 2
    assert lru.discard("b", "other") is None and lru.discard("b") == "B"
    assert lru.keys() == ["c"]


def test_residency_without_a_budget_keeps_everything() -> None:
    lru: Residency[int, int] = Residency()
    for i in range(1000):
        lru.put(i, i, 1 << 20)
    assert len(lru) == 1000 and lru.stats().evictions == 0


# -- the cache under a budget -----------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tenants.db"


def test_the_cache_evicts_least_recently_searched_workspaces(db: Path) -> None:
    one = _one_workspace_bytes(db)
    with open_seen(
        str(db), start_workers=False, index_dir="off", index_cache_bytes=int(2.5 * one)
    ) as core:
        orgs = [_tenant(core, n) for n in range(1, 5)]
        cache = core.indexes
        a, b, c, d = orgs
        for org in (a, b):
            _search(core, org)
        assert cache.loaded() == [(a, ENV), (b, ENV)]
        _search(core, a)  # a is now more recent than b
        _search(core, c)  # over budget: b goes, not a
        assert cache.loaded() == [(a, ENV), (c, ENV)]
        _search(core, d)
        assert cache.loaded() == [(c, ENV), (d, ENV)]
        stats = cache.stats()
        assert stats["evictions"] == 2 and stats["entries"] == 2
        assert stats["bytes"] is not None and stats["bytes"] <= int(2.5 * one)
        assert stats["budget_bytes"] == int(2.5 * one)
        assert seen(core)["index.evict"] == 2  # told to the observer (metrics) too
        # an evicted workspace loads again at its next search, with the same answer
        before = cache.stats()["loads"]
        assert _search(core, b)[0][0] in stored_chunk_ids(
            core.store, b, ENV, _first_document(core, b)
        )
        assert cache.stats()["loads"] == before + 1


def test_compaction_in_ram_moves_the_charge_with_the_rows(db: Path) -> None:
    # an index kept in RAM compacts away deleted rows in the background: the budget's
    # charge must follow at once, not wait for the workspace's next write or load
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        ws = core.workspace("acme", ENV)
        documents = [
            ws.knowledge.ingest_text(f"d{n}.txt", TEXT.format(n=n) * 20) for n in range(30)
        ]
        ws.knowledge.search("red pump")
        key = (ws.organization_id, ENV)
        index = core.indexes.get(*key)
        full = core.indexes.stats()["bytes"]
        assert full == index.resident_bytes  # no rows held back: a search added them
        for document in documents[:25]:
            ws.knowledge.delete(document.id)
        assert core.indexes.wait_for_maintenance(30)
        kept = sum(len(stored_chunk_ids(core.store, *key, d.id)) for d in documents[25:])
        assert len(index) == kept
        charged = core.indexes.stats()["bytes"]
        assert charged == index.resident_bytes
        assert isinstance(full, int) and isinstance(charged, int) and charged < full / 2
        ws.knowledge.search("red pump")  # a search alone (no write) keeps it right
        assert core.indexes.stats()["bytes"] == index.resident_bytes


def _first_document(core: AgentCore, org: str) -> str:
    documents, _ = core.store.list_documents(org, ENV, limit=1, starting_after=None)
    return documents[0].id


def test_a_search_in_flight_is_never_evicted(db: Path) -> None:
    one = _one_workspace_bytes(db)
    with AgentCore.open(
        str(db), start_workers=False, index_dir="off", index_cache_bytes=int(1.5 * one)
    ) as core:
        a, b, c = (_tenant(core, n) for n in range(1, 4))
        cache = core.indexes
        embed = core.embedders["hashing-v1"]
        inside, leave = threading.Event(), threading.Event()
        found: list[Any] = []

        def query() -> Any:  # called while the search holds a's index
            inside.set()
            assert leave.wait(60)
            return embed.embed(["red pump oil"], kind="query")[0]

        worker = threading.Thread(target=lambda: found.append(cache.search(a, ENV, query, 3)))
        worker.start()
        assert inside.wait(60)
        _search(core, b)  # over budget, and a is the least recent: but it is in use
        _search(core, c)  # so b went, and c itself, once its search was over
        assert cache.loaded() == [(a, ENV)]
        assert cache.stats()["pinned"] == 1
        leave.set()
        worker.join(30)
        assert found and len(found[0][0]) == 1  # its one chunk
        stats = cache.stats()
        assert stats["pinned"] == 0 and stats["evictions"] == 2
        assert cache.loaded() == [(a, ENV)]


class SlowLoadStore(SQLiteStore):
    """A real SQLite store whose whole-workspace reads take a while and are counted."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.loads = 0

    def load_index(
        self,
        organization_id: str,
        environment: str,
        dimension: int,
        *,
        vectors: bool = True,
        located: bool = False,
    ) -> IndexRows:
        self.loads += 1
        time.sleep(0.2)
        return super().load_index(
            organization_id, environment, dimension, vectors=vectors, located=located
        )


def test_concurrent_loads_of_one_workspace_load_it_once(db: Path) -> None:
    with AgentCore.open(str(db), start_workers=False) as core:
        org = _tenant(core, 1)
    store = SlowLoadStore(str(db))
    embedder = HashingEmbedder()
    cache = WorkspaceIndexes(
        store, embedding=Embedding({embedder.name: embedder}, embedder.name), budget_bytes=1 << 30
    )
    try:
        start = threading.Barrier(8)
        results: list[int] = []

        def search() -> None:
            start.wait()
            ids, _ = cache.search(
                org, ENV, lambda: embedder.embed(["red pump"], kind="query")[0], 3
            )
            results.append(len(ids))

        threads = [threading.Thread(target=search) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert results == [1] * 8  # its one chunk, for every thread
        assert store.loads == 1 and cache.stats()["loads"] == 1
        assert not cache._loaded.locks  # no lock is left behind for the workspace
    finally:
        cache.close()
        store.close()


def test_the_budget_setting_and_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCORE_INDEX_CACHE_BYTES", raising=False)
    assert Settings(_env_file=None).index_cache_budget == machine_memory() // 4
    assert Settings(_env_file=None, index_cache_bytes=0).index_cache_budget == 0
    monkeypatch.setenv("AGENTCORE_INDEX_CACHE_BYTES", str(32 << 20))
    assert Settings(_env_file=None).index_cache_budget == 32 << 20
    with pytest.raises(ValueError, match="index_cache_bytes"):
        Settings(_env_file=None, index_cache_bytes=-1)
    # serve --workers N: a set budget is each worker's, the default is shared among them
    assert Settings(_env_file=None).index_cache_budget_of(4) == 32 << 20
    monkeypatch.delenv("AGENTCORE_INDEX_CACHE_BYTES")
    assert Settings(_env_file=None).index_cache_budget_of(4) == machine_memory() // 4 // 4
    assert machine_memory() > 0


def test_a_zero_budget_loads_every_search_and_answers_the_same(db: Path) -> None:
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as full:
        org = _tenant(full, 1)
        expected = _search(full, org)
    with AgentCore.open(str(db), start_workers=False, index_dir="off", index_cache_bytes=0) as core:
        for _ in range(3):
            assert _search(core, org) == expected
        stats = core.indexes.stats()
        assert stats["entries"] == 0 and stats["loads"] == 3 and stats["evictions"] == 3


# -- evicting never makes a search wrong --------------------------------------------------

WRITER = """
import sys
from agentcore import AgentCore
url, org_name, source, text = sys.argv[1:5]
with AgentCore.open(url, start_workers=False) as core:
    core.workspace(org_name, "test").knowledge.ingest_text(source, text, wait=True)
"""


@pytest.fixture
def small_segment_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)


@pytest.mark.both_stores
@pytest.mark.parametrize("index_dir", ["off", "segments"])
@pytest.mark.usefixtures("small_segment_files")
def test_evicting_never_changes_an_answer(store_url: str, index_dir: str, tmp_path: Path) -> None:
    """A cache that holds one workspace at a time answers exactly as an unbounded one,
    through appends, deletes and reloads, with writes from both cores and another
    process; with segment files, evicted workspaces reload from their files."""
    where = "off" if index_dir == "off" else str(tmp_path / "segments")
    settings: dict[str, Any] = {"start_workers": False, "index_dir": where}
    tight = AgentCore.open(store_url, index_cache_bytes=1, **settings)
    tight.start()  # its maintenance loop writes segment files
    full = AgentCore.open(store_url, index_cache_bytes=1 << 40, **settings)
    try:
        names = [f"org-{i}" for i in range(3)]
        orgs = [tight.workspace(name, ENV).organization_id for name in names]
        rng = np.random.default_rng(7)
        documents: dict[str, list[str]] = {org: [] for org in orgs}
        for step in range(24):
            i = int(rng.integers(len(orgs)))
            org, name = orgs[i], names[i]
            writer = [tight, full][step % 2]
            action = rng.choice(["add", "add", "delete", "remote"])
            if action == "delete" and documents[org]:
                victim = documents[org].pop(int(rng.integers(len(documents[org]))))
                writer.workspace(name, ENV).knowledge.delete(victim)
            elif action == "remote":
                text = TEXT.format(n=step) + f" remote {step}"
                out = run_python(WRITER, store_url, name, f"remote-{step}.txt", text)
                assert out.returncode == 0, out.stderr
                documents[org].append(_first_document_named(full, org, f"remote-{step}.txt"))
            else:
                doc = writer.workspace(name, ENV).knowledge.ingest_text(
                    f"s{step}.txt", TEXT.format(n=step)
                )
                documents[org].append(doc.id)
            for query in QUERIES[:2]:
                for other in orgs:
                    got, expected = _search(tight, other, query), _search(full, other, query)
                    assert _same(got, expected), (step, action, got, expected)
            tight.indexes.wait_for_maintenance(30)
        stats = tight.indexes.stats()
        assert stats["entries"] <= 1 and stats["evictions"] > 20
        if index_dir == "segments":
            assert stats["segment_loads"] > 0 and stats["segment_fallbacks"] == 0
    finally:
        tight.close()
        full.close()


def _first_document_named(core: AgentCore, org: str, source: str) -> str:
    documents, _ = core.store.list_documents(org, ENV, limit=100, starting_after=None)
    return next(d.id for d in documents if d.source == source)


# -- segment files within OS limits --------------------------------------------------------


def test_small_workspaces_get_no_segment_files_and_large_ones_are_mapped(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loading, "SEGMENT_MIN_BYTES", 64 * 4096)  # 64 rows at d=1024
    with AgentCore.open(str(db), start_workers=False, index_dir="auto") as core:
        core.start()
        small = _tenant(core, 1)
        ws = core.workspace("large", ENV)
        for n in range(24):
            ws.knowledge.ingest_text(f"l{n}.txt", TEXT.format(n=n) * 4)
        large = ws.organization_id
        assert core.store.count_vectors(large, ENV) >= 64
        for org in (small, large):
            _search(core, org)
        assert core.indexes.wait_for_maintenance(30)
        root = Path(str(db) + ".index")
        assert not any(root.rglob(f"*{small}*")), "a small workspace wrote segment files"
        assert list(root.rglob("seg-*.vec")), "a large workspace wrote none"
    with AgentCore.open(str(db), start_workers=False, index_dir="auto") as core:
        for org in (small, large):
            _search(core, org)
        stats = core.indexes.stats()
        assert stats["segment_loads"] == 1 and stats["segment_fallbacks"] == 0
        index = core.indexes.get(large, ENV)
        # read into memory, not mapped: the file is under MAP_MIN_BYTES (1 MiB)
        assert index.mapped_files == 0 and stats["mapped_files"] == 0
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)
    with AgentCore.open(str(db), start_workers=False, index_dir="auto") as core:
        index = core.indexes.get(large, ENV)
        assert index.mapped_files == 1 and core.indexes.stats()["mapped_files"] == 1


def test_mapped_files_are_bounded_and_closed_on_eviction(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)
    with AgentCore.open(str(db), start_workers=False, index_dir="auto") as core:
        core.start()
        orgs = [_tenant(core, n) for n in range(6)]
        for org in orgs:
            _search(core, org)
            assert core.indexes.wait_for_maintenance(30)
    gc.collect()  # the first core's cycles, with its mappings
    assert _open_vec_files() == 0
    store, cache = file_indexes(db, max_mapped_files=2)
    embedder = HashingEmbedder()
    try:
        for org in orgs:
            _search_cache(cache, embedder, org)
            assert cache.stats()["mapped_files"] <= 2
        assert cache.stats()["segment_loads"] == 6
        assert cache.loaded() == [(orgs[4], ENV), (orgs[5], ENV)]
        assert _open_vec_files() <= 2
    finally:
        cache.close()
        store.close()


def test_a_load_from_segment_files_keeps_them_and_its_charge(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # segment files with deletes in the change log since their manifest: loaded from the
    # files and the log, the index's maintenance is the maintenance loop's (new segment
    # files, the budget charged again), never RAM steps on the search helpers (they once
    # ran, replacing the mapped part by a RAM one the budget was not charged for)
    monkeypatch.setattr(loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)
    with AgentCore.open(str(db), start_workers=False) as core:
        core.start()
        ws = core.workspace("acme", ENV)
        docs = [ws.knowledge.ingest_text(f"{n}.txt", TEXT.format(n=n)) for n in range(6)]
        _search(core, ws.organization_id)
        assert core.indexes.wait_for_maintenance(30)  # its segment files and manifest
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        ws = core.workspace("acme", ENV)
        for document in docs[:3]:
            ws.knowledge.delete(document.id)  # in the change log only
    with AgentCore.open(str(db), start_workers=False) as core:
        core.start()
        ws = core.workspace("acme", ENV)
        hits = ws.knowledge.search("red pump oil", top_k=5).results
        assert sorted({h.document_id for h in hits}) == sorted(d.id for d in docs[3:])
        assert core.indexes.stats()["segment_loads"] == 1
        assert core.indexes.wait_for_maintenance(120)
        time.sleep(0.5)  # the helpers' RAM steps, had any been scheduled, have run
        index = core.indexes.get(ws.organization_id, ENV)
        assert index.parts() and all(part.mapped for part in index.parts())
        assert core.indexes.stats()["bytes"] == index.resident_bytes


def _search_cache(cache: WorkspaceIndexes, embedder: HashingEmbedder, org: str) -> None:
    ids, _ = cache.search(org, ENV, lambda: embedder.embed(["red pump"], kind="query")[0], 3)
    assert len(ids)


def _open_vec_files() -> int:
    """Segment files this process holds open (each mapping keeps one)."""
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".vec"):
                count += 1
        except OSError:
            continue
    return count


def test_unusable_segment_files_are_logged_and_counted(
    db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(loading, "SEGMENT_MIN_BYTES", 0)
    with AgentCore.open(str(db), start_workers=False, index_dir="auto") as core:
        core.start()
        org = _tenant(core, 1)
        expected = _search(core, org)
        assert core.indexes.wait_for_maintenance(30)
    for segment in Path(str(db) + ".index").rglob("seg-*.vec"):
        segment.write_bytes(b"\0" * 10)  # truncated
    with open_seen(str(db), start_workers=False, index_dir="auto") as core:
        assert _search(core, org) == expected  # from the store, and said so
        stats = core.indexes.stats()
        assert stats["segment_fallbacks"] == 1 and stats["segment_loads"] == 0
        assert seen(core)["index.segment_fallback"] == 1
    assert any(
        "segment files of" in r.getMessage() and "not used" in r.getMessage()
        for r in caplog.records
    )
