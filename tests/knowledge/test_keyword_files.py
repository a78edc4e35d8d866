"""Keyword files: a workspace's BM25 index read back by a fresh process instead of being
rebuilt from every chunk's text, kept current from the change log, and never trusted
when it is damaged, of another store, or ahead of the store. The same for the store's
snapshot of it, which a process without files of its own reads (a new PostgreSQL node,
``index_dir = "off"``).

A file that was read is left as it was (same inode); a rebuild writes a new one. Every
figure is checked against an index built from the store with no copy at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import agentcore.core
from agentcore import AgentCore
from agentcore.knowledge import KeywordFiles, KeywordSnapshots, _keyword_cache
from agentcore.knowledge._keywords import KeywordIndex
from agentcore.knowledge.text import stems
from agentcore.knowledge.vectors import (
    WorkspaceIndexes,
    _workspace_indexes,
    _workspace_loading,
    segment_root,
)
from agentcore.storage.sql import vectors as sql_vectors

TEXTS = {
    "vacation.txt": "The vacation policy gives every employee twenty five vacation days.",
    "portal.txt": "Reset a password on the XK-4471-Q portal of the IT department.",
    "laptops.txt": "Laptops are replaced every three years by the IT department.",
    "leave.txt": "Parental leave lasts sixteen weeks; vacation days keep accruing.",
}
QUERIES = ["vacation days", "IT department", "XK-4471-Q password", "parental leave weeks"]


def open_core(url: str, index_dir: str) -> AgentCore:
    return AgentCore.open(url, index_dir=index_dir, start_workers=False)


def ranking(core: AgentCore, query: str) -> list[tuple[str, float, float]]:
    found = core.workspace("acme").knowledge.search(query, mode="keyword", top_k=10)
    return [(r.source, round(r.rank_score, 5), round(r.score, 5)) for r in found.results]


def keyword_file(root: Path) -> Path:
    [found] = root.rglob("keywords.bin")
    return found


@pytest.fixture
def index_dir(tmp_path: Path) -> str:
    return str(tmp_path / "index")


@pytest.fixture
def filled(store_url: str, index_dir: str) -> Iterator[str]:
    """A workspace holding ``TEXTS``, searched once by keyword (so its file is written)."""
    with open_core(store_url, index_dir) as core:
        ws = core.workspace("acme")
        for source, text in TEXTS.items():
            ws.knowledge.ingest_text(source, text)
        assert ranking(core, "vacation")
    yield store_url


def reference(url: str) -> dict[str, list[tuple[str, float, float]]]:
    """Each query's keyword ranking from an index built from the store, no copy read."""
    with (
        mock.patch.object(agentcore.core, "_keyword_copies", lambda *args: []),
        open_core(url, "off") as core,
    ):
        return {query: ranking(core, query) for query in QUERIES}


@pytest.mark.both_stores
def test_a_fresh_core_reads_the_file_and_applies_the_log(filled: str, index_dir: str) -> None:
    written = keyword_file(Path(index_dir)).stat()
    with open_core(filled, index_dir) as core:  # writes the file never sees
        ws = core.workspace("acme")
        gone = next(d for d in ws.knowledge.list().documents if d.source == "portal.txt")
        ws.knowledge.delete(gone.id)
        ws.knowledge.ingest_text("new.txt", "The XK-4471-Q vacation portal opens at noon.")
    with open_core(filled, index_dir) as core:
        found = {query: ranking(core, query) for query in QUERIES}
        assert core.keywords.stats().loads == 1
    assert keyword_file(Path(index_dir)).stat().st_ino == written.st_ino  # read, not rebuilt
    assert found == reference(filled)
    sources = {source for source, *_ in found["XK-4471-Q password"]}
    assert "new.txt" in sources and "portal.txt" not in sources


