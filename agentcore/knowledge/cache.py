"""The per-core cache of workspace indexes, kept in step with the store by a version."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from agentcore.errors import Conflict, InvalidRequest
from agentcore.knowledge.embedders import Embedder, bounded_text
from agentcore.knowledge.index import VectorIndex
from agentcore.storage.records import KnowledgeState

if TYPE_CHECKING:
    from agentcore.cancellation import Cancellation
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
    :param max_token_chars: the longest whitespace-free run re-embedding feeds it.
    """

    def __init__(
        self,
        store: KnowledgeStorage,
        *,
        embedders: Mapping[str, Embedder],
        embedder: str,
        max_token_chars: int = 64,
    ) -> None:
        self._store = store
        self._max_token_chars = max_token_chars
        self._embedders = embedders
        self._embedder_name = embedder
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
            vectors, keep = embed_passages(embedder, texts, max_token_chars=self._max_token_chars)
            segments.append((document_id, np.asarray(ids, dtype=np.int64)[keep], vectors[keep]))
        self._store.replace_all_vectors(
            organization_id, environment, embedder.name, segments, embedder.dimension
        )
        self._entries.pop((organization_id, environment), None)


EMBED_BATCH = 256  # texts per embedder call: bounds its temporaries, checks cancellation


def embed_passages(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    max_token_chars: int,
    cancellation: Cancellation | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Unit vectors of ``texts`` and the mask of rows fit to index (``nonzero_rows``).

    The embedder is fed ``EMBED_BATCH`` texts at a time, each cut by ``bounded_text``,
    into one preallocated matrix: memory stays the matrix plus one batch, and
    ``cancellation`` is checked between batches.
    """
    vectors = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    keep = np.empty(len(texts), dtype=bool)
    for start in range(0, len(texts), EMBED_BATCH):
        if cancellation is not None:
            cancellation.check()
        batch = [bounded_text(text, max_token_chars) for text in texts[start : start + EMBED_BATCH]]
        rows = unit_rows(embedder.embed(batch, kind="passage"))
        if rows.shape != (len(batch), embedder.dimension):
            raise ValueError(
                f"embedder {embedder.name!r} returned shape {rows.shape},"
                f" expected {(len(batch), embedder.dimension)}"
            )
        vectors[start : start + len(batch)] = rows
        keep[start : start + len(batch)] = nonzero_rows(rows)
    return vectors, keep


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
