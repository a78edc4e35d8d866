"""Parts: the immutable blocks of rows an index is made of, their labels, and the
snapshot that publishes them (what every reader of an index sees, as one object)."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors import _kernels as kernels

IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]

ID_DTYPE = np.dtype("<i8")
VECTOR_DTYPE = np.dtype("<f4")
EMPTY_IDS = np.empty(0, dtype=np.int64)
NO_LABEL = -1
"""The label of a row that belongs to no document."""
UNLABELLED = np.array([NO_LABEL], dtype=np.int64)

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
    dtype = VECTOR_DTYPE

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
        vectors = np.ascontiguousarray(vectors, dtype=VECTOR_DTYPE)
        codes, params = codec.encode(vectors)
        kept: Matrix | StoredRows = vectors
        if codec.name == "float32":
            codes = vectors
        elif rows is not None:
            where = rows.locate(ids) if locators is None else locators
            kept = StoredRows(rows, where, vectors.shape[1])
        return cls(
            ids, codes, params, kept, EMPTY_IDS, codec, name, None, label_codes, label_values
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
            return bool(allow(UNLABELLED)[0])
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
class Snapshot:
    """What a reader needs, published as one object; never mutated after publishing."""

    parts: tuple[Part, ...]  # frozen parts
    tail: Part  # the tail's first ``rows`` rows (views of ``buffer``)
    buffer: Matrix  # the whole tail buffer; rows past the tail's may be filled later
    row_of: dict[int, int]  # live tail id -> row in ``buffer``; shared by one buffer's snapshots
    epoch: int = 0  # advances whenever the tail is cut (maintenance) or sealed (add)

    @property
    def live(self) -> int:
        """Rows not deleted, in every part and the tail."""
        return self.tail.live + sum(part.live for part in self.parts)

    def all_parts(self) -> tuple[Part, ...]:
        """The frozen parts, then the tail."""
        return (*self.parts, self.tail)


def labels_for(labels: npt.ArrayLike | None, rows: int) -> IdArray | None:
    """``labels`` as int64, one per row (``ValidationFailed`` otherwise), or ``None``."""
    if labels is None:
        return None
    array = np.asarray(labels, dtype=np.int64).reshape(-1)
    if array.shape[0] != rows:
        raise ValidationFailed(
            f"{array.shape[0]} labels for {rows} rows", code="dimension_mismatch", param="labels"
        )
    return array


def live_positions(rows: int, dead: IdArray) -> IdArray:
    """The positions in ``range(rows)`` that are not in ``dead``, ascending."""
    keep = np.ones(rows, dtype=bool)
    keep[dead] = False
    return np.flatnonzero(keep)


def ascending(ids: IdArray) -> bool:
    """Whether ``ids`` are strictly ascending (a frozen part's order)."""
    return ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))
