"""The exact cosine vector index: immutable parts plus an in-RAM tail, thread-safe reads.

Layout
    The rows live in *parts*. A frozen ``Part`` never changes after it is made: its ids
    are sorted ascending (lookups are a binary search, so no per-row map is built), its
    rows are kept by a ``kernels.Codec`` (codes and parameters, next to the float32
    rows), and it may be a memory-mapped segment file (``segments.py``) shared by every
    process on the machine. New rows go to the *tail*: one C-ordered float32 buffer with
    spare capacity (growing geometrically) and an id-to-row map. Rows are L2-normalised
    at insert, so a cosine similarity is a dot product. Deletes only mark rows dead
    (tombstones: a sorted array of row numbers per part); no delete rewrites a row.

Maintenance (never inside ``add`` or ``remove``)
    A part whose dead rows pass an eighth of its rows is compacted, many small parts are
    merged, and (when parts are persisted, or the codec is approximate) the tail is
    sealed into a frozen part. ``plan_maintenance`` picks the parts and snapshots them;
    the new part is built from that snapshot while readers and writers go on; ``apply``
    swaps it in, carrying over the rows added and deleted meanwhile. It runs on the
    index's owner's threads: an index given an ``executor`` submits its steps there
    when they fall due, ``WorkspaceIndexes`` runs them on its core's maintenance loop (which
    also writes segment files), and an index with neither is maintained only when
    its user calls ``maintain()`` (``set_maintenance`` chooses).

Concurrency (one writer lock, lock-free readers)
    Every reader starts by taking ``self._snap``, one immutable ``_Snapshot`` (the frozen
    parts, the tail's part and buffer, the tail's id-to-row map) published by a single
    attribute assignment, which is atomic. Writers serialise on a lock and respect one
    invariant: *a row that any snapshot can see is never written again*. Appends write
    tail rows at or past the published row count and publish afterwards; growth copies
    into a new buffer (old snapshots keep the old one alive); deletes publish new
    dead-row arrays; maintenance publishes new parts. Hence a reader never sees a torn
    row or a wrong id-to-row pairing, and readers never wait for each other or writers.

Search
    Each part is searched by ``kernels.search_part`` (or ``search_part_batch``) with its
    codec, and the candidates of all parts are merged by ``kernels.order``: results are
    exact (approximate codecs are re-scored against the float32 rows), ties at the cut
    are kept, and the order is score descending, then id ascending. Large parts are
    scanned in row blocks shared with the ``executor``'s threads, when there is one.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agentcore.errors import ValidationFailed
from agentcore.knowledge import kernels
from agentcore.redact import get_logger

IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]

_ID_DTYPE = np.dtype("<i8")
_VECTOR_DTYPE = np.dtype("<f4")
_MIN_CAPACITY = 256
_GROWTH = 1.5
COMPACT_FRACTION = 8  # a part is compacted once its dead rows exceed 1/8 of its rows
MAX_PARTS = 8  # more frozen parts than this: the smallest are merged
# Steps one submission of an index may run back to back. Each step leaves fewer parts
# or fewer dead rows, so a handful settle anything; the cap turns a step that would
# never settle into a logged warning instead of a thread that spins forever.
MAX_STEPS = 4 * MAX_PARTS
# A tail this large with ascending ids is sealed as a frozen part (its rows stay where
# they are) instead of being copied into a larger buffer.
SEAL_ROWS = 65_536
# Bytes of Python objects an index keeps besides its arrays (the index, its snapshot,
# parts, locks; measured with tracemalloc, rounded up), and per row of the tail's
# id-to-row map (a dict entry and two ints).
INDEX_OVERHEAD_BYTES = 4096
ROW_MAP_BYTES = 100
_NO_PARAMS = np.empty(0, dtype=np.float32)  # float32 rows need no codec parameters
_FLOAT32 = kernels.Float32Codec()
_EMPTY_IDS = np.empty(0, dtype=np.int64)
NO_LABEL = -1
"""The label of a row that belongs to no document."""
_UNLABELLED = np.array([NO_LABEL], dtype=np.int64)
# A filter that lets at most this fraction of a part's rows through is answered by
# gathering those rows and scoring only them; a wider one scans every row and masks
# the scores of the others (measured in benchmarks/filtered_search.py).
GATHER_FRACTION = 0.25
_log = get_logger(__name__)

LabelCodes = npt.NDArray[np.int32]
LabelFilter = Callable[[IdArray], npt.NDArray[np.bool_]]
"""Given distinct row labels, which of them a search may return (a filter's verdicts)."""


def encode_labels(labels: IdArray | None) -> tuple[LabelCodes | None, IdArray | None]:
    """``(codes, values)`` of per-row ``labels``: ``values[codes] == labels``, values
    distinct (sorted); ``(None, None)`` for no labels or only ``NO_LABEL``."""
    if labels is None or labels.size == 0:
        return None, None
    labels = np.asarray(labels, dtype=np.int64)
    first = labels[0]
    if bool((labels == first).all()):  # the usual case: one document's rows
        if first == NO_LABEL:
            return None, None
        return np.zeros(labels.shape[0], dtype=np.int32), np.array([first], dtype=np.int64)
    values, codes = np.unique(labels, return_inverse=True)
    return codes.astype(np.int32, copy=False), values.astype(np.int64, copy=False)


class RowStore(Protocol):
    """Where the float32 rows of an approximate codec's parts are kept instead of RAM
    (a workspace's rows in the store): an index given one keeps only the codes of such
    parts, and reads the few rows it re-scores back at each search."""

    def locate(self, ids: IdArray) -> IdArray:
        """Locators of the rows ``ids`` (-1 for one not kept)."""

    def read(self, locators: IdArray) -> Matrix:
        """The float32 rows at ``locators``; all NaN for a row no longer kept."""


class StoredRows:
    """A part's float32 rows kept by a ``RowStore``: what ``Part.vectors`` holds in their
    place. Indexing it by row numbers (or a slice) reads those rows back; it costs only
    its locators (8 bytes a row)."""

    ndim = 2
    dtype = _VECTOR_DTYPE

    def __init__(self, store: RowStore, locators: IdArray, dimension: int) -> None:
        self.store = store
        self.locators = np.ascontiguousarray(locators, dtype=np.int64)
        self.dimension = dimension

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, dimension)``, like the matrix it stands for."""
        return (int(self.locators.shape[0]), self.dimension)

    @property
    def nbytes(self) -> int:
        """The bytes it holds: its locators."""
        return int(self.locators.nbytes)

    def __len__(self) -> int:
        return int(self.locators.shape[0])

    def __getitem__(self, rows: Any) -> Matrix:
        wanted = self.locators[rows]
        if wanted.ndim == 0:  # one row number: one row, as a matrix would give
            row: Matrix = self.store.read(wanted.reshape(1))[0]
            return row
        return self.store.read(wanted)

    def take(self, rows: IdArray) -> StoredRows:
        """These rows, still kept by the store."""
        return StoredRows(self.store, self.locators[rows], self.dimension)


def materialized(rows: Matrix | StoredRows) -> Matrix:
    """``rows`` as a matrix in RAM (read back whole if a ``RowStore`` keeps them)."""
    return rows[:] if isinstance(rows, StoredRows) else rows


def codec_named(name: str) -> kernels.Codec:
    """The codec registered as ``name`` in ``kernels.CODECS`` (a 400 if unknown)."""
    codec = kernels.CODECS.get(name)
    if codec is None:
        known = ", ".join(sorted(kernels.CODECS))
        raise ValidationFailed(
            f"unknown index codec {name!r} (known: {known})", code="invalid_codec", param="codec"
        )
    return codec


@dataclass(frozen=True, slots=True, eq=False)
class Part:
    """An immutable block of rows: ids, the codec's codes and params, float32 rows, dead rows.

    Frozen parts have strictly ascending ids. ``name`` is the segment file a persisted
    part was mapped from (``None`` for a part in RAM); ``keepalive`` holds whatever
    owns the memory of the arrays (a mapping). ``with_dead`` makes the same part with
    other dead rows: it shares the arrays, and ``same_rows`` tells such parts apart
    from others.
    """

    ids: IdArray
    codes: kernels.Codes
    params: ScoreArray
    vectors: Matrix | StoredRows  # StoredRows: an approximate codec's rows kept elsewhere
    dead: IdArray  # sorted row numbers
    codec: kernels.Codec = field(default_factory=kernels.Float32Codec)
    name: str | None = None
    keepalive: object = None
    # Each row's label (its document's number; ``NO_LABEL`` when it has none) as a code
    # into ``label_values``: a filter decides per distinct label, and one gather of that
    # decision by the codes is the row mask. ``None``: every row is ``NO_LABEL``.
    label_codes: LabelCodes | None = None
    label_values: IdArray | None = None

    @classmethod
    def build(
        cls,
        ids: IdArray,
        vectors: Matrix,
        codec: kernels.Codec,
        *,
        name: str | None = None,
        labels: IdArray | tuple[LabelCodes | None, IdArray | None] | None = None,
        rows: RowStore | None = None,
        locators: IdArray | None = None,
    ) -> Part:
        """A RAM part over unit ``vectors`` and their ``labels`` (one per row, or
        already as ``(codes, values)``), sorted by id here if they are not.

        With ``rows``, an approximate codec's part keeps only its codes (and labels):
        its float32 rows are left to ``rows`` (at ``locators``, one per row, or located
        by id).
        """
        label_codes, label_values = labels if isinstance(labels, tuple) else encode_labels(labels)
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            order = np.argsort(ids, kind="stable")
            ids, vectors = ids[order], vectors[order]
            label_codes = None if label_codes is None else label_codes[order]
            locators = None if locators is None else locators[order]
        vectors = np.ascontiguousarray(vectors, dtype=_VECTOR_DTYPE)
        codes, params = codec.encode(vectors)
        kept: Matrix | StoredRows = vectors
        if codec.name == "float32":
            codes = vectors
        elif rows is not None:
            where = rows.locate(ids) if locators is None else locators
            kept = StoredRows(rows, where, vectors.shape[1])
        return cls(
            ids, codes, params, kept, _EMPTY_IDS, codec, name, None, label_codes, label_values
        )

    def labels(self) -> IdArray:
        """Each row's label (``NO_LABEL`` for rows without one)."""
        if self.label_codes is None or self.label_values is None:
            return np.full(self.rows, NO_LABEL, dtype=np.int64)
        return self.label_values[self.label_codes]

    def allowed_rows(self, allow: LabelFilter) -> npt.NDArray[np.bool_] | bool:
        """Which rows ``allow`` lets through: ``True`` (all of them), ``False`` (none),
        or a mask over the rows (dead rows not cleared). ``allow`` is asked once per
        distinct label; the mask is one gather of its answers by the rows' codes."""
        if self.label_codes is None or self.label_values is None:
            return bool(allow(_UNLABELLED)[0])
        verdict = np.asarray(allow(self.label_values), dtype=bool)
        if verdict.all():
            return True
        if not verdict.any():
            return False
        mask: npt.NDArray[np.bool_] = verdict[self.label_codes]
        return mask

    @property
    def rows(self) -> int:
        """Rows held, dead ones included."""
        return int(self.ids.shape[0])

    @property
    def live(self) -> int:
        """Rows not deleted."""
        return self.rows - int(self.dead.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of ids, codes, params and float32 rows (shared arrays counted once)."""
        total = self.ids.nbytes + self.codes.nbytes + self.params.nbytes
        if self.label_codes is not None and self.label_values is not None:
            total += self.label_codes.nbytes + self.label_values.nbytes
        return int(total + (0 if self.vectors is self.codes else self.vectors.nbytes))

    @property
    def mapped(self) -> bool:
        """Whether the arrays are a memory mapping of a segment file (pages the OS
        shares between processes, and reads in only when they are touched)."""
        return isinstance(self.keepalive, mmap.mmap)

    @property
    def resident_bytes(self) -> int:
        """Bytes this part keeps in memory while it is searched: all of a RAM part's;
        of a mapped part, the pages every scan reads (ids, codes, parameters), not the
        float32 rows an approximate codec reads only at its few candidates."""
        scanned = self.ids.nbytes + self.codes.nbytes + self.params.nbytes + self.dead.nbytes
        if self.label_codes is not None and self.label_values is not None:
            scanned += self.label_codes.nbytes + self.label_values.nbytes  # a filter's mask
        if self.mapped or self.vectors is self.codes:
            return int(scanned)
        return int(scanned + self.vectors.nbytes)

    def with_dead(self, dead: IdArray) -> Part:
        """This part with ``dead`` as its dead rows."""
        return replace(self, dead=dead)

    def same_rows(self, other: Part) -> bool:
        """Whether ``other`` is this part (perhaps with other dead rows)."""
        return self.ids is other.ids

    def find(self, wanted: IdArray) -> tuple[npt.NDArray[np.bool_], IdArray]:
        """For each of ``wanted``: whether it is a live row here, and its row number."""
        n = self.rows
        if n == 0 or wanted.size == 0:
            return np.zeros(wanted.shape[0], dtype=bool), np.zeros(wanted.shape[0], np.int64)
        rows = np.minimum(np.searchsorted(self.ids, wanted), n - 1).astype(np.int64)
        hit = self.ids[rows] == wanted
        if self.dead.size:
            at = np.minimum(np.searchsorted(self.dead, rows), self.dead.shape[0] - 1)
            hit &= self.dead[at] != rows
        return hit, rows

    def live_ids(self) -> IdArray:
        """The ids of the live rows."""
        return np.delete(self.ids, self.dead) if self.dead.size else np.asarray(self.ids)

    def live_rows(self) -> tuple[IdArray, Matrix]:
        """The live ids and float32 rows (the part's own arrays when none is dead: read only)."""
        if not self.dead.size:
            return self.ids, materialized(self.vectors)
        keep = np.ones(self.rows, dtype=bool)
        keep[self.dead] = False
        if isinstance(self.vectors, StoredRows):
            return np.compress(keep, self.ids), self.vectors[np.flatnonzero(keep)]
        return np.compress(keep, self.ids), np.compress(keep, self.vectors, axis=0)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What a reader needs, published as one object; never mutated after publishing."""

    parts: tuple[Part, ...]  # frozen parts
    tail: Part  # the tail's first ``rows`` rows (views of ``buffer``)
    buffer: Matrix  # the whole tail buffer; rows past the tail's may be filled later
    row_of: dict[int, int]  # live tail id -> row in ``buffer``; shared by one buffer's snapshots
    epoch: int = 0  # advances whenever the tail is cut (maintenance) or sealed (add)

    @property
    def live(self) -> int:
        return self.tail.live + sum(part.live for part in self.parts)

    def all_parts(self) -> tuple[Part, ...]:
        return (*self.parts, self.tail)


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    """The parts one maintenance step rewrites, as a snapshot saw them.

    ``parts`` are frozen parts to merge or compact; ``tail_rows`` is how many leading
    rows of the tail to seal (0: the tail stays). ``keep`` are the frozen parts left as
    they are; with the new part they hold everything the snapshot held (if the whole
    tail is sealed), which is what a persisted manifest then describes.
    """

    snapshot: _Snapshot
    parts: tuple[Part, ...]
    tail_rows: int

    @property
    def keep(self) -> tuple[Part, ...]:
        """The frozen parts this step leaves as they are."""
        return tuple(p for p in self.snapshot.parts if not any(p.same_rows(c) for c in self.parts))

    def live_rows(self) -> tuple[IdArray, Matrix]:
        """The live rows of the chosen parts and tail rows, sorted by id (read only).

        One part with no dead rows and ascending ids is returned as it is (a store
        load written out as a segment needs no second copy of the matrix).
        """
        ids, rows = self.gather()
        if rows.view is not None:
            return ids, rows.view
        return ids, rows.fill(0, rows.rows, np.empty((rows.rows, rows.dimension), np.float32))

    def gather(self) -> tuple[IdArray, RowSource]:
        """The sorted live ids of the rows this step rewrites, and their rows (and
        labels) as a ``RowSource`` that copies them out block by block (nothing is
        copied here)."""
        pieces: list[tuple[Matrix | StoredRows, IdArray | None]] = []
        ids: list[IdArray] = []
        labels: list[Part] = []
        for part in self.parts:
            if part.dead.size:
                selected = _live_positions(part.rows, part.dead)
                pieces.append((part.vectors, selected))
                ids.append(part.ids[selected])
            else:
                pieces.append((part.vectors, None))
                ids.append(np.asarray(part.ids))
            labels.append(part)
        if self.tail_rows:
            tail = self.snapshot.tail
            selected = _live_positions(self.tail_rows, tail.dead[tail.dead < self.tail_rows])
            pieces.append((tail.vectors[: self.tail_rows], selected))
            ids.append(tail.ids[selected])
            labels.append(tail)
        d = self.snapshot.buffer.shape[1]
        if not pieces:
            return _EMPTY_IDS, RowSource((), None, d)
        if len(pieces) == 1 and _ascending(ids[0]):
            return ids[0], RowSource(tuple(pieces), None, d, tuple(labels))
        joined = np.concatenate(ids).astype(np.int64, copy=False)
        order = np.argsort(joined, kind="stable")
        return joined[order], RowSource(tuple(pieces), order, d, tuple(labels))


class RowSource:
    """The rows of a maintenance step's new part, in id order, copied out on demand.

    ``pieces`` are ``(rows, selected)`` pairs: a frozen part's or the tail's float32
    rows and the row numbers taken from them (``None``: all). Output row ``i`` is
    entry ``order[i]`` of the pieces' selections laid end to end (``order`` ``None``:
    one piece, already in id order). ``fill`` copies any range of output rows, so a
    writer can stream a part of any size through a small buffer: each copy is one
    numpy call that runs without the GIL, and the GIL is handed over between blocks.
    """

    def __init__(
        self,
        pieces: tuple[tuple[Matrix | StoredRows, IdArray | None], ...],
        order: IdArray | None,
        dimension: int,
        labelled: tuple[Part, ...] = (),
    ) -> None:
        self.pieces = pieces
        self.order = order
        self.dimension = dimension
        self._labelled = labelled  # the part each piece's rows come from (their labels)
        sizes = [rows.shape[0] if sel is None else sel.shape[0] for rows, sel in pieces]
        self.rows = int(sum(sizes))
        self._starts = np.cumsum([0, *sizes]).astype(np.int64)

    def label_codes(self) -> tuple[LabelCodes | None, IdArray | None]:
        """The output rows' labels as ``(codes, values)`` in output order (``values``
        sorted; ``(None, None)``: no row has a label). Codes are gathered, never the
        labels themselves: 4 bytes a row, nothing when no source part has labels."""
        parts = self._labelled
        if not parts or all(p.label_codes is None for p in parts):
            return None, None
        values = np.unique(
            np.concatenate(
                [_UNLABELLED if p.label_values is None else p.label_values for p in parts]
            )
        )
        pieces: list[LabelCodes] = []
        for (rows, selected), part in zip(self.pieces, parts, strict=True):
            count = rows.shape[0] if selected is None else selected.shape[0]
            if part.label_codes is None or part.label_values is None:
                none = int(np.searchsorted(values, NO_LABEL))
                pieces.append(np.full(count, none, dtype=np.int32))
                continue
            remap = np.searchsorted(values, part.label_values).astype(np.int32)
            codes = part.label_codes[: rows.shape[0]]
            pieces.append(remap[codes if selected is None else codes[selected]])
        joined = np.concatenate(pieces)
        return (joined if self.order is None else joined[self.order]), values

    @property
    def view(self) -> Matrix | None:
        """All the rows as one existing array (no copy), when they are one whole piece."""
        if self.order is None and len(self.pieces) == 1 and self.pieces[0][1] is None:
            rows = self.pieces[0][0]
            return None if isinstance(rows, StoredRows) else rows
        return None

    def fill(self, start: int, stop: int, out: Matrix) -> Matrix:
        """Copy output rows ``start:stop`` into ``out[: stop - start]``; that view."""
        m = stop - start
        target = out[:m]
        if m <= 0:
            return target
        if self.order is None:
            rows, selected = self.pieces[0]
            if selected is None:
                target[...] = rows[start:stop]
            else:
                if isinstance(rows, StoredRows):
                    target[...] = rows[selected[start:stop]]
                else:
                    np.take(rows, selected[start:stop], axis=0, out=target, mode="clip")
            return target
        wanted = self.order[start:stop]
        which = np.searchsorted(self._starts, wanted, side="right") - 1
        for p in np.unique(which).tolist():
            at = np.flatnonzero(which == p)
            local = wanted[at] - self._starts[p]
            rows, selected = self.pieces[p]
            target[at] = rows[local if selected is None else selected[local]]
        return target

    def block(self, start: int, stop: int, buffer: Matrix) -> Matrix:
        """Output rows ``start:stop``: a view of the source when it is one whole piece,
        else copied into ``buffer`` (at least ``stop - start`` rows)."""
        view = self.view
        return view[start:stop] if view is not None else self.fill(start, stop, buffer)


def _empty_result() -> tuple[IdArray, ScoreArray]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)


class VectorIndex:
    """An exact cosine-similarity index over int64 ids and float32 vectors.

    Safe to share between threads: any number of searches may run while one thread at
    a time adds or removes (writers serialise on an internal lock).

    The index starts no thread of its own. Given an ``executor`` (a thread pool its
    owner keeps and shuts down, e.g. ``concurrent.futures.ThreadPoolExecutor``), large
    scans share their row blocks with its threads, and maintenance steps (compaction,
    merging parts) run there when they fall due; without one, searches run on the
    calling thread alone and maintenance waits for ``maintain()`` (or whatever
    ``set_maintenance`` installs).

    :param dimension: the length of every vector.
    :param capacity: tail rows to preallocate.
    :param codec: how frozen parts keep their rows (a name in ``kernels.CODECS``).
    :param executor: helper threads for scans and maintenance.
    """

    def __init__(
        self,
        dimension: int,
        *,
        capacity: int = 0,
        codec: str = "float32",
        executor: Executor | None = None,
    ) -> None:
        if dimension < 1:
            raise ValidationFailed(
                "dimension must be at least 1", code="invalid_dimension", param="dimension"
            )
        self._dimension = int(dimension)
        self._codec = codec_named(codec)
        self._lock = threading.Lock()
        self._maintaining = threading.Lock()  # one RAM maintenance step at a time
        self._executor = executor
        self._maintenance: Callable[[VectorIndex], None] | None = (
            None if executor is None else _submit_to(executor)
        )
        self._scheduled = False
        self.persisted = False  # frozen parts are segment files: always seal the whole tail
        # where the float32 rows of parts an approximate codec builds are kept (None: RAM)
        self.row_store: RowStore | None = None
        self.merge_rows = SEAL_ROWS  # tail rows that make sealing the tail due when persisted
        cap = max(int(capacity), 0)
        self._ids_buffer: IdArray = np.empty(cap, dtype=np.int64)
        # the tail's label codes (a row's code is written with its id) and their table
        self._codes_buffer: LabelCodes = np.zeros(cap, dtype=np.int32)
        self._labels = _LabelTable()
        buffer = np.empty((cap, self._dimension), dtype=np.float32)
        self._snap = _Snapshot((), self._tail(buffer, 0, _EMPTY_IDS), buffer, {})

    # -- construction ------------------------------------------------------------

    @classmethod
    def from_buffers(
        cls,
        dimension: int,
        ids: bytes | memoryview,
        vectors: bytes | memoryview,
        *,
        normalized: bool = True,
        executor: Executor | None = None,
    ) -> VectorIndex:
        """Build an index from ``to_buffers()`` output (int64 and float32, little-endian).

        With ``normalized=True`` the rows are trusted to be unit length already (as
        written by ``to_buffers``); otherwise they are validated and normalised.
        """
        return cls.from_segments(
            dimension, [(ids, vectors)], normalized=normalized, executor=executor
        )

    @classmethod
    def from_segments(
        cls,
        dimension: int,
        segments: Iterable[tuple[bytes | memoryview, bytes | memoryview]],
        *,
        total_rows: int | None = None,
        normalized: bool = True,
        executor: Executor | None = None,
    ) -> VectorIndex:
        """Build an index from many ``(ids, vectors)`` buffer pairs into one matrix.

        Each pair is copied with one slice assignment. ``total_rows``, when known,
        lets the matrix be allocated once; otherwise it grows geometrically.
        """
        index = cls(dimension, capacity=total_rows or 0, executor=executor)
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
                buffer, ids_buffer, index._codes_buffer = _grown(
                    buffer, ids_buffer, index._codes_buffer, n, n + m
                )
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
        cls,
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
        matrix = np.ascontiguousarray(vectors, dtype=_VECTOR_DTYPE)
        id_array = np.ascontiguousarray(ids, dtype=_ID_DTYPE)
        if matrix.ndim != 2 or id_array.shape != (matrix.shape[0],):
            raise ValidationFailed(
                "vectors must be (n, dimension) with one id per row",
                code="dimension_mismatch",
                param="vectors",
            )
        label_array = _labels_for(labels, id_array.shape[0])
        n, d = matrix.shape
        if not _ascending(id_array):
            order = np.argsort(id_array, kind="stable")
            id_array = id_array[order]
            if bool(np.any(id_array[1:] == id_array[:-1])):
                raise ValidationFailed(
                    "the persisted ids contain duplicates", code="duplicate_id", param="ids"
                )
            matrix = np.take(matrix, order, axis=0)
            label_array = None if label_array is None else label_array[order]
            locators = None if locators is None else locators[order]
        index = cls(d, capacity=max(0, int(spare_rows)), codec=codec, executor=executor)
        index.row_store = row_store
        if n:  # encoded by the index's codec (for float32 the codes are the matrix itself)
            part = Part.build(
                id_array,
                matrix,
                index._codec,
                labels=label_array,
                rows=row_store,
                locators=locators,
            )
            index._snap = replace(index._snap, parts=(part,))
        return index

    @classmethod
    def from_parts(
        cls,
        dimension: int,
        parts: Sequence[Part],
        *,
        spare_rows: int = 0,
        codec: str = "float32",
        executor: Executor | None = None,
    ) -> VectorIndex:
        """An index over frozen parts (e.g. mapped segment files) and an empty tail."""
        index = cls(dimension, capacity=max(0, int(spare_rows)), codec=codec, executor=executor)
        for part in parts:
            if part.vectors.ndim != 2 or part.vectors.shape != (part.rows, dimension):
                raise ValidationFailed(
                    "a part's rows do not match its ids and the dimension",
                    code="dimension_mismatch",
                    param="vectors",
                )
        index._snap = replace(index._snap, parts=tuple(p for p in parts if p.rows))
        return index

    def _install(self, buffer: Matrix, ids_buffer: IdArray, n: int) -> None:
        """Publish the first ``n`` rows of ``buffer``/``ids_buffer`` as the tail."""
        row_of = dict(zip(ids_buffer[:n].tolist(), range(n), strict=True))
        if len(row_of) != n:
            raise ValidationFailed(
                "the persisted ids contain duplicates", code="duplicate_id", param="ids"
            )
        self._ids_buffer = ids_buffer
        self._snap = _Snapshot((), self._tail(buffer, n, _EMPTY_IDS), buffer, row_of)

    def _tail(self, buffer: Matrix, n: int, dead: IdArray) -> Part:
        """The tail part over the first ``n`` rows of ``buffer`` and the tail's id and
        label-code buffers (call with the writer lock held, or while constructing)."""
        rows = buffer[:n]
        return Part(
            self._ids_buffer[:n],
            rows,
            _NO_PARAMS,
            rows,
            dead,
            _FLOAT32,
            label_codes=self._codes_buffer[:n],
            label_values=self._labels.values,
        )

    # -- reading -----------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The length of every vector in this index."""
        return self._dimension

    @property
    def codec(self) -> str:
        """The name of the codec new frozen parts use."""
        return self._codec.name

    def __len__(self) -> int:
        return self._snap.live

    @property
    def nbytes(self) -> int:
        """Bytes held by the parts (mapped or not) and the tail buffers (capacity included)."""
        snap = self._snap
        tail = snap.buffer.nbytes + self._ids_buffer.nbytes + self._codes_buffer.nbytes
        return int(sum(p.nbytes for p in snap.parts) + tail)

    @property
    def resident_bytes(self) -> int:
        """Bytes this index keeps in memory while it is searched (what a memory budget
        charges it): its RAM parts, the scanned pages of its mapped ones
        (``Part.resident_bytes``), the tail's buffers (capacity included: rows, ids,
        label codes) and its id-to-row map, and the objects themselves."""
        snap = self._snap
        parts = sum(p.resident_bytes for p in snap.parts)
        tail = snap.buffer.nbytes + self._ids_buffer.nbytes + snap.tail.dead.nbytes
        tail += self._codes_buffer.nbytes + self._labels.values.nbytes
        return int(INDEX_OVERHEAD_BYTES + parts + tail + ROW_MAP_BYTES * len(snap.row_of))

    @property
    def mapped_files(self) -> int:
        """How many segment files this index's parts map (each holds a mapping and,
        while mapped, an open file)."""
        return sum(1 for p in self._snap.parts if p.mapped)

    def parts(self) -> tuple[Part, ...]:
        """The frozen parts of the current snapshot (the tail excluded)."""
        return self._snap.parts

    @property
    def tail_rows(self) -> int:
        """Rows in the in-RAM tail (dead ones included)."""
        return self._snap.tail.rows

    def ids(self) -> IdArray:
        """A copy of the live ids, part by part."""
        snap = self._snap
        pieces = [p.live_ids() for p in snap.all_parts()]
        return np.concatenate(pieces).astype(np.int64, copy=True)

    def contains(self, id: int) -> bool:
        """Whether ``id`` is in the index."""
        return self._locate(self._snap, int(id)) is not None

    def get(self, id: int) -> npt.NDArray[np.float32] | None:
        """A copy of the stored (normalised) vector for ``id``, or ``None``."""
        found = self._locate(self._snap, int(id))
        if found is None:
            return None
        rows, row = found
        return np.array(rows[row], dtype=np.float32)

    @staticmethod
    def _locate(snap: _Snapshot, id: int) -> tuple[Matrix | StoredRows, int] | None:
        # The map may already hold tail rows appended after this snapshot; those rows
        # are fully written before the map learns of them, so reading them is safe.
        row = snap.row_of.get(id)
        if row is not None:
            return snap.buffer, row
        wanted = np.array([id], dtype=np.int64)
        for part in snap.parts:
            hit, rows = part.find(wanted)
            if hit[0]:
                return part.vectors, int(rows[0])
        return None

    def to_buffers(self) -> tuple[bytes, bytes]:
        """The live rows as ``(ids, vectors)``: int64 and float32, little-endian."""
        pieces = [p.live_rows() for p in self._snap.all_parts()]
        ids = np.concatenate([p[0] for p in pieces])
        matrix = np.concatenate([p[1] for p in pieces])
        return (
            ids.astype(_ID_DTYPE, copy=False).tobytes(),
            matrix.astype(_VECTOR_DTYPE, copy=False).tobytes(),
        )

    def search(
        self,
        query: npt.ArrayLike,
        k: int,
        *,
        min_score: float | None = None,
        allow: LabelFilter | None = None,
    ) -> tuple[IdArray, ScoreArray]:
        """The ``k`` ids most cosine-similar to ``query``, best first.

        Ties are ordered by ascending id. Returns fewer than ``k`` when the index is
        smaller or ``min_score`` filters some out, and nothing for a zero query.

        :param allow: a filter on row labels: only rows whose label it lets through
            are ranked, before the top ``k`` is taken (so a selective filter still
            returns ``k`` rows when that many match). A part whose labels it lets
            through in part is searched among those rows only: gathered and scored
            when they are few (``GATHER_FRACTION``), else scanned with the other rows'
            scores masked. Results stay exact either way.
        """
        _check_k(k)
        snap = self._snap
        q = self._prepare(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
        ids, scores = self._search_snapshot(snap, q, k, allow)
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _search_snapshot(
        self, snap: _Snapshot, q: Matrix, k: int, allow: LabelFilter | None = None
    ) -> tuple[IdArray, ScoreArray]:
        live = snap.live
        if live == 0 or not q.any():
            return _empty_result()
        k = min(k, live)
        found_ids: list[IdArray] = []
        found_scores: list[ScoreArray] = []
        for part in snap.all_parts():
            if part.live == 0:
                continue
            allowed = True if allow is None else part.allowed_rows(allow)
            if allowed is False:
                continue
            rows, scores = self._search_part(part, allowed, q, k)
            found_ids.append(part.ids[rows])
            found_scores.append(scores)
        if not found_ids:
            return _empty_result()
        if len(found_ids) == 1:
            return kernels.order(found_ids[0], found_scores[0], k)
        return kernels.order(np.concatenate(found_ids), np.concatenate(found_scores), k)

    def _search_part(
        self, part: Part, allowed: npt.NDArray[np.bool_] | bool, q: Matrix, k: int
    ) -> tuple[IdArray, ScoreArray]:
        """Candidates of ``part``: among all its live rows (``allowed`` true), or among
        the rows ``allowed`` marks (a fresh mask, which this may write)."""
        blocked = None
        if allowed is not True:
            assert not isinstance(allowed, bool)  # False: the caller skips the part
            if part.dead.size:
                allowed[part.dead] = False
            count = int(np.count_nonzero(allowed))
            if count == 0:
                return _EMPTY_IDS, np.empty(0, dtype=np.float32)
            if count <= part.rows * GATHER_FRACTION and not isinstance(part.vectors, StoredRows):
                # few rows: score just those, exactly, from the float32 rows (not when a
                # RowStore keeps them: the masked scan of the codes reads back only the
                # candidates the filter lets through, not every row it lets through)
                rows = np.flatnonzero(allowed)
                return kernels.scan_rows(part.vectors, rows, q, k, self._executor)
            blocked = ~allowed
        return kernels.search_part(
            part.codec,
            part.codes,
            part.params,
            part.vectors,
            part.dead,
            q,
            k,
            self._executor,
            blocked=blocked,
        )

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
        triples: list[tuple[IdArray, IdArray, ScoreArray]] = []
        for part in snap.all_parts():
            if part.live == 0:
                continue
            query, rows, scores = kernels.search_part_batch(
                part.codec, part.codes, part.params, part.vectors, part.dead, q, k, self._executor
            )
            triples.append((query, part.ids[rows], scores))
        return kernels.order_batch(
            m,
            k,
            np.concatenate([t[0] for t in triples]),
            np.concatenate([t[1] for t in triples]),
            np.concatenate([t[2] for t in triples]),
        )

    # -- writing -----------------------------------------------------------------

    def add(
        self,
        ids: Sequence[int] | npt.ArrayLike,
        vectors: npt.ArrayLike,
        labels: npt.ArrayLike | None = None,
    ) -> None:
        """Insert rows; refuses zero or non-finite vectors, wrong dimensions, known ids.

        ``labels``: each row's label (its document's number, which filtered searches
        decide on); ``None``: ``NO_LABEL``. The whole batch is validated before
        anything is written.
        """
        new_ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        new_labels = _labels_for(labels, new_ids.shape[0])
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
            for part in snap.parts:
                hit, _ = part.find(new_ids)
                known += new_ids[hit].tolist()
            if known:
                raise ValidationFailed(
                    f"id {known[0]} is already in the index", code="duplicate_id", param="ids"
                )
            tail = snap.tail
            n = tail.rows
            buffer, row_of, parts = snap.buffer, snap.row_of, snap.parts
            epoch = snap.epoch
            if n + m > buffer.shape[0] and n >= SEAL_ROWS and _ascending(tail.ids):
                # seal the full tail where it lies (no copy) and start a new one; a new
                # epoch, so a step planned on the old tail's rows starts again
                parts = (*parts, tail)
                epoch += 1
                n, row_of = 0, {}
                self._ids_buffer = np.empty(0, dtype=np.int64)
                self._codes_buffer = np.zeros(0, dtype=np.int32)
                self._labels = _LabelTable()
                buffer = np.empty((0, self._dimension), dtype=np.float32)
                tail = self._tail(buffer, 0, _EMPTY_IDS)
            if n + m > buffer.shape[0]:
                buffer, self._ids_buffer, self._codes_buffer = _grown(
                    buffer, self._ids_buffer, self._codes_buffer, n, n + m
                )
                row_of = dict(row_of)  # a new buffer gets its own map
            # Rows past ``n`` are invisible to every published snapshot.
            scales.write(rows, buffer[n : n + m])
            self._ids_buffer[n : n + m] = new_ids
            if new_labels is not None:
                self._codes_buffer[n : n + m] = self._labels.codes(new_labels)
            else:
                self._codes_buffer[n : n + m] = 0  # the table's first code: NO_LABEL
            row_of.update(zip(new_ids.tolist(), range(n, n + m), strict=True))
            self._snap = _Snapshot(
                parts, self._tail(buffer, n + m, tail.dead), buffer, row_of, epoch
            )
        self._schedule_if_due()

    def remove(self, ids: Iterable[int] | npt.ArrayLike) -> int:
        """Delete ``ids``; unknown ids are ignored. Returns how many were removed.

        Only marks rows dead: compaction happens later, in the background.
        """
        raw = ids if isinstance(ids, np.ndarray) else list(ids)  # type: ignore[arg-type]
        wanted = np.unique(np.asarray(raw, dtype=np.int64).reshape(-1))
        with self._lock:
            snap = self._snap
            removed = 0
            parts: list[Part] = []
            for part in snap.parts:
                hit, rows = part.find(wanted)
                if hit.any():
                    removed += int(np.count_nonzero(hit))
                    part = part.with_dead(_merged(part.dead, rows[hit]))
                parts.append(part)
            row_of = snap.row_of
            tail_rows = [r for r in (row_of.get(i) for i in wanted.tolist()) if r is not None]
            for r in tail_rows:
                # Old snapshots share this map: for them the id now reads as gone,
                # which is the newer truth; their search still sees the row alive.
                del row_of[int(self._ids_buffer[r])]
            removed += len(tail_rows)
            if removed == 0:
                return 0
            tail = snap.tail
            if tail_rows:
                tail = tail.with_dead(_merged(tail.dead, np.sort(np.asarray(tail_rows, np.int64))))
            self._snap = _Snapshot(tuple(parts), tail, snap.buffer, row_of, snap.epoch)
        self._schedule_if_due()
        return removed

    # -- maintenance -------------------------------------------------------------

    def set_maintenance(self, run: Callable[[VectorIndex], None] | None) -> None:
        """Who runs maintenance when it falls due: ``run(self)`` is called (it should
        hand the work to another thread and return; ``settle`` runs the steps due),
        or nobody (``None``: ``maintain()`` by hand)."""
        self._maintenance = run

    def maintenance_due(self) -> bool:
        """Whether a maintenance step has work to do."""
        return self._plan(self._snap, force=False) is not None

    def plan_maintenance(self, *, force: bool = False) -> MaintenancePlan | None:
        """The next maintenance step on the current snapshot, or ``None`` if none is due.

        With ``force`` (and ``persisted``) there is always a step: the tail, however
        small, is sealed, so that a new manifest can record the current state.
        """
        with self._lock:
            self._scheduled = False
            return self._plan(self._snap, force=force)

    def _plan(self, snap: _Snapshot, *, force: bool) -> MaintenancePlan | None:
        chosen = [p for p in snap.parts if p.dead.shape[0] * COMPACT_FRACTION > p.rows]
        if self.persisted:  # parts in RAM (a load from the store) become segment files
            chosen += [p for p in snap.parts if p.name is None and all(p is not c for c in chosen)]
        tail = snap.tail
        seal = tail.dead.shape[0] * COMPACT_FRACTION > tail.rows
        if self.persisted:
            seal = seal or tail.live >= self.merge_rows or (force and tail.rows > 0)
        elif not self._codec.exact:
            seal = seal or tail.live >= self.merge_rows
        if len(snap.parts) + (1 if seal else 0) > MAX_PARTS:
            rest = [p for p in snap.parts if all(p is not c for c in chosen)]
            rest.sort(key=lambda p: p.rows)
            chosen += rest[: len(snap.parts) - MAX_PARTS // 2 + 1]
        if not chosen and not seal and not (force and self.persisted):
            return None
        if self.persisted and tail.rows:
            seal = True  # a manifest describes whole snapshots: the tail goes with it
        return MaintenancePlan(snap, tuple(chosen), tail.rows if seal else 0)

    def build_part(self, plan: MaintenancePlan) -> Part:
        """The RAM part holding the live rows ``plan`` rewrites."""
        ids, rows = plan.gather()
        vectors = rows.view
        if vectors is None:  # rows a RowStore keeps are read back here, a piece at a time
            vectors = rows.fill(0, rows.rows, np.empty((rows.rows, rows.dimension), np.float32))
        labels = rows.label_codes()
        return Part.build(ids, vectors, self._codec, labels=labels, rows=self.row_store)

    def apply(self, plan: MaintenancePlan, new_parts: Sequence[Part]) -> bool:
        """Swap ``plan``'s parts (and sealed tail rows) for ``new_parts``; whether it did.

        ``new_parts`` hold the live rows the plan's snapshot saw. Rows deleted since
        are marked dead in them; rows added since stay in the tail. A plan overtaken
        by another step (its parts or tail rows already rewritten) changes nothing.

        The deletes made while the parts were built (possibly many) are carried over
        before the writer lock is taken; under it only those of the last moments are
        (usually none), so a concurrent ``add`` or ``remove`` never waits for the rest.
        """
        seen = plan.snapshot
        early = self._snap
        if self._still_valid(plan, early):
            new_parts = self._carry_deletes(plan, seen, early, new_parts)
            seen = early
        with self._lock:
            snap = self._snap
            if not self._still_valid(plan, snap):
                return False
            new_parts = self._carry_deletes(plan, seen, snap, new_parts)
            parts = [p for p in snap.parts if not any(p.same_rows(q) for q in plan.parts)]
            tail = snap.tail
            buffer, row_of = snap.buffer, snap.row_of
            cut = plan.tail_rows
            if cut:
                rest = tail.rows - cut
                capacity = max(rest + max(_MIN_CAPACITY, rest // 2), buffer.shape[0] - cut)
                buffer = np.empty((capacity, self._dimension), dtype=np.float32)
                ids_buffer = np.empty(capacity, dtype=np.int64)
                codes_buffer = np.zeros(capacity, dtype=np.int32)
                buffer[:rest] = tail.vectors[cut:]
                ids_buffer[:rest] = tail.ids[cut:]
                codes_buffer[:rest] = self._codes_buffer[cut : tail.rows]
                # the codes keep their meaning: the label table stays as it is
                self._ids_buffer, self._codes_buffer = ids_buffer, codes_buffer
                dead = tail.dead[tail.dead >= cut] - cut
                tail = self._tail(buffer, rest, dead)
                alive = np.ones(rest, dtype=bool)
                alive[dead] = False
                live_rows = np.flatnonzero(alive)
                row_of = dict(zip(ids_buffer[live_rows].tolist(), live_rows.tolist(), strict=True))
            parts += [part for part in new_parts if part.rows]
            epoch = snap.epoch + (1 if cut else 0)
            self._snap = _Snapshot(tuple(parts), tail, buffer, row_of, epoch)
            return True

    @staticmethod
    def _still_valid(plan: MaintenancePlan, snap: _Snapshot) -> bool:
        """Whether ``snap`` still holds the parts and tail rows ``plan`` rewrites."""
        if plan.tail_rows and snap.epoch != plan.snapshot.epoch:
            return False
        return all(any(p.same_rows(q) for q in snap.parts) for p in plan.parts)

    @staticmethod
    def _carry_deletes(
        plan: MaintenancePlan, before: _Snapshot, now: _Snapshot, new_parts: Sequence[Part]
    ) -> list[Part]:
        """``new_parts`` with the rows deleted between snapshots ``before`` and ``now``
        (both still valid for ``plan``) among the rows ``plan`` rewrites marked dead."""
        gone: list[IdArray] = []
        for part in now.parts:
            if not any(p.same_rows(part) for p in plan.parts):
                continue
            old = next(p for p in before.parts if p.same_rows(part))
            if part.dead is not old.dead and part.dead.shape != old.dead.shape:
                gone.append(part.ids[_added(old.dead, part.dead)])
        cut = plan.tail_rows
        if cut and now.tail.dead is not before.tail.dead:
            was = before.tail.dead[before.tail.dead < cut]
            is_ = now.tail.dead[now.tail.dead < cut]
            if is_.shape != was.shape:
                gone.append(now.tail.ids[_added(was, is_)])
        if not gone:
            return list(new_parts)
        dead_ids = np.unique(np.concatenate(gone))
        out: list[Part] = []
        for part in new_parts:
            if part.rows:
                hit, rows = part.find(dead_ids)
                if hit.any():
                    part = part.with_dead(np.union1d(part.dead, rows[hit]))
            out.append(part)
        return out

    def maintain(self) -> bool:
        """Run one maintenance step in RAM now (in the calling thread); whether one ran."""
        with self._maintaining:
            plan = self.plan_maintenance()
            if plan is None:
                return False
            return self.apply(plan, [self.build_part(plan)])

    def _schedule_if_due(self) -> None:
        run = self._maintenance
        if run is None or self._scheduled or self._plan(self._snap, force=False) is None:
            return
        self._scheduled = True
        run(self)

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


def settle(step: Callable[[], bool], *, what: str, stopping: Callable[[], bool] = bool) -> int:
    """Call ``step()`` while it says another step is due, at most ``MAX_STEPS`` times,
    and not once ``stopping()`` is true; how many ran.

    Each maintenance step leaves fewer parts or fewer dead rows, so a handful settle
    anything; one that never settles is logged as ``what`` instead of spun on.
    """
    steps = 0
    while not stopping():
        steps += 1
        if not step():
            break
        if steps >= MAX_STEPS:
            _log.warning("%s still due after %d steps", what, steps)
            break
    return steps


def _submit_to(executor: Executor) -> Callable[[VectorIndex], None]:
    """Maintenance for indexes given an executor: their due steps run on its threads."""

    def run(index: VectorIndex) -> None:
        try:
            executor.submit(_maintain_quietly, index)
        except RuntimeError:  # the executor is shutting down: due again at the next write
            index._scheduled = False

    return run


def _maintain_quietly(index: VectorIndex) -> None:
    try:
        settle(index.maintain, what="index maintenance")
    except Exception:  # a failed step leaves the index as it was
        _log.exception("index maintenance failed")


class _LabelTable:
    """The tail's distinct labels, append-only, and the code of each (its position).

    Code 0 is ``NO_LABEL``, so a zeroed code buffer means "unlabelled". Written under
    the index's writer lock; ``values`` is replaced (never changed) when it grows, so
    a published snapshot's array stays valid for the codes it can see.
    """

    def __init__(self) -> None:
        self._code: dict[int, int] = {NO_LABEL: 0}
        self.values: IdArray = _UNLABELLED

    def codes(self, labels: IdArray) -> LabelCodes:
        """The codes of ``labels`` (new labels are given the next codes)."""
        first = int(labels[0])
        if bool((labels == first).all()):  # one document's rows: the usual batch
            return np.full(labels.shape[0], self._code_of([first])[0], dtype=np.int32)
        distinct, inverse = np.unique(labels, return_inverse=True)
        codes = np.asarray(self._code_of(distinct.tolist()), dtype=np.int32)
        return codes[inverse]

    def _code_of(self, labels: list[int]) -> list[int]:
        table = self._code
        fresh = [label for label in labels if label not in table]
        if fresh:
            for label in fresh:
                table[label] = len(table)
            self.values = np.fromiter(table, dtype=np.int64, count=len(table))
        return [table[label] for label in labels]


def _labels_for(labels: npt.ArrayLike | None, rows: int) -> IdArray | None:
    """``labels`` as int64, one per row (``ValidationFailed`` otherwise), or ``None``."""
    if labels is None:
        return None
    array = np.asarray(labels, dtype=np.int64).reshape(-1)
    if array.shape[0] != rows:
        raise ValidationFailed(
            f"{array.shape[0]} labels for {rows} rows", code="dimension_mismatch", param="labels"
        )
    return array


def _merged(dead: IdArray, rows: IdArray) -> IdArray:
    """Sorted ``dead`` with the sorted, new (disjoint) ``rows`` inserted: one O(n) copy.

    (``np.union1d`` would sort or hash everything again: milliseconds per delete once
    a large part holds many tombstones.)
    """
    return np.insert(dead, np.searchsorted(dead, rows), rows)


def _added(old: IdArray, new: IdArray) -> IdArray:
    """The entries of sorted ``new`` not in sorted ``old`` (``old`` is a subset of ``new``:
    dead rows only ever get added), in O(n) instead of ``setdiff1d``'s sorts."""
    keep = np.ones(new.shape[0], dtype=bool)
    keep[np.searchsorted(new, old)] = False
    return new[keep]


def _live_positions(rows: int, dead: IdArray) -> IdArray:
    """The positions in ``range(rows)`` that are not in ``dead``, ascending."""
    keep = np.ones(rows, dtype=bool)
    keep[dead] = False
    return np.flatnonzero(keep)


def _ascending(ids: IdArray) -> bool:
    return ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))


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


def _grown(
    buffer: Matrix, ids_buffer: IdArray, codes_buffer: LabelCodes, n: int, needed: int
) -> tuple[Matrix, IdArray, LabelCodes]:
    """New buffers of geometrically larger capacity holding the first ``n`` rows."""
    capacity = max(needed, int(buffer.shape[0] * _GROWTH), _MIN_CAPACITY)
    grown = np.empty((capacity, buffer.shape[1]), dtype=np.float32)
    grown_ids = np.empty(capacity, dtype=np.int64)
    grown_codes = np.zeros(capacity, dtype=np.int32)
    grown[:n] = buffer[:n]
    grown_ids[:n] = ids_buffer[:n]
    grown_codes[:n] = codes_buffer[:n]
    return grown, grown_ids, grown_codes
