"""Small records the stores return besides the wire models."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VectorSegment:
    """A run of vectors stored as two whole buffers (int64 ids, float32 rows)."""

    embedder: str
    dimension: int
    count: int
    ids: bytes
    vectors: bytes


@dataclass(frozen=True)
class StoredChunk:
    """A chunk with its document's source: what search results are made of."""

    id: int
    document_id: str
    source: str
    text: str
    pages: list[int]


@dataclass(frozen=True)
class KnowledgeState:
    """Which embedder indexed a workspace, its dimension, and a change counter."""

    embedder: str | None
    dimension: int | None
    version: int
