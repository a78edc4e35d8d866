"""Keyword search: BM25 over a workspace's chunks, from an in-memory inverted index.

Why in memory, built from the chunk texts (see docs/decisions.md, "Keyword search"):
the store's per-document sentence counts (``document_terms``) are document-level, and
BM25 needs each chunk's term frequencies and length; a store-side table of them would
add about sixty rows (or one large packed row) to every ingestion commit for a feature
many workspaces never use. So a process builds a workspace's index the first time a
keyword or hybrid search asks for it, with the same stemming tokenizer as the term
counts and the extractive model (``StemTokenizer``: an identifier like "XK-4471-Q" is
the stems ``xk``, ``4471``, ``q``), and keeps it current with the store's change log,
like the vector index: the same rows (the chunks that have a vector), the same labels
(their documents' ``seq``), so filters apply the same way.

Layout
    A *base* of postings in compressed-sparse-row form (per term: the rows holding it
    and how often), built at load and at each merge, plus a *tail* of the rows added
    since, in the same form, rebuilt from its few rows at each add. Deletes only mark
    rows dead; a merge (when the tail passes an eighth of the base, or dead rows an
    eighth of all rows) rebuilds one base without them. Readers take the published
    ``_Snapshot`` (one attribute read); writers serialise on a lock.

Scoring (Okapi BM25, ``k1 = 1.2``, ``b = 0.75``)
    ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` and each row holding ``t`` ``tf``
    times scores ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))``,
    summed over the query's distinct stems. ``N`` and ``avglen`` count live rows; ``df``
    counts dead rows too until the next merge drops them (as Lucene's does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore._logs import get_logger
from agentcore.knowledge.vectors import GATHER_FRACTION, LabelFilter, encode_labels

Tokenize = Callable[[Sequence[str]], list[list[str]]]
"""The stems of each of several texts (``StemTokenizer.tokens_of``)."""
IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]

K1 = 1.2
B = 0.75
MERGE_FRACTION = 8  # tail postings (or dead rows) past 1/8 of the base's: merge
MIN_MERGE_POSTINGS = 65_536  # a tail smaller than this is never worth a merge
# Most rows tied with the k-th that ``search(ties=True)`` returns past k (beyond, by id).
MAX_TIES = 10_000
# what a vocabulary entry (a stem's str, its int, the dict's slot) and a row map entry
# (two ints and a slot) cost, as measured by the RSS of indexes built (benchmarks/
# tenant_caches.py)
VOCABULARY_ENTRY_BYTES = 80
ROW_ENTRY_BYTES = 64
_log = get_logger(__name__)


@dataclass(frozen=True)
class _Postings:
    """Postings in compressed-sparse-row form: term ``t``'s rows and frequencies are
    ``rows[starts[t]:starts[t + 1]]`` and ``tfs[...]`` (terms past the end: none)."""

    starts: IdArray
    rows: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.float32]

    def of(self, term: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        if term + 1 >= self.starts.shape[0]:
            return _NO_ROWS, _NO_TFS
        a, b = int(self.starts[term]), int(self.starts[term + 1])
        return self.rows[a:b], self.tfs[a:b]

    @property
    def pairs(self) -> int:
        return int(self.rows.shape[0])

    def triples(
        self,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """``(rows, terms, tfs)`` of every posting."""
        terms = np.repeat(np.arange(self.starts.shape[0] - 1, dtype=np.int64), np.diff(self.starts))
        return self.rows.astype(np.int64), terms, self.tfs


_NO_ROWS = np.empty(0, dtype=np.int32)
_NO_TFS = np.empty(0, dtype=np.float32)
_EMPTY = _Postings(np.zeros(1, dtype=np.int64), _NO_ROWS, _NO_TFS)


def _csr(
    rows: npt.NDArray[np.int64],
    terms: npt.NDArray[np.int64],
    tfs: npt.NDArray[np.float32],
    vocabulary: int,
) -> _Postings:
    """Postings from ``(row, term, tf)`` triples whose rows come in ascending order
    within each term (a stable sort by term then keeps them so)."""
    order = np.argsort(terms, kind="stable")
    counts = np.bincount(terms, minlength=vocabulary)
    starts = np.zeros(vocabulary + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return _Postings(starts, rows[order].astype(np.int32), tfs[order].astype(np.float32))


class _Vocabulary(dict[str, int]):
    """Stem -> term id; a lookup (``[]``) of a new stem gives it the next id. Readers
    use ``get``, which never adds one."""

    def __missing__(self, stem: str) -> int:
        term = self[stem] = len(self)
        return term


class StoredStems:
    """A vocabulary as a keyword file keeps it: the stems in term-id order, each ended
    by a newline, in one UTF-8 buffer, where each starts, and the term ids in the
    stems' order. A search finds its few stems by bisection; the first write to the
    index turns it into a dict (``strings``).

    :param blob: the stems, each followed by ``"\\n"`` (stems never hold one).
    :param starts: ``n + 1`` offsets: stem ``t`` is ``blob[starts[t]:starts[t + 1] - 1]``.
    :param order: the ``n`` term ids sorted by their stems.
    """

    def __init__(
        self, blob: npt.NDArray[np.uint8], starts: IdArray, order: npt.NDArray[np.int32]
    ) -> None:
        self.blob = blob
        self.starts = starts
        self.order = order

    @classmethod
    def of(cls, stems: Sequence[str]) -> StoredStems:
        """The stored form of ``stems`` (term ``t`` is ``stems[t]``)."""
        blob = np.frombuffer("".join(f"{stem}\n" for stem in stems).encode(), dtype=np.uint8)
        starts = np.zeros(len(stems) + 1, dtype=np.int64)
        starts[1:] = np.flatnonzero(blob == ord("\n")) + 1
        order = np.asarray(sorted(range(len(stems)), key=stems.__getitem__), dtype=np.int32)
        return cls(blob, starts, order)

    def __len__(self) -> int:
        return int(self.order.shape[0])

    def _stem(self, term: int) -> bytes:
        return self.blob[int(self.starts[term]) : int(self.starts[term + 1]) - 1].tobytes()

    def find(self, stem: str) -> int | None:
        """The term id of ``stem``, or ``None``."""
        target, low, high = stem.encode(), 0, len(self)
        while low < high:  # str order is the order of their UTF-8 bytes
            middle = (low + high) // 2
            if self._stem(int(self.order[middle])) < target:
                low = middle + 1
            else:
                high = middle
        if low < len(self) and self._stem(int(self.order[low])) == target:
            return int(self.order[low])
        return None

    def strings(self) -> list[str]:
        """The stems in term-id order."""
        return self.blob.tobytes().decode().split("\n")[:-1]


@dataclass(frozen=True)
class _Snapshot:
    """What a reader needs, published as one object; never changed after publishing."""

    ids: IdArray  # row -> chunk id
    labels: IdArray  # row -> its document's seq
    lengths: npt.NDArray[np.float32]  # row -> how many stems its text has
    alive: npt.NDArray[np.bool_]
    base: _Postings
    tail: _Postings  # postings of the rows added since the base was built
    df: IdArray  # term -> rows holding it (dead ones too, until a merge)
    live: int
    live_length: float
    _codes: list[tuple[npt.NDArray[np.int32] | None, IdArray | None]] = field(
        default_factory=list, compare=False
    )

    def label_codes(self) -> tuple[npt.NDArray[np.int32] | None, IdArray | None]:
        """The rows' labels as codes into distinct values (computed once per snapshot)."""
        if not self._codes:
            self._codes.append(encode_labels(self.labels))
        return self._codes[0]


