"""Filters over document metadata: which of a workspace's documents a filter selects.

A filter is evaluated over the workspace's *documents*, never over its chunks: each
process keeps a ``DocumentTable`` per workspace (every document's metadata, one column
per key), brought up to date from the store's change log like the vector index, so a
metadata change made by any process or node is seen by the next search anywhere. The
verdicts per document then become the rows a search may return: the vector index
gathers them by each row's label (its document's ``seq``), the keyword index likewise,
and pgvector is given the documents' ids.

Semantics (documented in docs/guide.md#filters):

- ``eq`` compares like with like: a string equals only that string, a number only the
  same number (``1`` and ``1.0`` are equal), a boolean only that boolean. Values of
  another type (``"1"`` against ``1``, ``true`` against ``1``) are not equal.
- ``gt``/``gte``/``lt``/``lte`` compare numbers with numbers and strings with strings
  (by Unicode code point, so ISO dates order by time); a document whose value is of
  the other type, or a boolean, does not match.
- ``in`` matches when ``eq`` matches any listed value.
- A document without the key matches no comparison but the negations.
- ``ne`` and ``nin`` are exactly ``not eq`` and ``not in``: they match documents
  without the key and documents whose value is of another type. So every filter and
  its negation split the documents in two, and De Morgan's laws hold.
- Rows of no document (``NO_LABEL``) are documents without metadata.
- Numbers compare exactly. New values are at most ±2**53 in magnitude when an integer
  (``schema.MAX_EXACT_INTEGER``), which float64 holds exactly; a larger integer stored by
  an older version (or in an older agent's filter) is compared as a Python number.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import TypeAdapter, ValidationError

from agentcore._memory_budget import KeyedLocks, Residency, ResidencyStats
from agentcore.errors import check_unicode, invalid_fields
from agentcore.knowledge.vectors import NO_LABEL
from agentcore.schema import (
    MAX_EXACT_INTEGER,
    BoundedFilter,
    CompoundFilter,
    DocumentAccess,
    EndUser,
    EqualityFilter,
    Filter,
    ListFilter,
    Metadata,
    RangeFilter,
)
from agentcore.storage.records import DocumentRow

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore

Mask = npt.NDArray[np.bool_]
Labels = npt.NDArray[np.int64]

_MISSING, _STRING, _NUMBER, _BOOLEAN, _LARGE = 0, 1, 2, 3, 4  # _LARGE: see _Column.large
# what a document costs a table besides its columns: its id, ordinal and metadata dict
DOCUMENT_ENTRY_BYTES = 512
_OBJECT_BYTES = 50  # a small str or number object
_FILTER = TypeAdapter(BoundedFilter)
_METADATA = TypeAdapter(Metadata)
_USER = TypeAdapter(EndUser)
_ACCESS = TypeAdapter(DocumentAccess)
T = TypeVar("T")


def _checked(adapter: TypeAdapter[T], value: Any, param: str) -> T:
    """``value`` validated by ``adapter``, or a 422 naming the offending part under
    ``param`` (a dotted path)."""
    check_unicode(value, param=param)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise invalid_fields(exc, prefix=tuple(param.split("."))) from None


def check_filter(
    value: Filter | Mapping[str, Any] | None, *, param: str = "filter"
) -> Filter | None:
    """``value`` as a ``Filter`` (a dict in OpenAI's shape, or a model), or a 422
    naming the offending part, e.g. ``filter.filters.0.value``."""
    return None if value is None else _checked(_FILTER, value, param)


def check_user(value: EndUser | Mapping[str, Any] | None, *, param: str = "user") -> EndUser | None:
    """``value`` as the ``EndUser`` a request acts for (a model or ``{id, groups}``), or
    a 422 naming the offending part (``user.groups.0``); ``None`` is no end user."""
    if value is None or isinstance(value, EndUser):
        return value
    return _checked(_USER, value, param)


def check_access(
    value: DocumentAccess | Mapping[str, Any] | None, *, param: str = "access"
) -> DocumentAccess | None:
    """``value`` as a document's access list (a model or ``{users, groups}``), or a 422
    naming the offending part (``access.users.3``); ``None`` is no list (everyone)."""
    if value is None or isinstance(value, DocumentAccess):
        return value
    return _checked(_ACCESS, value, param)


def check_metadata(value: Mapping[str, Any] | None) -> dict[str, str | int | float | bool]:
    """``value`` as document metadata, or a 422 naming the offending key
    (``metadata.<key>``); ``None`` is no metadata."""
    return {} if value is None else _checked(_METADATA, value, "metadata")


def _fits(value: int | float) -> bool:
    """Whether float64 holds the number ``value`` exactly (every float; an integer within
    ±2**53)."""
    return not isinstance(value, int) or -MAX_EXACT_INTEGER <= value <= MAX_EXACT_INTEGER


class _Column:
    """One metadata key over a table's documents: each one's kind and value."""

    def __init__(self, size: int) -> None:
        self.kinds = np.zeros(size, dtype=np.int8)
        self.numbers = np.zeros(size, dtype=np.float64)  # numbers, and booleans as 0/1
        self.strings = np.full(size, "", dtype=object)
        # integers float64 cannot hold exactly, by ordinal (kind _LARGE): only older
        # versions stored them, so they are few, and compared one by one
        self.large: dict[int, int] = {}

    def grow(self, size: int) -> None:
        extra = size - self.kinds.shape[0]
        if extra > 0:
            self.kinds = np.concatenate((self.kinds, np.zeros(extra, dtype=np.int8)))
            self.numbers = np.concatenate((self.numbers, np.zeros(extra, dtype=np.float64)))
            self.strings = np.concatenate((self.strings, np.full(extra, "", dtype=object)))

    def set(self, at: int, value: Any) -> None:
        self.large.pop(at, None)
        if value is None:
            self.kinds[at], self.numbers[at], self.strings[at] = _MISSING, 0.0, ""
        elif isinstance(value, bool):
            self.kinds[at], self.numbers[at], self.strings[at] = _BOOLEAN, float(value), ""
        elif isinstance(value, int | float) and not _fits(value):
            self.kinds[at], self.numbers[at], self.strings[at] = _LARGE, 0.0, ""
            self.large[at] = int(value)
        elif isinstance(value, int | float):
            self.kinds[at], self.numbers[at], self.strings[at] = _NUMBER, float(value), ""
        else:
            self.kinds[at], self.numbers[at], self.strings[at] = _STRING, 0.0, str(value)

    def equal(self, value: Any, size: int) -> Mask:
        """Which documents hold exactly ``value`` (like with like)."""
        kinds = self.kinds[:size]
        found: Mask
        if isinstance(value, bool):
            found = (kinds == _BOOLEAN) & (self.numbers[:size] == float(value))
        elif isinstance(value, int | float):
            found = self._compare("eq", value, size)
        else:
            found = (kinds == _STRING) & (self.strings[:size] == value)
        return found

    def among(self, values: Sequence[Any], size: int) -> Mask:
        """Which documents hold one of ``values``."""
        kinds = self.kinds[:size]
        found = np.zeros(size, dtype=bool)
        strings = [v for v in values if isinstance(v, str)]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        booleans = [float(v) for v in values if isinstance(v, bool)]
        if strings:
            found |= (kinds == _STRING) & np.isin(self.strings[:size], strings)
        if numbers:
            exact = [float(v) for v in numbers if _fits(v)]
            found |= (kinds == _NUMBER) & np.isin(self.numbers[:size], exact)
            for value in numbers:
                if not _fits(value):  # an older agent's filter
                    found |= self._compare("eq", value, size)
            listed = set(numbers)  # Python compares (and hashes) int and float exactly
            for at, held in self.large.items():
                if at < size and held in listed:
                    found[at] = True
        if booleans:
            found |= (kinds == _BOOLEAN) & np.isin(self.numbers[:size], booleans)
        return found

    def ordered(self, op: str, value: str | int | float, size: int) -> Mask:
        """Which documents hold a value of ``value``'s kind that compares ``op`` to it."""
        if isinstance(value, str):
            compare: Callable[[Any, Any], Any] = _ORDER[op]
            kinds = self.kinds[:size] == _STRING
            result = np.zeros(size, dtype=bool)
            # object arrays compare element by element: only the strings are compared
            result[kinds] = compare(self.strings[:size][kinds], value).astype(bool)
            return result
        return self._compare(op, value, size)

    def _compare(self, op: str, value: int | float, size: int) -> Mask:
        """Which documents hold a number that compares ``op`` (``eq``, ``gt``, ...) to the
        number ``value``, exactly."""
        compare = _ORDER[op]
        numbers = self.numbers[:size]
        if _fits(value):
            found: Mask = compare(numbers, float(value))
        else:  # an older agent's filter: Python compares int and float exactly
            found = compare(numbers.astype(object), value).astype(bool)
        found &= self.kinds[:size] == _NUMBER
        for at, held in self.large.items():
            if at < size:
                found[at] = _EXACT[op](held, value)
        return found


_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "eq": np.equal,
    "gt": np.greater,
    "gte": np.greater_equal,
    "lt": np.less,
    "lte": np.less_equal,
}
# the same over Python numbers, which numpy cannot convert when they exceed float64
_EXACT: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


