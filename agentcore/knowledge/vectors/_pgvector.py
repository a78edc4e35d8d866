"""PgvectorBackend: the store ranks the vectors (``vector_search="pgvector"``), so a node
holds none in its memory."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from agentcore._memory_budget import KeyedLocks, Residency
from agentcore.knowledge.vectors._backend import Found, Key, Query, Rows, T, Within
from agentcore.knowledge.vectors._embedding import Embedding, unit_rows
from agentcore.knowledge.vectors._parts import IdArray, Matrix, ScoreArray
from agentcore.knowledge.vectors._reembed import WorkspaceEmbedders
from agentcore.knowledge.vectors._residency import stats
from agentcore.storage.base import VectorSearchStore

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore


class PgvectorBackend:
    """Vectors ranked by a store that searches them itself (``VectorSearchStore``: a
    PostgreSQL database with pgvector). Each search is one query to the store, so it is
    always current; the embedder of a workspace is checked before its searches and
    writes, as the in-memory backend does.

    :param store: the store, which keeps the vectors.
    :param ranking: the same store, which ranks them.
    :param embedding: the configured embedder.
    :param codec: the index dtype a workspace's first write claims (``index_dtype``).
    :param budget_bytes: the bound of the budget the core's other per-workspace caches
        share (``index_cache_bytes``); no vectors are charged to it here.
    :param max_mapped_files: the bound on mapped files of that budget.
    """

    def __init__(
        self,
        store: IndexStore,
        *,
        ranking: VectorSearchStore,
        embedding: Embedding,
        codec: str = "float32",
        budget_bytes: int | None = None,
        max_mapped_files: int | None = None,
    ) -> None:
        self._ranking = ranking
        self._embedders = WorkspaceEmbedders(store, embedding, codec=codec)
        self._locks: KeyedLocks[Key] = KeyedLocks()
        self._budget: Residency[Any, Any] = Residency(
            budget_bytes=budget_bytes, max_files=max_mapped_files
        )

    @property
    def budget(self) -> Residency[Any, Any]:
        """The core's per-workspace budget, which the other caches share."""
        return self._budget

    def search(
        self,
        organization_id: str,
        environment: str,
        query: Query,
        k: int,
        min_score: float | None = None,
        *,
        within: Within | None = None,
    ) -> Found:
        """The ``k`` best ids and scores for the vector ``query()`` returns, ranked by the
        store among the documents ``within`` selects."""
        self._embedders.ensure((organization_id, environment))
        if within is not None and not within.document_ids:
            return _nothing()
        vector = query()
        if vector is None:
            return _nothing()
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        ids, scores = self._ranking.search_vectors(
            organization_id,
            environment,
            unit,
            k,
            documents=None if within is None else within.document_ids,
        )
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def search_batch(
        self,
        organization_id: str,
        environment: str,
        queries: Matrix,
        k: int,
        min_score: float | None = None,
    ) -> list[Found]:
        """``search`` for each row of ``queries``: one query to the store each."""
        return [
            self.search(organization_id, environment, _given(row), k, min_score) for row in queries
        ]

    def similarities(
        self, organization_id: str, environment: str, vector: Matrix, ids: IdArray
    ) -> ScoreArray:
        """The cosine similarity of the query ``vector`` to each of these rows, as the
        store computes it (``nan`` for a row it does not hold)."""
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        out = np.full(ids.shape[0], np.nan, dtype=np.float32)
        if not ids.size:
            return out
        found, scores = self._ranking.search_vectors(
            organization_id, environment, unit, ids.shape[0], chunk_ids=ids.tolist()
        )
        where = dict(zip(found.tolist(), scores.tolist(), strict=True))
        for at, chunk_id in enumerate(ids.tolist()):
            if chunk_id in where:
                out[at] = where[chunk_id]
        return out

    def write(
        self,
        organization_id: str,
        environment: str,
        store_write: Callable[[], T],
        *,
        added: Callable[[T], Rows | None] | None = None,
    ) -> T:
        """Run ``store_write`` on the configured embedder's vectors, one write of a
        workspace at a time in this process (``added``: the write checks the embedder
        in its own transaction)."""
        key = (organization_id, environment)
        with self._locks.hold(key):
            return self._embedders.write(key, store_write, checks_itself=added is not None)

    def is_current(self, organization_id: str, environment: str) -> bool:
        """Always: the store answers every search as of its latest write."""
        return True

    def stats(self) -> dict[str, int | None]:
        """As ``WorkspaceIndexes.stats``: nothing is held or loaded here."""
        held = stats(self._budget, collections.Counter())
        return {"workspaces": 0, "rows": 0, "nbytes": 0, **held}

    def close(self, timeout: float = 30.0) -> None:
        """Nothing to let go of: the store holds the vectors."""


def _nothing() -> Found:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)


def _given(vector: Matrix) -> Query:
    """A ``search`` query callable giving a vector already made."""
    return lambda: vector
