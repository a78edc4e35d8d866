"""The vector engine: where a core's vectors are kept, ranked and kept in step with the store.

The knowledge service sees one seam, ``VectorBackend``: ``WorkspaceIndexes`` ranks in
this process's memory (each workspace's exact ``VectorIndex``: kernels, segment files,
change-log sync, maintenance), ``PgvectorBackend`` has the store rank. ``Embedding``
turns passages and queries into rows for both; ``WorkspaceEmbedders`` keeps each
workspace's vectors those of the configured embedder (what an ingestion worker's writes
check, without a backend). Everything else is private
(``_index.py``, ``_kernels.py``, ``_segments.py``, ...).
"""

from agentcore.knowledge.vectors._backend import Rows, VectorBackend, Within
from agentcore.knowledge.vectors._embedding import (
    Embedding,
    embed_passages,
    nonzero_rows,
    unit_rows,
)
from agentcore.knowledge.vectors._index import GATHER_FRACTION, VectorIndex
from agentcore.knowledge.vectors._kernels import CODECS, scan_helpers, scan_path
from agentcore.knowledge.vectors._loading import adopt, from_buffers, from_parts, from_segments
from agentcore.knowledge.vectors._parts import NO_LABEL, LabelFilter, Part, encode_labels
from agentcore.knowledge.vectors._pgvector import PgvectorBackend
from agentcore.knowledge.vectors._reembed import WorkspaceEmbedders
from agentcore.knowledge.vectors._segments import (
    HEADER_BYTES,
    SegmentError,
    align,
    file_header,
    max_mapped_files,
    read_file_header,
    read_or_map,
    segment_root,
    write_file_atomically,
)
from agentcore.knowledge.vectors._workspace_indexes import WorkspaceIndexes
from agentcore.knowledge.vectors._workspace_loading import WorkspaceRows

__all__ = [
    "CODECS",
    "Embedding",
    "GATHER_FRACTION",
    "HEADER_BYTES",
    "LabelFilter",
    "NO_LABEL",
    "Part",
    "PgvectorBackend",
    "Rows",
    "SegmentError",
    "VectorBackend",
    "VectorIndex",
    "Within",
    "WorkspaceEmbedders",
    "WorkspaceIndexes",
    "WorkspaceRows",
    "adopt",
    "align",
    "embed_passages",
    "encode_labels",
    "file_header",
    "from_buffers",
    "from_parts",
    "from_segments",
    "max_mapped_files",
    "nonzero_rows",
    "read_file_header",
    "read_or_map",
    "scan_helpers",
    "scan_path",
    "segment_root",
    "unit_rows",
    "write_file_atomically",
]
