"""The exact cosine vector index: one float32 matrix, top-k by argpartition, thread-safe reads.

Layout
    One C-ordered float32 buffer of shape ``(capacity, dimension)`` and an int64 id
    buffer of the same capacity. Rows are L2-normalised at insert, so a cosine
    similarity is a dot product. Appends write into the spare capacity, which grows
    geometrically. Deletes only mark rows dead (tombstones); once dead rows reach an
    eighth of the rows, the live ones are compacted into a fresh buffer, so the cost of
    a delete is amortised and no delete ever rewrites a row in place.

Concurrency (one writer lock, lock-free readers)
    Every reader starts by taking ``self._snap``, one immutable ``_Snapshot`` (matrix
    view, ids view, sorted dead rows, id-to-row map of that buffer) published by a
    single attribute assignment, which is atomic. Writers serialise on a lock and
    respect one invariant: *a row of a buffer that any snapshot can see is never
    written again*. Appends write rows at or past the published row count and publish
    afterwards; growth and compaction copy into a new buffer (old snapshots keep the
    old one alive); deletes publish a new dead-row array instead of touching rows.
    Hence a reader never sees a torn row or a wrong id-to-row pairing, and readers
    never wait for each other or for writers.

Search speed
    Brute force at this scale is bound by memory bandwidth. A small index answers a
    query with one BLAS matrix-vector product. Large single queries are split into row blocks that the calling thread and a small shared pool of helper
    threads claim one by one; each block is scored with ``np.vecdot`` (per-row dot
    products, which release the GIL and never start BLAS threads of their own) into a
    thread-local buffer that stays in cache, reduced to its top-k at once, and the few
    survivors of all blocks are merged; after a thread's first block, "reduced" is one
    comparison against the k-th best score that thread has seen. Batches use one
    matrix product per row block (BLAS threads it) and the same per-query bound.
    Results are exact: ties at the cut are kept, and the order is score descending,
    then id ascending.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agentcore.errors import ValidationFailed
from agentcore.knowledge import kernels

IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]

_ID_DTYPE = np.dtype("<i8")
_VECTOR_DTYPE = np.dtype("<f4")
_MIN_CAPACITY = 256
_GROWTH = 1.5
_COMPACT_FRACTION = 8  # compact once dead rows exceed 1/8 of all rows
_NO_PARAMS = np.empty(0, dtype=np.float32)  # float32 rows need no codec parameters
_FLOAT32 = kernels.Float32Codec()


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a reader needs, published as one object; never mutated after publishing."""

    buffer: Matrix  # the whole buffer; rows past ``count`` may be filled later
    matrix: Matrix  # buffer[:count]
    ids: IdArray  # ids of buffer[:count], dead rows included
    dead: IdArray  # sorted row numbers (not ids) of deleted rows
    row_of: dict[int, int]  # live id -> row in ``buffer``; shared by one buffer's snapshots

    @property
    def live(self) -> int:
        return int(self.matrix.shape[0] - self.dead.shape[0])


def _empty_result() -> tuple[IdArray, ScoreArray]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)


