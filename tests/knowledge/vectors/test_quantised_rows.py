"""Quantised indexes in RAM keep their codes only: the float32 rows stay in the store.

An int8 (or float16) workspace loaded from the store re-scores its few candidates
against float32 rows read back from the store, so it costs a fraction of a float32
index and answers exactly as one (the reference: a float32 core on the same store).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from helpers import stored_chunk_ids

from agentcore import AgentCore
from agentcore.knowledge.vectors import VectorIndex, WorkspaceRows, adopt
from agentcore.knowledge.vectors._parts import StoredRows, codec_named
from agentcore.storage.sqlite import SQLiteStore

ENV = "test"
WORDS = ["pump", "valve", "filter", "seal", "gasket", "boiler", "turbine", "piston", "rotor"]


def _text(i: int) -> str:
    rng = np.random.default_rng(i)
    words = [WORDS[w] for w in rng.integers(len(WORDS), size=40)]
    return f"Manual {i}. " + " ".join(words) + f" unit{i}."


def _fill(core: AgentCore, documents: int) -> tuple[str, list[str]]:
    ws = core.workspace("acme", ENV)
    ids = [ws.knowledge.ingest_text(f"m{i}.txt", _text(i) * 3).id for i in range(documents)]
    return ws.organization_id, ids


def _answers(core: AgentCore, org: str, queries: list[str]) -> list[list[tuple[int, float]]]:
    embed = core.embedders[core.settings.embedder].embed
    out = []
    for query in queries:
        ids, scores = core.indexes.search(org, ENV, lambda q=query: embed([q], kind="query")[0], 10)
        out.append(list(zip(ids.tolist(), scores.tolist(), strict=True)))
    return out


def _same(got: list[list[tuple[int, float]]], expected: list[list[tuple[int, float]]]) -> None:
    for a, b in zip(got, expected, strict=True):
        _same_ranking([i for i, _ in a], [s for _, s in a], [i for i, _ in b], [s for _, s in b])


def _same_ranking(ids: Any, scores: Any, want_ids: Any, want_scores: Any) -> None:
    """The same scores rank by rank (to float32 rounding) and the same ids, but for two
    ids whose scores differ by rounding alone, which may come in either order."""
    np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    for rank, (found, wanted) in enumerate(zip(ids, want_ids, strict=True)):
        if found != wanted:  # a near tie: the wanted id is within rounding of this rank
            at = list(ids).index(wanted) if wanted in list(ids) else None
            assert at is not None and abs(scores[at] - want_scores[rank]) <= 1e-6, (rank, ids)


QUERIES = [f"{WORDS[i % 9]} {WORDS[(i + 5) % 9]} unit{i * 3}" for i in range(12)]


@pytest.mark.both_stores
@pytest.mark.parametrize("codec", ["int8", "float16"])
def test_a_quantised_index_in_ram_keeps_codes_only_and_answers_exactly(
    store_url: str, codec: str
) -> None:
    settings: dict[str, Any] = {"start_workers": False, "index_dir": "off"}
    with AgentCore.open(store_url, index_dtype=codec, **settings) as small:
        org, documents = _fill(small, 200)
        index = small.indexes.get(org, ENV)
        (part,) = index.parts()
        assert isinstance(part.vectors, StoredRows)  # no float32 copy in RAM
        assert part.codes.dtype == np.dtype("i1" if codec == "int8" else "<f2")
        with AgentCore.open(store_url, **settings) as exact:
            assert exact.store.knowledge_state(org, ENV).index_dtype == codec
            # the same rows as float32, for the reference
            ids, vectors = exact.store.load_vectors(org, ENV, index.dimension)
            reference = adopt(ids, vectors)  # as a float32 workspace loads
            embed = exact.embedders[exact.settings.embedder].embed
            for query in QUERIES:
                want = reference.search(embed([query], kind="query")[0], 10)
                got = index.search(embed([query], kind="query")[0], 10)
                _same_ranking(got[0].tolist(), got[1], want[0].tolist(), want[1])
            float32_bytes = reference.resident_bytes
        ratio = index.resident_bytes / float32_bytes
        assert ratio <= (0.3 if codec == "int8" else 0.55), ratio
        # rows deleted since the load are no candidates (their rows read back as NaN)
        gone = stored_chunk_ids(small.store, org, ENV, documents[0])
        assert gone
        small.workspace("acme", ENV).knowledge.delete(documents[0])
        hits = [i for answer in _answers(small, org, QUERIES) for i, _ in answer]
        assert not set(hits) & set(gone)


def _reference_answers(core: AgentCore, org: str, index: VectorIndex) -> None:
    """``index`` answers every query as a float32 index of the store's rows now does."""
    ids, vectors = core.store.load_vectors(org, ENV, index.dimension)
    reference = adopt(ids, vectors)
    embed = core.embedders[core.settings.embedder].embed
    for query in QUERIES:
        q = embed([query], kind="query")[0]
        want, got = reference.search(q, 10), index.search(q, 10)
        _same_ranking(got[0].tolist(), got[1], want[0].tolist(), want[1])


