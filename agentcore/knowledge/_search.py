"""Search: a workspace's chunks ranked for a query, by vector, keyword or both.

``Search`` is what ``KnowledgeService.search``, ``search_many`` and ``retrieve`` (chat's
retrieval) delegate to once the caller's scope is checked. Every mode ranks among the
documents a metadata filter selects, before the top ``k`` is taken: ``vector`` through
the core's ``VectorBackend`` (cosine), ``keyword`` through the workspace's BM25 index,
``hybrid`` both, fused by reciprocal rank. Every result's ``score`` is its cosine
similarity, whatever the mode ranked by (``rank_score``). A search with ``rerank`` ranks
``rerank_candidates`` so and has the core's reranker order them (``rerank_score``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, get_args

import numpy as np
import numpy.typing as npt

from agentcore.errors import InvalidRequest, ValidationFailed, check_unicode
from agentcore.knowledge._filters import MetadataCache, Selection, check_filter, check_user
from agentcore.knowledge._reranking import Reranking
from agentcore.knowledge.vectors import Embedding, VectorBackend
from agentcore.observer import Observer, unobserved
from agentcore.schema import EndUser, Filter, SearchMode, SearchResponse, SearchResult
from agentcore.storage.records import StoredChunk

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge._keyword_cache import KeywordCache
    from agentcore.knowledge.rerankers import Reranker
    from agentcore.storage.base import DocumentStore

__all__ = ["HYBRID_DEPTH", "KEYWORD_DEPTH", "RRF_K", "SEARCH_MODES", "Hit", "Search"]

SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
QUERIES_AT_ONCE = 64
"""Most queries ``search_many`` scores together (more gain little, and cost memory)."""
IDS_AT_ONCE = 6_400
"""Most hits whose chunks ``search_many`` reads in one statement: well within either
database's limit on a statement's parameters (PostgreSQL's is 65,535)."""
RRF_K = 60
"""Reciprocal-rank fusion's constant (Cormack et al.): a result ranked ``r`` (from 1) by
one ranking adds ``1 / (RRF_K + r)`` to its fused score."""
HYBRID_DEPTH = 50
"""Candidates each ranking gives a hybrid search to fuse (at least ``top_k``)."""
KEYWORD_DEPTH = 50
"""Keyword candidates checked against ``min_score`` (at least ``top_k``)."""


@dataclass(frozen=True)
class Hit:
    """A ranked chunk: its cosine ``score``, the ``rank`` its search ordered by, and the
    reranker's score when it was reranked."""

    chunk: StoredChunk
    score: float
    rank: float
    rerank: float | None = None


class Search:
    """The searches of one workspace.

    :param key: the workspace: ``(organization_id, environment)``.
    :param store: where the chunks are read.
    :param settings: the query, ``top_k`` and ``min_score`` limits.
    :param index: where the core ranks vectors.
    :param embedding: embeds the queries.
    :param metadata: the document tables filters select from.
    :param keywords: the keyword (BM25) indexes; ``None``: keyword and hybrid searches
        are refused.
    :param reranking: the core's rerankers; ``None``: reranked searches are refused.
    :param observer: told how long searches took.
    """

    def __init__(
        self,
        key: tuple[str, str],
        *,
        store: DocumentStore,
        settings: Settings,
        index: VectorBackend,
        embedding: Embedding,
        metadata: MetadataCache,
        keywords: KeywordCache | None = None,
        reranking: Reranking | None = None,
        observer: Observer = unobserved,
    ) -> None:
        self._key = key
        self._store = store
        self._settings = settings
        self._index = index
        self._embedding = embedding
        self._metadata = metadata
        self._keywords = keywords
        self._reranking = reranking or Reranking({}, settings)
        self._observer = observer

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> SearchResponse:
        """The ``top_k`` chunks best matching ``query``.

        :param filter: only chunks of documents whose metadata it selects (OpenAI's
            attribute-filter shape, a dict or a ``Filter``), applied before the top
            ``top_k`` is taken; a malformed filter is a 422 naming the bad part.
        :param mode: ``"vector"`` (default): by cosine similarity; ``"keyword"``: by
            BM25 over the query's word stems; ``"hybrid"``: both, fused by reciprocal
            rank. Each result's ``score`` is its cosine similarity in every mode, and
            ``rank_score`` what the mode ranked by; ``min_score`` drops results whose
            cosine score is lower.
        :param user: search for this end user (an ``EndUser`` or ``{id, groups}``):
            only documents without an access list, or whose list names the user or one
            of their groups, applied before the top ``top_k`` as ``filter`` is.
        :param rerank: rank the top ``rerank_candidates`` (at least ``top_k``) as
            ``mode`` says, then keep the ``top_k`` the core's reranker puts first, each
            with its ``rerank_score``; a 400 ``reranker_unavailable`` when the core has
            none. A reranker that fails or times out leaves the first order (logged
            and counted), without ``rerank_score``.
        """
        k = self._checked(query, top_k, min_score)
        mode = self._mode(mode)
        reranker = self._reranking.required() if rerank else None
        spec = check_filter(filter)
        reader = check_user(user)
        began = time.perf_counter()
        hits = self._reranked(reranker, query, k, min_score, spec, mode, reader)
        self._observer.searched(time.perf_counter() - began, 1)
        return _response(query, mode, hits)

    def search_many(
        self,
        queries: Sequence[str],
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> list[SearchResponse]:
        """``search`` for each of ``queries`` with the same options: their answers, in
        order. A query ``search`` refuses makes the whole call fail with
        the same error (its ``param`` ``queries.<i>`` for the query itself).

        In ``vector`` mode without a filter the queries are embedded together and
        scored against the index in one matrix product, which costs about half of a
        search each when there are eight (the HTTP adapter batches concurrent
        searches so); a score may then differ from a lone search's in the last bit of
        its float32, and so may the order of two results that close. Reranked searches
        run one by one.
        """
        if isinstance(queries, str):  # a str is a Sequence[str]: one search per character
            raise ValidationFailed(
                "queries must be a list of queries, not one string (use search for one).",
                param="queries",
            )
        for at, query in enumerate(queries):
            try:
                k = self._checked(query, top_k, min_score)
            except ValidationFailed as error:
                error.param = f"queries.{at}" if error.param == "query" else error.param
                raise
        mode = self._mode(mode)
        alone = rerank or filter is not None or user is not None
        if len(queries) < 2 or mode != "vector" or alone:
            return [
                self.search(
                    q,
                    top_k=top_k,
                    min_score=min_score,
                    filter=filter,
                    mode=mode,
                    user=user,
                    rerank=rerank,
                )
                for q in queries
            ]
        answers: list[SearchResponse] = []
        step = max(1, min(QUERIES_AT_ONCE, IDS_AT_ONCE // k))
        for at in range(0, len(queries), step):
            answers += self._search_together(queries[at : at + step], k, min_score)
        return answers

    def _search_together(
        self, queries: Sequence[str], k: int, min_score: float | None
    ) -> list[SearchResponse]:
        """Vector searches of ``queries`` (checked), embedded and scored together."""
        began = time.perf_counter()
        vectors, usable = self._query_vectors(queries)
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        ranked = [empty] * len(queries)
        if usable.any():
            matrix = vectors[usable].astype(np.float32, copy=False)
            found = self._index.search_batch(*self._key, matrix, k, min_score)
            for i, row in zip(np.flatnonzero(usable).tolist(), found, strict=True):
                ranked[i] = row
        wanted = {int(i) for ids, _ in ranked for i in ids.tolist()}
        chunks = self._store.get_chunks(sorted(wanted))
        answers = [
            _response(query, "vector", _found(chunks, ids, scores, scores))
            for query, (ids, scores) in zip(queries, ranked, strict=True)
        ]
        self._observer.searched(time.perf_counter() - began, len(queries))
        return answers

    def _checked(self, query: str, top_k: int | None, min_score: float | None) -> int:
        """The ``k`` of a search of ``query``, its arguments checked (422s)."""
        settings = self._settings
        if not query.strip():
            raise ValidationFailed("The query is empty.", code="empty_query", param="query")
        check_unicode(query, param="query")
        if len(query) > settings.max_query_chars:
            raise ValidationFailed(
                f"The query is longer than {settings.max_query_chars} characters.",
                code="query_too_long",
                param="query",
            )
        k = settings.default_top_k if top_k is None else top_k
        if not 1 <= k <= settings.max_top_k:
            raise ValidationFailed(
                f"top_k must be between 1 and {settings.max_top_k}.",
                code="top_k_out_of_range",
                param="top_k",
            )
        if min_score is not None and not -1.0 <= min_score <= 1.0:
            raise ValidationFailed(
                "min_score must be between -1 and 1.",
                code="min_score_out_of_range",
                param="min_score",
            )
        return k

    def _mode(self, mode: str | None) -> SearchMode:
        """``mode`` checked (default ``vector``); keyword modes need a keyword index."""
        if mode is None:
            return "vector"
        if mode not in SEARCH_MODES:
            raise ValidationFailed(
                f"mode must be one of {', '.join(SEARCH_MODES)}.", code="invalid_mode", param="mode"
            )
        if mode != "vector" and self._keywords is None:
            raise InvalidRequest(
                f"This core has no keyword index, so mode {mode!r} is unavailable.",
                code="mode_unavailable",
                param="mode",
            )
        return mode  # type: ignore[return-value]

    def is_current(self) -> bool:
        """Whether a search now runs on this process's loaded index as it is, without
        loading or catching up (one small read of the workspace's version)."""
        return self._index.is_current(*self._key)

    def retrieve(
        self,
        query: str,
        k: int,
        min_score: float | None = None,
        *,
        filter: Filter | None = None,
        mode: SearchMode = "vector",
        user: EndUser | None = None,
        rerank: bool = False,
    ) -> list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and their cosine scores for ``query``, among the
        documents ``filter`` selects that ``user`` may read, ranked as ``mode`` says
        and reranked with ``rerank`` when the core has a reranker (no argument checks;
        chat uses it)."""
        reranker = self._reranking.for_chat() if rerank else None
        hits = self._reranked(reranker, query, k, min_score, filter, self._mode(mode), user)
        return [(hit.chunk, hit.score) for hit in hits]

    def _reranked(
        self,
        reranker: Reranker | None,
        query: str,
        k: int,
        min_score: float | None,
        spec: Filter | None,
        mode: SearchMode,
        reader: EndUser | None,
    ) -> list[Hit]:
        """The top ``k`` hits of ``query`` (``_ranked``); with a ``reranker``, the top
        ``k`` of the reranker's order of the first ``rerank_candidates`` (the first
        order when it fails)."""
        if reranker is None:
            return self._ranked(query, k, min_score, spec, mode, reader)
        hits = self._ranked(query, self._reranking.depth(k), min_score, spec, mode, reader)
        order = self._reranking.order(reranker, query, [hit.chunk.text for hit in hits], k)
        if order is None:
            return hits[:k]
        return [replace(hits[index], rerank=score) for index, score in order]

    def _ranked(
        self,
        query: str,
        k: int,
        min_score: float | None,
        spec: Filter | None,
        mode: SearchMode,
        reader: EndUser | None = None,
    ) -> list[Hit]:
        """The top ``k`` hits of ``query`` in ``mode``, among what ``spec`` selects and
        ``reader`` may read."""
        within: Selection | None = None
        if spec is not None or reader is not None:
            within = self._metadata.selection(*self._key, spec, reader)
            if within.empty:
                return []
        vector = _Once(lambda: self._query_vector(query))
        if mode == "vector":
            ids, scores = self._index.search(*self._key, vector, k, min_score, within=within)
            return self._hits(ids, scores, scores)
        assert self._keywords is not None  # _mode refuses these modes without one
        if mode == "keyword":
            keyword_ids, bm25 = self._keywords.get(*self._key).search(
                query, max(k, KEYWORD_DEPTH), allow=within, ties=True
            )
            return self._keyword_hits(vector, keyword_ids, bm25, k, min_score)
        depth = max(k, HYBRID_DEPTH)
        # a keyword index not loaded here loads on another thread while the vectors are
        # searched (or loaded: each load is mostly reading the store)
        keywords = self._keywords.get_soon(*self._key)
        found = self._index.search(*self._key, vector, depth, within=within)
        keyword_ids, _ = keywords().search(query, depth, allow=within, ties=False)
        return self._hybrid_hits(vector, found, keyword_ids, k, min_score)

    def _keyword_hits(
        self,
        vector: _Once,
        ids: npt.NDArray[np.int64],
        bm25: npt.NDArray[np.float32],
        k: int,
        min_score: float | None,
    ) -> list[Hit]:
        """The top ``k`` of the keyword ranking ``ids`` (best BM25 first), ties broken by
        the cosine, then the id."""
        if min_score is None and ids.shape[0] > k:
            # the rows tied with the k-th stay: the cosine breaks ties, then the id
            cut = int(np.searchsorted(-bm25, -bm25[k - 1], side="right"))
            ids, bm25 = ids[:cut], bm25[:cut]
        cosine = self._similarities(vector, ids)
        order = np.lexsort((ids, -np.nan_to_num(cosine, nan=-2.0), -bm25))
        return self._hits(ids[order], cosine[order], bm25[order], k=k, min_score=min_score)

    def _hybrid_hits(
        self,
        vector: _Once,
        found: tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]],
        keyword_ids: npt.NDArray[np.int64],
        k: int,
        min_score: float | None,
    ) -> list[Hit]:
        """The top ``k`` of the vector ranking ``found`` (ids and scores) and the keyword
        one, fused by reciprocal rank; ties broken by the cosine, then the id."""
        vector_ids, vector_scores = found
        fused: dict[int, float] = {}
        for ranking in (vector_ids, keyword_ids):
            for rank, chunk_id in enumerate(ranking.tolist(), 1):
                fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank)
        cosine_of = dict(zip(vector_ids.tolist(), vector_scores.tolist(), strict=True))
        only_keyword = np.asarray([i for i in keyword_ids.tolist() if i not in cosine_of], np.int64)
        cosine_of.update(
            zip(
                only_keyword.tolist(),
                self._similarities(vector, only_keyword).tolist(),
                strict=True,
            )
        )
        ids = np.asarray(list(fused), dtype=np.int64)
        ranks = np.asarray(list(fused.values()), dtype=np.float64)
        cosine = np.asarray([cosine_of[i] for i in fused], dtype=np.float32)
        order = np.lexsort((ids, -np.nan_to_num(cosine, nan=-2.0), -ranks))
        return self._hits(ids[order], cosine[order], ranks[order], k=k, min_score=min_score)

    def _query_vector(self, query: str) -> npt.NDArray[np.float32] | None:
        """The query's unit vector, or ``None`` when it embeds to nothing."""
        vectors, usable = self._query_vectors([query])
        return vectors[0] if usable[0] else None

    def _query_vectors(
        self, queries: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The queries' vectors (a row each) and which embed to something, embedded in
        one call (``Embedding.queries``)."""
        return self._embedding.queries(queries)

    def _similarities(self, vector: _Once, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The cosine scores of these rows (0 for all when the query embeds to nothing)."""
        query = vector()
        if query is None or not ids.size:
            return np.zeros(ids.shape[0], dtype=np.float32)
        return self._index.similarities(*self._key, query, ids)

    def _hits(
        self,
        ids: npt.NDArray[np.int64],
        scores: npt.NDArray[np.float32],
        ranks: npt.NDArray[Any],
        *,
        k: int | None = None,
        min_score: float | None = None,
    ) -> list[Hit]:
        """The chunks of ranked ``ids`` with their cosine ``scores`` and ``ranks``, best
        first: those scoring at least ``min_score`` (a row gone from the index, its
        score ``nan``, is left out), at most ``k``."""
        keep = ~np.isnan(scores)
        if min_score is not None:
            keep &= scores >= min_score
        ids, scores, ranks = ids[keep][:k], scores[keep][:k], ranks[keep][:k]
        return _found(self._store.get_chunks([int(i) for i in ids]), ids, scores, ranks)


def _found(
    chunks: dict[int, StoredChunk],
    ids: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float32],
    ranks: npt.NDArray[Any],
) -> list[Hit]:
    """The hits of ranked ``ids`` among ``chunks`` (looked up by id): a chunk deleted
    between the index read and the lookup is skipped."""
    return [
        Hit(chunks[chunk_id], float(score), float(rank))
        for chunk_id, score, rank in zip(ids.tolist(), scores.tolist(), ranks.tolist(), strict=True)
        if chunk_id in chunks
    ]


def _response(query: str, mode: SearchMode, hits: list[Hit]) -> SearchResponse:
    """The answer to a search of ``query`` that found ``hits``."""
    results = [
        SearchResult(
            chunk=hit.chunk.text,
            score=hit.score,
            source=hit.chunk.source,
            pages=hit.chunk.pages,
            document_id=hit.chunk.document_id,
            metadata=hit.chunk.metadata,
            rank_score=hit.rank,
            rerank_score=hit.rerank,
            location=hit.chunk.location,
        )
        for hit in hits
    ]
    return SearchResponse(query=query, mode=mode, results=results)


class _Once:
    """``make()`` called at most once, when first needed (the query's embedding: a
    search with nothing to rank never embeds its query)."""

    def __init__(self, make: Callable[[], npt.NDArray[np.float32] | None]) -> None:
        self._make = make
        self._made = False
        self._value: npt.NDArray[np.float32] | None = None

    def __call__(self) -> npt.NDArray[np.float32] | None:
        if not self._made:
            self._value, self._made = self._make(), True
        return self._value