def _payload_of(metadata: Mapping[str, Any]) -> int:
    """About what one document's metadata keys and values hold beyond its dict: their
    text and a Python object each."""
    return sum(len(key) + len(str(value)) + 2 * _OBJECT_BYTES for key, value in metadata.items())


class DocumentTable:
    """One workspace's documents as filters read them, at a store version.

    Documents get dense ordinals in the order the table learns of them; each metadata
    key is a ``_Column`` over them, so a comparison is one vectorised operation over
    the workspace's documents. Thread-safe: ``apply`` and the readers take its lock
    (both are short: a catch-up touches only the documents written since).
    """

    def __init__(self, version: int = 0) -> None:
        self.version = version
        self._lock = threading.Lock()
        self._ordinal: dict[int, int] = {}  # seq -> ordinal
        self._ids: list[str] = []
        self._metadata: list[Mapping[str, Any]] = []
        self._columns: dict[str, _Column] = {}
        self._capacity = 0
        self._sorted: tuple[Labels, npt.NDArray[np.int64]] | None = None
        self._payload = 0  # the metadata's keys and values, about (see _payload_of)
        # who may read each document: the ordinals of those without a list (everyone's),
        # and each principal's documents ("u:" + a user's id, "g:" + a group's)
        self._open = np.ones(0, dtype=bool)
        self._readers: dict[str, set[int]] = {}
        self._lists: dict[int, tuple[str, ...]] = {}  # ordinal -> its principals

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def nbytes(self) -> int:
        """About the bytes the table holds: its columns' arrays, each document's id,
        ordinal and metadata dict at ``DOCUMENT_ENTRY_BYTES``, and its metadata's keys and
        values (Python objects)."""
        columns = sum(
            c.kinds.nbytes + c.numbers.nbytes + c.strings.nbytes for c in self._columns.values()
        )
        readers = sum(
            len(key) + _OBJECT_BYTES + 16 * len(held) for key, held in self._readers.items()
        )
        return columns + len(self._ids) * DOCUMENT_ENTRY_BYTES + self._payload + readers

    def apply(self, rows: Iterable[DocumentRow], version: int) -> None:
        """Learn these documents (new ones, or new metadata of known ones); the table
        is then at ``version``."""
        with self._lock:
            for row in rows:
                at = self._ordinal.get(row.seq)
                if at is None:
                    at = len(self._ids)
                    self._ordinal[row.seq] = at
                    self._ids.append(row.id)
                    self._metadata.append({})
                    self._sorted = None
                    if at >= self._capacity:
                        self._capacity = max(64, 2 * self._capacity, at + 1)
                        for column in self._columns.values():
                            column.grow(self._capacity)
                        grown = np.ones(self._capacity, dtype=bool)
                        grown[: self._open.shape[0]] = self._open
                        self._open = grown
                self._set_access(at, row.access)
                old = self._metadata[at]
                for key in old.keys() - row.metadata.keys():
                    self._columns[key].set(at, None)
                for key, value in row.metadata.items():
                    if key not in self._columns:
                        self._columns[key] = _Column(self._capacity)
                    self._columns[key].set(at, value)
                self._payload += _payload_of(row.metadata) - _payload_of(old)
                self._metadata[at] = dict(row.metadata)
            self.version = max(self.version, version)

    def _set_access(self, at: int, access: Mapping[str, Sequence[str]] | None) -> None:
        for principal in self._lists.pop(at, ()):
            held = self._readers[principal]
            held.discard(at)
            if not held:
                del self._readers[principal]
        self._open[at] = access is None
        if access is None:
            return
        principals = tuple(
            [f"u:{user}" for user in access.get("users", ())]
            + [f"g:{group}" for group in access.get("groups", ())]
        )
        self._lists[at] = principals
        for principal in principals:
            self._readers.setdefault(principal, set()).add(at)

    def readable(self, reader: EndUser, size: int | None = None) -> Mask:
        """Which documents (by ordinal) ``reader`` may read: those without an access
        list, and those whose list names the user or one of their groups."""
        with self._lock:
            return self._readable(reader, len(self._ids) if size is None else size)

    def _readable(self, reader: EndUser, size: int) -> Mask:
        found: Mask = self._open[:size].copy()
        for principal in [f"u:{reader.id}", *(f"g:{group}" for group in reader.groups)]:
            held = self._readers.get(principal)
            if held:
                found[np.fromiter(held, dtype=np.int64, count=len(held))] = True
        return found

    def select(self, spec: Filter) -> Mask:
        """Which documents (by ordinal) ``spec`` selects."""
        with self._lock:
            return self._select(spec, len(self._ids))

    def _select(self, spec: Filter, size: int) -> Mask:
        if isinstance(spec, CompoundFilter):
            parts = [self._select(inner, size) for inner in spec.filters]
            joined = np.logical_and if spec.type == "and" else np.logical_or
            return joined.reduce(parts) if len(parts) > 1 else parts[0]
        column = self._columns.get(spec.key)
        if isinstance(spec, EqualityFilter):
            hit = column.equal(spec.value, size) if column else np.zeros(size, dtype=bool)
            return ~hit if spec.type == "ne" else hit
        if isinstance(spec, ListFilter):
            hit = column.among(spec.value, size) if column else np.zeros(size, dtype=bool)
            return ~hit if spec.type == "nin" else hit
        assert isinstance(spec, RangeFilter)
        if column is None:
            return np.zeros(size, dtype=bool)
        return column.ordered(spec.type, spec.value, size)

    def selection(self, spec: Filter | None, reader: EndUser | None = None) -> Selection:
        """What ``spec`` (``None``: every document) lets searches see, among what
        ``reader`` (``None``: no end user) may read: documents by label, and their ids."""
        with self._lock:
            size = len(self._ids)
            chosen = np.ones(size, dtype=bool) if spec is None else self._select(spec, size)
            if reader is not None:
                chosen &= self._readable(reader, size)
            if self._sorted is None:
                seqs = np.fromiter(self._ordinal, dtype=np.int64, count=size)
                order = np.argsort(seqs)
                self._sorted = (seqs[order], order.astype(np.int64))
            sorted_seqs, ordinals = self._sorted
            ids = self._ids  # only appended to: the first ``size`` stay as they are
        # a row of no document: a document without metadata, which everyone may read
        unknown = True if spec is None else bool(_NOTHING.select(spec)[0])
        return Selection(chosen, sorted_seqs, ordinals, unknown, ids)


