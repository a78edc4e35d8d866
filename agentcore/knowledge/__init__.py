"""The knowledge core: files to pages to chunks to vectors to cosine top-k.

Public modules: ``service`` (``KnowledgeService``, what ``ws.knowledge`` is),
``embedders`` (the ``Embedder`` protocol), ``rerankers`` (the ``Reranker`` protocol), ``text`` (the stop words, stemming and
tokenizer every ranker and embedder shares), ``terms`` (``TermStats``, which chat
models read) and the engine's face ``vectors``; ``ingest`` is the one ingestion
pipeline. The ``_``-prefixed modules (chunking, citing, metadata filters, keyword
ranking, search) are this package's own: other packages reach them through the names
below, which the composition root and the built-in plugins use.
"""

from agentcore.knowledge._chunking import sentence_spans, split_sentences
from agentcore.knowledge._citing import MAX_QUOTE_CHARS, support, supporting_pages
from agentcore.knowledge._filters import MetadataCache, check_access, check_user
from agentcore.knowledge._keyword_cache import KeywordCache
from agentcore.knowledge._keyword_files import KeywordCopy, KeywordFiles, KeywordSnapshots
from agentcore.knowledge._reranking import Reranking

__all__ = [
    "KeywordCache",
    "KeywordCopy",
    "KeywordFiles",
    "KeywordSnapshots",
    "MetadataCache",
    "Reranking",
    "check_access",
    "check_user",
    "sentence_spans",
    "split_sentences",
    "MAX_QUOTE_CHARS",
    "support",
    "supporting_pages",
]
