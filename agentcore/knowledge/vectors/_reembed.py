"""Each workspace's vectors made by the configured embedder: re-embedding a workspace
whose embedder changed, and the embedder check a knowledge write makes first."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentcore.errors import Conflict
from agentcore.knowledge.embedders import Embedder
from agentcore.knowledge.vectors._backend import Key, T
from agentcore.knowledge.vectors._embedding import Embedding, embed_passages
from agentcore.storage.records import KnowledgeState, StaleEmbedder

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore


class WorkspaceEmbedders:
    """Keeps each workspace's stored vectors those of the configured embedder.

    :param store: where the workspaces' chunks and vectors are kept.
    :param embedding: the configured embedder.
    :param codec: the index dtype a workspace's first write claims (``index_dtype``).
    :param reembedded: told of each workspace re-embedded (its vectors all replaced).
    """

    def __init__(
        self,
        store: IndexStore,
        embedding: Embedding,
        *,
        codec: str,
        reembedded: Callable[[Key], object] = lambda key: None,
    ) -> None:
        self._store = store
        self._embedding = embedding
        self._codec = codec
        self._reembedded = reembedded
        # workspaces whose embedder this object has checked and whose dtype is claimed:
        # their document writes check the embedder in their own transaction instead
        self._checked: set[Key] = set()

    def ensure(self, key: Key) -> KnowledgeState:
        """The workspace's state once its vectors are the configured embedder's: they
        are re-embedded if another one made them, and a 409 if only its dimension
        changed."""
        store = self._store
        state = store.knowledge_state(*key)
        embedder = self._embedding.embedder()
        if state.embedder is None or state.embedder != embedder.name:
            if state.embedder is not None:
                self._reembed(key, embedder)
                state = store.knowledge_state(*key)
        elif state.dimension is not None and state.dimension != embedder.dimension:
            raise Conflict(
                f"The index was built by {state.embedder!r} with dimension {state.dimension},"
                f" but that embedder now returns {embedder.dimension}.",
                code="embedder_dimension_mismatch",
            )
        return state

    def write(self, key: Key, store_write: Callable[[], T], *, checks_itself: bool) -> T:
        """Run ``store_write`` on the configured embedder's vectors (call with the
        workspace's lock held).

        ``checks_itself``: the write checks the workspace's embedder in its own
        transaction (``StaleEmbedder``; ``insert_document``, ``complete_document``), so
        after the workspace's first one no read of its state precedes it. Another
        process's re-embed is then followed, and the write made again.
        """
        if not checks_itself or key not in self._checked:
            self._check(key)
        try:
            return store_write()
        except StaleEmbedder:  # another process re-embedded it: follow, write again
            self._check(key)
            return store_write()

    def forget(self, key: Key) -> None:
        """Check ``key``'s embedder again before its next write."""
        self._checked.discard(key)

    def _check(self, key: Key) -> None:
        """Bring a workspace to the configured embedder (a re-embed, or a 409 when only
        the dimension changed) and claim its dtype on its first write. Locked."""
        self._checked.discard(key)
        state = self.ensure(key)
        if state.index_dtype is None:  # the workspace's first write fixes its dtype
            self._store.claim_index_dtype(*key, self._codec)
        self._checked.add(key)

    def _reembed(self, key: Key, embedder: Embedder) -> None:
        segments: list[tuple[str | None, npt.NDArray[np.int64], npt.NDArray[np.float32]]] = []
        limit = self._embedding.max_token_chars
        for document_id, ids, texts in self._store.iter_chunk_texts(*key):
            if not texts:
                continue
            vectors, keep = embed_passages(embedder, texts, max_token_chars=limit)
            segments.append((document_id, np.asarray(ids, dtype=np.int64)[keep], vectors[keep]))
        self._store.replace_all_vectors(*key, embedder.name, segments, embedder.dimension)
        self._reembedded(key)