def test_the_index_restored_from_a_file_searches_and_writes_as_the_original(
    tmp_path: Path,
) -> None:
    texts = list(TEXTS.values()) * 3
    original = KeywordIndex(stems.tokens_of)
    original.add(np.arange(12, dtype=np.int64), np.arange(12, dtype=np.int64) % 4, texts)
    original.add(np.array([20, 21]), np.array([1, 2]), ["vacation portal", "noon lunch"])
    original.remove(np.array([3, 7]))  # dead rows and a tail are stored as they are
    files = KeywordFiles(tmp_path, "store-a")
    assert files.write(("org", "test"), 5, original)
    stored = files.read(("org", "test"), stems.tokens_of, newest=5)
    assert stored is not None and stored.version == 5
    restored = stored.index
    for index in (original, restored):  # the same writes on both
        index.add(np.array([30]), np.array([3]), ["a brand new stem: zyxwvut vacation"])
        index.remove(np.array([0, 21]))
    for query in [*QUERIES, "zyxwvut", "noon lunch", "nothing matches this"]:
        a, b = original.search(query, 10), restored.search(query, 10)
        assert a[0].tolist() == b[0].tolist()
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
    assert restored.contains(30) and not restored.contains(0) and len(restored) == len(original)


def test_an_empty_index_round_trips(tmp_path: Path) -> None:
    files = KeywordFiles(tmp_path, "store-a")
    assert files.write(("org", "test"), 0, KeywordIndex(stems.tokens_of))
    stored = files.read(("org", "test"), stems.tokens_of, newest=0)
    assert stored is not None and len(stored.index) == 0
    assert stored.index.search("anything", 5)[0].size == 0


def _garbage(path: Path, url: str, index_dir: str) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _truncated(path: Path, url: str, index_dir: str) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _empty(path: Path, url: str, index_dir: str) -> None:
    path.write_bytes(b"")


def _ahead_of_the_store(path: Path, url: str, index_dir: str) -> None:
    root, identity = segment_root(url, index_dir)
    assert root is not None
    org = path.parent.parent.name
    KeywordFiles(root, identity).write((org, "test"), 10**9, KeywordIndex(stems.tokens_of))


def _of_another_store(path: Path, url: str, index_dir: str) -> None:
    root, _ = segment_root(url, index_dir)
    assert root is not None
    org = path.parent.parent.name
    KeywordFiles(root, "another-store").write((org, "test"), 1, KeywordIndex(stems.tokens_of))


@pytest.mark.parametrize(
    "damage", [_garbage, _truncated, _empty, _ahead_of_the_store, _of_another_store]
)
def test_an_unusable_file_is_rebuilt_from_the_store(
    filled: str, index_dir: str, damage: object
) -> None:
    path = keyword_file(Path(index_dir))
    damage(path, filled, index_dir)  # type: ignore[operator]
    damaged = path.stat().st_ino
    with open_core(filled, index_dir) as core:
        found = {query: ranking(core, query) for query in QUERIES}
    assert found == reference(filled)
    assert path.stat().st_ino != damaged  # written again
    with open_core(filled, index_dir) as core:
        assert {query: ranking(core, query) for query in QUERIES} == found


