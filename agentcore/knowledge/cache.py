"""The per-core cache of workspace indexes, kept in step with the store by a version."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from agentcore.errors import Conflict, InvalidRequest
from agentcore.knowledge.embedders import Embedder
from agentcore.knowledge.index import VectorIndex
from agentcore.storage.base import VectorSearchStore
from agentcore.storage.records import KnowledgeState

if TYPE_CHECKING:
    from agentcore.storage.base import KnowledgeStorage

T = TypeVar("T")
Key = tuple[str, str]


@dataclass
class _Entry:
    version: int
    index: VectorIndex


class IndexCache:
    """Loads each workspace's index once and shares it between threads.

    The store keeps a per-workspace version that every knowledge write bumps. A
    reader whose cached version differs from the store's reloads (so another process
    writing the same store is noticed); a write made through this cache applies its
    change to the cached index in place when nothing else changed in between.

    :param store: where documents, chunks and vectors are kept.
    :param embedders: the registered embedders, by name.
    :param embedder: the name of the one that indexes (``Settings.embedder``).
    """

    def __init__(
        self,
        store: KnowledgeStorage,
        *,
        embedders: Mapping[str, Embedder],
        embedder: str,
        vector_search: str = "memory",
    ) -> None:
        self._store = store
        self._embedders = embedders
        self._embedder_name = embedder
        self._store_search: VectorSearchStore | None = None
        if vector_search == "pgvector":
            if not isinstance(store, VectorSearchStore):
                raise ValueError(
                    "vector_search='pgvector' needs a store that searches vectors itself"
                    " (a postgresql:// database)"
                )
            self._store_search = store
        self._entries: dict[Key, _Entry] = {}
        self._locks: dict[Key, threading.RLock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: Key) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())

    def embedder(self) -> Embedder:
        """The configured embedder, or a 400 naming the ones registered."""
        name = self._embedder_name
        embedder = self._embedders.get(name)
        if embedder is None:
            known = ", ".join(sorted(self._embedders)) or "none"
            raise InvalidRequest(
                f"The configured embedder {name!r} is not registered (registered: {known}).",
                code="embedder_unavailable",
            )
        return embedder

    def get(self, organization_id: str, environment: str) -> VectorIndex:
        """The current index of a workspace (re-embedded first if the embedder changed)."""
        key = (organization_id, environment)
        store = self._store
        state = store.knowledge_state(organization_id, environment)
        entry = self._entries.get(key)
        if entry is not None and entry.version == state.version:
            return entry.index
        with self._lock(key):
            state = self._ensure_embedder(organization_id, environment)
            entry = self._entries.get(key)
            if entry is not None and entry.version == state.version:
                return entry.index
            dimension = state.dimension or self.embedder().dimension
            ids, vectors = store.load_vectors(organization_id, environment, dimension)
            index = VectorIndex.adopt(ids, vectors)
            self._entries[key] = _Entry(state.version, index)
            return index

    def search(
        self,
        organization_id: str,
        environment: str,
        query: Callable[[], npt.NDArray[np.float32] | None],
        k: int,
        min_score: float | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The ``k`` best ids and scores for the vector ``query()`` returns (``None``: none).

        The one place search runs: in this node's index (``vector_search="memory"``),
        or in the store (``"pgvector"``), so a node then holds no vectors in RAM.
        ``query`` is called only when there is something to search.
        """
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        if self._store_search is None:
            index = self.get(organization_id, environment)
            if len(index) == 0:
                return empty
            vector = query()
            return empty if vector is None else index.search(vector, k, min_score=min_score)
        self._ensure_embedder(organization_id, environment)
        vector = query()
        if vector is None:
            return empty
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        ids, scores = self._store_search.search_vectors(organization_id, environment, unit, k)
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def write(
        self,
        organization_id: str,
        environment: str,
        store_write: Callable[[], T],
        apply: Callable[[VectorIndex], None],
    ) -> T:
        """Run ``store_write`` then mirror it with ``apply`` on the cached index.

        Serialised per workspace, so versions advance one at a time; if another
        writer (another process) got in between, the cache is dropped and reloads.
        """
        key = (organization_id, environment)
        with self._lock(key):
            self._ensure_embedder(organization_id, environment)
            before = self._entries.get(key)
            result = store_write()
            state = self._store.knowledge_state(organization_id, environment)
            if before is not None and before.version == state.version:
                return result  # nothing was written (e.g. a delete of a missing document)
            if before is not None and before.version + 1 == state.version:
                apply(before.index)
                before.version = state.version
            else:
                self._entries.pop(key, None)
            return result

    def _ensure_embedder(self, organization_id: str, environment: str) -> KnowledgeState:
        store = self._store
        state = store.knowledge_state(organization_id, environment)
        embedder = self.embedder()
        if state.embedder is None or state.embedder != embedder.name:
            if state.embedder is not None:
                self._reembed(organization_id, environment, embedder)
                state = store.knowledge_state(organization_id, environment)
        elif state.dimension is not None and state.dimension != embedder.dimension:
            raise Conflict(
                f"The index was built by {state.embedder!r} with dimension {state.dimension},"
                f" but that embedder now returns {embedder.dimension}.",
                code="embedder_dimension_mismatch",
            )
        return state

    def _reembed(self, organization_id: str, environment: str, embedder: Embedder) -> None:
        segments: list[tuple[str | None, npt.NDArray[np.int64], npt.NDArray[np.float32]]] = []
        for document_id, ids, texts in self._store.iter_chunk_texts(organization_id, environment):
            if not texts:
                continue
            vectors = unit_rows(embedder.embed(texts, kind="passage"))
            keep = nonzero_rows(vectors)
            segments.append((document_id, np.asarray(ids, dtype=np.int64)[keep], vectors[keep]))
        self._store.replace_all_vectors(
            organization_id, environment, embedder.name, segments, embedder.dimension
        )
        self._entries.pop((organization_id, environment), None)


def nonzero_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """A mask of rows that are finite and not all zeros (the index refuses the others)."""
    finite = np.isfinite(vectors).all(axis=1)
    mask: npt.NDArray[np.bool_] = finite & (np.abs(vectors).sum(axis=1) > 0)
    return mask


def unit_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``vectors`` as float32 with each finite non-zero row scaled to unit length.

    Embedders need not normalise, but the store keeps unit rows: the index loads
    persisted segments as already normalised, so cosine stays a dot product.
    Zero and non-finite rows are left as they are (``nonzero_rows`` drops them).
    """
    rows = np.array(vectors, dtype=np.float32, copy=True)
    if rows.ndim != 2 or rows.size == 0:
        return rows
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    ok = np.isfinite(norms) & (norms > 0)
    rows[ok] = (rows[ok] / norms[ok, None]).astype(np.float32)
    return rows
