"""Keyword search: the BM25 index of a workspace's chunks, and how it follows the store.

The scores are checked against BM25 computed by hand; exact identifiers are found
(the stemming tokenizer keeps "XK-4471-Q" as three stems); deletes, merges and label
filters behave; and a process's index follows another process's writes and deletes
through the store's change log.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from agentcore import AgentCore
from agentcore.knowledge import _keywords as keywords
from agentcore.knowledge._keywords import KeywordIndex
from agentcore.plugins.extractive import tokens_of

TEXTS = [
    "The vacation policy gives every employee twenty five vacation days.",
    "Reset a password on the XK-4471-Q portal of the IT department.",
    "Laptops are replaced every three years by the IT department.",
    "Parental leave lasts sixteen weeks; vacation days keep accruing.",
    "The cafeteria serves lunch from noon until two.",
]


def bm25(query: str, texts: list[str]) -> list[float]:
    """Okapi BM25 (k1 = 1.2, b = 0.75) of every text, straight from the definition."""
    docs = [tokens_of([t])[0] for t in texts]
    n = len(docs)
    avg = sum(len(d) for d in docs) / n
    scores = []
    for doc in docs:
        tf = Counter(doc)
        score = 0.0
        for term in set(tokens_of([query])[0]):
            df = sum(1 for d in docs if term in d)
            if not df or not tf[term]:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf[term] * 2.2 / (tf[term] + 1.2 * (0.25 + 0.75 * len(doc) / avg))
        scores.append(score)
    return scores


def index_of(texts: list[str], labels: list[int] | None = None) -> KeywordIndex:
    index = KeywordIndex(tokens_of)
    ids = np.arange(len(texts), dtype=np.int64) * 10
    index.add(ids, np.asarray(labels or [0] * len(texts), dtype=np.int64), texts)
    return index


@pytest.mark.parametrize("query", ["vacation days", "IT department laptops", "lunch", "password"])
def test_scores_are_bm25(query: str) -> None:
    index = index_of(TEXTS)
    ids, scores = index.search(query, 10)
    expected = bm25(query, TEXTS)
    ranked = sorted(
        (i for i in range(len(TEXTS)) if expected[i] > 0), key=lambda i: (-expected[i], i)
    )
    assert (ids // 10).tolist() == ranked
    np.testing.assert_allclose(scores, [expected[i] for i in ranked], rtol=1e-5)


def test_an_exact_identifier_is_found() -> None:
    index = index_of(TEXTS)
    ids, scores = index.search("XK-4471-Q", 3)
    assert ids.tolist()[0] == 10 and scores[0] > 0
    assert index.search("nothing matches zyzzyva", 3)[0].size == 0
    assert index.search("the of", 3)[0].size == 0  # stop words only: no stems


def test_deletes_merges_and_filters() -> None:
    index = index_of(TEXTS, labels=[1, 2, 2, 1, 3])
    assert index.search("IT department", 5, allow=lambda v: v == 1)[0].size == 0
    assert set(index.search("vacation", 5, allow=lambda v: v == 1)[0].tolist()) == {0, 30}
    assert index.remove(np.array([0, 999])) == 1
    assert index.search("vacation", 5)[0].tolist() == [30]
    assert not index.contains(0) and index.contains(30) and len(index) == 4
    # dead rows past an eighth of all rows: merged away, every answer kept
    before = index.search("vacation", 5)
    assert index._snap.ids.shape[0] == 4  # one dead row of five was, already
    index.remove(np.array([40]))
    assert len(index) == 3 and index._snap.ids.shape[0] == 3
    assert index.search("vacation", 5)[0].tolist() == before[0].tolist()
    assert index.search("lunch", 5)[0].size == 0


def test_scores_after_a_delete_are_those_of_the_remaining_rows() -> None:
    # nine texts sharing every word, one deleted: too few dead rows for a merge, so the
    # index still holds it; the scores must be BM25's over the eight left (a term in
    # every row once got a negative idf from the dead row, and matched nothing)
    texts = [f"The red pump number {n} needs oil." for n in range(9)]
    index = index_of(texts)
    assert index.remove(np.array([0])) == 1
    assert index._snap.ids.shape[0] == 9  # not merged: the dead row is still there
    ids, scores = index.search("red pump oil", 3)
    assert ids.tolist() == [10, 20, 30]
    np.testing.assert_allclose(scores, bm25("red pump oil", texts[1:])[:3], rtol=1e-5)
    fresh = index_of(texts[1:])
    np.testing.assert_allclose(scores, fresh.search("red pump oil", 3)[1], rtol=1e-6)


def test_keyword_ties_are_broken_by_the_cosine_then_the_id(core: AgentCore) -> None:
    # equal BM25 (the same length, one "alpha" each): the chunk nearer the query in
    # cosine comes first, as in the other modes, also when the tie straddles top_k
    knowledge = core.workspace("acme").knowledge
    knowledge.ingest_text("a.txt", "alpha zzzz qqqq")
    knowledge.ingest_text("b.txt", "alpha alphabet alphanumeric")
    results = knowledge.search("alpha", mode="keyword").results
    assert results[0].rank_score == results[1].rank_score
    assert [r.source for r in results] == ["b.txt", "a.txt"]
    assert results[0].score > results[1].score
    [top] = knowledge.search("alpha", mode="keyword", top_k=1).results
    assert top.source == "b.txt"


def test_a_keyword_tie_past_the_candidates_is_broken_by_the_cosine(core: AgentCore) -> None:
    # 56 rows tied in BM25, more than the 50 keyword candidates a search asks for, the
    # nearest in cosine written last: it still comes first (the index once cut the tie
    # by id before the cosine was known)
    knowledge = core.workspace("acme").knowledge
    for n in range(55):
        knowledge.ingest_text(f"f{n:02}.txt", f"alpha zzzz{n:02} qqqq{n:02}")
    knowledge.ingest_text("best.txt", "alpha alphabet alphanumeric")
    for k in (1, 50):
        results = knowledge.search("alpha", mode="keyword", top_k=k).results
        assert len(results) == k and results[0].source == "best.txt"
        assert len({r.rank_score for r in results}) == 1


def test_the_tail_is_merged_once_it_outgrows_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keywords, "MIN_MERGE_POSTINGS", 4)
    index = index_of(TEXTS[:2])
    index.add(np.array([100, 110], np.int64), np.zeros(2, np.int64), TEXTS[2:4])
    assert index._snap.tail.pairs == 0  # merged into the base
    ids, scores = index.search("IT department", 5)
    reference = index_of(TEXTS[:4])
    np.testing.assert_allclose(scores, reference.search("IT department", 5)[1], rtol=1e-6)
    assert sorted(ids.tolist()) == [10, 100]


@pytest.mark.both_stores
def test_a_workspace_index_follows_another_process(pair: tuple[AgentCore, AgentCore]) -> None:
    a, b = pair
    wa, wb = a.workspace("acme"), b.workspace("acme")
    first = wa.knowledge.ingest_text("a.txt", TEXTS[1])
    assert [r.document_id for r in wb.knowledge.search("XK-4471-Q", mode="keyword").results] == [
        first.id
    ]
    assert b.keywords.stats().loads == 1
    second = wa.knowledge.ingest_text("b.txt", "The XK-4471-Q portal moved to a new address.")
    found = {r.document_id for r in wb.knowledge.search("XK-4471-Q", mode="keyword").results}
    assert found == {first.id, second.id}
    wa.knowledge.delete(first.id)
    found = {r.document_id for r in wb.knowledge.search("XK-4471-Q", mode="keyword").results}
    assert found == {second.id}
    assert b.keywords.stats().loads == 1  # caught up through the change log, never rebuilt


def test_keyword_results_carry_the_cosine_score(core: AgentCore) -> None:
    ws = core.workspace("acme")
    for n, text in enumerate(TEXTS):
        ws.knowledge.ingest_text(f"{n}.txt", text)
    keyword = ws.knowledge.search("vacation days", mode="keyword", top_k=3)
    vector = {r.chunk: r.score for r in ws.knowledge.search("vacation days", top_k=5).results}
    assert keyword.mode == "keyword" and keyword.results
    for result in keyword.results:
        assert result.score == pytest.approx(vector[result.chunk], abs=1e-6)
    ranks = [r.rank_score for r in keyword.results]
    assert ranks == sorted(ranks, reverse=True) and ranks[0] > 1  # BM25, not cosine


def test_min_score_applies_to_the_cosine_in_every_mode(core: AgentCore) -> None:
    ws = core.workspace("acme")
    for n, text in enumerate(TEXTS):
        ws.knowledge.ingest_text(f"{n}.txt", text)
    for mode in ("vector", "keyword", "hybrid"):
        everything = ws.knowledge.search("vacation days department", mode=mode, top_k=5).results
        cut = sorted(r.score for r in everything)[len(everything) // 2]
        kept = ws.knowledge.search("vacation days department", mode=mode, top_k=5, min_score=cut)
        assert kept.results and all(r.score >= cut for r in kept.results), mode
        assert len(kept.results) < len(everything), mode
