"""Sentence counts: one packed ``document_terms`` row per document, summed in memory.

One row per stem (``term_counts``, m009) put about 45 rows per document into scattered
leaves of its term index, which made each SQLite ingestion commit write several times
the pages it otherwise does (m011). Each process or node keeps its workspaces' sums and
follows the change log to stay current, like the vector index. The sums are charged
``TERM_ENTRY_BYTES`` a stem to a budget, the core's ``index_cache_bytes`` once it calls
``share_budget`` (``TERM_SUMS_BYTES`` of a store alone): the least recently asked go
first.

The store keeps each workspace's sums too (``term_sums``, m029), at the version they
reflect: a process's first chat reads them and applies the change log since, instead of
summing every document's row (1.5-2 s at 50k chunks). They are written after a sum of
every row, and again once ``TERM_SUMS_REWRITE`` documents were applied to them since.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from agentcore._logs import get_logger
from agentcore._memory_budget import Residency, ResidencyStats
from agentcore.storage.base import BudgetedStore, TermStore
from agentcore.storage.records import TermCounts
from agentcore.storage.sql.database import Connection
from agentcore.storage.sql.queries import WORKSPACE
from agentcore.storage.sql.vectors import VectorTables


def pack_stems(stems: Mapping[str, int]) -> str:
    """A document's per-stem sentence counts as stored: ``"stem count"`` lines (stems
    with no sentence, and the empty stem, left out)."""
    return "\n".join([f"{stem} {count}" for stem, count in stems.items() if stem and count > 0])


def unpack_stems(packed: str) -> Iterator[tuple[str, int]]:
    """The ``(stem, count)`` pairs ``pack_stems`` wrote. A line that is not one (a
    damaged row) is skipped: word rarity is a hint, and chat must not fail on it."""
    if not packed:
        return
    for line in packed.split("\n"):
        stem, _, count = line.rpartition(" ")
        if stem and count.isascii() and count.isdigit():
            yield stem, int(count)


#: Most bytes of workspaces' sums a store alone keeps (per process; a core charges
#: them to its index budget instead).
TERM_SUMS_BYTES = 32 << 20
#: What one stem of a workspace's sums costs (its str, int and dict slot), about.
TERM_ENTRY_BYTES = 96
#: How many locks the workspaces' sums are spread over: summing one workspace's rows
#: (seconds at a million chunks) holds only the workspaces that share its lock.
TERM_LOCK_STRIPES = 64
#: Documents' counts applied to a workspace's sums (added or taken out) since the store's
#: copy of them past which that copy is written again: a fresh process then applies at
#: most about this many rows of the log on top of it.
TERM_SUMS_REWRITE = 100

_log = get_logger(__name__)


class TermSums:
    """One workspace's sentence counts summed over its documents, at a store version;
    ``unstored``: documents applied since the store's copy (``None``: it has none)."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.sentences = 0
        self.counts: dict[str, int] = {}
        self.unstored: int | None = None

    @classmethod
    def unpacked(cls, version: int, sentences: int, stems: str, counts: bytes) -> TermSums | None:
        """Sums as ``term_sums`` keeps them; ``None`` when the row is not whole."""
        names = stems.split("\n") if stems else []
        if len(counts) != 8 * len(names):
            return None
        entry = cls(version)
        entry.sentences = sentences
        entry.counts = dict(zip(names, np.frombuffer(counts, dtype="<i8").tolist(), strict=True))
        entry.unstored = 0
        return entry

    def packed(self) -> tuple[str, bytes]:
        """``(stems, counts)`` as ``term_sums`` keeps them."""
        values = np.fromiter(self.counts.values(), dtype="<i8", count=len(self.counts))
        return "\n".join(self.counts), values.tobytes()

    def add(self, sentences: int, packed: str, sign: int) -> None:
        """Add (``sign=1``) or take away (``-1``) one document's counts."""
        if self.unstored is not None:
            self.unstored += 1
        self.sentences += sign * sentences
        counts = self.counts
        for stem, count in unpack_stems(packed):
            total = counts.get(stem, 0) + sign * count
            if total:
                counts[stem] = total
            else:
                del counts[stem]


