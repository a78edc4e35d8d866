"""Keeping a loaded workspace index at the store's version: catching up with the change
log, adding this process's own writes, reloading when the log cannot bridge the gap."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from agentcore._memory_budget import Slot
from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors._backend import Key, Rows, T
from agentcore.knowledge.vectors._reembed import WorkspaceEmbedders
from agentcore.knowledge.vectors._residency import Entry, Events, LoadedIndexes
from agentcore.knowledge.vectors._workspace_loading import WorkspaceLoader, apply_changes
from agentcore.storage.records import KnowledgeState

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore

# Versions a workspace may move past its manifest before one is written anyway: a
# load then bridges a short change log (the store keeps 10,000 versions of deletes).
MANIFEST_LAG_VERSIONS = 1_000
# Rows of this process's own writes a cached index may hold back: they are added in one
# batch at its next read (or once there are more), not one write at a time.
_MAX_PENDING_ROWS = 4096


class IndexSync:
    """Brings each loaded workspace index to the store's version before it is read, and
    past each knowledge write this process makes.

    The store keeps a per-workspace version that every knowledge write advances and a
    change log (rows added, ids deleted, per version). Before each search the index's
    version is compared with the store's (one small read); if it is behind (a write
    by this or another process, on this or another machine), only the changes since
    are applied. The whole workspace is reloaded only when the log cannot bridge the
    gap: more than ``catchup_max_rows`` rows added, a re-embed, or deletions older than
    the log keeps. So a search answered after any process's write has returned
    reflects that write.

    :param submit: queues a workspace's maintenance (``force``: write a manifest).
    :param writing: marks a write in flight for the block (background steps give way).
    """

    def __init__(
        self,
        store: IndexStore,
        loaded: LoadedIndexes,
        loader: WorkspaceLoader,
        embedders: WorkspaceEmbedders,
        *,
        catchup_max_rows: int,
        submit: Callable[[Key, bool], None],
        writing: Callable[[], contextlib.AbstractContextManager[None]],
        events: Events,
    ) -> None:
        self._store = store
        self._loaded = loaded
        self._loader = loader
        self._embedders = embedders
        self._catchup_max_rows = catchup_max_rows
        self._submit = submit
        self._writing = writing
        self._events = events

    def acquire(self, key: Key) -> Slot[Entry]:
        """The workspace's current entry, held (never evicted) until ``release``d.

        Loaded or caught up under the workspace's lock, so threads that want the same
        workspace at once load it once: the others wait, then find it loaded.
        """
        entries = self._loaded.entries
        state = self._store.knowledge_state(*key)
        slot = entries.acquire(key, lambda entry: self.current(entry, state))
        if slot is not None:
            return slot
        with self._loaded.lock(key):
            state = self._embedders.ensure(key)
            slot = entries.acquire(key)
            if slot is not None:
                entry = slot.value
                if self._fits(entry, state) and (
                    entry.version == state.version or self.catch_up(key, entry)
                ):
                    self._loaded.charge(key, entry)
                    return slot
                entries.release(slot)
            return self._loader.load(key, state)

    def release(self, slot: Slot[Entry]) -> None:
        """Let an ``acquire``d entry be evicted again."""
        self._loaded.entries.release(slot)

    def current(self, entry: Entry, state: KnowledgeState) -> bool:
        """Whether ``entry`` is at the store's version with the workspace's codec."""
        return entry.version == state.version and self._fits(entry, state)

    def _fits(self, entry: Entry, state: KnowledgeState) -> bool:
        # an index loaded before another process fixed the workspace's dtype (to one
        # other than this process's setting) is reloaded with the stored one
        return entry.index.codec == self._loader.codec_of(state)

    def write(
        self, key: Key, store_write: Callable[[], T], added: Callable[[T], Rows | None] | None
    ) -> T:
        """Run ``store_write``, then bring the workspace's loaded index past it
        (``WorkspaceIndexes.write``). Serialised per workspace in this process."""
        with self._writing(), self._loaded.lock(key):
            result = self._embedders.write(key, store_write, checks_itself=added is not None)
            entry = self._loaded.get(key)
            if entry is not None and not self._caught_up(key, entry, result, added):
                self._loaded.entries.discard(key, entry)
            elif entry is not None:
                self._loaded.charge(key, entry)
                lag = entry.version - entry.manifest_version
                if entry.index.persisted and lag >= MANIFEST_LAG_VERSIONS:
                    entry.manifest_version = entry.version  # asked once per lag
                    self._submit(key, True)
            return result

    def _caught_up(
        self, key: Key, entry: Entry, result: T, added: Callable[[T], Rows | None] | None
    ) -> bool:
        """Bring ``entry`` past a write of this process that returned ``result``: hold its
        own rows back for the next read, else apply the change log. False: reload."""
        rows = added(result) if added is not None else None
        if rows is None:
            return self.catch_up(key, entry)
        entry.hold(rows)
        return entry.pending_rows <= _MAX_PENDING_ROWS or self.catch_up(key, entry)

    def catch_up(self, key: Key, entry: Entry) -> bool:
        """Apply the store's changes since ``entry.version``; False if a reload is needed.

        Rows this process held back are added without a log read when its writes are
        all that changed; else the log, which holds them too, replaces them.
        """
        if entry.pending:
            if self._add_own(key, entry):
                return True
            entry.drop_held()
        changes = self._store.changes_since(*key, entry.version, max_rows=self._catchup_max_rows)
        if changes is None:
            return False
        if changes.version == entry.version:
            return True
        if not apply_changes(entry.index, changes):
            return False
        entry.version = changes.version
        self._events("index.catch_up", 1)
        return True

    def _add_own(self, key: Key, entry: Entry) -> bool:
        """Add the held-back rows of this process's writes if no other write came since
        the index's version (the store's version moved one step per held-back write);
        False to read the change log instead."""
        version = self._store.knowledge_state(*key).version
        if version != entry.version + len(entry.pending):
            return False
        ids = np.concatenate([rows[0] for rows in entry.pending])
        if ids.size:
            # new ids: each write ran under this workspace's lock, after the index's load
            try:
                entry.index.add(
                    ids,
                    np.concatenate([rows[1] for rows in entry.pending]),
                    np.concatenate([rows[2] for rows in entry.pending]),
                )
            except ValidationFailed:
                return False
        entry.version = version
        added = len(entry.pending)
        entry.drop_held()
        self._events("index.own_write", added)
        return True
