"""Loading a ``VectorIndex``: over arrays already in its layout (a store's load), over
frozen parts (mapped segment files), or from ``(ids, vectors)`` buffers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors._embedding import RowScales
from agentcore.knowledge.vectors._index import VectorIndex, check_dimension, grown
from agentcore.knowledge.vectors._parts import (
    ID_DTYPE,
    VECTOR_DTYPE,
    IdArray,
    Part,
    RowStore,
    ascending,
    codec_named,
    labels_for,
)


def adopt(
    ids: npt.ArrayLike,
    vectors: npt.ArrayLike,
    *,
    spare_rows: int = 0,
    codec: str = "float32",
    executor: Executor | None = None,
    labels: npt.ArrayLike | None = None,
    row_store: RowStore | None = None,
    locators: IdArray | None = None,
) -> VectorIndex:
    """An index over arrays already in its layout, without copying them.

    ``vectors`` must be C-contiguous float32 rows of unit length (as the store
    keeps them) and ``ids`` int64, one per row: the store reads a whole workspace
    straight into such arrays, so loading costs one copy out of the database.
    The index owns the arrays afterwards (it never writes to them).

    Ascending ids (the store's order) make the arrays one frozen part: no per-row
    map is built. Ids out of order (ids a caller assigned) are sorted first, which
    copies the rows once: adopted as the tail instead, the matrix had no spare
    rows, so the first rows added after the load copied the whole of it again
    (1.2 s at 200k x 1024, inside a search's catch-up).

    :param spare_rows: tail rows to preallocate, so the rows added after a load
        need no allocation (and never copy the adopted matrix).
    :param labels: each row's label (its document's number, for filtered searches);
        ``None``: ``NO_LABEL`` for all.
    :param row_store: for an approximate codec, where the float32 rows are kept
        (``locators``: where each row is, else located by id): the index then holds
        only their codes (and labels), and so do the parts its maintenance builds.
    """
    matrix = np.ascontiguousarray(vectors, dtype=VECTOR_DTYPE)
    id_array = np.ascontiguousarray(ids, dtype=ID_DTYPE)
    if matrix.ndim != 2 or id_array.shape != (matrix.shape[0],):
        raise ValidationFailed(
            "vectors must be (n, dimension) with one id per row",
            code="dimension_mismatch",
            param="vectors",
        )
    label_array = labels_for(labels, id_array.shape[0])
    n, d = matrix.shape
    if not ascending(id_array):
        order = np.argsort(id_array, kind="stable")
        id_array = id_array[order]
        if bool(np.any(id_array[1:] == id_array[:-1])):
            raise ValidationFailed(
                "the persisted ids contain duplicates", code="duplicate_id", param="ids"
            )
        matrix = np.take(matrix, order, axis=0)
        label_array = None if label_array is None else label_array[order]
        locators = None if locators is None else locators[order]
    check_dimension(d)
    parts: tuple[Part, ...] = ()
    if n:  # encoded by the index's codec (for float32 the codes are the matrix itself)
        parts = (
            Part.build(
                id_array,
                matrix,
                codec_named(codec),
                labels=label_array,
                rows=row_store,
                locators=locators,
            ),
        )
    return VectorIndex(
        d,
        capacity=max(0, int(spare_rows)),
        codec=codec,
        executor=executor,
        parts=parts,
        row_store=row_store,
    )


def from_parts(
    dimension: int,
    parts: Sequence[Part],
    *,
    spare_rows: int = 0,
    codec: str = "float32",
    executor: Executor | None = None,
) -> VectorIndex:
    """An index over frozen parts (e.g. mapped segment files) and an empty tail."""
    check_dimension(dimension)
    codec_named(codec)
    for part in parts:
        if part.vectors.ndim != 2 or part.vectors.shape != (part.rows, dimension):
            raise ValidationFailed(
                "a part's rows do not match its ids and the dimension",
                code="dimension_mismatch",
                param="vectors",
            )
    return VectorIndex(
        dimension,
        capacity=max(0, int(spare_rows)),
        codec=codec,
        executor=executor,
        parts=tuple(p for p in parts if p.rows),
    )


def from_buffers(
    dimension: int,
    ids: bytes | memoryview,
    vectors: bytes | memoryview,
    *,
    normalized: bool = True,
    executor: Executor | None = None,
) -> VectorIndex:
    """An index of ``VectorIndex.to_buffers()`` output (int64 and float32, little-endian).

    With ``normalized=True`` the rows are trusted to be unit length already (as
    written by ``to_buffers``); otherwise they are validated and normalised.
    """
    return from_segments(dimension, [(ids, vectors)], normalized=normalized, executor=executor)


def from_segments(
    dimension: int,
    segments: Iterable[tuple[bytes | memoryview, bytes | memoryview]],
    *,
    total_rows: int | None = None,
    normalized: bool = True,
    executor: Executor | None = None,
) -> VectorIndex:
    """An index of many ``(ids, vectors)`` buffer pairs, copied into one matrix (its tail).

    Each pair is copied with one slice assignment. ``total_rows``, when known,
    lets the matrix be allocated once; otherwise it grows geometrically.
    """
    d = check_dimension(dimension)
    capacity = total_rows or 0
    buffer = np.empty((capacity, d), dtype=np.float32)
    ids_buffer = np.empty(capacity, dtype=np.int64)
    codes_buffer = np.zeros(capacity, dtype=np.int32)
    n = 0
    for id_bytes, vector_bytes in segments:
        seg_ids = np.frombuffer(id_bytes, dtype=ID_DTYPE)
        seg_vectors = np.frombuffer(vector_bytes, dtype=VECTOR_DTYPE)
        m = seg_ids.shape[0]
        if seg_vectors.shape[0] != m * d:
            raise ValidationFailed(
                f"a segment holds {m} ids but {seg_vectors.shape[0]} floats, not {m} x {d}",
                code="dimension_mismatch",
                param="vectors",
            )
        rows = seg_vectors.reshape(m, d)
        if n + m > buffer.shape[0]:
            buffer, ids_buffer, codes_buffer = grown(buffer, ids_buffer, codes_buffer, n, n + m)
        if normalized:
            buffer[n : n + m] = rows
        else:
            RowScales(rows).write(rows, buffer[n : n + m])
        ids_buffer[n : n + m] = seg_ids
        n += m
    return VectorIndex(d, executor=executor, tail=(buffer, ids_buffer, codes_buffer, n))
