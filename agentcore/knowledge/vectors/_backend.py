"""The seam where vectors are ranked: ``VectorBackend``, which the knowledge service
searches and writes through. The core picks one implementation (``vector_search``):
this process's memory (``WorkspaceIndexes``) or the store (``PgvectorBackend``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from agentcore._memory_budget import Residency
from agentcore.knowledge.vectors._parts import IdArray, Matrix, ScoreArray

Key = tuple[str, str]
"""A workspace: ``(organization_id, environment)``."""
Rows = tuple[IdArray, Matrix, IdArray]
"""The ids, unit vectors and labels (their document's seq) of the rows a write added."""
Found = tuple[IdArray, ScoreArray]
"""Ids and their cosine scores, best first (ties by ascending id)."""
Query = Callable[[], npt.NDArray[np.float32] | None]
"""Gives the query's vector when there is something to search (``None``: nothing)."""
T = TypeVar("T")


class Within(Protocol):
    """The rows a filtered search may return (``filters.Selection``): a verdict on row
    labels for the index, and the selected documents' ids for a store that searches."""

    @property
    def document_ids(self) -> list[str]:
        """The selected documents' ids (what a store that searches itself is given)."""
        ...

    def __call__(self, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """The verdict for each of ``labels`` (distinct document seqs)."""
        ...


class VectorBackend(Protocol):
    """Where a core's vectors are ranked, and kept in step with the store's writes.

    ``WorkspaceIndexes`` ranks them in this process's memory (``vector_search="memory"``);
    ``PgvectorBackend`` has the store rank them (``"pgvector"``), so a node then holds no
    vectors. Both check each workspace's embedder (re-embedding it when the configured
    one changed) before they search or write it.
    """

    @property
    def budget(self) -> Residency[Any, Any]:
        """What loaded vectors are charged to: the core's other per-workspace caches
        share its bounds (``index_cache_bytes``)."""
        ...

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
        """The ``k`` best ids and scores for the vector ``query()`` gives, at least
        ``min_score``, among the rows ``within`` selects (before the top ``k``)."""
        ...

    def search_batch(
        self,
        organization_id: str,
        environment: str,
        queries: Matrix,
        k: int,
        min_score: float | None = None,
    ) -> list[Found]:
        """``search`` for each row of ``queries`` ``(m, d)`` (none of them zero), in order."""
        ...

    def similarities(
        self, organization_id: str, environment: str, vector: Matrix, ids: IdArray
    ) -> ScoreArray:
        """The cosine similarity of the query ``vector`` to each of these rows (``nan``
        for a row not indexed): the ``score`` of a keyword search's results."""
        ...

    def write(
        self,
        organization_id: str,
        environment: str,
        store_write: Callable[[], T],
        *,
        added: Callable[[T], Rows | None] | None = None,
    ) -> T:
        """Run ``store_write`` (a knowledge write to the store) and keep the vectors in
        step with it; ``added``: for a write that only adds rows, those rows (from its
        result; ``None``: it wrote nothing)."""
        ...

    def is_current(self, organization_id: str, environment: str) -> bool:
        """Whether a search of the workspace now neither loads nor catches up."""
        ...

    def stats(self) -> dict[str, int | None]:
        """What is held and what was done, for metrics: ``workspaces``, ``rows`` and
        ``nbytes`` held now, what the budget charges them (``entries``, ``bytes``,
        ``budget_bytes``, ``mapped_files``, ``max_mapped_files``, ``pinned``) and the
        counts of ``loads``, ``evictions``, ``segment_loads``, ``segment_fallbacks``,
        ``catch_ups`` and ``merges`` so far."""
        ...

    def close(self, timeout: float = 30.0) -> None:
        """Let go of what is held (and end the threads of a backend's own runtime)."""
        ...