class VectorIndex:
    """An exact cosine-similarity index over int64 ids and float32 vectors.

    Safe to share between threads: any number of searches may run while one thread at
    a time adds or removes (writers serialise on an internal lock).

    :param dimension: the length of every vector.
    :param capacity: rows to preallocate.
    """

    def __init__(self, dimension: int, *, capacity: int = 0) -> None:
        if dimension < 1:
            raise ValidationFailed(
                "dimension must be at least 1", code="invalid_dimension", param="dimension"
            )
        self._dimension = int(dimension)
        self._lock = threading.Lock()
        cap = max(int(capacity), 0)
        self._ids_buffer: IdArray = np.empty(cap, dtype=np.int64)
        buffer = np.empty((cap, self._dimension), dtype=np.float32)
        self._snap = _Snapshot(
            buffer=buffer,
            matrix=buffer[:0],
            ids=self._ids_buffer[:0],
            dead=np.empty(0, dtype=np.int64),
            row_of={},
        )

    # -- construction from persisted buffers -------------------------------------

    @classmethod
    def from_buffers(
        cls,
        dimension: int,
        ids: bytes | memoryview,
        vectors: bytes | memoryview,
        *,
        normalized: bool = True,
    ) -> VectorIndex:
        """Build an index from ``to_buffers()`` output (int64 and float32, little-endian).

        With ``normalized=True`` the rows are trusted to be unit length already (as
        written by ``to_buffers``); otherwise they are validated and normalised.
        """
        return cls.from_segments(dimension, [(ids, vectors)], normalized=normalized)

    @classmethod
    def from_segments(
        cls,
        dimension: int,
        segments: Iterable[tuple[bytes | memoryview, bytes | memoryview]],
        *,
        total_rows: int | None = None,
        normalized: bool = True,
    ) -> VectorIndex:
        """Build an index from many ``(ids, vectors)`` buffer pairs into one matrix.

        Each pair is copied with one slice assignment. ``total_rows``, when known,
        lets the matrix be allocated once; otherwise it grows geometrically.
        """
        index = cls(dimension, capacity=total_rows or 0)
        d = index._dimension
        buffer = index._snap.buffer
        ids_buffer = index._ids_buffer
        n = 0
        for id_bytes, vector_bytes in segments:
            seg_ids = np.frombuffer(id_bytes, dtype=_ID_DTYPE)
            seg_vectors = np.frombuffer(vector_bytes, dtype=_VECTOR_DTYPE)
            m = seg_ids.shape[0]
            if seg_vectors.shape[0] != m * d:
                raise ValidationFailed(
                    f"a segment holds {m} ids but {seg_vectors.shape[0]} floats, not {m} x {d}",
                    code="dimension_mismatch",
                    param="vectors",
                )
            rows = seg_vectors.reshape(m, d)
            if n + m > buffer.shape[0]:
                buffer, ids_buffer = _grown(buffer, ids_buffer, n, n + m)
            if normalized:
                buffer[n : n + m] = rows
            else:
                _Scales(rows).write(rows, buffer[n : n + m])
            ids_buffer[n : n + m] = seg_ids
            n += m
        index._install(buffer, ids_buffer, n)
        return index

    @classmethod
    def adopt(
        cls, ids: npt.ArrayLike, vectors: npt.ArrayLike, *, spare_rows: int = 0
    ) -> VectorIndex:
        """An index over arrays already in its layout, without copying them.

        ``vectors`` must be C-contiguous float32 rows of unit length (as the store
        keeps them) and ``ids`` int64, one per row: the store reads a whole workspace
        straight into such arrays, so loading costs one copy out of the database.
        The index owns the arrays afterwards.

        :param spare_rows: room for this many appends before the first growth copy.
            Arrays that own their memory are enlarged in place (``realloc``, which
            for large buffers remaps pages rather than copying them), so the first
            rows added after a load do not copy the whole matrix; other arrays are
            adopted as they are. The caller hands such arrays over: no view of them
            may outlive this call (``Store.load_vectors`` returns them that way).
        """
        matrix = np.ascontiguousarray(vectors, dtype=_VECTOR_DTYPE)
        id_array = np.ascontiguousarray(ids, dtype=_ID_DTYPE)
        if matrix.ndim != 2 or id_array.shape != (matrix.shape[0],):
            raise ValidationFailed(
                "vectors must be (n, dimension) with one id per row",
                code="dimension_mismatch",
                param="vectors",
            )
        n, d = matrix.shape
        if spare_rows > 0 and matrix.flags.owndata and id_array.flags.owndata:
            matrix.resize((n + spare_rows, d), refcheck=False)
            id_array.resize(n + spare_rows, refcheck=False)
        index = cls(d, capacity=0)
        index._install(matrix, id_array, n)
        return index

    def _install(self, buffer: Matrix, ids_buffer: IdArray, n: int) -> None:
        """Publish the first ``n`` rows of ``buffer``/``ids_buffer`` as the contents."""
        row_of = dict(zip(ids_buffer[:n].tolist(), range(n), strict=True))
        if len(row_of) != n:
            raise ValidationFailed(
                "the persisted ids contain duplicates", code="duplicate_id", param="ids"
            )
        self._ids_buffer = ids_buffer
        self._snap = _Snapshot(
            buffer=buffer,
            matrix=buffer[:n],
            ids=ids_buffer[:n],
            dead=np.empty(0, dtype=np.int64),
            row_of=row_of,
        )

    # -- reading -----------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The length of every vector in this index."""
        return self._dimension

    def __len__(self) -> int:
        return self._snap.live

    @property
    def nbytes(self) -> int:
        """Bytes held by the matrix and id buffers (capacity included)."""
        snap = self._snap
        return int(snap.buffer.nbytes + self._ids_buffer.nbytes)

    def ids(self) -> IdArray:
        """A copy of the live ids, in storage order."""
        snap = self._snap
        return np.delete(snap.ids, snap.dead) if snap.dead.size else snap.ids.copy()

    def contains(self, id: int) -> bool:
        """Whether ``id`` is in the index."""
        return self._row(self._snap, int(id)) is not None

    def get(self, id: int) -> npt.NDArray[np.float32] | None:
        """A copy of the stored (normalised) vector for ``id``, or ``None``."""
        snap = self._snap
        row = self._row(snap, int(id))
        return None if row is None else snap.buffer[row].copy()

    @staticmethod
    def _row(snap: _Snapshot, id: int) -> int | None:
        # The map may already hold rows appended after this snapshot; those rows are
        # fully written before the map learns of them, so reading them is safe.
        return snap.row_of.get(id)

    def to_buffers(self) -> tuple[bytes, bytes]:
        """The live rows as ``(ids, vectors)``: int64 and float32, little-endian."""
        snap = self._snap
        ids, matrix = snap.ids, snap.matrix
        if snap.dead.size:
            keep = np.ones(ids.shape[0], dtype=bool)
            keep[snap.dead] = False
            ids, matrix = ids[keep], matrix[keep]
        return (
            ids.astype(_ID_DTYPE, copy=False).tobytes(),
            matrix.astype(_VECTOR_DTYPE, copy=False).tobytes(),
        )

    def search(
        self, query: npt.ArrayLike, k: int, *, min_score: float | None = None
    ) -> tuple[IdArray, ScoreArray]:
        """The ``k`` ids most cosine-similar to ``query``, best first.

        Ties are ordered by ascending id. Returns fewer than ``k`` when the index is
        smaller or ``min_score`` filters some out, and nothing for a zero query.
        """
        _check_k(k)
        snap = self._snap
        q = self._prepare(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
        ids, scores = self._search_snapshot(snap, q, k)
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _search_snapshot(self, snap: _Snapshot, q: Matrix, k: int) -> tuple[IdArray, ScoreArray]:
        live = snap.live
        if live == 0 or not q.any():
            return _empty_result()
        k = min(k, live)
        rows, scores = kernels.search_part(
            _FLOAT32, snap.matrix, _NO_PARAMS, snap.matrix, snap.dead, q, k
        )
        return kernels.order(snap.ids[rows], scores, k)

    def search_batch(self, queries: npt.ArrayLike, k: int) -> tuple[IdArray, ScoreArray]:
        """Top-``k`` for each row of ``queries`` ``(m, d)``: ids and scores ``(m, k')``.

        ``k' = min(k, len(self))``. Each row is ordered like ``search``; a zero query
        row has ids ``-1`` and scores ``NaN`` throughout.
        """
        _check_k(k)
        snap = self._snap
        q = self._prepare(np.asarray(queries, dtype=np.float32))
        m = q.shape[0]
        k = min(k, snap.live)
        if k == 0 or m == 0:
            return kernels.order_batch(m, k, *_empty_triples())
        query, rows, scores = kernels.search_part_batch(
            _FLOAT32, snap.matrix, _NO_PARAMS, snap.matrix, snap.dead, q, k
        )
        return kernels.order_batch(m, k, query, snap.ids[rows], scores)

    # -- writing -----------------------------------------------------------------

    def add(self, ids: Sequence[int] | npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Insert rows; refuses zero or non-finite vectors, wrong dimensions, known ids.

        The whole batch is validated before anything is written.
        """
        new_ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or rows.shape[1] != self._dimension:
            raise ValidationFailed(
                f"vectors must have shape (n, {self._dimension}), not {rows.shape}",
                code="dimension_mismatch",
                param="vectors",
            )
        if rows.shape[0] != new_ids.shape[0]:
            raise ValidationFailed(
                f"{new_ids.shape[0]} ids for {rows.shape[0]} vectors",
                code="dimension_mismatch",
                param="ids",
            )
        scales = _Scales(rows)
        if np.unique(new_ids).shape[0] != new_ids.shape[0]:
            raise ValidationFailed("the batch repeats an id", code="duplicate_id", param="ids")
        m = new_ids.shape[0]
        if m == 0:
            return
        with self._lock:
            snap = self._snap
            known = [i for i in new_ids.tolist() if i in snap.row_of]
            if known:
                raise ValidationFailed(
                    f"id {known[0]} is already in the index", code="duplicate_id", param="ids"
                )
            n = snap.matrix.shape[0]
            buffer, ids_buffer, row_of, dead = snap.buffer, self._ids_buffer, snap.row_of, snap.dead
            if n + m > buffer.shape[0]:
                buffer, ids_buffer = _grown(buffer, ids_buffer, n, n + m)
                row_of = dict(row_of)  # a new buffer gets its own map
            # Rows past ``n`` are invisible to every published snapshot.
            scales.write(rows, buffer[n : n + m])
            ids_buffer[n : n + m] = new_ids
            row_of.update(zip(new_ids.tolist(), range(n, n + m), strict=True))
            self._ids_buffer = ids_buffer
            self._snap = _Snapshot(buffer, buffer[: n + m], ids_buffer[: n + m], dead, row_of)

    def remove(self, ids: Iterable[int] | npt.ArrayLike) -> int:
        """Delete ``ids``; unknown ids are ignored. Returns how many were removed."""
        raw = ids if isinstance(ids, np.ndarray) else list(ids)  # type: ignore[arg-type]
        wanted = np.unique(np.asarray(raw, dtype=np.int64).reshape(-1))
        with self._lock:
            snap = self._snap
            rows = [r for r in (snap.row_of.get(i) for i in wanted.tolist()) if r is not None]
            if not rows:
                return 0
            if len(rows) + snap.dead.shape[0] > snap.matrix.shape[0] // _COMPACT_FRACTION:
                self._compact(snap, np.asarray(rows, dtype=np.int64))
                return len(rows)
            row_of = snap.row_of
            for r in rows:
                # Old snapshots share this map: for them the id now reads as gone,
                # which is the newer truth; their search still sees the row alive.
                del row_of[int(snap.ids[r])]
            dead = np.union1d(snap.dead, np.asarray(rows, dtype=np.int64))
            self._snap = _Snapshot(snap.buffer, snap.matrix, snap.ids, dead, row_of)
            return len(rows)

    def _compact(self, snap: _Snapshot, newly_dead: IdArray) -> None:
        keep = np.ones(snap.matrix.shape[0], dtype=bool)
        keep[snap.dead] = False
        keep[newly_dead] = False
        live = int(np.count_nonzero(keep))
        capacity = max(_MIN_CAPACITY, int(live * 1.25))
        buffer = np.empty((capacity, self._dimension), dtype=np.float32)
        ids_buffer = np.empty(capacity, dtype=np.int64)
        np.compress(keep, snap.matrix, axis=0, out=buffer[:live])
        np.compress(keep, snap.ids, out=ids_buffer[:live])
        row_of = dict(zip(ids_buffer[:live].tolist(), range(live), strict=True))
        self._ids_buffer = ids_buffer
        self._snap = _Snapshot(
            buffer, buffer[:live], ids_buffer[:live], np.empty(0, dtype=np.int64), row_of
        )

    # -- helpers -----------------------------------------------------------------

    def _prepare(self, q: Matrix) -> Matrix:
        """Validate query rows and normalise the non-zero ones."""
        if q.ndim != 2 or q.shape[1] != self._dimension:
            raise ValidationFailed(
                f"queries must have {self._dimension} dimensions, not shape {q.shape}",
                code="dimension_mismatch",
                param="query",
            )
        if not np.isfinite(q).all():
            raise ValidationFailed(
                "the query holds NaN or infinity", code="non_finite_vector", param="query"
            )
        norms = np.linalg.norm(q.astype(np.float64), axis=1)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray((q / norms[:, None]).astype(np.float32))


def _empty_triples() -> tuple[IdArray, IdArray, ScoreArray]:
    empty = np.empty(0, dtype=np.int64)
    return empty, empty, np.empty(0, dtype=np.float32)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValidationFailed("k must be a positive integer", code="invalid_top_k", param="top_k")


class _Scales:
    """Validated inverse norms of a batch of rows, to normalise them into place.

    Squared norms come from one float32 pass; the rare rows where that is not a normal
    positive number (NaN, infinity, zero, or float32 under/overflow) are re-measured in
    float64, which tells refusals from rows that are merely tiny or huge.
    """

    def __init__(self, rows: Matrix) -> None:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            squares = np.vecdot(rows, rows)
        self.slow = np.flatnonzero(~((squares > 1e-30) & (squares < 1e30)))
        self.inverse = np.zeros(rows.shape[0], dtype=np.float32)
        ok = np.ones(rows.shape[0], dtype=bool)
        ok[self.slow] = False
        np.divide(1.0, np.sqrt(squares), out=self.inverse, where=ok)
        self.slow_norms = np.empty(0, dtype=np.float64)
        if self.slow.size:
            exact = rows[self.slow].astype(np.float64)
            if not np.isfinite(exact).all():
                raise ValidationFailed(
                    "a vector holds NaN or infinity", code="non_finite_vector", param="vectors"
                )
            self.slow_norms = np.sqrt(np.einsum("ij,ij->i", exact, exact))
            if (self.slow_norms == 0).any():
                first = int(self.slow[np.argmin(self.slow_norms)])
                raise ValidationFailed(
                    f"vector {first} is all zeros", code="zero_vector", param="vectors"
                )

    def write(self, rows: Matrix, out: Matrix) -> None:
        """Write the unit-length ``rows`` into ``out`` (no temporary the batch's size)."""
        np.multiply(rows, self.inverse[:, None], out=out)
        if self.slow.size:
            out[self.slow] = rows[self.slow] / self.slow_norms[:, None]


def _grown(buffer: Matrix, ids_buffer: IdArray, n: int, needed: int) -> tuple[Matrix, IdArray]:
    """New buffers of geometrically larger capacity holding the first ``n`` rows."""
    capacity = max(needed, int(buffer.shape[0] * _GROWTH), _MIN_CAPACITY)
    grown = np.empty((capacity, buffer.shape[1]), dtype=np.float32)
    grown_ids = np.empty(capacity, dtype=np.int64)
    grown[:n] = buffer[:n]
    grown_ids[:n] = ids_buffer[:n]
    return grown, grown_ids