class TermTables(VectorTables, TermStore, BudgetedStore):
    """Documents' sentence counts and their sums (``TermStore``): the sums follow the
    workspace version and change log that ``VectorTables`` keeps."""

    def __init__(self) -> None:
        self._term_locks = tuple(threading.Lock() for _ in range(TERM_LOCK_STRIPES))
        self._term_sums: Residency[tuple[str, str], TermSums] = Residency(
            budget_bytes=TERM_SUMS_BYTES
        )

    def share_budget(self, budget: Residency[Any, Any]) -> None:
        """Charge the sums to ``budget`` (``BudgetedStore``); those kept so far go."""
        with contextlib.ExitStack() as held:
            for lock in self._term_locks:  # in order: no call is summing meanwhile
                held.enter_context(lock)
            self._term_sums.detach()
            self._term_sums = Residency(share=budget)

    def cache_stats(self) -> ResidencyStats:
        """What the sums kept are charged and how many were evicted (``BudgetedStore``)."""
        return self._term_sums.stats()

    def _store_terms(self, conn: Connection, document_id: str, counts: TermCounts) -> None:
        """Store a document's counts as one row, in the transaction that stores its
        chunks, under its row's ``seq`` and version (written before, in that transaction:
        read in SQL, so a pipelined write waits for neither); ``delete_document`` takes
        them out."""
        sentences, stems = counts
        conn.execute(
            "INSERT INTO document_terms (document_seq, organization_id, environment, version,"
            " sentences, stems) SELECT seq, organization_id, environment, version, ?, ?"
            " FROM documents WHERE id = ?",
            [sentences, pack_stems(stems), document_id],
        )

    def _take_terms(self, conn: Connection, seq: int) -> dict[str, Any]:
        """Delete document ``seq``'s counts (before the document, whose foreign key would
        drop them unread); the tombstone columns that keep them for the sums."""
        row = conn.execute(
            "DELETE FROM document_terms WHERE document_seq = ? RETURNING version AS term_version,"
            " sentences AS term_sentences, stems AS term_stems",
            [seq],
        ).fetchone()
        return {} if row is None else dict(row)

    def term_counts(
        self, organization_id: str, environment: str, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        # the sums are kept in memory per workspace, built on the first call and brought
        # up to date at each later one from the change log (documents whose counts were
        # stored, and tombstones holding the counts of those deleted, after the sums'
        # version), so any process's or node's writes are seen; rebuilt from every
        # document's row when the log no longer reaches back that far. Sums that are
        # current cost one read of the workspace's version.
        wanted = {stem for stem in stems if stem}
        key = (organization_id, environment)
        known = self._term_sums.get(key)
        # outside the lock: on PostgreSQL this read is a round trip, and calls for sums
        # that are current need no more than it
        current = known is not None and self.knowledge_state(*key).version == known.version
        with self._term_lock(key):  # one workspace summing holds no other's lock
            entry = self._term_sums.touch(key)  # now the most recently asked
            if entry is None or not current:
                entry = self._current_term_sums(key, entry)
                self._term_sums.keep(key, entry, (len(entry.counts) + 1) * TERM_ENTRY_BYTES)
                if entry.unstored is None or entry.unstored >= TERM_SUMS_REWRITE:
                    self._store_term_sums(key, entry)
            counts = entry.counts
            return entry.sentences, {stem: counts[stem] for stem in wanted if counts.get(stem)}

    def _term_lock(self, key: tuple[str, str]) -> threading.Lock:
        """The lock a workspace's sums are brought up to date under."""
        return self._term_locks[hash(key) % len(self._term_locks)]

    def _current_term_sums(self, key: tuple[str, str], entry: TermSums | None) -> TermSums:
        """``entry`` brought up to the store's version (a new one when it cannot be)."""
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT version, log_floor FROM knowledge_state WHERE {WORKSPACE}", key
            ).fetchone()
            version, floor = (0, 0) if state is None else (state["version"], state["log_floor"])
            if entry is not None and entry.version == version:
                return entry
            if entry is None or not floor <= entry.version < version:
                entry = self._stored_term_sums(conn, key, floor, version)
            if entry is None:
                entry = TermSums(version)
                rows = conn.execute(
                    f"SELECT sentences, stems FROM document_terms WHERE {WORKSPACE}", key
                )
                for row in rows:
                    entry.add(row["sentences"], row["stems"], 1)
                return entry
            if entry.version == version:
                return entry
            # counts stored after the entry's version come in, and those stored at or before
            # it and deleted since go out
            for row in conn.execute(
                "SELECT sentences, stems, 1 AS sign FROM document_terms"
                f" WHERE {WORKSPACE} AND version > ? UNION ALL"
                " SELECT term_sentences, term_stems, -1 FROM knowledge_tombstones"
                f" WHERE {WORKSPACE} AND version > ? AND term_version <= ?",
                [*key, entry.version, *key, entry.version, entry.version],
            ):
                entry.add(row["sentences"], row["stems"], row["sign"])
            entry.version = version
            return entry

    def _stored_term_sums(
        self, conn: Connection, key: tuple[str, str], floor: int, version: int
    ) -> TermSums | None:
        """The store's copy of a workspace's sums, if the change log reaches back to its
        version (and it is not of a version the workspace has not reached, or damaged)."""
        rows = self.db.fetch_blobs(
            conn,
            f"SELECT version, sentences, stems, counts FROM term_sums WHERE {WORKSPACE}",
            key,
        )
        if not rows or not floor <= rows[0]["version"] <= version:
            return None
        row = rows[0]
        return TermSums.unpacked(row["version"], row["sentences"], row["stems"], row["counts"])

    def _store_term_sums(self, key: tuple[str, str], entry: TermSums) -> None:
        """Keep ``entry`` as the store's copy of the workspace's sums: sums of every row
        replace any copy (the one there was not usable, or there was none); sums brought
        up to date replace only an older one. A failure is logged: the sums are a cache,
        and no chat fails for it."""
        stems, counts = entry.packed()
        newer = "" if entry.unstored is None else " WHERE excluded.version > term_sums.version"
        try:
            with self.db.write() as conn:
                conn.execute(
                    "INSERT INTO term_sums (organization_id, environment, version, sentences,"
                    " stems, counts) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (organization_id,"
                    " environment) DO UPDATE SET version = excluded.version, sentences ="
                    f" excluded.sentences, stems = excluded.stems, counts = excluded.counts{newer}",
                    [*key, entry.version, entry.sentences, stems, counts],
                )
        except Exception:  # a cache: no chat fails for it
            _log.warning("could not store the term sums of %s/%s", *key, exc_info=True)
            return
        entry.unstored = 0
