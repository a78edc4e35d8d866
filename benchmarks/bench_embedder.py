"""The benchmarks' embedder: deterministic unit-length-ish vectors of any dimension.

The cost of an index depends on its rows and dimension, not on what the vectors mean,
and the real embedders would make large builds take hours. Register it on a core with
``plugins=[BenchPlugin(dimension)]`` and ``embedder=f"bench-{dimension}"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore import hookimpl


class BenchEmbedder:
    """Pseudo-random vectors seeded by each text's digest (the same text, the same vector)."""

    def __init__(self, dimension: int) -> None:
        self.name = f"bench-{dimension}"
        self.dimension = dimension

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        """One vector per text."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimension)
        return out


class BenchPlugin:
    """Registers the benchmark embedder of one dimension."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    @hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        """The benchmark embedder of this dimension."""
        register(BenchEmbedder(self.dimension))
