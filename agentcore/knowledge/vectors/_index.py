"""The exact cosine vector index: immutable parts plus an in-RAM tail, thread-safe reads.

Layout
    The rows live in *parts*. A frozen ``Part`` never changes after it is made: its ids
    are sorted ascending (lookups are a binary search, so no per-row map is built), its
    rows are kept by a ``kernels.Codec`` (codes and parameters, next to the float32
    rows), and it may be a memory-mapped segment file (``_segments.py``) shared by every
    process on the machine. New rows go to the *tail*: one C-ordered float32 buffer with
    spare capacity (growing geometrically) and an id-to-row map. Rows are L2-normalised
    at insert, so a cosine similarity is a dot product. Deletes only mark rows dead
    (tombstones: a sorted array of row numbers per part); no delete rewrites a row.

Maintenance (never inside ``add`` or ``remove``)
    A part whose dead rows pass an eighth of its rows is compacted, many small parts are
    merged, and (when parts are persisted, or the codec is approximate) the tail is
    sealed into a frozen part. ``plan_maintenance`` picks the parts and snapshots them
    (``_plan.py``);
    the new part is built from that snapshot while readers and writers go on; ``apply``
    swaps it in, carrying over the rows added and deleted meanwhile. It runs on the
    index's owner's threads: an index given an ``executor`` submits its steps there
    when they fall due, ``WorkspaceIndexes`` runs them on its core's maintenance loop (which
    also writes segment files), and an index with neither is maintained only when
    its user calls ``maintain()`` (``set_maintenance`` chooses).

Concurrency (one writer lock, lock-free readers)
    Every reader starts by taking ``self._snap``, one immutable ``Snapshot`` (the frozen
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

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

from agentcore._logs import get_logger
from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors._embedding import RowScales, unit_queries
from agentcore.knowledge.vectors._parts import (
    EMPTY_IDS,
    ID_DTYPE,
    NO_LABEL,
    UNLABELLED,
    VECTOR_DTYPE,
    IdArray,
    LabelCodes,
    LabelFilter,
    Matrix,
    Part,
    RowStore,
    ScoreArray,
    Snapshot,
    StoredRows,
    ascending,
    codec_named,
    labels_for,
)
from agentcore.knowledge.vectors._plan import MaintenancePlan, plan, settle

_MIN_CAPACITY = 256
_GROWTH = 1.5

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

# A filter that lets at most this fraction of a part's rows through is answered by
# gathering those rows and scoring only them; a wider one scans every row and masks
# the scores of the others (measured in benchmarks/filtered_search.py).
GATHER_FRACTION = 0.25
_log = get_logger(__name__)
# Tail buffers already filled (``_loading.from_segments``): rows, ids, label codes, and
# how many rows are filled.
Tail = tuple[Matrix, IdArray, LabelCodes, int]


def check_dimension(dimension: int) -> int:
    """``dimension`` as an int, or a 422 if it is not at least 1."""
    if dimension < 1:
        raise ValidationFailed(
            "dimension must be at least 1", code="invalid_dimension", param="dimension"
        )
    return int(dimension)


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
        parts: Sequence[Part] = (),
        row_store: RowStore | None = None,
        tail: Tail | None = None,
    ) -> None:
        self._dimension = check_dimension(dimension)
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
        self.row_store = row_store
        self.merge_rows = SEAL_ROWS  # tail rows that make sealing the tail due when persisted
        self._labels = _LabelTable()
        if tail is None:
            cap = max(int(capacity), 0)
            tail = (
                np.empty((cap, self._dimension), dtype=np.float32),
                np.empty(cap, dtype=np.int64),
                np.zeros(cap, dtype=np.int32),
                0,
            )
        buffer, self._ids_buffer, n = tail[0], tail[1], tail[3]
        # the tail's label codes (a row's code is written with its id) and their table
        self._codes_buffer: LabelCodes = tail[2]
        row_of = dict(zip(self._ids_buffer[:n].tolist(), range(n), strict=True))
        if len(row_of) != n:
            raise ValidationFailed(
                "the persisted ids contain duplicates", code="duplicate_id", param="ids"
            )
        self._snap = Snapshot(tuple(parts), self._tail(buffer, n, EMPTY_IDS), buffer, row_of)

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
    def _locate(snap: Snapshot, id: int) -> tuple[Matrix | StoredRows, int] | None:
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
            ids.astype(ID_DTYPE, copy=False).tobytes(),
            matrix.astype(VECTOR_DTYPE, copy=False).tobytes(),
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
        q = unit_queries(np.asarray(query, dtype=np.float32).reshape(1, -1), self._dimension)[0]
        ids, scores = self._search_snapshot(snap, q, k, allow)
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _search_snapshot(
        self, snap: Snapshot, q: Matrix, k: int, allow: LabelFilter | None = None
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
                return EMPTY_IDS, np.empty(0, dtype=np.float32)
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
        q = unit_queries(np.asarray(queries, dtype=np.float32), self._dimension)
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
        new_labels = labels_for(labels, new_ids.shape[0])
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
        scales = RowScales(rows)
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
            if n + m > buffer.shape[0] and n >= SEAL_ROWS and ascending(tail.ids):
                # seal the full tail where it lies (no copy) and start a new one; a new
                # epoch, so a step planned on the old tail's rows starts again
                parts = (*parts, tail)
                epoch += 1
                n, row_of = 0, {}
                self._ids_buffer = np.empty(0, dtype=np.int64)
                self._codes_buffer = np.zeros(0, dtype=np.int32)
                self._labels = _LabelTable()
                buffer = np.empty((0, self._dimension), dtype=np.float32)
                tail = self._tail(buffer, 0, EMPTY_IDS)
            if n + m > buffer.shape[0]:
                buffer, self._ids_buffer, self._codes_buffer = grown(
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
            self._snap = Snapshot(
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
            self._snap = Snapshot(tuple(parts), tail, snap.buffer, row_of, snap.epoch)
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

    def _plan(self, snap: Snapshot, *, force: bool) -> MaintenancePlan | None:
        # an approximate codec's tail is sealed once large, so its rows get their codes
        seal = self.persisted or not self._codec.exact
        return plan(
            snap, persisted=self.persisted, seal_rows=self.merge_rows if seal else None, force=force
        )

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
        if plan.still_valid(early):
            new_parts = plan.carry_deletes(seen, early, new_parts)
            seen = early
        with self._lock:
            snap = self._snap
            if not plan.still_valid(snap):
                return False
            new_parts = plan.carry_deletes(seen, snap, new_parts)
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
            self._snap = Snapshot(tuple(parts), tail, buffer, row_of, epoch)
            return True

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
        self.values: IdArray = UNLABELLED

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


def _merged(dead: IdArray, rows: IdArray) -> IdArray:
    """Sorted ``dead`` with the sorted, new (disjoint) ``rows`` inserted: one O(n) copy.

    (``np.union1d`` would sort or hash everything again: milliseconds per delete once
    a large part holds many tombstones.)
    """
    return np.insert(dead, np.searchsorted(dead, rows), rows)


def _empty_triples() -> tuple[IdArray, IdArray, ScoreArray]:
    empty = np.empty(0, dtype=np.int64)
    return empty, empty, np.empty(0, dtype=np.float32)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValidationFailed("k must be a positive integer", code="invalid_top_k", param="top_k")


def grown(
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