@pytest.mark.both_stores
@pytest.mark.parametrize("codec", ["int8", "float16"])
def test_rows_read_back_from_many_segments_after_deletes_and_appends(
    store_url: str, codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings: dict[str, Any] = {"start_workers": False, "index_dir": "off"}
    with AgentCore.open(store_url, index_dtype=codec, **settings) as core:
        store = core.store
        dimension = core.embedders[core.settings.embedder].dimension
        # segments of two rows: a document of more chunks is split over several, and a
        # search's candidates are read back from many segments, several from some
        monkeypatch.setattr(store, "dialect", replace(store.dialect, segment_bytes=8 * dimension))
        ws = core.workspace("acme", ENV)
        documents = [
            ws.knowledge.ingest_text(f"m{i}.txt", _text(i) * (3 + i % 8)).id for i in range(40)
        ]
        org = ws.organization_id
        with store.db.read() as conn:
            segments = conn.execute("SELECT count FROM vector_segments").fetchall()
        assert max(int(row["count"]) for row in segments) == 2
        assert len(segments) > len(documents)
        index = core.indexes.get(org, ENV)
        (part,) = index.parts()
        assert isinstance(part.vectors, StoredRows)  # every row read back from the store
        _reference_answers(core, org, index)

        # rows read in any order, repeated, from many segments: as loaded
        loaded = store.load_index(org, ENV, dimension, located=True)
        assert loaded.vectors is not None and loaded.locators is not None
        pick = np.random.default_rng(7).permutation(loaded.ids.size)[:40]
        pick = np.concatenate([pick, pick[:5]])
        rows = store.read_vector_rows(org, ENV, loaded.locators[pick], dimension)
        np.testing.assert_array_equal(rows, loaded.vectors[pick])

        first = stored_chunk_ids(store, org, ENV, documents[0])
        assert len(first) >= 2
        for document in documents[::4]:  # deleted: their segments no longer read
            ws.knowledge.delete(document)
        for i in range(40, 52):  # appended after the load: caught up, then frozen
            ws.knowledge.ingest_text(f"m{i}.txt", _text(i) * (3 + i % 8))
        index = core.indexes.get(org, ENV)
        _reference_answers(core, org, index)
        while index.maintain():
            pass
        assert all(isinstance(p.vectors, StoredRows) for p in index.parts())
        _reference_answers(core, org, index)
        deleted = np.isin(loaded.ids, first)
        gone = store.read_vector_rows(org, ENV, loaded.locators[deleted], dimension)
        assert np.isnan(gone).all()
    with AgentCore.open(store_url, **settings) as fresh:  # loaded again from the store
        index = fresh.indexes.get(org, ENV)
        assert index.codec == codec
        _reference_answers(fresh, org, index)


@pytest.mark.parametrize("codec", ["int8", "float16"])
def test_a_search_reads_back_only_its_best_candidates(
    tmp_path: Path, codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # enough rows that the scan runs in several blocks, each handing over its own best
    n, d = 40_000, 16
    data = np.random.default_rng(3).standard_normal((n, d)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    store = SQLiteStore.open(tmp_path / "rows.db")
    key = (store.ensure_organization("acme").id, ENV)
    store.replace_all_vectors(*key, "e1", [(None, np.arange(n, dtype=np.int64), data)], d)
    loaded = store.load_index(*key, d, located=True)
    assert loaded.vectors is not None
    rows = WorkspaceRows(store, key, d)
    index = adopt(loaded.ids, loaded.vectors, codec=codec, row_store=rows, locators=loaded.locators)
    reference = adopt(loaded.ids, loaded.vectors)
    reads: list[int] = []
    read = rows.read
    monkeypatch.setattr(rows, "read", lambda at: (reads.append(at.size), read(at))[1])
    for q in np.random.default_rng(4).standard_normal((20, d)).astype(np.float32):
        want, got = reference.search(q, 10), index.search(q, 10)
        _same_ranking(got[0].tolist(), got[1], want[0].tolist(), want[1])
    # one read a search, of its candidates(10) best by approximate score (ties aside)
    assert len(reads) == 20 and max(reads) <= codec_named(codec).candidates(10) + 2, reads
    store.close()


def test_maintenance_keeps_quantised_parts_out_of_ram(tmp_path: Path) -> None:
    db = str(tmp_path / "kb.db")
    settings: dict[str, Any] = {"start_workers": False, "index_dir": "off"}
    with AgentCore.open(db, index_dtype="int8", **settings) as core:
        org, documents = _fill(core, 40)
        index = core.indexes.get(org, ENV)
        for document in documents[:10]:  # a quarter dead: compaction is due
            core.workspace("acme", ENV).knowledge.delete(document)
        index = core.indexes.get(org, ENV)
        assert index.maintenance_due()
        while index.maintain():
            pass
        assert all(isinstance(p.vectors, StoredRows) for p in index.parts())
        assert sum(int(p.dead.size) for p in index.parts()) == 0
        with AgentCore.open(db, **settings) as exact:
            _same(_answers(core, org, QUERIES), _answers(exact, org, QUERIES))


def test_an_index_given_no_row_store_keeps_its_float32_rows() -> None:
    rows = np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = adopt(np.arange(50), rows, codec="int8")
    (part,) = index.parts()
    assert isinstance(part.vectors, np.ndarray) and part.vectors.shape == (50, 16)
    assert index.resident_bytes >= rows.nbytes


class _Documents:
    """A filter's selection (as ``filters.Selection`` gives the index): the rows of
    these documents, decided by their labels (the documents' seqs)."""

    def __init__(self, document_ids: list[str], seqs: npt.NDArray[np.int64]) -> None:
        self.document_ids = document_ids
        self.seqs = seqs

    def __call__(self, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return np.isin(labels, self.seqs)


@pytest.mark.both_stores
def test_a_filtered_int8_search_after_an_eviction_reads_back_only_rows_it_lets_through(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings: dict[str, Any] = {"start_workers": False, "index_dir": "off", "index_dtype": "int8"}
    with AgentCore.open(store_url, **settings) as filler:
        orgs = []
        for name in ("acme", "globex"):  # two workspaces of the same size
            ws = filler.workspace(name, ENV)
            for i in range(64):
                ws.knowledge.ingest_text(f"m{i}.txt", _text(i) * 3, metadata={"shelf": i % 8})
            orgs.append(ws.organization_id)
        org, other = orgs
        _answers(filler, org, QUERIES[:1])
        charged = filler.indexes.stats()["bytes"]
    assert isinstance(charged, int) and charged > 0
    # room for one of the two workspaces: searching the other evicts it
    with AgentCore.open(store_url, index_cache_bytes=int(1.2 * charged), **settings) as core:
        ws = core.workspace("acme", ENV)
        shelf = {"type": "eq", "key": "shelf", "value": 3}
        before = ws.knowledge.search("pump valve", filter=shelf, top_k=5).results
        _answers(core, other, QUERIES[:1])
        assert (org, ENV) not in core.indexes.loaded()
        assert core.indexes.stats()["evictions"] == 1
        # reloaded from the store: codes and labels in RAM, the float32 rows in the store
        index = core.indexes.get(org, ENV)
        (part,) = index.parts()
        assert isinstance(part.vectors, StoredRows) and part.label_codes is not None
        after = ws.knowledge.search("pump valve", filter=shelf, top_k=5).results
        assert [(r.chunk, r.score) for r in after] == [(r.chunk, r.score) for r in before]
        assert len(after) == 5 and all(r.metadata == {"shelf": 3} for r in after)

        loaded = core.store.load_index(org, ENV, index.dimension, located=True)
        assert loaded.vectors is not None and loaded.locators is not None
        id_at = dict(zip(loaded.locators.tolist(), loaded.ids.tolist(), strict=True))
        reads: list[int] = []
        rows = part.vectors.store
        read = rows.read
        monkeypatch.setattr(rows, "read", lambda at: (reads.extend(at.tolist()), read(at))[1])
        documents = ws.knowledge.list(limit=100).documents
        embed = core.embedders[core.settings.embedder].embed
        # a selective filter (an eighth of the rows) and a wide one (three quarters)
        for shelves in ({3}, {0, 1, 2, 4, 5, 6}):
            chosen = [d.id for d in documents if d.metadata["shelf"] in shelves]
            allowed = np.isin(
                loaded.ids,
                [i for d in chosen for i in stored_chunk_ids(core.store, org, ENV, d)],
            )
            within = _Documents(chosen, np.unique(loaded.labels[allowed]))
            for query in QUERIES:
                reads.clear()
                q = np.asarray(embed([query], kind="query")[0], dtype=np.float32)
                q = q / np.linalg.norm(q)
                scores = loaded.vectors[allowed] @ q
                best = np.lexsort((loaded.ids[allowed], -scores))[:10]
                got = index.search(q, 10, allow=within)
                _same_ranking(
                    got[0].tolist(), got[1], loaded.ids[allowed][best].tolist(), scores[best]
                )
                # only candidates the filter lets through are read back (18 at most for
                # a top 10 of int8), never every row it lets through
                assert reads and {id_at[at] for at in reads} <= set(loaded.ids[allowed].tolist())
                assert len(reads) <= codec_named("int8").candidates(10)