class KeywordIndex:
    """A BM25 index of one workspace's chunks; thread-safe (one writer at a time).

    :param tokenize: the stems of texts; the same function reads queries.
    """

    def __init__(self, tokenize: Tokenize) -> None:
        self._tokenize = tokenize
        self._lock = threading.Lock()
        # stem -> term id; ``None`` while a restored index still reads ``_stored``
        self._vocabulary: _Vocabulary | None = _Vocabulary()
        self._stored: StoredStems | None = None
        # live chunk id -> row; ``None`` until a restored index first needs it
        self._row_of: dict[int, int] | None = {}
        self._tail_triples: list[tuple[IdArray, IdArray, npt.NDArray[np.float32]]] = []
        empty_ids = np.empty(0, dtype=np.int64)
        self._snap = _Snapshot(
            empty_ids,
            empty_ids,
            np.empty(0, dtype=np.float32),
            np.empty(0, dtype=bool),
            _EMPTY,
            _EMPTY,
            np.empty(0, dtype=np.int64),
            0,
            0.0,
        )

    @classmethod
    def restore(cls, tokenize: Tokenize, stems: StoredStems, snapshot: _Snapshot) -> KeywordIndex:
        """An index holding what ``state()`` gave (read back from a keyword file): it
        searches at once; its vocabulary and row map are built at its first write."""
        index = cls(tokenize)
        index._vocabulary, index._stored, index._row_of = None, stems, None
        if snapshot.tail.pairs:
            index._tail_triples.append(snapshot.tail.triples())
        index._snap = snapshot
        return index

    def state(self) -> tuple[StoredStems, _Snapshot]:
        """The vocabulary and the snapshot published now, consistent with each other:
        what a keyword file stores."""
        with self._lock:
            snap, stored, vocabulary = self._snap, self._stored, self._vocabulary
            stems = None if vocabulary is None else list(vocabulary)
        if stems is not None:
            stored = StoredStems.of(stems)
        assert stored is not None  # one of the two is always set
        return stored, snap

    def _finder(self) -> Callable[[str], int | None]:
        """How a reader finds a stem's term id now (no lock: ``_terms`` sets the dict
        before it drops the stored form)."""
        vocabulary = self._vocabulary
        if vocabulary is None:
            stored = self._stored
            if stored is not None:
                return stored.find
            vocabulary = self._vocabulary
            assert vocabulary is not None
        return vocabulary.get

    def _terms(self) -> _Vocabulary:
        """The vocabulary as a dict, built from ``_stored`` at the first write (locked)."""
        if self._vocabulary is None:
            assert self._stored is not None
            strings = self._stored.strings()
            self._vocabulary = _Vocabulary(zip(strings, range(len(strings)), strict=True))
            self._stored = None
        return self._vocabulary

    def _rows(self) -> dict[int, int]:
        """The live chunk id -> row map, built from the snapshot at first need (locked)."""
        if self._row_of is None:
            snap = self._snap
            live = np.flatnonzero(snap.alive)
            self._row_of = dict(zip(snap.ids[live].tolist(), live.tolist(), strict=True))
        return self._row_of

    def __len__(self) -> int:
        return self._snap.live

    @property
    def nbytes(self) -> int:
        """About the bytes the index holds: its arrays, and its vocabulary and row map
        at ``VOCABULARY_ENTRY_BYTES`` and ``ROW_ENTRY_BYTES`` an entry (Python objects)."""
        snap = self._snap
        arrays: list[npt.NDArray[Any]] = [snap.ids, snap.labels, snap.lengths, snap.alive, snap.df]
        for postings in (snap.base, snap.tail):
            arrays += [postings.starts, postings.rows, postings.tfs]
        for triple in self._tail_triples:
            arrays += triple
        stored = self._stored
        if stored is not None:
            arrays += [stored.blob, stored.starts, stored.order]
        vocabulary = 0 if self._vocabulary is None else len(self._vocabulary)
        rows = 0 if self._row_of is None else len(self._row_of)
        return (
            sum(array.nbytes for array in arrays)
            + vocabulary * VOCABULARY_ENTRY_BYTES
            + rows * ROW_ENTRY_BYTES
        )

    def contains(self, chunk_id: int) -> bool:
        """Whether ``chunk_id`` is a live row."""
        rows = self._row_of
        if rows is None:
            with self._lock:
                rows = self._rows()
        row = rows.get(int(chunk_id))
        return row is not None and bool(self._snap.alive[row])

    # writing -------------------------------------------------------------------

    def add(self, ids: IdArray, labels: IdArray, texts: Sequence[str]) -> None:
        """Index chunks (ids not in the index yet) with their labels and texts."""
        self.add_batches([(ids, labels, texts)])

    def add_batches(self, batches: Iterable[tuple[IdArray, IdArray, Sequence[str]]]) -> None:
        """``add`` for many batches of chunks, published once (a whole workspace's
        load: its postings are sorted into one base once, not once per batch)."""
        with self._lock:
            snap = self._snap
            start = snap.ids.shape[0]
            new_ids: list[IdArray] = []
            new_labels: list[IdArray] = []
            new_lengths: list[npt.NDArray[np.float32]] = []
            for ids, labels, texts in batches:
                if len(texts) != ids.shape[0] or labels.shape[0] != ids.shape[0]:
                    raise ValueError("one label and one text per id")
                if not len(texts):
                    continue
                rows, terms, tfs, lengths = self._count(self._tokenize(texts), start)
                self._tail_triples.append((rows, terms, tfs))
                new_ids.append(np.asarray(ids, dtype=np.int64))
                new_labels.append(np.asarray(labels, dtype=np.int64))
                new_lengths.append(lengths)
                start += len(texts)
            if not new_ids:
                return
            added_ids = np.concatenate(new_ids)
            lengths = np.concatenate(new_lengths)
            vocabulary = len(self._terms())
            terms = np.concatenate([t[1] for t in self._tail_triples[-len(new_ids) :]])
            df = np.zeros(vocabulary, dtype=np.int64)
            df[: snap.df.shape[0]] = snap.df
            df += np.bincount(terms, minlength=vocabulary)
            first = snap.ids.shape[0]
            self._rows().update(
                zip(added_ids.tolist(), range(first, first + added_ids.shape[0]), strict=True)
            )
            postings = _csr(
                np.concatenate([t[0] for t in self._tail_triples]),
                np.concatenate([t[1] for t in self._tail_triples]),
                np.concatenate([t[2] for t in self._tail_triples]),
                vocabulary,
            )
            # an empty index's first rows (a whole workspace's load) are its base at once
            base, tail = (postings, _EMPTY) if first == 0 else (snap.base, postings)
            if first == 0:
                self._tail_triples = []
            self._snap = _Snapshot(
                np.concatenate((snap.ids, added_ids)),
                np.concatenate((snap.labels, *new_labels)),
                np.concatenate((snap.lengths, lengths)),
                np.concatenate((snap.alive, np.ones(added_ids.shape[0], dtype=bool))),
                base,
                tail,
                df,
                snap.live + added_ids.shape[0],
                snap.live_length + float(lengths.sum()),
            )
            self._merge_if_due()

    def _count(
        self, stems: list[list[str]], start: int
    ) -> tuple[IdArray, IdArray, npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``(row, term, tf)`` triples of texts' ``stems`` (rows from ``start``) and each
        text's length; new stems join the vocabulary (locked)."""
        vocabulary = self._terms()
        counts = np.fromiter(map(len, stems), dtype=np.int64, count=len(stems))
        total = int(counts.sum())
        # one pass: a known stem's id is a C lookup, a new one gets the next id
        terms = np.fromiter(
            map(vocabulary.__getitem__, chain.from_iterable(stems)), np.int64, total
        )
        rows = np.repeat(np.arange(start, start + len(stems), dtype=np.int64), counts)
        width = max(len(vocabulary), 1)
        pairs, tf = np.unique(rows * width + terms, return_counts=True)
        return pairs // width, pairs % width, tf.astype(np.float32), counts.astype(np.float32)

    def remove(self, ids: IdArray) -> int:
        """Mark chunks dead (unknown ids are ignored); how many were live."""
        with self._lock:
            snap = self._snap
            row_of = self._rows()
            rows = [r for r in (row_of.pop(int(i), None) for i in ids.tolist()) if r is not None]
            rows = [r for r in rows if snap.alive[r]]
            if not rows:
                return 0
            alive = snap.alive.copy()
            alive[rows] = False
            gone = float(snap.lengths[rows].sum())
            self._snap = _Snapshot(
                snap.ids,
                snap.labels,
                snap.lengths,
                alive,
                snap.base,
                snap.tail,
                snap.df,
                snap.live - len(rows),
                snap.live_length - gone,
            )
            self._merge_if_due()
            return len(rows)

    def _merge_if_due(self) -> None:
        """Fold the tail into the base, and drop dead rows, once either has grown past
        an eighth of the base (locked)."""
        snap = self._snap
        rows = snap.ids.shape[0]
        dead = rows - snap.live
        tail = snap.tail.pairs
        if tail < max(MIN_MERGE_POSTINGS, snap.base.pairs // MERGE_FRACTION) and (
            dead * MERGE_FRACTION <= rows
        ):
            return
        base_rows, base_terms, base_tfs = snap.base.triples()
        all_rows = np.concatenate((base_rows, *(t[0] for t in self._tail_triples)))
        all_terms = np.concatenate((base_terms, *(t[1] for t in self._tail_triples)))
        all_tfs = np.concatenate((base_tfs, *(t[2] for t in self._tail_triples)))
        keep = snap.alive[all_rows]
        renumber = np.cumsum(snap.alive, dtype=np.int64) - 1  # old row -> new row
        kept_rows = renumber[all_rows[keep]]
        vocabulary = len(self._terms())
        terms = all_terms[keep]
        base = _csr(kept_rows, terms, all_tfs[keep], vocabulary)
        alive_rows = np.flatnonzero(snap.alive)
        ids = snap.ids[alive_rows]
        self._row_of = dict(zip(ids.tolist(), range(ids.shape[0]), strict=True))
        self._tail_triples = []
        self._snap = _Snapshot(
            ids,
            snap.labels[alive_rows],
            snap.lengths[alive_rows],
            np.ones(ids.shape[0], dtype=bool),
            base,
            _EMPTY,
            np.bincount(terms, minlength=vocabulary).astype(np.int64),
            int(ids.shape[0]),
            float(snap.lengths[alive_rows].sum()),
        )

    # reading -------------------------------------------------------------------

    def search(
        self, query: str, k: int, *, allow: LabelFilter | None = None, ties: bool = False
    ) -> tuple[IdArray, ScoreArray]:
        """The ``k`` chunk ids with the highest BM25 scores for ``query``'s stems, best
        first (ties by ascending id); rows scoring 0 (no stem in common) are left out.
        ``allow`` (a filter's verdicts on row labels) is applied before the top ``k``.
        With ``ties``, the rows tied with the ``k``-th follow it (up to ``MAX_TIES``
        more), so that a caller may break the ties otherwise (by the cosine)."""
        snap = self._snap
        terms = sorted(
            {t for t in map(self._finder(), self._tokenize([query])[0]) if t is not None}
        )
        if not terms or snap.live == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        n = snap.ids.shape[0]
        live = snap.live
        norm = np.float32(K1 * B / (snap.live_length / live)) if snap.live_length else np.float32(0)
        # per row: k1 * (1 - b + b * len / avglen), the part of the denominator tf lacks
        scores = np.zeros(n, dtype=np.float32)
        for term in terms:
            parts = [postings.of(term) for postings in (snap.base, snap.tail)]
            if live == n:
                df = float(snap.df[term]) if term < snap.df.shape[0] else 0.0
            else:
                # ``snap.df`` counts dead rows until a merge, while ``live`` does not: a
                # term in every row would get a negative idf and match nothing. Count
                # the term's live rows, as an index built afresh would.
                df = float(sum(int(np.count_nonzero(snap.alive[rows])) for rows, _ in parts))
            if not df:
                continue
            idf = np.float32(np.log1p((live - df + 0.5) / (df + 0.5)))
            for rows, tfs in parts:
                if rows.shape[0]:
                    damp = np.float32(K1 * (1 - B)) + norm * snap.lengths[rows]
                    scores[rows] += idf * tfs * np.float32(K1 + 1) / (tfs + damp)
        hit = scores > 0
        hit &= snap.alive
        if allow is not None:
            codes, values = snap.label_codes()
            if codes is None or values is None:
                verdict = allow(np.array([-1], dtype=np.int64))
                if not verdict[0]:
                    hit[:] = False
            else:
                hit &= np.asarray(allow(values), dtype=bool)[codes]
        matched = np.flatnonzero(hit)
        if matched.shape[0] > k:
            found = scores[matched]
            cut = np.partition(found, matched.shape[0] - k)[matched.shape[0] - k]
            matched = matched[found >= cut]  # ties at the cut stay, for the id tie-break
        ids, found = snap.ids[matched], scores[matched]
        order = np.lexsort((ids, -found))
        end = k
        if ties and order.shape[0] > k:  # sorted: the rows tied with the k-th come next
            end += min(int(np.count_nonzero(found[order[k:]] == found[order[k - 1]])), MAX_TIES)
        order = order[:end]
        return ids[order], found[order]


__all__ = ["GATHER_FRACTION", "KeywordIndex", "StoredStems"]
