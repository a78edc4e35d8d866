"""Each workspace's keyword index in this process: read from its keyword file (or the
store's snapshot) or built from the store on first use, then kept at the store's version
through its change log."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agentcore._memory_budget import KeyedLocks, Residency, ResidencyStats
from agentcore.knowledge._keywords import MERGE_FRACTION, IdArray, KeywordIndex, Tokenize

if TYPE_CHECKING:
    from agentcore.knowledge._keyword_files import KeywordCopy
    from agentcore.storage.base import IndexStore

__all__ = ["KeywordCache"]

_TEXT_BATCH = 2_000  # chunk texts read and tokenised at a time while loading
# Rows added or removed since the keyword copies past which they are written again: at
# least this many, and at least 1/MERGE_FRACTION of the index (a fresh process then
# applies at most that much of the change log on top of a copy).
REWRITE_MIN_ROWS = 2_000
Key = tuple[str, str]


class Submit(Protocol):
    """Where keyword copies are written: a pool's ``submit`` (raises ``RuntimeError``
    once the pool is closed)."""

    def __call__(self, fn: Any, /, *args: Any) -> concurrent.futures.Future[Any]: ...


@dataclass(eq=False)
class _Built:
    """A workspace's keyword index, the store version it reflects, how many rows it
    added or removed since its keyword copies were written or read, and whether a write
    of them is under way."""

    version: int
    index: KeywordIndex
    unwritten: int = 0
    writing: bool = False


class KeywordCache:
    """Each workspace's ``KeywordIndex`` in this process, kept at the store's version
    through its change log (``changes_since`` without vectors: the ids and labels of
    the rows added, the ids deleted; then the added chunks' texts). A gap the log
    cannot bridge rebuilds the workspace's index.

    With ``copies`` (``KeywordFiles``, ``KeywordSnapshots``), a workspace's first use
    reads the first usable one and applies the change log since (and writes the copies
    before it: a node's file from the store's snapshot); without one it builds the index
    from the store's chunk texts and writes every copy. Once the rows changed since pass
    ``REWRITE_MIN_ROWS`` and an eighth of the index, the copies are written again.

    The indexes are charged their ``nbytes`` to ``budget``, a ``Residency`` whose bounds
    they share (the core's: the vector indexes' ``index_cache_bytes``), so the least
    recently used of all of them are evicted first; an evicted workspace builds again
    at its next keyword search. A search keeps using the index it got.

    :param store: where chunks, their texts and the change log are.
    :param tokenize: the stemming tokenizer (``StemTokenizer.tokens_of``).
    :param catchup_max_rows: most rows to add from the log before a rebuild is preferred.
    :param budget: the ``Residency`` whose bounds to share; ``None``: keep every index.
    :param copies: where keyword indexes are kept between processes, the one to read
        first first; none: nowhere.
    :param submit: runs the copies' writes off the searching thread (a pool's
        ``submit``); ``None``, or a closed pool: the search that made them due writes.
    :param load: where ``get_soon`` loads a workspace's index (a pool's ``submit``);
        ``None``, or a closed pool: ``get_soon``'s caller loads it.
    """

    def __init__(
        self,
        store: IndexStore,
        tokenize: Tokenize,
        *,
        catchup_max_rows: int = 100_000,
        budget: Residency[Any, Any] | None = None,
        copies: Sequence[KeywordCopy] = (),
        submit: Submit | None = None,
        load: Submit | None = None,
    ) -> None:
        self._store = store
        self._submit = submit
        self._load_on = load
        self._writes: set[concurrent.futures.Future[Any]] = set()
        self._writes_lock = threading.Lock()
        self._tokenize = tokenize
        self._catchup_max_rows = catchup_max_rows
        self._copies = tuple(copies)
        self._entries: Residency[Key, _Built] = Residency(share=budget)
        self._locks: KeyedLocks[Key] = KeyedLocks()

    def get(self, organization_id: str, environment: str) -> KeywordIndex:
        """The workspace's keyword index, current with the store."""
        key = (organization_id, environment)
        version = self._store.knowledge_state(organization_id, environment).version
        entry = self._entries.touch(key)
        if entry is not None and entry.version == version:
            return entry.index
        with self._locks.hold(key):
            entry = self._entries.touch(key)
            if entry is not None:
                if entry.version == version:
                    return entry.index
                if self._caught_up(key, entry):
                    self._entries.charge(key, entry, entry.index.nbytes)
                    return entry.index
            return self._load(key, version)

    def get_soon(self, organization_id: str, environment: str) -> Callable[[], KeywordIndex]:
        """``get``, started now on the ``load`` pool when the workspace's index is not
        loaded here (else run by the caller, as it is a catch-up at most): call the
        result for the index (it waits for the load, and raises what the load raised).
        A hybrid search searches, or loads, its vectors meanwhile."""
        entry = self._entries.get((organization_id, environment))
        if entry is None and self._load_on is not None:
            try:
                future = self._load_on(self.get, organization_id, environment)
            except RuntimeError:  # the pool is closed: the core is stopping
                pass
            else:
                return future.result
        return lambda: self.get(organization_id, environment)

    def stats(self) -> ResidencyStats:
        """The indexes held now, what they are charged and how many were evicted."""
        return self._entries.stats()

    def _caught_up(self, key: Key, entry: _Built) -> bool:
        """Apply the change log since ``entry``'s version to its index (and write its
        copies again when due); whether the log bridged the gap."""
        changes = self._store.changes_since(
            *key, entry.version, max_rows=self._catchup_max_rows, vectors=False
        )
        if changes is None:
            return False
        index = entry.index
        added = changes.added_ids
        if added.size:
            fresh = np.fromiter((not index.contains(i) for i in added.tolist()), bool, added.size)
            labels = changes.added_labels
            labels = np.full(added.size, -1, np.int64) if labels is None else labels
            self._add(index, added[fresh], labels[fresh])
        if changes.deleted_ids.size:
            index.remove(changes.deleted_ids)
        entry.version = changes.version
        entry.unwritten += int(added.size + changes.deleted_ids.size)
        if entry.unwritten >= max(REWRITE_MIN_ROWS, len(index) // MERGE_FRACTION):
            self._write(key, entry)
        return True

    def _load(self, key: Key, version: int) -> KeywordIndex:
        """The workspace's index from its first usable copy and the change log since, or
        else built from the store (and its copies written); installed in the cache."""
        for place, copy in enumerate(self._copies):
            stored = copy.read(key, self._tokenize, version)
            if stored is None:
                continue
            entry = _Built(stored.version, stored.index)
            if self._caught_up(key, entry):
                self._entries.put(key, entry, entry.index.nbytes)
                if place and not entry.writing:  # e.g. this node's file, from the store's
                    self._write(key, entry, self._copies[:place])
                return entry.index
        rows = self._store.load_index(*key, 0, vectors=False)
        index = KeywordIndex(self._tokenize)
        self._add(index, rows.ids, rows.labels)
        entry = _Built(version, index)
        self._entries.put(key, entry, index.nbytes)
        # ``version`` was read (by ``get``) before the load: writes in between are applied
        # again by the next catch-up only where they are new (contains), as the vector
        # index does
        self._write(key, entry)
        return index

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait until the keyword copies' writes under way are done; whether they are."""
        with self._writes_lock:
            pending = list(self._writes)
        _, running = concurrent.futures.wait(pending, timeout)
        return not running

    def _write(self, key: Key, entry: _Built, copies: Sequence[KeywordCopy] | None = None) -> None:
        """Write ``entry`` to ``copies`` (default: every one): on ``submit``'s pool, or
        here when there is none (or it is closed); never two writes at once for one
        entry."""
        copies = self._copies if copies is None else copies
        if not copies or entry.writing:
            return
        entry.writing = True
        if self._submit is not None:
            try:
                future = self._submit(self._write_now, key, entry, copies)
            except RuntimeError:  # the pool is closed: the core is stopping
                pass
            else:
                with self._writes_lock:
                    self._writes.add(future)
                future.add_done_callback(self._written)
                return
        self._write_now(key, entry, copies)

    def _written(self, future: concurrent.futures.Future[Any]) -> None:
        with self._writes_lock:
            self._writes.discard(future)

    def _write_now(self, key: Key, entry: _Built, copies: Sequence[KeywordCopy]) -> None:
        """Write ``entry`` as it is now to ``copies``: its version read before its index,
        so no copy claims a version its rows have not reached."""
        try:
            version, unwritten = entry.version, entry.unwritten
            written = [copy.write(key, version, entry.index) for copy in copies]
            if all(written) and copies is self._copies:
                entry.unwritten -= unwritten
        finally:
            entry.writing = False

    def _add(self, index: KeywordIndex, ids: IdArray, labels: IdArray) -> None:
        """Add these rows to ``index`` with their texts, read ``_TEXT_BATCH`` at a time
        (a chunk deleted meanwhile is left out: its tombstone follows)."""

        def batches() -> Iterator[tuple[IdArray, IdArray, list[str]]]:
            for start in range(0, ids.shape[0], _TEXT_BATCH):
                batch = ids[start : start + _TEXT_BATCH]
                texts = self._store.chunk_texts_by_id(batch.tolist())
                present = np.fromiter((int(i) in texts for i in batch.tolist()), bool, batch.size)
                kept = batch[present]
                yield (
                    kept,
                    labels[start : start + _TEXT_BATCH][present],
                    [texts[int(i)] for i in kept.tolist()],
                )

        index.add_batches(batches())
