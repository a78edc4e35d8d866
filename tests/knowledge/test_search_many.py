"""``ws.knowledge.search_many``: several searches answered together, as ``search`` answers each.

In vector mode without a filter the queries are embedded together and scored in one
matrix product; the answers must be ``search``'s (same chunks, same order; scores equal
up to float32 rounding), on both stores, for every index dtype, and in pgvector mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import SEARCH_QUERIES, SEARCH_TOPICS

from agentcore import AgentCore
from agentcore.errors import PermissionDenied, ValidationFailed
from agentcore.schema import SearchResponse

TOPICS = SEARCH_TOPICS
QUERIES = [
    *SEARCH_QUERIES,
    "???",  # embeds to nothing: no results, in its place
    "bread yeast dough ferment",
]


def fill(core: AgentCore) -> Any:
    """A workspace of the topics (a document each), one document deleted."""
    core.create_organization("acme")
    ws = core.authenticate(core.keys.create("acme", "test", ["read", "write"]).secret)
    ids = []
    for n, topic in enumerate(TOPICS):
        text = "\n\n".join(f"{topic} Part {part} of note {n}." for part in range(3))
        ids.append(ws.knowledge.ingest_text(f"note-{n}.txt", text).id)
    ws.knowledge.delete(ids[3])  # rows of the index now dead
    return ws


def assert_same(many: list[SearchResponse], queries: list[str], ws: Any, **options: Any) -> None:
    """Each of ``many`` is what ``search`` answers for its query (scores to float32)."""
    assert len(many) == len(queries)
    for got, query in zip(many, queries, strict=True):
        alone = ws.knowledge.search(query, **options)
        assert got.query == query and got.mode == alone.mode
        assert [(r.document_id, r.chunk) for r in got.results] == [
            (r.document_id, r.chunk) for r in alone.results
        ], query
        for a, b in zip(got.results, alone.results, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-6)
            assert (a.source, a.pages, a.metadata) == (b.source, b.pages, b.metadata)


@pytest.mark.both_stores
@pytest.mark.parametrize("options", [{}, {"top_k": 1}, {"top_k": 100}, {"min_score": 0.2}])
def test_answers_are_those_of_one_search_each(core: AgentCore, options: dict[str, Any]) -> None:
    ws = fill(core)
    many = ws.knowledge.search_many(QUERIES, **options)
    assert_same(many, QUERIES, ws, **options)
    assert many[QUERIES.index("???")].results == []
    assert many[0].results, "the first query finds its topic"
    if options.get("top_k") == 100:  # fewer rows than k: each gets every live chunk
        live = sum(document.chunks for document in ws.knowledge.list(limit=100).documents)
        assert live >= 9 and {len(r.results) for r in many if r.query != "???"} == {live}


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_quantised_indexes_answer_as_one_search_each(db_path: Path, dtype: str) -> None:
    with AgentCore.open(db_path, start_workers=False, index_dtype=dtype) as core:
        ws = fill(core)
        assert_same(ws.knowledge.search_many(QUERIES, top_k=4), QUERIES, ws, top_k=4)


def test_pgvector_answers_as_one_search_each(postgres_url: str) -> None:
    with AgentCore.open(postgres_url, start_workers=False, vector_search="pgvector") as core:
        ws = fill(core)
        assert_same(ws.knowledge.search_many(QUERIES, top_k=3), QUERIES, ws, top_k=3)


def test_writes_between_batches_are_seen(db_path: Path) -> None:
    with AgentCore.open(db_path, start_workers=False) as core:
        ws = fill(core)
        before = ws.knowledge.search_many(QUERIES[:2], top_k=3)
        added = ws.knowledge.ingest_text("purr.txt", "Why do cats purr? Cats purr to soothe.")
        after = ws.knowledge.search_many(QUERIES[:2], top_k=3)
        assert added.id not in {r.document_id for r in before[0].results}
        assert after[0].results[0].document_id == added.id
        assert_same(after, QUERIES[:2], ws, top_k=3)


def test_filters_and_keyword_modes_run_one_search_each(db_path: Path) -> None:
    with AgentCore.open(db_path, start_workers=False) as core:
        ws = fill(core)
        for options in (
            {"mode": "keyword"},
            {"mode": "hybrid"},
            {"filter": {"type": "eq", "key": "lang", "value": "en"}},
        ):
            many = ws.knowledge.search_many(QUERIES[:4], **options)
            assert many == [ws.knowledge.search(q, **options) for q in QUERIES[:4]]


def test_boundaries_none_one_and_an_empty_workspace(db_path: Path) -> None:
    with AgentCore.open(db_path, start_workers=False) as core:
        core.create_organization("acme")
        ws = core.authenticate(core.keys.create("acme", "test", ["read"]).secret)
        assert ws.knowledge.search_many([]) == []
        assert [r.results for r in ws.knowledge.search_many(QUERIES[:3])] == [[], [], []]
        ws = fill(core)
        assert ws.knowledge.search_many(QUERIES[:1]) == [ws.knowledge.search(QUERIES[0])]


def test_a_bad_query_fails_the_call_naming_it(db_path: Path) -> None:
    with AgentCore.open(db_path, start_workers=False, max_query_chars=50) as core:
        ws = fill(core)
        with pytest.raises(ValidationFailed) as caught:
            ws.knowledge.search_many(["cats", " ", "bees"])
        assert (caught.value.code, caught.value.param) == ("empty_query", "queries.1")
        with pytest.raises(ValidationFailed) as caught:
            ws.knowledge.search_many(["cats", "bees", "x" * 51])
        assert (caught.value.code, caught.value.param) == ("query_too_long", "queries.2")
        with pytest.raises(ValidationFailed) as caught:
            ws.knowledge.search_many("cats")
        assert (caught.value.code, caught.value.param) == ("validation_error", "queries")
        with pytest.raises(ValidationFailed) as caught:
            ws.knowledge.search_many(["cats", "bees"], top_k=0)
        assert (caught.value.code, caught.value.param) == ("top_k_out_of_range", "top_k")
        with pytest.raises(ValidationFailed) as caught:
            ws.knowledge.search_many(["cats", "bees"], mode="fuzzy")  # type: ignore[arg-type]
        assert caught.value.code == "invalid_mode"


def test_read_scope_is_required(db_path: Path) -> None:
    with AgentCore.open(db_path, start_workers=False) as core:
        core.create_organization("acme")
        ws = core.authenticate(core.keys.create("acme", "test", ["write"]).secret)
        with pytest.raises(PermissionDenied):
            ws.knowledge.search_many(["cats", "bees"])


@pytest.fixture
def metered(db_path: Path) -> Iterator[AgentCore]:
    with AgentCore.open(db_path, start_workers=False) as core:
        yield core


def test_metrics_count_each_query_and_the_batch(metered: AgentCore) -> None:
    ws = fill(metered)
    registry = metered.metrics.registry
    ws.knowledge.search(QUERIES[0])
    ws.knowledge.search_many(QUERIES)
    ws.knowledge.search_many(QUERIES[:1])  # one query: one search, no batch
    assert registry.get_sample_value("agentcore_search_seconds_count") == len(QUERIES) + 2
    assert registry.get_sample_value("agentcore_search_batch_size_count") == 1
    assert registry.get_sample_value("agentcore_search_batch_size_sum") == len(QUERIES)


@pytest.mark.both_stores
def test_many_queries_are_scored_in_slices(core: AgentCore) -> None:
    from agentcore.knowledge._search import QUERIES_AT_ONCE

    ws = fill(core)
    queries = [QUERIES[n % len(QUERIES)] for n in range(2 * QUERIES_AT_ONCE + 5)]
    many = ws.knowledge.search_many(queries, top_k=100)
    alone = {q: ws.knowledge.search(q, top_k=100) for q in QUERIES}
    for got, query in zip(many, queries, strict=True):
        assert [r.chunk for r in got.results] == [r.chunk for r in alone[query].results]
    registry = core.metrics.registry
    assert registry.get_sample_value("agentcore_search_batch_size_count") == 3
    assert registry.get_sample_value("agentcore_search_batch_size_sum") == len(queries)
