"""The vector engine: indexes, kernels, segment files, loading, change-log sync, maintenance."""

from agentcore.knowledge.vectors._index import GATHER_FRACTION, VectorIndex
from agentcore.knowledge.vectors._kernels import CODECS, scan_helpers
from agentcore.knowledge.vectors._loading import adopt, from_buffers, from_parts, from_segments
from agentcore.knowledge.vectors._parts import NO_LABEL, LabelFilter, Part, encode_labels
from agentcore.knowledge.vectors._segments import max_mapped_files, segment_root
from agentcore.knowledge.vectors._workspace_indexes import (
    WorkspaceIndexes,
    WorkspaceRows,
    embed_passages,
    nonzero_rows,
    unit_rows,
)

__all__ = [
    "CODECS",
    "GATHER_FRACTION",
    "NO_LABEL",
    "LabelFilter",
    "Part",
    "VectorIndex",
    "WorkspaceIndexes",
    "WorkspaceRows",
    "adopt",
    "embed_passages",
    "encode_labels",
    "from_buffers",
    "from_parts",
    "from_segments",
    "max_mapped_files",
    "nonzero_rows",
    "scan_helpers",
    "segment_root",
    "unit_rows",
]