class Selection:
    """The documents a filter selects: as a ``LabelFilter`` over row labels (document
    seqs) for the indexes, and as document ids for a store that searches itself.

    :param chosen: the verdict per document ordinal.
    :param seqs: the table's seqs, sorted; ``ordinals`` their ordinals.
    :param unknown: the verdict for a label the table does not know (a row of no
        document): a document without metadata.
    :param ids: the table's document ids by ordinal (the selected ones are listed in
        ``document_ids`` only when a store asks for them).
    """

    def __init__(
        self,
        chosen: Mask,
        seqs: Labels,
        ordinals: npt.NDArray[np.int64],
        unknown: bool,
        ids: Sequence[str],
    ) -> None:
        self._chosen = chosen
        self._seqs = seqs
        self._ordinals = ordinals
        self._unknown = unknown
        self._ids = ids

    @functools.cached_property
    def document_ids(self) -> list[str]:
        """The selected documents' ids (for a store that searches itself: pgvector)."""
        return [self._ids[i] for i in np.flatnonzero(self._chosen).tolist()]

    def __call__(self, labels: Labels) -> Mask:
        """The verdict for each of ``labels`` (distinct document seqs)."""
        out = np.full(labels.shape[0], self._unknown, dtype=bool)
        if not self._seqs.size:
            return out
        at = np.minimum(np.searchsorted(self._seqs, labels), self._seqs.shape[0] - 1)
        known = self._seqs[at] == labels
        out[known] = self._chosen[self._ordinals[at[known]]]
        return out

    @property
    def empty(self) -> bool:
        """Whether no row can pass: no document is selected, nor a row of none."""
        return not self._unknown and not bool(self._chosen.any())