def test_the_file_is_written_again_once_enough_rows_changed(
    filled: str, index_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = keyword_file(Path(index_dir))
    first = path.stat().st_ino
    with open_core(filled, index_dir) as core:
        ws = core.workspace("acme")
        assert ranking(core, "vacation")  # read from the file
        assert path.stat().st_ino == first
        monkeypatch.setattr(_keyword_cache, "REWRITE_MIN_ROWS", 2)
        ws.knowledge.ingest_text("a.txt", "One more line about vacation.")
        assert ranking(core, "vacation")  # caught up one row: not yet due
        assert core.keywords.wait_for_writes(60)
        assert path.stat().st_ino == first
        ws.knowledge.ingest_text("b.txt", "And another about vacation.")
        assert ranking(core, "vacation")  # two rows since the file: written again...
        assert core.keywords.wait_for_writes(60)  # ...off the searching thread
        assert path.stat().st_ino != first
    with open_core(filled, index_dir) as core:  # and read back: nothing left to apply
        found = {query: ranking(core, query) for query in QUERIES}
    assert path.stat().st_ino != first
    assert found == reference(filled)


def test_index_dir_off_keeps_no_keyword_file(store_url: str, tmp_path: Path) -> None:
    with open_core(store_url, "off") as core:
        core.workspace("acme").knowledge.ingest_text("a.txt", TEXTS["vacation.txt"])
        assert ranking(core, "vacation")
    assert not list(tmp_path.rglob("keywords.bin"))


def test_a_keyword_search_reads_only_the_vectors_it_scores(
    filled: str, index_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace_indexes, "STORED_SCORE_SEARCHES", 3)
    with open_core(filled, index_dir) as core:
        assert isinstance(core.indexes, WorkspaceIndexes)
        before = ranking(core, "vacation days")
        assert core.indexes.stats()["workspaces"] == 0  # the vector index stayed unloaded
        core.workspace("acme").knowledge.search("vacation days", top_k=10)  # loads it
        assert core.indexes.stats()["workspaces"] == 1
        assert ranking(core, "vacation days") == before  # the same cosine scores
    with open_core(filled, index_dir) as core:  # keyword searches only
        for _ in range(3):
            assert ranking(core, "vacation days") == before
            assert core.indexes.stats()["workspaces"] == 0
        assert ranking(core, "vacation days") == before  # the fourth loads the index
        assert core.indexes.stats()["workspaces"] == 1


def test_a_keyword_search_maps_segment_files_at_once(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace_loading, "SEGMENT_MIN_BYTES", 0)
    index_dir = str(tmp_path / "index")
    with open_core(str(db_path), index_dir) as core:
        core.workspace("acme").knowledge.ingest_text("a.txt", TEXTS["vacation.txt"])
        before = ranking(core, "vacation days")
        core.workspace("acme").knowledge.search("vacation days")
    assert list(Path(index_dir).rglob("manifest.json"))  # written as the core closed
    with open_core(str(db_path), index_dir) as core:
        assert ranking(core, "vacation days") == before
        assert core.indexes.stats()["workspaces"] == 1  # mapping is cheap: loaded
        assert core.indexes.stats()["segment_loads"] == 1


def test_an_embedded_core_writes_segment_files_when_it_closes(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace_loading, "SEGMENT_MIN_BYTES", 0)  # even this small one
    index_dir = str(tmp_path / "index")
    with open_core(str(db_path), index_dir) as core:  # never started
        ws = core.workspace("acme")
        for source, text in TEXTS.items():
            ws.knowledge.ingest_text(source, text)
        first = [r.chunk for r in ws.knowledge.search("vacation days", top_k=3).results]
    assert list(Path(index_dir).rglob("manifest.json"))
    with open_core(str(db_path), index_dir) as core:
        found = [r.chunk for r in core.workspace("acme").knowledge.search("vacation days").results]
        assert found[:3] == first
        assert core.indexes.stats()["segment_loads"] == 1  # mapped, not read from the store


def test_postgres_keeps_its_files_in_the_machine_cache(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with AgentCore.open(postgres_url, start_workers=False) as core:  # index_dir "auto"
        core.workspace("acme").knowledge.ingest_text("a.txt", TEXTS["vacation.txt"])
        before = ranking(core, "vacation days")
    path = keyword_file(tmp_path / "cache" / "agentcore" / "index")
    written = path.stat().st_ino
    with AgentCore.open(postgres_url, start_workers=False) as core:
        assert ranking(core, "vacation days") == before
    assert path.stat().st_ino == written  # read back, not rebuilt


def test_a_cache_that_cannot_be_made_keeps_no_files(
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    with (
        caplog.at_level("WARNING", logger="agentcore"),
        AgentCore.open(postgres_url, start_workers=False) as core,
    ):
        core.workspace("acme").knowledge.ingest_text("a.txt", TEXTS["vacation.txt"])
        assert ranking(core, "vacation days")
    said = [r.getMessage() for r in caplog.records if "no index files" in r.getMessage()]
    assert len(said) == 1 and "index_dir" in said[0]


def test_a_file_that_cannot_be_written_leaves_searches_working(
    filled: str, index_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = keyword_file(Path(index_dir))
    path.unlink()
    path.mkdir()  # where the file would go: a directory, which no rename replaces
    with caplog.at_level("WARNING", logger="agentcore"), open_core(filled, index_dir) as core:
        assert {query: ranking(core, query) for query in QUERIES} == reference(filled)
        assert core.keywords.wait_for_writes(60)
    assert any("could not write the keyword file" in r.getMessage() for r in caplog.records)


# the store's snapshot ------------------------------------------------------------------


def fill(core: AgentCore) -> str:
    """``TEXTS`` in acme's test workspace, searched by keyword; its organization's id."""
    ws = core.workspace("acme")
    for source, text in TEXTS.items():
        ws.knowledge.ingest_text(source, text)
    assert ranking(core, "vacation")
    assert core.keywords.wait_for_writes(60)
    return ws.organization_id


class TextReads:
    """Counts the chunk texts a core's store reads (what building a keyword index does)."""

    def __init__(self, core: AgentCore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ids = 0
        read = core.store.chunk_texts_by_id

        def counted(ids: list[int]) -> dict[int, str]:
            self.ids += len(ids)
            return read(ids)

        monkeypatch.setattr(core.store, "chunk_texts_by_id", counted)


@pytest.mark.both_stores
def test_a_process_without_files_reads_the_stores_snapshot(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres = store_url.startswith("postgres")
    # SQLite: no files at all; PostgreSQL: a second node with a cache of its own
    first, second = (str(tmp_path / "a"), str(tmp_path / "b")) if postgres else ("off", "off")
    with open_core(store_url, first) as core:
        org = fill(core)
        stored = core.store.keyword_snapshot(org, "test")
        assert stored is not None and stored[0] == core.store.knowledge_state(org, "test").version
    with open_core(store_url, second) as core:
        reads = TextReads(core, monkeypatch)
        found = {query: ranking(core, query) for query in QUERIES}
        assert core.keywords.stats().loads == 1
        assert reads.ids == 0  # read back, not built from the chunks' texts
        assert core.keywords.wait_for_writes(60)
    assert found == reference(store_url)
    if postgres:  # the new node wrote its own file from the snapshot
        assert keyword_file(tmp_path / "b").is_file()
    else:
        assert not list(tmp_path.rglob("keywords.bin"))


def test_a_sqlite_file_with_files_beside_it_keeps_no_snapshot(filled: str) -> None:
    with open_core(filled, "auto") as core:
        org = core.workspace("acme").organization_id
        assert ranking(core, "vacation")
        assert core.keywords.wait_for_writes(60)
        assert core.store.keyword_snapshot(org, "test") is None
    assert agentcore.core._keyword_copies(core.store, None, "") != []  # "off": the store's
    with AgentCore.open(":memory:") as memory:  # no other process opens it: none
        assert agentcore.core._keyword_copies(memory.store, None, "") == []


def test_a_snapshot_in_several_parts_round_trips(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_vectors, "SNAPSHOT_PART_BYTES", 4096)
    with open_core(str(db_path), "off") as core:
        org = fill(core)
        stored = core.store.keyword_snapshot(org, "test")
        assert stored is not None and len(stored[1]) > 4 * 4096  # in five parts or more
        version = stored[0]
        copy = KeywordSnapshots(core.store)
        restored = copy.read((org, "test"), stems.tokens_of, newest=version)
        assert restored is not None and restored.version == version
        assert len(restored.index) == len(TEXTS)
        assert copy.read((org, "test"), stems.tokens_of, newest=version - 1) is None  # ahead


def _garbled(core: AgentCore, org: str) -> None:
    with core.store.db.write() as conn:
        conn.execute("UPDATE keyword_snapshots SET data = ?", [os.urandom(5000)])


def _mixed(core: AgentCore, org: str) -> None:
    with core.store.db.write() as conn:  # one part of another write
        conn.execute("UPDATE keyword_snapshots SET version = version - 1 WHERE part = 1")


def _ahead(core: AgentCore, org: str) -> None:
    with core.store.db.write() as conn:
        conn.execute("UPDATE keyword_snapshots SET version = 1000000000")


def _of_another_tokenizer(core: AgentCore, org: str) -> None:
    with core.store.db.write() as conn:
        row = conn.execute("SELECT data FROM keyword_snapshots WHERE part = 0").fetchone()
        data = bytes(row["data"]).replace(b'"tokenizer": ', b'"tokenizer":-', 1)
        conn.execute("UPDATE keyword_snapshots SET data = ? WHERE part = 0", [data])


@pytest.mark.parametrize("damage", [_garbled, _mixed, _ahead, _of_another_tokenizer])
def test_an_unusable_snapshot_is_rebuilt_and_replaced(
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: object,
) -> None:
    monkeypatch.setattr(sql_vectors, "SNAPSHOT_PART_BYTES", 4096)
    url = str(db_path)
    with open_core(url, "off") as core:
        org = fill(core)
        damage(core, org)  # type: ignore[operator]
    with caplog.at_level("WARNING", logger="agentcore"), open_core(url, "off") as core:
        reads = TextReads(core, monkeypatch)
        found = {query: ranking(core, query) for query in QUERIES}
        assert reads.ids == len(TEXTS)  # built from the store
        assert core.keywords.wait_for_writes(60)
        version = core.store.knowledge_state(org, "test").version
        fixed = KeywordSnapshots(core.store).read((org, "test"), stems.tokens_of, version)
        assert fixed is not None and fixed.version == version  # and stored again
    assert found == reference(url)


def hybrid(core: AgentCore, query: str) -> list[tuple[str, float, float]]:
    found = core.workspace("acme").knowledge.search(query, mode="hybrid", top_k=10)
    return [(r.source, round(r.rank_score, 5), round(r.score, 5)) for r in found.results]


@pytest.mark.both_stores
def test_a_cold_hybrid_search_loads_its_keywords_beside_its_vectors(filled: str) -> None:
    with open_core(filled, "off") as core:
        warm = {query: hybrid(core, query) for query in QUERIES}
    with open_core(filled, "off") as core:  # nothing loaded: both indexes load at once
        threads = set()
        get = core.keywords.get

        def noting(*key: str) -> KeywordIndex:
            threads.add(threading.current_thread().name)
            return get(*key)

        with mock.patch.object(core.keywords, "get", noting):
            cold = {query: hybrid(core, query) for query in QUERIES}
            assert core.keywords.stats().loads == 1
            # the first search loaded the keywords on the loading thread; the next ones,
            # the index loaded, on the searching thread
            assert any(name.startswith("agentcore-keyword-load") for name in threads)
            assert threading.current_thread().name in threads
            threads.clear()
            # a write since: caught up on the searching thread, not loaded again
            core.workspace("acme").knowledge.ingest_text("new.txt", "Vacation days carry over.")
            assert "new.txt" in {source for source, *_ in hybrid(core, "vacation days carry")}
            assert threads == {threading.current_thread().name}
            assert core.keywords.stats().loads == 1
    assert cold == warm


def test_a_failed_keyword_load_fails_the_hybrid_search(filled: str) -> None:
    with open_core(filled, "off") as core:

        def failing(*key: str) -> KeywordIndex:
            raise OSError("the disk went away")

        with (
            mock.patch.object(core.keywords, "get", failing),
            pytest.raises(OSError, match="went away"),
        ):
            hybrid(core, "vacation days")
        assert hybrid(core, "vacation days")  # the next search loads it


def test_get_soon_loads_on_the_caller_once_the_pool_is_closed(filled: str) -> None:
    with open_core(filled, "off") as core:
        cache = _keyword_cache.KeywordCache(core.store, stems.tokens_of, load=closed_pool)
        org = core.workspace("acme").organization_id
        index = cache.get_soon(org, "test")()
        assert index is cache.get(org, "test")  # loaded once, here
        assert cache.stats().loads == 1


def closed_pool(fn: object, /, *args: object) -> object:
    raise RuntimeError("the pool is closed")
