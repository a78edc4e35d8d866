"""The reranker plugin interface: a query and candidate texts in, the best of them out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Reranker"]


@runtime_checkable
class Reranker(Protocol):
    """Scores candidate passages against a query, more finely than the first ranking.

    A search with ``rerank`` takes its top ``rerank_candidates`` chunks, asks the
    core's reranker to order their texts, and keeps the best ``top_k``. ``name``
    identifies it (the ``reranker`` setting names one).
    """

    name: str

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """The best ``top_n`` of ``documents`` for ``query``, best first.

        Each item is ``(index, score)``: ``index`` a position in ``documents`` (each at
        most once), ``score`` a finite relevance score, higher for a better match (its
        scale is the reranker's own). Fewer than ``top_n`` items is allowed. Raise any
        exception for a failure: the search then keeps its first order (the failure is
        logged and counted), so a reranker need not catch its own errors.
        """
        ...