def _document_without_metadata() -> DocumentTable:
    table = DocumentTable()
    table.apply([DocumentRow(NO_LABEL, "", {})], 0)
    return table


_NOTHING = _document_without_metadata()
"""One document without metadata: the verdict for rows of no document."""


class MetadataCache:
    """Each workspace's ``DocumentTable``, kept at the store's version.

    Before a filtered search the table is brought up to the store's version: the
    documents written since its version (``documents_changed``) are applied, so a
    metadata change by any process or node is seen by the next filtered search.
    Deleted documents stay in the table (their rows left the indexes with them);
    their seqs are never used again.

    The tables are charged their ``nbytes`` to ``budget``, a ``Residency`` whose bounds
    they share (the core's: ``index_cache_bytes``, with the indexes); an evicted table
    is read again at the workspace's next filtered search.
    """

    def __init__(self, store: IndexStore, *, budget: Residency[Any, Any] | None = None) -> None:
        self._store = store
        self._tables: Residency[tuple[str, str], DocumentTable] = Residency(share=budget)
        self._locks: KeyedLocks[tuple[str, str]] = KeyedLocks()

    def table(self, organization_id: str, environment: str) -> DocumentTable:
        """The workspace's table, current with the store."""
        key = (organization_id, environment)
        table = self._tables.touch(key)
        state = self._store.knowledge_state(organization_id, environment)
        if table is not None and table.version >= state.version:
            return table
        with self._locks.hold(key):
            table = self._tables.touch(key)
            if table is not None and table.version >= state.version:
                return table
            changes = self._store.documents_changed(
                organization_id, environment, None if table is None else table.version
            )
            if table is None:
                table = DocumentTable()
            table.apply(changes.documents, changes.version)
            self._tables.keep(key, table, table.nbytes)
            return table

    def stats(self) -> ResidencyStats:
        """The tables held now, what they are charged and how many were evicted."""
        return self._tables.stats()

    def selection(
        self,
        organization_id: str,
        environment: str,
        spec: Filter | None,
        reader: EndUser | None = None,
    ) -> Selection:
        """What ``spec`` selects among the workspace's documents now, of those ``reader``
        may read."""
        return self.table(organization_id, environment).selection(spec, reader)
