"""Which workspace indexes a process keeps loaded, under the core's memory budget."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentcore._logs import get_logger
from agentcore._memory_budget import KeyedLocks, Residency, Slot
from agentcore.knowledge.vectors._backend import Key, Rows
from agentcore.knowledge.vectors._index import VectorIndex
from agentcore.observer import Counts

# Indexes evicted before their first segment files were written that are kept until
# maintenance writes them (more wait for their next load).
MAX_UNWRITTEN = 4
_log = get_logger(__name__)


@dataclass
class Entry:
    """A loaded workspace index and what keeps it in step with the store."""

    version: int
    index: VectorIndex
    manifest: str | None = None  # id of the segment manifest the index's parts come from
    embedder: str | None = None
    manifest_version: int = 0  # the store version that manifest reflects
    # this process's writes since ``version`` whose rows are not in ``index`` yet, one
    # (ids, unit vectors) per write; each write moved the store's version one step
    pending: list[Rows] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0  # counted as rows come: summing them per write was quadratic

    def hold(self, rows: Rows) -> None:
        """Hold back one write's rows for the next read."""
        self.pending.append(rows)
        self.pending_rows += len(rows[0])
        self.pending_bytes += sum(array.nbytes for array in rows)

    def drop_held(self) -> None:
        """Forget the held-back rows (added to the index, or superseded by the log)."""
        self.pending.clear()
        self.pending_rows = self.pending_bytes = 0

    @property
    def nbytes(self) -> int:
        """What the entry costs the budget: its index and the rows it holds back."""
        return self.index.resident_bytes + self.pending_bytes


class Events:
    """Tells the observer of each event (``runtime.Counts``) and counts them for
    ``stats()``."""

    def __init__(self, observer: Counts) -> None:
        self._observer = observer
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, event: str, count: int) -> None:
        """Tell the observer of ``event`` and count it."""
        with self._lock:
            self._counts[event] += count
        self._observer(event, count)

    def counts(self) -> collections.Counter[str]:
        """The counts so far (a copy)."""
        with self._lock:
            return self._counts.copy()


class LoadedIndexes:
    """The workspace indexes loaded in this process, least recently used first, each
    charged to the budget (``Residency``) what it keeps resident; one lock per workspace
    for its loads and writes.

    An index evicted before its first segment files were written is kept aside
    (``MAX_UNWRITTEN`` at most) for the maintenance step that writes them.

    :param budget_bytes: the most bytes of indexes kept loaded (``None``: no bound).
    :param max_mapped_files: the most segment files kept mapped (``None``: no bound).
    :param events: told of each eviction.
    :param forget: told of each evicted workspace (whatever else is kept per workspace
        goes with it).
    """

    def __init__(
        self,
        *,
        budget_bytes: int | None,
        max_mapped_files: int | None,
        events: Events,
        forget: Callable[[Key], None],
    ) -> None:
        self._events = events
        self._forget = forget
        self.entries: Residency[Key, Entry] = Residency(
            budget_bytes=budget_bytes, max_files=max_mapped_files, on_evict=self._evicted
        )
        self._locks: KeyedLocks[Key] = KeyedLocks()
        self._guard = threading.Lock()
        self._unwritten: dict[Key, Entry] = {}

    def lock(self, key: Key) -> contextlib.AbstractContextManager[None]:
        """Hold ``key``'s lock (re-entrant): one load or write of a workspace at a time."""
        return self._locks.hold(key)

    @property
    def locks(self) -> int:
        """How many workspaces' locks are held or waited for now."""
        return len(self._locks)

    def get(self, key: Key) -> Entry | None:
        """``key``'s loaded entry, or ``None`` (its place in the order is left as it is)."""
        return self.entries.get(key)

    def install(self, key: Key, entry: Entry) -> Slot[Entry]:
        """Make ``entry`` ``key``'s, held for the caller (``release`` it)."""
        with self._guard:
            self._unwritten.pop(key, None)  # superseded
        return self.entries.put(key, entry, entry.nbytes, entry.index.mapped_files, held=True)

    def charge(self, key: Key, entry: Entry) -> None:
        """Charge ``entry`` (if still ``key``'s) what it holds now; evicts if due."""
        self.entries.charge(key, entry, entry.nbytes, entry.index.mapped_files)

    def maintained(self, key: Key) -> Entry | None:
        """The entry background maintenance works on: the loaded one, or one evicted
        before its first segment files were written (kept for that)."""
        return self.entries.get(key) or self._unwritten.get(key)

    def unwritten(self, key: Key) -> Entry | None:
        """The entry of ``key`` kept since its eviction for its segment files, if any."""
        return self._unwritten.get(key)

    def written(self, key: Key, entry: Entry | None = None) -> None:
        """Stop keeping ``key``'s evicted entry (``entry``: only if it is that one)."""
        with self._guard:
            if entry is None or self._unwritten.get(key) is entry:
                self._unwritten.pop(key, None)

    def size(self) -> tuple[int, int, int]:
        """``(workspaces, rows, bytes)`` held now (``nbytes``: in RAM or mapped)."""
        entries = self.entries.values()  # a copy: other threads add and drop
        rows = sum(len(entry.index) for entry in entries)
        return len(entries), rows, sum(entry.index.nbytes for entry in entries)

    def clear(self) -> None:
        """Forget every index (their mappings and files close with their last user)."""
        self.entries.clear()
        with self._guard:
            self._unwritten.clear()

    def _evicted(self, key: Key, entry: Entry) -> None:
        # its next write checks the embedder again: nothing per workspace stays behind
        self._forget(key)
        if entry.index.persisted and entry.manifest is None:
            # loaded from the store, evicted before its segment files were written: kept
            # for the maintenance step that writes them (a few at most), else its next
            # load reads the store again
            with self._guard:
                self._unwritten[key] = entry
                while len(self._unwritten) > MAX_UNWRITTEN:
                    del self._unwritten[next(iter(self._unwritten))]
        self._events("index.evict", 1)
        _log.debug("evicted the index of %s/%s (least recently used)", *key)


def stats(held: Residency[Any, Any], counts: collections.Counter[str]) -> dict[str, int | None]:
    """What a backend reports (``VectorBackend.stats``) of the indexes ``held`` and the
    events counted."""
    charged = held.stats()
    return {
        "entries": charged.entries,
        "bytes": charged.bytes,
        "budget_bytes": charged.budget_bytes,
        "mapped_files": charged.files,
        "max_mapped_files": charged.max_files,
        "pinned": charged.pinned,
        "loads": counts["index.reload"],
        "evictions": charged.evictions,
        "segment_loads": counts["index.segment_load"],
        "segment_fallbacks": counts["index.segment_fallback"],
        "catch_ups": counts["index.catch_up"],
        "merges": counts["index.merge"],
    }
