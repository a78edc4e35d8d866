"""The vector engine's public face: ``agentcore.knowledge.vectors.__all__`` is exactly the
names the rest of the core, the benchmarks and the docs use, sorted, and documented."""

from __future__ import annotations

import inspect

import agentcore.knowledge.vectors as vectors

PUBLIC = [
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


def test_the_public_names_are_exactly_these_and_sorted() -> None:
    assert vectors.__all__ == PUBLIC == sorted(PUBLIC)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from agentcore.knowledge.vectors import *", namespace)  # noqa: S102
    assert sorted(k for k in namespace if k != "__builtins__") == PUBLIC


def test_no_other_public_name_is_defined_in_the_package() -> None:
    defined = {name for name in vars(vectors) if not name.startswith("_")}
    assert defined - set(PUBLIC) == set(), "every module but the face is private"


def test_public_classes_and_functions_are_documented() -> None:
    for name in PUBLIC:
        obj = getattr(vectors, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"vectors.{name} has no docstring"


def test_both_backends_have_every_member_of_the_seam() -> None:
    seam = {
        name
        for name, member in vars(vectors.VectorBackend).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }
    assert seam == {
        "budget",
        "close",
        "is_current",
        "search",
        "search_batch",
        "similarities",
        "stats",
        "write",
    }
    for backend in (vectors.WorkspaceIndexes, vectors.PgvectorBackend):
        for name in seam:
            ours, theirs = getattr(backend, name), getattr(vectors.VectorBackend, name)
            assert type(ours) is type(theirs), f"{backend.__name__}.{name}"
            if callable(ours):
                assert inspect.signature(ours) == inspect.signature(theirs), name
